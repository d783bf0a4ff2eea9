"""`TabularGPU` over a Dask frame against fastai's `TabularPandas` (and our in-memory `TabularGPU`) on the same rows:
the learned state bit for bit, the packed rows, test_dl/predict/export, and the errors."""
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
import numpy as np
import pandas as pd
import pytest
import torch

dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
import dask.dataframe as dd
from fastai.tabular.all import Categorify as FastaiCategorify
from fastai.tabular.all import (
    CategoryBlock,
    ColSplitter,
    FillMissing,
    FillStrategy,
    Normalize,
    RandomSplitter,
    TabularPandas,
    default_device,
    load_learner,
    tabular_learner,
)
from helpers.fake_device import CHILD_PRELUDE
from helpers.faults import run_child
from fastai_gpu_tabular.all import BatchDataLoaders, Categorify, TabularDask, TabularGPU

@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set(scheduler='sync'): yield

def _frame(n=4000, seed=0):
    "Strings with None, a value only in validation rows, ints, float32/float64 spanning 1e-5..1e5 with NaN, a split."
    rng = np.random.default_rng(seed)
    wide = lambda: np.exp(rng.standard_normal(n) * 6) * rng.choice([-1, 1], n)   # float sums depend on their order
    df = pd.DataFrame({
        'city': rng.choice(['paris', 'oslo', 'lima', 'kyiv', None], n).astype(object),
        'dept': rng.integers(0, 40, n),
        'f32': wide().astype(np.float32), 'f64': wide(), 'i16': rng.integers(-3000, 3000, n).astype(np.int16),
        'label': rng.choice(['no', 'yes'], n), 'is_valid': rng.random(n) < 0.25})
    df.loc[rng.random(n) < 0.15, 'f32'] = np.nan
    df.loc[rng.random(n) < 0.05, 'f64'] = np.nan
    df.loc[df.index[df.is_valid][:3], 'city'] = 'quito'   # only in validation rows: fastai's category cast keeps it
    return df

CATS, CONTS = ['city', 'dept'], ['f32', 'f64', 'i16']

def _both(df, npartitions=5, procs=lambda: [Categorify, FillMissing, Normalize], **kw):
    "(TabularDask over `df` in partitions, TabularPandas over the same rows in memory, the Dask frame)."
    ddf = dd.from_pandas(df, npartitions=npartitions)
    mem = ddf.compute()   # the rows the partitions hold, with the dtypes Dask gave them
    args = lambda: dict(cat_names=list(CATS), cont_names=list(CONTS), y_names='label', **kw)
    to = TabularGPU(ddf, procs=procs(), splits='is_valid', **args())   # each its own procs: they hold the state
    tp = TabularPandas(mem, procs=[FastaiCategorify if p is Categorify else p for p in procs()],
                       splits=ColSplitter('is_valid')(mem), **args())
    return to, tp, ddf

def _same_state(to, tp):
    "Vocabularies, fill values, means and stds: equal values of the same types (numpy float32 stays float32)."
    assert list(to.classes) == list(tp.classes)
    for n in tp.classes: assert list(to.classes[n]) == list(tp.classes[n]), n
    for d in ('na_dict', 'means', 'stds'):
        if not hasattr(tp, d): continue
        a, b = getattr(to, d), getattr(tp, d)
        assert list(a) == list(b), d
        for k in b: assert a[k] == b[k] and type(a[k]) is type(b[k]), (d, k, a[k], b[k])
    if hasattr(tp, 'vocab'): assert list(to.vocab) == list(tp.vocab)
    assert list(to.cat_names) == list(tp.cat_names)

@pytest.fixture(scope='module')
def built():
    with dask.config.set(scheduler='sync', **{'dataframe.convert-string': False}):   # object strings, as pandas 2 has
        return _both(_frame())

def test_state_is_fastais(built):
    to, tp, _ = built
    assert type(to) is TabularDask and len(to) == len(tp) and to.split == tp.split
    _same_state(to, tp)
    assert 'quito' in to.classes['city']   # object column: the vocabulary of fastai's all-rows category cast

def test_sums_need_numpys_order(built):
    "Adding up each partition's sum (in float32, or even in float64) misses pandas' mean here: the test above can fail."
    _, tp, ddf = built
    parts = [p.loc[~p.is_valid, 'f64'].astype('float32').fillna(tp.na_dict['f64']).to_numpy() for p in
             (ddf.get_partition(i).compute() for i in range(ddf.npartitions))]
    n = sum(map(len, parts))
    assert np.float32(sum(p.sum() for p in parts) / np.float32(n)) != tp.means['f64']
    assert np.float32(sum(p.sum(dtype='f8') for p in parts) / n) != tp.means['f64']

