"""A key's history as features, with no sorting by the caller: `DifferenceLag` (each row's difference from its key's
previous event), `History` (the values of its key's last N earlier events, as a multi-hot list column) and `ListSlice`
(the first or last N elements of a multi-hot column): NVTabular's `DifferenceLag`, and its `Groupby` to time-sorted
lists with `ListSlice`, as fastai procs.

The order of a key's events is its rows sorted by time; rows at the same time keep the Tabular's order (its training
rows first, then its validation rows: `TabularGPU`'s frame, and the order `TabularDask` gives them). A key may be
several columns; a row missing any of them has no history and is in no one's. The time is a numeric or datetime
column (a datetime as its nanoseconds), with no missing value.

A later frame (`new`, `test_dl`, `predict`) follows the frame the proc was set up on, in time: each proc keeps, as its
learned state `last`, each key's last events of that frame (keys, time and values: a host frame), which come before the
later frame's own rows of that key. A later row earlier in time than its key's last learned event (a late event) has no
history and is in no one's, as a row missing its key: its lags are NaN, its lists empty."""
from __future__ import annotations

import numbers
import numpy as np
import pandas as pd
from fastai.tabular.core import Tabular, TabularProc

from ..backend import (
    Column,
    Frame,
    array_module,
    column_values,
    explode_lists,
    frame_like,
    is_dask,
    is_str_dtype,
    lists_like,
    to_host,
)
from ..checks import check_new_columns, guard_setups

__all__ = ['DifferenceLag', 'History', 'ListSlice']

def _names(names) -> list:
    return [names] if isinstance(names, str) else list(names)

def _shifts(shift) -> list:
    "DifferenceLag's `shift` (an int or a list of them) as a list of distinct nonzero ints, or a ValueError."
    many = isinstance(shift, (list, tuple))
    vals = list(shift) if many else [shift]
    bad = [v for v in vals if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v == 0]
    if bad or not vals or len(set(vals)) < len(vals):
        raise ValueError("DifferenceLag(shift=...) must be a nonzero integer or a list of distinct ones, got "
                         f"{shift!r}")
    return [int(v) for v in vals]

def lag_name(name, shift:int, keys:list) -> str:
    "DifferenceLag's column: `<name>_lag_<keys>` for shift 1, `<name>_lag<k>_<keys>` for k > 1, `_lead<k>_` for -k."
    tag = 'lag' if shift == 1 else f'lag{shift}' if shift > 0 else f'lead{-shift}'
    return '_'.join(map(str, [name, tag, *keys]))

def _count(n, what:str) -> int:
    "`n` as an int, or a ValueError unless it is an integer >= 1."
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"{what} must be an integer >= 1, got {n!r}")
    return int(n)

# --- the events of each key, in order -------------------------------------------------------------------------------
def event_values(col:Column, name:str, what:str) -> tuple:
    """`(values, missing)` of a numeric or datetime column as arrays on its device: ints as int64 (float64 where some
    are missing), floats in their dtype, datetimes as int64 nanoseconds; a TypeError naming the column otherwise."""
    dt = col.dtype
    kind = getattr(dt, 'kind', None)
    if kind not in ('i', 'u', 'f', 'M') or is_str_dtype(dt):
        raise TypeError(f"{what}: column {name!r} holds {dt} values, not numbers or datetimes: convert it first")
    miss = column_values(col.isna()).astype(bool)
    any_missing = bool(miss.any())
    if kind == 'M':   # nanoseconds, whatever the unit (UTC for a time zone's); a missing one filled, and masked
        if bool(miss.all()): return array_module(miss).zeros(len(miss), 'int64'), miss
        if getattr(dt, 'tz', None) is not None: col = col.dt.tz_convert('UTC').dt.tz_localize(None)
        if any_missing: col = col.fillna(col.min())
        return column_values(col.astype('datetime64[ns]').astype('int64')), miss
    if not isinstance(dt, np.dtype) or (kind != 'f' and any_missing): col = col.astype('float64')   # pandas' NA: NaN
    v = column_values(col)
    return (v.astype('int64') if v.dtype.kind in 'iu' else v), miss

