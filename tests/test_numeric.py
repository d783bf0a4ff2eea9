"""`Bucketize`, `LogOp`, `Clip` and `NormalizeMinMax` against NumPy and pandas on the flights and MovieLens:
`np.digitize` for given boundaries, `pd.qcut` for the training rows' quantiles (and `pd.cut` on its edges, open at both
ends, for later rows), `np.log1p`, `Series.clip`, NumPy's `nanmin`/`nanmax`; missing values kept missing, errors
naming the column, the caller's frame left alone."""
import numpy as np
import pandas as pd
import pytest
from fastai.tabular.all import Categorify, FillMissing
from fastai_gpu_tabular.all import Bucketize, Clip, LogOp, NormalizeMinMax, TabularGPU
from fastai_gpu_tabular.backend import to_pandas
from fastai_gpu_tabular.datasets import load_flights

N_TRAIN = 30000

@pytest.fixture(scope='module')
def flights():
    "40,000 flights; the first 30,000 train. `dep_delay` has NaN (cancelled flights), negatives and many ties."
    return load_flights(nrows=40000).fillna({'air_time': 0})

SPLITS = (list(range(N_TRAIN)), list(range(N_TRAIN, 40000)))
KW = dict(cat_names=['carrier'], cont_names=['distance', 'dep_delay', 'air_time'], y_names='hour')

def codes(x, bucket):
    "Categorify's codes of bucket indices: bucket + 1, 0 for a missing value."
    return np.where(np.isnan(x), 0, bucket + 1)

def test_bucketize_boundaries_are_np_digitize(flights, as_backend):
    "Given boundaries: `np.digitize(x, boundaries, right)`; NaN is '#na#', every bucket is in the vocabulary."
    b = [-10, 0, 15, 60, 180]
    for right in (False, True):
        to = TabularGPU(as_backend(flights), procs=[Bucketize(['dep_delay', 'distance'], [-10, 0, 15, 60, 180] if right
                                                              else {'dep_delay': b, 'distance': [500, 1000, 2000]},
                                                              right=right), Categorify, FillMissing],
                        splits=SPLITS, **KW)
        got = to_pandas(to.items)
        for n,edges in (('dep_delay', b), ('distance', b if right else [500, 1000, 2000])):
            x = flights[n].to_numpy('f8')
            np.testing.assert_array_equal(got[f'{n}_bucket'].to_numpy(), codes(x, np.digitize(x, edges, right)))
            assert list(to.classes[f'{n}_bucket']) == ['#na#', *range(len(edges) + 1)]

def test_bucketize_quantiles_are_pd_qcut(flights, as_backend):
    """Quantiles of the training rows: pandas' `qcut(x, q, labels=False, duplicates='drop')` for them (the delays'
    ties drop edges); a later row goes by the same edges, open at both ends: `pd.cut(x, [-inf, *inner, inf])`."""
    train, later = flights.iloc[:N_TRAIN], flights.iloc[N_TRAIN:]
    for q in (20, [0, 0.1, 0.5, 0.9, 1]):
        bz = Bucketize(['dep_delay', 'distance'], q=q)
        to = TabularGPU(as_backend(flights), procs=[bz, Categorify, FillMissing], splits=SPLITS, **KW)
        new = to.new(as_backend(later))
        new.process()
        for n in ('dep_delay', 'distance'):
            x = train[n]
            cut, edges = pd.qcut(x, q, labels=False, retbins=True, duplicates='drop')
            np.testing.assert_array_equal(bz.bins[n], edges[1:-1])
            got = to_pandas(to.items)[f'{n}_bucket'].to_numpy()
            np.testing.assert_array_equal(got[:N_TRAIN], codes(x.to_numpy('f8'), cut.to_numpy()))
            y = later[n]
            want = pd.cut(y, [-np.inf, *edges[1:-1], np.inf], labels=False)
            np.testing.assert_array_equal(to_pandas(new.items)[f'{n}_bucket'].to_numpy(),
                                          codes(y.to_numpy('f8'), want.to_numpy()))
        if q == 20: assert len(bz.bins['dep_delay']) == 17   # ties dropped two of its 19 inner edges

