"""fastai's `Categorify`, `FillMissing`, `Normalize` and `Categorize` on a Dask-backed Tabular: `setups` learn over the
partitions exactly the state they learn from the same rows in memory (dask/stats.py); `encodes` run the in-memory
ones (procs.py) on each partition, lazily, so the codes, fills and normalised values are the in-memory ones."""
from __future__ import annotations

import weakref
import numpy as np
import pandas as pd
from fastai.data.block import TransformBlock
from fastai.data.transforms import Categorize, CategoryMap, Normalize
from fastai.tabular import core as fatc
from fastai.tabular.core import FillMissing, FillStrategy

from ..backend import explode_lists, is_cudf, sorted_uniques, to_host, to_pandas
from ..checks import check_fill_value, check_labels, check_unfilled_nan
from ..core import TabularGPU
from ..hashing import HashBucket, HashedCross, bucket_labels, is_bucket_dtype
from ..procs import (
    Categorify,
    bag_width,
    buckets_of,
    categorify_codes,
    category_map,
    keep_frequent,
    learn_bucket_counts,
    register_proc,
    vocab_values,
)
from .stats import compute, delayed, exact_median, exact_mode, exact_moments, mean_dtype

__all__ = ['register_dask_procs']

_INDEXES = weakref.WeakKeyDictionary()   # Categorify -> {column: its vocabulary as a pandas Index}, in each process

def _vocab_index(proc, n) -> pd.Index:
    "Column `n`'s vocabulary as a pandas Index, made once per process: its hash table then serves every partition."
    d = _INDEXES.setdefault(proc, {})
    if n not in d: d[n] = pd.Index(list(vocab_values(proc, n)), tupleize_cols=False)
    return d[n]

def _apply(part, proc, names:dict):
    "`proc`'s in-memory encodes on one partition's columns, as on a `TabularGPU` of them."
    if isinstance(proc, fatc.Categorify) and not is_cudf(part):
        # procs.py's Categorify encodes, with the vocabulary's Index kept (a list would be hashed again each partition)
        return pd.DataFrame({n: categorify_codes(proc, n, part[n], _vocab_index(proc, n)) for n in names['cat_names']},
                            index=part.index)
    t = TabularGPU(part, do_setup=False, reduce_memory=False, y_block=TransformBlock(), **names)
    proc(t)
    return t.items

def _names_read(proc, to) -> dict:
    "The names a proc's encodes read: only those columns go through it, so a later pass over others skips it."
    have = set(to.items.columns)
    names = dict(cat_names=[], cont_names=[], y_names=[], multi_hot={})
    if isinstance(proc, fatc.Categorify): names['cat_names'] = [n for n in to.cat_names if n not in to.multi_hot]
    elif isinstance(proc, FillMissing): names['cont_names'] = [n for n in to.cont_names if n in proc.na_dict]
    elif isinstance(proc, Normalize): names['cont_names'] = list(to.cont_names)
    elif isinstance(proc, Categorize): names['y_names'] = list(to.y_names)
    elif isinstance(proc, HashBucket): names['cat_names'] = list(proc.names)
    elif isinstance(proc, HashedCross): names['cat_names'] = list(dict.fromkeys(c for p in proc.names for c in p))
    names.update({k: [n for n in v if n in have] for k,v in names.items() if k != 'multi_hot'})
    return names

def _encodes(self, to):
    """Encode lazily: the columns this proc reads go through its in-memory encodes a partition at a time (the proc is
    one node of the graph, not one per task), and replace theirs in `items`."""
    import dask
    names = _names_read(self, to)
    cols = names['cat_names'] + names['cont_names'] + names['y_names']
    if not cols: return to
    meta = _apply(to.items[cols]._meta, self, names)   # the output's columns and dtypes, from an empty partition
    out = to.items[cols].map_partitions(_apply, dask.delayed(self), names, meta=meta)
    to.items = to.items.assign(**{c: out[c] for c in meta.columns})
    if isinstance(self, FillMissing) and self.add_col:   # as the in-memory encodes names its `_na` columns
        for n in self.na_dict:
            if n+'_na' not in to.cat_names: to.cat_names.append(n+'_na')
    for n in getattr(self, 'made_names', ()):   # a HashedCross's columns
        if n not in to.cat_names: to.cat_names.append(n)
    return to

# --- Categorify ---------------------------------------------------------------------------------------------------
def _lens_hist(part, n):
    "How many rows of the partition have lists of each length (a missing list counts 1, as `explode_lists` says)."
    return np.bincount(to_host(explode_lists(part[n])[1]))

def _known_categories(col) -> list|None:
    "A categorical column's categories when Dask knows them (fastai takes a category column's vocab from them)."
    return list(to_host(col._meta.cat.categories)) if getattr(col.dtype, 'name', '') == 'category' else None

