"The Criteo-like generator: the shape, types, missing rates and determinism its docstring and the README state."
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score
from fastai_gpu_tabular.datasets import criteo_names, make_criteo

N, MAX_CARD = 20_000, 100_000
SD = 0.5 / np.sqrt(N)   # the largest binomial sd of a rate over N rows: 0.0035

@pytest.fixture(scope='module')
def criteo(): return make_criteo(N, seed=3, max_card=MAX_CARD)

def test_shape_and_types(criteo):
    "A click label, 13 counts I1..I13, 26 categories C1..C26 of 8 hex digits, in that order."
    cats, conts, y = criteo_names()
    assert criteo.shape == (N, 40) and list(criteo.columns) == [y, *conts, *cats]
    assert criteo[y].dtype == np.int8 and set(criteo[y].unique()) == {0, 1}
    x = criteo[conts]
    assert (x.dtypes == np.float64).all() and (x.min() >= 0).all() and (x.dropna() % 1 == 0).all().all()   # counts
    assert (x.max() > 10 * x.median().clip(lower=1)).all()                                             # heavy tails
    assert pd.concat([criteo[c].dropna() for c in cats]).str.fullmatch('[0-9a-f]{8}').all()

def test_missing_rates_and_cardinalities(criteo):
    "15-40% NaN in each count, 0-30% missing in each category; cardinalities log-spaced from 10 to max_card, power law."
    cats, conts, y = criteo_names()
    nan = criteo[conts].isna().mean()
    assert nan.between(0.15 - 5 * SD, 0.40 + 5 * SD).all(), nan.round(3).tolist()
    assert criteo[cats].isna().mean().between(0, 0.30 + 5 * SD).all()
    assert nan.max() - nan.min() > 0.1                   # each column draws its own rate
    card, spaced = criteo[cats].nunique().to_numpy(), np.geomspace(10, MAX_CARD, 26).round()
    assert (card <= spaced).all() and card[0] == 10 and card[-1] > 5_000   # a 100k vocabulary: 20k rows see 10k of it
    top = criteo[cats].apply(lambda c: c.value_counts(normalize=True).iloc[0]).to_numpy()
    assert (top > 2 / spaced).all() and top[-1] > 1000 / spaced[-1]   # power law: the top value far above uniform

def test_label_depends_on_features(criteo):
    "The label: clicks and non-clicks in Criteo-like proportions; a category's click rate predicts it on new rows."
    cats, conts, y = criteo_names()
    assert 0.2 < criteo[y].mean() < 0.45
    a, b = criteo.iloc[:N // 2], criteo.iloc[N // 2:]
    rate = b['C4'].map(a.groupby('C4')[y].mean()).fillna(a[y].mean())   # C4: one of the columns with a propensity
    assert roc_auc_score(b[y], rate) > 0.6

def test_seeded():
    "The same seed gives the same frame; another seed another frame."
    a, b, c = (make_criteo(3000, seed=s, max_card=10_000) for s in (1, 1, 2))
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c) and (a['C26'] != c['C26']).mean() > 0.5
