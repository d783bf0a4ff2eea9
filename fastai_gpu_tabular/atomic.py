"""Writes a user keeps, all or nothing: a saved Tabular's folder, an ONNX file, a Triton model's folder. `replacing`
makes the new one beside its target (a hidden sibling on the same file system, `.<name>.fgt-tmp-*`), makes its files
durable (fsync), then swaps it in by a rename, so that the target holds the earlier version or the new one at every
instant, never a part of either. A write cut short (killed, a full disk, an error) leaves at most that sibling, which no
reader opens and the next write beside the target removes; a writer holds a lock on its sibling while it lives
(`flock`, which goes with the process), so that another's clean-up never takes it for debris."""
from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import os
import secrets
import shutil
import sys
from pathlib import Path

try:
    import fcntl
except ImportError: fcntl = None   # Windows: no locks, so nothing is ever taken for another write's debris

__all__ = []

def temp_prefix(target:Path) -> str:
    "The name of a temporary sibling of `target` starts so: hidden, and named after what it will replace."
    return f'.{target.name}.fgt-tmp-'

def fsync_path(path):
    "Make the file or folder at `path` durable: its bytes, or its entries (a new or renamed file's name)."
    if os.name == 'nt' and os.path.isdir(path): return   # Windows opens no folder to flush; NTFS journals its entries
    fd = os.open(path, os.O_RDONLY)
    try: os.fsync(fd)
    finally: os.close(fd)

def fsync_tree(path):
    "`fsync_path` every file and folder under `path` (itself last): all of it durable before anything points at it."
    for d,_,files in os.walk(path, topdown=False):
        for f in files: fsync_path(os.path.join(d, f))
        fsync_path(d)

def lock_path(path, wait:bool=True) -> int|None:
    """A descriptor of the file or folder `path` holding an exclusive `flock` on it (released by `os.close`, or when the
    process dies), or None where there are no such locks (Windows; some network file systems refuse them) or `path`
    is gone. Not `wait`ing, BlockingIOError if another holds it."""
    if fcntl is None: return None
    try: fd = os.open(path, os.O_RDONLY)
    except OSError: return None
    try: fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        raise
    except OSError:
        os.close(fd)
        return None
    return fd

def remove(path):
    "Remove the file or folder at `path` if there, what can be: what cannot stays as debris for the next write."
    if os.path.isdir(path) and not os.path.islink(path): shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError): os.unlink(path)

def held(path) -> bool:
    """Whether a live writer holds the file or folder `path` (`lock_path`): True too where locks cannot tell, so that
    nothing live is taken for debris."""
    try: fd = lock_path(path, wait=False)
    except BlockingIOError: return True
    if fd is None: return os.path.lexists(path)
    os.close(fd)
    return False

def clear_unheld(folder:Path, pattern:str):
    "Remove the entries of `folder` matching the glob `pattern` that no live writer holds: what writes cut short left."
    for p in Path(folder).glob(pattern):
        if not held(p): remove(p)

def clear_debris(target:Path):
    "Remove the temporary siblings of `target` (`temp_prefix`) that writes of it cut short left."
    clear_unheld(target.parent, glob.escape(temp_prefix(target)) + '*')

# --- renames ---------------------------------------------------------------------------------------------------------
_RENAME_EXCHANGE, _AT_FDCWD = 2, -100   # Linux's <linux/fs.h> and <fcntl.h>
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == 'linux' else None
_RENAMEAT2 = getattr(_LIBC, 'renameat2', None)   # glibc 2.28 and later

def exchange(a, b) -> bool:
    """Swap the entries at paths `a` and `b` (both there, on one file system) in one step: Linux's
    `renameat2(RENAME_EXCHANGE)`. False where the system or the file system cannot (then nothing moved)."""
    if _RENAMEAT2 is None: return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0: return True
    e = ctypes.get_errno()
    if e in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP): return False
    raise OSError(e, os.strerror(e), str(a), None, str(b))

def swap_in(new:Path, target:Path) -> Path|None:
    """Put the folder `new` at `target` by renames, so that `target` is the earlier folder or the new one at every
    instant; returns where the earlier one now is (for the caller to remove), or None if there was none. Where
    folders cannot be exchanged in one step (not Linux, or a file system without RENAME_EXCHANGE), two renames:
    between them, `target` is missing and the new folder complete at `new`."""
    if not os.path.lexists(target):
        os.rename(new, target)   # onto nothing: one step
        return None
    if exchange(new, target): return new
    old = target.parent/(temp_prefix(target) + secrets.token_hex(4))   # the earlier folder's name meanwhile
    os.rename(target, old)
    try: os.rename(new, target)
    except BaseException:
        os.rename(old, target)
        raise
    return old

@contextlib.contextmanager
def replacing(target, folder:bool=True):
    """Write the new `target` (a folder, or a file) at the path this yields, beside it; on leaving the `with`, make it
    durable (fsync) and swap it in (`swap_in`; a file by `os.replace`), then remove the earlier one. On an exception
    (or a kill) `target` is as it was: the new one is removed, or left as debris for the next write to remove (an
    OSError, a full disk's, says so in a note). A `target` that is a symbolic link is replaced where it points, the
    link kept."""
    target = Path(target)
    if target.is_symlink(): target = Path(os.path.realpath(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    clear_debris(target)
    tmp, fd = _new_temp(target, folder)
    old, swapped = None, False
    try:
        yield tmp
        fsync_tree(tmp) if folder else fsync_path(tmp)
        if folder: old = swap_in(tmp, target)
        else: os.replace(tmp, target)
        swapped = True
        fsync_path(target.parent)
    except BaseException as e:
        remove(tmp)   # the new one, or after the swap the earlier one
        if not swapped and isinstance(e, OSError): e.add_note(f"{target} is as it was: this write left nothing there")
        raise
    finally:
        if fd is not None: os.close(fd)
    if old is not None: remove(old)

def _new_temp(target:Path, folder:bool) -> tuple[Path, int|None]:
    """A new temporary sibling of `target` (a folder, or a file), with the permissions a plain `mkdir` or `open` gives
    (tempfile's would be the owner's alone, and stay on the target), and the lock its writer holds on it."""
    for _ in range(100):
        tmp = target.parent/(temp_prefix(target) + secrets.token_hex(4))
        try:
            if folder: os.mkdir(tmp)
            else: os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError: continue
        fd = lock_path(tmp)   # waits for a clean-up holding it, if one took it first: then it is gone, and we go on
        try: mine = os.path.samestat(os.fstat(fd), os.stat(tmp)) if fd is not None else tmp.exists()
        except OSError: mine = False
        if mine: return tmp, fd
        if fd is not None: os.close(fd)
    raise FileExistsError(f"cannot make a temporary sibling of {target}: its names are all taken")

def carry(src:Path, dst:Path, skip:set):
    """Hard-link into the folder `dst` everything in the folder `src` but the names in `skip` (what a write makes
    anew), folders as folders of links; copies where the file system has no hard links. Nothing of `src` moves."""
    for p in src.iterdir():
        if p.name in skip: continue
        if p.is_dir() and not p.is_symlink(): shutil.copytree(p, dst/p.name, symlinks=True, copy_function=_link)
        elif p.is_symlink(): os.symlink(os.readlink(p), dst/p.name)
        else: _link(p, dst/p.name)

def _link(src, dst):
    try: os.link(src, dst)
    except OSError: shutil.copy2(src, dst)
