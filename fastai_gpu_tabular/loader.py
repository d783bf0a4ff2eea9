"`BatchDataLoader`: batches gathered from tensors packed once on the device; one permutation an epoch, one gather a batch."
from __future__ import annotations

import codecs, copyreg, functools
import numpy as np, pandas as pd, torch
from fastcore.foundation import L
from fastcore.meta import delegates
from fastai.data.transforms import IndexSplitter, RandomSplitter
from fastai.tabular.core import ReadTabBatch, TabDataLoader, Tabular
from fastai.tabular.data import TabularDataLoaders
from fastai.torch_core import to_np

from . import __version__
from .backend import backend_of, is_dask, require_cudf

__all__ = ['BatchDataLoader', 'BatchDataLoaders', 'ReadTabBatchGPU', 'unpack_rows']

def unpack_rows(rows, layout) -> tuple:
    "Views `(cats, conts[, ys])` of packed int32 `rows`: each `(start, stop, dtype)` of `layout`, reinterpreted as `dtype`."
    return tuple(rows[:, a:b] if dt == torch.int32 else rows[:, a:b].view(dt) for a,b,dt in layout)

def _gather(rows, layout, idx):
    "One gather of packed `rows` (a view when `idx` is a slice), split into `(cats, conts[, ys])` views."
    return unpack_rows(rows[idx] if isinstance(idx, slice) else rows.index_select(0, idx), layout)

class ReadTabBatchGPU(ReadTabBatch):
    "fastai's `ReadTabBatch` for batches that are already tensors: encodes passes them through"
    def encodes(self, b:list): return b

    def decodes(self, o):
        "A batch back to a (host) Tabular for show/predict: fastai's decodes, with multi-hot slots as lists of values."
        arrs = [a[:, None] if a.ndim == 1 else a for a in to_np(o)]
        to,cols,j = self.to,{},0
        bags = getattr(to, 'bag_widths', {})
        for n,w in zip(to.cat_names, _cat_widths(to)):
            block = arrs[0][:, j:j+w]
            if n in bags:
                items = to.classes[n].items
                cols[n] = [[items[c] for c in row if c >= 0] for row in block]
            else: cols[n] = block[:, 0]
            j += w
        rest = [a for a in arrs[1:] if a.size]
        vals = np.concatenate(rest, axis=1) if rest else np.zeros((len(arrs[0]), 0))
        for name,k in zip(list(to.cont_names) + list(to.y_names), range(vals.shape[1])): cols[name] = vals[:, k]
        return to.new(pd.DataFrame(cols))

def _cat_widths(to) -> list:
    "Codes each cat column takes in a packed row: `TabularGPU`'s (a multi-hot column, its bag width), else one each."
    return to.cat_widths() if hasattr(to, 'cat_widths') else [1] * len(to.cat_names)

