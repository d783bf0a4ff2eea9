"""`TabularGPU` over a Dask frame computed on a cluster of worker processes (`distributed.LocalCluster`, as
docs/bigger-than-memory.md starts one): the learned state and the chunks of Dask's threads, bit for bit; and the large
objects its tasks share (the procs with their vocabularies, the cache's reader) pickled as references to one file
each (dask/shipping.py), read once in a process, rather than into every task."""
import pickle
import numpy as np
import pandas as pd
import pytest

dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
distributed = pytest.importorskip('distributed', reason='a cluster needs `distributed` (the `test` extra has it)')
import dask.dataframe as dd
from fastai.tabular.all import CategoryBlock, FillMissing, Normalize
from fastai_gpu_tabular.all import Categorify, JoinGroupby, TabularGPU, TargetEncode
from fastai_gpu_tabular.dask import shipping
from fastai_gpu_tabular.datasets import criteo_names, criteo_parts

CATS, CONTS = ['C3', 'C9', 'C26'], ['I1', 'I2', 'I7']

@pytest.fixture(scope='module')
def criteo(tmp_path_factory):
    "Criteo-like rows, 24,000 in 4 Parquet files (one Dask partition each)."
    return criteo_parts(tmp_path_factory.mktemp('criteo'), 24_000, seed=5, part_rows=6_000, max_card=20_000)

def _build(criteo, chunk_dir):
    "Every proc a task takes: Categorify (vocabularies), fills, stats, target encodings with folds, groups."
    procs = [TargetEncode(CATS[:2], folds=3), JoinGroupby(CATS[2:], CONTS[:1]), Categorify, FillMissing, Normalize]
    ddf = dd.read_parquet(criteo, columns=[criteo_names()[2], *CATS, *CONTS, 'is_valid'])
    return TabularGPU(ddf, procs=procs, cat_names=list(CATS), cont_names=list(CONTS), y_names=criteo_names()[2],
                      y_block=CategoryBlock(), splits='is_valid', chunk_dir=chunk_dir, progress=False)

def _assert_same_state(to, other):
    "What the procs learned: vocabularies, fills, stats (equal values of equal types), target encodings, groups."
    for d in ('classes', 'na_dict', 'means', 'stds'):
        a, b = getattr(to, d), getattr(other, d)
        assert list(a) == list(b), d
        for k in b: assert list(a[k]) == list(b[k]) if d == 'classes' else a[k] == b[k] and type(a[k]) is type(b[k])
    assert list(to.vocab) == list(other.vocab) and list(to.cont_names) == list(other.cont_names)
    for p,d in (('target_encode', 'encodings'), ('join_groupby', 'groups')):
        a, b = getattr(getattr(to.procs, p), d), getattr(getattr(other.procs, p), d)
        assert list(a) == list(b)
        for k in b: pd.testing.assert_frame_equal(pd.DataFrame(a[k]), pd.DataFrame(b[k]), check_exact=True)

@pytest.mark.slow
def test_cluster_builds_what_threads_build(criteo, tmp_path):
    with dask.config.set(scheduler='threads'): local = _build(criteo, tmp_path/'threads')
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       memory_limit='2GB')
    with cluster, distributed.Client(cluster) as client:
        on_cluster = _build(criteo, tmp_path/'cluster')
        # each worker took the shipped objects from their files, each read once there (one object for all its tasks)
        arrived = client.run(lambda: {p: hasattr(s, '_obj') for p,s in shipping._ARRIVED.items()})
    _assert_same_state(on_cluster, local)
    for a,b in zip(on_cluster.chunks, local.chunks):
        assert a.layout == b.layout and len(a) == len(b)
        assert np.array_equal(a.load('cpu').numpy(), b.load('cpu').numpy())
    assert all(any(loaded.values()) for loaded in arrived.values()), arrived

def test_tasks_pickle_references(criteo, tmp_path):
    """The cache's reader and a proc pickle as a file's name, whatever their size; a shipped object comes back as one
    object in a process, and a Pipeline's procs that ship on their own come back as those same objects."""
    with dask.config.set(scheduler='sync'): to = _build(criteo, tmp_path)
    reader, cat = to.scan.cache, to.procs.categorify
    ship = lambda o: pickle.dumps(shipping.ship(o, to))
    cat_b, pipe_b = ship(cat), ship(to.procs)
    assert max(len(pickle.dumps(reader)), len(cat_b), len(pipe_b)) < 1000
    assert len(pickle.dumps(cat)) > 100_000   # what each task would carry: the vocabularies (and fastai's `o2i`)
    got = pickle.loads(cat_b).obj
    assert got is pickle.loads(cat_b).obj and got is not cat   # read once (here: a copy, as another process gets)
    assert {n: list(v) for n,v in got.classes.items()} == {n: list(v) for n,v in cat.classes.items()}
    assert all('o2i' not in vars(v) for v in got.classes.values())   # not built to ship: tasks never read it
    assert any(p is got for p in pickle.loads(pipe_b).obj.fs)   # the Pipeline's Categorify: that one object
    shipped = pickle.loads(pickle.dumps(reader))
    assert shipped.token == reader.token and shipped.columns.keys() == reader.columns.keys()
