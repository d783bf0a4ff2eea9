"""`TabularDask`: what `TabularGPU(ddf, ...)` gives for a Dask DataFrame (pandas or cuDF partitions). fastai's procs
learn their state over the partitions, exactly what they learn from the same rows in memory (dask/procs.py);
processing then writes each partition's packed rows to `.npy` chunks, and `dataloaders()` streams them if they do not
fit."""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple
import numpy as np
import pandas as pd
import torch
from fastai.data.block import TransformBlock
from fastai.data.transforms import Categorize, EncodedMultiCategorize, Normalize, RegressionSetup
from fastai.tabular import core as fatc
from fastai.tabular.core import FillMissing
from fastai.torch_core import default_device, display_df
from fastcore.foundation import L
from fasttransform import Pipeline

from ..backend import (
    col_to_tensor,
    float_casts,
    float_dtypes,
    is_cudf,
    is_dask,
    is_numeric_dtype,
    sorted_uniques,
    split_lists,
    to_backend,
    to_pandas,
)
from ..checks import (
    add_y_procs,
    check_columns,
    check_inf,
    check_na_names,
    check_names,
    check_rows,
    check_targets,
    check_unfilled_nan,
    default_y_block,
    multi_hot_columns,
    nan_as_null,
    raw_columns,
)
from ..core import TabularGPU
from ..data import BatchDataLoaders
from ..hashing import HashBucket, HashedCross
from ..loader import BatchDataLoader
from ..pack import Layout, pack_rows
from ..progress import dask_progress
from ..stream import PackedChunks, StreamDataLoader, byte_count, free_memory
from .groupby import JoinGroupby, register_dask_groupby
from .procs import register_dask_procs
from .split import valid_mask
from .stats import compute, delayed
from .target import TargetEncode, register_dask_target

__all__ = ['TabularDask', 'DaskScan', 'valid_mask']

_PROCS = (fatc.Categorify, FillMissing, Normalize, Categorize, RegressionSetup, EncodedMultiCategorize, HashBucket,
          HashedCross, TargetEncode, JoinGroupby)

def _split_spec(splits, columns) -> tuple:
    "`(column, on)` of a split given as a column name or fastai's `ColSplitter(col, on)`; `(None, None)` for no split."
    if splits is None: return None, None
    if isinstance(splits, str): col, on = splits, None
    elif callable(splits) and getattr(splits, '__qualname__', '') == 'ColSplitter.<locals>._inner':
        cells = dict(zip(splits.__code__.co_freevars, (c.cell_contents for c in splits.__closure__)))
        col, on = cells['col'], cells['on']
    elif callable(splits):
        raise TypeError(f"splits={getattr(splits, '__qualname__', splits)!r} on a Dask frame: a splitter that draws "
                        "row positions needs the whole frame in memory. Put the split in a boolean column and pass "
                        "splits='is_valid' (or ColSplitter('is_valid'))")
    else:
        raise TypeError("splits as lists of row positions cannot address a Dask frame's rows: put the split in a "
                        "boolean column and pass splits='is_valid' (or ColSplitter('is_valid'))")
    if isinstance(col, int): col = columns[col]
    if col not in columns: raise KeyError(f"the split column {col!r} is not in the frame (it has {list(columns)[:20]})")
    return col, on

def _no_flags(): return pd.Series(dtype=bool)

@dataclasses.dataclass(frozen=True)
class DaskScan:
    """What the passes over a Dask frame's rows counted, read by the object and its procs instead of another pass: the
    rows (train, valid), the values over all rows of the object cat columns (their vocabulary: fastai's category cast),
    and which continuous columns hold NaN in the training rows and in any row (counted before each processing)."""
    rows: np.ndarray  # int64 (train, valid)
    vocab: dict = dataclasses.field(default_factory=dict)  # {cat name: values}
    nan_train: pd.Series = dataclasses.field(default_factory=_no_flags)  # {cont name: NaN in the training rows}
    nan_all: pd.Series = dataclasses.field(default_factory=_no_flags)  # {cont name: NaN in any row}

