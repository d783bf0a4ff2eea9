"""`JoinGroupby`: NVTabular's JoinGroupby as a fastai proc: per category (of a column, or of several columns together),
the count, sum, mean, std, var, min and max of continuous columns over the training rows, joined back to every row as
new continuous columns."""
from __future__ import annotations

import numpy as np
import pandas as pd
from fastai.tabular.core import TabularProc

from ..backend import encode_codes, frame_like, group_by, to_host, to_pandas
from ..checks import guard_setups

__all__ = ['JoinGroupby']

_STATS = ('count', 'mean', 'std')   # the default
STATS = ('count', 'sum', 'mean', 'std', 'var', 'min', 'max')
EMPTY_STATS = {'count': 0., 'sum': 0.}   # what no values make: the rest has none, and takes the cont's over all rows

def key_name(key) -> str:
    "The name a key (a column, or a list of columns grouped together) gives the new columns: its columns' with '_'."
    return key if isinstance(key, str) else '_'.join(key)

def _key(n):
    "A key of `names`: a column's name, or a list of two or more (one in a list is that column)."
    if isinstance(n, str): return n
    if not (isinstance(n, (list, tuple)) and n and all(isinstance(c, str) for c in n)):
        raise TypeError(f"JoinGroupby(names=...) takes column names, or lists of them for a key of several columns, "
                        f"not {n!r}")
    return n[0] if len(n) == 1 else list(n)

class JoinGroupby(TabularProc):
    """For each key of `names` (a cat column, or a list of columns grouped together: `[['a', 'b']]`, with no cross made
    first) and continuous column of `conts`, the `stats` of the cont per category of the key over the training rows
    ('count': non-missing values, 'sum', 'mean', 'std' and 'var': ddof 0, so a one-row category has 0, 'min', 'max'), as
    continuous columns `<key>_<cont>_<stat>` for every row (`<key>`: the key's columns joined by '_', `a_b_x_sum`). A
    missing category is a category (a key of several columns: each missing part is a value); one unseen in training, or
    with no values, gets count and sum 0 and the cont's other statistics over all training rows. Runs first, before
    FillMissing (raw values: missing ones are skipped) and Categorify (raw categories), whatever the list order, and
    before Normalize, which scales the new columns. The conts must be named ones (`TabularGPU` keeps only those). On
    Dask the groups are learned over the partitions (dask/groupby.py: exact counts, the defaults pandas' bit for bit,
    the sums, means, stds and vars to rounding); `export_onnx` puts them in the graph as lookups from the raw column (a
    key of several columns it refuses, by name)."""
    order = -1   # before FillMissing (0), so missing values are skipped, not counted as its fill value
    def __init__(self,
        names:list, # cat columns to group by, each on its own or, in a list, together
        conts:list, # continuous columns to summarise
        stats:tuple=_STATS # any of 'count', 'sum', 'mean', 'std', 'var', 'min', 'max'
    ):
        self.names = [names] if isinstance(names, str) else [_key(n) for n in names]
        self.conts = [conts] if isinstance(conts, str) else list(conts)
        if isinstance(stats, str): stats = [stats]
        bad = [s for s in stats if s not in STATS]
        if bad: raise ValueError(f"JoinGroupby(stats=...) takes {STATS}, not {bad}")
        self.stats = list(stats)
        self.keys = {key_name(n): [n] if isinstance(n, str) else n for n in self.names}   # {key's name: its columns}
        self.groups,self.defaults = {},{}

    @property
    def made_names(self) -> list:
        "The columns this proc adds."
        return [c for g in self.groups.values() for c in g.columns]

    def check_columns(self, to):
        "The columns are in `to` (pandas, cuDF or Dask) and the conts are numbers; else an error naming them."
        bad = [n for n in self.columns + self.conts if n not in to.items.columns]
        if bad: raise KeyError(f"JoinGroupby: column(s) {bad} are not in the frame (it has "
                               f"{list(to.items.columns)[:20]}): name them in cat_names or cont_names")
        bad = [n for n in self.conts if not pd.api.types.is_numeric_dtype(to.items[n].dtype)]
        if bad: raise TypeError(f"JoinGroupby summarises numbers: column(s) {bad} are not numeric")

    @property
    def columns(self) -> list:
        "The columns the keys read, each once."
        return list(dict.fromkeys(c for cols in self.keys.values() for c in cols))

    def check_defaults(self):
        "A cont with no value in the training rows has no statistic to join: an error naming it, before the groups."
        bad = [x for x,d in self.defaults.items() if np.isnan(d['mean'])]
        if bad: raise ValueError(f"JoinGroupby: continuous column(s) {bad} are entirely NaN in the training rows, so "
                                 "no category has a statistic: drop them from `conts`")

    def raw_names(self, cat_names, cont_names, y_names) -> list:
        """The cats it groups by and the conts it summarises: fastai's shrink leaves their values as they are (see
        `checks.raw_columns`), so the statistics are pandas' of the values given (float64 ones too)."""
        return list(dict.fromkeys(self.columns + self.conts))

    @guard_setups
    def setups(self, to):
        self.check_columns(to)
        df = to.items
        self.groups,self.defaults = {},{}
        for x in self.conts:
            v = df[x].astype('float64')
            need = [s for s in self.stats if s not in EMPTY_STATS] + ['mean']   # check_defaults reads the mean
            self.defaults[x] = {**EMPTY_STATS, **{s: float(_stat(v, s)) for s in dict.fromkeys(need)}}
        self.check_defaults()
        for n,cols in self.keys.items():
            res = {}
            for x in self.conts:
                keys = df[cols[0]] if len(cols) == 1 else [df[c] for c in cols]
                g = group_by(df[x].astype('float64'), keys, dropna=False, sort=True)
                for s in self.stats: res[f'{n}_{x}_{s}'] = to_pandas(_stat(g, s)).astype('float64')
            self.groups[n] = pd.DataFrame(res)

    def joined(self, df):
        "The columns this proc makes for the rows of `df` (pandas or cuDF), a frame on `df`'s backend and index."
        res = {}
        for n,g in self.groups.items():
            cols = self.keys[n]
            rows = _rows(g.index, df[cols[0]]) if len(cols) == 1 else _key_rows(g.index, [df[c] for c in cols])
            for c in g.columns:
                x,s = c[len(n) + 1:].rsplit('_', 1)
                # a category with no values (NaN mean, std...): the cont's statistic over all training rows, as unseen
                v = np.append(g[c].to_numpy('f8'), self.defaults[x][s])
                res[c] = np.where(np.isnan(v), self.defaults[x][s], v)[rows]
        return frame_like(df, res, columns=self.made_names)

    def encodes(self, to):
        res = self.joined(to.items)
        for c in res.columns:
            to[c] = res[c]
            if c not in to.cont_names: to.cont_names.append(c)
        return to

