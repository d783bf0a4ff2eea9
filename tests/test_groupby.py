"""`JoinGroupby` against pandas' own groupby of the training rows, on Adult: per category the count, mean and std
(ddof 0) of a cont, joined back; missing categories are one, unseen ones get the statistic of all training rows."""
import numpy as np
import pandas as pd
import pytest
import torch
from fastai.data.transforms import Normalize, RandomSplitter
from fastai.tabular.all import Categorify, FillMissing
from fastai_gpu_tabular.all import JoinGroupby, TabularGPU
from fastai_gpu_tabular.backend import to_pandas
from fastai_gpu_tabular.datasets import load_adult, load_flights

def _want(train, rows, n, x):
    "pandas: the training rows' groupby, looked up for `rows` (unseen: the statistic of all training rows)."
    by = train.groupby(train[n].astype(object).fillna('<missing>'))[x]
    g = pd.DataFrame({'count': by.count(), 'mean': by.mean(), 'std': by.std(ddof=0)})
    keys = rows[n].astype(object).fillna('<missing>')
    res = g.reindex(keys).set_axis(rows.index)
    whole = {'count': 0., 'mean': train[x].mean(), 'std': train[x].std(ddof=0)}
    return {s: res[s].fillna(whole[s]).to_numpy('f8') for s in ('count', 'mean', 'std')}

def test_adult_is_pandas_groupby(backend, as_backend):
    df = load_adult().assign(age=lambda d: d['age'].astype('float64'))
    splits = RandomSplitter(seed=0)(range(len(df)))
    test = df.iloc[splits[1]].copy()
    test.loc[test.index[::9], 'occupation'] = 'Not-an-occupation'
    jg = JoinGroupby(['occupation', 'education'], ['age', 'hours-per-week'])
    to = TabularGPU(as_backend(df), procs=[jg, Categorify], cat_names=['occupation', 'education'],
                    cont_names=['age', 'hours-per-week'], y_names='income', splits=splits)
    assert list(to.cont_names) == ['age', 'hours-per-week', *jg.made_names] and len(jg.made_names) == 12
    new = to.new(as_backend(test))
    new.process()
    train = df.iloc[splits[0]]
    u, n = np.finfo('f8').eps / 2, len(train)
    for name in ('occupation', 'education'):
        for x in ('age', 'hours-per-week'):
            for rows,got in ((train, to_pandas(to.items).iloc[:n]), (test, to_pandas(new.items))):
                want, c = _want(train, rows, name, x), f'{name}_{x}'
                np.testing.assert_array_equal(got[f'{c}_count'].to_numpy(), want['count'], err_msg=c)
                if backend == 'pandas':   # the same groupby of the same rows: pandas' own arithmetic
                    for s in ('mean', 'std'): np.testing.assert_array_equal(got[f'{c}_{s}'].to_numpy(), want[s], c)
                    continue
                # cuDF adds in another order (and may square first): each of a category's sums (at most n terms) is
                # within (n + 4) u of the sum of the terms' magnitudes, so the mean within (n + 4) u max|x| and the
                # variance (the squared std, either formula) within 2 (n + 4) u max x^2, doubled for pandas' error
                big = float(train[x].abs().max())
                np.testing.assert_allclose(got[f'{c}_mean'], want['mean'], rtol=0, atol=2 * (n + 4) * u * big)
                np.testing.assert_allclose(got[f'{c}_std'] ** 2, want['std'] ** 2, rtol=0,
                                           atol=4 * (n + 4) * u * big ** 2)

def test_missing_values_and_normalize():
    "NaN in the cont is skipped (FillMissing runs after it), the new columns are normalised; errors name columns."
    df = load_flights(nrows=20000)
    jg = JoinGroupby('carrier', 'dep_delay', stats=('mean',))
    to = TabularGPU(df, procs=[FillMissing, Normalize, Categorify, jg], cat_names=['carrier'],
                    cont_names=['dep_delay'], y_names='distance')
    want = df['carrier'].map(df.groupby('carrier')['dep_delay'].mean())
    c = 'carrier_dep_delay_mean'
    # Normalize there and back: four roundings, each within u of a value no larger than |x| + |mean|
    np.testing.assert_allclose(to.items[c] * to.stds[c] + to.means[c], want, rtol=0,
                               atol=4 * np.finfo('f8').eps * (want.abs().max() + abs(to.means[c])))
    with pytest.raises(KeyError, match='nope'):
        TabularGPU(df, procs=[JoinGroupby('carrier', 'nope')], cat_names=['carrier'], y_names='distance')
    with pytest.raises(ValueError, match='median'): JoinGroupby('carrier', 'dep_delay', stats=('median',))

def test_cont_with_no_training_value():
    "A cont missing in every training row has no statistic: an error naming it, the caller's frame untouched."
    df = load_flights(nrows=2000)
    df.loc[df.index[:1500], 'dep_delay'] = np.nan
    before = df.copy()
    with pytest.raises(ValueError, match=r"JoinGroupby: continuous column\(s\) \['dep_delay'\] are entirely NaN"):
        TabularGPU(df, procs=[JoinGroupby('carrier', 'dep_delay'), FillMissing], cat_names=['carrier'],
                   cont_names=['dep_delay'], y_names='distance', splits=(range(1500), range(1500, 2000)))
    pd.testing.assert_frame_equal(df, before)

