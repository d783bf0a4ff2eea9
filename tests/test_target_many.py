"""`TargetEncode` of several targets in one proc (`targets=`) and of a column group (`[['a', 'b']]`), against
scikit-learn's `TargetEncoder` on the same folds (a group against its encoder of the columns' cross), on pandas, cuDF
and Dask, and in serving (`new`, `test_dl`, a saved Tabular, an exported learner; ONNX for targets, refused for a
group)."""
import warnings
import numpy as np
import pandas as pd
import pytest
from fastai.data.transforms import Normalize
from fastai.learner import load_learner
from fastai.tabular.all import Categorify, FillMissing
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.preprocessing import TargetEncoder
from fastai_gpu_tabular.all import TabularGPU, TargetEncode, export_onnx, tabular_learner
from fastai_gpu_tabular.backend import to_pandas

N, NT = 4000, 3200
NAMES = ['education', ['occupation', 'gender']]   # occupation has NaN: a value of the group's own
KW = dict(cat_names=['education', 'occupation', 'gender'], cont_names=['age', 'hours-per-week'], y_names='income')

@pytest.fixture(scope='module')
def df(adult): return adult.iloc[:N].reset_index(drop=True)

def _splits(): return list(range(NT)), list(range(NT, N))

def _te(**kw): return TargetEncode(NAMES, targets=['income', 'hours-per-week'], **kw)

def _cross(d): return d.occupation.fillna('<NA>').astype(str) + '|' + d.gender.astype(str)

def test_targets_and_group_are_sklearns(df, backend, as_backend):
    "Each (name, target) is scikit-learn's encoder of that target: its out-of-fold values, then its transform."
    te = _te(folds=4, seed=1)
    to = TabularGPU(as_backend(df), procs=[te], splits=_splits(), **KW)
    assert te.made_names == ['education_te_income', 'occupation_gender_te_income', 'education_te_hours-per-week',
                             'occupation_gender_te_hours-per-week']
    X = pd.DataFrame({'education': df.education.astype(object), 'cross': _cross(df)})
    got = to_pandas(to.items[te.made_names]).to_numpy('f8')
    for j,(y,cv,kind) in enumerate([('income', StratifiedKFold, 'auto'), ('hours-per-week', KFold, 'continuous')]):
        ref = TargetEncoder(cv=cv(4, shuffle=True, random_state=1), target_type=kind)
        oof = ref.fit_transform(X.iloc[:NT], df[y].iloc[:NT].to_numpy())
        # cuDF's sums of squared deviations add in another order: within a few ulps
        tol = dict(rtol=1e-12) if backend == 'cudf' else dict(rtol=0, atol=0)
        np.testing.assert_allclose(got[:NT, 2*j:2*j+2], oof, **tol)
        np.testing.assert_allclose(got[NT:, 2*j:2*j+2], ref.transform(X.iloc[NT:]), **tol)

def test_bad_targets_and_groups(df):
    with pytest.raises(ValueError, match=r"TargetEncode\(targets\) takes distinct column names"):
        TargetEncode(targets=['income', 'income'])
    with pytest.raises(ValueError, match=r"groups of two or more, got \['race'\]"): TargetEncode([['race']])
    before = df.copy()
    with pytest.raises(KeyError, match=r"target column 'fnlwgt' is not in the frame: .* cont_names"):
        TabularGPU(df, procs=[TargetEncode(['education'], targets=['fnlwgt'])], **KW)
    with pytest.raises(KeyError, match=r"\['rase'\] are not in the frame"):
        TabularGPU(df, procs=[TargetEncode([['rase', 'gender']])], **KW)
    pd.testing.assert_frame_equal(df, before)

def test_serving_and_saved(df, tmp_path):
    "With folds=0 the training rows hold the full statistic: every later path gives those rows back, bit for bit."
    to = TabularGPU(df, procs=[_te(folds=0), Categorify, FillMissing, Normalize], splits=_splits(), **KW)
    learn = tabular_learner(to.dataloaders(bs=512), layers=[4])
    raw, want = df.drop(columns='income'), to.packed()
    new = to.new(raw)
    new.process()
    loaded = TabularGPU.load(to.save(tmp_path/'s', progress=False), progress=False)
    assert loaded.procs.fs[0].targets == ['income', 'hours-per-week']
    saved = loaded.new(raw)
    saved.process()
    learn.export(tmp_path/'m.pkl')
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', "load_learner` uses Python's insecure pickle", UserWarning)
        exported = load_learner(tmp_path/'m.pkl', cpu=True)
    for got in (new.packed()[:2], saved.packed()[:2], learn.dls.test_dl(raw, bs=N).one_batch()[:2],
                exported.dls.test_dl(raw, bs=N).one_batch()[:2]):
        for a,b in zip(got, want[:2]): np.testing.assert_array_equal(a.cpu().numpy(), b.cpu().numpy())
    with pytest.raises(TypeError, match=r"TargetEncode of the column group\(s\) \[\['occupation', 'gender'\]\]"):
        export_onnx(learn, tmp_path/'g.onnx')

def test_targets_export_onnx(df, tmp_path):
    ort = pytest.importorskip('onnxruntime')
    import onnx
    from fastai_gpu_tabular.all import onnx_inputs
    to = TabularGPU(df, procs=[TargetEncode(['education', 'occupation'], targets=['income', 'hours-per-week']),
                               Categorify, FillMissing, Normalize], splits=_splits(), **KW)
    learn = tabular_learner(to.dataloaders(bs=512), layers=[4])
    model = onnx.load(str(export_onnx(learn, tmp_path/'t.onnx')))
    model.graph.output.extend([onnx.helper.make_tensor_value_info('fgt/x_cont', onnx.TensorProto.FLOAT, None)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])
    test = df.iloc[NT:].drop(columns='income')
    x_cont, = sess.run(['fgt/x_cont'], onnx_inputs(test, sess))
    np.testing.assert_array_equal(x_cont, learn.dls.test_dl(test, bs=N).one_batch()[1].cpu().numpy())

def test_dask_bit_for_bit(df):
    dd = pytest.importorskip('dask.dataframe', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
    import dask
    frame = df.assign(is_valid=np.arange(N) >= NT)
    with dask.config.set({'dataframe.convert-string': False, 'scheduler': 'sync'}):
        dk = TabularGPU(dd.from_pandas(frame, npartitions=3, sort=False), procs=[_te(folds=3, seed=2), Categorify],
                        splits='is_valid', progress=False, **KW)
        mem = TabularGPU(df, procs=[_te(folds=3, seed=2), Categorify], splits=_splits(), **KW)
        cols = mem.procs.fs[0].made_names
        np.testing.assert_array_equal(to_pandas(dk.items[cols].compute()).to_numpy('f8'),
                                      to_pandas(mem.items[cols]).to_numpy('f8'))
