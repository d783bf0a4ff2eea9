"""Hashed buckets and crosses on a Dask frame: the learned state and the packed rows of the in-memory `TabularGPU` on
the same MovieLens rows (HashBucket, exact and hashed HashedCross, Categorify(min_freq, num_buckets)); a test frame."""
import numpy as np
import pytest
import torch

dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
import dask.dataframe as dd
from fastai.tabular.all import ColSplitter, FillMissing, Normalize
from fastai_gpu_tabular.all import Categorify, HashBucket, HashedCross, TabularDask, TabularGPU
from fastai_gpu_tabular.datasets import load_movielens

@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set(scheduler='sync'): yield

def _procs():
    return [HashBucket(['userId', 'title'], {'userId': 50, 'title': 300}, seed=3),
            HashedCross([('userId', 'movieId'), ('genres', 'year')], num_buckets={'userId_X_movieId': 900}, seed=3),
            Categorify(min_freq=4, num_buckets=25, seed=3), FillMissing, Normalize]

@pytest.fixture(scope='module')
def both():
    df = load_movielens().iloc[:30000].copy()
    df['is_valid'] = np.arange(len(df)) % 5 == 0
    with dask.config.set(scheduler='sync', **{'dataframe.convert-string': False}):   # object strings on both sides
        ddf = dd.from_pandas(df, npartitions=4)
        mem = ddf.compute()
        kw = lambda: dict(cat_names=['userId', 'movieId', 'title', 'genres'], cont_names=['year'], y_names='rating')
        to = TabularGPU(ddf, procs=_procs(), splits='is_valid', **kw())
        tg = TabularGPU(mem, procs=_procs(), splits=ColSplitter('is_valid')(mem), **kw())
    return to, tg, mem

def test_state_is_in_memorys(both):
    to, tg, _ = both
    assert type(to) is TabularDask
    assert list(to.cat_names) == list(tg.cat_names) == ['userId', 'movieId', 'title', 'genres', 'userId_X_movieId',
                                                         'genres_X_year', 'year_na']
    for n in tg.cat_names: assert list(to.classes[n]) == list(tg.classes[n]), n
    assert to.bucket_counts == tg.bucket_counts and 'userId' not in tg.bucket_counts   # hashed: all buckets already
    assert len(tg.classes['userId_X_movieId']) == 901 and tg.classes['movieId'][-1] == '#bucket24#'

def test_packed_rows_are_in_memorys(both):
    to, tg, _ = both
    rows = tg.packed_rows()[0]
    assert torch.equal(to.train.packed_rows()[0], rows[:tg.split])
    assert torch.equal(to.valid.packed_rows()[0], rows[tg.split:])

def test_test_frame(both):
    "A pandas test frame with unseen ids through the Dask-built object: the in-memory object's codes."
    to, tg, mem = both
    new = mem.iloc[:2000].drop(columns='rating')
    new['movieId'] = new.movieId + 10**6
    a, b = to.new(new), tg.new(new)
    a.process(); b.process()
    assert torch.equal(a.packed_rows()[0], b.packed_rows()[0])