def key_groups(cols:list, prefix:list|None=None):
    """Each row's key as an int64 id (on the columns' device; -1 where a key column is missing), for the rows of
    `prefix` (host Series of the same key columns: a state's events), then those of `cols` (the frame's key columns).
    Several columns make one id, their codes as its digits."""
    xp = array_module(cols[0])
    group, card = None, 1
    for j,col in enumerate(cols):
        codes, uniq = col.factorize()   # -1: missing
        codes = xp.asarray(codes).astype('int64')
        if prefix is not None:   # the prefix's values looked up among the frame's: one it lacks has no row to meet
            vocab = pd.Index(np.asarray(to_host(uniq), dtype=object), dtype=object, tupleize_cols=False)
            pre = vocab.get_indexer(pd.Index(np.asarray(prefix[j], dtype=object), dtype=object, tupleize_cols=False))
            codes = xp.concatenate([xp.asarray(pre.astype('int64')), codes])
        k = max(len(uniq), 1)
        if group is None: group = codes
        else:
            if card * k >= 2**62:   # renumber the ids so far, so that the next digit fits in int64
                u, group = xp.unique(group, return_inverse=True)
                group, card = group.reshape(-1) - int(bool(u[0] < 0)), len(u)
            group = xp.where((group < 0) | (codes < 0), -1, group * k + codes)
        card *= k
    return group

class KeyEvents:
    """The rows of a frame, after those of `prefix` (a state's events: they come first in their key, in their order),
    in each key's event order: `order` (positions, sorted by key, then time, then `ties`: default the frame's order),
    `same[i]` (whether sorted row i is of the same key as sorted row i-1, and has one), `times` (each row's, after the
    prefix's), `n_pre` (the prefix's rows)."""
    def __init__(self, df:Frame, keys:list, time:str, prefix:pd.DataFrame|None=None, ties=None, what:str='History'):
        self.n_pre = 0 if prefix is None else len(prefix)
        self.group = key_groups([df[k] for k in keys], None if prefix is None else [prefix[k] for k in keys])
        t, miss = event_values(df[time], time, what)
        if bool(miss.any()):
            raise ValueError(f"{what}: time column {time!r} holds {int(miss.sum())} missing value(s): each event needs "
                             "a time; drop or fill those rows first")
        xp = self.xp = array_module(t)
        n = self.n_pre + len(t)
        if prefix is not None:
            t = xp.concatenate([xp.asarray(prefix[time].to_numpy()), t])
            self.group[self.n_pre:][self._late(t)] = -1   # a late event: out of its key's history
        self.times = t
        # stable sorts, the least significant key first: the ties, the time, prefix before frame, the key
        order = xp.arange(n) if ties is None else xp.argsort(xp.concatenate([xp.arange(self.n_pre), ties]),
                                                             kind='stable')
        order = order[xp.argsort(t[order], kind='stable')]
        if self.n_pre: order = order[xp.argsort((order >= self.n_pre).astype('int8'), kind='stable')]
        self.order = order[xp.argsort(self.group[order], kind='stable')]
        g = self.group[self.order]
        self.same = xp.zeros(n, bool)
        self.same[1:] = (g[1:] == g[:-1]) & (g[1:] >= 0)

    def _late(self, t):
        "Whether each frame row is earlier in time than its key's last event of the prefix (whose rows lead the times)."
        xp, n_pre = self.xp, self.n_pre
        gp, tp, g = self.group[:n_pre], t[:n_pre], self.group[n_pre:]
        o = xp.argsort(tp, kind='stable')
        o = o[xp.argsort(gp[o], kind='stable')]   # by key, then time: a key's latest is its last
        gs, ts = gp[o], tp[o]
        at = xp.searchsorted(gs, g, side='right') - 1
        ok = (at >= 0) & (g >= 0)
        at = xp.maximum(at, 0)
        return ok & (gs[at] == g) & (t[n_pre:] < ts[at]) if n_pre else xp.zeros(len(g), bool)

    @property
    def rows(self):
        "The frame's rows (after the prefix's) as positions."
        return self.xp.arange(self.n_pre, len(self.order))

    def runs(self) -> tuple:
        "`(rank, left)` of each sorted row: events of its key before it, and after it (its key's last: 0)."
        xp = self.xp
        n = len(self.order)
        first, last = ~self.same, xp.ones(n, bool)
        last[:-1] = ~self.same[1:]
        run = xp.cumsum(first) - 1
        at = xp.arange(n)
        return at - xp.flatnonzero(first)[run], xp.flatnonzero(last)[run] - at

    def lag(self, v, miss, shift:int=1, runs=None):
        """`v` (values of every row, after the prefix's) less its key's event `shift` before it (after it, for a
        negative shift: pandas' `diff(shift)` within the key), float64; NaN where the key has no such event. `runs`:
        `self.runs()`, if at hand."""
        xp = self.xp
        out = xp.full(len(v), np.nan)
        if shift == 1: m = xp.flatnonzero(self.same[1:]) + 1   # the common case, without the runs
        else:
            rank, left = self.runs() if runs is None else runs
            m = xp.flatnonzero(rank >= shift if shift > 0 else left >= -shift)
        cur, other = self.order[m], self.order[m - shift]
        out[cur] = xp.where(miss[cur] | miss[other], np.nan, (v[cur] - v[other]).astype('f8'))
        return out[self.n_pre:]

    def earlier(self, n:int) -> tuple:
        """`(lens, at, k, elems)` of the frame's rows' last `n` earlier events of their key: how many each has, and for
        each event (row after row, most recent first) the frame row it is of (`at`), its rank back (`k`, 1 the most
        recent) and its position (`elems`)."""
        xp = self.xp
        rank, _ = self.runs()
        inv = xp.empty_like(self.order)
        inv[self.order] = xp.arange(len(self.order))
        s = inv[self.rows]
        lens = xp.minimum(rank[s], n)
        ends = xp.cumsum(lens)
        total = int(ends[-1]) if len(ends) else 0
        i = xp.arange(total)
        at = xp.searchsorted(ends, i, side='right')
        k = i - (ends - lens)[at] + 1
        return lens, at, k, self.order[s[at] - k]

    def last(self, n:int):
        "Positions of each key's last `n` events (a missing key's none), key after key, each key's oldest first."
        rank, left = self.runs()
        keep = (left < n) & (self.group[self.order] >= 0)
        return self.order[keep]

