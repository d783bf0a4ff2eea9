"""`Groupby` of a Dask frame (uneven partitions, a one-row one among them) against the in-memory `Groupby` of the same
rows (tests/test_aggregate.py holds that to pandas' groupby): every value bit for bit, the sums, means and stds too;
no pass to build it, one to compute it; bad input named before any pass."""
import numpy as np
import pandas as pd
import pytest

dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
import dask.dataframe as dd
from fastai_gpu_tabular.all import Groupby
from fastai_gpu_tabular.datasets import load_movielens_100k

@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set({'scheduler': 'sync', 'dataframe.convert-string': False}): yield

@pytest.fixture(scope='module')
def ratings():
    "30,000 MovieLens 100K ratings, shuffled, NaN in some ratings and ages (a key column below)."
    df = load_movielens_100k().sample(frac=1, random_state=1).iloc[:30000].reset_index(drop=True)
    df = df[['user_id', 'item_id', 'timestamp', 'rating', 'age', 'gender']].copy()
    df['rating'] = df['rating'].astype('float64') + np.random.default_rng(0).normal(size=len(df))   # sums that round
    df.loc[df.index[::11], 'rating'] = np.nan
    df['age'] = df['age'].astype('float64')
    df.loc[df.index[::23], 'age'] = np.nan
    return df

def _uneven(df):
    "Five partitions of uneven sizes, one of a single row."
    n = len(df)
    return dd.from_pandas(df, npartitions=1).repartition(divisions=[0, 37, n // 4, n // 4 + 1, 2 * n // 3, n - 1])

def _same(got, want):
    assert list(got.columns) == list(want.columns)
    for c in want.columns:
        if c.endswith('_list'):
            assert len(got[c]) == len(want[c])
            for a,b in zip(got[c], want[c]): np.testing.assert_array_equal(a, b, err_msg=c)
        else: pd.testing.assert_series_equal(got[c], want[c], check_exact=True)

AGGS = {'item_id': ['list', 'count', 'first', 'last'],
        'rating': ['list', 'count', 'sum', 'mean', 'min', 'max', 'std', 'var', 'first', 'last']}

@pytest.mark.parametrize('keys,sort_cols', [(['user_id'], ['timestamp']), (['gender', 'age'], ['timestamp', 'rating']),
                                            (['user_id'], [])])
def test_in_memorys_bit_for_bit_in_one_pass(ratings, count, keys, sort_cols):
    ddf = _uneven(ratings)
    assert len(set(ddf.map_partitions(len).compute())) == 5   # uneven: five sizes
    gb = Groupby(keys, sort_cols, AGGS)
    with count() as c: res = gb(ddf)
    assert c['passes'] == 0   # lazy: checked on the meta
    with count() as c: got = res.compute()
    assert c['passes'] == 1   # the shuffle and the groups, one compute
    want = gb(ratings)
    assert got.dtypes.equals(want.dtypes) and res._meta.dtypes.equals(want.dtypes)
    _same(got.sort_values(keys, ignore_index=True), want)

def test_bad_input_before_any_pass(ratings, count):
    ddf = _uneven(ratings)
    with count() as c:
        with pytest.raises(KeyError, match='nope'): Groupby('user_id', 'nope', {'rating': 'sum'})(ddf)
        with pytest.raises(TypeError, match="'sum' of column 'gender'"): Groupby('user_id', aggs={'gender': 'sum'})(ddf)
    assert c['passes'] == 0

@pytest.mark.cudf(needs=['dask_cudf'])
def test_cudf_partitions(ratings):
    "dask-cudf: each shuffled partition grouped on cuDF, the in-memory cuDF result (tests/test_aggregate.py's bounds)."
    from fastai_gpu_tabular.backend import to_backend, to_pandas
    gb = Groupby(['user_id'], ['timestamp'], {'item_id': ['list', 'count', 'first', 'last'], 'rating': ['min', 'max']})
    res = gb(_uneven(ratings).to_backend('cudf'))
    # the partitions one by one: each restarts its index, and the stand-in's `from_pandas` of Dask's concat of them
    # cannot hold repeated labels (cuDF can)
    got = pd.concat([to_pandas(p) for p in dask.compute(*res.to_delayed())]).sort_values('user_id', ignore_index=True)
    _same(got, to_pandas(gb(to_backend(ratings, 'cudf'))))
