"""`TargetEncode` against scikit-learn's `TargetEncoder` on real data (Adult, MovieLens), on the same folds and
smoothing: the out-of-fold values of the training rows (`fit_transform`), the statistic of all training rows for the
validation rows, `new`, `test_dl` and `predict` (`transform`), and the learned encodings. Both add each category's
target in row order, so they agree exactly (NumPy's `bincount` is scikit-learn's loop); on cuDF, within the bound of
another order of addition."""
import numpy as np
import pandas as pd
import pytest
from fastai.data.transforms import Normalize, RandomSplitter
from fastai.learner import load_learner
from fastai.tabular.all import Categorify, FillMissing, TabularPandas
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.preprocessing import TargetEncoder
from fastai_gpu_tabular.all import TabularGPU, TargetEncode, tabular_learner
from fastai_gpu_tabular.backend import to_pandas
from fastai_gpu_tabular.datasets import load_movielens
from fastai_gpu_tabular.ops.target import target_encodings

SMOOTHS = ['auto', 10.0, 0.0]

@pytest.fixture(scope='module')
def ratings(): return load_movielens()

def _splits(df, seed=0): return RandomSplitter(seed=seed)(range(len(df)))

def _reference(df, splits, names, y, smooth, cv, target_type='auto'):
    "scikit-learn's out-of-fold training values, its values for the validation rows, and the fitted encoder."
    tr, va = df.iloc[splits[0]], df.iloc[splits[1]]
    ref = TargetEncoder(smooth=smooth, cv=cv, target_type=target_type)
    X = lambda d: d[names].astype(object)   # strings with NaN, as scikit-learn takes them
    return ref.fit_transform(X(tr), tr[y].to_numpy()), ref.transform(X(va)), ref

def _encoded(to, te) -> np.ndarray:
    return to_pandas(to.items[te.made_names]).to_numpy('f8')

def _start_atol(y, smooth) -> float:
    """How far CuPy's order of additions (atomic, none fixed) may move an m-smoothed encoding `(start + sum y) / (m +
    count)` from scikit-learn's (start first, then each row), for targets `y` >= 0 that are multiples of 1/2 (0/1
    classes, ratings) and start `m * mean`. Adding such a value to a partial sum is exact unless the sum's exponent
    grows, which it does at most log2(S / start) + 1 times on the way to the total S, losing at most half an ulp of S
    each time, in either order; the division rounds once more. So within (log2(S/start) + 1) ulp(S) / count + ulp of
    the encoding (at most max y), with S at most start + sum(y) and count >= m. With m = 0 (no start) the sums are
    exact."""
    start = smooth * float(y.mean())
    if not start: return 0.0
    s = start + float(y.sum())
    eps = np.finfo('f8').eps
    return (np.log2(s / start) + 1) * np.spacing(s) / smooth + 2 * eps * float(y.max())

@pytest.mark.parametrize('smooth', SMOOTHS)
def test_binary_adult_is_sklearns(adult, smooth, backend, as_backend):
    "Income (binary) by education and occupation (NaN a category): StratifiedKFold folds, exactly scikit-learn's."
    names, splits = ['education', 'occupation'], _splits(adult)
    oof, val, ref = _reference(adult, splits, names, 'income', smooth, StratifiedKFold(5, shuffle=True, random_state=0))
    te = TargetEncode(names, smooth=smooth, folds=5, seed=0)
    to = TabularGPU(as_backend(adult), procs=[te], cat_names=names, cont_names=['age'], y_names='income', splits=splits)
    assert te.target_type_ == 'binary' and list(te.target_classes) == list(ref.classes_)
    assert te.made_names == ['education_te', 'occupation_te'] and list(to.cont_names) == ['age', *te.made_names]
    got, n = _encoded(to, te), len(splits[0])
    # on cuDF a binary target's sums and counts are integers, exact in any order of addition but for the smoothed
    # start (see `_start_atol`); 'auto' also sums squared deviations (n_c of them, and N for the variance), which CuPy
    # adds in another order: each within 2 n u of the sum, which moves the weight lambda by at most
    # lambda (1-lambda) 2 (N + n_c) u, and the value (in [0, 1]) by a quarter of that
    atol = (0.5 * (n + n) + 4) * np.finfo('f8').eps if smooth == 'auto' else _start_atol(adult['income'].eq(
        ref.classes_[1]).iloc[splits[0]], smooth)
    if backend != 'cudf': atol = 0
    np.testing.assert_allclose(got[:n], oof, rtol=0, atol=atol)
    np.testing.assert_allclose(got[n:], val, rtol=0, atol=atol)
    assert te.target_mean == ref.target_mean_
    na = lambda vals: [None if pd.isna(v) else v for v in vals]
    for i,c in enumerate(names):
        enc = te.encodings[c]
        assert na(enc.index) == na(ref.categories_[i])   # NaN a category, last in both
        np.testing.assert_allclose(enc[f'{c}_te'].to_numpy(), ref.encodings_[i], rtol=0, atol=atol)

