"""Continuous columns reshaped before the model sees them: `Bucketize` (a number's bucket, as a cat column, between
given boundaries or the training rows' quantiles, as pandas' `qcut` learns them), `LogOp` (log1p of counts and other
values above -1), `Clip` (values held within bounds) and `NormalizeMinMax` (values scaled to [0, 1] by the training
rows' range): NVTabular's ops of those names, as fastai procs."""
from __future__ import annotations

import numbers
import numpy as np
import pandas as pd
from fastai.tabular.core import Tabular, TabularProc

from ..backend import Column, array_module, backend_of, codes_dtype, column_values, series_like, to_backend, to_host
from ..checks import check_new_columns, guard_setups

__all__ = ['Bucketize', 'LogOp', 'Clip', 'NormalizeMinMax']

def _names(names) -> list: return [names] if isinstance(names, str) else list(names)

def check_numbers(to:Tabular, names:list, what:str):
    "Columns `names` are numeric columns of the frame (not bools), or an error naming them, before any work."
    cols = to.items.columns
    bad = [n for n in names if n not in cols]
    if bad: raise KeyError(f"{what}: column(s) {bad} are not in the frame (it has {list(cols)[:20]}): name them in "
                           "cont_names so that the Tabular keeps them")
    bad = [n for n in names if getattr(to.items[n].dtype, 'kind', None) not in ('i', 'u', 'f')]
    if bad: raise TypeError(f"{what} takes numbers: column(s) {bad} are of dtype(s) "
                            f"{[str(to.items[n].dtype) for n in bad]}")

def _float_values(col:Column):
    "A numeric column's values on its device as floats (its own float dtype, else float64), missing ones NaN."
    if getattr(col.dtype, 'kind', None) != 'f' or not isinstance(col.dtype, np.dtype): col = col.astype('float64')
    return column_values(col)

def _number(v, what:str) -> float:
    "`v` as a Python number (plain data: it is saved as JSON), or a ValueError unless it is a number (not NaN)."
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or np.isnan(v):
        raise ValueError(f"{what} must be a number, got {v!r}")
    return v.item() if isinstance(v, np.generic) else v

# --- Bucketize ----------------------------------------------------------------------------------------------------
def qcut_bins(values:pd.Series, q) -> np.ndarray:
    """The bin edges pandas' `qcut(values, q, duplicates='drop')` cuts at: `values`' quantiles (pandas' own
    `Series.quantile`, missing values skipped) at `q` (a number of buckets, or the quantiles), duplicates dropped."""
    quantiles = np.linspace(0, 1, q + 1) if isinstance(q, numbers.Integral) else np.asarray(q, dtype='f8')
    return pd.unique(values.dropna().quantile(quantiles).to_numpy())

def bucket_codes(x, bins, right:bool):
    """Each value's bucket among the sorted inner edges `bins`: `np.digitize(x, bins, right)` (on `x`'s device), -1 for
    a missing value."""
    xp = array_module(x)
    return xp.where(xp.isnan(x), -1, xp.digitize(x, xp.asarray(bins), right=right))

