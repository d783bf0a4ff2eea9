"""`JoinGroupby` on a Dask-backed Tabular: the groups learned over the partitions, then joined a partition at a time,
lazily. Counts are exact; each category's sum, then its sum of squared deviations from its mean, is carried from
partition to partition in row order (`category_sums`, NumPy's `bincount`), so the partitioning changes no bit: the
values are those of one `bincount` over all training rows. pandas' in-memory groupby adds its own way (Kahan's sum
for the mean, Welford's update for the variance), so the two agree to rounding, not bit for bit (the bound is derived
in tests/dask/test_dask_groupby.py). The conts' overall mean and std (the defaults) are pandas' bit for bit
(dask/stats.py)."""
from __future__ import annotations

import dataclasses
import numpy as np
import pandas as pd

from ..backend import to_host
from ..ops.groupby import JoinGroupby
from ..ops.procs import register_proc
from ..ops.target import category_sums
from .scan import ContFacts
from .shipping import ship, unshipped
from .stats import compute, delayed, exact_moments, replace_columns
from .target import category_codes, training_values

__all__ = []

def _group_step(state:dict, part, conts:list, vocabs:dict, means:dict|None=None) -> dict:
    """One partition's rows added, in row order, onto `state` ({(cat, cont): (counts, sums)}): each category's
    non-missing values and their sum, or (`means` given) their squared deviations from the category's mean."""
    res = {}
    for n,(vocab,nan) in vocabs.items():
        codes, k = category_codes(part, n, vocab, nan), len(vocab) + nan
        for x in conts:
            v = to_host(part[x]).to_numpy('f8', na_value=np.nan)
            ok = ~np.isnan(v)
            c, v = codes[ok], v[ok]
            if means is not None:
                d = v - means[(n, x)][c]
                v = d * d
            cnt, s = state[(n, x)]
            res[(n, x)] = (cnt + np.bincount(c, minlength=k), category_sums(c, v, k, s))
    return res

def _chain(parts, start:dict, *args) -> dict:
    "`_group_step` over the partitions in order, each onto the sums of those before."
    state = start
    for p in parts: state = delayed(_group_step)(state, p, *args)
    return compute(state)[0]

def _groupby_setups(self, to):
    self.check_columns(to)
    names, conts = self.names, self.conts
    vocabs = training_values(to, names)
    # the defaults: pandas' mean and std (ddof 0) of the float64 values, bit for bit
    vals = to.cols(conts).astype('float64')
    means, stds = exact_moments(vals.to_delayed(), conts, {x: np.dtype('f8') for x in conts},
                                lens=to.partition_rows())
    self.defaults = {x: {'count': 0., 'mean': float(means[x]), 'std': float(stds[x])} for x in conts}
    self.check_defaults()
    src = to.cols(list(dict.fromkeys(names + conts)))
    parts, k = src.to_delayed(), {n: len(v) + nan for n,(v,nan) in vocabs.items()}
    zeros = lambda: {(n, x): (np.zeros(k[n], np.int64), np.zeros(k[n])) for n in names for x in conts}
    sums = _chain(parts, zeros(), conts, vocabs)
    with np.errstate(divide='ignore', invalid='ignore'):   # a category with no values: NaN, as pandas gives
        cat_means = {key: s / cnt for key,(cnt,s) in sums.items()}
        ssd = _chain(parts, zeros(), conts, vocabs, cat_means)
        stats = {key: {'count': cnt.astype('f8'), 'mean': cat_means[key], 'std': np.sqrt(q / cnt)}
                 for key,(cnt,q) in ssd.items()}
    self.groups = {}
    for n,(vocab,nan) in vocabs.items():
        # the in-memory groupby's rows: sorted categories, the missing one last
        idx = pd.Index(vocab + [np.nan] * nan, name=n, tupleize_cols=False)
        self.groups[n] = pd.DataFrame({f'{n}_{x}_{s}': stats[(n, x)][s] for x in conts for s in self.stats}, index=idx)

def _join_part(part, proc): return unshipped(proc).joined(part)

def _groupby_encodes(self, to):
    "The groups' columns for every row, lazily, a partition at a time."
    if not self.groups: return to
    src = to.items[list(self.groups)]
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
