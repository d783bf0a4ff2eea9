"""Polars frames and Parquet files in: `TabularGPU(pl_df)` and `TabularGPU.from_parquet(path)` give the processing of
the pandas frame of the same data (vocabularies, fill values, stats, processed frame, packed rows), checked against
fastai's own `TabularPandas` and against our pandas path, on pandas and (marked `cudf`) on cuDF."""
import sys
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from fastai.tabular.all import Categorify, FillMissing, Normalize, RandomSplitter, TabularPandas, range_of
from fastai.tabular.learner import TabularLearner
from helpers.parity import assert_same_processing
from fastai_gpu_tabular.all import BatchDataLoaders, TabularGPU, load_adult, tabular_learner
from fastai_gpu_tabular.backend import read_parquet, sorted_dictionary, to_pandas

pl = pytest.importorskip('polars', reason="polars (the `polars` extra, in the test extra) makes the frames here")

CATS, CONTS, Y = ['workclass', 'education', 'native-country', 'gender'], ['age', 'fnlwgt', 'hours-per-week'], 'income'
PROCS = [Categorify, FillMissing, Normalize]

@pytest.fixture(scope='module')
def adult():
    "Adult with NaN in cat and cont columns, and a country that only validation rows hold (fastai's vocab has it)."
    df = load_adult()
    df.loc[df.index[::7], 'age'] = np.nan
    df.loc[df.index[-3:], 'native-country'] = 'Atlantis'   # the split below puts the last rows in validation
    return df

def _splits(n): return list(range(n - 9000)), list(range(n - 9000, n))

def _kw(): return dict(procs=list(PROCS), cat_names=list(CATS), cont_names=list(CONTS), y_names=Y)

def assert_same_tabular(a, b, exact=True):
    """Two TabularGPUs of the same data: the same learned state, processed frame and packed rows, bit for bit
    (`exact=False`, pandas against cuDF: codes and targets so, the stats and normalized floats within cuDF's rounding,
    as helpers/parity.py allows)."""
    assert {k: list(v) for k,v in a.classes.items()} == {k: list(v) for k,v in b.classes.items()}
    vocab = lambda o: list(o.vocab) if hasattr(o.procs, 'vocab') else None
    assert a.na_dict == b.na_dict and vocab(a) == vocab(b)
    for x,y in ((a.means, b.means), (a.stds, b.stds)):
        assert x == y if exact else list(x) == list(y) and np.allclose(list(x.values()), list(y.values()), rtol=1e-6)
    pd.testing.assert_frame_equal(to_pandas(a.items), to_pandas(b.items), check_exact=exact, rtol=1e-5, atol=1e-5)
    (cats, conts, *ys), (cats2, conts2, *ys2) = a.packed('cpu'), b.packed('cpu')
    assert torch.equal(cats, cats2) and all(torch.equal(u, v) for u,v in zip(ys, ys2))
    if exact: assert torch.equal(a.packed_rows('cpu')[0], b.packed_rows('cpu')[0])
    else: torch.testing.assert_close(conts, conts2, rtol=1e-5, atol=1e-5)

def test_polars_frames_process_as_their_pandas_frame(adult):
    "DataFrame and LazyFrame: fastai's processing of the pandas frame, and our pandas path's rows bit for bit."
    splits = _splits(len(adult))
    pdf = pl.from_pandas(adult)
    ref = TabularPandas(pdf.to_pandas(), splits=splits, **_kw())
    ours = TabularGPU(adult, splits=splits, backend='pandas', **_kw())
    for frame in (pdf, pdf.lazy()):
        to = TabularGPU(frame, splits=splits, backend='pandas', **_kw())
        assert_same_processing(ref, to)
        assert_same_tabular(ours, to)
    assert 'Atlantis' in ours.classes['native-country']   # a category of validation rows only, as fastai's
    assert pdf.to_pandas().equals(adult.reset_index(drop=True))   # the caller's frame is untouched

