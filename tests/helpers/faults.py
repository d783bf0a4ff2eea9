"""Faults a write must survive, made on purpose rather than waited for. A kill at chosen points inside it, without
sleeping and hoping: an audit hook (`sys.addaudithook`) sees every change a Python process makes to files under a
folder (a file opened, a rename, a removal, a new folder) and SIGKILLs the process before the k-th. A child Python that
imports this module (its `sys.path` holding tests/) and calls `install()` records a write's steps with
`steps(fn, root)`, runs it in a forked child killed before step k with `killed_at(fn, root, k)`, or stops at a step
until told to go on (`pause_at`); `run_child` starts such a child in its own process group, killed whole on its
timeout. And a disk that fills up (`SmallDisk`)."""
import errno
import io
import os
import signal
import subprocess
import sys

__all__ = ['install', 'steps', 'killed_at', 'pause_at', 'run_child', 'SmallDisk']

_EVENTS = {'open', 'os.rename', 'os.remove', 'os.rmdir', 'os.mkdir', 'shutil.rmtree', 'os.link', 'os.symlink',
           'os.truncate'}
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_state = {'root': None, 'seen': None, 'at': None, 'n': 0}

def _under_root(p) -> bool:
    "Whether the path argument `p` is under the root (a name relative to a folder's descriptor: inside an rmtree)."
    if isinstance(p, int): return False
    p, root = os.fsdecode(p), _state['root']
    return not os.path.isabs(p) or p == root or os.path.abspath(p).startswith(root + os.sep)

def _hook(event, args):
    if _state['root'] is None or event not in _EVENTS or not args or not _under_root(args[0]): return
    writes = event == 'open' and (args[2] & _WRITES if args[1] is None else any(c in args[1] for c in 'wax+'))
    step = f"{event}{'(w)' if writes else ''} {os.fsdecode(args[0])}"
    if _state['seen'] is not None: _state['seen'].append(step)
    if _state['at'] is not None:
        if _state['n'] == _state['at']: os.kill(os.getpid(), signal.SIGKILL)
        _state['n'] += 1
    if _state.get('pause') and _state['pause'] in step:   # once: say so, and wait for a line on stdin
        _state['pause'] = None
        print('paused', flush=True)
        sys.stdin.readline()

def install():
    "Add the hook to this process (once: an audit hook cannot be removed; it does nothing until `steps`/`killed_at`)."
    if not _state.get('installed'):
        sys.addaudithook(_hook)
        _state['installed'] = True

def steps(fn, root) -> list:
    """What `fn()` does to the files under the folder `root`, in order: one string a step, the event (`open(w)`: a file
    opened to write) and its path."""
    _state.update(root=os.path.abspath(root), seen=[])
    try: fn()
    finally:
        seen = _state['seen']
        _state.update(root=None, seen=None)
    return seen

def killed_at(fn, root, k:int) -> bool:
    "Run `fn()` in a forked child SIGKILLed before its k-th step under `root` (see `steps`): whether it was killed."
    pid = os.fork()
    if pid == 0:   # the child: no return into the caller's code, whatever happens
        code = 0
        try:
            _state.update(root=os.path.abspath(root), at=k, n=0)
            fn()
        except BaseException: code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL

def pause_at(root, step:str):
    "Stop this process at its first step under `root` (see `steps`) whose text holds `step`, until stdin gives a line."
    _state.update(root=os.path.abspath(root), pause=step)

def run_child(args:list, timeout:float, **kwargs) -> subprocess.CompletedProcess:
    "`subprocess.run(args)` in a new session, whose every process (forked children too) is killed on the timeout."
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         **kwargs)
    try: out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f'{args[:3]} ran past {timeout} s; stderr: {err[-3000:]}') from None
    return subprocess.CompletedProcess(args, p.returncode, out, err)

class SmallDisk:
    """A disk that fills up under the folder `root` once `free` bytes are written there: `with SmallDisk(root, free,
    monkeypatch):` patches `open` and `io.open` (numpy's, pathlib's and the package's writes go through them) so that a
    write to a file opened under `root` raises ENOSPC, half done, as a full disk fails a write."""
    def __init__(self, root, free:int, monkeypatch):
        self.root, self.free, self.mp = os.path.abspath(root), int(free), monkeypatch
    def __enter__(self):
        import builtins
        self.mp.setattr(builtins, 'open', self._opener(builtins.open))
        self.mp.setattr(io, 'open', self._opener(io.open))
        return self
    def __exit__(self, *exc): self.mp.undo()

    def _opener(self, real):
        def opened(file, mode='r', *args, **kwargs):
            f = real(file, mode, *args, **kwargs)
            here = isinstance(file, (str, os.PathLike)) and os.path.abspath(file).startswith(self.root + os.sep)
            return _Filling(f, self) if here and any(c in mode for c in 'wax+') else f
        return opened

class _Filling:
    "A file on a `SmallDisk`: `write` takes from its free bytes."
    def __init__(self, f, disk): self._f,self._disk = f,disk
    def __getattr__(self, k): return getattr(self._f, k)
    def __enter__(self): return self
    def __exit__(self, *exc): self._f.close()
    def __iter__(self): return iter(self._f)
    def write(self, b):
        n = len(b) if isinstance(b, str) else memoryview(b).nbytes
        if n <= self._disk.free:
            self._disk.free -= n
            return self._f.write(b)
        fits, self._disk.free = self._disk.free, 0
        self._f.write(b[:fits] if isinstance(b, str) else memoryview(b).cast('B')[:fits])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._f.name)
