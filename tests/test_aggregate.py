"""`Groupby` (NVTabular's, ops/aggregate.py) against pandas' own `sort_values(kind='stable')` then `groupby(...).agg`
and a plain Python loop, on MovieLens 100K's ratings: users as rows, their items in time order as a multi-hot column
that `TabularGPU` takes as it is; bad input named before any work, the caller's frame unchanged."""
import numpy as np
import pandas as pd
import pytest
from fastai.tabular.all import RandomSplitter
from fastai_gpu_tabular.all import Categorify, Groupby, TabularGPU
from fastai_gpu_tabular.backend import to_pandas
from fastai_gpu_tabular.datasets import load_movielens_100k

STATS = ['count', 'sum', 'mean', 'min', 'max', 'std', 'var', 'first', 'last']

@pytest.fixture(scope='module')
def ratings():
    """MovieLens 100K's ratings in a shuffled order (the loader's is sorted by time), with NaN in a few ratings and
    ages and the ratings as floats: missing values for every statistic to skip, missing keys to drop."""
    df = load_movielens_100k().sample(frac=1, random_state=0).reset_index(drop=True)
    df = df[['user_id', 'item_id', 'timestamp', 'rating', 'age', 'gender', 'genres']].copy()
    df['rating'] = df['rating'].astype('float64')
    df.loc[df.index[::11], 'rating'] = np.nan
    df['age'] = df['age'].astype('float64')
    df.loc[df.index[::23], 'age'] = np.nan
    return df

def _reference(df, keys, sort_cols, aggs, sep='_'):
    "pandas: the rows sorted (stable, missing last), grouped by the keys (sorted, missing keys dropped), aggregated."
    named = {f'{c}{sep}{a}': (c, list if a == 'list' else a) for c,aa in aggs.items() for a in aa}
    src = df.sort_values(sort_cols, kind='stable') if sort_cols else df
    return src.groupby(keys, sort=True, dropna=True, observed=True).agg(**named).reset_index()

def _same_lists(got, want, name):
    assert len(got) == len(want), name
    for a,b in zip(got, want): np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)

def test_users_are_pandas_groupby(ratings, backend, as_backend):
    "Every aggregation of two columns, per user in time order: pandas' values (bit for bit on pandas) and dtypes."
    aggs = {'item_id': ['list', 'count', 'first', 'last', 'min', 'max'], 'rating': ['list', *STATS]}
    before = ratings.copy()
    src = as_backend(ratings)
    got = to_pandas(Groupby('user_id', 'timestamp', aggs)(src))
    pd.testing.assert_frame_equal(to_pandas(src), to_pandas(as_backend(before)))   # the caller's frame as it was
    want = _reference(ratings, ['user_id'], ['timestamp'], aggs)
    assert list(got.columns) == list(want.columns) and len(got) == ratings.user_id.nunique()
    for c in want.columns:
        if c.endswith('_list'): _same_lists(got[c], want[c], c)
        elif backend == 'pandas' or c.split('_')[-1] not in ('sum', 'mean', 'std', 'var'):
            pd.testing.assert_series_equal(got[c], want[c], check_exact=True, check_dtype=backend == 'pandas')
        else:
            # cuDF adds in another order: each of a user's sums (k <= n terms of at most X = 5) is within (k + 4) u
            # k X of the exact one, so the mean within (k + 4) u X; the variance within 4 (k + 4) u X^2, doubled for
            # pandas' own error (its std then follows, rounded once)
            k, u, X = want['rating_count'].to_numpy(), np.finfo('f8').eps / 2, 5.0
            tol = {'sum': 2 * (k + 4) * u * k * X, 'mean': 2 * (k + 4) * u * X, 'var': 8 * (k + 4) * u * X ** 2}
            a, b = got[c].to_numpy('f8'), want[c].to_numpy('f8')
            if c.endswith('std'): a, b, c = a ** 2, b ** 2, 'var'
            assert (np.isnan(a) == np.isnan(b)).all(), c   # a user with one rating: no std (ddof 1)
            ok = ~np.isnan(b)
            assert (np.abs(a - b)[ok] <= tol[c.split('_')[-1]][ok]).all(), (c, np.abs(a - b)[ok].max())

