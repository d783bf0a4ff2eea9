"""The first pass over a Dask frame (dask/scan.py) and what the others read from it: the passes (Dask computes) and
Parquet reads a `TabularDask` makes, counted, for each proc; the learned state and the packed chunks of the bench's
Criteo-like data, Adult and MovieLens (splits, multi-hot, every proc) against fastai's `TabularPandas` and the
in-memory `TabularGPU` on the same rows; categorical, empty and list partitions; the caller's frame left as it was."""
import gc
import numpy as np
import pandas as pd
import pytest
import torch

dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
import dask.dataframe as dd
from fastai.tabular.all import Categorify as FastaiCategorify
from fastai.tabular.all import CategoryBlock, ColSplitter, FillMissing, FillStrategy, Normalize, TabularPandas
from fastai_gpu_tabular.all import Categorify, HashBucket, HashedCross, JoinGroupby, TabularGPU, TargetEncode
from fastai_gpu_tabular.dask import procs as dask_procs
from fastai_gpu_tabular.datasets import criteo_names, criteo_parts, load_adult, load_movielens

@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set(scheduler='sync'): yield

def _same_state(a, b):
    "Vocabularies, fill values, means, stds and the target's vocab: equal values of the same types."
    assert list(a.cat_names) == list(b.cat_names) and list(a.classes) == list(b.classes)
    for n in b.classes:
        assert [(type(v), v) for v in a.classes[n]] == [(type(v), v) for v in b.classes[n]], n
    for d in ('na_dict', 'means', 'stds'):
        x, y = getattr(a, d, {}), getattr(b, d, {})
        assert list(x) == list(y), d
        for k in y: assert x[k] == y[k] and type(x[k]) is type(y[k]), (d, k, x[k], y[k])
    if hasattr(b, 'vocab'): assert list(a.vocab) == list(b.vocab)

def _same_rows(to, tg):
    "The Dask object's chunks hold the in-memory object's packed rows: its training rows, then its validation rows."
    rows = tg.packed_rows()[0]
    assert torch.equal(to.train.packed_rows()[0], rows[:tg.split])
    assert torch.equal(to.valid.packed_rows()[0], rows[tg.split:])

CRITEO_PARTS = 4

@pytest.fixture(scope='module')
def criteo(tmp_path_factory):
    "The bench's Criteo-like data, 24,000 rows in 4 Parquet files of 6,000 (one Dask partition each)."
    return criteo_parts(tmp_path_factory.mktemp('criteo'), 24_000, seed=3, part_rows=6_000, max_card=20_000)

@pytest.mark.parametrize('strings', [True, False], ids=['arrow', 'object'])
def test_criteo_in_two_or_five_passes(criteo, count, strings, held):
    """The bench's ETL, each Parquet file read once: two passes (the scan, the write) when the training conts are held
    in memory, five when not (the median's bracket, the sums behind the means and the squares between); fastai's
    state, and the in-memory TabularGPU's packed rows, bit for bit."""
    cats, conts, y = criteo_names()
    kw = lambda: dict(procs=[Categorify, FillMissing, Normalize], cat_names=list(cats), cont_names=list(conts),
                      y_names=y, y_block=CategoryBlock())
    with dask.config.set({'dataframe.convert-string': strings}):
        ddf = dd.read_parquet(criteo)
        assert ddf.npartitions == CRITEO_PARTS
        with count() as got: to = TabularGPU(ddf, splits='is_valid', progress=False, **kw())
    assert got == {'passes': 2 if held else 5, 'reads': CRITEO_PARTS}
    df = pd.read_parquet(criteo)
    tp = TabularPandas(df, splits=ColSplitter('is_valid')(df), **{**kw(), 'procs': [FastaiCategorify, FillMissing,
                                                                                   Normalize]})
    _same_state(to, tp)
    assert len(to.classes['C26']) > 5000 and len(to.na_dict) == len(conts)   # big vocabularies, NaN in every cont
    tg = TabularGPU(df, splits=ColSplitter('is_valid')(df), **kw())
    _same_rows(to, tg)

