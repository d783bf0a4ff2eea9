"""Packed rows on disk, as pack.py holds them in memory: `.npy` int32 files named `part.00000.npy` (`part_name`), one
a partition or block, in a folder whose `chunks.json` lists them with their row counts and the layout
(`PackedChunks`). A saved Tabular's rows files have their `.npy` header padded (`npy_header`) so that their rows' pages
line up with the loaded rows', which a load then maps instead of reading them (`load_rows`, on Linux); each file's size
and sha256 (`write_npy`, `file_digest`) are checked as it is read."""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import io
import json
import math
import mmap
import os
import re
import struct
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple
import numpy as np
import torch

from .pack import Layout

__all__ = ['PackedChunks', 'SavedFormatError']

# a rows file's header is as long as where its rows go in the loaded rows, modulo this: so a load maps its pages
PAGE = 4096

class SavedFormatError(ValueError):
    "A saved Tabular that cannot be read back: a missing, truncated or altered file, or an unknown format version."

def part_name(i:int, suffix:str='.npy') -> str:
    "The name of partition (or block) `i`'s rows file, `part.00000.npy`; with `suffix=''`, of a folder of its own."
    return f'part.{i:05d}{suffix}'

def is_part_name(name:str) -> bool:
    "Whether `name` is a rows file's name as `part_name` gives it."
    return re.fullmatch(r'part\.\d{5}\.npy', name) is not None

# --- the .npy format ------------------------------------------------------------------------------------------------
def npy_header(a:np.ndarray, at:int|None=None) -> bytes:
    """`a`'s `.npy` header (what `np.save` writes); with `at` (the byte where its rows go in the loaded rows), padded
    with spaces, as numpy pads it, to a length equal to `at` modulo `PAGE`, so that its rows' file pages line up."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, np.lib.format.header_data_from_array_1_0(a))
    b = head.getvalue()
    if at is None: return b
    n = len(b) + (at - len(b)) % PAGE
    return b[:8] + struct.pack('<H', n - 10) + b[10:-1] + b' ' * (n - len(b)) + b'\n'

def read_npy_header(f) -> tuple:
    "`(shape, fortran_order, dtype)` from the `.npy` header of the open file `f`, which is left where the values start."
    major,_ = np.lib.format.read_magic(f)
    return (np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0)(f)

def check_header(f, path:Path, shape:tuple|None, want:str='<i4') -> int:
    """Check the `.npy` header of the open file `f`, which `want`s values in `shape` (int32 rows; None: any length)
    and no more or fewer bytes than they take: the header's length."""
    try: got,fortran,dtype = read_npy_header(f)
    except ValueError as e: raise SavedFormatError(f"{path} is not a .npy file: {e}") from None
    want, shape = np.dtype(want), tuple(got) if shape is None and len(got) == 1 else shape
    if dtype != want or fortran or tuple(got) != shape:
        order = ' in Fortran order' if fortran else ''
        raise SavedFormatError(f"{path} holds {dtype} {tuple(got)} values{order}, not the {want} {shape} saved")
    n = f.tell()
    size = f.seek(0, io.SEEK_END)
    if size != n + math.prod(shape) * want.itemsize:
        raise SavedFormatError(f"{path} is {size:,} bytes, not the {n + math.prod(shape) * want.itemsize:,} its header "
                               "says: truncated or altered")
    return n

def write_npy(path:Path, a:np.ndarray, at:int|None=None) -> dict:
    "Write `a` as a `.npy` file (header as `npy_header`), hashing it as it goes: `{'bytes', 'sha256'}`."
    a = np.ascontiguousarray(a)
    head = npy_header(a, at)
    h = hashlib.sha256(head)
    body = memoryview(a.reshape(-1)).cast('B') if a.size else b''
    h.update(body)
    with open(path, 'wb') as f:
        f.write(head)
        f.write(body)
    return {'bytes': len(head) + len(body), 'sha256': h.hexdigest()}

