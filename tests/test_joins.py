"""`JoinExternal` against pandas' `merge(how='left')` on MovieLens 100K: a side table of movies (release year, main
genre, popularity), some movies missing from it; the joined values, the rows' order, and the packed rows of a Tabular
of the frame merged by hand; errors naming the column."""
import numpy as np
import pandas as pd
import pytest
import torch
from fastai.tabular.all import Categorify, FillMissing, Normalize, RandomSplitter
from fastai_gpu_tabular.all import JoinExternal, TabularGPU
from fastai_gpu_tabular.backend import to_pandas
from fastai_gpu_tabular.datasets import load_movielens_100k

@pytest.fixture(scope='module')
def ratings():
    "30,000 ratings in a shuffled order, a random split, and a table of 90% of their movies (unique by `item_id`)."
    df = load_movielens_100k().sample(frac=1, random_state=3).iloc[:30000].reset_index(drop=True)
    df = df.drop(columns=['genres', 'release_year'])
    full = load_movielens_100k()
    movies = full.groupby('item_id').agg(year=('release_year', 'first'), main_genre=('genres', lambda g: g.iloc[0][0]),
                                         ratings=('rating', 'size'), mean_age=('age', 'mean')).reset_index()
    movies['year'] = pd.to_numeric(movies['year'], errors='coerce')   # a number, NaN for a few
    table = movies.sample(frac=0.9, random_state=0).reset_index(drop=True)
    return df, RandomSplitter(seed=0)(range(len(df))), table

def test_joined_values_are_pandas_merge(ratings, as_backend):
    "The table's columns for every row, in the frame's order: pandas' left merge (NaN for a movie the table lacks)."
    df, splits, table = ratings
    je = JoinExternal(table, 'item_id', cat_names=['main_genre'], cont_names=['year', 'ratings', 'mean_age'])
    to = TabularGPU(as_backend(df), procs=[je], cat_names=['user_id', 'item_id'], cont_names=['age'], y_names='rating',
                    splits=splits)
    frame = df.iloc[np.concatenate(splits)].reset_index(drop=True)
    want = frame.merge(table, on='item_id', how='left')
    assert len(want) == len(frame) and (want.item_id.to_numpy() == frame.item_id.to_numpy()).all()
    got = to_pandas(to.items)
    assert list(to.cat_names)[-1] == 'main_genre' and list(to.cont_names)[-3:] == ['year', 'ratings', 'mean_age']
    for c in ('year', 'ratings', 'mean_age'):
        np.testing.assert_array_equal(got[c].to_numpy(), want[c].to_numpy('f8'), err_msg=c)
    pd.testing.assert_series_equal(got['main_genre'].astype(object).reset_index(drop=True),
                                   want['main_genre'].astype(object), check_names=False)
    assert got['main_genre'].isna().sum() == (~frame.item_id.isin(table.item_id)).sum() > 0

def test_processed_as_if_merged_by_hand(ratings, as_backend):
    """Categorify, FillMissing and Normalize process the joined columns as those of the frame merged by hand (fastai's
    shrink off, which does not run over joined columns): the same packed rows, column by column."""
    df, splits, table = ratings
    procs = [Categorify, FillMissing, Normalize]
    to = TabularGPU(as_backend(df), procs=[JoinExternal(table, 'item_id'), *procs], cat_names=['user_id', 'item_id'],
                    cont_names=['age'], y_names='rating', splits=splits, reduce_memory=False)
    merged = df.merge(table, on='item_id', how='left')
    assert (merged.item_id == df.item_id).all()
    ref = TabularGPU(as_backend(merged), procs=procs, cat_names=['user_id', 'item_id', 'main_genre'],
                     cont_names=['age', 'year', 'ratings', 'mean_age'], y_names='rating', splits=splits,
                     reduce_memory=False)
    (a, b), (c, d) = to.packed()[:2], ref.packed()[:2]
    for names,x,y in ((to.cat_names, a, c), (to.cont_names, b, d)):
        for j,n in enumerate(names):
            k = list(ref.cat_names if x is a else ref.cont_names).index(n)
            assert torch.equal(x[:, j], y[:, k]), n