# the passes each set of procs makes after the scan and before the write, with the training conts held in memory and
# without (see docs/design.md, "Bigger than memory")
PASSES = {
    'constant fill': (lambda c, x: [Categorify, FillMissing(FillStrategy.constant)], 0, 0),
    # held: none; else Normalize's sums behind the means (1), their squared deviations (1)
    'constant fill, normalize': (lambda c, x: [Categorify, FillMissing(FillStrategy.constant), Normalize], 0, 2),
    # held: none; else the median's bracket (1) (or the mode's counts), then Normalize's two
    'median fill, normalize': (lambda c, x: [Categorify, FillMissing, Normalize], 0, 3),
    'mode fill, normalize': (lambda c, x: [Categorify, FillMissing(FillStrategy.mode), Normalize], 0, 3),
    'min_freq, max_vocab': (lambda c, x: [Categorify(min_freq=3, max_vocab=50), FillMissing, Normalize], 0, 3),
    # the target's mean and variance (2), each category's sums and counts (1), their squared deviations (1); then
    # Normalize's two over the encoded columns, which are not held
    'target encode': (lambda c, x: [TargetEncode(c, folds=0), Categorify, FillMissing, Normalize], 6, 7),
    # the training targets on the host for the folds (1), sums and counts (1), squared deviations (1)
    'target encode, folds': (lambda c, x: [TargetEncode(c, folds=3), Categorify, FillMissing, Normalize], 5, 6),
    # the conts' means and stds (2), each category's sums (1), their squared deviations (1)
    'join groupby': (lambda c, x: [JoinGroupby(c, x), Categorify, FillMissing, Normalize], 6, 7),
    'hashing': (lambda c, x: [HashBucket(c[:1], 50), HashedCross([c[:2]], 70), Categorify, FillMissing, Normalize],
                0, 3),
}

@pytest.mark.parametrize('case', list(PASSES))
def test_passes(criteo, count, case, held):
    "The passes of each proc, counted, and the rows read once from Parquet whatever the procs."
    procs, extra_held, extra = PASSES[case]
    cats, conts, y = criteo_names()
    ddf = dd.read_parquet(criteo, columns=[y, 'C3', 'C9', 'C20', 'I1', 'I2', 'I7', 'is_valid'])
    with count() as got:
        TabularGPU(ddf, procs=procs(['C3', 'C20'], ['I1', 'I7']), cat_names=['C3', 'C9', 'C20'],
                   cont_names=['I1', 'I2', 'I7'], y_names=y, y_block=CategoryBlock(), splits='is_valid', progress=False)
    assert got == {'passes': 2 + (extra_held if held else extra), 'reads': CRITEO_PARTS}

# the conts' procs, and those whose encodes the held training conts go through (fastai runs FillMissing first)
HELD_ENCODES = {'median fill, normalize': (lambda: [FillMissing, Normalize], [FillMissing]),
                'constant fill, normalize': (lambda: [FillMissing(FillStrategy.constant), Normalize], [FillMissing]),
                'median fill': (lambda: [FillMissing], [])}

@pytest.mark.parametrize('case', list(HELD_ENCODES))
def test_held_conts_encoded_for_later_learners_only(criteo, count, monkeypatch, case):
    """The held training conts go through a proc's encodes only while a proc still to be set up learns from them
    (never the last one's): fastai's state, and no pass over the partitions for it."""
    cats, conts, y = criteo_names()
    procs, want = HELD_ENCODES[case]
    seen, apply = [], dask_procs._apply
    def spy(part, proc, names):
        if len(part) > 6_000: seen.append(type(proc))   # longer than a partition: the held training rows
        return apply(part, proc, names)
    monkeypatch.setattr(dask_procs, '_apply', spy)
    kw = dict(cat_names=list(cats), cont_names=list(conts), y_names=y, y_block=CategoryBlock())
    with count() as got:
        to = TabularGPU(dd.read_parquet(criteo), procs=[Categorify, *procs()], splits='is_valid', progress=False, **kw)
    assert got['passes'] == 2 and seen == want
    df = pd.read_parquet(criteo)
    _same_state(to, TabularPandas(df, procs=[FastaiCategorify, *procs()], splits=ColSplitter('is_valid')(df), **kw))

def test_new_frame_in_two_passes(criteo, count):
    "A later Dask frame through a set-up object: the scan and the write."
    cats, conts, y = criteo_names()
    to = TabularGPU(dd.read_parquet(criteo), procs=[Categorify, FillMissing, Normalize], cat_names=cats,
                    cont_names=conts, y_names=y, y_block=CategoryBlock(), splits='is_valid', progress=False)
    with count() as got:
        new = to.new(dd.read_parquet(criteo))
        new.process()
    assert got == {'passes': 2, 'reads': CRITEO_PARTS}
    df = pd.read_parquet(criteo)
    mem = to.new(df)
    mem.process()
    assert torch.equal(new.train.packed_rows()[0], mem.packed_rows()[0])   # no split: every row trains

