"""`JoinGroupby` on a Dask-backed Tabular: the groups learned over the partitions, then joined a partition at a time,
lazily. A key of several columns is their codes as the digits of an int64 id, its categories those its rows hold.
Counts, mins and maxs are exact; each category's sum, then its sum of squared deviations from its mean, is carried from
partition to partition in row order (`category_sums`, NumPy's `bincount`), so the partitioning changes no bit: the
values are those of one `bincount` over all training rows. pandas' in-memory groupby adds its own way (Kahan's sum
for the mean, Welford's update for the variance), so the two agree to rounding, not bit for bit (the bound is derived
in tests/dask/test_dask_groupby.py), and so do the sums and variances. The conts' overall mean, var and std (the
defaults) are pandas' bit for bit (dask/stats.py)."""
from __future__ import annotations

import dataclasses
import numpy as np
import pandas as pd

from ..backend import to_host
from ..ops.groupby import EMPTY_STATS as _EMPTY
from ..ops.groupby import JoinGroupby
from ..ops.procs import register_proc
from ..ops.target import category_sums
from .scan import ContFacts
from .shipping import ship, unshipped
from .stats import compute, delayed, exact_moments, replace_columns
from .target import category_codes, training_values

__all__ = []

def _key_codes(part, cols:list, vocabs:dict, ids) -> tuple:
    """`(codes, ids)`: each row's category of the key of columns `cols`, and the key's categories so far: a column's
    own codes (`ids` None: its vocabulary, missing last, is every category), or, for several columns, their codes as
    the digits of an int64 id, the ids seen so far (sorted) grown by this partition's."""
    if len(cols) == 1: return category_codes(part, cols[0], *vocabs[cols[0]]), None
    key = np.zeros(len(part), np.int64)
    for c in cols:
        vocab, nan = vocabs[c]
        key = key * (len(vocab) + nan) + category_codes(part, c, vocab, nan)
    ids = np.union1d(ids, key)
    return np.searchsorted(ids, key), ids

def _moved(arrays:tuple, old, new, fills:tuple) -> tuple:
    "Per-category arrays over the ids `old` put at their places among the ids `new` (others `fills`): values kept."
    if old is None or len(old) == len(new): return arrays
    at = np.searchsorted(new, old)
    res = []
    for a,f in zip(arrays, fills):
        b = np.full(len(new), f, a.dtype)
        b[at] = a
        res.append(b)
    return tuple(res)

_FILLS = (0, 0., np.inf, -np.inf)   # count, sum, min, max before any value

def _group_step(state:dict, part, keys:dict, conts:list, vocabs:dict, means:dict|None=None) -> dict:
    """One partition's rows added, in row order, onto `state` ({key: (its ids, {cont: arrays})}): each category's
    non-missing values, their sum, min and max, or (`means` given) their squared deviations from the category's mean."""
    res = {}
    for n,cols in keys.items():
        ids, old = state[n]
        codes, ids = _key_codes(part, cols, vocabs, ids)
        k = len(ids) if ids is not None else len(vocabs[cols[0]][0]) + vocabs[cols[0]][1]
        got = {}
        for x in conts:
            v = to_host(part[x]).to_numpy('f8', na_value=np.nan)
            ok = ~np.isnan(v)
            c, v = codes[ok], v[ok]
            if means is not None:
                d = v - means[(n, x)][c]
                got[x] = (category_sums(c, d * d, k, old[x][0]),)
                continue
            cnt, sums, lo, hi = _moved(old[x], state[n][0], ids, _FILLS)
            lo, hi = lo.copy(), hi.copy()
            np.minimum.at(lo, c, v)
            np.maximum.at(hi, c, v)
            got[x] = (cnt + np.bincount(c, minlength=k), category_sums(c, v, k, sums), lo, hi)
        res[n] = (ids, got)
    return res

def _chain(parts, start:dict, *args) -> dict:
    "`_group_step` over the partitions in order, each onto the sums of those before."
    state = start
    for p in parts: state = delayed(_group_step)(state, p, *args)
    return compute(state)[0]

def _groups_index(cols:list, vocabs:dict, ids) -> pd.Index:
    "The in-memory groupby's rows: sorted categories, the missing one last (each column's, for several)."
    if len(cols) == 1:
        vocab, nan = vocabs[cols[0]]
        return pd.Index(vocab + [np.nan] * nan, name=cols[0], tupleize_cols=False)
    levels, rest = [], ids
    for c in reversed(cols):
        vocab, nan = vocabs[c]
        k = len(vocab) + nan
        levels.append(np.asarray(vocab + [np.nan] * nan, dtype=object)[rest % k])
        rest = rest // k
    return pd.MultiIndex.from_arrays(levels[::-1], names=cols)

