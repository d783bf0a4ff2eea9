"""fastai's `Categorify`, `FillMissing`, `Normalize` and `Categorize` on a Dask-backed Tabular: `setups` learn over the
partitions exactly the state they learn from the same rows in memory (dask/stats.py); `encodes` run the in-memory
ones (ops/procs.py) on each partition, lazily, so the codes, fills and normalised values are the in-memory ones."""
from __future__ import annotations

import dataclasses
import weakref
import numpy as np
import pandas as pd
from fastai.data.block import TransformBlock
from fastai.data.transforms import Categorize, CategoryMap, Normalize
from fastai.tabular import core as fatc
from fastai.tabular.core import FillMissing, FillStrategy

from ..backend import explode_lists, is_cudf, py_values, sorted_uniques, to_host, to_pandas
from ..checks import check_fill_value, check_labels, check_unfilled_nan
from ..core import TabularGPU
from ..ops.hashing import HashBucket, HashedCross, bucket_labels, is_bucket_dtype
from ..ops.procs import (
    Categorify,
    bag_width,
    buckets_of,
    categorify_codes,
    category_map,
    check_joint,
    joint_of,
    keep_frequent,
    learn_bucket_counts,
    normalize_stats,
    register_proc,
    set_joint_vocab,
    vocab_values,
)
from .scan import ColumnValues
from .shipping import ship, unshipped
from .stats import compute, delayed, exact_median, exact_mode, exact_moments, mean_dtype, replace_columns

__all__ = []

_INDEXES = weakref.WeakKeyDictionary()   # Categorify -> {column: its vocabulary as a pandas Index}, in each process
# Categorify -> {column: (categories, the code of each and of a missing value, whether each is its category code + 1)}
_LUTS = weakref.WeakKeyDictionary()

def _vocab_index(proc, n) -> pd.Index:
    "Column `n`'s vocabulary as a pandas Index, made once per process: its hash table then serves every partition."
    d = _INDEXES.setdefault(proc, {})
    if n not in d:
        v = list(vocab_values(proc, n))
        # strings as Python objects: what the vocabulary holds, without pandas 3 converting them all to Arrow's
        index = pd.Index(v, tupleize_cols=False, dtype=object if v and isinstance(v[0], str) else None)
        # its hash table built here (the uniqueness check builds it), before the scheduler's threads share it: pandas 2
        # builds it on first use, and two threads doing so at once can find it half-filled (`InvalidIndexError`)
        if not index.is_unique: raise ValueError(f"Categorify's vocabulary of column {n!r} holds a value twice")
        d[n] = index
    return d[n]

def _category_codes(proc, n, col):
    """Categorify's codes of a Categorical column (the scan's cache gives cat columns as Categoricals over the values of
    all rows): its in-memory codes of each category, and of a missing value, computed once per process and taken by the
    rows' category codes."""
    d = _LUTS.setdefault(proc, {})
    cats = col.dtype.categories
    if n not in d or d[n][0] is not cats:
        each = pd.Series(pd.Categorical.from_codes(np.arange(-1, len(cats)), dtype=col.dtype, validate=False))
        # the usual case, the vocabulary is the categories: theirs is the hash table then, its lookup of itself quick
        vocab = vocab_values(proc, n)
        same = len(vocab) == len(cats) and np.array_equal(np.asarray(vocab, dtype=object), cats.to_numpy(dtype=object))
        codes = categorify_codes(proc, n, each, cats if same else _vocab_index(proc, n)).to_numpy()
        # each category's code its own + 1 (#na# 0, a missing row's -1 + 1): an add then, a tenth of a gather's time
        shifted = np.array_equal(codes, np.arange(len(codes)))
        d[n] = cats, np.roll(codes, -1), shifted   # the missing value's code last: a missing row's -1 reads it
    _, lut, shifted = d[n]
    c = col.cat.codes.to_numpy()
    return pd.Series(np.add(c, 1, dtype=lut.dtype) if shifted else lut[c], index=col.index, name=n)

