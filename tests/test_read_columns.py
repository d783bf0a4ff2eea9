"""Columns the procs read that the model does not see (#54 item 9): `DifferenceLag`'s key and time, `JoinExternal`'s
key, in no name list. The Tabular keeps them in its frame for the procs (every frame must hold them: a KeyError naming
one missing), packs none of them, and gives their outputs the values they have when the columns are named; on every
serving path (`new`, `test_dl`, `predict`, save and load, an exported learner, Dask) the rows are those of one Tabular
of both frames. On MovieLens 100K."""
import warnings
import numpy as np
import pandas as pd
import pytest
import torch
from fastai.callback.core import Callback
from fastai.tabular.all import (
    Categorify,
    FillMissing,
    Normalize,
    RandomSplitter,
    get_emb_sz,
    load_learner,
    tabular_learner,
)
from fastai_gpu_tabular.all import DifferenceLag, JoinExternal, TabularGPU
from fastai_gpu_tabular.backend import to_pandas
from fastai_gpu_tabular.datasets import load_movielens_100k

@pytest.fixture(scope='module')
def ratings():
    "20,000 ratings in a shuffled order, and a random split."
    df = load_movielens_100k().sample(frac=1, random_state=5).iloc[:20000].reset_index(drop=True)
    return df.drop(columns=['genres']), RandomSplitter(seed=0)(range(len(df)))

def _np(xs): return [x.cpu().numpy() for x in xs[:2]]

class _Inputs(Callback):
    "Keeps the inputs of the batches the learner sees (`predict`'s own)."
    def before_batch(self): self.inputs = [x.clone() for x in self.learn.xb]

def test_unnamed_key_and_time_are_read_not_packed(ratings, as_backend):
    """`timestamp` in no cont_names and `user_id` in no cat_names: the lag is pandas' `diff()`, as when they are named;
    neither is packed, nor a model input (embeddings, n_cont)."""
    df, splits = ratings
    kw = dict(cat_names=['item_id', 'occupation'], cont_names=['age'], y_names='rating', splits=splits)
    to = TabularGPU(as_backend(df), procs=[DifferenceLag('user_id', 'timestamp'), Categorify, FillMissing, Normalize],
                    **kw)
    named = TabularGPU(as_backend(df), procs=[DifferenceLag('user_id', 'timestamp'), Categorify, FillMissing,
                                              Normalize],
                       **{**kw, 'cat_names': ['user_id', *kw['cat_names']], 'cont_names': ['timestamp', 'age']})
    assert list(to.cat_names) == ['item_id', 'occupation', 'timestamp_lag_user_id_na']
    assert list(to.cont_names) == ['age', 'timestamp_lag_user_id']
    frame = df.iloc[np.concatenate(splits)].reset_index(drop=True).assign(_pos=lambda d: np.arange(len(d)))
    s = frame.sort_values(['user_id', 'timestamp', '_pos'])
    want = s.groupby('user_id')['timestamp'].diff().sort_index().to_numpy('f8')
    lag = 'timestamp_lag_user_id'
    fm = [p for p in to.procs.fs if isinstance(p, FillMissing)][0]
    got = to_pandas(to.items)
    np.testing.assert_array_equal(got[lag + '_na'].to_numpy() == 2, np.isnan(want))   # the flag: code 2 is True
    np.testing.assert_allclose(got[lag].to_numpy(), (np.where(np.isnan(want), fm.na_dict[lag], want) - to.means[lag])
                               / to.stds[lag], rtol=1e-6)
    np.testing.assert_array_equal(got[lag].to_numpy(), to_pandas(named.items)[lag].to_numpy())   # as when named
    # the columns read stay in the frame, unshrunk, and reach neither the packed rows nor the model
    assert {'user_id', 'timestamp'} <= set(got.columns) and got.timestamp.dtype == df.timestamp.dtype
    cats, conts, ys = to.packed()
    assert cats.shape[1] == 3 and conts.shape[1] == 2
    learn = tabular_learner(to.dataloaders(bs=512), layers=[4])
    assert len(learn.model.embeds) == 3 and learn.model.n_cont == 2
    assert len(get_emb_sz(to)) == 3
    nc, nn_ = _np(named.packed())
    c, n = _np((cats, conts))
    np.testing.assert_array_equal(c, nc[:, 1:])   # the same codes, without user_id's
    np.testing.assert_array_equal(n, nn_[:, 1:])   # without timestamp's