def _typed_frame(n=600):
    "A Polars frame of the types pandas holds otherwise: Categorical, Enum, nulls in strings, ints and floats."
    rng = np.random.default_rng(0)
    s = rng.choice(['b', 'a', 'c', None], n).tolist()
    pdf = pl.DataFrame({'s': s, 'cat': pl.Series(s, dtype=pl.Categorical),
                        'enum': pl.Series(s, dtype=pl.Enum(['c', 'b', 'a', 'z'])),
                        'i': pl.Series([None if k % 5 == 0 else k for k in range(n)], dtype=pl.Int64),
                        'f': [float('nan') if k % 3 == 0 else None if k % 7 == 0 else k / 3 for k in range(n)],
                        'y': rng.integers(0, 2, n)})
    return pdf, dict(procs=list(PROCS), cat_names=['s', 'cat', 'enum'], cont_names=['i', 'f'], y_names='y',
              splits=(list(range(500)), list(range(500, n))))

def test_polars_types_become_pandas_types():
    "Categorical and Enum (their order, as fastai keeps a categorical's), nulls in strings, ints and floats."
    pdf, kw = _typed_frame()
    df = pdf.to_pandas()
    assert isinstance(df['enum'].dtype, pd.CategoricalDtype) and list(df['enum'].cat.categories) == ['c', 'b', 'a', 'z']
    to = TabularGPU(pdf, backend='pandas', **kw)
    assert_same_processing(TabularPandas(df, **kw), to)
    assert list(to.classes['enum']) == ['#na#', 'c', 'b', 'a', 'z']   # the Enum's order, unused 'z' too
    assert_same_tabular(TabularGPU(df, backend='pandas', **kw), to)

def test_polars_test_dl_new_and_from_df(adult):
    "A Polars frame wherever a frame is taken: `test_dl`, `new`, `from_df`; the rows those of its pandas frame."
    pdf = pl.from_pandas(adult)
    to = TabularGPU(adult, splits=_splits(len(adult)), **_kw())
    dls = to.dataloaders(bs=256)
    a, b = dls.test_dl(adult.head(300).reset_index(drop=True)), dls.test_dl(pdf.head(300))
    assert torch.equal(a.dataset.packed_rows()[0], b.dataset.packed_rows()[0])
    x, y = to.new(adult.tail(50).reset_index(drop=True)), to.new(pdf.tail(50))
    x.process(); y.process()
    pd.testing.assert_frame_equal(x.items, y.items)
    kw = dict(cat_names=CATS, cont_names=CONTS, y_names=Y, procs=PROCS, valid_idx=list(range(0, len(adult), 5)),
              bs=256)
    a, b = BatchDataLoaders.from_df(adult, **kw), BatchDataLoaders.from_df(pdf, **kw)
    assert torch.equal(a.train_ds.packed_rows()[0], b.train_ds.packed_rows()[0])
    with pytest.raises(TypeError, match=r"got polars.Series: convert it with \.to_frame\(\)"):
        TabularGPU(pdf['age'], cont_names=['age'])

def test_polars_row_predicts_as_its_pandas_row(adult):
    """`learn.predict(pl_df[i])`, a one-row Polars frame, gives what `learn.predict(df.iloc[i])` gives (fastai's
    `predict` calls `row.to_frame()`, which a Polars frame lacks); more rows are an error that says what to use."""
    adult = adult.head(2000).reset_index(drop=True)
    dls = TabularGPU(adult, splits=(list(range(1500)), list(range(1500, 2000))), **_kw()).dataloaders(bs=256)
    learn = tabular_learner(dls, layers=[8])
    pdf = pl.from_pandas(adult)
    for i in (0, 7):
        (rp, cp, pp), (rq, cq, pq_) = learn.predict(adult.iloc[i]), learn.predict(pdf[i])
        assert torch.equal(cp, cq) and torch.equal(pp, pq_)
        pd.testing.assert_frame_equal(rp.items, rq.items)
    assert isinstance(learn, TabularLearner)   # fastai's, with predict widened
    with pytest.raises(ValueError, match=r"one row, not a Polars frame of 2 rows: use `learn\.dls\.test_dl"):
        learn.predict(pdf[:2])

