"""To the bit and to the frame: Normalize's values and dtypes are fastai's exactly, and `inplace=True` holds no
DataFrame that fastai's does not. Each against fastai's own TabularPandas, on real and synthetic columns."""
import gc
import numpy as np
import pandas as pd
import pytest
import torch
from fastai.tabular.all import Categorify, ColSplitter, FillMissing, Normalize, RandomSplitter, TabularPandas, range_of
from fastai_gpu_tabular.all import TabularGPU
from fastai_gpu_tabular.datasets import load_adult, load_flights
from fastai_gpu_tabular.rows.pack import unpack_rows

PROCS = [Categorify, FillMissing, Normalize]

def _both(df, **kw):
    "fastai's TabularPandas and our TabularGPU on copies of `df`, each with its own procs and name lists."
    args = lambda: {k: (list(v) if isinstance(v, list) else v) for k,v in kw.items()}
    return TabularPandas(df.copy(), procs=list(PROCS), **args()), TabularGPU(df.copy(), procs=list(PROCS), **args())

def _fastai_batch_conts(ref) -> torch.Tensor:
    """fastai's ReadTabBatch's `tensor(to.conts).float()`: the processed frame's values cast to float32 (through
    float64, exact for every numeric dtype: a nullable column would make `to_numpy` give objects)."""
    return torch.from_numpy(np.ascontiguousarray(ref.conts.to_numpy(np.float64))).float()

def assert_same_conts(ref, ours):
    "The processed conts: names, dtypes and values to the bit; the packed float32 conts are fastai's batch conts."
    assert list(ours.cont_names) == list(ref.cont_names)
    for n in ref.cont_names:
        a, b = ref.items[n], ours.items[n]
        assert b.dtype == a.dtype, (n, b.dtype, a.dtype)
        assert np.array_equal(b.to_numpy(), a.to_numpy()), n
    assert torch.equal(ours.packed()[1], _fastai_batch_conts(ref))

# --- 1. Normalize, to the bit --------------------------------------------------------------------------------------
FLIGHTS_CONTS = dict(floats=['dep_time', 'dep_delay', 'arr_time', 'arr_delay', 'air_time'],   # float64 with NaN
                     ints=['sched_dep_time', 'distance', 'minute', 'day'],
                     mixed=['dep_time', 'dep_delay', 'arr_delay', 'air_time', 'distance', 'minute'])

@pytest.mark.parametrize('conts', list(FLIGHTS_CONTS))
@pytest.mark.parametrize('reduce_memory', [True, False])
def test_normalize_bits_flights(conts, reduce_memory):
    """nycflights13: with reduce_memory the float64 columns become float32 (normalized in float32 when alone, in float64
    next to integer columns, as fastai's frame-wide `(conts - means) / stds` does); then decoded as fastai decodes."""
    df = load_flights(nrows=40_000)
    df['late'] = df.arr_delay > 0
    ref, ours = _both(df, cat_names=['carrier', 'origin'], cont_names=FLIGHTS_CONTS[conts], y_names='late',
                      reduce_memory=reduce_memory, splits=RandomSplitter(valid_pct=0.2, seed=0)(range_of(df)))
    assert_same_conts(ref, ours)
    for v_ref, v_ours in ((ref.means, ours.means), (ref.stds, ours.stds)):
        assert {k: (type(v), v) for k,v in v_ours.items()} == {k: (type(v), v) for k,v in v_ref.items()}
    ref.decode(); ours.decode()
    for n in ref.cont_names:
        assert ours.items[n].dtype == ref.items[n].dtype and np.array_equal(ours.items[n], ref.items[n]), n

def test_normalize_bits_adult():
    "UCI Adult's integer columns (int8/int16/int32 after reduce_memory), normalized in float64 as fastai does."
    df = load_adult().iloc[:20_000]
    ref, ours = _both(df, cat_names=['workclass', 'education', 'race'], y_names='income',
                      cont_names=['age', 'fnlwgt', 'educational-num', 'capital-gain', 'hours-per-week'],
                      splits=RandomSplitter(valid_pct=0.2, seed=1)(range_of(df)))
    assert {ours.items[n].dtype for n in ours.cont_names} == {np.dtype('float64')}
    assert_same_conts(ref, ours)

def _synthetic(n=5000, seed=0):
    "float32, float64 and integer columns with NaN, at offsets where float32 and float64 arithmetic round differently."
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({'f32': (1e3 + 37 * rng.standard_normal(n)).astype(np.float32),
                       'f32b': (rng.standard_normal(n) * 1e-3 - 5).astype(np.float32),
                       'f64': 1e5 + rng.standard_normal(n), 'i64': rng.integers(-10**6, 10**6, n),
                       'i8': rng.integers(0, 100, n).astype(np.int8), 'flag': rng.random(n) < 0.3,
                       'F32': pd.array(rng.standard_normal(n).astype(np.float32), dtype='Float32'),
                       'I64': pd.array(rng.integers(0, 5000, n), dtype='Int64'),
                       'c': rng.choice(list('abcd'), n), 'y': rng.standard_normal(n)})
    for c in ('f32', 'f32b', 'f64'): df.loc[rng.random(n) < 0.1, c] = np.nan
    df.loc[rng.random(n) < 0.1, 'F32'] = pd.NA
    return df