def test_packed_rows_are_in_memorys(built):
    "The chunks hold the rows the in-memory TabularGPU packs from the same frame: train rows, then validation rows."
    to, _, ddf = built
    mem = ddf.compute()
    tg = TabularGPU(mem, procs=[Categorify, FillMissing, Normalize], cat_names=list(CATS), cont_names=list(CONTS),
                    y_names='label', splits=ColSplitter('is_valid')(mem))
    _same_state(to, tg)
    rows = tg.packed_rows()[0]
    assert torch.equal(to.train.packed_rows()[0], rows[:tg.split])
    assert torch.equal(to.valid.packed_rows()[0], rows[tg.split:])
    assert [c.layout for c in to.chunks] == [tg.packed_rows()[1]] * 2

def test_items_are_fastais(built):
    """The processed frame is TabularPandas': its columns in its order (the `_na` flags last), its values and dtypes;
    its rows as they came (fastai puts the training rows first)."""
    to, tp, _ = built
    pd.testing.assert_frame_equal(to.items.compute(), tp.items.sort_index())

def test_arrow_strings_and_partitions():
    "Dask's default pyarrow strings (vocabulary from the training rows), many partitions; one and no validation rows."
    df = _frame(1500, seed=1)
    to, tp, _ = _both(df, npartitions=7)
    _same_state(to, tp)
    to = TabularGPU(dd.from_pandas(df.drop(columns='is_valid'), npartitions=1), cat_names=list(CATS),
                    procs=[Categorify, FillMissing, Normalize], cont_names=list(CONTS), y_names='label')
    assert len(to.valid) == 0 and len(to.train) == len(df) and len(to.chunks[1]) == 0

@pytest.mark.parametrize('fill', [FillStrategy.mode, FillStrategy.constant])
def test_fill_strategies(fill):
    df = _frame(1200, seed=2)
    df['f32'] = np.round(df['f32'] / 1e3).astype(np.float32)   # few values: ties for the mode
    fm = lambda: FillMissing(fill_strategy=fill, fill_vals={'f32': 7, 'f64': 0.5})
    to, tp, _ = _both(df, procs=lambda: [Categorify, fm(), Normalize])
    _same_state(to, tp)

def test_without_reduce_memory_and_with_colsplitter_on():
    "Training-row vocabularies everywhere, against the in-memory TabularGPU (fastai's fails to sort None with strings)."
    df = _frame(1200, seed=3)
    df['fold'] = np.where(df.is_valid, 'v', 't')
    ddf = dd.from_pandas(df, npartitions=4)
    mem = ddf.compute()
    kw = lambda: dict(procs=[Categorify, FillMissing, Normalize], cat_names=list(CATS), cont_names=list(CONTS),
                      y_names='label', reduce_memory=False)
    to = TabularGPU(ddf, splits=ColSplitter('fold', on='v'), **kw())
    tg = TabularGPU(mem, splits=ColSplitter('fold', on='v')(mem), **kw())
    _same_state(to, tg)
    assert 'quito' not in to.classes['city'] and to.items['f64'].dtype == np.float64   # nothing shrunk

@pytest.mark.parametrize('vals', [[True, False, None], [True, False]], ids=['with_none', 'bools'])
def test_object_split_column_made_strings(vals):
    """An object split column (bools, with None or not) that Dask's `from_pandas` makes strings: fastai's `ColSplitter`
    rule on those fails at a missing one (as fastai's own cast of pandas' NA does) or validates every row; either is a
    ValueError naming the column and the cast, in the scan, before the procs. Cast to bool, the rows are fastai's on
    the user's own column."""
    df = _frame(1200, seed=5)
    pick = np.random.default_rng(5).integers(0, len(vals), len(df))
    df['is_valid'] = pd.Series(np.array(vals, dtype=object)[pick], dtype=object)
    ddf = dd.from_pandas(df, npartitions=4)
    assert ddf['is_valid'].dtype != object   # Dask's strings: what this test is about
    kw = lambda: dict(procs=[Categorify, FillMissing, Normalize], cat_names=list(CATS), cont_names=list(CONTS),
                      y_names='label')
    with pytest.raises(ValueError, match=r"split column 'is_valid'.*df\[col\]\.astype\(bool\)"):
        TabularGPU(ddf, splits='is_valid', **kw())
    if None in vals:   # fastai's own cast of the column as Dask holds it fails too
        with pytest.raises((TypeError, ValueError)): ColSplitter('is_valid')(ddf.compute())
    else: assert len(ColSplitter('is_valid')(ddf.compute())[0]) == 0   # fastai's rule there: no training row
    cast = df.assign(is_valid=df['is_valid'].astype(bool))
    to = TabularGPU(dd.from_pandas(cast, npartitions=4), splits='is_valid', **kw())
    assert (len(to.train), len(to.valid)) == tuple(map(len, ColSplitter('is_valid')(df)))