class Bucketize(TabularProc):
    """Each continuous column of `names` bucketed into a new cat column `<name>_bucket` (the source stays a cont), that
    Categorify encodes (its vocabulary is every bucket, 0..k-1: codes 1..k, and 0 for a missing value). Either
    `boundaries` (sorted numbers, or {name: numbers}): `np.digitize(x, boundaries, right)`, as NVTabular's `Bucketize`
    (`right=False`: bucket i holds boundaries[i-1] <= x < boundaries[i], so len(boundaries) + 1 buckets); or `q` (a
    number of buckets, or the quantiles): the edges pandas' `qcut(x, q, duplicates='drop')` learns from the training
    rows (`bins`), bucket i holding bins[i] < x <= bins[i+1] (the lowest included): the training rows get qcut's codes,
    and a later value past the training range goes to the first or last bucket. Runs early (`order` -2), on the raw
    values (after `Clip` and `LogOp` listed before it)."""
    order = -2
    def __init__(self,
        names:str|list, # continuous columns to bucket
        boundaries:list|dict|None=None, # the buckets' edges (each column's, as a dict)
        q:int|list|None=None, # or: buckets of equal training rows (an int), or these quantiles of them
        right:bool=False # with `boundaries`: buckets closed on the right (np.digitize's `right`)
    ):
        self.names = _names(names)
        if (boundaries is None) == (q is None): raise ValueError("Bucketize takes `boundaries` or `q`, one of them")
        if q is not None:
            if isinstance(q, numbers.Integral) and not isinstance(q, bool):
                if q < 1: raise ValueError(f"Bucketize(q=...) must be an integer >= 1 or quantiles, got {q!r}")
            else:
                qs = np.asarray(q, dtype='f8')
                if qs.ndim != 1 or len(qs) < 2 or (np.diff(qs) <= 0).any() or qs[0] < 0 or qs[-1] > 1:
                    raise ValueError(f"Bucketize(q=...) quantiles must increase within [0, 1], got {q!r}")
        if boundaries is not None:   # {name: numbers}, plain data
            given = dict(boundaries) if isinstance(boundaries, dict) else {n: boundaries for n in self.names}
            missing = [n for n in self.names if n not in given]
            if missing: raise ValueError(f"Bucketize(boundaries=...) has no boundaries for column(s) {missing}")
            boundaries = {n: [_number(v, f"Bucketize's boundaries of {n!r}") for v in given[n]] for n in self.names}
            bad = [n for n,b in boundaries.items() if np.any(np.diff(b) <= 0)]
            if bad: raise ValueError(f"Bucketize's boundaries of {bad} must increase")
        if q is not None: q = int(q) if isinstance(q, numbers.Integral) else [float(v) for v in q]
        self.boundaries, self.q, self.right = boundaries, q, bool(right)
        self.made_names = [f'{n}_bucket' for n in self.names]
        self.bins = None   # {name: the inner edges, a list of floats}, learned from the training rows for `q`
        super().__init__()

    @property
    def closed_right(self) -> bool:
        "Whether a bucket holds its upper edge: qcut's buckets do, given boundaries as `right` says."
        return True if self.q is not None else self.right

    def raw_names(self, cat_names, cont_names, y_names) -> list:
        "The columns it buckets: fastai's shrink leaves them as they are (see `checks.raw_columns`)."
        return list(self.names)

    def check_columns(self, to:Tabular): check_numbers(to, self.names, 'Bucketize')

    @guard_setups
    def setups(self, to:Tabular):
        self.check_columns(to)
        check_new_columns('Bucketize', self.made_names, to.items.columns, to.y_names)
        if self.q is None: self.bins = {n: [float(v) for v in self.boundaries[n]] for n in self.names}
        else: self.bins = {n: inner_bins(qcut_bins(to_host(to.items[n]).astype('float64'), self.q))
                           for n in self.names}

    def buckets(self, col:Column, n:str) -> Column:
        "The bucket column of column `n` (`col`): a categorical of the buckets 0..k-1 on `col`'s backend and index."
        b = self.bins[n]
        codes = to_host(bucket_codes(_float_values(col), np.asarray(b, dtype='f8'), self.closed_right))
        k = len(b) + 1
        cat = pd.Categorical.from_codes(codes.astype(codes_dtype(k)), dtype=pd.CategoricalDtype(list(range(k))))
        return to_backend(pd.Series(cat, index=to_host(col.index), name=f'{n}_bucket'), backend_of(col))

    def encodes(self, to:Tabular):
        if self.bins is None: raise RuntimeError("Bucketize is not set up: make a Tabular with it first")
        for n,c in zip(self.names, self.made_names):
            to[c] = self.buckets(to.items[n], n)
            if c not in to.cat_names: to.cat_names.append(c)
        return to

def inner_bins(edges:np.ndarray) -> list:
    "qcut's edges without the outer two: the training range's ends, which a later value may pass."
    return [float(v) for v in edges[1:-1]]

# --- LogOp and Clip -------------------------------------------------------------------------------------------------
class _InPlace(TabularProc):
    "What LogOp and Clip share: continuous columns `names` rewritten in place by `rewrite`, nothing learned."
    order = -2
    def raw_names(self, cat_names, cont_names, y_names) -> list:
        "The columns it rewrites: fastai's shrink leaves them as they are (see `checks.raw_columns`)."
        return list(self.names)

    def check_columns(self, to:Tabular): check_numbers(to, self.names, type(self).__name__)

    @guard_setups
    def setups(self, to:Tabular): self.check_columns(to)   # it learns nothing

    def encodes(self, to:Tabular):
        self.check_columns(to)
        for n in self.names: to[n] = series_like(to.items, self.rewrite(to.items[n], n), name=n)
        return to