def read_into(f, buf:memoryview, at:int) -> bool:
    "Bytes `at:` of the open file `f` into all of `buf`: whether it held that many."
    f.seek(at)
    got = 0
    while got < len(buf):
        k = f.readinto(buf[got:])
        if not k: return False
        got += k
    return True

# --- sizes and checksums --------------------------------------------------------------------------------------------
def file_digest(path) -> str:
    "The sha256 of the file at `path`, in hex."
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        while b := f.read(1 << 24): h.update(b)
    return h.hexdigest()

def file_entry(path) -> dict:
    "`{'bytes', 'sha256'}` of the file at `path`, as `write_npy` gives them."
    return {'bytes': Path(path).stat().st_size, 'sha256': file_digest(path)}

def check_size(path:Path, entry:dict):
    "The file at `path` is its own (no link), and as long as its `entry` says."
    # a link's target can be any file, and can change under a loaded Tabular's mapped rows: its own files only
    if path.is_symlink(): raise SavedFormatError(f"{path} is a symbolic link (to {os.readlink(path)}): a saved "
                                                 "Tabular's files must be its own; copy the files, not links to them")
    if not path.exists(): raise SavedFormatError(f"{path} is missing: the saved Tabular is incomplete")
    n = path.stat().st_size
    if n != entry['bytes']:
        raise SavedFormatError(f"{path} is {n:,} bytes, not the {entry['bytes']:,} it was saved with: "
                               f"{'truncated' if n < entry['bytes'] else 'altered'}")

def _bad_digest(path:Path) -> SavedFormatError:
    return SavedFormatError(f"{path} does not match the sha256 it was saved with: the file was altered or damaged")

def read_checked(path:Path, entry:dict, verify:bool) -> bytes:
    "The bytes of the file at `path`, its size checked against `entry` (and with `verify`, its sha256)."
    check_size(path, entry)
    b = path.read_bytes()
    if verify and hashlib.sha256(b).hexdigest() != entry['sha256']: raise _bad_digest(path)
    return b

def _check_digest(path:Path, entry:dict, h, buf):
    "The file's sha256 (`h` holding its header's) is the one saved."
    h.update(buf)
    if h.hexdigest() != entry['sha256']: raise _bad_digest(path)

# --- rows files mapped into one tensor ------------------------------------------------------------------------------
if sys.platform == 'linux':
    _LIBC = ctypes.CDLL(None, use_errno=True)
    _LIBC.mmap.restype = ctypes.c_void_p
    _LIBC.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
else: _LIBC = None
_MAP_FIXED = 0x10   # Linux's: mmap's module does not name it

def rows_memory(nbytes:int) -> mmap.mmap|None:
    "Private memory for the loaded rows, which `map_file` maps rows files into (on Linux), or None."
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE) if _LIBC is not None and nbytes else None