def _stat(g, s:str):
    "Statistic `s` of grouped values `g`; the variances ddof 0, as fastai's Normalize."
    if s in ('std', 'var'): return getattr(g, s)(ddof=0)
    return getattr(g, s)()

def _rows(index:pd.Index, col) -> np.ndarray:
    "Each value of `col`'s row in the groups' `index` (a missing value: the missing category's), -1 where unseen."
    na = np.asarray(pd.isna(index))
    vocab = list(index[~na])
    codes = to_host(encode_codes(col, vocab, add=0)).to_numpy().astype('int64')
    at = np.flatnonzero(~na)   # the groups' rows of the vocab's values
    codes = np.where(codes < 0, -1, at[np.maximum(codes, 0)]) if len(at) else np.full(len(codes), -1)
    return np.where(to_host(col.isna()).to_numpy(), np.flatnonzero(na)[0] if na.any() else -1, codes)

def _key_rows(index:pd.MultiIndex, cols:list) -> np.ndarray:
    """Each row's key (the values of `cols`) as its row in the groups' `index` (a MultiIndex: each missing part is a
    value), -1 where unseen: the key's parts as the digits of an id, made for the index and the rows alike."""
    ids = None
    for j,col in enumerate(cols):
        level = index.get_level_values(j)
        u = pd.Index(level.unique())
        codes = np.concatenate([_rows(u, level.to_series()), _rows(u, col)])
        ids = codes if ids is None else np.where((ids < 0) | (codes < 0), -1, ids * len(u) + codes)
        if j < len(cols) - 1:   # renumbered (dense, -1 kept) so the next digit fits in int64
            u, inv = np.unique(ids, return_inverse=True)
            ids = inv.reshape(-1) - int(u[0] < 0)
    known, rows = ids[:len(index)], ids[len(index):]
    return pd.Index(known).get_indexer(np.where(rows < 0, -2, rows)) if len(index) else np.full(len(rows), -1)
