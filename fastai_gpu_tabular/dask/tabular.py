"""`TabularDask`: what `TabularGPU(ddf, ...)` gives for a Dask DataFrame (pandas or cuDF partitions). fastai's procs
learn their state over the partitions, exactly what they learn from the same rows in memory (dask/procs.py);
processing then writes each partition's packed rows to `.npy` chunks, and `dataloaders()` streams them if they do not
fit."""
from __future__ import annotations

import contextlib
import dataclasses
import os
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
from fastai.tabular.core import FillMissing, FillStrategy
from fastai.torch_core import default_device, display_df
from fastcore.foundation import L
from fasttransform import Pipeline

from ..atomic import clear_unheld, lock_path
from ..backend import (
    backend_of,
    float_casts,
    float_dtypes,
    host_dtype,
    is_categorical,
    is_dask,
    is_numeric_dtype,
    is_polars,
    nan_as_null,
    split_lists,
    to_backend,
    to_pandas,
)
from ..checks import (
    check_inf,
    check_na_names,
    check_rows,
    check_targets,
    check_unfilled_nan,
    raw_columns,
    read_columns,
)
from ..core import TabularGPU
from ..data import BatchDataLoaders
from ..ops.hashing import HashBucket, HashedCross
from ..ops.history import DifferenceLag, History, ListSlice
from ..ops.joins import JoinExternal
from ..ops.numeric import Bucketize, Clip, LogOp, NormalizeMinMax
from ..prepare import multi_hot_columns, prepare_names, set_procs
from ..progress import dask_progress
from ..rows.chunks import PackedChunks, RowBlocks, part_name
from ..rows.loader import BatchDataLoader
from ..rows.pack import Layout, pack_rows
from ..rows.stream import StreamDataLoader, byte_count, free_memory
from ..splits import check_training_rows, column_split, valid_mask
from .groupby import JoinGroupby, register_dask_groupby
from .history import register_dask_history
from .procs import learns_from_conts, register_dask_procs
from .rows import register_dask_rows
from .scan import (
    CachedColumn,
    CacheDir,
    CachedParts,
    ColumnValues,
    ContFacts,
    ScanSpec,
    merge_values,
    save_remaps,
    scan_part,
)
from .shipping import ship, unshipped
from .stats import compute, delayed
from .target import TargetEncode, register_dask_target

__all__ = ['TabularDask']

_MEDIAN_SAMPLE = 4096   # training rows a partition samples each continuous column's values at, to bracket the median
# bytes of training rows' continuous columns held in memory while the procs are set up: FillMissing's median and mode
# and Normalize's moments are then pandas' own over them, with no pass over the partitions (10M Criteo-like rows take
# 416 MB); more, and each statistic is a pass or two over the cache (dask/stats.py)
_TRAIN_CONTS_BYTES = 512 << 20

_PROCS = (fatc.Categorify, FillMissing, Normalize, Categorize, RegressionSetup, EncodedMultiCategorize, HashBucket,
          HashedCross, TargetEncode, JoinGroupby, DifferenceLag, History, ListSlice, JoinExternal, Bucketize, LogOp,
          Clip, NormalizeMinMax)

def _split_spec(splits, columns) -> tuple:
    "`(column, on)` of a split given as a column name or fastai's `ColSplitter(col, on)`; `(None, None)` for no split."
    if splits is None: return None, None
    spec = column_split(splits, columns)
    if spec is not None: return spec
    if callable(splits):
        raise TypeError(f"splits={getattr(splits, '__qualname__', splits)!r} on a Dask frame: a splitter that draws "
                        "row positions needs the whole frame in memory. Put the split in a boolean column and pass "
                        "splits='is_valid' (or ColSplitter('is_valid'))")
    raise TypeError("splits as lists of row positions cannot address a Dask frame's rows: put the split in a "
                    "boolean column and pass splits='is_valid' (or ColSplitter('is_valid'))")