def _union_codes(col:Column, prefix:pd.Series|None) -> tuple:
    """`(codes, values)`: each row's value (the prefix's, then `col`'s) as an int64 code (-1: missing) into `values`,
    the distinct values of both (a host array)."""
    codes, uniq = col.factorize()
    xp = array_module(col)
    codes, values = xp.asarray(codes).astype('int64'), pd.Index(np.asarray(to_host(uniq)), tupleize_cols=False)
    if prefix is None or not len(prefix): return codes, values.to_numpy()
    pre = values.get_indexer(pd.Index(np.asarray(prefix, dtype=object), dtype=object, tupleize_cols=False))
    new = (pre < 0) & ~pd.isna(prefix).to_numpy()
    inv, extra = pd.factorize(prefix[new])
    pre[new] = len(values) + inv
    values = values.append(pd.Index(np.asarray(extra), tupleize_cols=False))
    return xp.concatenate([xp.asarray(pre.astype('int64')), codes]), values.to_numpy()

def _taken(values:np.ndarray, codes:np.ndarray) -> np.ndarray:
    "`values[codes]` (host arrays), None where a code is -1 (then as objects)."
    if not len(codes) or codes.min() >= 0: return values[codes]
    return np.append(values.astype(object), None)[codes]

def last_state(df:Frame, ev:KeyEvents, n:int, cols:dict) -> pd.DataFrame:
    """Each key's last `n` events of `df` (no prefix) as a host frame, key after key, each key's oldest first (then
    `sort_state` orders the keys by value): `cols` {name: the frame's column, or an array of every row's values
    (numbers)} at those rows."""
    pos = ev.last(n)
    host = lambda v: to_host(v.take(pos)).to_numpy() if hasattr(v, 'iloc') else to_host(v[pos])
    return pd.DataFrame({c: host(v) for c,v in cols.items()})

