"""Large objects that many Dask tasks take (the cache's reader with the cat columns' values, the procs with their
vocabularies), as they reach other processes (a cluster's workers, Dask's process pool): pickled once, to a file in a
folder every worker sees, and read once in each process that runs a task with it. A task's pickle holds a reference
to that file. Passed as Dask data instead (`dask.delayed(obj)`), the object goes through the scheduler and from worker
to worker, pickled at each step, and each copy is a new object to the caches keyed by it (ops/procs.py's lookup tables).
Dask's local schedulers (threads, sync) pickle nothing: they hand the object itself over, and no file is written."""
from __future__ import annotations

import copyreg
import os
import pickle
import threading
import uuid
import weakref
from pathlib import Path

from ..ops.procs import LazyCategoryMap

__all__ = []

class Shipped:
    """`obj` for tasks in any process (they read `.obj`), pickled as the file `folder`/ship-*.pkl, written once. Objects
    it holds that are shipped too are written as references to their own files, so they stay one object in each
    process (a `Pipeline` and its procs)."""
    def __init__(self, obj, folder):
        self._obj, self.path, self._lock = obj, Path(folder)/f'ship-{uuid.uuid4().hex}.pkl', threading.Lock()
        self._written = False
        _SHIPPED[id(obj)] = self

    @property
    def obj(self):
        with self._lock:   # read once, by the first of the process's tasks that needs it
            if not hasattr(self, '_obj'):
                with open(self.path, 'rb') as f: self._obj = pickle.load(f)
        return self._obj

    def __dask_tokenize__(self): return self.path.name   # its file's name is unique to it: no need to hash `obj`

    def __reduce__(self):
        with self._lock:   # a cluster's client may pickle tasks from several threads
            if not getattr(self, '_written', True):   # where it was made (a scheduler passing it on has no file)
                tmp = self.path.with_suffix('.tmp')
                with open(tmp, 'wb') as f: _Pickler(f, self).dump(self._obj)
                tmp.replace(self.path)   # whole or not at all, for a reader in another process
                self._written = True
        return _arrived, (str(self.path),)

_SHIPPED = weakref.WeakValueDictionary()   # id(obj) -> its Shipped, while that lives (and so keeps `obj` alive)
_ARRIVED, _ARRIVED_LOCK = {}, threading.Lock()   # path -> a Shipped that arrived in this process

def _arrived(path:str) -> Shipped:
    "A pickled `Shipped` in another process: the same object for every task there; its file is read when first used."
    with _ARRIVED_LOCK:
        if path not in _ARRIVED:
            for p in [p for p in _ARRIVED if not os.path.exists(p)]: del _ARRIVED[p]   # their cache is gone: so is use
            res = _ARRIVED[path] = Shipped.__new__(Shipped)
            res.path, res._lock = Path(path), threading.Lock()
        return _ARRIVED[path]

def _lazy_map(m):
    "A `LazyCategoryMap` as itself, without the `o2i` it pickles for export: tasks look values up in an Index."
    return LazyCategoryMap, (list(m.items), m.add_na)

def _shipped_obj(path:str): return _arrived(path).obj

class _Pickler(pickle.Pickler):
    """Pickles the object of `Shipped` `top`; what it holds that is shipped to the same folder too, as a reference to
    that one's file (found by type first: a lookup in C, not a call for every object)."""
    def __init__(self, f, top:Shipped):
        super().__init__(f, pickle.HIGHEST_PROTOCOL)
        self.others = {i: s for i,s in _SHIPPED.items() if s is not top and s.path.parent == top.path.parent}
        self.dispatch_table = {**copyreg.dispatch_table, LazyCategoryMap: _lazy_map,
                               **{type(s._obj): self._reference for s in self.others.values()}}
    def _reference(self, obj):
        s = self.others.get(id(obj))
        return obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL) if s is None else (_shipped_obj, s.__reduce__()[1])

def ship(obj, to) -> Shipped:
    """`obj` for the tasks of Dask-backed Tabular `to`, its file (if it needs one) in the cache of `to`'s scan: one
    `Shipped` an object a cache, so one file, written as the object is when a task first goes to another process (a
    proc's state is final before its encodes run)."""
    folder = to.scan.cache.cache.path
    s = _SHIPPED.get(id(obj))
    return s if s is not None and s.path.parent == folder else Shipped(obj, folder)

def unshipped(x):
    "The object `x` is, or ships (`Shipped`)."
    return x.obj if isinstance(x, Shipped) else x
