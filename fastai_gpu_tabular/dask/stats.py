"""fastai's learned statistics over the partitions of a Dask frame, bit for bit what pandas computes from the same rows
in memory: numpy's summation order for means and stds, an exact two-pass median, and value counts in pandas' order."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..backend import array_module, column_values, counts_in_order, to_host

__all__ = []
# also public, not star-exported (generic names): `compute`, `delayed`, `run`, `replace_columns`, `mean_dtype`

def compute(*tasks):
    "Compute Dask collections or delayed objects together on the active scheduler (a distributed Client if any)."
    import dask
    return dask.compute(*tasks)

def delayed(f):
    "`f` as a Dask delayed function: pure (equal arguments, one task), its arguments passed as they are."
    import dask
    return dask.delayed(f, pure=True, traverse=False)

def run(calls:list) -> tuple:
    """Each `(f, part, *args)` of `calls`: in one Dask compute where the parts are Dask's (delayed partitions), here
    where they are frames in memory (the training rows held for the statistics: no pass over the partitions)."""
    if any(hasattr(c[1], 'dask') for c in calls): return compute(*[delayed(f)(*args) for f,*args in calls])
    return tuple(f(*args) for f,*args in calls)

def replace_columns(items, out, names:list|None=None):
    """`items` with columns `names` of `out` (all of them by default), a frame over the same partitions made from them,
    in place of its own: those it has keep their place, the others go last, as `assign` would place them. One
    concatenation a partition: an `assign` of each column is a task a column, and its alignment check tokenizes both."""
    import dask.dataframe as dd
    if names is not None: out = out[list(names)]   # all of `out` by default: no selection, which is a task a partition
    names = list(out.columns)
    order = list(items.columns) + [c for c in names if c not in items.columns]
    kept = items.drop(columns=[c for c in names if c in items.columns])
    return dd.concat([kept, out], axis=1, ignore_unknown_divisions=True)[order]

# --- numpy's pairwise summation ------------------------------------------------------------------------------------
# numpy adds a contiguous run of n values as a tree: runs of up to 128 in 8 interleaved lanes, longer runs split at
# n//2 rounded down to a multiple of 8. A sum with a dtype cast (float32 values, float64 sum) goes through buffers of
# `np.getbufsize()` values, each such a tree, added one after another. Partitions hold parts of those trees: each adds
# the subtrees it holds whole, and ships the values of the (<= 128 long) leaves it shares with its neighbours.
_LEAF = 128

def _split(n): h = n // 2; return h - h % 8

def _leaf_sum(x, xp):
    "numpy's sum of rows of `x` (m, n) with n <= 128, in its lane order."
    m, n = x.shape
    if n < 8:
        res = xp.zeros(m, x.dtype)
        for i in range(n): res = res + x[:, i]
        return res
    q = n - n % 8
    r = x[:, :8]
    for i in range(8, q, 8): r = r + x[:, i:i+8]
    res = ((r[:, 0] + r[:, 1]) + (r[:, 2] + r[:, 3])) + ((r[:, 4] + r[:, 5]) + (r[:, 6] + r[:, 7]))
    for i in range(q, n): res = res + x[:, i]
    return res

def pairwise_sum(x):
    """`x.sum(axis=-1)` of a 1-d or 2-d array as numpy adds it (pairwise, in its order), in `x`'s dtype, on `x`'s
    device: array libraries other than numpy (CuPy) add in other orders, and float sums depend on the order."""
    xp = array_module(x)
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    n = x2.shape[1]
    levels, starts, lens = [], np.zeros(1, np.int64), np.full(1, n, np.int64)
    while True:   # the tree, level by level, on the host
        split = lens > _LEAF
        levels.append((starts, lens, split))
        if not split.any(): break
        h = lens[split] // 2
        h -= h % 8
        s, l = starts[split], lens[split]
        starts, lens = np.stack([s, s + h], 1).ravel(), np.stack([h, l - h], 1).ravel()
    below = None
    for starts, lens, split in reversed(levels):   # then the sums, bottom up, on the device
        v = xp.empty((x2.shape[0], len(starts)), x2.dtype)
        for n_ in np.unique(lens[~split]):
            at = np.flatnonzero(~split & (lens == n_))
            idx = xp.asarray(starts[at][:, None] + np.arange(n_))
            v[:, xp.asarray(at)] = _leaf_sum(x2[:, idx].reshape(-1, int(n_)), xp).reshape(x2.shape[0], len(at))
        if split.any(): v[:, xp.asarray(np.flatnonzero(split))] = below[:, 0::2] + below[:, 1::2]
        below = v
    return below[:, 0] if x.ndim == 2 else below[0, 0]

def sum_nodes(x, nodes):
    "Sums of `x[a:a+n]` for each `(a, n)` in `nodes`, each as numpy adds it (NumPy's own sum on the host)."
    if array_module(x) is np: return [x[a:a+n].sum() for a,n in nodes]
    return [pairwise_sum(x[a:a+n]) for a,n in nodes]

class SumPlan:
    """How numpy adds `n` values into a `dtype` sum, as blocks (one block, or the cast buffers) of pairwise trees,
    and which of its nodes the rows `[start, stop)` of a partition hold."""
    def __init__(self, n:int, cast:bool, bufsize:int|None=None):
        self.n = n
        self.block = max(n, 1) if not cast else bufsize or np.getbufsize()

    def blocks(self, start=0, stop=None):
        stop = self.n if stop is None else stop
        for b in range(start // self.block, -(-stop // self.block)):
            yield b, b * self.block, min(self.block, self.n - b * self.block)

    def pieces(self, start, stop):
        "`(whole, shared)`: nodes `(block, a, n)` inside `[start, stop)`, and the leaves it shares with its neighbours."
        whole, shared = [], []
        def walk(b, a, n):
            if a >= stop or a + n <= start: return
            if start <= a and a + n <= stop: whole.append((b, a, n))
            elif n <= _LEAF: shared.append((b, a, n))
            else:
                h = _split(n)
                walk(b, a, h); walk(b, a + h, n - h)
        for b,a,n in self.blocks(start, stop): walk(b, a, n)
        return whole, shared

    def total(self, whole:dict, shared:dict, dtype):
        "The sum from the nodes' sums `{(block, a, n): sum}` and the shared leaves' values `{(block, a, n): [arrays]}`."
        t = dtype.type
        def node(b, a, n):
            if (b, a, n) in whole: return t(whole[(b, a, n)])
            if n <= _LEAF: return t(np.concatenate(shared[(b, a, n)]).astype(dtype, copy=False).sum())
            h = _split(n)
            return t(node(b, a, h) + node(b, a + h, n - h))
        res = t(0)
        for b,a,n in self.blocks(): res = t(res + node(b, a, n))
        return res

def _plan_pieces(x, plan, start, dtype):
    "A partition's share of `plan` for its values `x` (rows `[start, start+len(x))`): node sums and shared leaves."
    whole, shared = plan.pieces(start, start + len(x))
    xs = x.astype(dtype, copy=False)
    sums = sum_nodes(xs, [(a - start, n) for _,a,n in whole])
    # copies: a view would keep the partition's whole column alive in the results
    parts = [to_host(x[max(a - start, 0):a + n - start]).copy() for _,a,n in shared]
    return dict(zip(whole, (to_host(s).item() for s in sums))), dict(zip(shared, parts))

def _merge(pieces):
    whole, shared = {}, {}
    for w,s in pieces:
        whole.update(w)
        for k,v in s.items(): shared.setdefault(k, []).append(v)
    return whole, shared

# --- mean and std, as pandas' nanmean and nanvar ---------------------------------------------------------------------
def _filled(col):
    "Values with NaN as 0 (pandas' sums skip them that way), and the non-NaN count."
    x = column_values(col)
    xp = array_module(x)
    if x.dtype.kind != 'f': return x, len(x)
    nan = xp.isnan(x)
    return xp.where(nan, x.dtype.type(0), x), int(len(x) - nan.sum())

def _casts(dt) -> bool:
    "Whether nanvar's float64 sum of a column of `dt` casts it (through the buffers): floats narrower than float64."
    return dt.kind == 'f' and dt != np.float64   # ints were cast to float64 before; a float64 sum is one tree

def _moments1(part, cols, start, n):
    "Pass 1: the pieces of the sums behind each column's mean and the mean the variance is centred on."
    res = {}
    for c in cols:
        x, cnt = _filled(part[c])
        f = x.dtype.kind == 'f'
        # mean: float columns add in their own dtype, others in float64 (through the cast buffers)
        # variance's centre: float64 sum, cast buffers for float32; ints are cast to float64 first
        res[c] = (cnt, _plan_pieces(x, SumPlan(n, cast=not f), start, x.dtype if f else np.dtype('f8')),
                  _plan_pieces(x if f else x.astype('f8'), SumPlan(n, cast=_casts(x.dtype)), start, np.dtype('f8')))
    return res

def _moments2(part, cols, start, n, avgs):
    "Pass 2: the pieces of the sum of squared deviations from the centre `avgs`."
    res = {}
    for c in cols:
        col = part[c]
        x = column_values(col)
        xp = array_module(x)
        d = xp.asarray(avgs[c], dtype='f8') - x.astype('f8')
        sq = d * d   # numpy's `** 2` is this product
        if x.dtype.kind == 'f': sq = xp.where(xp.isnan(x), 0., sq)
        res[c] = _plan_pieces(sq, SumPlan(n, cast=False), start, np.dtype('f8'))
    return res

def mean_dtype(dtypes):
    "The dtype of pandas' `DataFrame.mean()`/`std()` over columns of `dtypes`: float32 only if all are float32."
    return np.result_type(np.float32, *[np.float64 if np.dtype(d).kind in 'iub' else d for d in dtypes])

def exact_moments(parts:list, cols:list, dtypes:dict, ddof:int=0, squared:bool=False, lens=None) -> tuple:
    """`(means, stds)`: dicts as pandas' `df[cols].mean()` and `df[cols].std(ddof)` of the rows of the delayed
    partitions `parts` put end to end: numpy's summation order, pandas' dtypes. Two passes: the sums behind the means,
    then the squares; a third first counts the partitions' rows unless `lens` (their lengths) says them.
    `squared`: variances (`np.var(x, ddof=ddof)`) in place of the stds."""
    if lens is None: lens = run([(len, p) for p in parts])
    n, starts = int(sum(lens)), np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(int)
    p1 = run([(_moments1, p, cols, int(s), n) for p,s in zip(parts, starts)])
    means, avgs, counts = {}, {}, {}
    for c in cols:
        dt = np.dtype(dtypes[c])
        f = dt.kind == 'f'
        cnt = counts[c] = sum(r[c][0] for r in p1)
        s = SumPlan(n, cast=not f).total(*_merge(r[c][1] for r in p1), dt if f else np.dtype('f8'))
        ct = (dt if f else np.dtype('f8')).type(cnt)   # nanmean counts in the column's float dtype
        with np.errstate(all='ignore'): means[c] = s / ct if cnt else np.nan
        s2 = SumPlan(n, cast=_casts(dt)).total(*_merge(r[c][2] for r in p1), np.dtype('f8'))
        with np.errstate(all='ignore'): avgs[c] = s2 / ct   # nanvar: float64 sum over a count in the float dtype
    p2 = run([(_moments2, p, cols, int(s), n, avgs) for p,s in zip(parts, starts)])
    stds = {}
    for c in cols:
        dt = np.dtype(dtypes[c])
        ct = (dt if dt.kind == 'f' else np.dtype('f8')).type(counts[c])
        ssq = SumPlan(n, cast=False).total(*_merge(r[c] for r in p2), np.dtype('f8'))
        with np.errstate(all='ignore'): var = ssq / (ct - ct.dtype.type(ddof)) if counts[c] > ddof else np.nan
        stds[c] = np.float64(var).astype(dt) if dt.kind == 'f' else np.float64(var)
        if not squared: stds[c] = np.sqrt(stds[c])
    t = mean_dtype([dtypes[c] for c in cols])
    return {c: t.type(v) for c,v in means.items()}, {c: t.type(v) for c,v in stds.items()}

# --- the median, exactly: bracket with a sample, then select --------------------------------------------------------
def _sample(part, cols, k, seed):
    "Pass 1: each column's non-NaN count and a sorted random sample of up to `k` of its values."
    res = {}
    for c in cols:
        s = part[c].dropna()
        smp = s.sample(n=min(k, len(s)), random_state=seed) if len(s) > k else s
        res[c] = (len(s), np.sort(to_host(column_values(smp)).astype('f8')))
    return res

def _bracket(part, cols, brackets):
    "Pass 2: per column, how many values fall below and above its bracket, and the values inside it."
    res = {}
    for c in cols:
        lo, hi = brackets[c]
        s = part[c].dropna()
        res[c] = (int((s < lo).sum()), int((s > hi).sum()), to_host(column_values(s[(s >= lo) & (s <= hi)])))
    return res

def _middle(n): return sorted({(n - 1) // 2, n // 2})

def exact_median(parts:list, cols:list, dtypes:dict, sample:int=4096, samples:dict|None=None) -> dict:
    """{col: pandas' median (`Series.median()`) of the non-NaN values in the delayed partitions `parts`}, None for
    an all-NaN column. Two passes: a sample brackets the middle ranks (`samples`, if given: {col: per partition
    (non-NaN values, a sorted sample of them)}, saves this one), then the values inside the bracket are counted and
    gathered and the middle ones selected; a bracket that missed is widened to the side and tried again."""
    if samples is not None: p1 = [{c: samples[c][i] for c in cols} for i in range(len(next(iter(samples.values()))))]
    else: p1 = run([(_sample, p, cols, sample, i) for i,p in enumerate(parts)])
    res, todo = {}, {}
    for c in cols:
        n = sum(r[c][0] for r in p1)
        if n == 0: res[c] = None; continue
        if not sum(len(r[c][1]) for r in p1):   # values, but none in the samples (rows drawn, nearly all missing)
            todo[c] = (n, _middle(n), -np.inf, np.inf)
            continue
        # the sample's values, each standing for (partition rows / sample size) rows
        vals = np.concatenate([r[c][1] for r in p1])
        w = np.concatenate([np.full(len(r[c][1]), r[c][0] / max(len(r[c][1]), 1)) for r in p1])
        o = np.argsort(vals, kind='stable')
        vals, cw = vals[o], np.cumsum(w[o])
        margin = 4 * np.sqrt(0.25 * len(vals)) / len(vals) * n + 2   # 4 sigma of the sample's rank error
        ks = _middle(n)
        lo = vals[min(np.searchsorted(cw, max(ks[0] - margin, 0)), len(vals) - 1)]
        hi = vals[min(np.searchsorted(cw, ks[-1] + margin), len(vals) - 1)]
        todo[c] = (n, ks, lo, hi)
    while todo:
        p2 = run([(_bracket, p, list(todo), {c: t[2:] for c,t in todo.items()}) for p in parts])
        for c,(n,ks,lo,hi) in list(todo.items()):
            below, above = sum(r[c][0] for r in p2), sum(r[c][1] for r in p2)
            if below > ks[0]: todo[c] = (n, ks, -np.inf, lo); continue   # the middle lies below the bracket
            if n - above <= ks[-1]: todo[c] = (n, ks, hi, np.inf); continue
            inside = np.sort(np.concatenate([r[c][2] for r in p2]))
            mid = inside[[k - below for k in ks]].astype(dtypes[c], copy=False)
            res[c] = pd.Series(mid).median()   # pandas' own mean of the middle values (median of 1 or 2)
            del todo[c]
    return res

# --- the mode --------------------------------------------------------------------------------------------------------
def _value_counts(part, cols):
    "Per column, value counts in order of first appearance (pandas' hash-table order), on the host."
    return {c: counts_in_order(part[c]) for c in cols}

def exact_mode(parts:list, cols:list) -> dict:
    """{col: `col.dropna().value_counts().idxmax()`} over the delayed partitions `parts`, ties broken as pandas does:
    counts summed in order of first appearance, then pandas' own sort. None for an all-NaN column."""
    vcs = run([(_value_counts, p, cols) for p in parts])
    res = {}
    for c in cols:
        vc = pd.concat([v[c] for v in vcs])
        if not len(vc): res[c] = None; continue
        vc = vc.groupby(level=0, sort=False).sum()
        res[c] = vc.sort_values(ascending=False).idxmax()
    return res