@pytest.fixture(scope='module')
def adult_nan():
    "Adult's first 6,000 rows with NaN in two conts (occupation has its own missing categories)."
    df = load_adult().iloc[:6000].copy()
    df['age'] = df['age'].astype('float64')
    df.loc[df.index[::13], 'age'] = np.nan
    df['fnlwgt'] = df['fnlwgt'].astype('float64')
    df.loc[df.index[5::17], 'fnlwgt'] = np.nan
    return df

def test_export_onnx_joins_like_test_dl(adult_nan, tmp_path):
    """`export_onnx`'s graph from raw columns (unseen and missing categories, NaN conts, a cont grouped by as a
    category) gives the conts and cat codes `test_dl` packs, exactly (the same float64 values, Normalize's float64
    arithmetic, one cast to float32), and so `get_preds`' predictions. JoinGroupby runs on the raw values, before
    FillMissing, and Normalize scales its columns."""
    ort = pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    import onnx
    from fastai_gpu_tabular.all import export_onnx, onnx_inputs, tabular_learner
    df = adult_nan
    splits = RandomSplitter(seed=0)(range(len(df)))
    names, conts = ['occupation', 'education'], ['age', 'fnlwgt', 'educational-num']
    procs = [Categorify, FillMissing, Normalize, JoinGroupby(names, ['age', 'fnlwgt']),
             JoinGroupby('educational-num', 'age', stats=('mean',))]
    to = TabularGPU(df, procs=procs, cat_names=names, cont_names=conts, y_names='income', splits=splits)
    assert {'age_na', 'fnlwgt_na'} <= set(to.cat_names)   # FillMissing saw the raw NaN: JoinGroupby skipped them
    torch.manual_seed(0)
    learn = tabular_learner(to.dataloaders(bs=512), layers=[8])
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-2)
    test = df.iloc[splits[1]].drop(columns='income').copy()
    test.loc[test.index[::7], 'occupation'] = 'Not-an-occupation'
    test.loc[test.index[3::7], 'occupation'] = np.nan
    test.loc[test.index[5::7], 'educational-num'] = 99   # a number no training row has
    path = export_onnx(learn, tmp_path/'jg.onnx')
    model = onnx.load(str(path))
    model.graph.output.extend([onnx.helper.make_tensor_value_info(f'fgt/{k}', t, None)
                               for k,t in (('x_cat', onnx.TensorProto.INT64), ('x_cont', onnx.TensorProto.FLOAT))])
    sess = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])
    assert {i.name for i in sess.get_inputs()} == {*names, *conts}   # the raw columns, nothing more
    x_cat, x_cont, preds = sess.run(['fgt/x_cat', 'fgt/x_cont', 'preds'], onnx_inputs(test, sess))
    dl = learn.dls.test_dl(test, bs=len(test))
    b = dl.one_batch()
    np.testing.assert_array_equal(x_cat, b[0].cpu().numpy())   # the batch is on the loaders' device
    np.testing.assert_array_equal(x_cont, b[1].cpu().numpy())
    with learn.no_bar(): want = learn.get_preds(dl=dl)[0].numpy()
    # the same float32 inputs; the model's float32 arithmetic in two engines (the tolerance of tests/test_export.py)
    np.testing.assert_allclose(preds, want, atol=1e-5, rtol=0)
    # the rows hold what the test claims: unseen occupations counted 0, missing ones the missing category's count
    jg = to.procs.fs[0]
    got = jg.joined(test)['occupation_age_count']
    assert (got.iloc[::7] == 0).all() and pd.isna(jg.groups['occupation'].index[-1])
    assert (got.iloc[3::7] == jg.groups['occupation']['occupation_age_count'].iloc[-1]).all()

def test_bench_suite_small():
    """`python -m fastai_gpu_tabular.bench --suite groupby` at a small size: the pandas recipe a user writes (groupby,
    merge, unseen categories filled) and JoinGroupby give the same values, bit for bit."""
    from fastai_gpu_tabular.bench.groupby import format_table, groupby_suite
    res = groupby_suite(rows=20_000, names=('C4', 'C16'), conts=('I1', 'I5'), repeat=1)
    assert res['columns'] == 12 and res['max_abs_diff'] == 0
    assert set(res['results']) == {'pandas groupby + merge', 'JoinGroupby'} and 'JoinGroupby' in format_table(res)

STATS = ('count', 'sum', 'mean', 'std', 'var', 'min', 'max')

def _want_key(train, rows, cols, x):
    """pandas: the training rows' groupby on the key columns `cols` (a missing part a value), every statistic, looked
    up for `rows`; unseen: count and sum 0, the others the statistic of all training rows."""
    key = lambda d: [d[c].astype(object).fillna('<missing>') for c in cols]
    by = train[x].groupby(key(train))
    g = pd.DataFrame({s: getattr(by, s)(**({'ddof': 0} if s in ('std', 'var') else {})) for s in STATS})
    idx = pd.MultiIndex.from_arrays(key(rows)) if len(cols) > 1 else key(rows)[0]
    res = g.reindex(idx).set_axis(rows.index)
    v = train[x]
    whole = {'count': 0., 'sum': 0., 'mean': v.mean(), 'std': v.std(ddof=0), 'var': v.var(ddof=0), 'min': v.min(),
             'max': v.max()}
    return {s: res[s].fillna(whole[s]).to_numpy('f8') for s in STATS}

