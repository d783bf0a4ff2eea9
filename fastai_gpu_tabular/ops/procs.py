"""fastai's own `Categorify`, `FillMissing`, `Normalize` and `Categorize`, computed on the frame's device (cuDF or
pandas)."""
from __future__ import annotations

import functools
import numbers
import operator
import warnings
from collections import defaultdict
from collections.abc import Callable
import numpy as np
import pandas as pd
from fastai.data.transforms import Categorize, CategoryMap, Normalize
from fastai.tabular import core as fatc
from fastai.tabular.core import FillMissing, FillStrategy, Tabular
from fastcore.basics import store_attr
from fastcore.foundation import L

from ..backend import (
    column_op,
    encode_codes,
    explode_lists,
    fill_stat,
    holds_py_bools,
    is_categorical,
    is_cudf,
    normalize_stats,
    py_values,
    sorted_uniques,
    take_values,
    to_host,
    to_pandas,
)
from ..checks import check_fill_value, check_kind, check_labels, fill_nan_check, guard_setups
from .hashing import bucket_labels, check_buckets, check_seed, is_bucket_dtype, oov_buckets

__all__ = ['Categorify']
# also public, not star-exported (a generic name): `fill_value`

class Categorify(fatc.Categorify):
    """fastai's `Categorify`, plus options for huge ID columns: values seen fewer than `min_freq` times in the training
    rows, or beyond the `max_vocab` most frequent, go to `#na#` (ties broken by value, so cuDF and pandas agree), or
    with `num_buckets` to that many out-of-vocabulary buckets after the vocabulary (hashing.py: the values it lacks, at
    set-up or later, hashed with `seed`; `classes` shows bucket k as '#bucket{k}#'). `vocab` gives a column's
    vocabulary (in the order given, as fastai's `Categorize(vocab=)` keeps it; other values go to `#na#`), and `joint`
    groups of columns that share one vocabulary (the union of their training values, in fastai's order), so that
    `tabular_learner` gives each group one embedding table. With none set it is fastai's Categorify exactly."""
    def __init__(self,
        min_freq:int|dict=None, # keep values seen at least this often in the training rows (or {name: count})
        max_vocab:int|dict=None, # keep at most this many values (besides '#na#'), the most frequent (or {name: count})
        max_bag:int|dict=None, # slots of a multi-hot column (or {name: slots}); default: see `bag_width`
        num_buckets:int|dict=None, # out-of-vocabulary buckets of each single-hot column (or {name: buckets})
        seed:int=0, # the hash's seed for those buckets
        vocab:dict=None, # {name: values}: the column's vocabulary as given (no '#na#', no duplicates)
        joint:list=None # groups of columns sharing a vocabulary (and an embedding table): [['item_id', 'last_items']]
    ):
        super().__init__()
        min_freq,max_vocab = _counts('min_freq', min_freq),_counts('max_vocab', max_vocab)
        for k,v in (dict(max_bag) if isinstance(max_bag, dict) else {'max_bag': max_bag}).items():
            if v is not None and (int(v) != v or v < 1): raise ValueError(f"{k} must be a positive integer, got {v!r}")
        for k,v in (dict(num_buckets) if isinstance(num_buckets, dict) else {None: num_buckets}).items():
            if v is not None: check_buckets(v, 'num_buckets' if k is None else f"num_buckets of {k!r}")
        check_seed(seed)
        vocab,joint = _given_vocab(vocab),_joint_groups(joint)
        for g in joint:   # a group has one vocabulary: per-column options must agree over it
            for name,opt in (('min_freq', min_freq), ('max_vocab', max_vocab), ('vocab', vocab),
                             ('num_buckets', num_buckets)):
                if isinstance(opt, dict) and len({repr(opt.get(c)) for c in g}) > 1:
                    raise ValueError(f"Categorify({name}) differs over the joint group {g}: give its columns one value")
        store_attr()

    def option(self, name:str, n:str):
        "The option `name` (min_freq, max_vocab, vocab) of column `n`: its dict's entry, or the option itself."
        v = getattr(self, name, None)
        return v.get(n) if isinstance(v, dict) else v

    def check_names(self, cat_names) -> None:
        "An error naming the option and the columns its dicts (and `joint`) name that are not cat columns."
        for name in ('min_freq', 'max_vocab', 'vocab'):
            v = getattr(self, name, None)
            bad = [n for n in v if n not in cat_names] if isinstance(v, dict) else []
            if bad: raise ValueError(f"Categorify({name}) names {bad}, which are not cat columns {list(cat_names)}")
        bad = [n for g in getattr(self, 'joint', None) or [] for n in g if n not in cat_names]
        if bad: raise ValueError(f"Categorify(joint) names {bad}, which are not cat columns {list(cat_names)}")

    def setups(self, to:Tabular):
        "On other Tabulars (fastai's TabularPandas) it is fastai's Categorify, which has none of these options."
        if self.min_freq or self.max_vocab or self.max_bag or self.num_buckets or self.vocab or self.joint:
            raise TypeError(f"Categorify(min_freq, max_vocab, max_bag, num_buckets, vocab, joint) needs a TabularGPU, "
                            f"not a {type(to).__name__}")
        return fatc.Categorify.setups(self, to)