def frame_of(to:Tabular) -> Frame:
    "`to`'s frame, or for a Dask one its empty partition (`_meta`): what checks of columns and dtypes read."
    return to.items._meta if is_dask(to.items) else to.items

def _check(to:Tabular, what:str, keys:list, time:str, names:list):
    "The columns are in the frame and the time is a number or datetime, or errors naming them, before any work."
    df = frame_of(to)
    cols = df.columns
    bad = [n for n in dict.fromkeys([*keys, time, *names]) if n not in cols]
    if bad: raise KeyError(f"{what}: column(s) {bad} are not in the frame (it has {list(cols)[:20]}): a later "
                           "frame (new, test_dl, predict) must hold them too")
    mh = getattr(to, 'multi_hot', {})
    bad = [n for n in [*keys, time, *names] if n in mh]
    if bad: raise TypeError(f"{what}: column(s) {bad} hold lists (multi-hot): keys, times and values are one a row")
    dt = df[time].dtype
    if getattr(dt, 'kind', None) not in ('i', 'u', 'f', 'M') or is_str_dtype(dt):
        raise TypeError(f"{what}: the time column {time!r} holds {dt} values: it takes numbers or datetimes")

class _KeyHistoryProc(TabularProc):
    "What `DifferenceLag` and `History` share: the set-up object remembered, its last events learned at its encodes."
    def setup(self, items=None, train_setup=False):
        "fastai's set-up, remembering the object set up on: its encodes learn `last`, the state a later frame follows."
        self._fitting = items
        try: return super().setup(items, train_setup)
        finally: self._fitting = None

    def raw_names(self, cat_names, cont_names, y_names) -> list:
        "Its keys, time and values: fastai's shrink leaves them as they are (see `checks.raw_columns`)."
        return list(dict.fromkeys([*self.keys, self.time, *self.names]))

    def reads(self) -> list:
        """The columns it reads (`checks.read_columns`): kept for it in every frame, in cat_names/cont_names or not (a
        raw time need not be a model input)."""
        return list(dict.fromkeys([*self.keys, self.time, *self.names]))

    def prefix(self, to):
        "The state a frame follows: none for the object being set up (it learns it), else `last`."
        if to is self._fitting: return None
        if self.last is None: raise RuntimeError(f"{type(self).__name__} is not set up: make a Tabular with it first")
        return self.last

    @guard_setups
    def setups(self, to:Tabular):   # it learns `last` at the encodes of the whole object
        self.check_columns(to)
        check_new_columns(type(self).__name__, self.made_names, frame_of(to).columns, to.y_names)