@pytest.mark.parametrize('smooth', SMOOTHS)
def test_regression_movielens_is_sklearns(ratings, smooth, backend, as_backend):
    "Ratings (continuous) by user and movie ID: KFold folds, exactly scikit-learn's."
    names, splits = ['userId', 'movieId'], _splits(ratings, seed=1)
    oof, val, ref = _reference(ratings, splits, names, 'rating', smooth, KFold(5, shuffle=True, random_state=3))
    te = TargetEncode(names, smooth=smooth, folds=5, seed=3)
    to = TabularGPU(as_backend(ratings), procs=[te, Categorify], cat_names=names, y_names='rating', splits=splits)
    assert te.target_type_ == 'continuous' and te.target_classes is None
    got, n = _encoded(to, te), len(splits[0])
    # on cuDF: ratings are halves, so their sums are exact in any order; 'auto' also sums squared deviations, as in
    # the binary test, moving a value by at most a quarter of 2 (N + n_c) u times the ratings' range, plus the last
    # few roundings (4 u of the largest rating)
    y = ratings['rating']
    atol = (0.5 * (n + n) * (y.max() - y.min()) + 4 * y.abs().max()) * np.finfo('f8').eps if smooth == 'auto' else \
        _start_atol(y.iloc[splits[0]], smooth)
    if backend != 'cudf': atol = 0
    np.testing.assert_allclose(got[:n], oof, rtol=0, atol=atol)
    np.testing.assert_allclose(got[n:], val, rtol=0, atol=atol)
    for i,c in enumerate(names):
        np.testing.assert_allclose(te.encodings[c][f'{c}_te'].to_numpy(), ref.encodings_[i], rtol=0, atol=atol)

@pytest.mark.parametrize('smooth', ['auto', 5.0])
def test_multiclass_adult_is_sklearns(adult, smooth):
    "Race (5 classes) by native country and occupation: a column per class in scikit-learn's order, exactly its values."
    names, splits = ['native-country', 'occupation'], _splits(adult, seed=2)
    oof, val, ref = _reference(adult, splits, names, 'race', smooth, StratifiedKFold(4, shuffle=True, random_state=7))
    te = TargetEncode(names, smooth=smooth, folds=4, seed=7)
    to = TabularGPU(adult, procs=[te], cat_names=names, y_names='race', splits=splits)
    assert te.target_type_ == 'multiclass' and list(te.target_classes) == list(ref.classes_)
    assert te.made_names == [f'{c}_te_{k}' for c in names for k in ref.classes_]
    got, n = _encoded(to, te), len(splits[0])
    np.testing.assert_array_equal(got[:n], oof)
    np.testing.assert_array_equal(got[n:], val)
    np.testing.assert_array_equal(te.target_mean, ref.target_mean_)
    # scikit-learn's encodings_: feature-major, a class per entry
    ours = [e for c in names for e in te.encodings[c].to_numpy().T]
    assert len(ours) == len(ref.encodings_)
    for a,b in zip(ours, ref.encodings_): np.testing.assert_array_equal(a, b)