def _categorify_setups(self, to):
    mf, mv, mb = getattr(self, 'min_freq', None), getattr(self, 'max_vocab', None), getattr(self, 'max_bag', None)
    self.classes, self.multi_hot_lens = {}, {}
    if getattr(self, 'num_buckets', None): self.bucket_counts = learn_bucket_counts(self, to)
    fixed, lazy, hashed = {}, {}, set()
    for n in to.cat_names:
        col = to.cols([n])[n]
        if n in to.multi_hot: col = col.explode()   # a list column: its elements
        if is_bucket_dtype(col.dtype): hashed.add(n)   # HashBucket's or HashedCross' buckets, all kept
        fixed[n] = _known_categories(col) if n in hashed else to.scan.vocab.get(n) or _known_categories(col)
        if (mf or mv) and n not in hashed: lazy[n] = col.dropna().value_counts()
        elif fixed[n] is None: lazy[n] = col.dropna().unique(split_out=1)
    got = compute(lazy)[0]
    # list lengths of all rows (the bag width), a histogram per partition (a separate pass: Dask computes its
    # collections and delayed tasks apart)
    hists = compute({n: [delayed(_lens_hist)(p, n) for p in to.full_items[[n]].to_delayed()]
                     for n in to.cat_names if n in to.multi_hot})[0]
    for n in to.cat_names:
        if n in got: got[n] = to_pandas(got[n])
        vals = fixed[n]
        if vals is None: vals = sorted_uniques(pd.Series(got[n].index if mf or mv else got[n].to_numpy(), name=n))
        vals = keep_frequent(vals, got[n], mf, mv) if (mf or mv) and n not in hashed else vals
        self.classes[n] = category_map(vals + bucket_labels(buckets_of(self, n)))
        if n in hists:
            h = hists[n]
            hist = np.zeros(max(len(x) for x in h), np.int64)
            for x in h: hist[:len(x)] += x
            self.multi_hot_lens[n] = bag_width(hist, n, mb.get(n) if isinstance(mb, dict) else mb)

# --- FillMissing --------------------------------------------------------------------------------------------------
def _fillmissing_setups(self, to):
    strategy = getattr(FillStrategy, self.fill_strategy) if isinstance(self.fill_strategy, str) else self.fill_strategy
    conts = list(to.cont_names)
    scan = to.scan   # NaN counted by `_before_procs`, in its pass over the continuous columns
    missing = [n for n in conts if scan.nan_train[n]]
    check_unfilled_nan([n for n in conts if scan.nan_all[n] and not scan.nan_train[n]], has_fill=True)
    parts = to.cols(missing).to_delayed() if missing else []
    if strategy is FillStrategy.median: vals = exact_median(parts, missing, {n: to.items[n].dtype for n in missing})
    elif strategy is FillStrategy.mode: vals = exact_mode(parts, missing)
    elif strategy is FillStrategy.constant: vals = {n: self.fill_vals[n] for n in missing}
    else: raise TypeError(f"FillMissing(fill_strategy={strategy!r}) has no Dask implementation: use median, mode or "
                          "constant")
    for n,v in vals.items(): check_fill_value(n, v)
    self.na_dict, self.fill_strategy = vals, strategy.__name__

# --- Normalize ----------------------------------------------------------------------------------------------------
def _normalize_setups(self, to):
    trn, conts = to.train, list(to.cont_names)
    dtypes = {c: trn.items[c].dtype for c in conts}
    means, stds = exact_moments(trn.cols(conts).to_delayed(), conts, dtypes) if conts else ({}, {})
    # pandas adds 1e-7 to the std Series, in its common dtype
    plus = np.array([stds[c] for c in conts], dtype=mean_dtype(list(dtypes.values()))) + 1e-7
    self.means, self.stds = means, dict(zip(conts, plus))
    return self(to)

# --- Categorize (the target of a classification) -------------------------------------------------------------------
def _categorize_setups(self, to):
    if len(to.y_names) > 0:
        n = to.y_names[0]
        col, cats = to.train.cols([n])[n], _known_categories(to.items[n])
        train, every = (to_pandas(u) for u in compute(col.unique(split_out=1), to.items[n].unique(split_out=1)))
        if self.vocab is None:   # fastai's strict CategoryMap: a category column's categories seen in training
            present = set(train.dropna())
            vals = [c for c in cats if c in present] if cats is not None else sorted_uniques(train.rename(n))
            self.vocab = category_map(vals, add_na=False)
        else: self.vocab = CategoryMap(self.vocab, sort=False, add_na=self.add_na)
        self.c = len(self.vocab)
        check_labels(n, [v for v in every.dropna() if v not in self.vocab.o2i], self.vocab.items)
    return self(to)

def register_dask_procs(cls:type) -> None:
    "Make fastai's procs learn over the partitions of `cls` frames (Dask), and encode them a partition at a time."
    for proc, setups in ((fatc.Categorify, _categorify_setups), (Categorify, _categorify_setups),
                         (FillMissing, _fillmissing_setups), (Normalize, _normalize_setups),
                         (Categorize, _categorize_setups), (HashBucket, None), (HashedCross, None)):
        # the hashing procs learn nothing: their in-memory setups check the columns
        if setups is not None: register_proc(proc, 'setups', setups, cls)
        register_proc(proc, 'encodes', _encodes, cls)