def test_log_and_clip_are_numpys(flights, backend, as_backend):
    """`Clip` is pandas' `clip`, `LogOp` NumPy's `log1p` (of the clipped delays, listed after), NaN kept for
    FillMissing. On cuDF `log1p` is CUDA's: within 1 ulp of the exact value, as glibc's is, so within 2 ulps of
    NumPy's (CUDA C Programming Guide, maximum ulp errors; glibc's manual, known maximum errors)."""
    to = TabularGPU(as_backend(flights), procs=[Clip('dep_delay', 0, 300), LogOp(['dep_delay', 'distance']),
                                                Clip('air_time', max_value=200), FillMissing], splits=SPLITS, **KW)
    got = to_pandas(to.items)
    ulps = 0 if backend == 'pandas' else 2
    def close(a, b, msg=''):
        np.testing.assert_array_less(np.abs(a - b), ulps * np.spacing(np.abs(b)) + (ulps == 0) * 1e-300, err_msg=msg)
    want = np.log1p(flights.dep_delay.clip(0, 300)).to_numpy()
    assert np.isnan(want).sum() > 0
    close(np.array([to.na_dict['dep_delay']]), np.array([np.nanmedian(want[:N_TRAIN])]), 'fill')   # filled after
    close(got['dep_delay'].to_numpy(), np.where(np.isnan(want), to.na_dict['dep_delay'], want), 'dep_delay')
    close(got['distance'].to_numpy(), np.log1p(flights.distance.to_numpy('f8')), 'distance')
    np.testing.assert_array_equal(got['air_time'].to_numpy(), flights.air_time.clip(upper=200).to_numpy())

def test_errors_name_the_column(flights):
    "A negative value for LogOp (at set-up and in a later frame), a cat column, bad bounds: errors, the frame intact."
    before = flights.copy()
    with pytest.raises(ValueError, match=r"LogOp: column 'dep_delay' holds \d+ value\(s\) <= -1, e.g. -\d+\.0"):
        TabularGPU(flights, procs=[LogOp('dep_delay'), FillMissing], splits=SPLITS, **KW)
    to = TabularGPU(flights, procs=[LogOp('distance'), FillMissing], splits=SPLITS, **KW)
    with pytest.raises(ValueError, match=r"LogOp: column 'distance' holds 1 value\(s\) <= -1, e.g. -1\.0"):
        to.new(flights.iloc[:3].assign(distance=[1, -1, -0.5])).process()
    for p in (LogOp('carrier'), Clip('carrier', 0), Bucketize('carrier', q=4), NormalizeMinMax('carrier')):
        with pytest.raises(TypeError, match=r"takes numbers: column\(s\) \['carrier'\]"):
            TabularGPU(flights, procs=[p, FillMissing], splits=SPLITS, **KW)
    with pytest.raises(KeyError, match=r"Bucketize: column\(s\) \['dep'\] are not in the frame"):
        TabularGPU(flights, procs=[Bucketize('dep', q=4), FillMissing], splits=SPLITS, **KW)
    for kw,msg in ((dict(), 'takes `boundaries` or `q`'), (dict(q=0), r'q=...\) must be'),
                   (dict(q=[0.5, 0.2]), 'quantiles must increase'), (dict(boundaries=[3, 1]), 'must increase'),
                   (dict(boundaries={'x': [1]}), r"no boundaries for column\(s\) \['distance'\]")):
        with pytest.raises(ValueError, match=msg): Bucketize('distance', **kw)
    with pytest.raises(ValueError, match='above max_value'): Clip('distance', 5, 1)
    with pytest.raises(ValueError, match='needs min_value or max_value'): Clip('distance')
    pd.testing.assert_frame_equal(flights, before)

def device_log1p(backend):
    """log1p as `backend` computes it: NumPy's on pandas; on cuDF CuPy's, which is CUDA's, within 1 ulp of the exact
    value but not NumPy's bits (cupy/_math/explog.py:64-70 @v14.2.0), so the values expected are the device's own."""
    if backend != 'cudf': return np.log1p
    import cupy
    return lambda x: cupy.log1p(cupy.asarray(np.asarray(x, dtype='f8'))).get()