def map_file(mem:mmap.mmap, at:int, f, off:int, n:int) -> tuple[int, int]:
    """Map the whole pages of bytes `off:off+n` of the open file `f` over bytes `at:at+n` of `mem`, copy on write (so
    the rows are the page cache's pages, not a copy of them): `(lo, hi)`, the bytes of `mem` mapped (none: `lo==hi`)."""
    lo, hi = -(-at // PAGE) * PAGE, (at + n) // PAGE * PAGE
    if (off - at) % PAGE or hi <= lo: return at, at   # a file saved before headers were padded: read
    c = ctypes.c_char.from_buffer(mem)
    base = ctypes.addressof(c)
    del c   # the buffer export, or `mem` could never be unmapped
    prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | _MAP_FIXED
    if _LIBC.mmap(base + lo, hi - lo, prot, flags, f.fileno(), off + lo - at) == base + lo: return lo, hi
    # a file system that cannot map it: fresh memory there again (a failed MAP_FIXED may have unmapped it), and read
    if _LIBC.mmap(base + lo, hi - lo, prot, flags | mmap.MAP_ANONYMOUS, -1, 0) != base + lo:
        raise OSError(ctypes.get_errno(), f"cannot map memory for the rows of {f.name}")
    return at, at

def load_rows(path:Path, files:list, entries:dict, width:int, verify:bool, pb) -> torch.Tensor:
    """The rows of `files` (`[(name, rows)]` in row order) in one int32 tensor, each file's header and size checked
    and (with `verify`) its sha256, the first that differs named, in row order. On Linux, rows files saved with padded
    headers are mapped (copy on write), not read: the rows are the page cache's pages, so loading copies nothing and
    allocates no fresh memory; hashing them in threads reads them once. A new `save` into the folder writes new files
    and leaves the loaded rows as they were; altering the files in place would show through. `pb` counts the rows."""
    total = sum(n for _,n in files)
    mem = rows_memory(total * width * 4)
    rows = torch.empty((total, width), dtype=torch.int32) if mem is None else \
           torch.frombuffer(mem, dtype=torch.int32).view(total, width)
    buf = memoryview(rows.numpy().reshape(-1)).cast('B') if total * width else memoryview(b'')
    at, checks = 0, []
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:   # hashlib lets other threads run meanwhile
        for name,n in files:
            f, entry, nb = path/name, entries[name], n * width * 4
            check_size(f, entry)
            with open(f, 'rb', buffering=0) as fh:
                head = check_header(fh, f, (n, width))
                lo, hi = map_file(mem, at, fh, head, nb) if mem is not None else (at, at)
                for a,b in ((at, lo), (hi, at + nb)):
                    if b > a and not read_into(fh, buf[a:b], head + a - at):
                        raise SavedFormatError(f"{f} ends before its rows do: truncated")
                if verify:
                    fh.seek(0)
                    checks.append(pool.submit(_check_digest, f, entry, hashlib.sha256(fh.read(head)), buf[at:at + nb]))
            at += nb
            pb.update(n)
        for c in checks: c.result()
    return rows

# --- a folder of rows files -----------------------------------------------------------------------------------------
def write_blocks(path:Path, blocks, layout:Layout, width:int, at:int=0, pb=None) -> tuple[list, dict]:
    """`blocks` (int32 arrays, made one at a time) as the rows files of the new `PackedChunks` folder `path`, one a
    block, their rows starting at row `at` of the loaded rows (see `npy_header`): `([[name, rows]], {name: entry})`,
    the entries (`write_npy`'s) in the order written, `chunks.json`'s last. `pb` counts the rows."""
    path.mkdir()
    res, entries = [], {}
    for i,block in enumerate(blocks):
        f = part_name(i)
        entries[f] = write_npy(path/f, block, at * width * 4)
        res.append([f, len(block)])
        at += len(block)
        if pb is not None: pb.update(len(block))
    PackedChunks.write(path, res, layout, width)
    entries['chunks.json'] = file_entry(path/'chunks.json')
    return res, entries

class RowBlocks(NamedTuple):
    "A processed Tabular's packed rows on the host, as `save` writes them: each split's in blocks (NumPy int32 arrays)"
    layout: Layout
    width: int
    index: Any  # the rows' labels (pandas or cuDF)
    train: Any  # an iterable of blocks, read or made as they are taken
    valid: Any

class PackedChunks:
    "Packed rows in `.npy` files of a folder (`chunks.json` lists them with their row counts and the layout)"
    def __init__(self, path):
        self.path = Path(path)
        try: meta = json.loads((self.path/'chunks.json').read_text())
        except FileNotFoundError:   # written last: a write cut short, or still running, has none
            raise FileNotFoundError(f"{self.path/'chunks.json'} is missing: {self.path} holds no finished chunks "
                                    "(their write was cut short, or is running)") from None
        self.files, self.lens = [f for f,_ in meta['files']], np.array([n for _,n in meta['files']], dtype=np.int64)
        self.width = meta['width']
        self.layout = Layout.from_json(meta['layout'])
        self.starts = np.concatenate([[0], np.cumsum(self.lens)]).astype(np.int64)
        self._offsets = {}

    @classmethod
    def write(cls, path, files:list, layout:tuple, width:int) -> PackedChunks:
        "Record `files` (`(name, rows)` in row order, written to `path` by `write_rows`) and their layout."
        path = Path(path)
        meta = dict(files=[[f, int(n)] for f,n in files if n], width=int(width), layout=Layout(layout).to_json())
        (path/'.chunks.json.tmp').write_text(json.dumps(meta))
        os.replace(path/'.chunks.json.tmp', path/'chunks.json')   # whole or not there, whenever the writer is killed
        return cls(path)

    @staticmethod
    def write_rows(path, name:str, rows:torch.Tensor) -> int:
        "Write packed `rows` to `path/name` (a `.npy` file); their count."
        if len(rows): np.save(Path(path)/name, rows.cpu().numpy())
        return len(rows)

    def __len__(self): return int(self.starts[-1])
    @property
    def nbytes(self) -> int: return len(self) * self.width * 4
    def __repr__(self): return f'{type(self).__name__}({str(self.path)!r}: {len(self):,} rows, {len(self.files)} files)'

    def _offset(self, i):
        "Where file `i`'s data starts (after its `.npy` header)."
        if i not in self._offsets:
            with open(self.path/self.files[i], 'rb') as f:
                read_npy_header(f)
                self._offsets[i] = f.tell()
        return self._offsets[i]

    def read(self, i:int, a:int, b:int, out:torch.Tensor|None=None, files:dict|None=None) -> torch.Tensor:
        """Rows `a:b` of file `i` into `out` (a CPU int32 tensor, pinned or not) or a new tensor: one contiguous read
        into the buffer, no memory map (whose pages would count against the process's memory). `files`: the files
        opened so far, `{i: file}`, kept open for the next reads (opening one costs as much as reading 100 rows;
        whoever passes it closes them)."""
        out = torch.empty((b - a, self.width), dtype=torch.int32) if out is None else out[:b - a]
        f = None if files is None else files.get(i)
        if f is None:
            f = open(self.path/self.files[i], 'rb', buffering=0)
            if files is not None: files[i] = f
        try:
            if not read_into(f, memoryview(out.numpy()).cast('B'), self._offset(i) + a * self.width * 4):
                raise EOFError(f'{self.path/self.files[i]} ends before row {b}')
        finally:
            if files is None: f.close()
        return out

    @contextlib.contextmanager
    def open_files(self):
        "A dict for `read(files=...)`: the files it opens are closed on leaving the `with`."
        files = {}
        try: yield files
        finally:
            for f in files.values(): f.close()

    def take(self, idx) -> torch.Tensor:
        "The rows at global positions `idx` (few: for a sample batch), on the host."
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        out = torch.empty((len(idx), self.width), dtype=torch.int32)
        f = np.searchsorted(self.starts, idx, side='right') - 1
        with self.open_files() as files:
            for j,(i,r) in enumerate(zip(f, idx - self.starts[f])):
                self.read(int(i), int(r), int(r) + 1, out[j:j+1], files)
        return out

    def load(self, device=None) -> torch.Tensor:
        "All rows in one tensor on `device` (the resident path, for rows that fit)."
        out = torch.empty((len(self), self.width), dtype=torch.int32)
        for i,(a,b) in enumerate(zip(self.starts[:-1], self.starts[1:])): self.read(i, 0, int(b - a), out[a:b])
        return out.to(device) if device is not None else out

    def packed_rows(self, device=None) -> tuple[torch.Tensor, Layout]:
        "`(rows, layout)`, all loaded, as `TabularGPU.packed_rows` gives them: so a `BatchDataLoader` serves them"
        device = torch.device(device or 'cpu')
        if getattr(self, '_loaded', (None,))[0] != device: self._loaded = (device, self.load(device))
        return self._loaded[1], self.layout

    def pieces(self, piece_rows:int) -> list:
        "Every file cut into contiguous `(file, start, stop)` pieces of at most `piece_rows` rows, in row order."
        return [(i, a, min(a + piece_rows, int(n))) for i,n in enumerate(self.lens)
                for a in range(0, int(n), piece_rows)]

    def blocks(self, rows:int):
        "The rows in blocks of at most `rows` (NumPy arrays), read one at a time."
        for i,a,b in self.pieces(rows): yield self.read(i, a, b).numpy()