@pytest.fixture
def workdir(tmp_path, monkeypatch):
    "The recipe writes its file where it runs: a temporary folder."
    monkeypatch.chdir(tmp_path)
    return tmp_path

def test_polars_missing_names_the_extra(adult, monkeypatch):
    "Where Polars cannot be imported, the error names the `polars` extra and how to install it."
    pdf = pl.from_pandas(adult.head())
    monkeypatch.setitem(sys.modules, 'polars', None)
    with pytest.raises(ModuleNotFoundError, match=r"a Polars frame needs polars.*`polars` extra: pip install "
                                                  r"\"fastai_gpu_tabular\[polars\] @ git\+"):
        TabularGPU(pdf, **_kw())

# --- Parquet ------------------------------------------------------------------------------------------------------
def _parts(df, path, n=3):
    "`df` as `n` Parquet files, each with its own dictionaries (the later ones hold values the first lacks)."
    path.mkdir()
    for i,part in enumerate(np.array_split(np.arange(len(df)), n)):
        df.iloc[part].to_parquet(path/f'part.{i}.parquet', row_group_size=5000)
    return path

def test_from_parquet_as_read_parquet(adult, tmp_path):
    """One file, a folder and a list of files whose dictionaries differ: what `TabularGPU(pd.read_parquet(path))`
    gives, and fastai's `TabularPandas` of that frame."""
    adult = adult.reset_index(drop=True)
    adult.to_parquet(tmp_path/'adult.parquet', row_group_size=4000)
    folder = _parts(adult, tmp_path/'parts')
    splits = _splits(len(adult))
    for path in (tmp_path/'adult.parquet', folder, sorted(folder.glob('*.parquet'))):
        df = pd.read_parquet(path)
        ref = TabularPandas(df.copy(), splits=splits, **_kw())
        to = TabularGPU.from_parquet(path, splits=splits, backend='pandas', **_kw())
        assert_same_processing(ref, to)
        assert_same_tabular(TabularGPU(df, splits=splits, backend='pandas', **_kw()), to)

def test_read_parquet_sorts_the_dictionary(tmp_path):
    """`read_parquet`'s categoricals are `astype('category')` of the strings pandas reads: NaN and None missing, values
    of each file's own dictionary unified, sorted, unused ones dropped; a column stored as a categorical is read as
    pandas reads it (its own order); the other columns as pandas reads them."""
    a = pd.DataFrame({'s': ['zeta', None, 'beta', 'alpha', 'beta'], 'x': [1.0, np.nan, 3.0, 4.0, 5.0],
                      'c': pd.Categorical(['q', 'p', 'q', None, 'p'], categories=['q', 'p', 'unused']),
                      'n': pd.array([1, None, 3, 4, 5], dtype='Int64')})
    b = pd.DataFrame({'s': ['émile', 'beta', np.nan, 'Zulu', 'a-long-string-of-more-than-8-bytes'],
                      'x': [6.0, 7.0, 8.0, np.nan, 9.0],
                      'c': pd.Categorical(['p'] * 5, categories=['q', 'p', 'unused']),
                      'n': pd.array([6, 7, None, 9, 10], dtype='Int64')})
    (tmp_path/'d').mkdir()
    a.to_parquet(tmp_path/'d'/'0.parquet'); b.to_parquet(tmp_path/'d'/'1.parquet')
    want = pd.read_parquet(tmp_path/'d')
    got = read_parquet(tmp_path/'d', ['s', 'x', 'c', 'n'], 'pandas', dictionary=['s', 'c'])
    assert pq.read_schema(tmp_path/'d'/'0.parquet').field('s').type in (pa.string(), pa.large_string())
    pd.testing.assert_series_equal(got['s'], want['s'].astype('category'))
    assert list(got['s'].cat.categories) == sorted(set(want['s'].dropna()))
    pd.testing.assert_frame_equal(got.drop(columns='s'), want.drop(columns='s'))   # 'c': pandas' own categorical

