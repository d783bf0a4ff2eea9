"""`TargetEncode(folds=0)` over a Dask frame against the in-memory `TabularGPU` on the same rows (and so scikit-learn's
`TargetEncoder.fit(...).transform`): each category's sums carried across partitions in row order give the same
encodings bit for bit; Normalize after it, the packed rows, and the errors."""
import numpy as np
import pandas as pd
import pytest
import torch

dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
import dask.dataframe as dd
from fastai.tabular.all import Categorify, ColSplitter, Normalize
from sklearn.preprocessing import TargetEncoder
from fastai_gpu_tabular.all import TabularDask, TabularGPU, TargetEncode
from fastai_gpu_tabular.datasets import load_adult, load_movielens

@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set(scheduler='sync'): yield

def _with_split(df, seed=0):
    return df.assign(is_valid=np.random.default_rng(seed).random(len(df)) < 0.2)

CASES = {  # (data, target, names): regression, binary, multi-class; NaN categories in Adult's
    'movielens': (lambda: _with_split(load_movielens()), 'rating', ['userId', 'movieId']),
    'adult': (lambda: _with_split(load_adult(), 1), 'income', ['education', 'occupation']),
    'adult-race': (lambda: _with_split(load_adult(), 2), 'race', ['native-country', 'occupation'])}

@pytest.mark.parametrize('smooth', ['auto', 4.0])
@pytest.mark.parametrize('case', list(CASES))
def test_full_statistic_is_in_memorys(case, smooth):
    load, y, names = CASES[case]
    df = load()
    with dask.config.set({'dataframe.convert-string': False}):
        ddf = dd.from_pandas(df, npartitions=7)
    mem = ddf.compute()
    kw = lambda: dict(procs=[TargetEncode(names, smooth=smooth, folds=0), Categorify, Normalize], cat_names=names,
                      y_names=y)
    to = TabularGPU(ddf, splits='is_valid', **kw())
    tg = TabularGPU(mem, splits=ColSplitter('is_valid')(mem), **kw())
    a, b = to.procs.fs[0], tg.procs.fs[0]
    assert type(to) is TabularDask and a.target_type_ == b.target_type_
    np.testing.assert_array_equal(a.target_mean, b.target_mean)
    for n in names: pd.testing.assert_frame_equal(a.encodings[n], b.encodings[n], check_exact=True)
    assert list(to.cont_names) == list(tg.cont_names) == b.made_names
    for c in b.made_names: assert to.means[c] == tg.means[c] and to.stds[c] == tg.stds[c]
    rows = tg.packed_rows()[0]
    assert torch.equal(to.train.packed_rows()[0], rows[:tg.split])
    assert torch.equal(to.valid.packed_rows()[0], rows[tg.split:])
    if case == 'adult':   # and so scikit-learn's, fitted on all training rows
        tr = mem[~mem.is_valid]
        ref = TargetEncoder(smooth=smooth).fit(tr[names].astype(object), tr[y])
        for i,n in enumerate(names): np.testing.assert_array_equal(a.encodings[n][f'{n}_te'], ref.encodings_[i])

def test_out_of_fold_on_dask_says_what_to_do():
    df = _with_split(load_adult())
    ddf = dd.from_pandas(df, npartitions=3)
    for te in (TargetEncode(['education']), TargetEncode):
        with pytest.raises(NotImplementedError, match=r'TargetEncode\(folds=5\).*folds=0'):
            TabularGPU(ddf, procs=[te, Categorify], cat_names=['education'], y_names='income', splits='is_valid')

def test_set_up_in_memory_encodes_a_dask_frame():
    "Out-of-fold set-up in memory, then `new` of a Dask frame: the full statistic, as `new` of the same rows in memory."
    df = load_adult()
    te = TargetEncode(['education', 'occupation'])
    tg = TabularGPU(df.iloc[:30000], procs=[te, Categorify, Normalize], cat_names=['education', 'occupation'],
                    cont_names=['age'], y_names='income')
    test = df.iloc[30000:].drop(columns='income')
    mem, lazy = tg.new(test), tg.new(dd.from_pandas(test, npartitions=4))
    mem.process()
    lazy.process()
    assert torch.equal(lazy.train.packed_rows()[0], mem.packed_rows()[0])

def test_std_of_a_long_float64_column_is_pandas():
    """Normalize's std over partitions of a float64 column longer than NumPy's cast buffer (8192 values): pandas'
    variance centres on a float64 sum of the float64 values, one pairwise tree with no cast buffers (it was summed as
    if cast, which missed pandas' std by an ulp here). The column: Adult's target encodings of its 39,073 rows."""
    from fastai_gpu_tabular.dask.stats import exact_moments
    df = _with_split(load_adult(), 1)
    tr = df[~df.is_valid]
    to = TabularGPU(tr, procs=[TargetEncode(['education', 'occupation'], folds=0)],
                    cat_names=['education', 'occupation'], y_names='income')
    x = to.items[['education_te', 'occupation_te']]
    means, stds = exact_moments(dd.from_pandas(x, npartitions=7).to_delayed(), list(x.columns), dict(x.dtypes))
    assert stds == dict(x.std(ddof=0)) and means == dict(x.mean())
