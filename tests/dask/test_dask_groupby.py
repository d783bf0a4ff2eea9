"""`JoinGroupby` over a Dask frame (uneven partitions, a one-row one among them) against the in-memory `TabularGPU` on
the same rows (pandas' own groupby): the same categories and exact counts, the defaults bit for bit, the means and
stds within a bound derived below, and the same bits on one partition; the joined columns the Dask object packs are
the in-memory encodes of its own state, bit for bit, and a proc set up in memory joins a Dask frame as in memory."""
import numpy as np
import pandas as pd
import pytest
import torch

dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
import dask.dataframe as dd
from fastai.tabular.all import Categorify, ColSplitter, FillMissing, Normalize
from fastai_gpu_tabular.all import JoinGroupby, TabularDask, TabularGPU
from fastai_gpu_tabular.datasets import load_adult, load_movielens

@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set(scheduler='sync'): yield

def _adult():
    "6,000 Adult rows: NaN in two conts (and occupation's own missing ones), an occupation only in validation rows."
    df = load_adult().iloc[:6000].copy()
    df['is_valid'] = np.random.default_rng(0).random(len(df)) < 0.2
    df['age'] = df['age'].astype('float64')
    df.loc[df.index[::13], 'age'] = np.nan
    df['fnlwgt'] = df['fnlwgt'].astype('float64')
    df.loc[df.index[5::17], 'fnlwgt'] = np.nan
    df.loc[df.index[df.is_valid][:5], 'occupation'] = 'Only-in-valid'
    return df

def _movielens():
    "6,000 MovieLens ratings: int64 categories (many small groups), NaN years, a movie only in validation rows."
    df = load_movielens().iloc[:6000].copy()
    df['is_valid'] = np.random.default_rng(1).random(len(df)) < 0.2
    df.loc[df.index[df.is_valid][:4], 'movieId'] = -7
    df.loc[df.index[::11], 'year'] = np.nan
    return df

CASES = {'adult': (_adult, ['occupation', 'education'], ['age', 'fnlwgt'], 'income'),
         'movielens': (_movielens, ['userId', 'movieId'], ['rating', 'year'], 'timestamp')}