def _counts(name:str, v):
    "`min_freq` / `max_vocab` checked: None, a positive integer, or {column: positive integer}."
    if v is None: return None
    def one(x, what):
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or int(x) != x or x < 1:
            raise ValueError(f"{what} must be a positive integer, got {x!r}")
        return int(x)
    if not isinstance(v, dict): return one(v, name)
    bad = [k for k in v if not isinstance(k, str)]
    if bad: raise TypeError(f"Categorify({name}) is a dict by column name: its keys {bad} are not names")
    return {k: one(x, f"{name} of {k!r}") for k,x in v.items()}

NA = '#na#'

def _given_vocab(vocab) -> dict|None:
    "`vocab` checked: {column: a list of distinct, non-missing values without '#na#'}."
    if vocab is None: return None
    if not isinstance(vocab, dict): raise TypeError(f"Categorify(vocab) must be a dict {{column: values}}, "
                                                    f"got a {type(vocab).__name__}")
    res = {}
    for n,vals in vocab.items():
        if isinstance(vals, (str, bytes, dict)) or not hasattr(vals, '__iter__'):
            raise TypeError(f"Categorify(vocab) of {n!r} must be a list of values, got a {type(vals).__name__}")
        vals = list(vals)
        if not vals: raise ValueError(f"Categorify(vocab) of {n!r} is empty")
        bad = [v for v in vals if v is None or (isinstance(v, float) and v != v) or (isinstance(v, str) and v == NA)]
        if bad: raise ValueError(f"Categorify(vocab) of {n!r} holds {bad[0]!r}: '#na#' (code 0) is added for it")
        if len(pd.Index(vals).unique()) != len(vals):
            dup = pd.Index(vals)[pd.Index(vals).duplicated()][0]
            raise ValueError(f"Categorify(vocab) of {n!r} holds {dup!r} twice")
        res[n] = vals
    return res

def _joint_groups(joint) -> list:
    "`joint` checked: a list of groups, each a list of two or more column names, no name in two groups."
    if joint is None: return []
    groups = [joint] if joint and all(isinstance(n, str) for n in joint) else list(joint)
    res, seen = [], set()
    for g in groups:
        if isinstance(g, str) or not all(isinstance(n, str) for n in g) or len(set(g)) < 2:
            raise ValueError(f"Categorify(joint) takes groups of two or more column names, got {g!r}")
        twice = [n for n in g if n in seen]
        if twice: raise ValueError(f"Categorify(joint) puts {twice} in two groups")
        seen.update(g)
        res.append(list(g))
    return res

