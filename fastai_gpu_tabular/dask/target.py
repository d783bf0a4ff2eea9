"""`TargetEncode` on a Dask-backed Tabular: the statistic of all training rows learned over the partitions, bit for bit
the in-memory one (each category's sums carried from partition to partition in row order, so added as `bincount` adds
them in memory; the target's mean and variance NumPy's, dask/stats.py), then encoded a partition at a time, lazily.
Out-of-fold (`folds`): the training rows' target comes to the host (one number a row) for scikit-learn's splitters and
each fold's mean and variance; each fold's sums are carried over the partitions in the same passes."""
from __future__ import annotations

import dataclasses
import numpy as np
import pandas as pd

from ..backend import encode_codes, sorted_uniques, to_host, to_pandas
from ..ops.procs import register_proc
from ..ops.target import (
    TargetEncode,
    auto_smoothed,
    category_means,
    category_sums,
    check_group_sizes,
    class_indicators,
    fold_ids,
    group_codes,
    m_smoothed,
    setup_parts,
)
from ..splits import valid_mask
from .scan import ContFacts
from .shipping import ship, unshipped
from .stats import compute, delayed, exact_moments, replace_columns

__all__ = []

_ALL = -1   # the fold key of the statistic of all training rows
_ROW = '__target_encode_row__'   # each training row's position among them, a column while encoding

def _targets(part, y:str, kind:str, classes):
    """The target as scikit-learn encodes it, on the host: float64 'y', int64 codes 'y', or an int64 column 'y<i>' per
    class (pandas cannot take a cuDF partition's index: its `__array__` refuses, frame.py:619-625 @v26.06.01)."""
    col = part[y]
    index = to_host(col.index)
    if kind == 'continuous': return pd.DataFrame({'y': to_host(col).to_numpy('f8')}, index=index)
    codes = to_host(encode_codes(col, classes, add=0)).to_numpy().astype('int64')
    if kind == 'binary': return pd.DataFrame({'y': codes}, index=index)
    return pd.DataFrame(class_indicators(codes, len(classes)), columns=[f'y{i}' for i in range(len(classes))],
                        index=index)

def _host_target(part, y:str, kind:str, classes):
    "A partition's target on the host, one number a row: float64 values, or int64 class codes."
    col = part[y]
    if kind == 'continuous': return to_host(col).to_numpy('f8')
    return to_host(encode_codes(col, classes, add=0)).to_numpy().astype('int64')

def _host_moments(y, kind:str, n_classes:int, rows=None) -> tuple:
    """`({column: mean}, {column: variance})` of the target `y` (host values or class codes) over `rows` (a mask;
    all if None): NumPy's mean and variance of the values or of each class's 0/1 column, as in memory."""
    y = y if rows is None else y[rows]
    if kind != 'multiclass': return {'y': float(np.mean(y))}, {'y': float(np.var(y))}
    ind = {f'y{i}': (y == i).astype('int64') for i in range(n_classes)}
    return {t: float(np.mean(v)) for t,v in ind.items()}, {t: float(np.var(v)) for t,v in ind.items()}

def _col(part, n:str, groups:dict):
    "Key `n` of a partition: its column, or a group's combination codes (`groups`: {key: (columns, vocabularies)})."
    return group_codes(part, *groups[n], n) if n in groups else part[n]

def category_codes(part, n:str, vocab:list, nan:bool, groups:dict|None=None):
    "Key `n`'s category codes against `vocab` (the training rows' values), missing values last (`nan`)."
    c = to_host(encode_codes(_col(part, n, groups or {}), vocab, add=0)).to_numpy().astype('int64')
    return np.where(c < 0, len(vocab), c) if nan else c

def _sums_step(state:dict, part, folds, y:str, kind:str, classes, vocabs:dict, groups:dict,
               means:dict|None=None) -> dict:
    """One partition's rows added, in row order, onto `state` ({(what, fold, name, target column): running sums}): the
    targets ('sums'), ones ('counts', for m-smoothing), or squared deviations from the category means `means` ('ssd').
    Fold `_ALL` takes every row; fold f the rows of the other folds (`folds`: this partition's rows' folds)."""
    ys = _targets(part, y, kind, classes)
    rows = {f: None if f == _ALL else folds != f for f in dict.fromkeys(f for _,f,_,_ in state)}
    res = {}
    for n,(vocab,nan) in vocabs.items():
        codes, k = category_codes(part, n, vocab, nan, groups), len(vocab) + nan
        for t in ys.columns:
            w = ys[t].to_numpy()
            for f,r in rows.items():
                c, v = (codes, w) if r is None else (codes[r], w[r])
                for what in ('sums', 'counts', 'ssd'):
                    if (what, f, n, t) not in state: continue
                    if what == 'sums': x = v
                    elif what == 'counts': x = np.ones(len(v))
                    else:
                        d = v.astype('f8') - means[(f, n, t)][c]
                        x = d * d
                    res[(what, f, n, t)] = category_sums(c, x, k, state[(what, f, n, t)])
    return res