def test_min_freq_max_vocab():
    "Our Categorify options give the in-memory TabularGPU's vocabularies (TabularPandas has neither option)."
    df = _frame(2000, seed=4)
    ddf = dd.from_pandas(df, npartitions=4)
    mem = ddf.compute()
    a = lambda: dict(procs=[Categorify(min_freq=35, max_vocab=12), FillMissing, Normalize], cat_names=list(CATS),
                     cont_names=list(CONTS), y_names='label')
    to, tg = TabularGPU(ddf, splits='is_valid', **a()), TabularGPU(mem, splits=ColSplitter('is_valid')(mem), **a())
    _same_state(to, tg)
    assert len(to.classes['dept']) == 13 and len(to.classes['city']) == 5   # max_vocab cut one, min_freq the other

def test_multi_hot():
    "List and separator-string multi-hot columns: the in-memory vocabulary, bag width and padded codes."
    rng = np.random.default_rng(5)
    n = 900
    genres = ['drama', 'comedy', 'action', 'noir', 'sci-fi']
    lists = [list(rng.choice(genres, rng.integers(0, 4), replace=False)) for _ in range(n)]
    lists[5] = None
    df = pd.DataFrame({'tags': lists, 'csv': ['|'.join(l) if l else None for l in lists], 'x': rng.random(n),
                       'y': rng.random(n), 'is_valid': rng.random(n) < 0.3})
    with dask.config.set({'dataframe.convert-string': False}):   # else Dask turns the lists into strings
        ddf = dd.from_pandas(df, npartitions=3)
    mem = ddf.compute()
    a = lambda: dict(procs=[Categorify, Normalize], cat_names=['tags', 'csv'], cont_names=['x'], y_names='y',
                     multi_hot={'csv': '|'})
    to, tg = TabularGPU(ddf, splits='is_valid', **a()), TabularGPU(mem, splits=ColSplitter('is_valid')(mem), **a())
    _same_state(to, tg)
    assert to.bag_widths == tg.bag_widths == {'tags': 3, 'csv': 3}
    rows = tg.packed_rows()[0]
    assert torch.equal(to.train.packed_rows()[0], rows[:tg.split])
    assert torch.equal(to.valid.packed_rows()[0], rows[tg.split:])

def test_test_dl_predict_export(built, tmp_path):
    "A pandas test frame through the Dask-built object gives the in-memory object's batches; predict; export loads."
    to, _, ddf = built
    mem = ddf.compute()
    tg = TabularGPU(mem, procs=[Categorify, FillMissing, Normalize], cat_names=list(CATS), cont_names=list(CONTS),
                    y_names='label', splits=ColSplitter('is_valid')(mem))
    new = mem.iloc[:300].drop(columns='label')
    dls, mdls = to.dataloaders(bs=64), tg.dataloaders(bs=64)
    a, b = dls.test_dl(new), mdls.test_dl(new)
    assert len(a) == len(b) == 5 and all(torch.equal(u, v) for x, y in zip(a, b) for u, v in zip(x, y))
    learn = tabular_learner(dls, layers=[8])
    learn.fit(1)
    row, cls, probs = learn.predict(mem.iloc[0])
    assert cls.item() in (0, 1) and probs.shape == (2,)
    # the same model through streamed loaders: predictions in the same (chunk) order, batches shown decoded
    sdls = to.dataloaders(bs=64, stream=True, piece_rows=200)
    assert type(sdls.valid).__name__ == 'StreamDataLoader'
    assert torch.equal(learn.get_preds(dl=sdls.valid)[0], learn.get_preds(dl=dls.valid)[0])
    sdls.show_batch(max_n=3)
    # a Dask test frame is processed into chunks of its own, and gives the same batches as the pandas one
    xs, ys = list(dls.test_dl(dd.from_pandas(new, npartitions=2))), list(a)
    assert len(xs) == len(ys) and all(torch.equal(u, v) for x, y in zip(xs, ys) for u, v in zip(x, y))
    learn.export(tmp_path/'m.pkl')
    assert b'dask' not in (tmp_path/'m.pkl').read_bytes()   # nothing of Dask (or the chunks) in the exported learner
    back = load_learner(tmp_path/'m.pkl', cpu=True)
    # on the CPU, where `back` predicts: the same weights and rows on one device; its kernels may still sum in other
    # orders (the rows' strides choose them), so to float32's rounding
    learn.model.cpu()
    want = learn.get_preds(dl=learn.dls.test_dl(new, device='cpu'))[0]
    torch.testing.assert_close(back.get_preds(dl=back.dls.test_dl(new))[0], want)