def _categorify_part(proc, n, col):
    "Categorify's codes of a partition's column: its categories' (see `_category_codes`), else each value looked up."
    # (an empty one, Dask's meta, has no categories to look up: its dtype is all it gives)
    if isinstance(col.dtype, pd.CategoricalDtype) and len(col): return _category_codes(proc, n, col)
    if not len(col):   # nothing to look up: an index as long as the vocabulary gives the codes' dtype
        col = pd.Series([], dtype=object, index=col.index, name=col.name)
        return categorify_codes(proc, n, col, pd.RangeIndex(len(vocab_values(proc, n))))
    # the vocabulary's Index kept (a list would be hashed again each partition)
    return categorify_codes(proc, n, col, _vocab_index(proc, n))

def _apply(part, proc, names:dict):
    "`proc`'s in-memory encodes on one partition's columns, as on a `TabularGPU` of them."
    proc = unshipped(proc)
    # a performance path for pandas: codes from each column's categories, with no Tabular (cuDF's are on the device)
    if isinstance(proc, fatc.Categorify) and not is_cudf(part):
        return pd.DataFrame({n: _categorify_part(proc, n, part[n]) for n in names['cat_names']}, index=part.index)
    # a shallow copy as its frame (procs replace columns, never write into them): a copy of every column, which
    # `TabularGPU` makes to leave a caller's frame alone, would cost more than the encodes
    t = TabularGPU(part.copy(deep=False), do_setup=False, reduce_memory=False, inplace=True, y_block=TransformBlock(),
                   **names)
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
    """Encode lazily: the columns this proc reads go through its in-memory encodes a partition at a time (the proc
    shipped to the tasks: shipping.py), and replace theirs in `items`."""
    names = _names_read(self, to)
    cols = names['cat_names'] + names['cont_names'] + names['y_names']
    if not cols: return to
    meta = _apply(to.items[cols]._meta, self, names)   # the output's columns and dtypes, from an empty partition
    out = to.items[cols].map_partitions(_apply, ship(self, to), names, meta=meta)
    to.items = replace_columns(to.items, out)
    # a HashedCross adds its crosses and leaves the columns it reads as they were: their scanned facts still hold
    kept = set(cols) if isinstance(self, HashedCross) else set()
    # FillMissing, Normalize: the held training conts encoded as the partitions will be, if a proc still to be set up
    # learns from them (else they go, with the facts of the columns rewritten)
    learners = tuple(p for p in to.scan.learners if p is not self)
    held = _held(to, names['cont_names']) if learners and cols == names['cont_names'] else None
    scan = dataclasses.replace(to.scan.rewritten([c for c in meta.columns if c not in kept]), learners=learners)
    if held is not None:
        done = _apply(held, self, names)
        scan = dataclasses.replace(scan, train=scan.train.assign(**{c: done[c] for c in names['cont_names']}))
    if isinstance(self, FillMissing) and self.add_col:   # as the in-memory encodes names its `_na` columns
        for n in self.na_dict:
            if n+'_na' not in to.cat_names: to.cat_names.append(n+'_na')
        scan = dataclasses.replace(scan, values={**scan.values, **_na_values(self, to)})
    to.scan = scan
    for n in getattr(self, 'made_names', ()):   # a HashedCross's columns
        if n not in to.cat_names: to.cat_names.append(n)
    return to

# --- Categorify ---------------------------------------------------------------------------------------------------
def _lens_hist(part, n):
    "How many rows of the partition have lists of each length (a missing list counts 1, as `explode_lists` says)."
    return np.bincount(to_host(explode_lists(part[n])[1]))

def _known_categories(col) -> list|None:
    "A categorical column's categories when Dask knows them (fastai takes a category column's vocab from them)."
    from dask.dataframe.utils import has_known_categories
    if getattr(col.dtype, 'name', '') != 'category' or not has_known_categories(col): return None
    return list(to_host(col._meta.cat.categories))

