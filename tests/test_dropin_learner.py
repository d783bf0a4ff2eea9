"""TabularGPU/BatchDataLoaders as a drop-in, continued: what fastai's tabular.model and tabular.learner notebooks and
its tabular tutorial show, on fastai's TabularPandas and on ours, compared (the same weights, the same predictions)."""
import pytest
import torch
from fastai.data.transforms import Normalize, RandomSplitter
from fastai.layers import SigmoidRange
from fastai.learner import load_learner
from fastai.losses import CrossEntropyLossFlat
from fastai.metrics import accuracy
from fastai.tabular.all import (
    Categorify,
    FillMissing,
    TabularDataLoaders,
    TabularModel,
    emb_sz_rule,
    get_emb_sz,
    set_seed,
    tabular_config,
)
from fastai.tabular.learner import tabular_learner as fastai_tabular_learner
from helpers.dropin import CATS, CONTS, adult, assert_same_values, capture_display
from helpers.parity import build_both
from fastai_gpu_tabular.all import BatchDataLoaders, TabularGPU, TabularModelGPU, tabular_learner

PROCS = [Categorify, FillMissing, Normalize]

@pytest.fixture(scope='module')
def df(): return adult()

@pytest.fixture(scope='module')
def dls_pair(df):
    "The tutorial's objects: fastai's DataLoaders and ours, from the same frame and split, bs 64."
    ref, ours = build_both(df, procs=PROCS, cat_names=CATS, cont_names=CONTS, y_names='income',
                           splits=RandomSplitter(seed=0)(range(len(df))))
    return ref.dataloaders(bs=64), ours.dataloaders(bs=64)

def _same_weights(learn_ref, learn_ours):
    "Our model takes fastai's weights as they are (the parameter and buffer names are fastai's)."
    learn_ours.model.load_state_dict(learn_ref.model.state_dict())
    learn_ref.model.eval(); learn_ours.model.eval()

# --- tabular.model ---------------------------------------------------------------------------------------------------
def test_get_emb_sz(dls_pair):
    "fastai's rule of thumb, and `sz_dict` overrides, from our `classes`."
    r, o = dls_pair
    assert get_emb_sz(o.train_ds) == get_emb_sz(r.train_ds)
    rule = [min(600, round(1.6 * len(o.classes[n])**0.56)) for n in o.cat_names]
    assert [sz for _,sz in get_emb_sz(o.train_ds)] == rule
    assert get_emb_sz(o.train_ds, {'workclass': 10}) == get_emb_sz(r.train_ds, {'workclass': 10})
    assert emb_sz_rule(len(o.classes['education'])) == get_emb_sz(o.train_ds)[1][1]

def test_model_takes_fastai_weights():
    "The notebook's TabularModel: ours, with fastai's weights, gives fastai's output."
    emb_szs = [(4, 2), (17, 8)]
    m = TabularModel(emb_szs, n_cont=2, out_sz=2, layers=[200, 100]).eval()
    ours = TabularModelGPU(emb_szs, 2, 2, [200, 100]).eval()
    ours.load_state_dict(m.state_dict())
    x_cat, x_cont = torch.tensor([[2, 12]]).long(), torch.tensor([[0.7633, -0.1887]]).float()
    torch.testing.assert_close(ours(x_cat, x_cont), m(x_cat, x_cont))

@pytest.mark.parametrize('config', [None, dict(embed_p=0.6, use_bn=False),
                                    dict(ps=[0.1, 0.2], bn_final=True, bn_cont=False)])
def test_tabular_learner_defaults_and_config(dls_pair, config):
    "tabular_learner's defaults (layers [200, 100], n_out from the data, the loss) and a `tabular_config`."
    r, o = dls_pair
    cfg = None if config is None else tabular_config(**config)
    lr, lo = fastai_tabular_learner(r, config=cfg and dict(cfg)), tabular_learner(o, config=cfg and dict(cfg))
    sd_r, sd_o = lr.model.state_dict(), lo.model.state_dict()
    assert {k: v.shape for k,v in sd_o.items()} == {k: v.shape for k,v in sd_r.items()}
    assert str(lo.model.layers) == str(lr.model.layers) and lo.model.emb_drop.p == lr.model.emb_drop.p
    assert type(lo.loss_func) == type(lr.loss_func) and isinstance(lo.loss_func, CrossEntropyLossFlat)
    assert [m for m in lo.model.modules() if isinstance(m, torch.nn.Linear)][-1].out_features == o.c == r.c == 2

def test_y_range(dls_pair):
    "`y_range`, given directly or through the config, ends the model with a SigmoidRange."
    r, o = dls_pair
    for make, dls in ((fastai_tabular_learner, r), (tabular_learner, o)):
        for learn in (make(dls, y_range=(0, 32)), make(dls, config=tabular_config(y_range=(0, 32)))):
            last = learn.model.layers[-1]
            assert isinstance(last, SigmoidRange) and (last.low, last.high) == (0, 32)