def test_errors():
    df = _frame(300, seed=6)
    ddf = dd.from_pandas(df, npartitions=2)
    kw = lambda: dict(procs=[Categorify, FillMissing, Normalize], cat_names=list(CATS), cont_names=list(CONTS),
                      y_names='label')
    with pytest.raises(TypeError, match='row\npositions|draws row'): TabularGPU(ddf, splits=RandomSplitter(), **kw())
    with pytest.raises(TypeError, match='lists of row positions'): TabularGPU(ddf, splits=([0, 1], [2]), **kw())
    with pytest.raises(KeyError, match="split column 'nope'"): TabularGPU(ddf, splits='nope', **kw())
    with pytest.raises(TypeError, match="from_df splits by row positions"): BatchDataLoaders.from_df(ddf, **kw())
    with pytest.raises(KeyError, match="'zz'"): TabularGPU(ddf, splits='is_valid', **{**kw(), 'cont_names': ['zz']})
    bad = df.assign(label=df.label.where(df.index != 7))
    with pytest.raises(ValueError, match="target column 'label' contains NaN"):
        TabularGPU(dd.from_pandas(bad, npartitions=2), splits='is_valid', **kw())
    with pytest.raises(ValueError, match="FillMissing"):
        TabularGPU(ddf, splits='is_valid', **{**kw(), 'procs': [Categorify, Normalize]})
    late = df.assign(label=np.where(df.is_valid & (df.index == df.index[df.is_valid][0]), 'maybe', df.label))
    with pytest.raises(ValueError, match="labels not seen in the training rows, e.g. \\['maybe'\\]"):
        TabularGPU(dd.from_pandas(late, npartitions=2), splits='is_valid', y_block=CategoryBlock(), **kw())
    with pytest.raises(TypeError, match='no Dask implementation'):
        TabularGPU(ddf, splits='is_valid', **{**kw(), 'procs': [Categorify, lambda to: to]})
    # as in memory: `<cont>_na` names FillMissing makes are taken, others named; +-inf named before the long work
    assert 'f32_na' in TabularGPU(ddf, splits='is_valid', **{**kw(), 'cat_names': CATS + ['f32_na']}).items.columns
    with pytest.raises(KeyError, match="'i16' has no NaN in the training rows, so FillMissing makes no 'i16_na'"):
        TabularGPU(ddf, splits='is_valid', **{**kw(), 'cat_names': CATS + ['i16_na']})
    inf = df.assign(f64=df.f64.where(df.index != 5, -np.inf))
    with pytest.raises(ValueError, match=r"hold \+-inf: 'f64' in 1 row\(s\)"):
        TabularGPU(dd.from_pandas(inf, npartitions=2), splits='is_valid', **kw())
    with pytest.raises(TypeError, match="continuous column 'f64' has dtype Float64"):
        TabularGPU(dd.from_pandas(df.astype({'f64': 'Float64'}), npartitions=2), splits='is_valid', **kw())

@pytest.mark.cudf(needs=['dask_cudf'])   # skipped without it; FGT_REQUIRE_GPU=1: the run fails instead
def test_dask_cudf(built):
    "cuDF partitions (dask-cudf): fastai's state bit for bit, and the codes the pandas partitions give."
    to, tp, ddf = built
    with dask.config.set({'dataframe.convert-string': False}):
        tc = TabularGPU(ddf.to_backend('cudf'), procs=[Categorify, FillMissing, Normalize], cat_names=list(CATS),
                        cont_names=list(CONTS), y_names='label', splits='is_valid')
    _same_state(tc, tp)
    assert all(torch.equal(a.load(), b.load()) for a, b in zip(tc.chunks, to.chunks))
    dev = torch.device('cuda') if torch.cuda.is_available() else default_device()   # the cuDF stand-in's, without
    dls = tc.dataloaders(bs=512, device=dev, stream=True, piece_rows=700)
    assert sum(len(b[0]) for b in dls.train) == len(dls.train) * 512
    assert next(iter(dls.valid))[0].device.type == dev.type