class _PackedPart(NamedTuple):
    "What packing one partition gave: its rows' layout and width, and how many of them went to train/ and valid/."
    layout: Layout
    width: int
    n_train: int
    n_valid: int

def _pack_partition(part, procs, path, i, split, on, names:dict) -> _PackedPart:
    "Pack a processed partition's rows (as `TabularGPU` does in memory) and write its train and valid rows as chunks."
    t = TabularGPU(part, procs=procs, do_setup=False, reduce_memory=False, y_block=TransformBlock(), **names)
    rows, layout = pack_rows(t)
    name, width = f'part.{i:05d}.npy', rows.shape[1]
    if split is None: return _PackedPart(layout, width, PackedChunks.write_rows(Path(path)/'train', name, rows), 0)
    v = col_to_tensor(valid_mask(part[split], on).astype('int8')).to(rows.device).bool()   # DLPack may lack bool
    return _PackedPart(layout, width, PackedChunks.write_rows(Path(path)/'train', name, rows[~v]),
                       PackedChunks.write_rows(Path(path)/'valid', name, rows[v]))

class TabularDask(TabularGPU):
    """`TabularGPU` over a Dask DataFrame: the learned state is fastai's, computed exactly over the partitions; the
    processed rows are packed a partition at a time into `.npy` chunks in `chunk_dir` (train/ and valid/)."""
    def __init__(self, df, procs:list|None=None, cat_names:list|None=None, cont_names:list|None=None,
                 y_names:list|str|None=None, y_block:TransformBlock|None=None,
                 splits:str|Callable|None=None, # a boolean column (True: validation), or fastai's `ColSplitter`
                 do_setup:bool=True, device:torch.device|str|None=None, inplace:bool=False, reduce_memory:bool=True,
                 backend:str|None=None, multi_hot:dict|list|None=None,
                 chunk_dir:str|Path|None=None, # where the packed chunks go (default: a temporary folder)
                 progress:bool=True): # show each pass over the partitions (fastprogress's bar, or plain lines)
        df = to_backend(df, backend)
        self.progress = progress
        cat_names, cont_names, y_names = L(cat_names).copy(), L(cont_names).copy(), L(y_names).copy()
        # the names now (the rows are counted below: `len` of the frame would read it all)
        check_names(cat_names, cont_names, y_names)
        if do_setup: check_columns(df.columns, cat_names, cont_names, y_names, procs)
        self.split_col, self.split_on = _split_spec(splits, list(df.columns))
        bad = [getattr(p, '__name__', type(p).__name__) for p in (procs.fs if isinstance(procs, Pipeline) else L(procs))
               if not issubclass(p if isinstance(p, type) else type(p), _PROCS)]
        if bad: raise TypeError(f"proc(s) {bad} have no Dask implementation: TabularDask runs Categorify, FillMissing, "
                                "Normalize, HashBucket, HashedCross, TargetEncode, JoinGroupby and the target procs")
        meta = df._meta
        for n in [n for n in cont_names if n in meta.columns]:   # a proc's columns (`made_columns`) come later
            dt = meta[n].dtype
            if not isinstance(dt, np.dtype) or not is_numeric_dtype(dt):
                raise TypeError(f"continuous column {n!r} has dtype {dt}: on a Dask frame continuous columns need a "
                                "NumPy numeric dtype (pandas' exact statistics are NumPy's); cast it first")
        self.multi_hot = multi_hot_columns(self._probe(df, cat_names, multi_hot), cat_names, multi_hot)
        keep = list(dict.fromkeys(cat_names + cont_names + y_names + ([self.split_col] if self.split_col else [])))
        items = df[[c for c in keep if c in df.columns]]
        for c in items.columns:   # categories Dask does not know (e.g. from parquet) as plain values
            if getattr(meta[c].dtype, 'name', '') == 'category' and not items[c].cat.known:
                items[c] = items[c].astype(meta[c].cat.categories.dtype)
        for n,sep in self.multi_hot.items():
            if sep is not None and n in items.columns: items[n] = items[n].map_partitions(split_lists, sep)
        if nan_as_null(meta): items = items.map_partitions(lambda p: p.assign(**nan_as_null(p)))
        self._raw_columns = raw_columns(procs, cat_names, cont_names, y_names)   # numbers the shrink leaves as they are
        with dask_progress('TabularDask scan', None, progress):
            items, self.scan = self._scan(items, cat_names, cont_names, y_names, reduce_memory)
        self.float_dtypes = float_dtypes(items._meta, cat_names + cont_names + y_names)   # as `TabularGPU` keeps them
        if do_setup: check_rows(int(self.scan.rows.sum()))
        self.items, self._packed, self._parent, self.subset_idx, self.chunks = items, {}, None, None, None
        self.y_names, self.device = y_names, device
        self.chunk_dir = Path(chunk_dir) if chunk_dir is not None else Path(tempfile.mkdtemp(prefix='fgt-chunks-'))
        if chunk_dir is None: weakref.finalize(self, shutil.rmtree, str(self.chunk_dir), True)
        if y_block is None and self.y_names: y_block = default_y_block([meta[n].dtype for n in self.y_names])
        procs = add_y_procs(procs, y_block, do_setup)
        self.cat_names, self.cont_names, self.procs = cat_names, cont_names, Pipeline(procs)
        self.split = int(self.scan.rows[0])
        if do_setup: self.setup()

    @staticmethod
    def _probe(df, cat_names, multi_hot):
        "A few real rows of the object cat columns, where list cells show (cuDF's meta already says list)."
        mh = set(multi_hot or ())
        obj = [n for n in cat_names if n not in mh and n in df.columns and df._meta[n].dtype == object]
        if not obj or is_cudf(df._meta): return df._meta
        return df[obj].partitions[0].compute().iloc[:64]   # (Dask's `head` here takes several times longer)

    def _scan(self, items, cat_names, cont_names, y_names, reduce_memory) -> tuple:
        """`(items, scan)`: one pass over the rows gives the train/valid rows, fastai's `df_shrink` casts of `items`
        (from the columns' min/max) and the vocabulary over all rows of object cat columns (fastai takes it from their
        category cast), and checks the targets hold no NaN."""
        split, on, meta = self.split_col, self.split_on, items._meta
        named = [c for c in dict.fromkeys(cat_names + cont_names + y_names) if c in items.columns]
        ys = [n for n in y_names if n in items.columns]
        # the columns whose shrink depends on their values (fastai's rule on dtype names)
        num = [c for c in named if c not in self.multi_hot
               and getattr(meta[c].dtype, 'name', '').startswith(('int', 'uint', 'float'))]
        # totals only (Dask may fuse partitions differently for each set of columns it reads), from one cheap column
        cheap = split or (num + list(items.columns))[0]
        tasks = {'rows': items[cheap].map_partitions(len).sum()}
        if split: tasks['valid'] = valid_mask(items[split], on).sum()
        if reduce_memory and num: tasks['min'], tasks['max'] = items[num].min(), items[num].max()
        if ys: tasks['ynan'] = items[ys].isna().any()
        # object/str cat columns (fastai's category cast, by dtype alone): their values over all rows are their
        # vocabulary, read in this same pass
        proxy = to_pandas(items._meta_nonempty[named]).iloc[:2].reset_index(drop=True)
        cats = [c for c,t in self._shrink_dtypes(proxy, cat_names, cont_names, y_names).items()
                if t == 'category' and c in cat_names] if reduce_memory else []
        for c in cats: tasks[('uniq', c)] = items[c].unique(split_out=1)
        res = {k: to_pandas(v) for k,v in zip(tasks, compute(*tasks.values()))}
        rows = np.array([res['rows'] - res.get('valid', 0), res.get('valid', 0)], dtype=np.int64)
        if ys: check_targets(res['ynan'].to_dict())
        if not reduce_memory: return items, DaskScan(rows)
        # fastai's df_shrink_dtypes on the stand-in frame: each column's dtype, and its min and max where they matter
        for c in num: proxy[c] = pd.Series([res['min'][c], res['max'][c]]).astype(meta[c].dtype)
        casts = self._shrink_dtypes(proxy, cat_names, cont_names, y_names)
        vocab = {c: sorted_uniques(res[('uniq', c)].rename(c)) for c in cats}
        casts = {c: t for c,t in casts.items() if t != 'category'}
        return (items.astype(casts) if casts else items), DaskScan(rows, vocab)

    # --- the object and its subsets -------------------------------------------------------------------------------
    def __len__(self):
        rows = self.scan.rows
        return int(rows.sum() if self.subset_idx is None else rows[self.subset_idx])

    def cols(self, names:list):
        """Columns `names` of this object's rows, lazily: for a subset, projected before the split's filter, so that
        Dask reads and encodes only those columns (its optimizer does not push a projection through that filter)."""
        names = list(names)
        if self.subset_idx is None: return self.items[names]
        f = self.full_items
        if self.split_col is None:   # no split: every row trains
            return f[names] if self.subset_idx == 0 else f[names].map_partitions(lambda p: p.iloc[:0])
        f = f[list(dict.fromkeys(names + [self.split_col]))]
        v = valid_mask(f[self.split_col], self.split_on)
        return f[v if self.subset_idx else ~v][names]

    def subset(self, i:int) -> TabularDask:
        "Train (0) or valid (1) rows: `items` filtered lazily on the split column; their chunks once processed."
        res = object.__new__(type(self))
        res.__dict__.update(self.__dict__)
        res.subset_idx, res._parent, res._packed, res.split = i, self, {}, int(self.scan.rows[i])
        res.items = res.cols(list(self.items.columns))
        res.chunks = self.chunks[i] if self.chunks is not None else None
        return res

    def new(self, df, inplace:bool=False) -> TabularGPU:
        "A Tabular of `df` with these procs and names: `TabularGPU` for a pandas/cuDF frame, `TabularDask` for Dask's."
        kw = dict(do_setup=False, reduce_memory=False, y_block=TransformBlock(), multi_hot=self.multi_hot,
                  procs=self.procs, cat_names=self.cat_names, cont_names=self.cont_names, y_names=self.y_names,
                  device=self.device)
        res = TabularDask(df, chunk_dir=None, **kw) if is_dask(df) else TabularGPU(df, inplace=inplace, **kw)
        res.float_dtypes = self.float_dtypes   # the training frame's, which `process` casts its floats to
        return res

    def new_empty(self):
        return self.new(pd.DataFrame({}, columns=[c for c in self.items.columns if c != self.split_col]))
    def show(self, max_n=10, **kwargs):
        "The first `max_n` rows, decoded, on the host."
        display_df(self.new(to_pandas(self.items[self.all_col_names].head(max_n))).decode().items)

    def decode(self):
        raise NotImplementedError("decode a TabularDask's rows through an in-memory copy of some of them: "
                                  "to.new(to.items.head(n).compute()).decode()")

    def _before_procs(self, setup=False):
        """Bad input fails here, naming the columns, before the long work: +-inf, NaN that no FillMissing will fill, and
        `<cont>_na` names FillMissing will not make; one pass over the continuous columns. A later frame's floats are
        cast (lazily) to the training frame's dtypes first, as `TabularGPU` casts them."""
        self._packed = {}
        casts = {} if setup else float_casts(self.items._meta, self.float_dtypes)
        if casts: self.items = self.items.astype(casts)
        self.scan = dataclasses.replace(self.scan, nan_train=_no_flags(), nan_all=_no_flags())
        if not len(self.cont_names): return
        x = self.items[[n for n in self.cont_names if n in self.items.columns]]   # a proc's columns come later
        train = x if self.split_col is None else x[~valid_mask(self.items[self.split_col], self.split_on)]
        floats = [c for c in x.columns if x[c].dtype.kind == 'f']
        nan, train_nan, inf = (to_pandas(r) for r in compute(x.isna().any(), train.isna().any(),
                                                             (x[floats].abs() == np.inf).sum()))
        self.scan = dataclasses.replace(self.scan, nan_train=train_nan, nan_all=nan)   # FillMissing's setups read them
        check_inf(inf.to_dict())
        if not self._has(FillMissing): check_unfilled_nan(list(nan[nan].index), has_fill=False)
        check_na_names(self.cat_names, self.items.columns, self.procs, setup, lambda c: bool(train_nan[c]))

    def setup(self):
        with self._progress('setup'): self._before_procs(setup=True); self.procs.setup(self); self._write()
    def process(self):
        with self._progress('process'): self._before_procs(); self.procs(self); self._write()
    def _progress(self, what):
        return dask_progress(f'TabularDask {what}', int(self.scan.rows.sum()), getattr(self, 'progress', True))

    # --- packing into chunks ----------------------------------------------------------------------------------------
    def _write(self):
        "Pack each processed partition and write its rows: `chunk_dir`/train and /valid, a file a partition."
        import dask  # an optional dependency: imported when used
        for sub in ('train', 'valid'):
            d = self.chunk_dir/sub
            if d.exists(): shutil.rmtree(d)
            d.mkdir(parents=True)
        procs = dask.delayed(self.procs)   # one copy in the graph, not one per task
        names = dict(cat_names=list(self.cat_names), cont_names=list(self.cont_names), multi_hot=self.multi_hot,
                     y_names=[n for n in self.y_names if n in self.items.columns])
        parts = self.items.to_delayed()
        pack = delayed(_pack_partition)
        res = compute(*[pack(p, procs, str(self.chunk_dir), i, self.split_col, self.split_on, names)
                        for i,p in enumerate(parts)])
        first = res[0]
        files = lambda sub: [(f'part.{i:05d}.npy', getattr(r, f'n_{sub}')) for i,r in enumerate(res)]
        self.chunks = tuple(PackedChunks.write(self.chunk_dir/sub, files(sub), first.layout, first.width)
                            for sub in ('train', 'valid'))
        rows = np.array([(r.n_train, r.n_valid) for r in res], dtype=np.int64).sum(0)
        self.scan = dataclasses.replace(self.scan, rows=rows)

    def _check_processed(self):
        if self.chunks is None: raise RuntimeError("this TabularDask is not processed yet: call `process()`")

    def packed_rows(self, device=None) -> tuple[torch.Tensor, Layout]:
        "`(rows, layout)` of this subset's chunks loaded whole on `device` (the resident path: they must fit)."
        device = torch.device(device if device is not None else 'cpu')
        self._check_processed()
        if self.subset_idx is not None: return self.chunks.packed_rows(device)   # cached there, for every subset object
        if device not in self._packed:
            self._packed[device] = (torch.cat([c.load(device) for c in self.chunks]), self.chunks[0].layout)
        return self._packed[device]

    def dataloaders(self, bs:int=64, shuffle:bool=True, val_bs:int|None=None, device:torch.device|str|None=None,
                    drop_last:bool|None=None, path:str|Path='.',
                    memory_budget=None, # bytes (or '4GB') the packed rows may take on `device` (default: half free)
                    stream:bool|None=None, # streaming (True) or the resident loader (False); default: by the budget
                    window:int=32, piece_rows:int|None=None, seed:int|None=None, **kwargs) -> BatchDataLoaders:
        """`BatchDataLoaders`: resident `BatchDataLoader`s when the packed rows fit in `memory_budget`, otherwise
        `StreamDataLoader`s reading the chunks (the budget then bounds their window and read-ahead)."""
        device = torch.device(default_device() if device is None else device)
        self._check_processed()
        budget = byte_count(memory_budget) or free_memory(device, 0.5)
        if stream is None: stream = sum(c.nbytes for c in self.chunks) > budget
        def _dl(ds, **kw):
            if not stream: return BatchDataLoader(ds, device=device, **kw, **kwargs)
            return StreamDataLoader(ds, device=device, window=window, piece_rows=piece_rows, memory_budget=budget,
                                    seed=seed, **kw, **kwargs)
        trn = _dl(self.train, bs=bs, shuffle=shuffle, drop_last=shuffle if drop_last is None else drop_last)
        val = _dl(self.valid, bs=bs if val_bs is None else val_bs, shuffle=False, drop_last=False)
        return BatchDataLoaders(trn, val, path=path, device=device)

register_dask_procs(TabularDask)
register_dask_target(TabularDask)
register_dask_groupby(TabularDask)