class LogOp(_InPlace):
    """Each continuous column of `names` as `log1p(x)` (float64), in place (NVTabular's `LogOp`): counts, prices,
    durations. log1p is defined above -1: a value <= -1 is an error naming the column (at set-up and in every later
    frame: never a silent NaN or -inf); a missing one stays missing, for FillMissing. Runs early (`order` -2), on the
    raw values, before FillMissing and Normalize."""
    def __init__(self, names:str|list):
        self.names = _names(names)
        super().__init__()

    def rewrite(self, col:Column, n:str):
        "log1p of column `n` (`col`) on its device, float64; a ValueError naming it if a value is -1 or below."
        x = _float_values(col).astype('f8')
        neg = x <= -1   # log1p(-1) is -inf, below it NaN: neither is a feature
        if bool(neg.any()):
            raise ValueError(f"LogOp: column {n!r} holds {int(neg.sum())} value(s) <= -1, e.g. "
                             f"{float(to_host(x[neg][:1])[0])!r}: log1p takes values > -1; clip them first "
                             f"(Clip({n!r}, 0)) or shift them")
        return array_module(x).log1p(x)

class Clip(_InPlace):
    """Each continuous column of `names` held within `[min_value, max_value]` (either may be None), in place
    (NVTabular's `Clip`); a missing value stays missing. The dtype is the column's, as numpy's `maximum`/`minimum`
    promote it with the bounds (an int column clipped by ints stays ints). Runs early (`order` -2), on the raw values,
    before FillMissing and Normalize."""
    def __init__(self, names:str|list, min_value:float|None=None, max_value:float|None=None):
        if min_value is None and max_value is None: raise ValueError("Clip needs min_value or max_value")
        lo = None if min_value is None else _number(min_value, 'Clip(min_value=...)')
        hi = None if max_value is None else _number(max_value, 'Clip(max_value=...)')
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"Clip(min_value={lo!r}) is above max_value={hi!r}")
        self.names, self.min_value, self.max_value = _names(names), lo, hi
        super().__init__()

    def rewrite(self, col:Column, n:str):
        "Column `n`'s values within the bounds, on its device (NaN stays NaN: numpy's maximum and minimum keep it)."
        x = column_values(col.astype('float64') if not isinstance(col.dtype, np.dtype) else col)
        xp = array_module(x)
        if self.min_value is not None: x = xp.maximum(x, self.min_value)
        if self.max_value is not None: x = xp.minimum(x, self.max_value)
        return x

class NormalizeMinMax(_InPlace):
    """Each continuous column of `names` as `(x - min) / (max - min)` (float64), in place, `min` and `max` those of the
    training rows (NVTabular's `NormalizeMinMax`; fastai has `Normalize`, by mean and std): training values fall in
    [0, 1], a later one may pass them. A missing value stays missing, as fastai's Normalize leaves it (FillMissing,
    after it, fills it from the scaled values and flags it). A constant column (max == min) is divided by 1, not 0: its
    training rows give 0, a later value its distance from that constant (NVTabular divides x by 2x there: 0.5, and NaN
    for 0). A column with no value in the training rows, or an infinite one, is an error naming it. The state: `mins`
    and `maxs`, {name: float}, on the host. Runs early (`order` -2), in the order listed with LogOp and Clip, before
    FillMissing and Normalize."""
    def __init__(self, names:str|list):
        self.names = _names(names)
        self.mins = self.maxs = None
        super().__init__()

    @guard_setups
    def setups(self, to:Tabular):
        self.check_columns(to)
        self.mins, self.maxs = min_max({n: to_host(to.items[n]) for n in self.names}, len(to.items))

    def rewrite(self, col:Column, n:str):
        "`(x - min) / (max - min)` of column `n` (`col`) on its device, float64 (a range of 0 divides by 1)."
        if self.mins is None: raise RuntimeError("NormalizeMinMax is not set up: make a Tabular with it first")
        x = _float_values(col).astype('f8')
        lo, hi = self.mins[n], self.maxs[n]
        return (x - lo) / ((hi - lo) or 1.0)

def min_max(cols:dict, rows:int) -> tuple:
    """`(mins, maxs)`, {name: float}, of the host columns `cols` (the training rows' values, missing ones skipped); a
    ValueError naming a column with no value or an infinite one."""
    if not rows: raise ValueError("NormalizeMinMax: the training rows are empty: it learns each column's min and max")
    mins, maxs = {}, {}
    for n,c in cols.items():
        x = c.astype('float64')
        lo, hi = x.min(), x.max()
        if np.isnan(lo): raise ValueError(f"NormalizeMinMax: column {n!r} has no value in the training rows")
        if np.isinf(lo) or np.isinf(hi):
            raise ValueError(f"NormalizeMinMax: column {n!r} holds an infinite value: its range would be infinite; "
                             f"clip it first (Clip({n!r}, ...))")
        mins[n], maxs[n] = float(lo), float(hi)
    return mins, maxs