@delegates()
class BatchDataLoader(TabDataLoader):
    "A `TabDataLoader` over a `TabularGPU`: no per-row Python, no collation, no workers; the data stays on `device`"
    def __init__(self, dataset, bs=64, shuffle=False, after_batch=None, num_workers=0,
                 wgts=None, # per-row sampling weights: shuffled epochs then draw `n` rows with replacement (fastai's TabWeightedDL)
                 **kwargs):
        if bs is None or int(bs) < 1: raise ValueError(f"bs must be a positive integer, got {bs!r}")
        if after_batch is None: after_batch = [ReadTabBatchGPU(dataset)]
        self.wgts = None if wgts is None else torch.as_tensor(wgts, dtype=torch.float)
        self._cdf = None   # the weights' running sum, on the data's device
        # worker processes would only copy the packed tensors: everything here is one gather on the device
        super().__init__(dataset, bs=int(bs), shuffle=shuffle, after_batch=after_batch, num_workers=0, **kwargs)
        if self.wgts is not None and len(self.wgts) != self.n:
            raise ValueError(f"wgts has {len(self.wgts)} entries for {self.n} rows")
        if self.drop_last and 0 < self.n < self.bs:
            raise ValueError(f"bs={self.bs} is more than the {self.n} rows and drop_last=True, so this loader would yield "
                             "no batch: lower bs (or val_bs), or pass drop_last=False")
        self.to(self.device)

    def new(self, dataset=None, cls=None, **kwargs):
        "fastai's `new`; the sampling weights stay while the rows they weigh do (`new(wgts=None)` drops them)"
        same = (dataset is None or dataset is self.dataset) and issubclass(cls or type(self), BatchDataLoader)
        if same and self.wgts is not None: kwargs.setdefault('wgts', self.wgts)
        return super().new(dataset, cls, **kwargs)

    @property
    def rows(self) -> tuple:
        "The dataset's packed `(rows, layout)` on this loader's device (moved there once, then cached by the dataset)."
        return self.dataset.packed_rows(self.device)

    def to(self, device):
        "Move to `device` now, so a bad frame fails here rather than at the first batch."
        self.device = device
        if not self.n: return self
        dev = self.rows[0].device
        # made here, once: an upload of the weights each epoch would be a device sync
        if self.wgts is not None: self._cdf = self.wgts.to(dev, torch.float64).cumsum(0)
        return self

    def _overridden(self, nm):
        "Whether `nm` was replaced through `new(nm=...)`/kwargs or a subclass, which we must then honour."
        return nm in self.__dict__ or getattr(type(self), nm) is not getattr(BatchDataLoader, nm)

    def get_idxs(self):
        "Row order of an epoch as a CPU LongTensor (what `get_preds(reorder=True)` reads); training draws it on the device."
        order = self._own_order()
        return torch.arange(self.n) if order is None else order.cpu()

    def shuffle_fn(self, idxs): return idxs[torch.randperm(len(idxs), device=idxs.device)]

    def _order(self):
        "This epoch's row order on the data's device, or None for `range(n)` (batches are then slices: no copy)."
        if not self._overridden('get_idxs'): return self._own_order()
        return torch.as_tensor(self.get_idxs(), dtype=torch.long).to(self.rows[0].device)

    def _own_order(self):
        if not self.shuffle: return None
        dev = self.rows[0].device
        if self.wgts is not None:   # n draws with replacement by weight: inverse-CDF sampling, no row limit, no sync
            u = torch.rand(self.n, device=dev, dtype=torch.float64) * self._cdf[-1]
            return torch.searchsorted(self._cdf, u, right=True).clamp_(max=self.n - 1)
        if self._overridden('shuffle_fn'): return self.shuffle_fn(torch.arange(self.n, device=dev))
        return torch.randperm(self.n, device=dev)

    def sample(self):
        "Each batch's rows: a slice when in order, else a chunk of this epoch's permutation."
        order = self._order()
        n = self.n if order is None else len(order)
        end = n - n % self.bs if self.drop_last else n
        for i in range(0, end, self.bs): yield slice(i, min(i + self.bs, n)) if order is None else order[i:i + self.bs]

    def create_batch(self, idx): return _gather(*self.rows, idx)

    def create_batches(self, samps):
        rows,layout = self.rows   # looked up once an epoch, not once a batch
        for idx in samps: yield _gather(rows, layout, idx)
    def do_item(self, s): return 0 if s is None else s
    def do_batch(self, b): return self.create_batch(torch.as_tensor(b, dtype=torch.long, device=self.rows[0].device))

    def __iter__(self):
        self.randomize()
        self.before_iter()
        for b in self.create_batches(self.sample()): yield self.after_batch(b)
        self.after_iter()

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
        import pydoc
        path = f'{self.cls.__module__}.{self.cls.__qualname__}'
        found = _Call(pydoc.locate, path)   # None where it cannot be imported
        err = RuntimeError(f"No module named {path.split('.')[0]!r} (or no {path} in it): this was pickled with "
                           f"fastai_gpu_tabular {__version__}; `pip install fastai_gpu_tabular` to load it")
        fail = functools.partial(codecs.strict_errors, err)   # strict_errors raises the exception it is given
        return dict.get, ({None: fail}, found, _Call(functools.partial, copyreg.__newobj__, found))

class BatchDataLoaders(TabularDataLoaders):
    "`TabularDataLoaders` of `BatchDataLoader`s; `test_dl` takes a cuDF or pandas frame"
    _tabular_type = None   # `TabularGPU`, set by `core` (the loader knows nothing of frames)

    def __reduce_ex__(self, protocol):
        # an exported learner's first object of this package: unpickled, it says what is missing, if anything is
        _, args, *rest = super().__reduce_ex__(2)
        return (_New(type(self)), args[1:], *rest)

    @classmethod
    @delegates(Tabular.dataloaders, but=["dl_type", "dl_kwargs"])
    def from_df(cls, df, path='.', procs=None, cat_names=None, cont_names=None, y_names=None, y_block=None,
                valid_idx=None, backend=None, **kwargs):
        "Create `BatchDataLoaders` from a cuDF or pandas `df`, as `TabularDataLoaders.from_df`"
        backend_of(df)   # a TypeError that says which types are taken, before `df.columns` is read
        if is_dask(df): raise TypeError("from_df splits by row positions, which a Dask frame cannot address: use "
                                        "TabularGPU(ddf, ..., splits='is_valid').dataloaders(...) with a boolean column")
        cat_names = L(cat_names)
        if cont_names is None: cont_names = [c for c in df.columns if c not in set(cat_names) | set(L(y_names))]
        splits = RandomSplitter()(df) if valid_idx is None else IndexSplitter(valid_idx)(df)
        to = cls._tabular_type(df, procs, cat_names, cont_names, y_names, splits=splits, y_block=y_block, backend=backend)
        return to.dataloaders(path=path, **kwargs)

    @classmethod
    def from_csv(cls, csv, skipinitialspace=True, backend=None, **kwargs):
        "Create `BatchDataLoaders` from `csv`, read by cuDF when `backend='cudf'`, else by pandas"
        read = require_cudf().read_csv if backend == 'cudf' else pd.read_csv
        df = read(csv, skipinitialspace=skipinitialspace)
        return cls.from_df(df, backend=backend, **kwargs)