def _movielens():
    "MovieLens with a split, NaN years, genres as '|'-separated strings and as lists (one list empty, one missing)."
    df = load_movielens().iloc[:20000].copy()
    df['is_valid'] = np.random.default_rng(7).random(len(df)) < 0.2
    lists = df['genres'].str.split('|').tolist()
    lists[3], lists[8] = [], None
    df['genre_list'] = pd.Series(lists, index=df.index, dtype=object)
    df.loc[df.index[::17], 'year'] = np.nan
    return df

@pytest.mark.parametrize('reduce_memory', [True, False])
def test_movielens_every_proc(reduce_memory, held):
    """MovieLens over uneven partitions with a split, both kinds of multi-hot column, and every proc: the in-memory
    TabularGPU's state and packed rows, bit for bit. (JoinGroupby's means and stds are pandas' within rounding, not
    bit for bit: test_dask_groupby.py.)"""
    df = _movielens()
    with dask.config.set({'dataframe.convert-string': False}):   # lists stay lists
        ddf = dd.from_pandas(df, npartitions=1).repartition(divisions=[0, 3000, 3001, 9000, 15000, len(df) - 1])
    mem = ddf.compute()
    procs = lambda: [HashBucket(['title'], 200, seed=1), HashedCross([('userId', 'year')], 300, seed=1),
                     TargetEncode(['movieId'], folds=3, seed=2), Categorify(min_freq=2, max_bag={'genres': 3}),
                     FillMissing, Normalize]
    kw = lambda: dict(procs=procs(), cat_names=['userId', 'movieId', 'title', 'genres', 'genre_list'],
                      cont_names=['year', 'rating'], y_names='timestamp', multi_hot={'genres': '|'},
                      reduce_memory=reduce_memory)
    with pytest.warns(UserWarning, match="multi-hot column 'genres'"):
        to = TabularGPU(ddf, splits='is_valid', progress=False, **kw())
    tg = TabularGPU(mem, splits=ColSplitter('is_valid')(mem), **kw())
    _same_state(to, tg)
    assert to.bag_widths == tg.bag_widths and to.bag_widths['genres'] == 3
    _same_rows(to, tg)

def test_adult_categoricals_and_an_empty_partition():
    """Adult with Dask-known categoricals (an unused category among them, which fastai keeps), a string target and a
    partition with no rows: fastai's TabularPandas' state and the in-memory TabularGPU's rows."""
    df = load_adult().iloc[:8000].copy()
    df['is_valid'] = np.random.default_rng(1).random(len(df)) < 0.25
    df['race'] = df['race'].astype(pd.CategoricalDtype([*sorted(df['race'].dropna().unique()), 'Unused']))
    ddf = dd.from_pandas(df, npartitions=4)
    ddf = ddf[ddf['age'] < 200]   # no row dropped; then a partition with none
    ddf = dd.concat([ddf, ddf.partitions[0][ddf.partitions[0]['age'] < 0]])
    assert ddf.npartitions == 5 and len(ddf.partitions[4]) == 0
    mem = ddf.compute()
    kw = lambda c: dict(procs=[c, FillMissing, Normalize], cat_names=['workclass', 'education', 'race', 'gender'],
                        cont_names=['age', 'fnlwgt', 'hours-per-week'], y_names='income')
    to = TabularGPU(ddf, splits='is_valid', progress=False, **kw(Categorify))
    tp = TabularPandas(mem, splits=ColSplitter('is_valid')(mem), **kw(FastaiCategorify))
    _same_state(to, tp)
    assert list(to.classes['race'])[-1] == 'Unused'
    _same_rows(to, TabularGPU(mem, splits=ColSplitter('is_valid')(mem), **kw(Categorify)))

_INDEXES = {'range': lambda: pd.RangeIndex(100, 20100, name='rid'),   # the cache keeps each kind its own way
            'ints': lambda: pd.Index(np.arange(20000) * 3 + np.arange(20000) % 2, name='rid'),   # no range
            'strings': lambda: pd.Index([f'r{i}' for i in range(20000)], name='rid')}

