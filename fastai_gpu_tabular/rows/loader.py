"""`BatchDataLoader`: batches gathered from tensors packed once on the device; one permutation an epoch, one gather a
batch."""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from fastai.tabular.core import ReadTabBatch, TabDataLoader
from fastai.torch_core import to_np
from fastcore.meta import delegates

from .pack import cat_spans, cat_widths, gather_rows

__all__ = ['batch_size', 'BatchDataLoader']

def batch_size(n_train:int, most:int=16384, steps:int=50) -> int:
    """A batch size for `n_train` training rows: the largest power of two that still gives `steps` steps an epoch, at
    most `most`. Large batches pay off when an epoch is hundreds of steps; a small frame needs small batches to
    learn."""
    return int(min(most, max(2 ** int(np.log2(max(n_train // steps, 1))), 1)))

class ReadTabBatchGPU(ReadTabBatch):
    "fastai's `ReadTabBatch` for batches that are already tensors: encodes passes them through"
    def encodes(self, b:list): return b

    def decodes(self, o):
        "A batch back to a (host) Tabular for show/predict: fastai's decodes, with multi-hot slots as lists of values."
        arrs = [a[:, None] if a.ndim == 1 else a for a in to_np(o)]
        to,cols = self.to,{}
        bags = getattr(to, 'bag_widths', {})
        for n,(a,b) in zip(to.cat_names, cat_spans(cat_widths(to))):
            block = arrs[0][:, a:b]
            if n in bags:
                items = to.classes[n].items
                cols[n] = [[items[c] for c in row if c >= 0] for row in block]
            else: cols[n] = block[:, 0]
        rest = [a for a in arrs[1:] if a.size]
        vals = np.concatenate(rest, axis=1) if rest else np.zeros((len(arrs[0]), 0))
        for name,k in zip(list(to.cont_names) + list(to.y_names), range(vals.shape[1])): cols[name] = vals[:, k]
        return to.new(pd.DataFrame(cols))

@delegates()
class BatchDataLoader(TabDataLoader):
    "A `TabDataLoader` over a `TabularGPU`: no per-row Python, no collation, no workers; the data stays on `device`"
    cat_dtype = torch.int32   # what a loader pickled before `cat_dtype` (an exported learner) served: it still does
    def __init__(self, dataset, bs:int=64, shuffle:bool=False, after_batch=None, num_workers:int=0,
                 # per-row sampling weights: shuffled epochs then draw `n` rows with replacement
                 # (fastai's TabWeightedDL)
                 wgts=None,
                 # the batches' cat codes: int64 as fastai's (default, for a Tabular), or int32 as packed (no copy;
                 # the default for bare packed rows, `PackedChunks`)
                 cat_dtype:torch.dtype|None=None,
                 **kwargs):
        if bs is None or int(bs) < 1: raise ValueError(f"bs must be a positive integer, got {bs!r}")
        if cat_dtype is None: cat_dtype = torch.int64 if hasattr(dataset, 'cat_names') else torch.int32
        if cat_dtype not in (torch.int64, torch.int32):
            raise ValueError(f"cat_dtype must be torch.int64 (fastai's) or torch.int32 (as packed), got {cat_dtype}")
        self.cat_dtype = cat_dtype
        if after_batch is None: after_batch = [ReadTabBatchGPU(dataset)]
        self.wgts = None if wgts is None else torch.as_tensor(wgts, dtype=torch.float)
        self._cdf = None   # the weights' running sum, on the data's device
        # worker processes would only copy the packed tensors: everything here is one gather on the device
        super().__init__(dataset, bs=int(bs), shuffle=shuffle, after_batch=after_batch, num_workers=0, **kwargs)
        if self.wgts is not None and len(self.wgts) != self.n:
            raise ValueError(f"wgts has {len(self.wgts)} entries for {self.n} rows")
        if self.drop_last and 0 < self.n < self.bs:
            raise ValueError(f"bs={self.bs} is more than the {self.n} rows and drop_last=True, so this loader would "
                             "yield no batch: lower bs (or val_bs), or pass drop_last=False")
        self.to(self.device)

    def new(self, dataset=None, cls=None, **kwargs):
        "fastai's `new`; the sampling weights stay while the rows they weigh do (`new(wgts=None)` drops them)"
        same = (dataset is None or dataset is self.dataset) and issubclass(cls or type(self), BatchDataLoader)
        if same and self.wgts is not None: kwargs.setdefault('wgts', self.wgts)
        if issubclass(cls or type(self), BatchDataLoader): kwargs.setdefault('cat_dtype', self.cat_dtype)
        return super().new(dataset, cls, **kwargs)

    @property
    def rows(self) -> tuple:
        "The dataset's packed `(rows, layout)` on this loader's device (moved there once, then cached by the dataset)."
        return self.dataset.packed_rows(self.device)

    def to(self, device:torch.device|str) -> BatchDataLoader:
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
        """Row order of an epoch as a CPU LongTensor (what `get_preds(reorder=True)` reads); training draws it on the
        device."""
        order = self.draw_order()
        return torch.arange(self.n) if order is None else order.cpu()

    def shuffle_fn(self, idxs): return idxs[torch.randperm(len(idxs), device=idxs.device)]

    def epoch_order(self) -> torch.Tensor|None:
        """This epoch's row order on the data's device (`get_idxs` where a subclass or `new` replaced it, else
        `draw_order`), or None for `range(n)`: batches are then slices, no copy."""
        if not self._overridden('get_idxs'): return self.draw_order()
        return torch.as_tensor(self.get_idxs(), dtype=torch.long).to(self.rows[0].device)

    def draw_order(self) -> torch.Tensor|None:
        """A new row order drawn on the data's device by this loader's own rule: a permutation (`shuffle_fn` where
        replaced), `n` draws by `wgts`, or None (in order, unshuffled)."""
        if not self.shuffle: return None
        dev = self.rows[0].device
        if self.wgts is not None:   # n draws with replacement by weight: inverse-CDF sampling, no row limit, no sync
            u = torch.rand(self.n, device=dev, dtype=torch.float64) * self._cdf[-1]
            return torch.searchsorted(self._cdf, u, right=True).clamp_(max=self.n - 1)
        if self._overridden('shuffle_fn'): return self.shuffle_fn(torch.arange(self.n, device=dev))
        return torch.randperm(self.n, device=dev)

    def sample(self):
        "Each batch's rows: a slice when in order, else a chunk of this epoch's permutation."
        order = self.epoch_order()
        n = self.n if order is None else len(order)
        end = n - n % self.bs if self.drop_last else n
        for i in range(0, end, self.bs): yield slice(i, min(i + self.bs, n)) if order is None else order[i:i + self.bs]

    def create_batch(self, idx:slice|torch.Tensor) -> tuple: return gather_rows(*self.rows, idx)
    def typed(self, b:tuple) -> tuple:
        "A gathered batch as it is served: its cat codes as `cat_dtype` (a copy from int32 views, where int64)."
        return (b[0].to(self.cat_dtype), *b[1:])

    def create_batches(self, samps):
        rows,layout = self.rows   # looked up once an epoch, not once a batch
        for idx in samps: yield gather_rows(rows, layout, idx)
    def do_item(self, s): return 0 if s is None else s
    def do_batch(self, b):
        return self.typed(self.create_batch(torch.as_tensor(b, dtype=torch.long, device=self.rows[0].device)))

    def __iter__(self):
        self.randomize()
        self.before_iter()
        for b in self.create_batches(self.sample()): yield self.after_batch(self.typed(b))
        self.after_iter()
