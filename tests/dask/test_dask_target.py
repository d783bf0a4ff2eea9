"""`TargetEncode` over a Dask frame against the in-memory `TabularGPU` on the same rows and scikit-learn's
`TargetEncoder`: with `folds=0` the statistic of all training rows (`fit(...).transform`), each category's sums carried
across partitions in row order; with `folds` the training rows' out-of-fold values (`fit_transform`) on scikit-learn's
folds, and the full statistic for the other rows; bit for bit. Normalize after it, the packed rows, and the errors."""
import numpy as np
import pandas as pd
import pytest
import torch

dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
import dask.dataframe as dd
from fastai.tabular.all import Categorify, ColSplitter, FillMissing, Normalize
from sklearn.model_selection import KFold, StratifiedKFold
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

@pytest.fixture(scope='module')
def adult(): return _with_split(load_adult().iloc[:6000], 3)   # small: the Dask tests run on 2 cores in CI

def _uneven(df, nparts, seed):
    "`df` in `nparts` Dask partitions of uneven lengths."
    cuts = np.sort(np.random.default_rng(seed).choice(np.arange(1, len(df) - 1), nparts - 1, replace=False))
    with dask.config.set({'dataframe.convert-string': False}):
        return dd.from_pandas(df, npartitions=1, sort=True).repartition(divisions=[0, *cuts.tolist(), len(df) - 1])

def _dask_encoded(to, made):
    "The encoded columns of a `TabularDask`, computed: (training rows, validation rows), each in row order."
    # the whole frame, split here, so that these values do not rest on the split mask (test_dask_tabular's)
    got = to.items[made + ['is_valid']].compute()
    v = got.pop('is_valid').to_numpy()
    return got[~v].to_numpy('f8'), got[v].to_numpy('f8')

OOF = {  # (target, names, scikit-learn's target_type): binary, regression, multi-class; NaN categories in Adult's
    'income': ('income', ['education', 'occupation'], 'binary'),
    'age': ('age', ['education', 'occupation'], 'continuous'),
    'race': ('race', ['native-country', 'occupation'], 'multiclass')}

@pytest.mark.parametrize('folds,seed,smooth,nparts', [(2, 0, 'auto', 3), (5, 7, 'auto', 5), (5, 3, 4.0, 7),
                                                      (2, 1, 0.5, 4)])
@pytest.mark.parametrize('case', list(OOF))
def test_out_of_fold_is_in_memorys_and_sklearns(adult, case, folds, seed, smooth, nparts):
    """`TargetEncode(folds)` on Dask: the training rows get scikit-learn's `fit_transform` (on its folds: each row's
    fold placed by its position among the training rows, over uneven partitions), the validation rows its
    `transform`, both equal to the in-memory `TabularGPU`'s bit for bit."""
    y, names, kind = OOF[case]
    ddf = _uneven(adult, nparts, seed)
    mem = ddf.compute()
    kw = lambda: dict(procs=[TargetEncode(names, smooth=smooth, folds=folds, seed=seed), Categorify], cat_names=names,
                      y_names=y)
    to = TabularGPU(ddf, splits='is_valid', progress=False, **kw())
    tg = TabularGPU(mem, splits=ColSplitter('is_valid')(mem), **kw())
    te = tg.procs.fs[0]
    assert type(to) is TabularDask and to.procs.fs[0].target_type_ == te.target_type_ == kind
    got, got_val = _dask_encoded(to, te.made_names)
    np.testing.assert_array_equal(got, tg.train.items[te.made_names].to_numpy('f8'))
    np.testing.assert_array_equal(got_val, tg.valid.items[te.made_names].to_numpy('f8'))
    # scikit-learn's TargetEncoder(cv=folds, shuffle=True, random_state=seed): these splitters
    cv = (KFold if kind == 'continuous' else StratifiedKFold)(folds, shuffle=True, random_state=seed)
    tr, va = mem[~mem.is_valid], mem[mem.is_valid]
    ref = TargetEncoder(smooth=smooth, cv=cv, target_type=kind)
    np.testing.assert_array_equal(got, ref.fit_transform(tr[names].astype(object), tr[y].to_numpy()))
    np.testing.assert_array_equal(got_val, ref.transform(va[names].astype(object)))

def test_out_of_fold_then_normalize_packs_the_in_memory_rows(adult):
    """Normalize learns its scale from the out-of-fold values it is set up on, and FillMissing (which reads from the
    scan which conts hold NaN: the encoded ones never do) leaves them: the packed rows are the in-memory ones."""
    names = ['education', 'occupation']
    ddf = _uneven(adult, 6, 4)
    mem = ddf.compute()
    kw = lambda: dict(procs=[TargetEncode(names, folds=5, seed=2), Categorify, FillMissing, Normalize], cat_names=names,
                      cont_names=['fnlwgt'], y_names='income')
    to = TabularGPU(ddf, splits='is_valid', progress=False, **kw())
    tg = TabularGPU(mem, splits=ColSplitter('is_valid')(mem), **kw())
    for c in tg.procs.fs[0].made_names: assert to.means[c] == tg.means[c] and to.stds[c] == tg.stds[c]
    rows = tg.packed_rows()[0]
    assert torch.equal(to.train.packed_rows()[0], rows[:tg.split])
    assert torch.equal(to.valid.packed_rows()[0], rows[tg.split:])

def test_out_of_fold_with_no_split_and_later_frames(adult):
    """No split: every row trains and gets its out-of-fold value; the same rows through `new` (a later frame) get the
    statistic of all training rows, as in memory."""
    names = ['education', 'occupation']
    df = adult.drop(columns='is_valid')
    ddf = _uneven(df, 4, 5)
    kw = lambda: dict(procs=[TargetEncode(names, smooth=2.0, folds=3, seed=1), Categorify], cat_names=names,
                      y_names='age')
    to = TabularGPU(ddf, progress=False, **kw())
    tg = TabularGPU(df, **kw())
    made = tg.procs.fs[0].made_names
    oof = tg.items[made].to_numpy('f8')
    np.testing.assert_array_equal(to.items[made].compute().to_numpy('f8'), oof)
    ref = TargetEncoder(smooth=2.0, cv=KFold(3, shuffle=True, random_state=1), target_type='continuous')
    np.testing.assert_array_equal(oof, ref.fit_transform(df[names].astype(object), df['age'].to_numpy()))
    later = to.new(ddf)
    later.process()
    full = ref.transform(df[names].astype(object))
    np.testing.assert_array_equal(later.items[made].compute().to_numpy('f8'), full)
    assert not np.array_equal(full, oof)

def test_out_of_fold_nan_target_fails_first(adult):
    "A missing target: a ValueError naming the column from the first pass over the rows, before any set-up."
    df = adult.assign(age=adult['age'].astype('f8').where(adult.index != 4321))
    with pytest.raises(ValueError, match="target column 'age' contains NaN"):
        TabularGPU(_uneven(df, 3, 0), procs=[TargetEncode(['education'], folds=5), Categorify],
                   cat_names=['education'], y_names='age', splits='is_valid', progress=False)

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