@pytest.mark.parametrize('conts', [['f32'], ['f32', 'f32b'], ['f64'], ['i64'], ['f32', 'f64'], ['f32', 'i64'],
                                   ['f32', 'i8', 'f32b'], ['f32', 'f64', 'i64', 'i8'], ['flag', 'f32'], ['F32'],
                                   ['F32', 'f32'], ['F32', 'I64', 'f32']])
@pytest.mark.parametrize('reduce_memory', [True, False])
def test_normalize_bits_synthetic(conts, reduce_memory):
    "Each dtype alone and mixed (numpy's and pandas' nullable ones): fastai's dtype and values, to the bit."
    df = _synthetic()
    ref, ours = _both(df, cat_names=['c'], cont_names=conts, y_names='y', reduce_memory=reduce_memory,
                      splits=RandomSplitter(valid_pct=0.25, seed=2)(range_of(df)))
    assert_same_conts(ref, ours)
    new = df.sample(frac=0.3, random_state=3)   # test rows: the same rule, through `new` and `process`
    # our `new` casts the floats to the training frame's dtypes (fastai's keeps the float64 its shrink made float32 for
    # training: a deliberate difference, see README): fastai given the frame cast so is the reference
    r, o = ref.new(new.astype(ours.float_dtypes)), ours.new(new.copy())
    r.process(); o.process()
    assert_same_conts(r, o)

def test_float32_next_to_float64_means_differs():
    "The rule matters: a float32 column normalized in float32 (the scalar rule) misses fastai's values on these rows."
    df = _synthetic()
    ref, _ = _both(df, cat_names=['c'], cont_names=['f32', 'i64'], y_names='y', reduce_memory=False)
    col = df['f32'].fillna(ref.na_dict['f32']).to_numpy()
    in32 = (col - np.float32(ref.means['f32'])) / np.float32(ref.stds['f32'])
    assert in32.dtype == np.float32 and ref.items['f32'].dtype == np.float64
    assert not np.array_equal(in32, ref.items['f32'].to_numpy().astype(np.float32))

def test_normalize_bits_dask():
    "The Dask path normalizes each partition by the same rule: its packed conts are fastai's batch conts."
    dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
    import dask.dataframe as dd
    df = _synthetic(4000, seed=4).drop(columns=['F32', 'I64'])
    df['is_valid'] = np.random.default_rng(5).random(len(df)) < 0.25
    kw = lambda: dict(procs=list(PROCS), cat_names=['c'], cont_names=['f32', 'f64', 'i8', 'f32b'], y_names='y')
    with dask.config.set(scheduler='sync'):
        to = TabularGPU(dd.from_pandas(df, npartitions=5), splits='is_valid', **kw())
        ref = TabularPandas(df.copy(), splits=ColSplitter('is_valid')(df), **kw())
        for n in ref.cont_names: assert to.items[n].dtype == ref.items[n].dtype, n
        conts = torch.cat([unpack_rows(*s.packed_rows())[1] for s in (to.train, to.valid)])
    assert torch.equal(conts, _fastai_batch_conts(ref))

# --- 2. inplace=True: the live DataFrames, counted as fastai's notebook counts them ---------------------------------
def _live_frames() -> int:
    "fastai's `_count_objs(pd.DataFrame)` (40_tabular.core), after a collection: only the frames something still holds."
    gc.collect()
    return sum(issubclass(type(o), pd.DataFrame) for o in gc.get_objects())   # type(): some objects' `__class__` warns

def _frames_added(cls, df, df_b, **kw) -> tuple:
    "Live DataFrames that construction, `new(df_b, inplace=True)` and its `process()` add (`inplace=True` throughout)."
    n0 = _live_frames()
    to = cls(df, inplace=True, **kw)
    n1 = _live_frames()
    new = to.new(df_b, inplace=True)
    n2 = _live_frames()
    new.process()
    n3 = _live_frames()
    assert new.items is df_b   # the caller's frame itself, processed in place
    return n1 - n0, n2 - n1, n3 - n2

def _notebook_frames():
    "The frames of fastai's notebook cell."
    return (pd.DataFrame({'a': [0, 1, 2, 0, 2], 'b': [0, 0, 0, 0, 1]}),
            pd.DataFrame({'a': [1, 2, 0, 0, 2], 'b': [1, 0, 3, 0, 1]}))

def _adult_frames():
    df = load_adult().iloc[:3000]
    return df.iloc[:2000].copy(), df.iloc[2000:].reset_index(drop=True)

@pytest.mark.parametrize('reduce_memory', [True, False])
@pytest.mark.parametrize('case', ['notebook', 'adult'])
def test_inplace_adds_no_frame(case, reduce_memory):
    """fastai's cell: `new(df_b, inplace=True)` adds no live DataFrame, nor does `process()`; construction adds none
    either (fastai's adds its `df_shrink` copy when reduce_memory)."""
    if case == 'notebook': frames, kw = _notebook_frames, dict(procs=[Categorify], cat_names='a')
    else: frames, kw = _adult_frames, dict(procs=list(PROCS), cat_names=['workclass', 'education', 'race'],
                                           cont_names=['age', 'fnlwgt', 'hours-per-week'], y_names='income')
    copy = lambda: {k: (list(v) if isinstance(v, list) else v) for k,v in kw.items()}   # fastai appends to lists
    added = {cls: _frames_added(cls, *frames(), reduce_memory=reduce_memory, **copy())
             for cls in (TabularPandas, TabularGPU)}
    assert added[TabularPandas] == (int(reduce_memory), 0, 0)   # the count sees copies: fastai's df_shrink is one
    assert added[TabularGPU] == (0, 0, 0)
