"""`Groupby`: NVTabular's `Groupby` op, a frame's rows to one row per key (a session, a user), each column aggregated:
`list` (the key's values in the order of the sort columns, a multi-hot column for `TabularGPU`), `count`, `sum`,
`mean`, `min`, `max`, `std`, `var`, `first`, `last`. It changes the number of rows, so it is a step before `TabularGPU`,
not a proc: `Groupby(...)(df)` gives a new frame on `df`'s backend (pandas, cuDF, or Dask: dask/aggregate.py).

What it computes is pandas' `df.sort_values(sort_cols, kind='stable').groupby(groupby_cols, sort=True, dropna=True,
observed=True).agg(...)`, keys as columns: rows with a missing key dropped (pandas' default), `std`/`var` with ddof=1
(pandas' and cuDF's default, NVTabular's too), NaN skipped by every statistic (`first`/`last`: the first and last
non-missing values, pandas' `skipna`), kept in the lists. The rows are ordered once, on the frame's device, by stable
sorts (key, then the sort columns, then the frame's order); the statistics are the backend's own groupby over those
rows (so pandas' arithmetic, bit for bit), and the lists are Arrow list arrays built from the group boundaries, with
no Python per row or per group."""
from __future__ import annotations

from collections.abc import Callable
import numpy as np
import pandas as pd

from ..backend import (
    Frame,
    array_module,
    backend_of,
    column_values,
    group_by,
    is_dask,
    lists_like,
    series_like,
    to_host,
)

__all__ = ['Groupby']

AGGS = ('list', 'count', 'sum', 'mean', 'min', 'max', 'std', 'var', 'first', 'last')
_NUMERIC = {'sum', 'mean', 'std', 'var'}   # pandas' numbers (bools count as 0/1)
_ORDERED = {'min', 'max'}                  # numbers or datetimes
_distributed = {}                          # {'dask': how a Dask frame is grouped}, filled by dask/aggregate.py

def register_distributed(kind:str, f:Callable) -> None:
    "Make `Groupby` call `f(groupby, frame)` for a `kind` ('dask') frame: dask/ builds on ops/, not the other way."
    _distributed[kind] = f

def _names(x, what:str) -> list:
    "A column name or a list of them as a list; a TypeError naming the option `what` otherwise."
    if isinstance(x, str): return [x]
    if isinstance(x, (list, tuple)) and all(isinstance(n, str) for n in x): return list(x)
    raise TypeError(f"Groupby({what}=...) takes a column name or a list of them, not {x!r}")

def _agg_list(a, col) -> list:
    "The aggregations asked of column `col`: a name or a list of names, each one of `AGGS`."
    aggs = [a] if isinstance(a, str) else a
    if not isinstance(aggs, (list, tuple)) or not aggs or not all(isinstance(s, str) for s in aggs):
        raise TypeError(f"Groupby(aggs=...) for column {col!r} takes an aggregation's name or a list of them, "
                        f"not {a!r}")
    bad = [s for s in aggs if s not in AGGS]
    if bad: raise ValueError(f"Groupby(aggs=...): unknown aggregation(s) {bad} for column {col!r}: it takes {AGGS}")
    return list(dict.fromkeys(aggs))

