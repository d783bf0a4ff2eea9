"""Random frames (hypothesis) through fastai's TabularPandas and TabularGPU (pandas, and cuDF where it is): NaN in cats
and conts, all-NaN and constant columns, bool/int/float/string/categorical dtypes, categories unseen at test time."""
import numpy as np
import pandas as pd
import pytest
from fastai.tabular.all import Categorify, FillMissing, Normalize, TabularPandas
from helpers.parity import assert_same_processing, build_both, cont_atol
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from fastai_gpu_tabular.all import TabularGPU
from fastai_gpu_tabular.backend import to_backend, to_pandas

CAT_KINDS = ['bool', 'bool_nan', 'int', 'int_nan', 'float', 'str', 'str_nan', 'category', 'all_nan', 'const']
CONT_KINDS = ['float', 'float_nan', 'int', 'const', 'float32_nan', 'mostly_nan']

def make_col(kind, n, rng):
    """One column of `kind`, drawn with `rng`; missing values are NaN (fastai keeps None as a category without
    reduce_memory)."""
    nan = rng.random(n) < 0.2
    if kind == 'bool': return rng.random(n) < 0.3
    if kind == 'bool_nan': return pd.Series(rng.random(n) < 0.5, dtype=object).mask(nan, np.nan)
    if kind == 'int': return rng.integers(-3, 40, n)
    if kind == 'int_nan': return np.where(nan, np.nan, rng.integers(0, 9, n).astype(float))
    if kind == 'float': return np.round(rng.normal(size=n), 1)
    if kind in ('str', 'str_nan'):
        v = rng.choice(np.array(['a', 'b', 'zz', 'é', 'B', '10', '9', ' x'], dtype=object), n)
        return pd.Series(v, dtype=object).mask(nan, np.nan) if kind == 'str_nan' else v
    if kind == 'category':   # a declared order and an unused category: fastai keeps both
        return pd.Categorical(rng.choice(['lo', 'mid', 'hi'], n), categories=['hi', 'unused', 'lo', 'mid'])
    if kind == 'all_nan': return pd.Series(np.full(n, np.nan), dtype=object)
    if kind == 'const': return np.full(n, 7)
    if kind == 'float_nan': return np.where(nan, np.nan, rng.lognormal(size=n))
    if kind == 'float32_nan': return np.where(nan, np.nan, rng.normal(5, 3, n)).astype(np.float32)
    if kind == 'mostly_nan': return np.where(rng.random(n) < 0.9, np.nan, rng.normal(size=n))
    raise ValueError(kind)

@st.composite
def frames(draw):
    n = draw(st.integers(12, 150))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    cats = draw(st.lists(st.sampled_from(CAT_KINDS), min_size=1, max_size=5))
    conts = draw(st.lists(st.sampled_from(CONT_KINDS), min_size=0, max_size=4))
    df = pd.DataFrame({f'c{i}_{k}': make_col(k, n, rng) for i,k in enumerate(cats)} |
                      {f'x{i}_{k}': make_col(k, n, rng) for i,k in enumerate(conts)})
    classification = draw(st.booleans())
    df['y'] = rng.choice(['no', 'yes'], n) if classification else rng.normal(size=n)
    n_train = draw(st.integers(n // 2, n - 1))
    perm = rng.permutation(n)
    train = perm[:n_train]
    if classification: df.loc[train[:2], 'y'] = ['no', 'yes']     # every label seen in training
    # NaN only in validation rows, or only NaN in training rows, are errors (test_errors, test_all_nan_training_column)
    for c in df.columns[df.columns.str.startswith('x')]:
        if df[c].isna().any() and not df.loc[train, c].isna().any(): df.loc[train[-1], c] = np.nan
        if df.loc[train, c].isna().all(): df.loc[train[0], c] = 1.5
    kw = dict(cat_names=[c for c in df if c.startswith('c')], cont_names=[c for c in df if c.startswith('x')],
              y_names='y', splits=(list(train), list(perm[n_train:])), reduce_memory=draw(st.booleans()))
    return df, kw, rng

def _assert_parity(case, backend):
    "fastai's TabularPandas and TabularGPU on `backend` process the frame, then new rows, alike."
    df, kw, rng = case
    ref, ours = build_both(df, backend, procs=lambda: [Categorify, FillMissing, Normalize], **kw)
    assert_same_processing(ref, ours, exact=backend == 'pandas')
    # new rows with unseen categories (and NaN where training had some) encode as fastai does: unseen -> 0
    test = df.sample(frac=1., random_state=int(rng.integers(1000))).reset_index(drop=True)
    for c in kw['cat_names']:
        # an unseen string; not in a column of bools on cuDF, which holds one type a column (it refuses the mix)
        strs = pd.api.types.infer_dtype(test[c], skipna=True) in ('string', 'empty')
        if test[c].dtype == object and (strs or backend == 'pandas'): test.loc[::3, c] = 'never_seen'
        elif test[c].dtype.kind in 'if': test.loc[::3, c] = 12345
    test = test[[c for c in test if not c.startswith('x')] + [c for c in test if c.startswith('x') and c in ref.na_dict]
                + [c for c in test if c.startswith('x') and c not in ref.na_dict]]
    for c in kw['cont_names']:   # NaN only where FillMissing learned a fill value (else both refuse)
        if c not in ref.na_dict: test[c] = test[c].fillna(0.)
    # our `new` casts the floats to the training frame's dtypes (fastai's keeps the float64 its shrink made float32 for
    # training, so a float category is all '#na#': a deliberate difference, see README): fastai given them is the rule
    ref_t, ours_t = ref.new(test.astype(ours.float_dtypes)), ours.new(to_backend(test.copy(), backend))
    ref_t.process(); ours_t.process()
    items = to_pandas(ours_t.items)
    for c in ref.cat_names:
        np.testing.assert_array_equal(items[c].to_numpy(), ref_t.items[c].to_numpy(), err_msg=c)
    for c in ref.cont_names:
        atol = cont_atol(ref, exact=backend == 'pandas', items=ref_t.items, names=[c])
        np.testing.assert_allclose(items[c].to_numpy().astype(np.float32),
                                   ref_t.items[c].to_numpy().astype(np.float32), rtol=1e-6, atol=atol, err_msg=c)

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(frames())
def test_random_frame_parity(case): _assert_parity(case, 'pandas')

@pytest.mark.cudf
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(frames())
def test_random_frame_parity_on_cudf(case):
    "The same frames as cuDF frames: fastai's TabularPandas on the pandas frame is the reference."
    _assert_parity(case, 'cudf')

def test_all_nan_training_column():
    "fastai fills an all-NaN column with NaN (a silent NaN into the model); we refuse, naming it."
    df = pd.DataFrame({'c': list('abcabc'), 'x': [np.nan] * 4 + [1., 2.], 'y': [1., 2, 3, 4, 5, 6]})
    kw = dict(cont_names=['x'], y_names='y', splits=([0, 1, 2, 3], [4, 5]))
    ref = TabularPandas(df, procs=[Categorify, FillMissing, Normalize], cat_names=['c'], **kw)
    assert np.isnan(ref.na_dict['x']) and ref.items['x'].isna().all()
    with pytest.raises(ValueError, match=r"'x' is entirely NaN in the training rows"):
        TabularGPU(df, procs=[Categorify, FillMissing, Normalize], cat_names=['c'], **kw)