class DifferenceLag(_KeyHistoryProc):
    """For each row, the difference of each of `names` (a time, a count, a price; default the time) from its key's
    previous event, as continuous columns `<name>_lag_<keys>` (float64): the time since the key's last event, by
    default. NaN for a key's first event (FillMissing's `<name>_lag_<keys>_na` flag then says "first event"), and where
    either value is missing. `shift` k (or a list: a column each): the difference from the key's k-th event before,
    `<name>_lag<k>_<keys>`; a negative k from its k-th event after, `<name>_lead<k>_<keys>` (pandas' `diff(k)`: for a
    time, minus the time to that event). That event is in the future: an offline feature, whose later frames know only
    their own next events (see docs/history.md). `keys`: the column or columns whose rows are one history (a user, a
    session, a plane); `time`: what orders them (see this module's docstring). The caller's rows keep their order;
    nothing need be sorted. Runs first (`order` -4), on the raw values (after `JoinExternal`, so a side table's price
    can be lagged)."""
    order = -4
    def __init__(self,
        keys:str|list, # the key column(s)
        time:str, # the column that orders a key's events: numbers or datetimes
        names:str|list|None=None, # the columns to difference (numbers or datetimes); default [time]
        shift:int|list=1 # events back (negative: ahead), or a list of them
    ):
        self.keys, self.time = _names(keys), time
        self.names = [time] if names is None else _names(names)
        self.shifts = _shifts(shift)
        self.shift = self.shifts if isinstance(shift, (list, tuple)) else self.shifts[0]
        self.made_names = [lag_name(n, k, self.keys) for n in self.names for k in self.shifts]
        self.last = None   # each key's last events (as many as the largest shift back): keys, time, values, on the host
        self._fitting = None
        super().__init__()

    def check_columns(self, to:Tabular):
        _check(to, 'DifferenceLag', self.keys, self.time, self.names)
        for n in self.names: event_values(frame_of(to)[n].iloc[:0], n, 'DifferenceLag')   # numbers or datetimes

    def lags(self, df:Frame, prefix:pd.DataFrame|None=None, ties=None, learn:bool=False) -> tuple:
        """`(lags, last)`: the columns it makes for the rows of `df` (after `prefix`'s events), a frame on `df`'s index
        and backend; and, if `learn`, each key's last event of `df` (else None)."""
        ev = KeyEvents(df, self.keys, self.time, prefix, ties, 'DifferenceLag')
        xp, res, vals = ev.xp, {}, {}
        runs = ev.runs() if self.shifts != [1] else None
        for n in self.names:
            v, miss = event_values(df[n], n, 'DifferenceLag')
            if prefix is not None:
                p = prefix[n].to_numpy()
                v, miss = xp.concatenate([xp.asarray(p), v]), xp.concatenate([xp.asarray(pd.isna(p)), miss])
            vals[n] = v if not bool(miss.any()) else xp.where(miss, np.nan, v.astype('f8'))
            for k in self.shifts: res[lag_name(n, k, self.keys)] = ev.lag(v, miss, k, runs)
        if not learn: return frame_like(df, res, columns=self.made_names), None
        # a shift k back needs the key's last k events; one ahead none (a later frame's next events are its own)
        last = last_state(df, ev, max(1, *self.shifts), {**{k: df[k] for k in self.keys}, self.time: ev.times, **vals})
        return frame_like(df, res, columns=self.made_names), sort_state(last, self.keys)

    def encodes(self, to:Tabular):
        self.check_columns(to)
        res, last = self.lags(to.items, self.prefix(to), learn=to is self._fitting)
        if last is not None: self.last = last
        for c in self.made_names:
            to[c] = res[c]
            if c not in to.cont_names: to.cont_names.append(c)
        return to

def sort_state(last:pd.DataFrame, keys:list) -> pd.DataFrame:
    "A state's events in the order of their keys' values (stable: each key's events keep their order), indexed 0..n-1."
    return last.sort_values(keys, kind='stable').reset_index(drop=True) if len(last) else last