def test_sorted_dictionary_of_chunks_sharing_dictionaries():
    """Chunks that share a dictionary (a row group read in batches) beside chunks with another (the next row group),
    missing values in the indices and a dictionary value no row uses: `astype('category')` of the decoded strings."""
    d1, d2 = pa.array(['b', 'a', 'z-unused']), pa.array(['c', 'a'])
    chunks = [pa.DictionaryArray.from_arrays(pa.array(i, pa.int32()), d) for i,d in
              [([0, 1, None], d1), ([1, 1], d1), ([0, None, 1], d2), ([0], d1), ([], d2)]]
    col = pa.chunked_array(chunks)
    want = pd.Series(col.cast(pa.string()).to_pandas()).astype('category')
    got = pd.Series(sorted_dictionary(col))
    pd.testing.assert_series_equal(got, want)
    assert list(got.cat.categories) == ['a', 'b', 'c']

def test_from_parquet_reads_only_named_columns_and_checks_first(adult, tmp_path, monkeypatch):
    "Only the named columns (and a split column) are read; a missing one is a KeyError before any row is read."
    df = adult.reset_index(drop=True).assign(is_valid=lambda d: np.arange(len(d)) % 4 == 0)
    df.to_parquet(tmp_path/'a.parquet')
    import fastai_gpu_tabular.core as core
    read = []
    monkeypatch.setattr(core, 'read_parquet', lambda path, cols, *a, **k: read.append(cols) or
                        read_parquet(path, cols, *a, **k))
    to = TabularGPU.from_parquet(tmp_path/'a.parquet', splits='is_valid', backend='pandas', **_kw())
    assert sorted(read[0]) == sorted(CATS + CONTS + [Y, 'is_valid'])
    ref = TabularGPU(df, splits='is_valid', backend='pandas', **_kw())
    assert_same_tabular(ref, to)
    read.clear()
    with pytest.raises(KeyError, match=r"column\(s\) \['agee'\] are not in the frame"):
        TabularGPU.from_parquet(tmp_path/'a.parquet', cat_names=CATS, cont_names=['agee'], y_names=Y, procs=PROCS)
    with pytest.raises(KeyError, match=r"the split column 'valid' is not in the frame"):
        TabularGPU.from_parquet(tmp_path/'a.parquet', splits='valid', **_kw())
    with pytest.raises(FileNotFoundError, match='no Parquet file or folder'):
        TabularGPU.from_parquet(tmp_path/'nope.parquet', **_kw())
    assert read == []

def test_batch_dataloaders_from_parquet(adult, tmp_path):
    "`BatchDataLoaders.from_parquet` is `from_df` of the frame pandas reads: the same split, the same rows."
    adult = adult.reset_index(drop=True)[CATS + CONTS + [Y]]
    adult.to_parquet(tmp_path/'a.parquet')
    kw = dict(cat_names=CATS, y_names=Y, procs=PROCS, bs=256)
    valid = list(range(0, len(adult), 6))
    a = BatchDataLoaders.from_df(pd.read_parquet(tmp_path/'a.parquet'), valid_idx=valid, backend='pandas', **kw)
    b = BatchDataLoaders.from_parquet(tmp_path/'a.parquet', valid_idx=valid, backend='pandas', **kw)
    assert list(b.train_ds.cont_names) == list(a.train_ds.cont_names)   # every other column, as from_df
    assert torch.equal(a.train_ds.packed_rows()[0], b.train_ds.packed_rows()[0])
    assert torch.equal(a.valid_ds.packed_rows()[0], b.valid_ds.packed_rows()[0])

