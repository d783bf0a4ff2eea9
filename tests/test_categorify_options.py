"""Categorify's per-column options (#54): `min_freq` / `max_vocab` as {column: count}, a vocabulary given per column
(`vocab`), and joint vocabularies (`joint`) with one embedding table per group; against fastai's own Categorify and
pandas, on pandas, cuDF and Dask, in training and serving."""
import warnings
import numpy as np
import pandas as pd
import pytest
import torch
from fastai.tabular.all import FillMissing, Normalize, TabularPandas, load_learner
from helpers.parity import cont_atol
import fastai_gpu_tabular.ops.procs as fgp
from fastai_gpu_tabular.all import Categorify, TabularGPU, tabular_learner
from fastai_gpu_tabular.backend import to_backend, to_pandas

N = 3000
CATS = ['workclass', 'education', 'occupation', 'native-country']
KW = dict(cat_names=CATS, cont_names=['age', 'hours-per-week'], y_names='income')

@pytest.fixture(scope='module')
def df(adult): return adult.iloc[:N].reset_index(drop=True)

def _splits(): return list(range(2400)), list(range(2400, N))

def _build(frame, procs, **kw): return TabularGPU(frame, procs=procs, splits=_splits(), **(KW | kw))

def test_per_column_counts_are_each_columns_own(df, as_backend):
    "A dict cuts only the columns it names, each as the scalar option on that column alone; the rest are fastai's."
    to = _build(as_backend(df), [Categorify(min_freq={'education': 40}, max_vocab={'native-country': 3}),
                                 FillMissing, Normalize])
    ref = TabularPandas(df, procs=[fgp.fatc.Categorify, FillMissing, Normalize], splits=_splits(), **KW)
    alone = lambda **o: _build(df, [Categorify(**o), FillMissing, Normalize]).classes
    assert list(to.classes['education']) == list(alone(min_freq=40)['education'])
    assert list(to.classes['native-country']) == list(alone(max_vocab=3)['native-country'])
    assert len(to.classes['native-country']) == 4 and len(to.classes['education']) < len(ref.classes['education'])
    for n in ('workclass', 'occupation'): assert list(to.classes[n]) == list(ref.classes[n]), n
    assert to_pandas(to.items)['workclass'].tolist() == ref.items['workclass'].tolist()

@pytest.mark.parametrize('opts,err,match', [
    (dict(min_freq={'education': 'x'}), ValueError, r"min_freq of 'education' must be a positive integer, got 'x'"),
    (dict(max_vocab={'education': 0}), ValueError, r"max_vocab of 'education' must be a positive integer, got 0"),
    (dict(max_vocab={3: 5}), TypeError, r"Categorify\(max_vocab\) is a dict by column name: its keys \[3\]"),
    (dict(vocab=['a']), TypeError, r"Categorify\(vocab\) must be a dict"),
    (dict(vocab={'education': 'HS-grad'}), TypeError, r"Categorify\(vocab\) of 'education' must be a list"),
    (dict(vocab={'education': ['a', 'a']}), ValueError, r"Categorify\(vocab\) of 'education' holds 'a' twice"),
    (dict(vocab={'education': ['a', None]}), ValueError, r"Categorify\(vocab\) of 'education' holds None"),
    (dict(joint=[['education']]), ValueError, r"joint\) takes groups of two or more column names"),
    (dict(joint=[['a', 'b'], ['b', 'c']]), ValueError, r"joint\) puts \['b'\] in two groups"),
    (dict(joint=[['a', 'b']], min_freq={'a': 2}), ValueError, r"Categorify\(min_freq\) differs over the joint group"),
])
def test_bad_options_name_the_option_and_column(opts, err, match):
    with pytest.raises(err, match=match): Categorify(**opts)

@pytest.mark.parametrize('opts,match', [
    (dict(min_freq={'educaton': 3}), r"Categorify\(min_freq\) names \['educaton'\]"),
    (dict(vocab={'age': [1]}), r"Categorify\(vocab\) names \['age'\]"),
    (dict(joint=[['education', 'x']]), r"Categorify\(joint\) names \['x'\]")])
def test_unknown_columns_refused_frame_unchanged(df, as_backend, opts, match):
    frame = as_backend(df)
    before = to_pandas(frame).copy()
    with pytest.raises(ValueError, match=match): _build(frame, [Categorify(**opts)])
    pd.testing.assert_frame_equal(to_pandas(frame), before)