def test_every_stat_and_a_key_of_two_columns(backend, as_backend):
    """sum, var, min and max beside count, mean and std, and a key of two columns (no cross made first), named
    `a_b_x_stat`: pandas' groupby of the training rows, for training rows and a later frame with unseen pairs."""
    df = load_adult().iloc[:8000].assign(age=lambda d: d['age'].astype('float64'))
    df.loc[df.index[::7], 'age'] = np.nan
    splits = RandomSplitter(seed=0)(range(len(df)))
    test = df.iloc[splits[1]].copy()
    test.loc[test.index[::5], 'education'] = 'Not-an-education'
    jg = JoinGroupby(['occupation', ['education', 'gender']], 'age', stats=STATS)
    before = df.copy()
    to = TabularGPU(as_backend(df), procs=[jg, FillMissing], cat_names=['occupation', 'education', 'gender'],
                    cont_names=['age'],
                    y_names='income', splits=splits)
    pd.testing.assert_frame_equal(df, before)
    assert jg.made_names == [f'{k}_age_{s}' for k in ('occupation', 'education_gender') for s in STATS]
    new = to.new(as_backend(test))
    new.process()
    train, n = df.iloc[splits[0]], len(splits[0])
    u, big = np.finfo('f8').eps / 2, float(train['age'].abs().max())
    for cols in (['occupation'], ['education', 'gender']):
        for rows,got in ((train, to_pandas(to.items).iloc[:n]), (test, to_pandas(new.items))):
            want, c = _want_key(train, rows, cols, 'age'), '_'.join(cols) + '_age'
            for s in STATS:
                a = got[f'{c}_{s}'].to_numpy()
                if backend == 'pandas' or s in ('count', 'min', 'max'): np.testing.assert_array_equal(a, want[s], c + s)
                else:   # cuDF adds in another order: test_adult_is_pandas_groupby's bounds (a sum: n times the mean's)
                    tol = {'sum': 2 * (n + 4) * u * big * n, 'mean': 2 * (n + 4) * u * big,
                           'var': 4 * (n + 4) * u * big ** 2}
                    if s == 'std': a, w, t = a ** 2, want[s] ** 2, tol['var']
                    else: w, t = want[s], tol[s]
                    np.testing.assert_allclose(a, w, rtol=0, atol=t, err_msg=c + s)
    unseen = test['education'].eq('Not-an-education').to_numpy()
    assert (to_pandas(new.items)['education_gender_age_count'].to_numpy()[unseen] == 0).all()

def test_key_options_are_checked():
    with pytest.raises(TypeError, match='names'): JoinGroupby([['a', 2]], 'x')
    with pytest.raises(ValueError, match='median'): JoinGroupby('a', 'x', stats=('sum', 'median'))
    assert JoinGroupby([['a']], 'x').names == ['a']   # one column in a list is that column

def test_saved_and_loaded_with_a_key_of_two_columns(tmp_path):
    "The groups of a two-column key (a MultiIndex with missing parts) and the new stats survive save and load."
    df = load_adult().iloc[:3000].assign(age=lambda d: d['age'].astype('float64'))
    jg = JoinGroupby([['occupation', 'gender'], 'education'], 'age', stats=STATS)
    to = TabularGPU(df, procs=[jg, Categorify], cat_names=['occupation', 'gender', 'education'], cont_names=['age'],
                    y_names='income')
    to.save(tmp_path/'t')
    back = TabularGPU.load(tmp_path/'t')
    jb = next(p for p in back.procs.fs if isinstance(p, JoinGroupby))
    assert jb.names == jg.names and jb.defaults == jg.defaults
    for n,g in jg.groups.items():   # the index's values (a categorical's come back as its values)
        assert list(map(str, jb.groups[n].index)) == list(map(str, g.index))
        np.testing.assert_array_equal(jb.groups[n].to_numpy(), g.to_numpy())
    pd.testing.assert_frame_equal(jb.joined(df), jg.joined(df), check_exact=True)

def test_export_onnx_refuses_a_key_of_two_columns(tmp_path):
    pytest.importorskip('onnx')
    from fastai_gpu_tabular.all import export_onnx, tabular_learner
    df = load_adult().iloc[:2000].assign(age=lambda d: d['age'].astype('float64'))
    to = TabularGPU(df, procs=[JoinGroupby([['occupation', 'gender']], 'age'), Categorify],
                    cat_names=['occupation', 'gender'], cont_names=['age'], y_names='income')
    learn = tabular_learner(to.dataloaders(bs=256), layers=[4])
    with pytest.raises(TypeError, match=r"\['occupation', 'gender'\]"): export_onnx(learn, tmp_path/'m.onnx')