class LazyCategoryMap(CategoryMap):
    """fastai's `CategoryMap` (`items`, and `o2i`: a `defaultdict(int)` with `add_na`, else a dict) whose `o2i` is built
    when first read: a dict of every value costs seconds for millions of them, and training from packed codes never
    reads it. It pickles and copies as fastai's own `CategoryMap` (its `o2i` built then), so an export holds nothing of
    this class. `index(a, b)` is `items[a:b]` as the pandas Index that encoding looks values up in, built once."""
    def __init__(self, items:list, add_na:bool, indexes:dict|None=None):
        self.items, self.add_na, self._indexes = L(items), add_na, dict(indexes or {})

    @functools.cached_property
    def o2i(self) -> dict:
        pairs = zip(self.items, range(len(self.items)))
        return defaultdict(int, pairs) if self.add_na else dict(pairs)

    def index(self, a:int, b:int) -> pd.Index:
        made = self.__dict__.setdefault('_indexes', {})
        if (a, b) not in made: made[a, b] = pd.CategoricalDtype(self.items[a:b]).categories
        return made[a, b]

    def __reduce_ex__(self, protocol):
        "A plain `CategoryMap` with fastai's two attributes (pickle refuses `copyreg.__newobj__` of another class)."
        return object.__new__, (CategoryMap,), {'items': self.items, 'o2i': self.o2i}

def category_map(values:list, add_na=True, index:pd.Index|None=None) -> CategoryMap:
    """A fastai `CategoryMap` (a `LazyCategoryMap`) from values already unique and ordered (fastai's own `__init__`
    loops over the column in Python); `index`, the Index of its first `len(index)` values if at hand, is kept."""
    k = int(add_na)
    return LazyCategoryMap(['#na#', *values] if add_na else list(values), add_na,
                           None if index is None else {(k, k + len(index)): index})

def _cat_values(col, strict=False) -> list:
    "fastai's vocabulary order: a categorical's categories as they are, else the sorted distinct values."
    if type(col.dtype).__name__ != 'CategoricalDtype': return sorted_uniques(col)   # pandas' or cuDF's
    cats = to_host(col.cat.categories).tolist()   # Python values, as iterating gives them, made in C
    if not strict: return cats
    present = set(to_host(col.dropna().drop_duplicates()))
    return [c for c in cats if c in present]

def freq_values(col, min_freq=None, max_vocab=None) -> list:
    """The vocabulary `Categorify(min_freq, max_vocab)` keeps from `col`: values counted at least `min_freq` times, the
    `max_vocab` most frequent of them (ties go to the earlier value), in fastai's order (categories', else sorted)."""
    return keep_frequent(_cat_values(col), to_host(col.value_counts(dropna=True)), min_freq, max_vocab)

def keep_frequent(vals:list, counts, min_freq=None, max_vocab=None) -> list:
    """The values of `vals`, in its order, counted (`counts`: a host Series by value) at least `min_freq` times: the
    `max_vocab` most frequent of them (ties go to the earlier value)."""
    counts = counts.astype('int64').reindex(pd.Index(vals, dtype=object)).fillna(0).to_numpy()
    keep = np.flatnonzero(counts >= (min_freq or 1))
    if max_vocab is not None and len(keep) > max_vocab:
        keep = np.sort(keep[np.argsort(-counts[keep], kind='stable')[:max_vocab]])
    return [vals[i] for i in keep]

def quantile_from_counts(values, counts, q:float) -> float:
    "`np.quantile(a, q)` of the array `a` that holds each of the sorted `values` `counts` times, without building it."
    values, cum = np.asarray(values), np.cumsum(counts)
    v = (cum[-1] - 1) * np.asarray(q, dtype='f8')   # numpy's virtual index for the 'linear' method
    i = int(np.floor(v))
    at = lambda k: values[np.searchsorted(cum, k, side='right')]   # the k-th value in sorted order
    a, b = at(i), at(min(i + 1, cum[-1] - 1))
    return float(np.quantile(np.array([a, b]), v - i))   # numpy's own interpolation between the two

def bag_width(hist, name:str, max_bag:int|None=None) -> int:
    """Slots for a multi-hot column whose list lengths `hist` counts (`hist[k]`: rows with k elements, `np.bincount` of
    the lengths; the Dask path adds the partitions' counts): `max_bag`, else the longest list, unless it is over 4x the
    99th percentile (a long tail: padding to it would cost memory and lookups for almost nothing), then that
    percentile, with a warning saying how many rows lose elements."""
    hist = np.asarray(hist)
    lens = np.flatnonzero(hist)   # the lengths present, sorted
    longest = max(int(lens[-1]), 1)
    if max_bag is None:
        p99 = max(int(np.ceil(quantile_from_counts(lens, hist[lens], 0.99))), 1)
        if longest <= 4 * p99: return longest
        max_bag = p99
    if max_bag < longest:
        cut = int(hist[max_bag + 1:].sum())
        warnings.warn(f"multi-hot column {name!r}: padding to {max_bag} slots, so {cut} of {int(hist.sum())} rows "
                      f"(lists up to {longest} long) lose their elements past {max_bag}; "
                      "pass Categorify(max_bag=...) to change", stacklevel=2)
    return min(max_bag, longest)