class Groupby:
    """One row per distinct value of `groupby_cols` (several columns make one key), with the keys as columns, sorted,
    then each aggregated column as `{col}{name_sep}{agg}` (NVTabular's names). `aggs` is a dict {column: agg or list of
    aggs}, or an agg or list of aggs for every column but the keys. `list` and every other aggregation see a key's rows
    in the order of `sort_cols` (ascending, missing values last), ties in the frame's order. Call it on a frame:
    `Groupby('user_id', 'timestamp', {'item_id': ['list', 'count']})(df)`."""
    def __init__(self,
        groupby_cols:str|list, # the key column(s)
        sort_cols:str|list|None=None, # the column(s) that order a key's rows (default: the frame's order)
        aggs:str|list|dict='list', # {column: agg(s)}, or agg(s) for every column but the keys
        name_sep:str='_' # between a column's name and its aggregation's in the new columns' names
    ):
        self.groupby_cols = _names(groupby_cols, 'groupby_cols')
        if not self.groupby_cols: raise ValueError("Groupby(groupby_cols=...) names no column")
        self.sort_cols = [] if sort_cols is None else _names(sort_cols, 'sort_cols')
        if not isinstance(name_sep, str): raise TypeError(f"Groupby(name_sep=...) takes a string, not {name_sep!r}")
        self.name_sep = name_sep
        if isinstance(aggs, dict):
            bad = [c for c in aggs if c in self.groupby_cols]
            if bad: raise ValueError(f"Groupby(aggs=...) aggregates key column(s) {bad}: a key is its row's own")
            self.aggs = {c: _agg_list(a, c) for c,a in aggs.items()}
        else: self.aggs = _agg_list(aggs, '*')

    def __repr__(self):
        return (f"Groupby(groupby_cols={self.groupby_cols}, sort_cols={self.sort_cols}, aggs={self.aggs}, "
                f"name_sep={self.name_sep!r})")

    def plan(self, columns:list) -> dict:
        "{column: its aggs} for a frame with `columns`: `aggs` as given, or every column but the keys."
        if isinstance(self.aggs, dict): return self.aggs
        return {c: self.aggs for c in columns if c not in self.groupby_cols}

    def out_names(self, plan:dict) -> list:
        "The new columns' names, after the keys'."
        return [f'{c}{self.name_sep}{a}' for c,aggs in plan.items() for a in aggs]

    def check(self, df:Frame) -> dict:
        """The plan for `df` (pandas, cuDF or Dask: only its columns and dtypes are read), or an error naming the column
        or option: a missing column, an aggregation its dtype has not, an output name made twice."""
        plan = self.plan(list(df.columns))
        missing = [c for c in dict.fromkeys(self.groupby_cols + self.sort_cols + list(plan)) if c not in df.columns]
        if missing:
            raise KeyError(f"Groupby: column(s) {missing} are not in the frame (it has {list(df.columns)[:20]})")
        if not plan: raise ValueError("Groupby: no column to aggregate: the frame has only the key columns")
        for c,aggs in plan.items():
            dt = df[c].dtype
            num = pd.api.types.is_numeric_dtype(dt) and getattr(dt, 'name', '') != 'category'
            for a in aggs:
                if a in _NUMERIC and not num:
                    raise TypeError(f"Groupby: {a!r} of column {c!r} needs numbers, and it holds {dt}")
                if a in _ORDERED and not (num or pd.api.types.is_datetime64_any_dtype(dt)):
                    raise TypeError(f"Groupby: {a!r} of column {c!r} needs numbers or datetimes, and it holds {dt}")
        names = self.groupby_cols + self.out_names(plan)
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice: raise ValueError(f"Groupby: the output would name column(s) {twice} twice: change name_sep")
        return plan

    def __call__(self, df:Frame) -> Frame:
        "`df`'s rows grouped: a new frame on `df`'s backend (`df` itself is left as it was)."
        backend_of(df)   # a TypeError for anything but a frame
        if is_dask(df):
            f = _distributed.get('dask')
            if f is None: raise ImportError("Groupby of a Dask frame needs fastai_gpu_tabular.dask imported "
                                            "(`from fastai_gpu_tabular.all import *` imports it)")
            return f(self, df)
        plan = self.check(df)
        if len(df) == 0: raise ValueError("Groupby got an empty frame: there are no rows to group")
        return self.aggregate(df, plan)

    def aggregate(self, df:Frame, plan:dict) -> Frame:
        """The grouped frame of an in-memory `df` already checked (an empty one gives no row: Dask's meta, and its
        empty partitions)."""
        gid = key_ids([df[k] for k in self.groupby_cols], self.groupby_cols)
        xp = array_module(gid)
        order = xp.arange(len(gid))
        # stable sorts, the least significant first: the frame's order, each sort column from the last, the key
        for c in reversed(self.sort_cols):
            r = sort_ranks(df[c], c)
            order = order[xp.argsort(r[order], kind='stable')]
        order = order[xp.argsort(gid[order], kind='stable')]
        order = order[int((gid < 0).sum()):]   # a missing key sorts first: dropped, as pandas' dropna=True
        g = gid[order]
        new = g[1:] != g[:-1]
        starts = xp.flatnonzero(xp.concatenate([xp.ones(min(len(g), 1), bool), new]))
        lens = xp.diff(xp.concatenate([starts, xp.asarray([len(g)])]))
        cols = list(dict.fromkeys(self.groupby_cols + list(plan)))
        rows = df[cols].take(order).reset_index(drop=True)
        out = rows[self.groupby_cols].take(starts).reset_index(drop=True)
        dense = series_like(rows, xp.repeat(xp.arange(len(starts)), lens))   # each row's group, 0.. in key order
        vals = [c for c,aggs in plan.items() if any(a != 'list' for a in aggs)]
        grouped = group_by(rows[vals], dense, sort=True) if vals else None
        for c,aggs in plan.items():
            for a in aggs:
                name = f'{c}{self.name_sep}{a}'
                if a == 'list': out[name] = list_column(rows[c], out, lens, name)
                else: out[name] = getattr(grouped[c], a)().reset_index(drop=True)
        return out

def key_ids(cols:list, names:list):
    """Each row's key as an int64 id on the columns' device, ordered as the keys sort (each column's sorted distinct
    values, the first column most significant), -1 where a key column is missing."""
    gid, card = None, 1
    for col,name in zip(cols, names):
        try: codes, uniq = col.factorize(sort=True)   # -1: missing
        except TypeError as e: raise TypeError(f"Groupby: key column {name!r} cannot be sorted ({e})") from None
        xp = array_module(codes)
        codes, k = xp.asarray(codes).astype('int64'), max(len(uniq), 1)
        if gid is None: gid = codes
        else:
            if card * k >= 2**62:   # renumber the ids so far (sorted: the order stays), so the next digit fits
                u, gid = xp.unique(gid, return_inverse=True)
                gid, card = gid.reshape(-1) - int(bool(u[0] < 0)), len(u)
            gid = xp.where((gid < 0) | (codes < 0), -1, gid * k + codes)
        card *= k
    return gid

def sort_ranks(col, name:str):
    """Values that sort as pandas' `sort_values` sorts `col` (missing last), on its device: a NumPy number column's own
    values (NaN sorts last), else each value's rank among the sorted distinct ones."""
    dt = col.dtype
    if isinstance(dt, np.dtype) and dt.kind in 'iufb': return column_values(col)
    try: codes, uniq = col.factorize(sort=True)
    except TypeError as e: raise TypeError(f"Groupby: sort column {name!r} cannot be sorted ({e})") from None
    xp = array_module(codes)
    codes = xp.asarray(codes).astype('int64')
    return xp.where(codes < 0, len(uniq), codes)

def list_column(values, like:Frame, lens, name:str):
    """The list column on `like`'s backend and index whose row i holds the next `lens[i]` of `values` (a column, in
    row order): an Arrow list array from the values and the offsets (`backend.lists_like`), no loop."""
    return lists_like(like, to_host(values).to_numpy(), to_host(lens), name=name)