class History(_KeyHistoryProc):
    """For each row, the values of each of `names` (item IDs, categories...) at its key's last `n` earlier events
    (before it in the key's event order: never the row itself, so no target of its own leaks), most recent first, as a
    multi-hot list column `<name>_last<n>_<keys>` that Categorify encodes (its vocabulary: the elements of the training
    rows' lists) and the model takes as a bag; a key's first event gets an empty list. With `lags`, also the time since
    each of those events, as continuous columns `<list>_lag1` (the most recent) ... `<list>_lag<n>` (float64; NaN
    where there are fewer), once for all `names`. See this module's docstring for the order and for later frames. Runs
    first (`order` -4), on the raw values; `ListSlice` cuts such a list further."""
    order = -4
    def __init__(self,
        names:str|list, # the columns whose values a row's history holds
        keys:str|list, # the key column(s)
        time:str, # the column that orders a key's events: numbers or datetimes
        n:int=5, # events kept (at most)
        lags:bool=False # also the time since each of them
    ):
        self.names, self.keys, self.time = _names(names), _names(keys), time
        self.n, self.lags = _count(n, 'History(n=...)'), bool(lags)
        key = '_'.join(map(str, self.keys))
        self.list_names = [f'{c}_last{self.n}_{key}' for c in self.names]
        self.lag_names = [f'{self.list_names[0]}_lag{k}' for k in range(1, self.n + 1)] if self.lags else []
        self.made_names = self.list_names + self.lag_names
        self.last = None   # each key's last `n` events, oldest first: keys, time, values, on the host
        self._fitting = None
        super().__init__()

    def check_columns(self, to:Tabular):
        _check(to, 'History', self.keys, self.time, self.names)

    def history(self, df:Frame, prefix:pd.DataFrame|None=None, ties=None, learn:bool=False) -> tuple:
        """`(values, lens, lags, last)` for the rows of `df` (after `prefix`'s events): {list column: the values of
        every row's list, one row after another} and how many each row has (host arrays: `lists_like` makes the
        column); the lags' frame (None without `lags`), on `df`'s index and backend; and, if `learn`, each key's last
        `n` events of `df` (else None)."""
        ev = KeyEvents(df, self.keys, self.time, prefix, ties, 'History')
        lens, at, k, elems = ev.earlier(self.n)
        values = {}
        for n,c in zip(self.names, self.list_names):
            codes, uniq = _union_codes(df[n], None if prefix is None else prefix[n])
            values[c] = _taken(uniq, to_host(codes[elems]))
        lags = None
        if self.lags:
            xp = ev.xp
            mat = xp.full((len(df), self.n), np.nan)
            t = ev.times
            mat[at, k - 1] = (t[ev.rows][at] - t[elems]).astype('f8')
            lags = frame_like(df, {c: xp.ascontiguousarray(mat[:, i]) for i,c in enumerate(self.lag_names)},
                              columns=self.lag_names)
        if not learn: return values, to_host(lens), lags, None
        last = last_state(df, ev, self.n, {**{c: df[c] for c in dict.fromkeys(self.keys + self.names)},
                                           self.time: ev.times})
        return values, to_host(lens), lags, sort_state(last, self.keys)

    def encodes(self, to:Tabular):
        self.check_columns(to)
        values, lens, lags, last = self.history(to.items, self.prefix(to), learn=to is self._fitting)
        if last is not None: self.last = last
        for c in self.list_names:
            to[c] = lists_like(to.items, values[c], lens, name=c)
            to.multi_hot[c] = None
            if c not in to.cat_names: to.cat_names.append(c)
        for c in self.lag_names:
            to[c] = lags[c]
            if c not in to.cont_names: to.cont_names.append(c)
        return to

# --- slices of a multi-hot column ---------------------------------------------------------------------------------
def _bound(i, lens, default, xp):
    "Python's slice bound `i` for lists of `lens` elements: counted from the end if negative, clipped to [0, len]."
    if i is None: return default
    return xp.clip(lens + i if i < 0 else xp.full_like(lens, i), 0, lens)

def sliced_lists(col:Column, start:int|None, stop:int|None, width:int|None=None, pad_value=None) -> Column:
    """Each list of the list column `col` as `lst[start:stop]`, on its backend and index, then (given `width`) padded
    to `width` elements with `pad_value` at its end. A missing list is the list of one missing element (as Categorify
    counts it)."""
    elems, lens = explode_lists(col)
    xp = array_module(lens)
    a, b = _bound(start, lens, xp.zeros_like(lens), xp), _bound(stop, lens, lens, xp)
    ends = xp.cumsum(lens)
    i = xp.arange(int(ends[-1]) if len(ends) else 0)
    row = xp.searchsorted(ends, i, side='right')
    pos = i - (ends - lens)[row]
    keep = (pos >= a[row]) & (pos < b[row])
    vals = to_host(elems).to_numpy()[to_host(keep)]
    lens = to_host(xp.maximum(b - a, 0))
    if width is None: return lists_like(col, vals, lens, name=col.name)
    _check_pad(vals, pad_value, col.name)
    # each row's elements at the start of its `width` slots, the pad after them
    out = np.full(len(lens) * width, pad_value, dtype=object if pad_value is None or vals.dtype.kind not in 'iuf'
                  else np.result_type(vals.dtype, np.asarray(pad_value).dtype))
    row = np.repeat(np.arange(len(lens)), lens)
    out[row * width + np.arange(len(vals)) - np.repeat(np.cumsum(lens) - lens, lens)] = vals
    return lists_like(col, out, np.full(len(lens), width), name=col.name)