@pytest.mark.parametrize('flag', ['bool', 'int'])
def test_valid_items_are_the_valid_rows(flag):
    """`to.valid.items[cols]` and `to.train.items[cols]` hold the rows the split says, for a bool and a 0/1 split
    column: a projection after the split's filter once returned the split column (Dask's optimizer dropped the filter's
    `astype(bool)`)."""
    df = _frame(1200, seed=2)
    if flag == 'int': df['is_valid'] = df['is_valid'].astype('int64')
    to, _, ddf = _both(df, npartitions=4)
    mem = ddf.compute()
    valid = mem['is_valid'].astype(bool)
    for sub, rows in ((to.valid, valid), (to.train, ~valid)):
        for cols in (['f64'], ['f64', 'i16'], ['city']):
            got = sub.items[cols].compute()
            want = to.items[cols + ['is_valid']].compute()
            assert isinstance(got, pd.DataFrame) and list(got.columns) == cols
            pd.testing.assert_frame_equal(got, want.loc[rows.to_numpy(), cols])

def test_vocab_index_shared_by_threads():
    """The threaded scheduler's workers share a column's vocabulary Index: it is whole before either reads it (pandas
    2 builds an Index's hash table on first use, and two threads doing so at once could find it half-filled)."""
    from concurrent.futures import ThreadPoolExecutor
    from fastai_gpu_tabular.dask import procs as dprocs
    df = _frame()
    df['flag'] = df['f32'].isna()   # a bool column, as FillMissing's `_na` columns reach Categorify
    to = TabularGPU(df, procs=[Categorify], cat_names=['flag'], y_names='label', splits='is_valid')
    proc, col = to.procs.categorify, df['flag']
    want = dprocs._categorify_part(proc, 'flag', col).to_numpy()
    with ThreadPoolExecutor(2) as ex:
        for _ in range(3000):   # a fresh Index each time, its first reads on both threads at once
            dprocs._INDEXES.pop(proc, None)
            for got in ex.map(lambda _: dprocs._categorify_part(proc, 'flag', col), range(2)):
                np.testing.assert_array_equal(got.to_numpy(), want)

# --- chunk_dir: a killed ETL's debris, and two ETLs at once -----------------------------------------------------------
_ETL_KILLS = """
import gc, json, sys
from pathlib import Path
import torch
torch.set_num_threads(1)   # no OpenMP team, and Dask's sync scheduler: the ETL forks
sys.path.insert(0, sys.argv[2])
from helpers.faults import install, killed_at, steps
import dask, dask.dataframe as dd
from fastai.tabular.all import CategoryBlock, FillMissing, Normalize
from fastai_gpu_tabular.all import Categorify, PackedChunks, TabularGPU
from fastai_gpu_tabular.datasets import load_adult
install()
dask.config.set(scheduler='sync')
df = load_adult().iloc[:6000].copy()
df['is_valid'] = df.index % 5 == 0
ddf = dd.from_pandas(df, npartitions=4)
root = Path(sys.argv[1])
etl = lambda d: TabularGPU(ddf, procs=[Categorify, FillMissing, Normalize], cat_names=['workclass', 'education'],
                           cont_names=['age', 'fnlwgt'], y_names='income', y_block=CategoryBlock(), splits='is_valid',
                           chunk_dir=d, progress=False)
rows = lambda d: torch.cat([PackedChunks(d/s).load() for s in ('train', 'valid')])
done = etl(root/'clean')
taken = steps(lambda: etl(root/'clean'), root/'clean')   # over a finished ETL (its object alive), as each kill below
want = rows(root/'clean')
last = lambda f: max(i for i,s in enumerate(taken) if f(s))
first = lambda f: min(i for i,s in enumerate(taken) if f(s))
made = lambda s: s.startswith(('open(w)', 'os.rename'))
points = {'scan starts': first(lambda s: '/scan-' in s),
          'scan writes its cache': last(lambda s: made(s) and '.bin' in s),
          'write starts': first(lambda s: '/train/part.' in s),
          "valid's list": first(lambda s: made(s) and '/valid/' in s and 'chunks.json' in s),
          "train's list": last(lambda s: made(s) and '/train/' in s and 'chunks.json' in s)}
c = root/'c'
to = etl(c)   # every kill below is of an ETL into a chunk_dir that holds a finished one
res = {}
for name,k in points.items():
    r = res[name] = dict(killed=killed_at(lambda: etl(c), c, k), finished=(c/'train'/'chunks.json').exists())
    try: r['rows'] = 'same' if torch.equal(rows(c), want) else 'other'
    except Exception as e: r['rows'] = f'{type(e).__name__}: {e}'
    to = etl(c)   # run again: it removes what the kill left
    gc.collect()
    r.update(again=torch.equal(rows(c), want), scans=len(list(c.glob('scan-*'))),
             left=sorted(p.name for p in c.iterdir() if not p.name.startswith('scan-')))
print(json.dumps(res))
"""

