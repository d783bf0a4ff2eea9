"""`Bucketize`, `LogOp` and `Clip` against NumPy and pandas on the flights and MovieLens: `np.digitize` for given
boundaries, `pd.qcut` for the training rows' quantiles (and `pd.cut` on its edges, open at both ends, for later rows),
`np.log1p`, `Series.clip`; missing values kept missing, errors naming the column, the caller's frame left alone."""
import numpy as np
import pandas as pd
import pytest
from fastai.tabular.all import Categorify, FillMissing
from fastai_gpu_tabular.all import Bucketize, Clip, LogOp, TabularGPU
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
    with pytest.raises(ValueError, match=r"LogOp: column 'dep_delay' holds \d+ negative value\(s\), e.g. -\d+\.0"):
        TabularGPU(flights, procs=[LogOp('dep_delay'), FillMissing], splits=SPLITS, **KW)
    to = TabularGPU(flights, procs=[LogOp('distance'), FillMissing], splits=SPLITS, **KW)
    with pytest.raises(ValueError, match=r"LogOp: column 'distance' holds 1 negative"):
        to.new(flights.iloc[:3].assign(distance=[1, -2, 3])).process()
    for p in (LogOp('carrier'), Clip('carrier', 0), Bucketize('carrier', q=4)):
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