class _Later:
    """The ratings before a time make the Tabular (key and time unnamed); those after it are the later frame. The
    reference: the later rows in a Tabular of both frames, where they follow the training rows in time."""
    def __init__(self, df, tmp):
        cut = df.timestamp.quantile(0.75)
        self.old = df[df.timestamp < cut].reset_index(drop=True)
        self.later = df[df.timestamp >= cut].reset_index(drop=True).drop(columns=['rating'])
        self.tmp = tmp
        seen = self.later.user_id.isin(self.old.user_id).to_numpy()
        assert seen.any() and not seen.all()
        self.rows = [int(np.flatnonzero(seen)[0]), int(np.flatnonzero(~seen)[0]), int(np.flatnonzero(seen)[-1])]
        self.to = TabularGPU(self.old, **self.kw())
        torch.manual_seed(0)
        self.learn = tabular_learner(self.to.dataloaders(bs=256), layers=[4])

    @staticmethod
    def kw():
        return dict(procs=[DifferenceLag('user_id', 'timestamp', shift=[1, 2]), Categorify, FillMissing, Normalize],
                    cat_names=['item_id', 'occupation'], cont_names=['age'], y_names='rating')

    def reference(self, later):
        both = pd.concat([self.old, later.assign(rating=0)], ignore_index=True)
        t = TabularGPU(both, **self.kw(), splits=(list(range(len(self.old))), list(range(len(self.old), len(both)))))
        return _np([x[-len(later):] for x in t.packed()])

    def processed(self, to):
        t = to.new(self.later)
        t.process()
        return _np(t.packed())

@pytest.fixture(scope='module')
def later(ratings, tmp_path_factory): return _Later(ratings[0], tmp_path_factory.mktemp('read'))

@pytest.mark.parametrize('path', ['new', 'test_dl', 'predict', 'saved', 'load_learner', 'dask'])
def test_later_frames_read_the_unnamed_columns(later, path):
    "Every serving path gives a later frame's rows the codes and conts they have in one Tabular of both frames."
    rows = later.later
    if path == 'new': got = later.processed(later.to)
    elif path == 'test_dl': got = _np(later.learn.dls.test_dl(rows, bs=len(rows)).one_batch())
    elif path == 'saved':
        got = later.processed(TabularGPU.load(later.to.save(later.tmp/'read', progress=False), progress=False))
    elif path == 'load_learner':
        f = later.tmp/'read.pkl'
        later.learn.export(f)
        with warnings.catch_warnings():
            warnings.filterwarnings('ignore', "load_learner` uses Python's insecure pickle", UserWarning)
            learn = load_learner(f, cpu=True)
        got = _np(learn.dls.test_dl(rows, bs=len(rows)).one_batch())
    elif path == 'dask':
        dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
        import dask.dataframe as dd
        with dask.config.set({'dataframe.convert-string': False, 'scheduler': 'sync'}):
            to = TabularGPU(dd.from_pandas(later.old, npartitions=3, sort=False), progress=False, **later.kw())
            assert 'timestamp' not in to.cont_names and 'user_id' not in to.cat_names
            t = to.new(dd.from_pandas(rows, npartitions=3, sort=False))
            t.progress = False
            t.process()
            got = _np(t.train.packed())
    else:   # predict: each row alone, of a user seen in training and of one not
        rec, got = _Inputs(), []
        with later.learn.added_cbs(rec), later.learn.no_bar():
            for i in later.rows:
                later.learn.predict(rows.iloc[i])
                got.append(_np(rec.inputs))
        got = [np.concatenate(r) for r in zip(*got)]
        want = [np.concatenate(r) for r in zip(*(later.reference(rows.iloc[[i]]) for i in later.rows))]
    if path != 'predict': want = later.reference(rows)
    for g,w,what in zip(got, want, ('cats', 'conts')): np.testing.assert_array_equal(g, w, err_msg=f"{what} {path}")

def test_a_later_frame_missing_a_read_column_names_it(later):
    "The time is in no name list, but the proc reads it: a later frame without it is a KeyError naming it, first."
    with pytest.raises(KeyError, match=r"\['timestamp'\] are not in the frame"):
        later.to.new(later.later.drop(columns=['timestamp'])).process()
    with pytest.raises(KeyError, match=r"\['timestamp'\] are not in the frame"):
        later.learn.dls.test_dl(later.later.drop(columns=['timestamp']))
    with pytest.raises(KeyError, match=r"\['user_id'\] are not in the frame"):
        TabularGPU(later.old.drop(columns=['user_id']), **later.kw())