def test_given_vocab_in_its_order(df, as_backend):
    "The vocabulary as given: codes are positions + 1, every other value (and a missing one) `#na#`."
    given = ['Masters', 'Bachelors', 'HS-grad', 'Never-seen']
    to = _build(as_backend(df), [Categorify(vocab={'education': given}, min_freq=50), FillMissing, Normalize])
    assert list(to.classes['education']) == ['#na#', *given]   # min_freq does not cut a given vocabulary
    ref = pd.Index(given).get_indexer(df.education) + 1
    assert to_pandas(to.items)['education'].tolist() == ref.tolist()
    assert list(to.classes['occupation']) == list(_build(df, [Categorify(min_freq=50)]).classes['occupation'])

def _serve_paths(to, raw, tmp_path):
    "The packed rows of `raw` through `new`, `test_dl`, a saved and loaded Tabular and an exported learner."
    learn = tabular_learner(to.dataloaders(bs=256), layers=[4])
    new = to.new(raw)
    new.process()
    res = {'new': new.packed()[0], 'test_dl': learn.dls.test_dl(raw, bs=len(raw)).one_batch()[0]}
    loaded = TabularGPU.load(to.save(tmp_path/'saved', progress=False), progress=False)
    t = loaded.new(raw)
    t.process()
    res['saved'] = t.packed()[0]
    learn.export(tmp_path/'m.pkl')
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', "load_learner` uses Python's insecure pickle", UserWarning)
        res['load_learner'] = load_learner(tmp_path/'m.pkl', cpu=True).dls.test_dl(raw, bs=len(raw)).one_batch()[0]
    return learn, res

def test_options_serve_as_they_train(df, tmp_path):
    "The training rows' codes come back on every serving path; the saved proc keeps its options."
    procs = [Categorify(min_freq={'education': 40}, max_vocab={'occupation': 6},
                        vocab={'native-country': ['Mexico', 'United-States']}), FillMissing, Normalize]
    to = _build(df, procs)
    learn, got = _serve_paths(to, df.drop(columns='income'), tmp_path)
    for path, cats in got.items(): assert torch.equal(cats.cpu(), to.packed()[0].cpu()), path
    loaded = TabularGPU.load(tmp_path/'saved', progress=False).procs.categorify
    assert (loaded.min_freq, loaded.max_vocab, loaded.vocab) == ({'education': 40}, {'occupation': 6},
                                                               {'native-country': ['Mexico', 'United-States']})