# --- Categorify ---------------------------------------------------------------------------------------------------
def buckets_of(proc, n) -> int:
    "Out-of-vocabulary buckets `proc` (a set-up Categorify) gave column `n` (its `bucket_counts`; fastai's has none)."
    return (getattr(proc, 'bucket_counts', None) or {}).get(n, 0)

def learn_bucket_counts(proc, to) -> dict:
    """{column: buckets} of `Categorify(num_buckets)`: an int buckets every single-hot column but those HashBucket or
    HashedCross made (all buckets already) and FillMissing's `_na` flags (True/False); a dict the ones it names."""
    nb = getattr(proc, 'num_buckets', None)
    if not nb: return {}
    skip = lambda n: (n in to.multi_hot or is_bucket_dtype(to.items[n].dtype)
                      or (n.endswith('_na') and n[:-3] in to.cont_names))
    if not isinstance(nb, dict): return {n: int(nb) for n in to.cat_names if not skip(n)}
    bad = [n for n in nb if n not in to.cat_names or skip(n)]
    if bad: raise ValueError(f"Categorify(num_buckets) names {bad}, which are not single-hot cat columns")
    return {n: int(v) for n,v in nb.items()}

def vocab_values(proc, n) -> list:
    "Column `n`'s vocabulary without `#na#` and the bucket labels: the values that code as their position + 1."
    items = proc.classes[n].items
    return items[1:len(items) - buckets_of(proc, n)]

def vocab_index(proc, n):
    "Column `n`'s `vocab_values` as the index `encode_codes` looks values up in (built once for a `LazyCategoryMap`)."
    cm = proc.classes[n]
    stop = len(cm.items) - buckets_of(proc, n)
    return cm.index(1, stop) if isinstance(cm, LazyCategoryMap) else pd.CategoricalDtype(cm.items[1:stop]).categories

def categorify_codes(proc, n, col, vocab=None):
    """Categorify's codes of `col` (column `n`): its vocabulary's (`vocab`, default `vocab_values`), then its buckets;
    a warning first if `col` holds another kind of value than the vocabulary (`check_kind`)."""
    nb = buckets_of(proc, n)
    check_kind(n, col, proc.classes[n].items[1:2] if len(proc.classes[n]) > nb + 1 else [], nb)
    codes = encode_codes(col, vocab_index(proc, n) if vocab is None else vocab, add=1)
    return oov_buckets(codes, col, len(proc.classes[n]) - nb, nb, proc.seed) if nb else codes

def _categorify_setups(self, to):
    ours = isinstance(self, Categorify)   # fastai's own class has none of the options
    if ours: self.check_names(to.cat_names)
    opt = (lambda name, n: self.option(name, n)) if ours else (lambda name, n: None)
    self.classes,self.multi_hot_lens = {},{}
    if getattr(self, 'num_buckets', None): self.bucket_counts = learn_bucket_counts(self, to)
    groups = joint_of(self)
    check_joint(self, to, groups)
    elems = {}   # a joint group's columns' training values, its vocabulary made after all of them
    for n in to.cat_names:
        col = to.items[n]
        if n in to.multi_hot:    # a vocab over the training rows' elements; the bag width from the lists of all rows
            els,lens = explode_lists(to.full_items[n])
            col = els[els.index < len(to.items)]   # training rows come first in the full frame
            mb = getattr(self, 'max_bag', None)
            hist = to_host(np.bincount(lens))   # CuPy's bincount on a CuPy array
            self.multi_hot_lens[n] = bag_width(hist, n, mb.get(n) if isinstance(mb, dict) else mb)
        if n in groups:
            elems[n] = col
            continue
        mf,mv,given = opt('min_freq', n),opt('max_vocab', n),opt('vocab', n)
        # a category column's vocab is its categories (from all rows, for fastai's df_shrink cast); frequencies
        # (min_freq, max_vocab) are counted on the training rows
        # a hashed column (HashBucket, HashedCross) keeps all its buckets: its codes are bucket + 1
        cut = (mf or mv) and not is_bucket_dtype(col.dtype)
        if given is not None: values = list(given)
        else: values = freq_values(col, mf, mv) if cut else _cat_values(col)
        # pandas holds a bool column with missing values as Python objects: fastai's vocab has `bool`, not `np.bool_`
        if given is None and n not in to.multi_hot and holds_py_bools(to.full_items[n]):
            values = [bool(v) for v in values]
        if n in to.multi_hot: values = py_values(values)   # pandas' lists hold Python objects, cuDF's typed ones
        # a pandas categorical's categories are its vocab, as an Index at hand: encoding finds them equal, no lookup
        # (a performance path for pandas: a cuDF column's categories are on the device)
        same = given is None and not cut and not is_cudf(col) and is_categorical(col.dtype)
        self.classes[n] = category_map(values + bucket_labels(buckets_of(self, n)),
                                       index=col.cat.categories if same else None)
    for g in dict.fromkeys(map(tuple, groups.values())):
        counts = {n: (_cat_values(elems[n]), to_host(elems[n].value_counts(dropna=True))) for n in g}
        set_joint_vocab(self, to, list(g), counts)
    self.classes = {n: self.classes[n] for n in to.cat_names}   # fastai's order, joint columns too