def test_later_frames_get_the_full_statistic(adult):
    """Only the rows of the object set up get out-of-fold values: the same training rows through `new` (as `test_dl`)
    get scikit-learn's `fit(...).transform`, and `folds=0` gives them that at set-up too."""
    names, splits = ['education', 'occupation'], _splits(adult)
    tr = adult.iloc[splits[0]]
    full = TargetEncoder(smooth=20.0).fit(tr[names].astype(object), tr['income']).transform(tr[names].astype(object))
    te = TargetEncode(names, smooth=20.0)
    to = TabularGPU(adult, procs=[te], cat_names=names, y_names='income', splits=splits)
    assert not np.array_equal(_encoded(to, te)[:len(tr)], full)   # out-of-fold at set-up
    again = to.new(tr)
    again.process()
    np.testing.assert_array_equal(_encoded(again, te), full)
    te0 = TargetEncode(names, smooth=20.0, folds=0)
    to0 = TabularGPU(adult, procs=[te0], cat_names=names, y_names='income', splits=splits)
    np.testing.assert_array_equal(_encoded(to0, te0)[:len(tr)], full)

def test_unseen_and_missing_categories(adult):
    "A category unseen in training gets the global mean, a missing one its own learned value: scikit-learn's transform."
    names, splits = ['education', 'occupation'], _splits(adult)
    _, _, ref = _reference(adult, splits, names, 'income', 'auto', StratifiedKFold(5, shuffle=True, random_state=0))
    test = adult.iloc[splits[1]].copy()
    test.loc[test.index[::3], 'education'] = 'Not-a-degree'
    test.loc[test.index[1::3], 'occupation'] = np.nan
    te = TargetEncode(names)
    to = TabularGPU(adult, procs=[te, Categorify], cat_names=names, y_names='income', splits=splits)
    dl = to.new(test)
    dl.process()
    got = _encoded(dl, te)
    np.testing.assert_array_equal(got, ref.transform(test[names].astype(object)))
    assert (got[::3, 0] == te.target_mean).all()

def test_fastais_tabularpandas_gets_the_same(adult):
    "The proc runs on fastai's own TabularPandas too, with the same values."
    names, splits = ['education', 'occupation'], _splits(adult)
    kw = dict(cat_names=names, cont_names=['age'], y_names='income', splits=splits)
    a, b = TargetEncode(names), TargetEncode(names)
    ours = TabularGPU(adult, procs=[a, Categorify, Normalize], **kw)
    theirs = TabularPandas(adult, procs=[b, Categorify, Normalize], **kw)
    assert list(ours.cont_names) == list(theirs.cont_names) == ['age', 'education_te', 'occupation_te']
    np.testing.assert_array_equal(ours.items[b.made_names].to_numpy(), theirs.items[b.made_names].to_numpy())

def test_normalize_scales_the_encodings_whatever_the_list_order(adult):
    "fastai orders procs by `order`: TargetEncode (0) runs before Categorify (1) and Normalize (99) even listed last."
    names, splits = ['education'], _splits(adult)
    te = TargetEncode(names)
    to = TabularGPU(adult, procs=[Normalize, Categorify, te], cat_names=names, cont_names=['age'], y_names='income',
                    splits=splits)
    assert [type(p).__name__ for p in to.procs.fs][:2] == ['TargetEncode', 'Categorify']
    raw = TabularGPU(adult, procs=[TargetEncode(names)], cat_names=names, y_names='income', splits=splits)
    oof = raw.items['education_te'].iloc[:len(splits[0])]
    assert to.means['education_te'] == oof.mean()   # learned from the out-of-fold values Normalize was set up on
    x, m = raw.items['education_te'], to.means['education_te']
    # four roundings (subtract, divide, multiply, add), each within u of a value no larger than |x| + |m|
    np.testing.assert_allclose(to.items['education_te'] * to.stds['education_te'] + m, x, rtol=0,
                               atol=4 * np.finfo('f8').eps * (x.abs().max() + abs(m)))
    assert to.items['education'].dtype.kind == 'i'   # the source column stays a cat, encoded by Categorify

