"Helpers for the drop-in tests: fastai's tabular notebooks as a user's checklist, run on TabularPandas and TabularGPU."
import fastai.tabular.core as ftc
import fastai.tabular.learner as ftl
import numpy as np
import pandas as pd
import pytest
import fastai_gpu_tabular.core as fgc
from fastai_gpu_tabular.backend import to_pandas
from fastai_gpu_tabular.datasets import load_adult

# the columns of fastai's tabular notebooks (the adult sample; its `education-num` is `educational-num` here)
CATS = ['workclass', 'education', 'marital-status', 'occupation', 'relationship', 'race']
CONTS = ['age', 'fnlwgt', 'educational-num']

def adult(n=5000, nan_frac=0.08, seed=0):
    """The first `n` rows of UCI Adult, with NaN in `educational-num` at a seeded `nan_frac` of the rows (fastai's
    adult sample has NaN there; this copy has none) and `income` as fastai's `salary`-like string target."""
    df = load_adult().iloc[:n].reset_index(drop=True)
    df['educational-num'] = df['educational-num'].astype(float)
    df.loc[np.random.default_rng(seed).random(n) < nan_frac, 'educational-num'] = np.nan
    return df

def capture_display(monkeypatch) -> list:
    "What `show`, `show_batch` and `show_results` display, fastai's and ours, as a list of frames."
    shown = []
    for m in (ftc, ftl, fgc): monkeypatch.setattr(m, 'display_df', lambda df: shown.append(df.copy()))
    return shown

def named(items, names) -> pd.DataFrame:
    "The `names` columns of a (pandas or cuDF) frame as a pandas frame, in that order."
    return to_pandas(items)[list(names)]

def assert_same_values(a, b, names, rtol=1e-6, atol=1e-6):
    "Frames `a` and `b` agree on the `names` columns: numbers within float32 tolerance, other values exactly."
    a,b = named(a, names),named(b, names)
    assert list(a.index) == list(b.index)
    for n in names:
        x,y = a[n].to_numpy(),b[n].to_numpy()
        if pd.api.types.is_numeric_dtype(a[n]) and pd.api.types.is_numeric_dtype(b[n]):
            np.testing.assert_allclose(x.astype(np.float64), y.astype(np.float64), rtol=rtol, atol=atol, err_msg=n)
        else: assert list(x) == list(y), n

def assert_same_state(ref, ours):
    "Names, learned state and processed values agree (parity's `assert_same_processing` also needs a target)."
    assert list(ours.cat_names) == list(ref.cat_names) and list(ours.cont_names) == list(ref.cont_names)
    assert {k: list(v) for k,v in ours.classes.items()} == {k: list(v) for k,v in ref.classes.items()}
    assert ours.na_dict == ref.na_dict
    assert ours.means == pytest.approx(ref.means) and ours.stds == pytest.approx(ref.stds)
    assert_same_values(ours.items, ref.items, list(ref.cat_names) + list(ref.cont_names))
