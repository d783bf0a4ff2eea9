"""`JoinGroupby`: NVTabular's JoinGroupby as a fastai proc: per category, the count, mean and std of continuous columns
over the training rows, joined back to every row as new continuous columns."""
from __future__ import annotations

import numpy as np
import pandas as pd
from fastai.tabular.core import TabularProc

from ..backend import encode_codes, frame_like, group_by, to_host, to_pandas
from ..checks import guard_setups

__all__ = ['JoinGroupby']

_STATS = ('count', 'mean', 'std')

class JoinGroupby(TabularProc):
    """For each cat column of `names` and continuous column of `conts`, the `stats` ('count': non-missing values,
    'mean', 'std': ddof 0, so a one-row category has 0) of the cont per category of the cat, over the training rows,
    as continuous columns `<cat>_<cont>_<stat>` for every row. A missing category is a category; one unseen in
    training, or with no values, gets count 0 and the cont's mean and std over all training rows. Runs first, before
    FillMissing (raw values: missing ones are skipped) and Categorify (raw categories), whatever the list order, and
    before Normalize, which scales the new columns. The conts must be named ones (`TabularGPU` keeps only those).
    On Dask the groups are learned over the partitions (dask/groupby.py: exact counts, the defaults pandas' bit for
    bit, the means and stds to rounding); `export_onnx` puts them in the graph as lookups from the raw column."""
    order = -1   # before FillMissing (0), so missing values are skipped, not counted as its fill value
    def __init__(self,
        names:list, # cat columns to group by
        conts:list, # continuous columns to summarise
        stats:tuple=_STATS # any of 'count', 'mean', 'std'
    ):
        self.names = [names] if isinstance(names, str) else list(names)
        self.conts = [conts] if isinstance(conts, str) else list(conts)
        bad = [s for s in stats if s not in _STATS]
        if bad: raise ValueError(f"JoinGroupby(stats=...) takes {_STATS}, not {bad}")
        self.stats = list(stats)
        self.groups = {}

    @property
    def made_names(self) -> list:
        "The columns this proc adds."
        return [c for g in self.groups.values() for c in g.columns]

    def check_columns(self, to):
        "The columns are in `to` (pandas, cuDF or Dask) and the conts are numbers; else an error naming them."
        bad = [n for n in self.names + self.conts if n not in to.items.columns]
        if bad: raise KeyError(f"JoinGroupby: column(s) {bad} are not in the frame (it has "
                               f"{list(to.items.columns)[:20]}): name them in cat_names or cont_names")
        bad = [n for n in self.conts if not pd.api.types.is_numeric_dtype(to.items[n].dtype)]
        if bad: raise TypeError(f"JoinGroupby summarises numbers: column(s) {bad} are not numeric")

    def check_defaults(self):
        "A cont with no value in the training rows has no statistic to join: an error naming it, before the groups."
        bad = [x for x,d in self.defaults.items() if np.isnan(d['mean'])]
        if bad: raise ValueError(f"JoinGroupby: continuous column(s) {bad} are entirely NaN in the training rows, so "
                                 "no category has a statistic: drop them from `conts`")

    def raw_names(self, cat_names, cont_names, y_names) -> list:
        """The cats it groups by and the conts it summarises: fastai's shrink leaves their values as they are (see
        `checks.raw_columns`), so the statistics are pandas' of the values given (float64 ones too)."""
        return list(dict.fromkeys(self.names + self.conts))

    @guard_setups
    def setups(self, to):
        self.check_columns(to)
        df = to.items
        self.groups,self.defaults = {},{}
        for x in self.conts:
            v = df[x].astype('float64')
            self.defaults[x] = {'count': 0., 'mean': float(v.mean()), 'std': float(v.std(ddof=0))}
        self.check_defaults()
        for n in self.names:
            cols = {}
            for x in self.conts:
                g = group_by(df[x].astype('float64'), df[n], dropna=False, sort=True)
                res = {'count': g.count(), 'mean': g.mean(), 'std': g.std(ddof=0)}
                for s in self.stats: cols[f'{n}_{x}_{s}'] = to_pandas(res[s]).astype('float64')
            self.groups[n] = pd.DataFrame(cols)

    def joined(self, df):
        "The columns this proc makes for the rows of `df` (pandas or cuDF), a frame on `df`'s index and backend."
        res = {}
        for n,g in self.groups.items():
            na = np.asarray(pd.isna(g.index))
            vocab = list(g.index[~na])
            col = df[n]
            codes = to_host(encode_codes(col, vocab, add=0)).to_numpy().astype('int64')
            # a missing value: the missing category's row, after the others (else the defaults, last)
            codes = np.where(to_host(col.isna()).to_numpy(), len(vocab) if na.any() else -1, codes)
            for c in g.columns:
                x,s = c[len(n) + 1:].rsplit('_', 1)
                v = g[c].to_numpy('f8')
                v = np.concatenate([v[~na], v[na], [self.defaults[x][s]]])
                # a category with no values (NaN mean, std): the cont's statistic over all training rows, as unseen
                res[c] = np.where(np.isnan(v), self.defaults[x][s], v)[codes]
        return frame_like(df, res, columns=self.made_names)

    def encodes(self, to):
        res = self.joined(to.items)
        for c in res.columns:
            to[c] = res[c]
            if c not in to.cont_names: to.cont_names.append(c)
        return to