def _categorify_setups(self, to):
    ours = isinstance(self, Categorify)   # fastai's own class has none of the options
    if ours: self.check_names(to.cat_names)
    opt = (lambda name, n: self.option(name, n)) if ours else (lambda name, n: None)
    mb = getattr(self, 'max_bag', None)
    self.classes, self.multi_hot_lens = {}, {}
    if getattr(self, 'num_buckets', None): self.bucket_counts = learn_bucket_counts(self, to)
    groups = joint_of(self)
    check_joint(self, to, groups)
    # the counts each column needs: for min_freq / max_vocab, and a joint group's (its cut is on the summed counts)
    counted = lambda n: bool(opt('min_freq', n) or opt('max_vocab', n) or n in groups)
    fixed, lazy, hashed, hists = {}, {}, set(), {}
    for n in to.cat_names:
        if is_bucket_dtype(to.items._meta[n].dtype): hashed.add(n)   # HashBucket's or HashedCross' buckets, all kept
        seen = to.scan.values.get(n)   # what the scan counted of the column as it came (no pass)
        if seen is not None and n not in hashed:
            fixed[n] = seen.vocab()
            if counted(n): lazy[n] = seen.counts()
            if seen.lens is not None: hists[n] = seen.lens
            continue
        col = to.cols([n])[n]   # a Dask column only for those the scan did not count (a `cols` call costs)
        if n in to.multi_hot: col = col.explode()   # a list column: its elements
        fixed[n] = _known_categories(col)
        if counted(n) and n not in hashed: lazy[n] = col.dropna().value_counts()
        elif fixed[n] is None: lazy[n] = col.dropna().unique(split_out=1)
    todo = {k: v for k,v in lazy.items() if not isinstance(v, pd.Series)}
    if todo: lazy.update(compute(todo)[0])
    # list lengths of all rows (the bag width), a histogram per partition (a separate pass: Dask computes its
    # collections and delayed tasks apart)
    more = {n: [delayed(_lens_hist)(p, n) for p in to.full_items[[n]].to_delayed()]
            for n in to.cat_names if n in to.multi_hot and n not in hists}
    for n,h in (compute(more)[0] if more else {}).items():
        hists[n] = np.zeros(max(len(x) for x in h), np.int64)
        for x in h: hists[n][:len(x)] += x
    joint = {}
    for n in to.cat_names:
        if n in hists: self.multi_hot_lens[n] = bag_width(hists[n], n, mb.get(n) if isinstance(mb, dict) else mb)
        mf, mv, given = opt('min_freq', n), opt('max_vocab', n), opt('vocab', n)
        got = to_pandas(lazy[n]) if n in lazy else None
        vals = fixed[n]
        if vals is None: vals = sorted_uniques(pd.Series(got.index if counted(n) else got.to_numpy(), name=n))
        if n in groups:
            joint[n] = (vals, got)
            continue
        vals = keep_frequent(vals, got, mf, mv) if (mf or mv) and n not in hashed else vals
        if given is not None: vals = list(given)
        if n in to.multi_hot: vals = py_values(vals)   # as in memory: a list's elements as Python objects
        self.classes[n] = category_map(vals + bucket_labels(buckets_of(self, n)))
    for g in dict.fromkeys(map(tuple, groups.values())): set_joint_vocab(self, to, list(g), joint)
    self.classes = {n: self.classes[n] for n in to.cat_names}   # fastai's order, joint columns too

def _na_values(proc, to) -> dict:
    """{`<cont>_na`: ColumnValues} of the flags FillMissing adds, from the scan's missing counts of their conts: True
    where a row is missing, False where not (so Categorify needs no pass over them)."""
    rows, res = to.scan.rows, {}
    for n in proc.na_dict:
        f = to.scan.conts.get(n)
        if f is None: continue
        train = np.array([rows[0] - f.nan_train, f.nan_train], dtype=np.int64)
        have = np.array([rows.sum() - f.nan_all, f.nan_all]) > 0
        res[n+'_na'] = ColumnValues(np.array([False, True])[have], train[have], False)
    return res