def test_from_parquet_on_dask(adult, tmp_path):
    "`dask=True` reads with `dd.read_parquet`: a TabularDask, learning what the in-memory read learns."
    pytest.importorskip('dask.dataframe', reason="dask (the test extra) reads the parts")
    df = adult.reset_index(drop=True).assign(is_valid=lambda d: np.arange(len(d)) % 5 == 0)
    folder = _parts(df, tmp_path/'parts')
    mem = TabularGPU.from_parquet(folder, splits='is_valid', backend='pandas', **_kw())
    dk = TabularGPU.from_parquet(folder, splits='is_valid', backend='pandas', dask=True, chunk_dir=tmp_path/'chunks',
                                 progress=False, **_kw())
    assert type(dk).__name__ == 'TabularDask'
    assert {k: list(v) for k,v in dk.classes.items()} == {k: list(v) for k,v in mem.classes.items()}
    assert dk.na_dict == mem.na_dict and dk.means == mem.means and dk.stds == mem.stds
    test = df.head(300)
    a, b = mem.new(test.drop(columns='is_valid')), dk.new(pl.from_pandas(test.drop(columns='is_valid')))
    a.process(); b.process()   # a Polars frame to a TabularDask's new: processed as the in-memory one's pandas frame
    pd.testing.assert_frame_equal(a.items, b.items)

def test_parquet_polars_recipe(workdir):
    "The chapter's block: from_parquet's Tabular is that of the frame pandas reads; a Polars test frame's rows too."
    from helpers.recipes import recipe
    ns = {}
    exec('from fastai.tabular.all import *\nfrom fastai_gpu_tabular.all import *\n', ns)
    exec(compile(recipe('parquet-polars'), '<recipe parquet-polars>', 'exec'), ns)
    to, dl = ns['to'], ns['dl']
    df = pd.read_parquet('adult.parquet')
    ref = TabularGPU(df, procs=[Categorify, FillMissing, Normalize], cat_names=['workclass', 'education', 'gender'],
                     cont_names=['age', 'fnlwgt'], y_names='income', splits=RandomSplitter(seed=0)(range_of(df)),
                     backend='pandas')
    ref.dataloaders(bs=512)   # its frame released to the packed rows, as the block's
    assert_same_tabular(ref, to, exact=type(to.items).__module__.startswith('pandas'))
    assert torch.equal(dl.dataset.packed_rows('cpu')[0], _processed(to, df.head(1000)))
    assert list(ns['lazy'].classes['education']) == list(ref.classes['education'])

def _processed(to, df):
    "`df` processed with `to`'s procs, as packed rows on the host."
    t = to.new(df)
    t.process()
    return t.packed_rows('cpu')[0]

@pytest.mark.cudf
def test_polars_and_parquet_on_cudf(adult, tmp_path):
    "On cuDF, through Arrow (`from_arrow`, `cudf.read_parquet`): what the pandas path gives, rows bit for bit."
    adult = adult.reset_index(drop=True)
    splits = _splits(len(adult))
    ours = TabularGPU(adult, splits=splits, backend='pandas', **_kw())
    pdf = pl.from_pandas(adult)
    for frame in (pdf, pdf.lazy()):
        to = TabularGPU(frame, splits=splits, backend='cudf', **_kw())
        assert type(to.items).__module__.split('.')[0] == 'cudf'
        assert_same_tabular(ours, to, exact=False)
    _parts(adult, tmp_path/'parts')
    to = TabularGPU.from_parquet(tmp_path/'parts', splits=splits, backend='cudf', **_kw())
    assert_same_tabular(ours, to, exact=False)
    typed, kw = _typed_frame()
    assert_same_tabular(TabularGPU(typed, backend='pandas', **kw), TabularGPU(typed, backend='cudf', **kw), exact=False)
    dls = to.dataloaders(bs=256)
    a = dls.test_dl(adult.head(200))
    b = dls.test_dl(pdf.head(200))   # a Polars frame goes to the Tabular's cuDF
    assert type(b.dataset.items).__module__.split('.')[0] == 'cudf'
    assert torch.equal(a.dataset.packed_rows('cpu')[0], b.dataset.packed_rows('cpu')[0])
