"""Kill a process at chosen points inside a write, without sleeping and hoping: an audit hook (`sys.addaudithook`)
sees every change a Python process makes to files under a folder (a file opened, a rename, a removal, a new folder)
and SIGKILLs the process before the k-th. A child Python that imports this module (its `sys.path` holding tests/) and
calls `install()` records a write's steps with `steps(fn, root)` and runs it in a forked child killed before step k with
`killed_at(fn, root, k)`; `run_child` starts such a child in its own process group, killed whole on its timeout."""
import os
import signal
import subprocess
import sys

__all__ = ['install', 'steps', 'killed_at', 'run_child']

_EVENTS = {'open', 'os.rename', 'os.remove', 'os.rmdir', 'os.mkdir', 'shutil.rmtree', 'os.link', 'os.symlink',
           'os.truncate'}
_state = {'root': None, 'seen': None, 'at': None, 'n': 0}

def _under_root(p) -> bool:
    "Whether the path argument `p` is under the root (a name relative to a folder's descriptor: inside an rmtree)."
    if isinstance(p, int): return False
    p, root = os.fsdecode(p), _state['root']
    return not os.path.isabs(p) or p == root or os.path.abspath(p).startswith(root + os.sep)

def _hook(event, args):
    if _state['root'] is None or event not in _EVENTS or not args or not _under_root(args[0]): return
    if _state['seen'] is not None: _state['seen'].append(f'{event} {os.fsdecode(args[0])}')
    if _state['at'] is not None:
        if _state['n'] == _state['at']: os.kill(os.getpid(), signal.SIGKILL)
        _state['n'] += 1

def install():
    "Add the hook to this process (once: an audit hook cannot be removed; it does nothing until `steps`/`killed_at`)."
    if not _state.get('installed'):
        sys.addaudithook(_hook)
        _state['installed'] = True

def steps(fn, root) -> list:
    "What `fn()` does to the files under the folder `root`, in order: one string a step (the event and its path)."
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