@pytest.mark.parametrize('index', list(_INDEXES))
def test_caller_frame_unchanged_and_rows_as_they_came(index):
    "The caller's frame, pandas and Dask, is left as it was; the scan's frame holds its rows, index and values."
    df = _movielens().drop(columns='genre_list').set_index(_INDEXES[index]())
    before = df.copy()
    ddf = dd.from_pandas(df, npartitions=3)
    want, meta = ddf.compute(), ddf._meta.copy()
    to = TabularGPU(ddf, procs=[Categorify, FillMissing, Normalize], cat_names=['userId', 'title', 'genres'],
                    cont_names=['year'], y_names='rating', splits='is_valid', multi_hot={'genres': '|'},
                    do_setup=False, progress=False)
    pd.testing.assert_frame_equal(df, before)
    pd.testing.assert_frame_equal(ddf.compute(), want)
    pd.testing.assert_frame_equal(ddf._meta, meta)
    got = to.items.compute()
    assert got.index.equals(want.index)
    assert list(got.columns) == ['userId', 'title', 'genres', 'year', 'rating', 'is_valid']   # the names' order
    a, b = got['title'].astype(object), want['title'].astype(object)   # a Categorical of the same values
    assert (a.isna() == b.isna()).all() and a.dropna().tolist() == b.dropna().tolist()
    assert got['genres'].tolist() == want['genres'].str.split('|').tolist()
    pd.testing.assert_series_equal(got['year'], want['year'].astype('float32'))   # fastai's df_shrink cast

def test_lists_in_some_partitions_only():
    df = pd.DataFrame({'tags': [['a'], ['b', 'c'], 'a', 'b'], 'x': [1., 2, 3, 4], 'y': [0., 1, 0, 1]})
    with dask.config.set({'dataframe.convert-string': False}):
        ddf = dd.from_pandas(df, npartitions=2)
    with pytest.raises(TypeError, match="column 'tags' holds lists in some partitions only"):
        TabularGPU(ddf, procs=[Categorify, Normalize], cat_names=['tags'], cont_names=['x'], y_names='y',
                   progress=False)

def test_cache_removed_with_the_object(tmp_path):
    "The scan's cache lives in `chunk_dir` while the object (or a frame read from it) does, and goes with it."
    df = _movielens()[['userId', 'title', 'rating', 'year', 'is_valid']]
    to = TabularGPU(dd.from_pandas(df, npartitions=2), procs=[Categorify, FillMissing, Normalize],
                    cat_names=['userId', 'title'], cont_names=['year'], y_names='rating', splits='is_valid',
                    chunk_dir=tmp_path, progress=False)
    scans = list(tmp_path.glob('scan-*'))
    assert len(scans) == 1 and any(scans[0].glob('part.*.bin'))
    items = to.valid.items
    del to
    gc.collect()
    assert scans[0].exists() and len(items.compute()) == df['is_valid'].sum()   # a frame still reads it
    del items
    gc.collect()
    assert not scans[0].exists() and (tmp_path/'train').exists()   # the chunks stay

@pytest.mark.parametrize('other', [None, 'nine bytes'], ids=['short', 'long'])
def test_merged_strings_as_python_sorts_them(other):
    """The partitions' distinct Arrow strings merge into the values, training counts and per-partition codes that the
    same values as Python strings give (sorted as `sorted` does): short ones as integer keys, others by Arrow; and so
    do the distinct values as the scan takes them from each partition's column, Arrow or object strings (short ones as
    keys, with the order that sorts them)."""
    import pyarrow as pa
    from fastai_gpu_tabular.dask.scan import _factorize, merge_values
    rng = np.random.default_rng(0)
    vals = np.array(['b', 'a', 'é', 'B', 'zz', '10', '9', ' x', '', '\U0001F600', 'ß', 'abcdefgh'] +
                    ([other] if other else []), dtype=object)
    pieces = []
    for k in (5, 0, 9, 12):   # a partition's distinct values (an empty one too), and its training counts
        u = rng.choice(vals, k, replace=False)
        pieces.append((u, rng.integers(0, 4, k)))
    arrow = [(pa.array(list(u), type=pa.large_string()), c) for u,c in pieces]
    got, ref = merge_values('s', arrow), merge_values('s', pieces)
    assert list(got[0]) == list(ref[0]) == sorted(set(np.concatenate([u for u,_ in pieces])))
    assert all(type(v) is str for v in got[0])
    assert np.array_equal(got[1], ref[1]) and len(got[2]) == len(ref[2]) == len(pieces)
    for g,r in zip(got[2], ref[2]): assert np.array_equal(g, r) and g.dtype == r.dtype
    for dtype in (pd.StringDtype('pyarrow'), object):
        scanned = []
        for u,c in pieces:   # the partition's column holds its distinct values once each, so its counts are theirs
            codes, uniq = _factorize(pd.Series(list(u), dtype=dtype))
            n = np.zeros(len(uniq), np.int64)
            n[codes] = c
            scanned.append(((uniq, n), codes))
        got = merge_values('s', [p for p,_ in scanned])
        assert list(got[0]) == list(ref[0]) and np.array_equal(got[1], ref[1])
        for (_,codes),g,r in zip(scanned, got[2], ref[2]): assert np.array_equal(g[codes], r)