def joint_of(proc) -> dict:
    "{column: its joint group} of `Categorify(joint)` (none for fastai's own)."
    return {n: g for g in getattr(proc, 'joint', None) or [] for n in g}

def check_joint(proc, to, groups:dict) -> None:
    "A joint group's columns take no buckets (hashed values or `num_buckets`): their codes would differ."
    bad = [n for n in groups if buckets_of(proc, n) or is_bucket_dtype(to.items[n].dtype)]   # a Dask column's too
    if bad: raise ValueError(f"Categorify(joint) names {bad}, which have hash buckets (HashBucket, HashedCross or "
                             "num_buckets): a joint vocabulary holds values, not buckets")

def set_joint_vocab(proc, to, g:list, counts:dict) -> None:
    """One vocabulary for the joint group `g` from each column's values and counts (`counts`: {column: (values, host
    counts by value)}): the given `vocab`, else the union of the values, sorted, cut by `min_freq` / `max_vocab`
    on the counts summed over the group. Every column of the group holds the same `CategoryMap`."""
    n0 = g[0]
    mf,mv,given = proc.option('min_freq', n0),proc.option('max_vocab', n0),proc.option('vocab', n0)
    if given is not None: values = list(given)
    else:
        try: values = sorted_uniques(pd.Series([v for n in g for v in counts[n][0]], dtype=object))
        except TypeError as e: raise TypeError(f"Categorify(joint) group {g}: {e}") from None
        if mf or mv:
            total = pd.concat([counts[n][1] for n in g]).groupby(level=0).sum()
            values = keep_frequent(values, total, mf, mv)
    if any(n in to.multi_hot for n in g): values = py_values(values)
    cm = category_map(values)
    for n in g: proc.classes[n] = cm

def _categorify_encodes(self, to):
    # multi-hot columns keep their values in the frame: their codes are packed (a padded block) with the tensors
    for n in to.cat_names:
        if n not in to.multi_hot: to.set_col(n, categorify_codes(self, n, to.items[n]))

def _on_host(to):
    """Decoding, a proc at a time as fastai's notebooks call it (`to.procs.categorify.decode(to)`), runs on the host:
    a column of `#na#` among numbers has no cuDF dtype, and decoded values are for display."""
    items = to.items
    if (host := to_pandas(items)) is not items: to.items = host

def _categorify_decodes(self, to):
    _on_host(to)
    for n in to.cat_names:
        if n not in to.multi_hot: to.set_col(n, take_values(self.classes[n].items, to.items[n]))

# --- FillMissing --------------------------------------------------------------------------------------------------
def fill_value(strategy, col, fill, name):
    "FillMissing's fill value of column `col` (`name`) by `strategy` (`fill`: the constant), checked."
    # pandas' mode would fail in `idxmax` rather than say that a column has no value
    v = fill_stat(strategy, col, fill) if strategy is FillStrategy.constant or col.notna().any() else None
    check_fill_value(name, v)
    return v

