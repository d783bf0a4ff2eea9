"""A key's history, side tables and numbers' procs on Dask: bit for bit the in-memory `TabularGPU`'s packed rows and
learned state (each key's last events, vocabularies, fill values, means and stds) on frames whose keys are spread over
the partitions (MovieLens users, planes by tailnum, some missing), a later Dask frame through both, and the passes each
makes, counted: a shuffle pass for each history proc; for the others, only what the procs after them need to learn."""
import numpy as np
import pandas as pd
import pytest
import torch

dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
import dask.dataframe as dd
from fastai.tabular.all import Categorify, ColSplitter, FillMissing, Normalize
from fastai_gpu_tabular.all import (
    Bucketize,
    Clip,
    DifferenceLag,
    History,
    JoinExternal,
    ListSlice,
    LogOp,
    NormalizeMinMax,
    TabularGPU,
)
from fastai_gpu_tabular.backend import to_pandas
from fastai_gpu_tabular.datasets import load_flights, load_movielens_100k
from fastai_gpu_tabular.ops.numeric import qcut_bins

@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set({'scheduler': 'sync', 'dataframe.convert-string': False}): yield

PARTS = 4

@pytest.fixture(scope='module')
def ratings():
    "30,000 MovieLens 100K ratings, shuffled (each user's in every partition), genres as '|' strings, a split column."
    df = load_movielens_100k().sample(frac=1, random_state=1).iloc[:30000].reset_index(drop=True)
    return df.assign(genres=df.genres.str.join('|'), is_valid=np.random.default_rng(0).random(len(df)) < 0.2)

@pytest.fixture(scope='module')
def movies(ratings):
    "A side table of half the movies: their ratings' count (a cont) and first genre (a cat)."
    g = ratings.groupby('item_id')
    t = pd.DataFrame({'ratings': g.size().astype('float64'), 'genre': g.genres.first().str.split('|').str[0]})
    return t.reset_index().iloc[::2].reset_index(drop=True)

KW = dict(cat_names=['user_id', 'item_id', 'genres', 'occupation', 'gender'], cont_names=['timestamp', 'age'],
          y_names='rating', multi_hot={'genres': '|'})

def history_procs():
    return [DifferenceLag('user_id', 'timestamp', shift=[1, 3, -2]),
            DifferenceLag(['occupation', 'gender'], 'timestamp'),
            History('item_id', 'user_id', 'timestamp', n=3, lags=True),
            ListSlice('item_id_last3_user_id', 0, 2),
            Categorify, FillMissing, Normalize]

def row_procs(movies):
    return lambda: [JoinExternal(movies, 'item_id'), ListSlice('genres', -2, pad=True, pad_value='-'),
                    Clip('age', 10, 60), LogOp('ratings'),
                    NormalizeMinMax(['age', 'timestamp']), Bucketize('age', q=4),
                    Bucketize('timestamp', boundaries=[0.3, 0.6]), Categorify, FillMissing, Normalize]

def both(df, procs, kw, **dkw):
    "The Dask Tabular over 4 partitions of `df`, and the in-memory one of the same rows, split by the same column."
    td = TabularGPU(dd.from_pandas(df, npartitions=PARTS, sort=False), procs=procs(), splits='is_valid',
                    progress=False, **kw, **dkw)
    return td, TabularGPU(df, procs=procs(), splits=ColSplitter('is_valid'), **kw)

def same(td, tg):
    "The same packed rows (training then validation rows), names and learned state, bit for bit."
    assert list(td.cat_names) == list(tg.cat_names) and list(td.cont_names) == list(tg.cont_names)
    rows = tg.packed_rows()[0]
    assert torch.equal(td.train.packed_rows()[0], rows[:tg.split])
    assert torch.equal(td.valid.packed_rows()[0], rows[tg.split:])
    for p,q in zip(td.procs.fs, tg.procs.fs):
        if getattr(q, 'last', None) is not None: pd.testing.assert_frame_equal(p.last, q.last)
        if getattr(q, 'bins', None) is not None: assert p.bins == q.bins
        if getattr(q, 'mins', None) is not None: assert (p.mins, p.maxs) == (q.mins, q.maxs)
    for n in tg.classes: assert [(type(v), v) for v in td.classes[n]] == [(type(v), v) for v in tg.classes[n]], n
    for d in ('na_dict', 'means', 'stds', 'multi_hot_lens'):
        x, y = getattr(td, d, {}), getattr(tg, d, {})
        assert list(x) == list(y) and all(x[k] == y[k] and type(x[k]) is type(y[k]) for k in y), d

