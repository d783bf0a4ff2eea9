"""`TargetEncode` on a Dask-backed Tabular: the statistic of all training rows learned over the partitions, bit for bit
the in-memory one (each category's sums carried from partition to partition in row order, so added as `bincount` adds
them in memory; the target's mean and variance NumPy's, dask/stats.py), then encoded a partition at a time, lazily.
Out-of-fold values need each training row's fold from scikit-learn's splitters over all of them: not on Dask, where
`TargetEncode(folds=0)` is required (and said before any pass over the rows)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from fastcore.foundation import L

from ..backend import encode_codes, sorted_uniques, to_host, to_pandas
from ..procs import register_proc
from ..target import TargetEncode, auto_smoothed, category_means, category_sums, class_indicators, m_smoothed
from .stats import compute, delayed, exact_moments

__all__ = ['check_dask_target', 'register_dask_target']

def check_dask_target(procs) -> None:
    "Before any pass over a Dask frame: out-of-fold TargetEncode is in-memory only; say what to do instead."
    for p in getattr(procs, 'fs', L(procs)):
        if isinstance(p, type) and issubclass(p, TargetEncode): p = p()   # a class: its defaults say
        if isinstance(p, TargetEncode) and p.folds:
            raise NotImplementedError(
                f"TargetEncode(folds={p.folds}) on a Dask frame: out-of-fold encodings of the training rows are "
                "computed in memory only (a TabularGPU of a pandas or cuDF frame). On Dask pass TargetEncode(folds=0): "
                "every row, training rows included, then gets the statistic of all training rows, which has seen "
                "their own target")

def _targets(part, y:str, kind:str, classes):
    "The target as scikit-learn encodes it: float64 'y', int64 codes 'y', or an int64 column 'y<i>' per class."
    col = part[y]
    if kind == 'continuous': return pd.DataFrame({'y': to_host(col).to_numpy('f8')}, index=col.index)
    codes = to_host(encode_codes(col, classes, add=0)).to_numpy().astype('int64')
    if kind == 'binary': return pd.DataFrame({'y': codes}, index=col.index)
    return pd.DataFrame(class_indicators(codes, len(classes)), columns=[f'y{i}' for i in range(len(classes))],
                        index=col.index)

def _codes(part, n:str, vocab:list, nan:bool):
    "Column `n`'s category codes against `vocab` (the training rows' values), missing values last (`nan`)."
    c = to_host(encode_codes(part[n], vocab, add=0)).to_numpy().astype('int64')
    return np.where(c < 0, len(vocab), c) if nan else c

def _sums_step(state:dict, part, y:str, kind:str, classes, vocabs:dict, what:str, means:dict|None=None) -> dict:
    """One partition's rows added, in row order, onto `state` ({(name, target column): running sums}): the targets
    ('sums'), ones ('counts', for m-smoothing), or squared deviations from the category means ('ssd')."""
    ys = _targets(part, y, kind, classes)
    res = {}
    for n,(vocab,nan) in vocabs.items():
        codes, k = _codes(part, n, vocab, nan), len(vocab) + nan
        for t in ys.columns:
            w = ys[t].to_numpy()
            if what == 'counts': w = np.ones(len(w))
            elif what == 'ssd':
                d = w.astype('f8') - means[(n, t)][codes]
                w = d * d
            res[(n, t)] = category_sums(codes, w, k, state[(n, t)])
    return res

def _chain(parts, start:dict, *args) -> dict:
    "`_sums_step` over the partitions in order, each onto the sums of those before: a pass, partition after partition."
    state = start
    for p in parts: state = delayed(_sums_step)(state, p, *args)
    return compute(state)[0]

def _target_setups(self, to):
    names, y = self.check_names(to)
    check_dask_target([self])
    dtype = to.items[y].dtype
    cls = self.has_classes(y, dtype)
    lazy = {('vals', n): to.cols([n])[n].dropna().unique() for n in names}
    lazy.update({('nan', n): to.cols([n])[n].isna().any() for n in names})
    if cls: lazy['classes'] = to.cols([y])[y].unique()
    got = {k: to_pandas(v) for k,v in zip(lazy, compute(*lazy.values()))}
    self.target_classes = sorted_uniques(pd.Series(got['classes'], name=y)) if cls else None
    kind = self.target_type_ = self.kind_of(y)
    vocabs = {n: (sorted_uniques(pd.Series(got[('vals', n)], name=n)), bool(got[('nan', n)])) for n in names}
    # the target's mean and variance (scikit-learn's np.mean, np.var), pairwise as NumPy adds them
    tcols = ['y'] if kind != 'multiclass' else [f'y{i}' for i in range(len(self.target_classes))]
    src = to.cols(list(dict.fromkeys(names + [y])))
    ys = src.map_partitions(_targets, y, kind, self.target_classes,
                            meta=_targets(src._meta, y, kind, self.target_classes))
    means, var = exact_moments(ys.to_delayed(), tcols, {t: ys[t].dtype for t in tcols}, squared=True)
    means, var = {t: float(means[t]) for t in tcols}, {t: float(var[t]) for t in tcols}
    self.target_mean = means['y'] if kind != 'multiclass' else np.array([means[t] for t in tcols])
    parts, args = src.to_delayed(), (y, kind, self.target_classes, vocabs)
    keys = [(n, t) for n in names for t in tcols]
    k = {n: len(v) + nan for n,(v,nan) in vocabs.items()}
    if self.smooth == 'auto':
        sums = _chain(parts, {(n, t): np.zeros(k[n]) for n,t in keys}, *args, 'sums')
        counts = _chain(parts, {(n, t): np.zeros(k[n]) for n,t in keys}, *args, 'counts')
        cat_means = {key: category_means(sums[key], counts[key]) for key in keys}
        ssd = _chain(parts, {(n, t): np.zeros(k[n]) for n,t in keys}, *args, 'ssd', cat_means)
        enc = {(n, t): auto_smoothed(cat_means[(n, t)], counts[(n, t)], ssd[(n, t)], var[t], means[t])
               for n,t in keys}
    else:   # started at m * mean and m, as in memory
        m = float(self.smooth)
        sums = _chain(parts, {(n, t): np.full(k[n], m * means[t]) for n,t in keys}, *args, 'sums')
        counts = _chain(parts, {(n, t): np.full(k[n], m) for n,t in keys}, *args, 'counts')
        enc = {(n, t): m_smoothed(sums[(n, t)], counts[(n, t)], means[t]) for n,t in keys}
    self.encodings, self._oof = {}, {}
    for n,(vocab,nan) in vocabs.items(): self.set_encodings(n, vocab, nan, np.stack([enc[(n, t)] for t in tcols], 1))

def _encode_part(part, proc): return proc.encoded(part)

def _target_encodes(self, to):
    "The encodings of every row (the training rows' too: no folds on Dask), lazily, a partition at a time."
    import dask
    cols = list(self.encodings)
    if not cols: return to
    src = to.items[cols]
    out = src.map_partitions(_encode_part, dask.delayed(self), meta=self.encoded(src._meta))
    to.items = to.items.assign(**{c: out[c] for c in self.made_names})
    for c in self.made_names:
        if c not in to.cont_names: to.cont_names.append(c)
    return to

def register_dask_target(cls:type) -> None:
    "Make `TargetEncode` learn over the partitions of `cls` frames (Dask) and encode them a partition at a time."
    register_proc(TargetEncode, 'setups', _target_setups, cls)
    register_proc(TargetEncode, 'encodes', _target_encodes, cls)