def _chain(parts, folds:list, start:dict, *args) -> dict:
    """`_sums_step` over the partitions in order, each onto the sums of those before: a pass, partition after partition;
    `{(fold, name, target column): sums}` of each kind of `start`'s."""
    state = start
    for p,f in zip(parts, folds): state = delayed(_sums_step)(state, p, f, *args)
    got = compute(state)[0]
    return {w: {k[1:]: v for k,v in got.items() if k[0] == w} for w in dict.fromkeys(k[0] for k in got)}

def training_values(to, names:list) -> dict:
    """{name: (the values of its training rows, sorted; whether they hold a missing one)} of `to`'s columns `names`:
    the scan's counts of the columns as they came, else one pass over those a proc made or rewrote."""
    res = {n: (v.training(), v.nan_train) for n in names if (v := to.scan.values.get(n)) is not None}
    todo = [n for n in names if n not in res]
    if not todo: return res
    lazy = {('vals', n): to.cols([n])[n].dropna().unique() for n in todo}
    lazy.update({('nan', n): to.cols([n])[n].isna().any() for n in todo})
    got = {k: to_pandas(v) for k,v in zip(lazy, compute(*lazy.values()))}
    return {**res, **{n: (sorted_uniques(pd.Series(got[('vals', n)], name=n)), bool(got[('nan', n)])) for n in todo}}

def _group_uniques(part, groups:dict, n:str):
    "The distinct combination codes of group `n` in a partition (host int64)."
    return np.unique(to_host(_col(part, n, groups)).to_numpy())

def _target_setups(self, to):
    if self.parts: return setup_parts(self, to)
    names, y = self.check_names(to)
    dtype = to.items[y].dtype
    cls = self.has_classes(y, dtype)
    plain = [n for n in names if n not in self.groups]
    members = list(dict.fromkeys(c for n in names if n in self.groups for c in self.groups[n]))
    vocabs = training_values(to, list(dict.fromkeys(plain + members + ([y] if cls else []))))
    self.target_classes = vocabs[y][0] if cls else None
    self.group_vocabs = {n: [vocabs[c][0] for c in self.groups[n]] for n in names if n in self.groups}
    check_group_sizes(self)
    groups = {n: (self.groups[n], v) for n,v in self.group_vocabs.items()}
    if groups:   # a group's combinations over the training rows: one pass
        src = to.cols(members)
        got = compute(*[delayed(_group_uniques)(p, groups, n) for n in groups for p in src.to_delayed()])
        k = len(got) // len(groups)
        for i,n in enumerate(groups): vocabs[n] = (list(np.unique(np.concatenate(got[i*k:(i+1)*k]))), False)
    vocabs = {n: vocabs[n] for n in names}
    kind = self.target_type_ = self.kind_of(y)
    n_classes = len(self.target_classes) if cls else 0
    tcols = ['y'] if kind != 'multiclass' else [f'y{i}' for i in range(n_classes)]
    src = to.cols(list(dict.fromkeys([c for n in names for c in self.sources(n)] + [y])))
    parts, args = src.to_delayed(), (y, kind, self.target_classes, vocabs, groups)
    if self._fitting is not None and self.folds:
        # each training row's fold from scikit-learn's splitters over all of them: the target on the host, in the
        # partitions these passes read (their lengths place each row)
        yh = compute(*[delayed(_host_target)(p, *args[:3]) for p in parts])
        folds = fold_ids(np.concatenate(yh), self.folds, self.seed, kind != 'continuous')
        fold_parts = np.split(folds, np.cumsum([len(v) for v in yh])[:-1])
        yh = np.concatenate(yh)
        # the target's mean and variance over all rows and over each fold's other rows: NumPy's, as in memory
        moments = {f: _host_moments(yh, kind, n_classes, None if f == _ALL else folds != f)
                   for f in [_ALL, *range(self.folds)]}
    else:
        # the target's mean and variance (scikit-learn's np.mean, np.var), pairwise as NumPy adds them
        ys = src.map_partitions(_targets, y, kind, self.target_classes,
                                meta=_targets(src._meta, y, kind, self.target_classes))
        means, var = exact_moments(ys.to_delayed(), tcols, {t: ys[t].dtype for t in tcols}, squared=True,
                                   lens=to.partition_rows())
        moments = {_ALL: ({t: float(means[t]) for t in tcols}, {t: float(var[t]) for t in tcols})}
        folds, fold_parts = None, [None] * len(parts)
    means = {t: moments[_ALL][0][t] for t in tcols}
    self.target_mean = means['y'] if kind != 'multiclass' else np.array([means[t] for t in tcols])
    keys = [(f, n, t) for f in moments for n in names for t in tcols]
    k = {n: len(v) + nan for n,(v,nan) in vocabs.items()}
    mean, var = (lambda f, t: moments[f][0][t]), (lambda f, t: moments[f][1][t])
    zeros = lambda what: {(what, f, n, t): np.zeros(k[n]) for f,n,t in keys}
    if self.smooth == 'auto':   # the sums and counts in one pass, then the squared deviations from their means
        got = _chain(parts, fold_parts, {**zeros('sums'), **zeros('counts')}, *args)
        sums, counts = got['sums'], got['counts']
        cat_means = {key: category_means(sums[key], counts[key]) for key in keys}
        ssd = _chain(parts, fold_parts, zeros('ssd'), *args, cat_means)['ssd']
        enc = {(f, n, t): auto_smoothed(cat_means[(f, n, t)], counts[(f, n, t)], ssd[(f, n, t)], var(f, t),
                                        mean(f, t)) for f,n,t in keys}
    else:   # started at m * mean and m, as in memory
        m = float(self.smooth)
        got = _chain(parts, fold_parts, {**{('sums', f, n, t): np.full(k[n], m * mean(f, t)) for f,n,t in keys},
                                         **{('counts', f, n, t): np.full(k[n], m) for f,n,t in keys}}, *args)
        enc = {(f, n, t): m_smoothed(got['sums'][(f, n, t)], got['counts'][(f, n, t)], mean(f, t)) for f,n,t in keys}
    table = lambda f, n: np.stack([enc[(f, n, t)] for t in tcols], 1)
    self.encodings, self._oof = {}, {}
    for n,(vocab,nan) in vocabs.items():
        self.set_encodings(n, vocab, nan, table(_ALL, n))
        # the training rows' folds, and each fold's encodings (fold, category, output)
        if folds is not None: self._oof[n] = (folds, np.stack([table(f, n) for f in range(self.folds)]))

