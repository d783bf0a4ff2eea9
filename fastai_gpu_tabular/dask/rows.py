"""The procs that make a row's columns from that row alone, on a Dask-backed Tabular: `JoinExternal` (its table goes to
every partition: a broadcast join), `Bucketize`, `LogOp`, `Clip`, `NormalizeMinMax` and `ListSlice`, each a partition
at a time through its in-memory encodes, lazily, so the values are the in-memory ones. `Bucketize` learns the quantiles
of the training rows, `NormalizeMinMax` their min and max, from their values on the host: the held training conts
(`DaskScan.train`), else one pass that brings them."""
from __future__ import annotations

import dataclasses
import numpy as np
import pandas as pd
from fastai.data.block import TransformBlock

from ..backend import sorted_uniques, to_host
from ..checks import check_new_columns
from ..core import TabularGPU
from ..ops.history import ListSlice
from ..ops.joins import JoinExternal
from ..ops.numeric import Bucketize, Clip, LogOp, NormalizeMinMax, inner_bins, min_max, qcut_bins
from ..ops.procs import register_proc
from .scan import ColumnValues, ContFacts
from .shipping import ship, unshipped
from .stats import compute, replace_columns

__all__ = []

def _read(proc) -> list:
    "The columns a proc's encodes read."
    return [proc.on] if isinstance(proc, JoinExternal) else list(proc.names)

def _made(proc) -> list:
    "The columns it makes (JoinExternal, Bucketize) or rewrites (the others)."
    return list(proc.made_names) if isinstance(proc, (JoinExternal, Bucketize)) else list(proc.names)

def _names(to, cols:list) -> dict:
    "The Tabular names of columns `cols` of `to`, for an in-memory Tabular of them."
    return dict(cat_names=[n for n in to.cat_names if n in cols], cont_names=[n for n in to.cont_names if n in cols],
                multi_hot={n: s for n,s in to.multi_hot.items() if n in cols})

def apply_part(part, proc, names:dict, out:list):
    "`proc`'s in-memory encodes on one partition's columns (a shallow copy: procs replace columns), columns `out`."
    t = TabularGPU(part.copy(deep=False), do_setup=False, reduce_memory=False, inplace=True, y_block=TransformBlock(),
                   **names)
    unshipped(proc)(t)
    return t.items[out]

def _rows_encodes(self, to):
    "The proc's columns for every row, lazily, a partition at a time (its in-memory encodes)."
    self.check_columns(to)
    read, made = _read(self), _made(self)
    names = _names(to, read)
    src = to.items[read]
    meta = apply_part(src._meta, self, names, made)
    out = src.map_partitions(apply_part, ship(self, to), names, made, meta=meta)
    to.items = replace_columns(to.items, out, made)
    in_place = isinstance(self, (LogOp, Clip, NormalizeMinMax))
    scan = _rewritten_conts(self, to.scan) if in_place else to.scan.rewritten(made)
    if isinstance(self, JoinExternal): scan = dataclasses.replace(scan, values={**scan.values,
                                                                                **_joined_values(self, scan)})
    to.scan = scan
    if isinstance(self, (JoinExternal, Bucketize)):
        for c in made:
            kind = to.cat_names if c not in getattr(self, 'cont_names', ()) else to.cont_names
            if c not in kind: kind.append(c)
    return to

def _rewritten_conts(proc, scan):
    """The scan's facts after LogOp, Clip or NormalizeMinMax rewrote conts: their missing values stay as they were; the
    median's samples and the held training values (`DaskScan.train`) go through the same `rewrite` (each keeps the
    samples' order), so FillMissing and Normalize need no pass for them."""
    conts, train = dict(scan.conts), scan.train
    host = lambda n, v: proc.rewrite(pd.Series(v, name=n), n).astype('f8')
    for n in proc.names:
        f = conts.get(n)
        if f is None: continue
        samples = None if f.samples is None else tuple((k, host(n, v)) for k,v in f.samples)
        conts[n] = ContFacts(f.nan_train, f.nan_all, f.inf, samples)
    held = [n for n in proc.names if train is not None and n in train.columns]
    if held: train = train.assign(**{n: proc.rewrite(train[n], n) for n in held})
    return dataclasses.replace(scan, conts=conts, train=train)

def _joined_values(je, scan) -> dict:
    """{cat column: ColumnValues} of JoinExternal's cats, from the scan's counts of its key (no pass): a table value's
    training rows are those of its keys; a key the table lacks, or a value missing there, is a missing value."""
    seen = scan.values.get(je.on)
    if seen is None or seen.lens is not None: return {}
    keys = pd.Index(seen.values, dtype=object, tupleize_cols=False)
    at = pd.Index(je.table[je.on].to_numpy(), tupleize_cols=False).get_indexer(keys)
    res = {}
    for c in je.cat_names:
        vals = np.append(je.table[c].to_numpy(dtype=object), None)[at]   # a key it lacks: -1, the None
        miss = pd.isna(vals)
        counts = pd.Series(seen.train[~miss]).groupby(pd.Index(vals[~miss], dtype=object, tupleize_cols=False)).sum()
        u = sorted_uniques(pd.Series(counts.index, dtype=object, name=c))
        values = np.empty(len(u), dtype=object)
        values[:] = u
        train = counts.reindex(pd.Index(u, dtype=object, tupleize_cols=False)).to_numpy().astype(np.int64)
        res[c] = ColumnValues(values, train, bool(seen.train[miss].sum()) or seen.nan_train)
    return res

def _bucketize_setups(self, to):
    "Given boundaries, or pandas' qcut edges of the training rows' values: held in memory, else brought in one pass."
    self.check_columns(to)
    check_new_columns('Bucketize', self.made_names, to.items.columns, to.y_names)
    if self.q is None:
        self.bins = {n: [float(v) for v in self.boundaries[n]] for n in self.names}
        return
    held = to.scan.train
    if held is not None and all(n in held.columns for n in self.names): vals = held[self.names]
    else: vals = to_host(compute(to.train.cols(self.names))[0])
    self.bins = {n: inner_bins(qcut_bins(vals[n].astype('float64'), self.q)) for n in self.names}

def _training_values(to, names:list) -> pd.DataFrame:
    "The training rows' columns `names`: the held training conts, else brought in one pass."
    held = to.scan.train
    if held is not None and all(n in held.columns for n in names): return held[names]
    return to_host(compute(to.train.cols(names))[0])

def _minmax_setups(self, to):
    "The training rows' min and max (exact, as in memory): from the held training conts, else one pass."
    self.check_columns(to)
    vals = _training_values(to, self.names)
    self.mins, self.maxs = min_max({n: vals[n] for n in self.names}, len(vals))

def register_dask_rows(cls:type) -> None:
    """Make JoinExternal, Bucketize, LogOp, Clip, NormalizeMinMax and ListSlice encode `cls` frames (Dask) a partition
    at a time."""
    for proc in (JoinExternal, Bucketize, LogOp, Clip, NormalizeMinMax, ListSlice):
        register_proc(proc, 'encodes', _rows_encodes, cls)
    register_proc(Bucketize, 'setups', _bucketize_setups, cls)
    register_proc(NormalizeMinMax, 'setups', _minmax_setups, cls)
