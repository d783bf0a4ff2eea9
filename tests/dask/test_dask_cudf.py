"""dask-cudf: `TabularGPU` over a Dask frame of cuDF partitions (under FGT_FAKE_CUDF, the cuDF stand-in's) against the
same rows in pandas partitions, which tests/dask/test_dask_tabular.py holds to fastai's: the learned state, the
encodings and the packed rows bit for bit. Each case is one the second cuDF source review found failing or diverging
on cuDF partitions, red before its fix."""
import numpy as np
import pandas as pd
import pytest
import torch

dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
import dask.dataframe as dd
from fastai.tabular.all import CategoryBlock, ColSplitter, FillMissing, FillStrategy, Normalize, TabularPandas
from fastai_gpu_tabular.all import Categorify, TabularGPU, TargetEncode
from fastai_gpu_tabular.datasets import load_adult

pytestmark = pytest.mark.cudf(needs=['dask_cudf'])   # skipped without it; FGT_REQUIRE_GPU=1: the run fails instead

@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set({'scheduler': 'sync', 'dataframe.convert-string': False}): yield

@pytest.fixture(scope='module')
def adult():
    df = load_adult().iloc[:6000].reset_index(drop=True)
    df['is_valid'] = df.index % 4 == 0
    return df

def _build(ddf, **kw):
    return TabularGPU(ddf, splits=kw.pop('splits', 'is_valid'), **kw)

def _same(a, b):
    "Two TabularDasks: the same vocabularies, fills, stats and packed rows, bit for bit."
    assert list(a.cat_names) == list(b.cat_names) and list(a.cont_names) == list(b.cont_names)
    for n in b.classes:
        assert list(a.classes[n]) == list(b.classes[n]), n
        assert [type(v) for v in a.classes[n]] == [type(v) for v in b.classes[n]], n
    for d in ('na_dict', 'means', 'stds'):
        if hasattr(b, d): assert getattr(a, d) == getattr(b, d), d
    assert [len(c) for c in a.chunks] == [len(c) for c in b.chunks]
    assert all(torch.equal(x.load(), y.load()) for x, y in zip(a.chunks, b.chunks))

def _pair(df, npartitions=4):
    ddf = dd.from_pandas(df, npartitions=npartitions)
    return ddf, ddf.to_backend('cudf')

KW = lambda: dict(procs=[Categorify, FillMissing, Normalize], cat_names=['workclass', 'education'],
                  cont_names=['age', 'hours-per-week'], y_names='income')

def test_target_encode(adult, tmp_path):
    "TargetEncode's passes on cuDF partitions (the targets' frame was built on a cuDF index, which pandas refuses)."
    def build(ddf, d):
        kw = KW()
        kw['procs'] = [TargetEncode(['education', 'occupation'], folds=3, seed=0), *kw['procs']]
        return _build(ddf, chunk_dir=tmp_path/d, **{**kw, 'cat_names': ['workclass', 'education', 'occupation']})
    pdf, gdf = _pair(adult)
    _same(build(gdf, 'g'), build(pdf, 'p'))

def test_categorical_target_and_split_column(adult, tmp_path):
    """A categorical target (categories not sorted) and a categorical split column: cuDF's CategoricalDtype is not
    pandas', and the scan built pandas arrays with it."""
    df = adult.assign(income=adult.income.astype(pd.CategoricalDtype(['>50K', '<=50K'])),
                      is_valid=adult.is_valid.map({True: 'yes', False: 'no'}).astype('category'))
    pdf, gdf = _pair(df)
    kw = lambda: {**KW(), 'splits': ColSplitter('is_valid', on='yes'), 'y_block': CategoryBlock()}
    a, b = _build(gdf, chunk_dir=tmp_path/'g', **kw()), _build(pdf, chunk_dir=tmp_path/'p', **kw())
    _same(a, b)
    assert list(a.vocab) == list(b.vocab)

def test_known_categories_are_the_vocabulary(adult, tmp_path):
    """A categorical cat column whose categories Dask knows (in their own order, one unused): fastai's vocabulary is
    the categories as they are, on cuDF partitions too (whose CategoricalDtype was never taken as known)."""
    cats = ['Private', 'Self-emp-not-inc', 'never-used', *sorted(set(adult.workclass.dropna()) - {'Private',
                                                                                                 'Self-emp-not-inc'})]
    df = adult.assign(workclass=adult.workclass.astype(pd.CategoricalDtype(cats)))
    pdf, gdf = _pair(df)
    a, b = _build(gdf, chunk_dir=tmp_path/'g', **KW()), _build(pdf, chunk_dir=tmp_path/'p', **KW())
    ref = TabularPandas(df, splits=ColSplitter('is_valid')(df), **KW())
    assert list(a.classes['workclass']) == list(ref.classes['workclass']) == ['#na#', *cats]
    _same(a, b)