def test_learner_predict_test_dl_export(adult, tmp_path):
    """tabular_learner takes the encodings as conts; `predict` of a raw row and `test_dl` use the full statistic; the
    learned state is plain host data, so `load_learner(cpu=True)` predicts the same."""
    names, splits = ['education', 'occupation'], _splits(adult)
    te = TargetEncode(names)
    to = TabularGPU(adult, procs=[te, Categorify, FillMissing, Normalize], cat_names=names + ['workclass'],
                    cont_names=['age', 'hours-per-week'], y_names='income', splits=splits)
    dls = to.dataloaders(bs=1024)
    learn = tabular_learner(dls, layers=[20])
    assert learn.model.layers[0][0].in_features == sum(e.embedding_dim for e in learn.model.embeds) + 4
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    row = adult.iloc[splits[1][5]]
    full = te.encodings['education'].loc[row['education'], 'education_te']
    dl = learn.dls.test_dl(adult.iloc[splits[1][:50]])
    x = dl.one_batch()[1]
    i = list(dl.dataset.cont_names).index('education_te')
    assert x[5, i].item() == pytest.approx((full - to.means['education_te']) / to.stds['education_te'], rel=1e-6)
    learn.export(tmp_path/'te.pkl')
    loaded = load_learner(tmp_path/'te.pkl', cpu=True)
    assert loaded.dls.train_ds.procs.target_type_ == 'binary'
    learn.dls.cpu()   # the learner on the host too, as load_learner(cpu=True) puts its copy: cuBLAS rounds unlike it
    assert (loaded.predict(row)[2] == learn.predict(row)[2]).all()

def test_defaults_encode_the_single_hot_cats():
    """`TargetEncode` with no names encodes every single-hot cat column, not FillMissing's `_na` flags, whichever runs
    first; flights' origin (three airports) by carrier and destination, a column per airport."""
    from fastai_gpu_tabular.datasets import load_flights
    df = load_flights(nrows=20000)
    kw = dict(cat_names=['carrier', 'dest'], cont_names=['dep_delay'], y_names='origin')
    for procs in ([FillMissing, TargetEncode, Categorify], [TargetEncode, FillMissing, Categorify]):
        to = TabularGPU(df, procs=procs, **kw)
        te = next(p for p in to.procs.fs if isinstance(p, TargetEncode))
        assert list(te.encodings) == ['carrier', 'dest'] and 'dep_delay_na' in to.cat_names
        assert te.made_names == [f'{c}_te_{o}' for c in ('carrier', 'dest') for o in ('EWR', 'JFK', 'LGA')]

def test_target_encodings_is_the_documented_formula(ratings):
    "With smooth m: (sum + m * mean) / (count + m) per category, from pandas' own groupby."
    y, codes = ratings['rating'].to_numpy(), pd.factorize(ratings['userId'])[0]
    got = target_encodings(codes, y, codes.max() + 1, 7.5)
    g = pd.Series(y).groupby(codes).agg(['sum', 'count'])
    want = (g['sum'] + 7.5 * y.mean()) / (g['count'] + 7.5)
    # two additions and a division apart from row order: within a few ulps of the values' size per category
    np.testing.assert_allclose(got, want, rtol=0, atol=(g['count'].max() + 4) * np.finfo('f8').eps * 5)

# --- errors, before any work, the caller's frame untouched -----------------------------------------------------------
def test_bad_arguments():
    for kw in (dict(smooth=-1.0), dict(smooth='bayes'), dict(folds=1), dict(folds=-2), dict(target_type='ordinal')):
        with pytest.raises(ValueError, match=list(kw)[0]): TargetEncode(**kw)