def _fillmissing_setups(self, to):
    strategy = getattr(FillStrategy, self.fill_strategy) if isinstance(self.fill_strategy, str) else self.fill_strategy
    missing = [n for n in to.cont_names if to.items[n].isna().any()]
    self.na_dict = {n: fill_value(strategy, to.items[n], self.fill_vals[n], n) for n in missing}
    self.fill_strategy = strategy.__name__

def _fillmissing_encodes(self, to):
    fill_nan_check(to, self.na_dict)
    for n,v in self.na_dict.items():
        col = to.items[n]
        if self.add_col: to.set_col(n+'_na', col.isna())
        to.set_col(n, col.fillna(v))
        if self.add_col and n+'_na' not in to.cat_names: to.cat_names.append(n+'_na')

# --- Normalize ----------------------------------------------------------------------------------------------------
def _normalize_setups(self, to):
    # a plain Transform: `setups` gets the whole object
    self.means,self.stds = normalize_stats(to.train.items[list(to.cont_names)])
    return self(to)

def operand_dtype(d:dict) -> np.dtype:
    "The dtype of the Series pandas makes of a means (stds) dict in fastai's `conts - means`: float32 only if all are."
    return pd.Series(list(d.values())).dtype if d else np.dtype('float64')

def _normalize_encodes(self, to):
    mt,st = operand_dtype(self.means),operand_dtype(self.stds)
    for n in to.cont_names:
        to.set_col(n, column_op(column_op(to.items[n], operator.sub, self.means[n], mt), operator.truediv,
                                self.stds[n], st))
    return to

def _normalize_decodes(self, to):
    mt,st = operand_dtype(self.means),operand_dtype(self.stds)
    for n in to.cont_names:
        to.set_col(n, column_op(column_op(to.items[n], operator.mul, self.stds[n], st), operator.add,
                                self.means[n], mt))
    return to

# --- Categorize (the target of a classification) -------------------------------------------------------------------
def _categorize_setups(self, to):
    if len(to.y_names) > 0:
        if self.vocab is None:
            self.vocab = category_map(_cat_values(to.train.items[to.y_names[0]], strict=True), add_na=False)
        else: self.vocab = CategoryMap(self.vocab, sort=False, add_na=self.add_na)
        self.c = len(self.vocab)
    return self(to)

def _categorize_encodes(self, to):
    for n in to.y_names:
        if n not in to.items.columns: continue
        col = to.items[n]
        codes = encode_codes(col, list(self.vocab.items), add=0)
        if (codes < 0).any(): check_labels(n, list(to_host(col[codes < 0].drop_duplicates())[:5]), self.vocab.items)
        to.set_col(n, codes)
    return to

def _categorize_decodes(self, to):
    _on_host(to)
    for n in to.y_names:
        if n in to.items.columns: to.set_col(n, take_values(self.vocab.items, to.items[n]))
    return to

def register_proc(proc:type, name:str, f:Callable, cls:type) -> None:
    "Register `f` as `proc.<name>` for `to: cls` (fasttransform's `@Proc def name(self, to: cls)` idiom)."
    def method(self, to): return f(self, to)
    method.__name__, method.__qualname__ = name, f'{proc.__name__}.{name}'
    method.__annotations__ = {'to': cls}
    proc(guard_setups(method) if name == 'setups' else method)

def register_procs(cls:type) -> None:
    "Make fastai's own procs compute on `cls` frames (cuDF or pandas); learned state keeps fastai's names and types."
    for proc, fs in ((fatc.Categorify, (_categorify_setups, _categorify_encodes, _categorify_decodes)),
                     # our subclass merged fastai's methods when it was created, so it needs its own registration
                     (Categorify, (_categorify_setups, _categorify_encodes, _categorify_decodes)),
                     (FillMissing, (_fillmissing_setups, _fillmissing_encodes, None)),
                     (Normalize, (_normalize_setups, _normalize_encodes, _normalize_decodes)),
                     (Categorize, (_categorize_setups, _categorize_encodes, _categorize_decodes))):
        for name, f in zip(('setups', 'encodes', 'decodes'), fs):
            if f is not None: register_proc(proc, name, f, cls)