def _check_pad(vals:np.ndarray, pad_value, name):
    "A TypeError naming the column and `pad_value` unless the pad is of its elements' kind (a number or a string)."
    if pad_value is None: return
    first = next((v for v in vals[:1000] if not pd.isna(v)), None)
    if first is None: return
    num = lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool)
    if num(first) != num(pad_value) or isinstance(first, str) != isinstance(pad_value, str):
        raise TypeError(f"ListSlice: column {name!r} holds {type(first).__name__} elements, and "
                        f"pad_value={pad_value!r} is not one of them: give a pad of the elements' kind (or None, a "
                        "missing element)")

def pad_width(start:int|None, stop:int|None) -> int:
    "The fixed length of `lst[start:stop]` padded, or a ValueError where it depends on each list's length."
    a = 0 if start is None else start
    if stop is None and a < 0: w = -a
    elif stop is not None and (a >= 0) == (stop >= 0): w = stop - a
    else: w = 0
    if w <= 0: raise ValueError(f"ListSlice(pad=True) needs a fixed length: [start:stop] = [{start}:{stop}] has none; "
                                "give both bounds of one sign (ListSlice(c, 0, 10): the first 10) or a negative start "
                                "alone (ListSlice(c, -10): the last 10)")
    return w

class ListSlice(TabularProc):
    """Each list of the multi-hot columns `names` cut to `lst[start:stop]`, as Python slices a list (NVTabular's
    `ListSlice`): `ListSlice(names, 0, 3)` keeps the first 3 elements, `ListSlice(names, -3)` the last 3 (but
    `ListSlice(names, 3)` drops the first 3, where NVTabular's one-argument `ListSlice(3)` keeps them). With `pad`, each
    is padded at its end to the slice's fixed length with `pad_value` (None: a missing element, Categorify's '#na#').
    In place, after `History` (`order` -3) and before Categorify, which then learns its vocabulary from the cut
    lists."""
    order = -3
    def __init__(self, names:str|list, start:int|None=0, stop:int|None=None, pad:bool=False, pad_value=None):
        for k,v in (('start', start), ('stop', stop)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
                raise ValueError(f"ListSlice({k}=...) must be an integer or None, got {v!r}")
        if not isinstance(pad, bool): raise ValueError(f"ListSlice(pad=...) must be True or False, got {pad!r}")
        if pad_value is not None and (isinstance(pad_value, bool) or not isinstance(pad_value, (str, numbers.Real))
                                      or pad_value != pad_value):
            raise ValueError(f"ListSlice(pad_value=...) must be a number, a string or None, got {pad_value!r}")
        self.width = pad_width(start, stop) if pad else None
        self.names, self.start, self.stop, self.pad = _names(names), start, stop, pad
        self.pad_value = pad_value.item() if isinstance(pad_value, np.generic) else pad_value
        super().__init__()

    def check_columns(self, to:Tabular):
        "Its columns are multi-hot columns of the frame, or an error naming them."
        bad = [n for n in self.names if n not in to.items.columns or n not in getattr(to, 'multi_hot', {})]
        if bad: raise KeyError(f"ListSlice cuts multi-hot (list) columns: {bad} are not multi-hot columns of the frame")

    @guard_setups
    def setups(self, to:Tabular): self.check_columns(to)   # it learns nothing

    def encodes(self, to:Tabular):
        self.check_columns(to)
        for n in self.names: to[n] = sliced_lists(to.items[n], self.start, self.stop, self.width, self.pad_value)
        return to