def test_log_of_values_above_minus_one(backend, as_backend):
    "log1p is defined above -1: values in (-1, 0) are log1p of them (negative), the device's, within 1 ulp of NumPy's."
    x = np.array([-1 + np.finfo('f8').eps, -0.5, -1e-300, 0, 0.25, 3e9])
    df = pd.DataFrame({'x': x, 'y': np.arange(len(x)) % 2})
    to = TabularGPU(as_backend(df), procs=[LogOp('x')], cont_names=['x'], y_names='y')
    got = to_pandas(to.items)['x'].to_numpy()
    np.testing.assert_array_equal(got, device_log1p(backend)(x))
    np.testing.assert_array_max_ulp(got, np.log1p(x), maxulp=1)

def test_normalize_min_max_is_numpys(flights, backend, as_backend):
    """`(x - nanmin) / (nanmax - nanmin)` of the training rows (NumPy's, in float64) for every row and a later frame,
    after LogOp listed before it (the device's log1p); NaN passes to FillMissing, which fills it from the scaled
    values; a constant column gives 0 for its training rows and a later value its distance from the constant."""
    df = flights.assign(one=7)
    nm = NormalizeMinMax(['dep_delay', 'distance', 'one'])
    to = TabularGPU(as_backend(df), procs=[LogOp('distance'), nm, FillMissing], splits=SPLITS,
                    cat_names=['carrier'], cont_names=['distance', 'dep_delay', 'one'], y_names='hour')
    later = df.iloc[N_TRAIN:].assign(one=[7, 9] * 5000)
    new = to.new(as_backend(later))
    new.process()
    for n,f in (('dep_delay', np.asarray), ('distance', device_log1p(backend)), ('one', np.asarray)):
        x = f(df[n].to_numpy('f8'))
        lo, hi = np.nanmin(x[:N_TRAIN]), np.nanmax(x[:N_TRAIN])
        assert (nm.mins[n], nm.maxs[n]) == (lo, hi) and type(nm.mins[n]) is float
        want = (x - lo) / (hi - lo if hi > lo else 1)
        if n == 'dep_delay':
            assert np.isnan(want).sum() > 0 and (np.nanmin(want[:N_TRAIN]), np.nanmax(want[:N_TRAIN])) == (0, 1)
            assert to.na_dict[n] == np.nanmedian(want[:N_TRAIN])
            want = np.where(np.isnan(want), to.na_dict[n], want)
        np.testing.assert_array_equal(to_pandas(to.items)[n].to_numpy(), want, err_msg=n)
        y = f(later[n].to_numpy('f8'))
        want = (y - lo) / (hi - lo if hi > lo else 1)
        np.testing.assert_array_equal(to_pandas(new.items)[n].to_numpy(), np.where(np.isnan(want), to.na_dict.get(n),
                                                                                 want), err_msg=n)
    assert set(to_pandas(new.items)['one']) == {0, 2}

def test_normalize_min_max_errors(flights):
    "No training value, an infinite one, an empty frame, a missing column: errors naming it; the frame intact."
    before = flights.copy()
    kw = dict(cat_names=['carrier'], cont_names=['distance', 'x'], y_names='hour')
    for x,msg in ((np.nan, r"column 'x' has no value in the training rows"), (np.inf, r"hold \+-inf: 'x'")):
        df = flights.assign(x=np.where(flights.index % 2, x, 1.0) if x == np.inf else x)
        with pytest.raises(ValueError, match=msg): TabularGPU(df, procs=[NormalizeMinMax('x'), FillMissing], **kw)
    with pytest.raises(ValueError, match=r"empty"):   # the house check, before any proc
        TabularGPU(flights.iloc[:0].assign(x=1.0), procs=[NormalizeMinMax('x')], **kw)
    with pytest.raises(KeyError, match=r"NormalizeMinMax: column\(s\) \['dep'\] are not in the frame"):
        TabularGPU(flights, procs=[NormalizeMinMax('dep'), FillMissing], splits=SPLITS, **KW)
    pd.testing.assert_frame_equal(flights, before)
