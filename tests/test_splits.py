"""`splits` given as a column (its name, or fastai's `ColSplitter` uncalled) or as a splitter: the same rows, in the
same order, and the same learned state as fastai's `TabularPandas` given the positions fastai's splitter makes."""
import numpy as np
import pandas as pd
import pytest
from fastai.tabular.all import Categorify, ColSplitter, FillMissing, Normalize, RandomSplitter, TabularPandas
from helpers.parity import assert_same_processing
from fastai_gpu_tabular.all import TabularGPU
from fastai_gpu_tabular.backend import to_pandas

CATS = ['workclass', 'education', 'marital-status', 'occupation', 'race']
CONTS = ['age', 'fnlwgt', 'hours-per-week']

def _kw():
    return dict(procs=[Categorify, FillMissing, Normalize], cat_names=list(CATS), cont_names=list(CONTS),
                y_names='income')

@pytest.fixture(scope='module')
def frame(adult):
    "Adult with a split column from its own values: people over 50 validate (a third of the rows, not a block)."
    df = adult.copy()
    df['is_valid'] = df['age'] > 50
    return df

@pytest.mark.parametrize('splits', [
    pytest.param(lambda: ColSplitter('is_valid'), id='ColSplitter'),
    pytest.param(lambda: 'is_valid', id='name'),
    pytest.param(lambda: ColSplitter('race', on='Black'), id='ColSplitter-on'),
    pytest.param(lambda: ColSplitter('race', on=['Black', 'Other']), id='ColSplitter-on-list'),
    pytest.param(lambda: RandomSplitter(seed=7), id='RandomSplitter'),
])
def test_split_like_fastai(frame, backend, as_backend, splits):
    "Each form of `splits` gives fastai's rows and state; the caller's frame keeps its split column."
    s = splits()
    positions = (s if callable(s) else ColSplitter(s))(frame)   # fastai's (train, valid) positions
    ref = TabularPandas(frame.copy(), splits=positions, **_kw())
    df = as_backend(frame)
    ours = TabularGPU(df, splits=s, **_kw())
    assert (len(ours.train), len(ours.valid)) == tuple(map(len, positions))
    assert 0 < len(ours.valid) < len(frame)
    assert_same_processing(ref, ours, exact=backend == 'pandas')
    assert 'is_valid' in df.columns and len(df) == len(frame)

def test_split_column_missing(frame):
    "A split column the frame lacks is named in the error, before any work."
    with pytest.raises(KeyError, match="'is_test'"):
        TabularGPU(frame, splits=ColSplitter('is_test'), **_kw())
    with pytest.raises(KeyError, match="'holdout'"):
        TabularGPU(frame, splits='holdout', **_kw())

def test_split_column_that_validates_every_row(frame):
    """A split column that leaves no training row (fastai's `TabularPandas` would set up on none) is named in the error,
    before the procs: here strings, every non-empty one of which fastai's rule reads as True."""
    df = frame.assign(fold=np.where(frame.is_valid, 'valid', 'train'))
    assert len(ColSplitter('fold')(df)[0]) == 0
    with pytest.raises(ValueError, match="split column 'fold' puts every row in the validation set.*strings"):
        TabularGPU(df, splits='fold', **_kw())
    assert len(TabularGPU(df, splits=ColSplitter('fold', on='valid'), **_kw()).train) == (~frame.is_valid).sum()

def test_positions_as_arrays(frame):
    "Row positions as NumPy arrays or fastai's `L`s give the same order (no Python iteration of either is needed)."
    trn, val = ColSplitter('is_valid')(frame)
    a = TabularGPU(frame, splits=(trn, val), **_kw())
    b = TabularGPU(frame, splits=(np.asarray(trn.items), np.asarray(val.items)), **_kw())
    pd.testing.assert_frame_equal(a.items, b.items)
    assert list(a.items.index[:len(trn)]) == list(trn)

def test_string_split_column_with_nan(frame, as_backend):
    """A split column of strings with NaN: fastai's `ColSplitter` casts its values to bool, so a non-empty string and
    NaN validate, an empty one trains (on cuDF a null is False to `astype(bool)`). (A categorical's NaN fails fastai's
    splitter: its bool values hold NaN, which fastai's `mask2idxs` cannot take.)"""
    df = frame.assign(fold=pd.Series(np.array(['v', np.nan, ''], dtype=object)[frame.age % 3], index=frame.index,
                                     dtype=object))
    before = df.copy()
    ours = TabularGPU(as_backend(df), splits='fold', **_kw())
    want = ColSplitter('fold')(df)
    assert df.fold.isna().sum() > 0 and len(want[1]) > len(df.fold[df.fold == 'v'])   # NaN validates
    assert ours.split == len(want[0])
    np.testing.assert_array_equal(to_pandas(ours.items).index.to_numpy(), np.concatenate(want))
    pd.testing.assert_frame_equal(df, before)