def learns_from_conts(proc) -> bool:
    "Whether `proc`'s setups learn statistics of the continuous columns' training values (Normalize, FillMissing's)."
    return isinstance(proc, Normalize) or (isinstance(proc, FillMissing) and proc.fill_strategy not in
                                           (FillStrategy.constant, 'constant'))

def _held(to, names:list) -> pd.DataFrame|None:
    "The training rows' columns `names` where the scan holds them in memory (`DaskScan.train`), else None."
    held = getattr(to, 'scan', None) and to.scan.train
    return held[names] if held is not None and all(n in held.columns for n in names) else None

def _training_parts(trn, names:list) -> list:
    """Columns `names` of `trn`, a training subset: one frame in memory where the scan holds them (the median's
    bracket over it is quicker than pandas' median), else the delayed partitions."""
    held = _held(trn, names)
    return [held] if held is not None else trn.cols(names).to_delayed()

# --- FillMissing --------------------------------------------------------------------------------------------------
def _fillmissing_setups(self, to):
    strategy = getattr(FillStrategy, self.fill_strategy) if isinstance(self.fill_strategy, str) else self.fill_strategy
    conts = list(to.cont_names)
    facts = to.cont_facts(conts)   # the scan's missing counts
    missing = [n for n in conts if facts[n].nan_train]
    check_unfilled_nan([n for n in conts if facts[n].nan_all and not facts[n].nan_train], has_fill=True)
    parts = _training_parts(to, missing) if missing else []
    if strategy is FillStrategy.median:
        # the scan's samples of the training values bracket the median: one pass then counts and gathers in the bracket
        samples = {n: facts[n].samples for n in missing} if missing and all(facts[n].samples for n in missing) else None
        vals = exact_median(parts, missing, {n: to.items[n].dtype for n in missing}, samples=samples)
    elif strategy is FillStrategy.mode: vals = exact_mode(parts, missing)
    elif strategy is FillStrategy.constant: vals = {n: self.fill_vals[n] for n in missing}
    else: raise TypeError(f"FillMissing(fill_strategy={strategy!r}) has no Dask implementation: use median, mode or "
                          "constant")
    for n,v in vals.items(): check_fill_value(n, v)
    self.na_dict, self.fill_strategy = vals, strategy.__name__

# --- Normalize ----------------------------------------------------------------------------------------------------
def _normalize_setups(self, to):
    trn, conts = to.train, list(to.cont_names)
    held = _held(trn, conts) if conts else None
    if held is not None:   # the training rows in memory: the in-memory setups' own statistics
        self.means, self.stds = normalize_stats(held)
        return self(to)
    dtypes = {c: trn.items[c].dtype for c in conts}
    means, stds = ({}, {}) if not conts else exact_moments(trn.cols(conts).to_delayed(), conts, dtypes,
                                                           lens=trn.partition_rows())
    # pandas adds 1e-7 to the std Series, in its common dtype
    plus = np.array([stds[c] for c in conts], dtype=mean_dtype(list(dtypes.values()))) + 1e-7
    self.means, self.stds = means, dict(zip(conts, plus))
    return self(to)

# --- Categorize (the target of a classification) -------------------------------------------------------------------
def _categorize_setups(self, to):
    if len(to.y_names) > 0:
        n = to.y_names[0]
        seen = to.scan.values.get(n)   # the target's values as the scan counted them (no pass)
        if seen is not None:
            vals = list(seen.values[seen.train > 0])   # fastai's strict CategoryMap: those seen in training rows
            train, every = pd.Series(vals, dtype=object), pd.Series(seen.values, dtype=object)
        else:
            col, cats = to.train.cols([n])[n], _known_categories(to.items[n])
            train, every = (to_pandas(u) for u in compute(col.unique(split_out=1), to.items[n].unique(split_out=1)))
            present = set(train.dropna())
            vals = [c for c in cats if c in present] if cats is not None else sorted_uniques(train.rename(n))
        if self.vocab is None: self.vocab = category_map(vals, add_na=False)
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