def test_errors(ratings):
    "A key the table holds twice, or not at all, or that the frame lacks; columns the frame has; conts of strings."
    df, splits, table = ratings
    before = (df.copy(), table.copy())
    with pytest.raises(ValueError, match=r"holds key\(s\) \[\d+\] of 'item_id' more than once"):
        JoinExternal(pd.concat([table, table.iloc[:1]]), 'item_id')
    with pytest.raises(KeyError, match=r"the key column 'movie' is not in the table"): JoinExternal(table, 'movie')
    with pytest.raises(TypeError, match=r"cont column\(s\) \['main_genre'\] of the table are not numbers"):
        JoinExternal(table, 'item_id', cont_names=['main_genre'])
    with pytest.raises(ValueError, match=r"key column 'item_id' holds missing values"):
        JoinExternal(table.assign(item_id=table.item_id.where(table.index > 0)), 'item_id')
    kw = dict(cont_names=['age'], y_names='rating', splits=splits)
    with pytest.raises(KeyError, match=r"JoinExternal: column\(s\) \['item_id'\] are not in the frame"):
        TabularGPU(df.drop(columns=['item_id']), procs=[JoinExternal(table, 'item_id'), Categorify],
                   cat_names=['user_id'], **kw)
    with pytest.raises(ValueError, match=r"JoinExternal would make column\(s\) \['ratings'\], which the frame "
                                         r"already has: rename them in the table"):
        TabularGPU(df.assign(ratings=1), procs=[JoinExternal(table, 'item_id'), Categorify, FillMissing],
                   cat_names=['item_id', 'ratings'], **kw)
    pd.testing.assert_frame_equal(df, before[0])
    pd.testing.assert_frame_equal(table, before[1])

@pytest.mark.parametrize('keep', ['first', 'last'])
def test_duplicate_keys_by_policy(ratings, keep):
    "`on_duplicates='first'/'last'` joins the key's first (last) row: pandas' merge on the table deduplicated so."
    df, splits, table = ratings
    dup = pd.concat([table, table.iloc[:40].assign(ratings=-1, main_genre='Dup')], ignore_index=True)
    dup = dup.sample(frac=1, random_state=1).reset_index(drop=True)   # the repeats anywhere in the table
    before = dup.copy()
    to = TabularGPU(df, procs=[JoinExternal(dup, 'item_id', on_duplicates=keep)], cat_names=['item_id'],
                    cont_names=['age'], y_names='rating', splits=splits)
    frame = df.iloc[np.concatenate(splits)].reset_index(drop=True)
    want = frame.merge(dup.drop_duplicates('item_id', keep=keep), on='item_id', how='left')
    got = to_pandas(to.items)
    np.testing.assert_array_equal(got['ratings'].to_numpy(), want['ratings'].to_numpy('f8'))
    assert got['main_genre'].astype(object).eq('Dup').sum() == want['main_genre'].eq('Dup').sum() > 0
    pd.testing.assert_frame_equal(dup, before)
    with pytest.raises(ValueError, match=r"on_duplicates=...\) must be 'error', 'first' or 'last', got 'any'"):
        JoinExternal(table, 'item_id', on_duplicates='any')

def test_table_from_parquet_arrow_and_dask(ratings, tmp_path):
    "A Parquet file, an Arrow table and a Dask frame join as the frame in memory does; a Dask table too big is refused."
    pa = pytest.importorskip('pyarrow')
    df, splits, table = ratings
    table.to_parquet(tmp_path/'movies.parquet')
    kw = dict(cat_names=['item_id'], cont_names=['age'], y_names='rating', splits=splits)
    ref = TabularGPU(df, procs=[JoinExternal(table, 'item_id'), Categorify, FillMissing], **kw).packed()
    sources = [tmp_path/'movies.parquet', str(tmp_path/'movies.parquet'), pa.Table.from_pandas(table)]
    dd = pytest.importorskip('dask.dataframe', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
    sources.append(dd.from_pandas(table, npartitions=3))
    for src in sources:
        got = TabularGPU(df, procs=[JoinExternal(src, 'item_id'), Categorify, FillMissing], **kw).packed()
        for a,b in zip(got, ref): assert torch.equal(a, b), type(src)
    with pytest.raises(ValueError, match=r"Dask side table takes \d+ bytes in memory, more than max_table_bytes=100"):
        JoinExternal(sources[-1], 'item_id', max_table_bytes=100)

@pytest.mark.parametrize('rows', ['cold start', 'one new item'])
def test_no_row_has_a_key_of_the_table(ratings, as_backend, rows):
    """A frame where no row's key is in the table (a cold start; a one-row `new` of an item the table lacks): the
    joined cat is all missing, `#na#` once processed, as pandas' merge gives it (on cuDF an all-None object array is
    not a column: `cudf.Series` of it raises MixedTypeError)."""
    df, splits, table = ratings
    unseen = df[~df.item_id.isin(table.item_id)]
    procs = lambda: [JoinExternal(table, 'item_id', cat_names=['main_genre'], cont_names=[]), Categorify]
    kw = dict(cat_names=['user_id', 'item_id'], cont_names=['age'], y_names='rating')
    before = unseen.copy()
    if rows == 'cold start':
        frame = unseen.iloc[:200].reset_index(drop=True)
        to = TabularGPU(as_backend(frame), procs=procs(), splits=RandomSplitter(seed=0)(range(len(frame))), **kw)
    else:
        frame = unseen.iloc[:1]
        to = TabularGPU(as_backend(df), procs=procs(), splits=splits, **kw).new(as_backend(frame))
        to.process()
    got = to_pandas(to.items)
    assert len(got) == len(frame) and got.main_genre.to_numpy().tolist() == [0] * len(frame)   # `#na#`
    pd.testing.assert_frame_equal(unseen, before)
