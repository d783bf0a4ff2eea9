"""pandas 3: fastai 2.8's `TabularPandas` still processes its frame there, but its batches fail ('negative strides');
`TabularGPU` processes the same frame the same way and trains. On pandas 2 both work, and the test checks the same."""
import pandas as pd
import pytest
from fastai.tabular.all import Categorify, FillMissing, Normalize, RandomSplitter, range_of, set_seed
from helpers.parity import (
    FASTAI_LOADER_WORKS,
    assert_same_batches,
    assert_same_processing,
    build_both,
    fastai_valid_batches,
)
from fastai_gpu_tabular.all import tabular_learner
from fastai_gpu_tabular.datasets import load_flights

def test_trains_where_fastai_tabular_pandas_cannot(backend):
    "Two regression targets named in the reverse of their frame order: the case whose fastai batches fail on pandas 3."
    df = load_flights(nrows=50_000).dropna(subset=['arr_delay', 'dep_delay']).reset_index(drop=True)
    for c in ('dep_delay', 'arr_delay'): df[c] = df[c].clip(-60, 180) / 60   # hours, the long tail cut
    ref, ours = build_both(df, backend, procs=[Categorify, FillMissing, Normalize],
                           cat_names=['carrier', 'origin', 'dest'],
                           cont_names=['dep_time', 'sched_dep_time', 'arr_time', 'sched_arr_time', 'distance'],
                           y_names=['arr_delay', 'dep_delay'], splits=RandomSplitter(seed=1)(range_of(df)))
    assert_same_processing(ref, ours, exact=backend == 'pandas')
    if not FASTAI_LOADER_WORKS:   # if fastai fixes this, the reference path in parity.py can go
        with pytest.raises(ValueError, match='negative strides'): ref.dataloaders(bs=1024)
    dls = ours.dataloaders(bs=1024)
    assert_same_batches(fastai_valid_batches(ref, 1024), dls.valid.new(shuffle=False))
    set_seed(0)
    learn = tabular_learner(dls, layers=[128, 64])
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(2, 1e-2)
    preds, targs = learn.get_preds()
    mse, var = ((preds - targs) ** 2).mean(0), targs.var(0, unbiased=False)
    assert (mse < var / 2).all(), (f'validation MSE {mse.tolist()} against the variance {var.tolist()} '
                                   f'(pandas {pd.__version__})')

@pytest.mark.skipif(int(pd.__version__.split('.')[0]) >= 3,
                    reason="pandas 3 reads strings as its Arrow `str` by default: every parity test runs on them")
def test_future_infer_string():
    "pandas 2 with `future.infer_string` (pandas 3's Arrow `str` columns): fastai's processing, bit for bit."
    with pd.option_context('future.infer_string', True):
        df = load_flights(nrows=50_000)
        assert str(df['carrier'].dtype) == 'str'
        ref, ours = build_both(df, procs=[Categorify, FillMissing, Normalize], cat_names=['carrier', 'tailnum', 'dest'],
                               cont_names=['dep_time', 'arr_delay', 'distance'], y_names='origin',
                               splits=RandomSplitter(seed=1)(range_of(df)))
        assert_same_processing(ref, ours)
        assert_same_batches(fastai_valid_batches(ref, 4096), ours.dataloaders(bs=4096).valid.new(shuffle=False))