def test_bad_input_names_the_column_and_leaves_the_frame(adult):
    df = adult.iloc[:2000].copy()
    df.loc[df.index[7], 'income'] = np.nan
    before = df.copy()
    with pytest.raises(ValueError, match="'income'"):
        TabularGPU(df, procs=[TargetEncode(['education'])], cat_names=['education'], y_names='income')
    with pytest.raises(ValueError, match="'income'"):   # fastai's TabularPandas: TargetEncode's own check
        TabularPandas(df, procs=[TargetEncode(['education'])], cat_names=['education'], y_names='income')
    ok = adult.iloc[:2000].copy()
    with pytest.raises(KeyError, match="'educashun'"):
        TabularGPU(ok, procs=[TargetEncode(['educashun'])], cat_names=['education'], y_names='income')
    with pytest.raises(ValueError, match='one target'):
        TabularGPU(ok, procs=[TargetEncode(['education'])], cat_names=['education'], cont_names=['fnlwgt'],
                   y_names=['age', 'hours-per-week'])
    pd.testing.assert_frame_equal(df, before)
    to = TabularGPU(ok, procs=[TargetEncode(['education']), Categorify], cat_names=['education'], y_names='income')
    pd.testing.assert_frame_equal(ok, adult.iloc[:2000])
    to.new(ok).process()
    pd.testing.assert_frame_equal(ok, adult.iloc[:2000])

ONNX_CASES = {'adult': ('income', ['education', 'occupation'], ['age']),            # strings, NaN a category
              'adult-race': ('race', ['native-country'], ['age']),                    # a column per class
              'movielens': ('rating', ['userId', 'movieId'], [])}                     # int64 keys

@pytest.mark.parametrize('case', list(ONNX_CASES))
def test_export_onnx_encodes_like_test_dl(adult, ratings, case, tmp_path):
    """`export_onnx`'s graph from raw columns (unseen and missing categories among them) gives the conts and cat codes
    `test_dl` packs, exactly: the same float64 encodings, Normalize's float64 arithmetic, one cast to float32."""
    ort = pytest.importorskip('onnxruntime')
    import onnx
    from fastai_gpu_tabular.all import export_onnx, onnx_inputs
    y, names, conts = ONNX_CASES[case]
    df = ratings if case == 'movielens' else adult
    splits = _splits(df)
    to = TabularGPU(df, procs=[TargetEncode(names), Categorify, FillMissing, Normalize], cat_names=names,
                    cont_names=conts, y_names=y, splits=splits)
    learn = tabular_learner(to.dataloaders(bs=1024), layers=[8])
    test = df.iloc[splits[1][:3000]].drop(columns=y).copy()
    if case != 'movielens':   # a category no training row has, and missing ones
        test.loc[test.index[::7], names[0]] = 'Not-in-training'
        test.loc[test.index[3::7], names[0]] = np.nan
    else: test.loc[test.index[::7], 'movieId'] = -5
    path = export_onnx(learn, tmp_path/'te.onnx')
    model = onnx.load(str(path))
    model.graph.output.extend([onnx.helper.make_tensor_value_info(f'fgt/{k}', t, None)
                               for k,t in (('x_cat', onnx.TensorProto.INT64), ('x_cont', onnx.TensorProto.FLOAT))])
    sess = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])
    x_cat, x_cont = sess.run(['fgt/x_cat', 'fgt/x_cont'], onnx_inputs(test, sess))
    dl = learn.dls.test_dl(test, bs=len(test))
    b = dl.one_batch()
    np.testing.assert_array_equal(x_cat, b[0].cpu().numpy())   # the batch is on the loaders' device
    np.testing.assert_array_equal(x_cont, b[1].cpu().numpy())

def test_bench_suite_small():
    "`python -m fastai_gpu_tabular.bench --suite target` at a small size: both encoders ran and agree bit for bit."
    from fastai_gpu_tabular.bench.target import format_table, target_suite
    res = target_suite(rows=20_000, names=('C4', 'C16'), repeat=1)
    assert res['max_abs_diff'] == 0 and set(res['results']) == {'sklearn TargetEncoder', 'TargetEncode'}
    assert 'TargetEncode' in format_table(res)