def _uneven(df):
    "Five partitions of uneven sizes, one of a single row."
    n = len(df)
    with dask.config.set({'dataframe.convert-string': False}):
        return dd.from_pandas(df, npartitions=1).repartition(divisions=[0, 37, n // 4, n // 4 + 1, 2 * n // 3, n - 1])

def _index(g):
    "A groups frame's categories: the values, missing ones as None."
    return [None if pd.isna(v) else v for v in g.index]

U = np.finfo('f8').eps / 2   # float64's unit roundoff

def _check_groups(a, b, train, n, x):
    """Dask's groups `a` against the in-memory `b` (pandas' groupby). The counts are exact. Let u be float64's unit
    roundoff, n a category's count of values and X their largest |value| (up to 2^-24 larger after fastai's float32
    shrink); every value and mean lies within X. Means: pandas adds the n values in row order with Kahan's
    compensation (error <= (2u + O(n u^2)) sum|v|) and divides (u); Dask adds them in row order plainly
    (<= (n-1) u sum|v|) and divides: |mean_a - mean_b| <= (n + 4) u X. Variances: pandas' Welford update carries its
    running mean with error <= 5 k u X after k values, so each term (v - m_k)(v - m_k-1) is within (20 k + 12) u X^2,
    and the n terms add with <= (n-1) u 4 n X^2: M2/n within (14 n + 26) u X^2. Dask's two passes (the mean within
    (n+1) u X, each squared deviation within (4 n + 16) u X^2, their sum within (n-1) u 4 n X^2): within
    (8 n + 20) u X^2. So |var_a - var_b| <= B = (22 n + 46) u X^2 (to first order: n u < 1e-12 here), and the stds,
    each sqrt rounded (u), |std_a - std_b| <= min(sqrt(B), B / (std_a + std_b)) + 2 u max(std)."""
    cnt = f'{n}_{x}_count'
    np.testing.assert_array_equal(a[cnt].to_numpy(), b[cnt].to_numpy())
    big = train[x].abs().groupby(train[n].astype(object), dropna=False).max() * (1 + 2.0**-24)
    big = dict(zip(_index(big), big))
    X = np.array([big[k] for k in _index(b)])
    k = b[cnt].to_numpy()
    ma, mb = a[f'{n}_{x}_mean'].to_numpy(), b[f'{n}_{x}_mean'].to_numpy()
    sa, sb = a[f'{n}_{x}_std'].to_numpy(), b[f'{n}_{x}_std'].to_numpy()
    none = k == 0   # a category whose values are all missing: NaN, as pandas gives
    assert all(np.isnan(v[none]).all() for v in (ma, mb, sa, sb))
    k, X, ma, mb, sa, sb = k[~none], X[~none], ma[~none], mb[~none], sa[~none], sb[~none]
    assert (np.abs(ma - mb) <= (k + 4) * U * X).all(), (n, x, np.abs(ma - mb).max())
    B = (22 * k + 46) * U * X**2
    with np.errstate(divide='ignore', invalid='ignore'):
        tol = np.minimum(np.sqrt(B), np.where(sa + sb > 0, B / (sa + sb), np.inf)) + 2 * U * np.maximum(sa, sb)
    assert (np.abs(sa - sb) <= tol).all(), (n, x, np.abs(sa - sb).max())

@pytest.mark.parametrize('case', list(CASES))
def test_groups_are_in_memorys(case):
    load, names, conts, y = CASES[case]
    df = load()
    ddf = _uneven(df)
    assert len(set(ddf.map_partitions(len).compute())) == 5   # uneven: five sizes
    kw = lambda: dict(procs=[JoinGroupby(names, conts), Categorify, FillMissing], cat_names=names, cont_names=conts,
                      y_names=y)
    to = TabularGPU(ddf, splits='is_valid', progress=False, **kw())
    tg = TabularGPU(df, splits=ColSplitter('is_valid')(df), **kw())
    a, b = to.procs.fs[0], tg.procs.fs[0]
    assert type(to) is TabularDask and isinstance(a, JoinGroupby)
    assert a.defaults == b.defaults   # pandas' mean and std of all training values, bit for bit
    assert list(a.groups) == list(b.groups) and a.made_names == b.made_names
    assert list(to.cont_names) == list(tg.cont_names) == conts + b.made_names
    train = df[~df.is_valid]
    for n in names:
        assert _index(a.groups[n]) == _index(b.groups[n]) and list(a.groups[n].columns) == list(b.groups[n].columns)
        for x in conts: _check_groups(a.groups[n], b.groups[n], train, n, x)
    # each category's sums carried in row order: one partition gives the same bits
    with dask.config.set({'dataframe.convert-string': False}): one = dd.from_pandas(df, npartitions=1)
    a1 = TabularGPU(one, splits='is_valid', progress=False, **kw()).procs.fs[0]
    for n in names: pd.testing.assert_frame_equal(a.groups[n], a1.groups[n], check_exact=True)
    # every row (the category only in validation rows among them): the in-memory encodes of the Dask state, lazily
    got = to.items[a.made_names].compute()
    pd.testing.assert_frame_equal(got, a.joined(df), check_exact=True)
    n = names[1] if case == 'movielens' else names[0]   # the column with a category only in validation rows
    only = df.is_valid & df[n].notna() & ~df[n].isin(train[n].dropna())
    assert only.sum() >= 4
    assert (got.loc[only, f'{n}_{conts[0]}_count'] == 0).all()
    assert (got.loc[only, f'{n}_{conts[0]}_mean'] == a.defaults[conts[0]]['mean']).all()

def test_with_fillmissing_and_normalize():
    """JoinGroupby before FillMissing (the raw values: NaN skipped, `_na` flags for the conts) and Normalize (its
    columns scaled): the packed rows are those of the in-memory Tabular of the same rows with the Dask-learned procs."""
    load, names, conts, y = CASES['adult']
    df = load()
    to = TabularGPU(_uneven(df), splits='is_valid', progress=False, procs=[Categorify, FillMissing, Normalize,
                    JoinGroupby(names, conts)], cat_names=names, cont_names=conts, y_names=y)
    assert {'age_na', 'fnlwgt_na'} <= set(to.cat_names)
    made = to.procs.fs[0].made_names
    assert all(c in to.means and c not in to.na_dict for c in made)   # normalised, nothing to fill
    mem = to.new(df.drop(columns='is_valid'))
    mem.process()
    rows = mem.packed_rows()[0]
    v = torch.as_tensor(df.is_valid.to_numpy())
    assert torch.equal(to.train.packed_rows()[0], rows[~v]) and torch.equal(to.valid.packed_rows()[0], rows[v])

def test_set_up_in_memory_joins_a_dask_frame():
    "Set up in memory (pandas' groupby), then `new` of a Dask frame: the rows `new` of the same rows in memory packs."
    load, names, conts, y = CASES['adult']
    df = load().drop(columns='is_valid')
    tg = TabularGPU(df.iloc[:4000], procs=[JoinGroupby(names, conts), Categorify, FillMissing, Normalize],
                    cat_names=names, cont_names=conts, y_names=y)
    test = df.iloc[4000:].drop(columns=y)
    mem, lazy = tg.new(test), tg.new(_uneven(test.reset_index(drop=True)))
    mem.process()
    lazy.process()
    assert torch.equal(lazy.train.packed_rows()[0], mem.packed_rows()[0])

def test_cont_with_no_training_value():
    "A cont missing in every training row: the in-memory error, raised by JoinGroupby before its group passes."
    load, names, conts, y = CASES['adult']
    df = load()
    df.loc[~df.is_valid, 'age'] = np.nan
    with pytest.raises(ValueError, match=r"JoinGroupby: continuous column\(s\) \['age'\] are entirely NaN"):
        TabularGPU(_uneven(df), splits='is_valid', progress=False, procs=[JoinGroupby(names, conts), FillMissing],
                   cat_names=names, cont_names=conts, y_names=y)

STATS = ('count', 'sum', 'mean', 'std', 'var', 'min', 'max')

def test_every_stat_and_a_key_of_two_columns():
    """sum, var, min, max and a key of two columns over uneven partitions: counts, mins and maxs exact, the categories
    and the defaults bit for bit, one partition the same bits; sums within (k + 1) u k X of pandas' (Kahan's adds within
    2u sum|v|, the row-order ones (k - 1) u sum|v|, sum|v| <= k X), means and variances within `_check_groups`'."""
    load, _, conts, y = CASES['movielens']
    df = load()
    names = ['userId', ['movieId', 'userId']]
    kw = lambda: dict(procs=[JoinGroupby(names, conts, stats=STATS), Categorify, FillMissing],
                      cat_names=['userId', 'movieId'], cont_names=conts, y_names=y)
    to = TabularGPU(_uneven(df), splits='is_valid', progress=False, **kw())
    tg = TabularGPU(df, splits=ColSplitter('is_valid')(df), **kw())
    a, b = to.procs.fs[0], tg.procs.fs[0]
    assert a.defaults == b.defaults and a.made_names == b.made_names
    assert 'movieId_userId_rating_sum' in a.made_names
    train = df[~df.is_valid]
    for n,cols in b.keys.items():
        ga, gb = a.groups[n], b.groups[n]
        assert [tuple(map(str, k)) if isinstance(k, tuple) else str(k) for k in ga.index] == \
               [tuple(map(str, k)) if isinstance(k, tuple) else str(k) for k in gb.index]
        for x in conts:
            c = f'{n}_{x}'
            for s in ('count', 'min', 'max'): np.testing.assert_array_equal(ga[f'{c}_{s}'], gb[f'{c}_{s}'])
            big = train[x].abs().groupby([train[k] for k in cols], dropna=False).max().reindex(gb.index).to_numpy()
            k = gb[f'{c}_count'].to_numpy()
            np.testing.assert_array_less(np.abs(ga[f'{c}_sum'] - gb[f'{c}_sum']), (k + 1) * U * k * np.nan_to_num(big)
                                         + np.finfo('f8').tiny)
            ok = k > 0
            assert (np.abs(ga[f'{c}_mean'] - gb[f'{c}_mean'])[ok] <= ((k + 4) * U * big)[ok]).all()
            assert (np.abs(ga[f'{c}_var'] - gb[f'{c}_var'])[ok] <= ((22 * k + 46) * U * big ** 2)[ok]).all()
    with dask.config.set({'dataframe.convert-string': False}): one = dd.from_pandas(df, npartitions=1)
    a1 = TabularGPU(one, splits='is_valid', progress=False, **kw()).procs.fs[0]
    for n in a.groups: pd.testing.assert_frame_equal(a.groups[n], a1.groups[n], check_exact=True)
    got = to.items[a.made_names].compute()
    pd.testing.assert_frame_equal(got, a.joined(df), check_exact=True)