# --- tabular.learner and the tutorial: predict, test_dl, get_preds, show_results, export ------------------------------
def test_predict_with_fastai_weights(df, dls_pair, monkeypatch):
    "`learn.predict(df.iloc[0])`: the same decoded row, class and probabilities as fastai's, given the same weights."
    shown = capture_display(monkeypatch)
    r, o = dls_pair
    lr, lo = fastai_tabular_learner(r), tabular_learner(o)
    set_seed(0)
    with lr.no_bar(), lr.no_logging(): lr.fit_one_cycle(1, 1e-2)
    _same_weights(lr, lo)
    for i in (0, 3, 11):
        (row_r, cls_r, p_r), (row_o, cls_o, p_o) = lr.predict(df.iloc[i]), lo.predict(df.iloc[i])
        assert isinstance(row_o, TabularGPU) and cls_o == cls_r
        torch.testing.assert_close(p_o, p_r, atol=1e-5, rtol=1e-4)
        row_r.show(); row_o.show()
        assert_same_values(shown[-1], shown[-2], list(r.cat_names) + CONTS + ['income'])

def test_test_dl_get_preds_without_target(df, dls_pair):
    "The tutorial: `learn.dls.test_dl(test_df)` without the dependent variable, then `get_preds` gives (preds, None)."
    r, o = dls_pair
    lr, lo = fastai_tabular_learner(r), tabular_learner(o)
    _same_weights(lr, lo)
    test_df = df.drop(columns=['income']).iloc[:1000]
    (p_r, t_r), (p_o, t_o) = lr.get_preds(dl=lr.dls.test_dl(test_df)), lo.get_preds(dl=lo.dls.test_dl(test_df))
    assert t_r is None and t_o is None
    torch.testing.assert_close(p_o, p_r, atol=1e-5, rtol=1e-4)

def test_tutorial(df, tmp_path, monkeypatch):
    "The tabular tutorial on ours, step by step, checked against fastai's objects where they are deterministic."
    shown = capture_display(monkeypatch)
    csv = tmp_path/'adult.csv'
    df.to_csv(csv, index=False)
    kw = dict(y_names='income', cat_names=CATS, cont_names=CONTS, procs=PROCS)
    dls = BatchDataLoaders.from_csv(csv, path=tmp_path, **kw)         # a random 80/20 split, as fastai's
    ref_dls = TabularDataLoaders.from_csv(csv, path=tmp_path, **{**kw, 'cat_names': list(CATS)})
    assert len(dls.valid_ds) == int(0.2 * len(df)) == len(ref_dls.valid_ds)
    splits = RandomSplitter(valid_pct=0.2, seed=1)(range(len(df)))
    ref, to = build_both(df, procs=PROCS, cat_names=CATS, cont_names=CONTS, y_names='income', splits=splits)
    assert_same_values(to.xs.iloc[:2], ref.xs.iloc[:2], ref.x_names)
    assert_same_values(to.xs[:3], ref.xs[:3], ref.x_names)
    dls = to.dataloaders(bs=64)
    dls.show_batch()
    assert len(shown[-1]) == 10 and shown[-1].workclass.map(type).eq(str).all()
    assert set(shown[-1].income) <= {'<=50K', '>50K'}
    set_seed(0)
    learn = tabular_learner(dls, metrics=accuracy)
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(2)
    majority = to.valid.items['income'].value_counts(normalize=True).max()
    assert learn.recorder.values[-1][2] > majority + 0.02                # it learns: validation accuracy
    learn.show_results()
    # deliberate (README): ours shows the inputs and predictions decoded, fastai 2.8 shows the codes
    assert set(shown[-1].income_pred) <= {'<=50K', '>50K'} and shown[-1].education.map(type).eq(str).all()
    row, clas, probs = learn.predict(df.iloc[0])
    row.show()
    assert shown[-1].workclass.iloc[0] == df.workclass.iloc[0] and probs.shape == (2,) and clas.item() in (0, 1)
    preds, targs = learn.get_preds(dl=learn.dls.test_dl(df.drop(columns=['income'])))
    assert preds.shape == (len(df), 2) and targs is None
    # `fastai with Other Libraries`: the processed frames, as fastai's
    X_train, y_train = to.train.xs, to.train.ys.values.ravel()
    X_test, y_test = to.valid.xs, to.valid.ys.values.ravel()
    assert_same_values(X_train, ref.train.xs, ref.x_names)
    assert_same_values(X_test, ref.valid.xs, ref.x_names)
    assert (y_train == ref.train.ys.values.ravel()).all() and (y_test == ref.valid.ys.values.ravel()).all()

def test_export_load_learner(df, dls_pair, tmp_path):
    "`learn.export()` then `load_learner(cpu=True)`: the same predictions from the loaded learner."
    _, o = dls_pair
    learn = tabular_learner(o, path=tmp_path)
    learn.export('model.pkl')
    loaded = load_learner(tmp_path/'model.pkl', cpu=True)
    assert isinstance(loaded.dls, BatchDataLoaders) and list(loaded.dls.cat_names) == list(o.cat_names)
    p1, _ = learn.get_preds(dl=learn.dls.test_dl(df.iloc[:200]))
    p2, _ = loaded.get_preds(dl=loaded.dls.test_dl(df.iloc[:200]))
    torch.testing.assert_close(p2, p1.cpu())
    _, c1, pr1 = learn.predict(df.iloc[5])
    _, c2, pr2 = loaded.predict(df.iloc[5])
    assert c1 == c2
    torch.testing.assert_close(pr1, pr2)