def test_join_key_unnamed(ratings, as_backend):
    """JoinExternal's key in no cat_names: the joined columns are those of the named key, the key is not packed, and a
    later frame (`new`, `test_dl`) gets the same rows; one without the key is a KeyError naming it."""
    df, splits = ratings
    table = df.groupby('item_id').agg(mean_age=('age', 'mean'), n=('rating', 'size')).reset_index()
    table = table.sample(frac=0.9, random_state=0).reset_index(drop=True)
    kw = dict(cat_names=['occupation'], cont_names=['age'], y_names='rating', splits=splits)
    procs = lambda: [JoinExternal(table, 'item_id', cont_names=['mean_age', 'n']), Categorify, FillMissing, Normalize]
    to = TabularGPU(as_backend(df), procs=procs(), **kw)
    named = TabularGPU(as_backend(df), procs=procs(), **{**kw, 'cat_names': ['item_id', 'occupation']})
    assert 'item_id' not in to.cat_names and 'item_id' in to.items.columns
    got, ref = to_pandas(to.items), to_pandas(named.items)
    for c in ('mean_age', 'n'): np.testing.assert_array_equal(got[c].to_numpy(), ref[c].to_numpy(), err_msg=c)
    c, n = _np(to.packed())
    nc, nn_ = _np(named.packed())
    np.testing.assert_array_equal(c, nc[:, 1:])
    np.testing.assert_array_equal(n, nn_)
    learn = tabular_learner(to.dataloaders(bs=512), layers=[4])
    assert len(learn.model.embeds) == len(to.cat_names) == c.shape[1]
    rows = df.iloc[:500].drop(columns=['rating'])
    t = to.new(as_backend(rows))
    t.process()
    np.testing.assert_array_equal(_np(t.packed())[1], _np(learn.dls.test_dl(as_backend(rows), bs=500).one_batch())[1])
    t2 = named.new(as_backend(rows))
    t2.process()
    np.testing.assert_array_equal(_np(t.packed())[1], _np(t2.packed())[1])
    with pytest.raises(KeyError, match=r"\['item_id'\] are not in the frame"):
        to.new(as_backend(rows.drop(columns=['item_id']))).process()

def test_join_key_unnamed_onnx(ratings, tmp_path):
    "The exported graph takes JoinExternal's unnamed key as an input by its name: its rows are test_dl's."
    onnx = pytest.importorskip('onnx')
    ort = pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    from fastai_gpu_tabular.deploy.export import export_onnx, onnx_inputs
    df, splits = ratings
    table = df.groupby('item_id').agg(mean_age=('age', 'mean'), n=('rating', 'size')).reset_index()
    table = table.sample(frac=0.9, random_state=0).reset_index(drop=True)
    procs = [JoinExternal(table, 'item_id', cont_names=['mean_age', 'n']), Categorify, FillMissing, Normalize]
    to = TabularGPU(df, procs=procs, cat_names=['occupation'], cont_names=['age'], y_names='rating', splits=splits)
    torch.manual_seed(0)
    learn = tabular_learner(to.dataloaders(bs=512), layers=[4])
    model = onnx.load(str(export_onnx(learn, tmp_path/'join.onnx')))
    model.graph.output.extend([onnx.helper.make_tensor_value_info(f'fgt/{k}', t, None)
                               for k,t in (('x_cat', onnx.TensorProto.INT64), ('x_cont', onnx.TensorProto.FLOAT))])
    sess = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])
    rows = df.iloc[:300].drop(columns=['rating'])
    assert 'item_id' in [i.name for i in sess.get_inputs()]
    got = sess.run(['fgt/x_cat', 'fgt/x_cont'], onnx_inputs(rows, sess))
    want = _np(learn.dls.test_dl(rows, bs=300).one_batch())
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-6)

def test_from_parquet_reads_the_unnamed_columns(ratings, tmp_path):
    "`from_parquet` reads the columns procs read with the named ones: its rows are those of the frame in memory."
    df, splits = ratings
    df.to_parquet(tmp_path/'r.parquet')
    kw = dict(cat_names=['item_id', 'occupation'], cont_names=['age'], y_names='rating', splits=splits)
    procs = lambda: [DifferenceLag('user_id', 'timestamp'), Categorify, FillMissing, Normalize]
    got = TabularGPU.from_parquet(tmp_path/'r.parquet', procs=procs(), backend='pandas', **kw)
    want = TabularGPU(df, procs=procs(), **kw)
    assert 'timestamp' in got.items.columns and 'zip_code' not in got.items.columns
    for g,w in zip(_np(got.packed()), _np(want.packed())): np.testing.assert_array_equal(g, w)