def _groupby_setups(self, to):
    self.check_columns(to)
    keys, conts = self.keys, self.conts
    vocabs = training_values(to, self.columns)
    multi = [n for n,cols in keys.items() if len(cols) > 1 and
             np.prod([float(len(v) + nan) for v,nan in (vocabs[c] for c in cols)]) >= 2.0**63]
    if multi: raise ValueError(f"JoinGroupby: the key(s) {multi} have more value combinations than int64 ids hold on "
                               "Dask: group by fewer columns")
    # the defaults: pandas' mean and var (std: its root, as pandas takes it) of the float64 values, bit for bit
    vals = to.cols(conts).astype('float64')
    means, vars_ = exact_moments(vals.to_delayed(), conts, {x: np.dtype('f8') for x in conts}, squared=True,
                                 lens=to.partition_rows())
    src = to.cols(list(dict.fromkeys(self.columns + conts)))
    parts = src.to_delayed()
    start = {}
    for n,cols in keys.items():
        k = len(vocabs[cols[0]][0]) + vocabs[cols[0]][1] if len(cols) == 1 else 0
        start[n] = (None if len(cols) == 1 else np.zeros(0, np.int64),
                    {x: (np.zeros(k, np.int64), np.zeros(k), np.full(k, np.inf), np.full(k, -np.inf)) for x in conts})
    sums = _chain(parts, start, keys, conts, vocabs)
    with np.errstate(divide='ignore', invalid='ignore'):   # a category with no values: NaN, as pandas gives
        cat_means = {(n, x): a[1] / a[0] for n,(_,got) in sums.items() for x,a in got.items()}
        zeros = {n: (ids, {x: (np.zeros(len(a[0])),) for x,a in got.items()}) for n,(ids,got) in sums.items()}
        ssd = _chain(parts, zeros, keys, conts, vocabs, cat_means)
    # every value is in a category of any key (a missing one too): the first key's extremes are the cont's
    first = next(iter(sums.values()))[1]
    lo = {x: float(first[x][2].min()) if first[x][0].any() else np.nan for x in conts}
    hi = {x: float(first[x][3].max()) if first[x][0].any() else np.nan for x in conts}
    d = {x: {'mean': float(means[x]), 'std': float(np.sqrt(vars_[x])), 'var': float(vars_[x]), 'min': float(lo[x]),
             'max': float(hi[x])} for x in conts}
    self.defaults = {x: {**_EMPTY, **{s: d[x][s] for s in self.stats if s not in _EMPTY}} for x in conts}
    for x in conts: self.defaults[x].setdefault('mean', d[x]['mean'])
    self.check_defaults()
    self.groups = {}
    for n,(ids,got) in sums.items():
        cols, res = keys[n], {}
        for x in conts:
            cnt, total, mn, mx = got[x]
            none = cnt == 0   # a category with no values: NaN, as pandas gives (its sum 0)
            with np.errstate(divide='ignore', invalid='ignore'): var = ssd[n][1][x][0] / cnt
            st = {'count': cnt.astype('f8'), 'sum': total, 'mean': cat_means[(n, x)], 'var': var, 'std': np.sqrt(var),
                  'min': np.where(none, np.nan, mn), 'max': np.where(none, np.nan, mx)}
            res.update({f'{n}_{x}_{s}': st[s] for s in self.stats})
        self.groups[n] = pd.DataFrame(res, index=_groups_index(cols, vocabs, ids))

def _join_part(part, proc): return unshipped(proc).joined(part)

def _groupby_encodes(self, to):
    "The groups' columns for every row, lazily, a partition at a time."
    if not self.groups: return to
    src = to.items[self.columns]
    out = src.map_partitions(_join_part, ship(self, to), meta=self.joined(src._meta))
    to.items = replace_columns(to.items, out, self.made_names)
    for c in self.made_names:
        if c not in to.cont_names: to.cont_names.append(c)
    # FillMissing reads which conts hold NaN from the scan: these never do (each row gets a group's or the default)
    scan = to.scan.rewritten(self.made_names)
    to.scan = dataclasses.replace(scan, conts={**scan.conts, **{c: ContFacts() for c in self.made_names}})
    return to

def register_dask_groupby(cls:type) -> None:
    "Make `JoinGroupby` learn over the partitions of `cls` frames (Dask) and join them a partition at a time."
    register_proc(JoinGroupby, 'setups', _groupby_setups, cls)
    register_proc(JoinGroupby, 'encodes', _groupby_encodes, cls)