def test_int_columns_with_nulls(adult, tmp_path):
    """Partitions read by `cudf.read_csv` from files whose int columns have gaps (dask-cudf's `read_csv` makes such
    partitions): int columns with nulls, which the scan brought to the host as float64 and NaN and cast back to the
    meta's int (NaN as INT64_MIN). The same as pandas reading the same files."""
    import cudf
    df = adult.copy()
    df['age'] = df['age'].astype('float64').mask(df.index % 9 == 0)
    df['capital-gain'] = df['capital-gain'].astype('float64').mask(df.index % 5 == 0)
    files = []
    for i in range(4):
        f = tmp_path/f'part{i}.csv'
        df.iloc[i * 1500:(i + 1) * 1500].to_csv(f, index=False, float_format='%.0f')
        files.append(str(f))
    assert cudf.read_csv(files[0])['age'].dtype.kind == 'i'   # an int column with nulls
    kw = lambda: {**KW(), 'cont_names': ['age', 'capital-gain', 'hours-per-week'], 'splits': 'is_valid'}
    a = TabularGPU(dd.from_map(cudf.read_csv, files), chunk_dir=tmp_path/'g', **kw())
    b = TabularGPU(dd.from_map(pd.read_csv, files), chunk_dir=tmp_path/'p', **kw())
    _same(a, b)
    assert a.na_dict['age'] == b.na_dict['age'] == np.float32(adult.age[~adult.is_valid].median())

@pytest.mark.parametrize('kind', ['float_nan', 'bool_none'])
def test_split_column_with_missing_values(kind, adult, tmp_path):
    """A split column with missing values, where fastai's `ColSplitter` casts the values to bool: a float's NaN to True
    (validation), an object column's None to False (training). On cuDF both are null, which the write's cast kept (and
    read as validation) where the scan had read the host's values."""
    if kind == 'float_nan': split = pd.Series(np.where(adult.index % 4 == 0, 1.0, 0.0)).mask(adult.index % 7 == 0)
    else:
        split = pd.Series(list(adult.index % 4 == 0), dtype=object)
        split[adult.index % 7 == 0] = None   # (`mask(c, None)` would give NaN)
    df = adult.assign(is_valid=split)
    pdf, gdf = _pair(df)
    a, b = _build(gdf, chunk_dir=tmp_path/'g', **KW()), _build(pdf, chunk_dir=tmp_path/'p', **KW())
    ref = TabularPandas(df, splits=ColSplitter('is_valid')(df), **KW())
    assert [len(c) for c in a.chunks] == [len(ref.train), len(ref.valid)]
    _same(a, b)

def test_fill_mode_ties_counted_on_the_partitions(adult, tmp_path, monkeypatch):
    """FillMissing(mode) counted on cuDF partitions (the training conts not held in memory): a tie between the two
    most frequent values goes as pandas breaks it, whatever order cuDF's counts come in (26.06: hash order)."""
    from fastai_gpu_tabular.dask import tabular as dask_tabular
    monkeypatch.setattr(dask_tabular, '_TRAIN_CONTS_BYTES', 0)
    df = adult.copy()
    train = df.index[~df.is_valid]
    vc = df.loc[train, 'hours-per-week'].value_counts()
    extra = vc.iloc[0] - vc.iloc[1]
    df['hours-per-week'] = df['hours-per-week'].astype('float64')
    df.loc[train[df.loc[train, 'hours-per-week'] == vc.index[0]][:extra], 'hours-per-week'] = np.nan
    vc = df.loc[train, 'hours-per-week'].value_counts()
    assert vc.iloc[0] == vc.iloc[1]   # the tie
    pdf, gdf = _pair(df)
    kw = lambda: {**KW(), 'procs': [Categorify, FillMissing(fill_strategy=FillStrategy.mode), Normalize]}
    a, b = _build(gdf, chunk_dir=tmp_path/'g', **kw()), _build(pdf, chunk_dir=tmp_path/'p', **kw())
    ref = TabularPandas(df, splits=ColSplitter('is_valid')(df), **kw())
    assert a.na_dict == b.na_dict == ref.na_dict
    _same(a, b)