@dataclasses.dataclass(frozen=True)
class DaskScan:
    """What the first pass over a Dask frame's rows found (dask/scan.py), read by the object and its procs instead of
    another pass: the rows (train, valid) in all and in each partition, the distinct values of the cat columns and
    targets as they came (`ColumnValues`), the continuous columns' missing and +-inf counts and training samples
    (`ContFacts`); while the procs are set up, the training rows' continuous columns, where they fit in memory
    (`train`), for the statistics. A column's facts go when a proc rewrites it (`rewritten`)."""
    rows: np.ndarray  # int64 (train, valid)
    parts: np.ndarray|None = None  # int64 (partitions, 2): each partition's (train, valid) rows
    values: dict = dataclasses.field(default_factory=dict)  # {column: ColumnValues}
    conts: dict = dataclasses.field(default_factory=dict)  # {column: ContFacts}
    cache: CachedParts|None = None  # the partitions' columns as the scan cached them
    train: pd.DataFrame|None = None  # the training rows' continuous columns, as the procs so far left them
    learners: tuple = ()  # the procs not yet set up that learn from `train` (once none, it goes)

    def rewritten(self, names) -> DaskScan:
        "These facts without those of columns `names`, which a proc has just rewritten."
        names = set(names)
        train = None if self.train is None else self.train.drop(columns=[c for c in self.train if c in names])
        return dataclasses.replace(self, values={k: v for k,v in self.values.items() if k not in names},
                                   conts={k: v for k,v in self.conts.items() if k not in names}, train=train)

class _PackedPart(NamedTuple):
    "What packing one partition gave: its rows' layout and width, and how many of them went to train/ and valid/."
    layout: Layout
    width: int
    n_train: int
    n_valid: int