def _encode_part(part, proc): return unshipped(proc).encoded(part)

def _encode_oof_part(part, proc, oof:dict):
    """A partition's encodings: the statistic of all training rows, and for the training rows (column `_ROW`: each
    one's position among them, -1 for the others) the encodings of their fold's other rows."""
    proc, oof = unshipped(proc), unshipped(oof)
    res = proc.encoded(part)
    row = to_host(part[_ROW]).to_numpy()
    tr = row >= 0
    if not tr.any(): return res
    for n,(folds,tables) in oof.items():
        e = proc.encodings[n]
        nan = bool(len(e)) and bool(pd.isna(e.index[-1]))
        groups = {k: (proc.groups[k], v) for k,v in getattr(proc, 'group_vocabs', {}).items()}
        vals = tables[folds[row[tr]], category_codes(part, n, list(e.index[:len(e) - nan]), nan, groups)[tr]]
        for i,c in enumerate(proc.out_names(n)):
            v = to_host(res[c]).to_numpy('f8', copy=True)
            v[tr] = vals[:, i]
            res[c] = v
    return res

def _target_encodes(self, to):
    """The encodings of every row, lazily, a partition at a time: the statistic of all training rows, and out-of-fold
    values for the training rows of the Tabular being set up."""
    if self.parts:
        for p in self.parts: p.encodes(to)
        return to
    cols = list(dict.fromkeys(c for n in self.encodings for c in self.sources(n)))
    if not cols: return to
    src = to.items[cols]
    meta = self.encoded(src._meta)
    if to is self._fitting and self._oof:
        items, split = to.items, to.split_col
        # the training rows: those the split does not validate (all of them with no split)
        train = ~valid_mask(items[split], to.split_on) if split is not None else items[cols[0]].isna() | True
        # each training row's position among them (a lazy cumulative sum), its fold's index; -1 for the others
        row = (train.astype('int64').cumsum() - 1).where(train, -1)
        # the folds and tables now, not `self._oof`, which `setup` clears before the graph runs
        out = src.assign(**{_ROW: row}).map_partitions(_encode_oof_part, ship(self, to), ship(dict(self._oof), to),
                                                      meta=meta)
    else: out = src.map_partitions(_encode_part, ship(self, to), meta=meta)
    to.items = replace_columns(to.items, out, self.made_names)
    to.scan = to.scan.rewritten(self.made_names)
    # each row's values come from the tables (or are the target's mean): finite tables, no NaN for FillMissing to count
    tables = [self.target_mean, *(e.to_numpy('f8') for e in self.encodings.values()),
              *(t for _,t in (self._oof or {}).values())]
    if all(np.isfinite(t).all() for t in tables):
        to.scan = dataclasses.replace(to.scan, conts={**to.scan.conts, **{c: ContFacts() for c in self.made_names}})
    for c in self.made_names:
        if c not in to.cont_names: to.cont_names.append(c)
    return to

def register_dask_target(cls:type) -> None:
    "Make `TargetEncode` learn over the partitions of `cls` frames (Dask) and encode them a partition at a time."
    register_proc(TargetEncode, 'setups', _target_setups, cls)
    register_proc(TargetEncode, 'encodes', _target_encodes, cls)