def test_history_is_the_in_memory_one(ratings, count, held):
    """Lags by one and by two key columns (1 and 3 back, 2 ahead), the last 3 movies and their lags, cut to 2: the
    in-memory rows and state bit for bit. A pass each history proc (its shuffle); their lags join the held training
    conts, so FillMissing and Normalize then need none (else their two each, as for any cont not held)."""
    assert (ratings.groupby('user_id').apply(lambda g: len(set(g.index * PARTS // len(ratings))),
                                             include_groups=False) > 1).mean() > 0.9   # users in several partitions
    with count() as got: td, tg = both(ratings, history_procs, KW)
    # the scan, three history passes, ListSlice's lists' elements and lengths (2), the write; spilled: the median's
    # sample and bracket, Normalize's sums and squares
    assert got['passes'] == 1 + 3 + 2 + 1 + (0 if held else 4)
    same(td, tg)

def test_planes_with_missing_tailnums(count):
    "The flights' planes (string keys, 2% missing): each plane's previous destination and the minutes since its flight."
    df = load_flights().sample(n=30000, random_state=2).reset_index(drop=True)
    dep = pd.to_datetime(df[['year', 'month', 'day', 'hour', 'minute']])
    df = df.assign(dep=(dep - pd.Timestamp('2013-01-01')) // pd.Timedelta(minutes=1), is_valid=df.index % 5 == 0)
    procs = lambda: [DifferenceLag('tailnum', 'dep'), History('dest', 'tailnum', 'dep', n=2), Categorify, FillMissing]
    kw = dict(cat_names=['tailnum', 'dest', 'carrier'], cont_names=['dep', 'distance'], y_names='hour')
    assert df.tailnum.isna().sum() > 100
    same(*both(df, procs, kw))

def test_row_procs_are_the_in_memory_ones(ratings, movies, count, held):
    """A side table joined to every partition (a broadcast join), the last two genres, clipped ages, log1p of the
    joined counts, ages and times scaled to [0, 1], ages' quartiles and given boundaries: the in-memory rows and state
    bit for bit. NormalizeMinMax's ranges and Bucketize's quartiles come from the held training conts (Clip's ages
    among them) with no pass; ListSlice's lists cost
    Categorify a pass for their elements and one for their lengths, and the joined cont (which is not held) one for its
    missing values, then FillMissing's median and Normalize two each."""
    # the validation rows are the oldest users': the training rows' age quartiles are not all rows' (with a random
    # split of integer ages they are, and edges learned from every row would pass unseen)
    df = ratings.assign(is_valid=ratings.age > ratings.age.quantile(0.7))
    assert list(qcut_bins(df.age[~df.is_valid].astype('f8'), 4)) != list(qcut_bins(df.age.astype('f8'), 4))
    with count() as got: td, tg = both(df, row_procs(movies), KW)
    # the scan; the cut lists' elements and lengths; the joined cont's missing values; the median's sample and
    # bracket; Normalize's sums and squares; the write; spilled: NormalizeMinMax's and Bucketize's training values too
    assert got['passes'] == 1 + 2 + 1 + 2 + 2 + 1 + (0 if held else 2)
    same(td, tg)

def test_later_dask_frame(ratings, movies):
    """A later frame as a Dask frame follows the training frame's state, as in memory: through a Dask Tabular and an
    in-memory one, the rows `new` gives in memory, bit for bit."""
    cut = ratings.timestamp.quantile(0.7)
    old, later = ratings[ratings.timestamp < cut], ratings[ratings.timestamp >= cut].drop(columns='is_valid')
    procs = lambda: history_procs()[:4] + row_procs(movies)()
    td, tg = both(old, procs, KW)
    mem = tg.new(later)
    mem.process()
    for to in (td, tg):
        new = to.new(dd.from_pandas(later, npartitions=3, sort=False))
        new.progress = False
        new.process()
        assert torch.equal(new.train.packed_rows()[0], mem.packed_rows()[0])   # no split: every row trains

def test_missing_times_before_the_pass(ratings, count):
    "A time with missing values: the error, from the scan's counts, before the history's pass."
    df = ratings.assign(timestamp=ratings.timestamp.astype('float64').where(ratings.index % 9 > 0))
    with count() as got, pytest.raises(ValueError, match=r"time column 'timestamp' holds 3334 missing value\(s\)"):
        both(df, lambda: [History('item_id', 'user_id', 'timestamp'), Categorify, FillMissing], KW)
    assert got['passes'] == 1   # the scan

def loop_lags(df:pd.DataFrame, key:str, time:str) -> np.ndarray:
    """A plain Python reference, independent of the procs: each row's time less its key's previous event's (NaN for a
    first event or a missing key), a key's events ordered by time, then training rows first, then by position."""
    t, k, v = df[time].tolist(), df[key].tolist(), df.is_valid.tolist()
    last, res = {}, [np.nan] * len(df)
    for i in sorted(range(len(df)), key=lambda i: (t[i], v[i], i)):
        if pd.isna(k[i]): continue
        if k[i] in last: res[i] = t[i] - last[k[i]]
        last[k[i]] = t[i]
    return np.array(res, dtype='f8')

@pytest.mark.parametrize('parts', ['one key a partition', 'a one-row partition'])
def test_keys_missing_from_partitions(ratings, parts):
    """A key absent from some partitions (the frame sorted by gender: each partition holds one), and a partition of one
    row: the lags of every row, against a plain Python loop, and the in-memory Tabular's, bit for bit."""
    df = ratings.iloc[:4000]
    if parts == 'one key a partition': df = df.sort_values('gender', kind='stable').reset_index(drop=True)
    ddf = dd.concat([dd.from_pandas(df.iloc[:1], npartitions=1), dd.from_pandas(df.iloc[1:], npartitions=3,
                                                                                sort=False)]) \
        if parts == 'a one-row partition' else dd.from_pandas(df, npartitions=PARTS, sort=False)
    if parts == 'one key a partition':
        assert min(p.compute().gender.nunique() for p in ddf.to_delayed()) == 1   # a gender absent from a partition
    else: assert len(ddf.get_partition(0).compute()) == 1
    procs = lambda: [DifferenceLag('gender', 'timestamp'), DifferenceLag('user_id', 'timestamp'), Categorify,
                     FillMissing]
    kw = dict(cat_names=['user_id', 'gender'], cont_names=['timestamp'], y_names='rating', splits='is_valid')
    td = TabularGPU(ddf, procs=procs(), progress=False, **kw)
    got = td.items.compute().sort_index()
    for key in ('gender', 'user_id'):   # a first event (NaN) filled with the training median
        c = f'timestamp_lag_{key}'
        want = loop_lags(df, key, 'timestamp')
        np.testing.assert_array_equal(got[c].to_numpy(), np.where(np.isnan(want), td.na_dict[c], want), err_msg=c)
    tg = TabularGPU(df, procs=procs(), **{**kw, 'splits': ColSplitter('is_valid')})
    assert torch.equal(td.train.packed_rows()[0], tg.packed_rows()[0][:tg.split])

def loop_history(df:pd.DataFrame, name:str, key:str, time:str, n:int) -> list:
    """A plain Python reference, independent of the procs: each row's key's last `n` earlier events' `name`, the
    latest first (empty for a first event or a missing key), events ordered as `loop_lags` orders them."""
    t, k, x, v = df[time].tolist(), df[key].tolist(), df[name].tolist(), df.is_valid.tolist()
    seen, res = {}, [[] for _ in range(len(df))]
    for i in sorted(range(len(df)), key=lambda i: (t[i], v[i], i)):
        if pd.isna(k[i]): continue
        res[i] = seen.get(k[i], [])[-n:][::-1]
        seen.setdefault(k[i], []).append(x[i])
    return res

def test_history_lists_against_a_loop(ratings):
    """Each row's list of its user's last 3 earlier movies on Dask (users spread over every partition) is a plain
    Python loop's: the row's own movie never in it, the latest first."""
    df = ratings.iloc[:6000]
    procs = [History('item_id', 'user_id', 'timestamp', n=3), Categorify]
    td = TabularGPU(dd.from_pandas(df, npartitions=PARTS, sort=False), procs=procs, splits='is_valid', progress=False,
                    cat_names=['user_id', 'item_id'], cont_names=['timestamp'], y_names='rating')
    got = td.items.compute().sort_index()['item_id_last3_user_id']
    want = loop_history(df, 'item_id', 'user_id', 'timestamp', 3)
    assert sum(map(len, want)) > 5000 and [list(g) for g in got] == want

@pytest.mark.parametrize('source', ['parquet', 'dask'])
def test_side_table_options_on_dask(ratings, movies, tmp_path, source):
    """A side table with repeated keys (the last row kept), given as a Parquet file or a Dask frame: the Dask Tabular's
    rows and state are the in-memory one's, bit for bit."""
    dup = pd.concat([movies, movies.iloc[:50].assign(ratings=-1., genre='Dup')], ignore_index=True)
    dup = dup.sample(frac=1, random_state=3).reset_index(drop=True)
    dup.to_parquet(tmp_path/'movies.parquet')
    table = tmp_path/'movies.parquet' if source == 'parquet' else dd.from_pandas(dup, npartitions=2, sort=False)
    td, tg = both(ratings, lambda: [JoinExternal(table, 'item_id', on_duplicates='last'), Categorify, FillMissing,
                                    Normalize], KW)
    same(td, tg)
    assert (to_pandas(tg.items).genre != 0).any() and 'Dup' in list(tg.classes['genre'])