def _pack_partition(part, procs, path, i, split, cache, names:dict) -> _PackedPart:
    """Pack a processed partition's rows (as `TabularGPU` does in memory) and write its train and valid rows as chunks,
    split as the scan split them (`cache`, the scan's `CachedParts`)."""
    t = TabularGPU(part.copy(deep=False), procs=unshipped(procs), do_setup=False, reduce_memory=False, inplace=True,
                   y_block=TransformBlock(), **names)   # no copy of the columns (see `procs._apply`)
    rows, layout = pack_rows(t)
    name, width = part_name(i), rows.shape[1]
    if split is None: return _PackedPart(layout, width, PackedChunks.write_rows(Path(path)/'train', name, rows), 0)
    valid = cache.valid(i)
    v = torch.zeros(len(rows), dtype=torch.bool) if valid is None else torch.from_numpy(valid)
    v = v.to(rows.device)
    # on the CPU, NumPy's `compress`: several times quicker than torch's row gathers, twice a boolean index's
    if rows.device.type == 'cpu':
        rows, v = rows.numpy(), v.numpy()
        train, valid = (torch.from_numpy(np.compress(m, rows, axis=0)) for m in (~v, v))
    else: train, valid = rows[~v], rows[v]
    return _PackedPart(layout, width, PackedChunks.write_rows(Path(path)/'train', name, train),
                       PackedChunks.write_rows(Path(path)/'valid', name, valid))

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
        # the names now (the rows are counted below: `len` of the frame would read it all)
        names = cat_names, cont_names, y_names = prepare_names(df, cat_names, cont_names, y_names, procs, do_setup)
        self.split_col, self.split_on = _split_spec(splits, list(df.columns))
        bad = [getattr(p, '__name__', type(p).__name__) for p in (procs.fs if isinstance(procs, Pipeline) else L(procs))
               if not issubclass(p if isinstance(p, type) else type(p), _PROCS)]
        if bad: raise TypeError(f"proc(s) {bad} have no Dask implementation: TabularDask runs "
                                f"{', '.join(p.__name__ for p in _PROCS[:3] + _PROCS[6:])} and the target procs")
        meta = df._meta
        for n in [n for n in cont_names if n in meta.columns]:   # a proc's columns (`made_columns`) come later
            dt = meta[n].dtype
            if not isinstance(dt, np.dtype) or not is_numeric_dtype(dt):
                raise TypeError(f"continuous column {n!r} has dtype {dt}: on a Dask frame continuous columns need a "
                                "NumPy numeric dtype (pandas' exact statistics are NumPy's); cast it first")
        # the declared multi-hot columns, and cuDF's list columns (the schema says); object lists show in the scan
        self.multi_hot = multi_hot_columns(meta, cat_names, multi_hot)
        keep = list(dict.fromkeys(cat_names + cont_names + y_names + read_columns(procs) +   # what procs read too
                                  ([self.split_col] if self.split_col else [])))
        items = df[[c for c in keep if c in df.columns]]
        for n,sep in self.multi_hot.items():
            if sep is not None and n in items.columns: items[n] = items[n].map_partitions(split_lists, sep)
        if nan_as_null(meta): items = items.map_partitions(lambda p: p.assign(**nan_as_null(p)))
        self._packed, self._parent, self.subset_idx, self.chunks = {}, None, None, None
        self.chunk_dir = Path(chunk_dir) if chunk_dir is not None else Path(tempfile.mkdtemp(prefix='fgt-chunks-'))
        if chunk_dir is None: weakref.finalize(self, shutil.rmtree, str(self.chunk_dir), True)
        self._claim_fd = None   # the lock on `chunk_dir` while this object's ETL writes there (`_claim`)
        set_procs(self, meta, names, procs, y_block, do_setup, device)
        self._raw_columns = raw_columns(procs, *names)   # numbers the shrink leaves as they are
        with self._claim():   # the scan to the write: another ETL into `chunk_dir` meanwhile would mix its chunks
            with dask_progress('TabularDask scan', None, progress):
                self.items, self.scan = self._scan(items, reduce_memory)
            self.float_dtypes = float_dtypes(self.items._meta, cat_names + cont_names + y_names)   # as `TabularGPU`
            if do_setup: check_rows(int(self.scan.rows.sum()))
            self.split = int(self.scan.rows[0])
            if do_setup and self.split_col is not None:
                check_training_rows(self.split, self.split_col, self.items._meta[self.split_col].dtype)
            if do_setup: self.setup()

    @contextlib.contextmanager
    def _claim(self):
        """Hold `chunk_dir` while this object's ETL writes there (a lock, which goes with the process): another ETL into
        it meanwhile, in this process or another, is an error, not chunks of both. Taking it, remove what ETLs that
        died left there: their scans' caches (a live object holds its own) and unfinished chunks."""
        if self._claim_fd is not None:   # already held: the scan's claim, around the set-up and the write
            yield
            return
        self.chunk_dir.mkdir(parents=True, exist_ok=True)
        try: self._claim_fd = lock_path(self.chunk_dir, wait=False)
        except BlockingIOError:
            raise RuntimeError(f"chunk_dir {str(self.chunk_dir)!r} is in use: another TabularDask's ETL (in this "
                               "process or another) writes there now, and two would mix their chunks. Give each ETL "
                               "its own chunk_dir") from None
        try:
            clear_unheld(self.chunk_dir, 'scan-*')
            if not (self.chunk_dir/'train'/'chunks.json').exists():   # unfinished: a write cut short
                for sub in ('train', 'valid'): shutil.rmtree(self.chunk_dir/sub, ignore_errors=True)
            yield
        finally:
            if self._claim_fd is not None: os.close(self._claim_fd)
            self._claim_fd = None

    def _has_classes(self, y:str, dtype) -> bool:
        "Whether a proc reads target `y`'s classes (Categorize, TargetEncode of classes): the scan counts its values."
        return any(isinstance(p, Categorize) or (isinstance(p, TargetEncode) and p.has_classes(y, dtype))
                   for p in self.procs.fs)

    def _scan_spec(self, items, path, reduce_memory) -> ScanSpec:
        "What the scan takes from each partition of `items` (see dask/scan.py), its columns going to `path`."
        from dask.dataframe.utils import has_known_categories
        meta, cols = items._meta, list(items.columns)
        cats, conts, ys = ([n for n in names if n in cols] for names in (self.cat_names, self.cont_names, self.y_names))
        known = [c for c in cols if is_categorical(meta[c].dtype) and has_known_categories(meta[c])]
        # the numbers whose shrink depends on their values (fastai's rule on dtype names)
        shrink = [c for c in dict.fromkeys(cats + conts + ys) if reduce_memory and c not in self.multi_hot
                  and getattr(meta[c].dtype, 'name', '').startswith(('int', 'uint', 'float'))]
        median = any(isinstance(p, FillMissing) and p.fill_strategy in (FillStrategy.median, 'median')
                     for p in self.procs.fs)
        classes = [y for y in ys if not is_numeric_dtype(meta[y].dtype) or self._has_classes(y, meta[y].dtype)]
        return ScanSpec(str(path), cols, self.split_col, self.split_on, distinct=frozenset(cats + classes),
                        lists=frozenset(n for n in self.multi_hot if n in cols), known=frozenset(known),
                        conts=frozenset(conts), shrink=frozenset(shrink), ys=frozenset(ys),
                        sample=_MEDIAN_SAMPLE if median else 0)

    def _shrink_casts(self, items, spec:ScanSpec, res:list, dtypes:dict) -> tuple:
        """`(casts, all_rows)`: fastai's `df_shrink` casts of the numbers (from their min and max over all rows, in
        the `dtypes` the scan found), and the cat columns it casts to category (by dtype alone: object or str), whose
        vocabulary is every row's values."""
        meta, named = items._meta, [c for c in items.columns if c in spec.distinct or c in spec.conts or c in spec.ys]
        proxy = to_pandas(items._meta_nonempty[named]).iloc[:2].reset_index(drop=True)
        for c in named:   # categories Dask does not know (e.g. from parquet): the values' dtype, as in memory
            if is_categorical(meta[c].dtype) and c not in spec.known:
                proxy[c] = proxy[c].astype(host_dtype(meta[c].dtype).categories.dtype)
        for c in spec.shrink:
            lo, hi = ([v for r in res if not pd.isna(v := r['cols'][c][k])] for k in ('min', 'max'))
            proxy[c] = pd.Series([min(lo), max(hi)] if lo else [np.nan] * 2).astype(dtypes.get(c, meta[c].dtype))
        casts = self._shrink_dtypes(proxy, self.cat_names, self.cont_names, self.y_names)
        return ({c: t for c,t in casts.items() if t != 'category'},
                {c for c,t in casts.items() if t == 'category' and c in self.cat_names})

    def _scan(self, items, reduce_memory) -> tuple:
        """`(items, scan)`: pass A (dask/scan.py). Each partition of `items` read once: its columns into a cache in
        `chunk_dir`, which `items` is then read from, and the facts the procs need (`DaskScan`); the targets checked for
        NaN, and fastai's `df_shrink` casts (from the numbers' min and max) applied to the cache as it is read."""
        import dask
        import dask.dataframe as dd
        self.chunk_dir.mkdir(parents=True, exist_ok=True)
        cache = CacheDir(tempfile.mkdtemp(prefix='scan-', dir=self.chunk_dir))
        spec = self._scan_spec(items, cache.path, reduce_memory)
        res = compute(*[delayed(scan_part)(p, i, spec) for i,p in enumerate(items.to_delayed())])
        meta, cols = items._meta, spec.columns
        parts = np.array([r['rows'] for r in res], dtype=np.int64).reshape(-1, 2)
        check_targets({y: any(r['cols'][y]['nan'] for r in res) for y in cols if y in spec.ys})
        stores = {c: {r['cols'][c]['store'] for r in res} for c in cols}
        for c,st in stores.items():
            if len(st) > 1: raise TypeError(f"column {c!r} holds lists in some partitions only: make it all lists "
                                            "(a multi-hot column) or all values")
            if st == {'lists'} and c in self.cat_names and c not in self.multi_hot: self.multi_hot[c] = None
        # a column's values as the partitions gave them to the host: a cuDF int column with nulls as float64 and NaN
        # (`to_pandas`), as pandas holds it, where the meta says int
        held = {c: np.result_type(*{np.dtype(r['cols'][c]['dtype']) for r in res}) for c in cols
                if stores[c] == {'values'} and res}
        casts, all_rows = self._shrink_casts(items, spec, res, held) if reduce_memory and parts.sum() else ({}, set())
        # each column's values merged, one column after another: the merge is bound by memory, and two threads took
        # twice its CPU time for the same wall time (10M Criteo-like rows on 2 cores: 18.2 against 9.7 CPU-s)
        merged = {c: merge_values(c, [r['cols'][c]['distinct'] for r in res], casts.get(c)) for c in cols
                  if c not in spec.known and (c in spec.distinct or stores[c] != {'values'})}
        values, columns = {}, {}
        for j,c in enumerate(cols):
            store, dt = next(iter(stores[c])), held.get(c, host_dtype(meta[c].dtype))
            if c in spec.known:   # fastai's vocabulary: every category, in their order
                vals = np.array(list(dt.categories), dtype=object)
                train = np.sum([r['cols'][c]['distinct'][1] for r in res], axis=0, dtype=np.int64)
                columns[c] = CachedColumn('codes', dt)
            elif c in merged:
                vals, train, remaps = merged[c]
                if store != 'values': save_remaps(cache.path, j, remaps, [r['arrays'] for r in res])
            if store == 'values': columns[c] = CachedColumn('values', np.dtype(casts.get(c, dt)))
            elif store == 'lists': columns[c] = CachedColumn('lists', np.dtype(object), True, vals)
            elif c in spec.known: pass
            elif c in self.cat_names:   # a Categorical over every row's values
                columns[c] = CachedColumn('codes', pd.CategoricalDtype(pd.Index(vals, dtype=object)), True,
                                          known=False)
            else:   # a target, the split column: their own values
                own = dt.categories.dtype if is_categorical(dt) else dt
                columns[c] = CachedColumn('codes', own, True, vals)
            if c in spec.distinct:
                hists = [r['cols'][c]['hist'] for r in res if 'hist' in r['cols'][c]]
                hist = np.zeros(max(map(len, hists), default=0), np.int64)
                for h in hists: hist[:len(h)] += h
                values[c] = ColumnValues(vals, train, any(r['cols'][c].get('nan_train', False) for r in res),
                                         c in all_rows or c in spec.known, hist if hists else None)
        conts = {c: ContFacts(*(sum(r['cols'][c]['cont'][k] for r in res) for k in ('nan_train', 'nan_all', 'inf')),
                              tuple(r['cols'][c]['cont']['sample'] for r in res) if spec.sample else None)
                 for c in cols if c in spec.conts}
        reader = CachedParts(cache, columns, [r['index'] for r in res], [r['arrays'] for r in res], meta.index.name,
                             backend_of(meta))
        with dask.config.set({'dataframe.convert-string': False}):   # the cache's dtypes are the source's
            items = dd.from_map(reader, range(len(res)), meta=reader.meta(), label='fgt-scan')
        return items, DaskScan(parts.sum(0), parts, values, conts, reader)

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
        res._claim_fd = None   # the whole object's, not the subset's to release
        res.items = res.cols(list(self.items.columns))
        res.chunks = self.chunks[i] if self.chunks is not None else None
        return res

    def new(self, df, inplace:bool=False) -> TabularGPU:
        "A Tabular of `df` with these procs and names: `TabularGPU` for a pandas/cuDF frame, `TabularDask` for Dask's."
        kw = dict(do_setup=False, reduce_memory=False, y_block=TransformBlock(), multi_hot=self.multi_hot,
                  procs=self.procs, cat_names=self.cat_names, cont_names=self.cont_names, y_names=self.y_names,
                  device=self.device)
        if is_dask(df):   # its floats cast to the training frame's before the scan, which counts them as cast
            casts = float_casts(df._meta, self.float_dtypes)
            res = TabularDask(df.astype(casts) if casts else df, chunk_dir=None, **kw)
        # a Polars frame goes to the partitions' backend, as `TabularGPU.new` sends it to its frame's
        else: res = TabularGPU(df, inplace=inplace, backend=backend_of(self.items) if is_polars(df) else None, **kw)
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

    def partition_rows(self) -> np.ndarray:
        "Rows of each partition of this object's frame (its subset's rows), from the scan: a pass need not count them."
        p = self.scan.parts
        return p.sum(1) if self.subset_idx is None else p[:, self.subset_idx]

    def cont_facts(self, names:list) -> dict:
        """{name: ContFacts} of continuous columns: the scan's, else (a column a proc made) counted now, in one pass
        over them all, and kept."""
        todo = [n for n in names if n not in self.scan.conts]
        if todo:
            f = self.full_items
            x = f[todo]
            train = x if self.split_col is None else x[~valid_mask(f[self.split_col], self.split_on)]
            floats = [c for c in todo if x[c].dtype.kind == 'f']
            nan, tnan, inf = (to_pandas(r).to_dict() for r in compute(x.isna().sum(), train.isna().sum(),
                                                                      (x[floats].abs() == np.inf).sum()))
            got = {n: ContFacts(int(tnan[n]), int(nan[n]), int(inf.get(n, 0))) for n in todo}
            self.scan = dataclasses.replace(self.scan, conts={**self.scan.conts, **got})
        return {n: self.scan.conts[n] for n in names}

    def _before_procs(self, setup=False):
        """Bad input fails here, naming the columns, before the long work: +-inf, NaN that no FillMissing will fill, and
        `<cont>_na` names FillMissing will not make; from the scan's counts. A later frame's floats are cast (lazily)
        to the training frame's dtypes first, as `TabularGPU` casts them: their facts are then counted again."""
        self._packed = {}
        casts = {} if setup else float_casts(self.items._meta, self.float_dtypes)
        if casts: self.items, self.scan = self.items.astype(casts), self.scan.rewritten(casts)
        facts = self.cont_facts([n for n in self.cont_names if n in self.items.columns])   # a proc's columns come later
        check_inf({n: f.inf for n,f in facts.items()})
        if not self._has(FillMissing): check_unfilled_nan([n for n,f in facts.items() if f.nan_all], has_fill=False)
        check_na_names(self.cat_names, self.items.columns, self.procs, setup,
                       lambda c: bool(self.cont_facts([c])[c].nan_train))

    def _hold_training_conts(self):
        """Put the training rows' continuous columns in `scan.train` if a proc learns statistics of them and they fit
        in `_TRAIN_CONTS_BYTES`: read from the scan's cache (the page cache), no pass over the partitions."""
        learners = tuple(filter(learns_from_conts, self.procs.fs))
        names, cache = [n for n in self.cont_names if n in self.scan.conts], self.scan.cache
        if not (learners and names and cache): return
        rows = int(self.scan.rows[0])
        size = rows * sum(np.dtype(cache.columns[n].dtype).itemsize for n in names)
        if size <= _TRAIN_CONTS_BYTES:
            self.scan = dataclasses.replace(self.scan, train=cache.training(names, rows), learners=learners)

    def setup(self):
        with self._claim(), self._progress('setup'):
            self._before_procs(setup=True)
            self._hold_training_conts()
            self.procs.setup(self)
            self.scan = dataclasses.replace(self.scan, train=None, learners=())   # its memory back before the write
            self._write()
    def process(self):
        with self._claim(), self._progress('process'): self._before_procs(); self.procs(self); self._write()
    def _progress(self, what):
        return dask_progress(f'TabularDask {what}', int(self.scan.rows.sum()), getattr(self, 'progress', True))

    # --- packing into chunks ----------------------------------------------------------------------------------------
    def _write(self):
        """Pack each processed partition and write its rows: `chunk_dir`/train and /valid, a file a partition. train's
        `chunks.json` goes first and comes last: where it is, train/ and valid/ hold one finished write's chunks."""
        for sub in ('train', 'valid'): (self.chunk_dir/sub/'chunks.json').unlink(missing_ok=True)
        for sub in ('train', 'valid'):
            d = self.chunk_dir/sub
            if d.exists(): shutil.rmtree(d)
            d.mkdir(parents=True)
        procs = ship(self.procs, self)   # by reference to the procs its encodes shipped: one copy a process
        names = dict(cat_names=list(self.cat_names), cont_names=list(self.cont_names), multi_hot=self.multi_hot,
                     y_names=[n for n in self.y_names if n in self.items.columns])
        # not optimized: `items` is the procs over the scan's cache, every column of which is packed (the optimizer
        # would find nothing to drop, in a tenth of the ETL's CPU time)
        parts = self.items.to_delayed(optimize_graph=False)
        pack = delayed(_pack_partition)
        res = compute(*[pack(p, procs, str(self.chunk_dir), i, self.split_col, self.scan.cache, names)
                        for i,p in enumerate(parts)])
        first = res[0]
        files = lambda sub: [(part_name(i), getattr(r, f'n_{sub}')) for i,r in enumerate(res)]
        valid = PackedChunks.write(self.chunk_dir/'valid', files('valid'), first.layout, first.width)
        self.chunks = PackedChunks.write(self.chunk_dir/'train', files('train'), first.layout, first.width), valid
        rows = np.array([(r.n_train, r.n_valid) for r in res], dtype=np.int64).sum(0)
        self.scan = dataclasses.replace(self.scan, rows=rows)

    def _check_processed(self):
        if self.chunks is None: raise RuntimeError("this TabularDask is not processed yet: call `process()`")

    def save(self, path, **kwargs):
        "Save the processed rows (read from the chunks) and the procs' state in the folder `path` (`save_tabular`)."
        self._check_processed()
        return super().save(path, **kwargs)

    def row_blocks(self, rows:int) -> RowBlocks:
        """The chunks' rows in blocks of at most `rows`, read as they are taken, on a range index: a Dask frame's row
        labels are its partitions' (seldom unique, and reading them would be another pass)."""
        self._check_processed()
        train, valid = self.chunks
        return RowBlocks(train.layout, train.width, pd.RangeIndex(len(self)), train.blocks(rows), valid.blocks(rows))

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
register_dask_history(TabularDask)
register_dask_rows(TabularDask)