def test_a_killed_etl_is_not_taken_for_a_finished_one(tmp_path):
    """A Dask ETL into a named chunk_dir that holds a finished one, SIGKILLed in its scan or its write: killed in the
    scan, the chunks are the earlier ETL's, whole; in the write, train/ is refused as unfinished (its chunks.json goes
    first and comes last), never read as a finished one. The next ETL into the folder removes the dead one's scan cache
    and unfinished chunks, and gives the rows of a clean run, bit for bit."""
    tests = str(Path(__file__).parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(tests).parent), os.environ.get('PYTHONPATH', '')]))
    res = run_child([sys.executable, '-c', CHILD_PRELUDE + _ETL_KILLS, str(tmp_path), tests], timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    kills = json.loads(res.stdout.splitlines()[-1])
    for name,k in kills.items():
        assert k['killed'] and k['again'] and k['scans'] == 1, (name, k)   # the live object's cache only
        assert k['left'] == ['train', 'valid'], (name, k)
        if name.startswith('scan'): assert k['finished'] and k['rows'] == 'same', (name, k)
        else: assert not k['finished'] and 'holds no finished chunks' in k['rows'], (name, k)

_ETL_PAUSED = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from helpers.faults import install, pause_at
import dask, dask.dataframe as dd
from fastai.tabular.all import CategoryBlock, FillMissing, Normalize
from fastai_gpu_tabular.all import Categorify, TabularGPU
from fastai_gpu_tabular.datasets import load_adult
install()
df = load_adult().iloc[:6000].copy()
df['is_valid'] = df.index % 5 == 0
c = Path(sys.argv[1])
pause_at(c, '/train/part.')   # its first rows file: the scan and the set-up done
with dask.config.set(scheduler='sync'):
    TabularGPU(dd.from_pandas(df, npartitions=4), procs=[Categorify, FillMissing, Normalize],
               cat_names=['workclass', 'education'], cont_names=['age', 'fnlwgt'], y_names='income',
               y_block=CategoryBlock(), splits='is_valid', chunk_dir=c, progress=False)
print('done', flush=True)
"""

def test_two_etls_into_one_chunk_dir_at_once(adult, tmp_path):
    """An ETL into a chunk_dir another process's ETL is writing (stopped at its first rows file) fails at once, naming
    the folder, instead of mixing chunks; the other then finishes with the rows of a clean run."""
    from fastai_gpu_tabular.all import PackedChunks
    tests, c = str(Path(__file__).parents[1]), tmp_path/'c'
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(tests).parent), os.environ.get('PYTHONPATH', '')]))
    df = adult.iloc[:6000].copy()
    df['is_valid'] = df.index % 5 == 0
    etl = lambda d: TabularGPU(dd.from_pandas(df, npartitions=4), procs=[Categorify, FillMissing, Normalize],
                               cat_names=['workclass', 'education'], cont_names=['age', 'fnlwgt'], y_names='income',
                               y_block=CategoryBlock(), splits='is_valid', chunk_dir=d, progress=False)
    p = subprocess.Popen([sys.executable, '-c', CHILD_PRELUDE + _ETL_PAUSED, str(c), tests], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    timer = threading.Timer(600, os.killpg, (p.pid, signal.SIGKILL))   # bounded, whatever happens
    timer.start()
    try:
        assert p.stdout.readline().strip() == 'paused', p.stderr.read()[-3000:]
        with pytest.raises(RuntimeError, match=f"chunk_dir '{c}' is in use: another TabularDask's ETL"): etl(c)
        out, err = p.communicate('go\n')
    finally: timer.cancel()
    assert p.returncode == 0 and out.split() == ['done'], err[-3000:]
    clean = etl(tmp_path/'clean')
    for sub,chunks in zip(('train', 'valid'), clean.chunks):
        assert torch.equal(PackedChunks(c/sub).load(), chunks.load()), sub
