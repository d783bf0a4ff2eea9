"""How to install this package and its extras (it is not on the package index yet: from its git repository, as the
README's Install says), imports of optional dependencies that say which extra brings them, and pickles that say how
to install it where it is missing."""
from __future__ import annotations

import codecs
import copyreg
import functools
import importlib
import pydoc
from types import ModuleType

from . import __version__

__all__ = []

REPOSITORY = 'https://github.com/fastai-gpu-tabular/fastai_gpu_tabular'   # pyproject.toml's Repository (tested)

def install_command(extra:str|None=None) -> str:
    "The pip command that installs this package, with `extra`, from its git repository."
    return f'pip install "fastai_gpu_tabular{f"[{extra}]" if extra else ""} @ git+{REPOSITORY}"'

def import_extra(module:str, extra:str, what:str) -> ModuleType:
    "`import module`, or a ModuleNotFoundError saying that `what` needs it and how to install the `extra` bringing it"
    try: return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split('.')[0] != module.split('.')[0]: raise   # a dependency of it is missing
        raise ModuleNotFoundError(f"{what} needs {module}, which comes with this package's `{extra}` extra: "
                                  f"{install_command(extra)} (in a clone: pip install \".[{extra}]\")",
                                  name=e.name) from e

class _Call:
    "Pickled as the call `f(*args)`, which unpickling makes."
    def __init__(self, f, *args): self.f,self.args = f,args
    def __reduce__(self): return self.f, self.args

class _New:
    """`cls.__new__(cls, *args)`, pickled as a lookup of `cls` by `pydoc.locate` first: fastai's `load_learner` turns an
    ImportError into `UnboundLocalError: ... 'res'`; this raises, where the package is missing, a RuntimeError saying
    what to install, and where an import inside it fails, pydoc's `ErrorDuringImport` naming that import."""
    def __init__(self, cls): self.cls = cls
    def __call__(self, *args): return self.cls.__new__(self.cls, *args)   # copy.copy, copy.deepcopy
    def __reduce__(self):
        path = f'{self.cls.__module__}.{self.cls.__qualname__}'
        found = _Call(pydoc.locate, path)   # None where it cannot be imported
        err = RuntimeError(f"No module named {path.split('.')[0]!r} (or no {path} in it): this was pickled with "
                           f"fastai_gpu_tabular {__version__}; to load it, install it: {install_command()} "
                           "(offline, from a wheel of it: see its README's Kaggle section)")
        fail = functools.partial(codecs.strict_errors, err)   # strict_errors raises the exception it is given
        # unpickled: `fail` where the class was not found, else `partial(copyreg.__newobj__, cls)`;
        # then called with args
        return dict.get, ({None: fail}, found, _Call(functools.partial, copyreg.__newobj__, found))

def pickled_by_lookup(obj, reduced:tuple) -> tuple:
    """`obj`'s `__reduce_ex__(2)` (`reduced`), its class looked up by `_New`: an exported learner's objects of this
    package (the learner, its loaders) say, unpickled where the package is missing, what to install."""
    _, args, *rest = reduced
    return (_New(type(obj)), args[1:], *rest)