def test_several_keys_and_sort_columns_are_a_python_loop(ratings, backend, as_backend):
    """Two keys (one a string, one with missing values) and two sort columns, ties in the frame's order: a plain loop
    over the rows, each row appended to its key's events, then sorted by (sort columns, position)."""
    df = ratings.assign(day=ratings.timestamp // 86400)
    keys, sort_cols = ['gender', 'age'], ['day', 'rating']
    got = to_pandas(Groupby(keys, sort_cols, {'item_id': ['list', 'first', 'count'], 'rating': 'last'},
                            name_sep='/')(as_backend(df)))
    events = {}
    for pos,(g,a,d,r,i) in enumerate(zip(df.gender, df.age, df.day, df.rating, df.item_id)):
        if not pd.isna(a): events.setdefault((g, a), []).append((d, np.inf if np.isnan(r) else r, pos, i, r))
    assert sorted(events) == list(zip(got.gender, got.age))   # keys sorted, missing ages dropped
    for row in got.itertuples(index=False):
        ev = sorted(events[(row.gender, row.age)])
        assert list(row[2]) == [e[3] for e in ev]
        assert row[3] == ev[0][3] and row[4] == len(ev)
        rs = [e[4] for e in ev if not np.isnan(e[4])]
        assert (np.isnan(row[5]) and not rs) or row[5] == rs[-1]   # the last rating there is
    assert list(got.columns) == [*keys, 'item_id/list', 'item_id/first', 'item_id/count', 'rating/last']

def test_default_aggs_and_missing_keys(backend, as_backend):
    "Default `list` of every column but the keys; a key with a missing part is dropped, as pandas' dropna=True."
    df = pd.DataFrame({'s': ['a', 'b', None, 'a', 'b', 'a'], 'x': [1., np.nan, 3., 4., 5., 6.], 'y': list('uvwxyz')})
    got = to_pandas(Groupby('s')(as_backend(df)))
    assert list(got.columns) == ['s', 'x_list', 'y_list'] and list(got.s) == ['a', 'b']
    _same_lists(got.x_list, [[1., 4., 6.], [np.nan, 5.]], 'x_list')
    assert [list(v) for v in got.y_list] == [['u', 'x', 'z'], ['v', 'y']]

def test_lists_go_into_tabulargpu_as_multi_hot(ratings):
    "Users' items and genres as lists: TabularGPU finds them multi-hot, its vocabulary is the items', bags are lists."
    users = Groupby('user_id', 'timestamp', {'item_id': 'list', 'rating': 'mean', 'gender': 'first'})(ratings)
    to = TabularGPU(users, procs=[Categorify], cat_names=['item_id_list', 'gender_first'], y_names='rating_mean',
                    splits=RandomSplitter(seed=0)(range(len(users))))
    assert to.multi_hot == {'item_id_list': None}
    train = users.iloc[to.train.items.index]
    assert list(to.classes['item_id_list'].items) == ['#na#', *sorted({i for v in train.item_id_list for i in v})]
    assert to.bag_widths['item_id_list'] == max(len(v) for v in users.item_id_list)

def test_bad_input_is_named_and_frame_unchanged(ratings):
    df = ratings.iloc[:500].copy()
    before = df.copy()
    with pytest.raises(KeyError, match='nope'): Groupby('user_id', 'nope', {'rating': 'sum'})(df)
    with pytest.raises(KeyError, match='nope'): Groupby('nope', aggs={'rating': 'sum'})(df)
    with pytest.raises(KeyError, match='nope'): Groupby('user_id', aggs={'nope': 'sum'})(df)
    with pytest.raises(ValueError, match="'median'.*'rating'"): Groupby('user_id', aggs={'rating': ['sum', 'median']})
    with pytest.raises(TypeError, match='groupby_cols'): Groupby(3)
    with pytest.raises(TypeError, match='sort_cols'): Groupby('user_id', sort_cols=['timestamp', 1])
    with pytest.raises(TypeError, match='name_sep'): Groupby('user_id', name_sep=None)
    with pytest.raises(TypeError, match="'rating'"): Groupby('user_id', aggs={'rating': {'sum'}})
    with pytest.raises(ValueError, match="'user_id'"): Groupby('user_id', aggs={'user_id': 'count'})
    with pytest.raises(TypeError, match="'mean' of column 'gender'"): Groupby('user_id', aggs={'gender': 'mean'})(df)
    with pytest.raises(TypeError, match="'max' of column 'gender'"): Groupby('user_id', aggs={'gender': 'max'})(df)
    with pytest.raises(ValueError, match='twice'):   # 'rating_count' is a key and an output
        Groupby(['user_id', 'rating_count'], aggs={'rating': 'count'})(df.assign(rating_count=1))
    with pytest.raises(ValueError, match='empty'): Groupby('user_id', aggs={'rating': 'sum'})(df.iloc[:0])
    with pytest.raises(TypeError, match='DataFrame'): Groupby('user_id')(df.to_dict())
    pd.testing.assert_frame_equal(df, before)

def test_groupby_recipe(ratings):
    "docs/groupby.md's block runs as written: each user's items, in time order, a multi-hot column of TabularGPU."
    from helpers.recipes import recipe
    ns = {}
    exec(compile(recipe('groupby'), '<recipe groupby>', 'exec'), ns)
    users, to = ns['users'], ns['to']
    assert len(users) == ns['ratings'].user_id.nunique() and len(to.items) == len(users)
    first = ns['ratings'].sort_values('timestamp', kind='stable').groupby('user_id').item_id.agg(list).iloc[0]
    assert list(users.item_id_list.iloc[0]) == first