def test_options_on_dask_bit_for_bit(df):
    dd = pytest.importorskip('dask.dataframe', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
    import dask
    procs = lambda: [Categorify(min_freq={'education': 40}, max_vocab={'occupation': 6},
                                vocab={'native-country': ['Mexico', 'United-States']}), FillMissing, Normalize]
    frame = df.assign(is_valid=np.arange(N) >= 2400)
    with dask.config.set({'dataframe.convert-string': False, 'scheduler': 'sync'}):
        dk = TabularGPU(dd.from_pandas(frame, npartitions=3, sort=False), procs=procs(), splits='is_valid',
                        progress=False, **KW)
    mem = _build(df, procs())
    for n in CATS: assert list(dk.classes[n]) == list(mem.classes[n]), n
    assert torch.equal(dk.packed()[0].cpu(), mem.packed()[0].cpu())

def test_joint_vocab_and_one_table(tmp_path):
    """`joint`: MovieLens 100K's item and a History-like list of earlier items get one vocabulary (the union of their
    training values, sorted) and the learner one table; the saved Tabular keeps it."""
    from fastai_gpu_tabular.datasets import load_movielens_100k
    pytest.importorskip('recbole', reason='MovieLens 100K is read from the recbole package')
    ml = load_movielens_100k().iloc[:5000].reset_index(drop=True)
    ml['prev'] = [list(ml.item_id.iloc[max(0, i-3):i] + 5000) for i in range(len(ml))]   # some values only here
    kw = dict(cat_names=['item_id', 'prev', 'user_id'], cont_names=['age'], y_names='rating',
              splits=(list(range(4000)), list(range(4000, 5000))), multi_hot={'prev': None})
    to = TabularGPU(ml, procs=[Categorify(joint=[['item_id', 'prev']]), FillMissing, Normalize], **kw)
    tr = ml.iloc[:4000]
    want = sorted({*tr.item_id, *(v for lst in tr.prev for v in lst)})
    assert list(to.classes['item_id']) == list(to.classes['prev']) == ['#na#', *want]
    assert to_pandas(to.items)['item_id'].tolist() == (pd.Index(want).get_indexer(ml.item_id) + 1).tolist()
    learn = tabular_learner(to.dataloaders(bs=256), layers=[4])
    m = learn.model
    assert m.embeds[0].weight is m.embeds[1].weight and m.embeds[2].weight is not m.embeds[0].weight
    learn.fit(1, 1e-3)
    loaded = TabularGPU.load(to.save(tmp_path/'s', progress=False), progress=False)
    assert loaded.procs.categorify.joint == [['item_id', 'prev']]
    assert list(loaded.classes['prev']) == list(to.classes['item_id'])

def _items(n=1200, seed=0):
    """A small frame like History's output: an int item, a list of earlier items (some ids only there, some rows with
    no earlier item, a missing list), a string user, a cont, a float target and a split column."""
    rng = np.random.default_rng(seed)
    item = rng.integers(0, 60, n)
    prev = [[int(v) for v in item[max(0, i-3):i] + (100 if i % 7 == 0 else 0)] for i in range(n)]
    prev[5] = None
    return pd.DataFrame({'item_id': item, 'prev': prev, 'user_id': [f'u{v}' for v in rng.integers(0, 30, n)],
                         'age': rng.normal(30, 5, n), 'rating': rng.random(n).astype('float32'),
                         'is_valid': np.arange(n) >= n - 200})

JKW = dict(cat_names=['item_id', 'prev', 'user_id'], cont_names=['age'], y_names='rating', multi_hot={'prev': None})

def _joint_procs():
    "A joint group cut by min_freq (summed over the group), a given vocabulary and a per-column max_vocab."
    return [Categorify(joint=[['item_id', 'prev']], min_freq={'item_id': 3, 'prev': 3},
                       vocab={'user_id': ['u3', 'u1', 'u2', 'nobody']}), FillMissing, Normalize]

def _jsplits(df): return list(range(len(df) - 200)), list(range(len(df) - 200, len(df)))   # as `is_valid`

def _joint_mem(df, **kw): return TabularGPU(df, procs=_joint_procs(), splits=_jsplits(df), **(JKW | kw))

def _same_classes_and_rows(got, want):
    for n in want.cat_names:
        assert [(type(v), v) for v in got.classes[n]] == [(type(v), v) for v in want.classes[n]], n
    assert torch.equal(got.packed()[0].cpu(), want.packed()[0].cpu())   # the codes, bit for bit
    # Normalize's mean and std are other reductions on cuDF: the conts within the bound derived from their sums' size
    # and the dtypes' eps (helpers/parity.py), not Categorify's subject
    torch.testing.assert_close(got.packed()[1].cpu(), want.packed()[1].cpu(), atol=cont_atol(want, exact=False),
                               rtol=1e-6)

def test_joint_group_options_expected_vocabulary():
    "The group's vocabulary is the union of the training values cut on the summed counts; the given one as given."
    df = _items()
    to = _joint_mem(df)
    tr = df[~df.is_valid]
    counts = pd.Series([*tr.item_id, *(v for lst in tr.prev.dropna() for v in lst)]).value_counts()
    want = sorted(int(v) for v in counts.index[counts >= 3])
    assert list(to.classes['item_id']) == list(to.classes['prev']) == ['#na#', *want]
    assert any(v >= 100 for v in want)   # ids seen only in the lists are in the shared vocabulary
    assert list(to.classes['user_id']) == ['#na#', 'u3', 'u1', 'u2', 'nobody']
    codes = to_pandas(to.items)
    assert codes['item_id'].tolist() == (pd.Index(want).get_indexer(df.item_id) + 1).tolist()
    assert codes['user_id'].tolist() == (pd.Index(['u3', 'u1', 'u2', 'nobody']).get_indexer(df.user_id) + 1).tolist()

def test_joint_and_options_on_dask_bit_for_bit():
    "A Dask frame over 4 partitions: the in-memory Tabular's classes and packed rows, bit for bit."
    dd = pytest.importorskip('dask.dataframe', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
    import dask
    df = _items()
    with dask.config.set({'dataframe.convert-string': False, 'scheduler': 'sync'}):
        dk = TabularGPU(dd.from_pandas(df, npartitions=4, sort=False), procs=_joint_procs(), splits='is_valid',
                        progress=False, **JKW)
        mem = _joint_mem(df)
        for n in mem.cat_names:
            assert [(type(v), v) for v in dk.classes[n]] == [(type(v), v) for v in mem.classes[n]], n
        rows = mem.packed_rows()[0]
        assert torch.equal(dk.train.packed_rows()[0], rows[:mem.split])
        assert torch.equal(dk.valid.packed_rows()[0], rows[mem.split:])
        # a later Dask frame, its items and users outside the vocabularies: #na# (0), as the in-memory `new`
        later = df.iloc[:300].drop(columns='rating').assign(user_id='nobody?', item_id=df.item_id.iloc[:300] + 1000)
        dn, mn = dk.new(dd.from_pandas(later, npartitions=2, sort=False)), mem.new(later)
        dn.process()
        mn.process()
    cats = mn.packed()[0].cpu()
    assert torch.equal(dn.packed_rows()[0][:, :cats.shape[1]], cats)
    assert (cats[:, 0] == 0).all() and (cats[:, -1] == 0).all() and (cats[3, 1:4] > 0).all()

@pytest.mark.cudf
def test_joint_and_options_on_cudf_as_pandas():
    "The joint group, `vocab` and `min_freq` built on a cuDF frame: pandas' classes and packed rows."
    df = _items()
    _same_classes_and_rows(_joint_mem(to_backend(df, 'cudf')), _joint_mem(df))

def _joint_learner():
    df = _items()
    torch.manual_seed(0)
    learn = tabular_learner(_joint_mem(df).dataloaders(bs=256), layers=[8])
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-2)
    return df, learn

def test_joint_onnx_matches_get_preds(tmp_path):
    "`export_onnx` of a learner with a joint group (one tied table) and a given vocabulary: `get_preds` on raw rows."
    ort = pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    from fastai_gpu_tabular.deploy.export import export_onnx, onnx_inputs
    df, learn = _joint_learner()
    assert learn.model.embeds[0].weight is learn.model.embeds[1].weight
    rows = df.iloc[-40:].drop(columns=['rating', 'is_valid']).copy()
    rows.loc[rows.index[0], 'user_id'] = 'u999'                      # outside the given vocabulary
    rows.at[rows.index[1], 'prev'] = [100000, 1]                     # an id no column saw
    rows.loc[rows.index[2], 'item_id'] = 100000
    sess = ort.InferenceSession(str(export_onnx(learn, tmp_path/'j.onnx')), providers=['CPUExecutionProvider'])
    out = sess.run(None, onnx_inputs(rows, sess))[0]
    with learn.no_bar(): preds,_ = learn.get_preds(dl=learn.dls.test_dl(rows))
    assert out.shape == preds.shape
    np.testing.assert_allclose(out, preds.numpy(), atol=1e-5, rtol=0)

def test_values_outside_given_vocab_serve_as_na():
    "`predict` and `test_dl` of rows whose values the given vocabulary (or the joint group's) lacks: code 0, `#na#`."
    df, learn = _joint_learner()
    rows = df.iloc[:4].drop(columns=['rating', 'is_valid']).copy()
    rows['user_id'] = ['u999', 'u3', 'u0', None]                     # u0 is in the data, not in the given vocab
    rows.loc[rows.index[1], 'item_id'] = 100000
    rows.at[rows.index[2], 'prev'] = [100000, int(rows.item_id.iloc[2])]
    t = learn.dls.test_dl(rows, bs=4).dataset
    codes = to_pandas(t.items)
    assert codes['user_id'].tolist() == [0, 1, 0, 0]
    assert codes['item_id'].iloc[1] == 0 and codes['item_id'].iloc[0] > 0
    voc = list(learn.dls.classes['item_id'])
    assert list(learn.dls.test_dl(rows, bs=4).one_batch()[0][2, 1:3].cpu()) == [0, voc.index(rows.item_id.iloc[2])]
    with learn.no_bar():   # predict's rows hold the codes, as fastai's (its `show` decodes them)
        for i,(want_u,want_i) in enumerate([(0, None), (1, 0)]):
            full, _, _ = learn.predict(rows.iloc[i])
            assert int(full.items['user_id'].iloc[0]) == want_u
            if want_i is not None: assert int(full.items['item_id'].iloc[0]) == want_i
    assert [learn.dls.classes['user_id'][c] for c in (0, 1)] == ['#na#', 'u3']
