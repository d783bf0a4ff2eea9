"Bad input: a clear error that names the column and the problem, before long work; the caller's frame is never mutated."
import numpy as np
import pandas as pd
import pytest
from fastai.tabular.all import Categorify, FillMissing, Normalize, RandomSplitter, TabularPandas, range_of
from fastai_gpu_tabular.all import TabularGPU
from fastai_gpu_tabular.backend import to_pandas
from fastai_gpu_tabular.datasets import load_adult

PROCS = [Categorify, FillMissing, Normalize]
CATS = ['workclass', 'education', 'occupation', 'native-country']
CONTS = ['age', 'fnlwgt', 'hours-per-week']

@pytest.fixture(scope='module')
def adult(): return load_adult().iloc[:5000].reset_index(drop=True)

def make(df, as_backend, procs=PROCS, **kw):
    kw = {'cat_names': CATS, 'cont_names': CONTS, 'y_names': 'income', **kw}
    return TabularGPU(as_backend(df), procs=procs, **kw)

def untouched(to, col='occupation'):
    "The cat column still holds the raw strings: Categorify never ran."
    return to_pandas(to.items[col]).map(lambda o: isinstance(o, str) or o is None or o != o).all()

def test_missing_column(adult, as_backend):
    with pytest.raises(KeyError, match=r"\['hours_per_week'\] are not in the frame"):
        make(adult, as_backend, cont_names=['age', 'hours_per_week'])

def test_target_with_nan(adult, as_backend):
    df = adult.copy(); df.loc[7, 'income'] = np.nan
    with pytest.raises(ValueError, match=r"target column 'income' contains NaN"): make(df, as_backend)

def test_cont_not_numeric(adult, as_backend, backend):
    with pytest.raises(TypeError, match=r"continuous column 'workclass'.*not (numeric|a number)"):
        make(adult, as_backend, cat_names=['education'], cont_names=['age', 'workclass'])
    # numbers stored as strings (what `learn.predict(row)`'s `row.to_frame().T` gives, a pandas frame) are converted
    # on pandas, to what the numbers give; a cuDF string column is refused, naming it
    df = adult.astype({'age': str})
    if backend == 'cudf':
        with pytest.raises(TypeError, match=r"continuous column 'age'.*not a number"): make(df, as_backend)
        return
    got, ref = (to_pandas(make(d, as_backend).items['age']) for d in (df, adult))
    assert got.dtype.kind == 'f' and isinstance(df['age'].iloc[0], str)
    np.testing.assert_array_equal(got.to_numpy(), ref.to_numpy())

def test_nan_at_inference_not_seen_in_training(adult, as_backend):
    to = make(adult, as_backend)          # no NaN in any cont: FillMissing learns nothing
    assert to.na_dict == {}
    test = adult.iloc[:100].copy(); test.loc[5, 'fnlwgt'] = np.nan
    new = to.new(as_backend(test))
    with pytest.raises(ValueError, match=r"\['fnlwgt'\] contain NaN, but had none in the training rows"): new.process()
    assert untouched(new)                 # raised before Categorify
    assert test.loc[5, 'fnlwgt'] != test.loc[5, 'fnlwgt']

def test_nan_without_fillmissing(adult, as_backend):
    df = adult.copy(); df.loc[3, 'age'] = np.nan
    with pytest.raises(ValueError, match=r"\['age'\] contain NaN and `procs` has no FillMissing"):
        make(df, as_backend, procs=[Categorify, Normalize])
    to = make(adult, as_backend, procs=[Categorify, Normalize])
    new = to.new(as_backend(df.iloc[:10]))
    with pytest.raises(ValueError, match=r"\['age'\] contain NaN and `procs` has no FillMissing"): new.process()
    assert untouched(new)

def test_all_nan_column(adult, as_backend):
    df = adult.copy(); df['empty'] = np.nan
    with pytest.raises(ValueError, match=r"'empty' is entirely NaN in the training rows"):
        make(df, as_backend, cont_names=CONTS + ['empty'])

def test_empty_frame(adult, as_backend):
    with pytest.raises(ValueError, match='empty frame'): make(adult.iloc[:0], as_backend)

def test_bad_batch_size(adult, as_backend):
    dls_ok = make(adult, as_backend, splits=RandomSplitter(seed=0)(range_of(adult))).dataloaders(bs=64)
    for bs in (0, -5):
        with pytest.raises(ValueError, match=r'bs must be a positive integer'): dls_ok.train.new(bs=bs)
    to = make(adult, as_backend, splits=RandomSplitter(seed=0)(range_of(adult)))
    with pytest.raises(ValueError, match=r'bs=65536 is more than the 4000 rows and drop_last=True'):
        to.dataloaders(bs=65536)
    dls = to.dataloaders(bs=65536, drop_last=False)     # one short batch per epoch is fine if asked for
    assert len(dls.train) == 1 and len(dls.train.one_batch()[0]) == 4000

@pytest.mark.parametrize('reduce_memory', [True, False])
def test_mixed_types_cannot_be_encoded(adult, as_backend, reduce_memory):
    """Strings and numbers in one cat column raise, naming it, before any proc, whether fastai's shrink casts it to a
    category first (whose categories then hold both) or not, and on cuDF where moving the frame there fails; None and
    NaN are missing values, not a type."""
    df = adult.copy(); df['education'] = df['education'].astype(object); df.loc[::7, 'education'] = 12
    with pytest.raises(TypeError, match=r"column 'education' mixes value types \['int', 'str'\]"):
        make(df, as_backend, reduce_memory=reduce_memory)
    df.loc[::7, 'education'] = None
    df.loc[3::7, 'education'] = np.nan
    make(df, as_backend, reduce_memory=reduce_memory)

def test_unseen_target_label(adult, as_backend):
    """fastai encodes a validation label missing from training as a class index the model does not have; we stop, naming
    it."""
    df = adult.copy(); df.loc[df.index[-3:], 'income'] = 'unknown'
    splits = (list(range(len(df) - 3)), list(range(len(df) - 3, len(df))))
    with pytest.raises(ValueError,
                       match=r"target column 'income' has labels not seen in the training rows, e.g. \['unknown'\]"):
        make(df, as_backend, splits=splits)
    ref = TabularPandas(df, procs=PROCS, cat_names=list(CATS), cont_names=CONTS, y_names='income', splits=splits)
    codes = ref.items['income'].iloc[-3:]
    assert ((codes < 0) | (codes >= ref.c)).all()      # 2 here, for c=2 classes: a silent bad target

def test_names_twice_and_splits(adult, as_backend):
    with pytest.raises(ValueError, match=r"\['age'\] are named in more than one"):
        make(adult, as_backend, cat_names=CATS + ['age'])
    with pytest.raises(ValueError, match=r"cont_names lists a column twice"):
        make(adult, as_backend, cont_names=['age', 'age'])
    with pytest.raises(IndexError, match=r'splits hold row positions outside'):
        make(adult, as_backend, splits=([0, 1, 2], [len(adult) + 10]))

def test_caller_frame_never_mutated(adult, as_backend):
    df = as_backend(adult.copy())
    before = to_pandas(df).copy()
    cats = list(CATS)
    to = TabularGPU(df, procs=PROCS, cat_names=cats, cont_names=CONTS, y_names='income',
                    splits=RandomSplitter(seed=0)(range_of(adult)))
    dls = to.dataloaders(bs=256)
    dls.test_dl(df.iloc[:300])
    to.new(df).process()
    pd.testing.assert_frame_equal(to_pandas(df), before)
    assert cats == CATS              # fastai's TabularPandas appends the `_na` names to the caller's list
    assert 'workclass' in to.cat_names
