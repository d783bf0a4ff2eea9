"""Device metrics: AUC/LogLoss equal sklearn's (AUC to the last bit, on what `get_preds` returns: fastai's float32
probabilities, saturated and tied), MRR/NDCG/HitRate equal a pandas groupby reference (and sklearn's ndcg_score), on
random data with ties and on MovieLens 100K through a fastai Learner; no host conversion while accumulating; half/bf16
outputs; values gathered once across 2 gloo processes (fastai's DistributedDL padding too)."""
import json
import math
import os
import subprocess
import sys
import warnings
from types import SimpleNamespace
import numpy as np
import pandas as pd
import pytest
import sklearn.metrics as skm
import torch
from fastai.tabular.all import (
    BCEWithLogitsLossFlat,
    CrossEntropyLossFlat,
    FillMissing,
    Learner,
    MSELossFlat,
    Normalize,
    RandomSplitter,
    RocAucBinary,
    noop,
    range_of,
    set_seed,
)
from helpers.host_sync import HostConversions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from fastai_gpu_tabular.all import (
    AUC,
    MRR,
    NDCG,
    Categorify,
    HitRate,
    LogLoss,
    TabularGPU,
    rank_metrics,
    tabular_learner,
)
from fastai_gpu_tabular.datasets import load_movielens_100k
from fastai_gpu_tabular.train.metrics import binary_log_loss, group_position, roc_auc

HYP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---- references ---------------------------------------------------------------------------------------------------
def ref_group(s, r, k):
    """(MRR@k, NDCG@k, HitRate@k) of one group, ties as the expectation over a random order of the tied rows, walking
    the tie blocks in plain Python with exact binomials."""
    k = len(s) if k is None else k
    blocks = pd.DataFrame({'s': s, 'r': r}).groupby('s', sort=True)['r'].agg(['size', 'sum']).iloc[::-1]
    a,dcg,miss,mrr,seen = 0,0.,1.,0.,False
    for m,rb in zip(blocks['size'], blocks['sum']):
        dcg += rb / m * sum(1 / math.log2(p + 2) for p in range(a, min(a + m, k)))
        t = min(max(k - a, 0), m)
        miss *= math.comb(m - rb, t) / math.comb(m, t)
        if rb and not seen:
            mrr = sum(math.comb(m - j, rb - 1) / math.comb(m, rb) / (a + j) for j in range(1, m - rb + 2) if a + j <= k)
            seen = True
        a += m
    idcg = sum(1 / math.log2(p + 2) for p in range(min(int(np.sum(r)), k)))
    return mrr, dcg / idcg, 1 - miss

def ref_rank(scores, relevant, groups, k):
    "The groupby reference: group 0 (#na#) and groups without a relevant row left out, the mean over the rest."
    df = pd.DataFrame({'s': np.asarray(scores, dtype=np.float64), 'r': np.asarray(relevant, dtype=int), 'g': groups})
    df = df[df.g != 0]
    per = df.groupby('g').filter(lambda d: d.r.sum() > 0).groupby('g')[['s', 'r']].apply(
        lambda d: pd.Series(ref_group(d.s.values, d.r.values, k), index=['mrr', 'ndcg', 'hit_rate']))
    return per.mean().to_dict(), per

def fake_learn(pred, y, loss_func=None, x_cat=None, cat_names=('g',), dl=None):
    "What a fastai Recorder hands a metric after a validation batch."
    dl = dl or SimpleNamespace(dataset=SimpleNamespace(cat_names=list(cat_names)))
    return SimpleNamespace(pred=pred, yb=(y,), y=y, xb=(x_cat, None), dl=dl,
                           loss_func=loss_func or CrossEntropyLossFlat(),
                           to_detach=lambda b, cpu=True, gather=True: b.detach().cpu() if cpu else b.detach())

def device_probs(learn, x):
    """The positive class's probability of the outputs `x` (get_preds' with `act=noop`), the loss's activation applied
    on the loaders' device: what the device metrics and fastai's `RocAucBinary` score (`get_preds` applies it on the
    host)."""
    p = learn.loss_func.activation(x.to(learn.dls.device)).cpu()
    return (p[:, 1] if p.shape[1] == 2 else p[:, 0]).numpy()

def auc_rounding_bound(pos, a, b) -> float:
    """How far sklearn's AUC of scores `b` can be from its AUC of `a`, the same rows' scores rounded apart (`pos`: the
    positive rows). A positive/negative pair moves the AUC, by at most 1/(positives x negatives), only where its order
    can change: where the two scores are within the two rows' differences, and those are not both 0. Where `a == b`
    nothing can move: 0."""
    a,d = a.astype(np.float64),np.abs(a.astype(np.float64) - b.astype(np.float64))
    (ap,dp),(an,dn) = (a[pos], d[pos]),(a[~pos], d[~pos])
    pairs = sum(int(((np.abs(ap[i:i+512, None] - an) <= dp[i:i+512, None] + dn) & (dp[i:i+512, None] + dn > 0)).sum())
                for i in range(0, len(ap), 512))
    return pairs / (len(ap) * len(an))

def run_metric(metric, pred, y, x_cat=None, bs=37, loss_func=None):
    "The metric over batches of `bs` rows, as fastai's validation loop drives it."
    metric.reset()
    for i in range(0, len(y), bs):
        metric.accumulate(fake_learn(pred[i:i+bs], y[i:i+bs], loss_func, None if x_cat is None else x_cat[i:i+bs]))
    return metric.value

# ---- AUC and log loss against sklearn -----------------------------------------------------------------------------
@st.composite
def binary_data(draw, max_n=300):
    n = draw(st.integers(2, max_n))
    levels = draw(st.integers(1, 50))   # few levels: many ties
    s = draw(st.lists(st.integers(0, levels), min_size=n, max_size=n))
    y = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n).filter(lambda v: 0 < sum(v) < len(v)))
    noise = draw(st.floats(0, 1))   # some rows off the grid: ties among some, not all
    g = np.random.default_rng(n * 31 + levels)
    s = np.asarray(s, dtype=np.float64) / levels + (g.random(n) < noise) * g.random(n)
    return s, np.asarray(y)

@HYP
@given(binary_data(), st.integers(1, 64))
def test_auc_equals_sklearn(data, bs):
    "To the last bit: sklearn's ROC curve and its trapezoids, summed by numpy as sklearn sums them."
    s,y = data
    ref = skm.roc_auc_score(y, s)
    assert roc_auc(torch.tensor(s), torch.tensor(y)) == ref
    assert roc_auc(torch.tensor(s, dtype=torch.float32), torch.tensor(y)) == skm.roc_auc_score(y, s.astype(np.float32))
    # the metric on one-column scores (a loss with no activation: get_preds returns them as they are), batch by batch,
    # long or float 0/1 targets; score='margin' ranks the raw output whatever the loss
    assert run_metric(AUC(), torch.tensor(s)[:, None], torch.tensor(y)[:, None], bs=bs, loss_func=MSELossFlat()) == ref
    assert run_metric(AUC(), torch.tensor(s), torch.tensor(y, dtype=torch.float64), bs=bs,
                      loss_func=MSELossFlat()) == ref
    assert run_metric(AUC(score='margin'), torch.tensor(s), torch.tensor(y), bs=bs) == ref

@HYP
@given(binary_data(), st.floats(1, 60), st.integers(1, 64))
def test_auc_two_logits_is_roc_auc_binary(data, scale, bs):
    """Two float32 logits, margins up to +-60 (float32's softmax is 1.0 past ~17, and rounds distinct margins alike
    well before): AUC is RocAucBinary's value and sklearn's on get_preds' probabilities, to the last bit;
    score='margin' ranks the margins."""
    s,y = data
    m = (s - s.mean()) * scale
    x = torch.tensor(np.stack([-m / 2, m / 2], 1) + 0.3, dtype=torch.float32)
    prob = CrossEntropyLossFlat().activation(x)[:, 1]   # what get_preds returns: the loss's activation, column 1
    ref = skm.roc_auc_score(y, prob.numpy())
    assert run_metric(AUC(), x, torch.tensor(y), bs=bs) == run_metric(RocAucBinary(), x, torch.tensor(y), bs=bs) == ref
    assert run_metric(AUC(score='margin'), x, torch.tensor(y), bs=bs) == skm.roc_auc_score(y, (x[:, 1] - x[:, 0]))

@st.composite
def probs_data(draw):
    n = draw(st.integers(1, 200))
    p = draw(st.lists(st.one_of(st.just(0.), st.just(1.), st.floats(0, 1)), min_size=n, max_size=n))
    y = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n).filter(lambda v: 0 < sum(v) < len(v)))
    return np.asarray(p), np.asarray(y)

@HYP
@given(probs_data(), st.integers(1, 64))
def test_log_loss_equals_sklearn_on_probabilities(data, bs):
    "Probabilities, exact 0 and 1 included (sklearn clips them to [eps, 1-eps]); one column or both classes."
    p,y = data
    ref = skm.log_loss(y, p)
    assert abs(binary_log_loss(torch.tensor(p), torch.tensor(y)) - ref) < 1e-9
    p2 = np.stack([1 - p, p], 1)
    assert abs(binary_log_loss(torch.tensor(p2), torch.tensor(y)) - skm.log_loss(y, p2)) < 1e-9
    # a sigmoid output under an MSE loss: probabilities, as the loss has no activation
    assert abs(run_metric(LogLoss(), torch.tensor(p)[:, None], torch.tensor(y, dtype=torch.float64), bs=bs,
                          loss_func=MSELossFlat()) - ref) < 1e-9

@HYP
@given(st.integers(2, 200), st.floats(0.1, 30), st.integers(0, 2**16), st.integers(1, 64))
def test_log_loss_equals_sklearn_on_logits(n, scale, seed, bs):
    "Logits: CrossEntropy's two (up to +-30: clipped at eps as sklearn's on the probabilities) and BCE's one."
    g = np.random.default_rng(seed)
    x,y = g.uniform(-scale, scale, (n, 2)), g.integers(0, 2, n)
    if y.min() == y.max(): y[0] = 1 - y[0]
    ref = skm.log_loss(y, torch.softmax(torch.tensor(x), 1).numpy())
    ours = run_metric(LogLoss(), torch.tensor(x), torch.tensor(y), bs=bs, loss_func=CrossEntropyLossFlat())
    assert abs(ours - ref) < 1e-9
    assert abs(binary_log_loss(torch.tensor(x), torch.tensor(y), logits=True) - ref) < 1e-9
    z = x[:, 0].clip(-8, 8)   # sklearn gets 1 - sigmoid(z): beyond ~8 its rounding, not ours, sets the difference
    ref1 = skm.log_loss(y, torch.sigmoid(torch.tensor(z)).numpy())
    assert abs(run_metric(LogLoss(), torch.tensor(z)[:, None], torch.tensor(y, dtype=torch.float64), bs=bs,
                          loss_func=BCEWithLogitsLossFlat()) - ref1) < 1e-9

@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_half_outputs(dtype):
    """Half outputs (no MixedPrecision callback to make them float): upcast to float32 first, so AUC ranks the float32
    softmax of the exact half values (the margin of them with score='margin') and LogLoss is float32's."""
    g = torch.Generator().manual_seed(0)
    x,y = (torch.randn(5000, 2, generator=g) * 3).to(dtype),torch.randint(0, 2, (5000,), generator=g)
    xf = x.float()
    assert run_metric(AUC(), x, y, bs=512) == skm.roc_auc_score(y.numpy(), torch.softmax(xf, -1)[:, 1].numpy())
    ref_auc = skm.roc_auc_score(y.numpy(), (xf[:, 1] - xf[:, 0]).numpy())
    assert run_metric(AUC(score='margin'), x, y, bs=512) == ref_auc
    ref_ll = skm.log_loss(y.numpy(), torch.softmax(xf, 1).numpy())
    assert abs(run_metric(LogLoss(), x, y, bs=512) - ref_ll) < 1e-6
    assert len(set(x[:, 1].tolist())) < 5000, "half precision makes ties: the case the tie rule is for"

def test_undefined_and_bad_input():
    y1 = torch.ones(10, dtype=torch.long)
    with pytest.warns(UserWarning, match='only one class'): assert math.isnan(run_metric(AUC(), torch.randn(10, 2), y1))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        assert math.isnan(skm.roc_auc_score(y1.numpy(), np.arange(10.)))   # sklearn: the same NaN
    with pytest.raises(ValueError, match='NaN'): roc_auc(torch.tensor([0.1, float('nan')]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r'0/1 targets.*thresh='):
        run_metric(AUC(), torch.randn(10), torch.arange(10.), loss_func=MSELossFlat())
    with pytest.raises(ValueError, match=r"ndcg@10: score must be one of \('preds', 'margin'\), got 'logit'"):
        NDCG(group='g', score='logit')
    with pytest.raises(ValueError, match=r'shape \(n, 2\).*got \(10, 3\)'):
        run_metric(LogLoss(), torch.randn(10, 3), y1)
    with pytest.raises(ValueError, match='outside'): binary_log_loss(torch.tensor([1.5]), torch.tensor([1]))
    # thresh= makes a rating a target: positive from 4 on
    r = torch.tensor([1., 5., 4., 3., 2.])
    s = torch.tensor([0.1, 0.9, 0.6, 0.7, 0.2])
    assert run_metric(AUC(thresh=4), s, r, loss_func=MSELossFlat()) == skm.roc_auc_score([0, 1, 1, 0, 0], s.numpy())

# ---- ranking against the groupby reference -------------------------------------------------------------------------
@st.composite
def ranking_data(draw):
    n = draw(st.integers(1, 250))
    levels = draw(st.integers(1, 12))
    s = np.asarray(draw(st.lists(st.integers(0, levels), min_size=n, max_size=n)), dtype=np.float64)
    r = np.asarray(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    g = np.asarray(draw(st.lists(st.integers(0, draw(st.integers(1, 20))), min_size=n, max_size=n)))
    k = draw(st.one_of(st.none(), st.integers(1, 12)))
    return s, r, g, k

@HYP
@given(ranking_data(), st.integers(1, 64))
def test_rank_metrics_equal_reference(data, bs):
    s,r,g,k = data
    ref,per = ref_rank(s, r, g, k)
    if per.empty:
        with pytest.warns(UserWarning, match='no group'):
            res = rank_metrics(torch.tensor(s), torch.tensor(r), torch.tensor(g), k)
        assert math.isnan(res['mrr']) and res['n_groups'] == 0
        return
    res = rank_metrics(torch.tensor(s), torch.tensor(r), torch.tensor(g), k)
    assert res['n_groups'] == len(per) and res['n_groups'] + res['n_skipped'] == len(set(g) - {0})
    for key in ('mrr', 'ndcg', 'hit_rate'): assert abs(res[key] - ref[key]) < 1e-9, key
    # sklearn's ndcg_score (ties averaged the same way), group by group
    sk = [skm.ndcg_score([r[g == u]], [s[g == u]], k=k) for u in per.index if (g == u).sum() > 1]
    assert np.allclose(sk, per.ndcg[[(g == u).sum() > 1 for u in per.index]], rtol=0, atol=1e-12)
    # the metrics, batch by batch, find the group column by name; scores as they are (a loss with no activation)
    mets = {'mrr': MRR(group='g', k=k), 'ndcg': NDCG(k, group='g')} | ({'hit_rate': HitRate(k, group='g')} if k else {})
    for key,metric in mets.items():
        v = run_metric(metric, torch.tensor(s), torch.tensor(r), torch.tensor(g)[:, None], bs, MSELossFlat())
        assert abs(v - ref[key]) < 1e-9

def test_rank_ties_are_random_order_expectations():
    "Every row tied: the expected value of a random ranking (sampled 200,000 times here)."
    r = np.array([0, 0, 1, 0, 1, 0, 0])
    res = rank_metrics(torch.zeros(7), torch.tensor(r), torch.ones(7, dtype=torch.long), k=3)
    g = np.random.default_rng(0)
    first = r[np.argsort(g.random((200_000, 7)), 1)].argmax(1)   # place of the first relevant row in each order
    assert abs(res['mrr'] - np.where(first < 3, 1 / (first + 1), 0).mean()) < 3e-3
    assert abs(res['hit_rate'] - (first < 3).mean()) < 3e-3

def test_group_position_and_errors():
    class To:
        cat_names = ['genres', 'user', 'item']
        bag_widths = {'genres': 6}   # a multi-hot block of 6 slots first
    assert group_position(To(), 'user') == 6 and group_position(To(), 'item') == 7
    with pytest.raises(ValueError, match="'genres' is multi-hot"): group_position(To(), 'genres')
    with pytest.raises(ValueError, match=r"'usr' is not one of the cat columns \['genres', 'user', 'item'\]"):
        group_position(To(), 'usr')
    with pytest.raises(ValueError, match='needs group='): MRR()
    with pytest.raises(ValueError, match='k must be a positive int'): NDCG(0, group='user')

# ---- no host conversion while accumulating --------------------------------------------------------------------------
def _metrics(): return [AUC(), LogLoss(), MRR(group='g'), NDCG(10, group='g'), HitRate(5, group='g')]

def _batches(device='cpu', n=4):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(64, 2, generator=g).to(device), torch.randint(0, 2, (64, 1), generator=g).to(device),
             torch.randint(0, 9, (64, 1), generator=g).to(device)) for _ in range(n)]

def test_accumulate_has_no_host_conversion():
    mets = _metrics() + [RocAucBinary()]
    for m in mets: m.reset()
    seen = {}
    for pred,y,xc in _batches():
        for m in mets:
            with HostConversions() as mode: m.accumulate(fake_learn(pred, y, x_cat=xc))
            seen.setdefault(m.name, []).extend(mode.seen)
    assert seen.pop('roc_auc_score'), "the counter must see RocAucBinary's per-batch host copy"
    assert seen == {m.name: [] for m in mets[:-1]}
    assert all(isinstance(m.value, float) for m in mets)

@pytest.mark.cuda
def test_accumulate_never_syncs_cuda():
    mets,ref = _metrics(),_metrics()
    for m in mets + ref: m.reset()
    for (pred,y,xc),(pc,yc,xcc) in zip(_batches('cuda'), _batches()):
        torch.cuda.set_sync_debug_mode('error')
        try:
            for m in mets: m.accumulate(fake_learn(pred, y, x_cat=xc))
        finally: torch.cuda.set_sync_debug_mode(0)
        for m in ref: m.accumulate(fake_learn(pc, yc, x_cat=xcc))
    for m,r in zip(mets, ref): assert abs(m.value - r.value) < 1e-6, m.name

# ---- a fastai Learner on chosen outputs: saturated, tied ----------------------------------------------------------
class Lookup(nn.Module):
    "A model whose outputs a test chooses: row `i` (the cont `row`) gets `out[i]`; fit at lr 0 leaves them."
    def __init__(self, out): super().__init__(); self.out = nn.Parameter(out)
    def forward(self, x_cat, x_cont): return self.out[x_cont[:, 0].long()]

def saturated_margins(n, seed):
    """Margins past +-17 (float32 probability 1.0, or tiny), half of them from a grid of 13 values (repeated), and
    targets that follow them loosely (positive and negative rows among the saturated ones)."""
    g = np.random.default_rng(seed)
    m = np.where(g.random(n) < 0.5, g.uniform(-40, 40, n), g.choice(np.linspace(-30, 30, 13), n))
    return m, g.random(n) < 1 / (1 + np.exp(-m / 8))

@pytest.mark.parametrize('loss', ['cross_entropy', 'bce'])
def test_fit_auc_is_sklearn_on_get_preds(loss):
    """The fit's AUC, fastai's RocAucBinary and sklearn's roc_auc_score on the probabilities (the loss's activation on
    the loaders' device, as RocAucBinary applies it) are the same float (`==`) on float32 outputs that saturate and
    tie; sklearn's on get_preds' (the activation on the host) is too on a CPU, within the pairs that rounding can flip
    elsewhere. `score='margin'` ranks the raw outputs. The ranking metrics rank the probabilities too (sklearn's
    ndcg_score, the groupby reference), or the margins with `score='margin'`."""
    n,n_train = 3000,300
    m,pos = saturated_margins(n, seed=0)
    g = np.random.default_rng(1)
    if loss == 'bce': out,y,loss_func = m[:, None],pos.astype(np.float32),BCEWithLogitsLossFlat()
    else:   # two logits a random offset apart from the margin
        a = g.normal(size=n) * 3
        out,y,loss_func = np.stack([a, a + m], 1),np.where(pos, 'yes', 'no'),CrossEntropyLossFlat()
    df = pd.DataFrame({'row': np.arange(n, dtype=np.float32), 'user': np.arange(n) % 30, 'y': y})
    to = TabularGPU(df, procs=[Categorify], cat_names=['user'], cont_names=['row'], y_names='y',
                    splits=(list(range(n_train)), list(range(n_train, n))))
    out = torch.tensor(out, dtype=torch.float32)
    mets = [AUC(), AUC(score='margin', name='auc_margin'), NDCG(10, group='user'), MRR(group='user', k=10),
            HitRate(3, group='user'), NDCG(10, group='user', score='margin', name='ndcg_margin')]
    mets += [RocAucBinary()] if loss == 'cross_entropy' else []   # RocAucBinary softmaxes one column into 1.0s
    learn = Learner(to.dataloaders(bs=256), Lookup(out.clone()), loss_func=loss_func, metrics=mets)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, lr=0)
    assert torch.equal(learn.model.out.data.cpu(), out)   # the model sits on the loaders' device
    fit = dict(zip(learn.recorder.metric_names[3:-1], learn.recorder.values[-1][2:]))
    p,yv = learn.get_preds()
    host,y = (p[:, 1] if p.shape[1] == 2 else p[:, 0]).numpy(),yv.numpy().ravel() == 1
    x = out[n_train:]
    prob = device_probs(learn, x)
    margin = (x[:, 1] - x[:, 0] if x.shape[1] == 2 else x[:, 0]).numpy()
    assert fit['auc'] == skm.roc_auc_score(y, prob) == fit.get('roc_auc_score', fit['auc'])
    assert abs(skm.roc_auc_score(y, host) - fit['auc']) <= auc_rounding_bound(y, prob, host)
    assert fit['auc_margin'] == skm.roc_auc_score(y, margin) != fit['auc']
    assert (prob == 1).sum() > 100 and len(set(prob)) < len(set(margin)) - 100   # saturated, distinct margins tied
    # sklearn's ndcg_score per user, on get_preds and on the margins: float64 sums of at most n terms in [0, 1],
    # each side within n*eps of the exact mean
    users,tol = df.user.values[n_train:],n * np.finfo(np.float64).eps
    for key,s in (('ndcg@10', prob), ('ndcg_margin', margin)):
        sk = np.mean([skm.ndcg_score([y[users == u]], [s[users == u]], k=10) for u in np.unique(users[y])])
        assert abs(fit[key] - sk) < tol, key
    assert abs(fit['ndcg@10'] - fit['ndcg_margin']) > tol
    assert abs(fit['mrr@10'] - ref_rank(prob, y, users + 1, 10)[0]['mrr']) < 1e-9   # codes from 1: 0 is #na#
    assert abs(fit['hit_rate@3'] - ref_rank(prob, y, users + 1, 3)[0]['hit_rate']) < 1e-9

# ---- a fastai Learner on MovieLens 100K ---------------------------------------------------------------------------
@pytest.fixture(scope='module')
def movielens():
    "MovieLens 100K, a random split, a multi-hot column before the user (so its position is past genres' slots)."
    n = torch.get_num_threads()
    torch.set_num_threads(1)   # a shared 2-core machine: one thread is faster here (restored after)
    df = load_movielens_100k()
    df['liked'] = np.where(df.rating > 3, 'yes', 'no')
    splits = RandomSplitter(seed=0)(range_of(df))
    to = TabularGPU(df, procs=[Categorify, FillMissing, Normalize], cont_names=['age'], y_names='liked', splits=splits,
                    cat_names=['genres', 'item_id', 'user_id', 'gender'])
    yield df, splits, to.dataloaders(bs=4096)
    torch.set_num_threads(n)

def test_learner_metrics_equal_references(movielens):
    df,splits,dls = movielens
    set_seed(0)
    mets = [AUC(), RocAucBinary(), LogLoss(), MRR(group='user_id'), NDCG(10, group='user_id'),
            HitRate(10, group='user_id')]
    learn = tabular_learner(dls, layers=[64, 32], metrics=mets)
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(1, 1e-2)
    names = learn.recorder.metric_names
    assert ['auc', 'roc_auc_score', 'log_loss', 'mrr', 'ndcg@10', 'hit_rate@10'] == list(names[3:9]), names
    fit_row = learn.recorder.values[-1]
    with learn.no_bar(): vals = learn.validate()[1:]
    assert np.allclose(vals, fit_row[2:], rtol=0, atol=1e-12)   # fit's table and validate() agree
    x,y = learn.get_preds(act=noop)
    host,y,prob = learn.get_preds()[0][:, 1].numpy(),y.numpy().ravel(),device_probs(learn, x)
    # the fit's AUC is RocAucBinary's and sklearn's on the probabilities, to the last bit (the margins' AUC differs
    # here: distinct margins give equal float32 probabilities); on get_preds' host probabilities within their rounding
    assert fit_row[2] == fit_row[3] == skm.roc_auc_score(y, prob) != skm.roc_auc_score(y, (x[:, 1] - x[:, 0]).numpy())
    assert abs(skm.roc_auc_score(y, host) - fit_row[2]) <= auc_rounding_bound(y == 1, prob, host)
    assert abs(vals[2] - skm.log_loss(y, torch.softmax(x.double(), 1).numpy())) < 1e-6
    # the groupby reference: raw user ids from the frame, users unseen in training left out
    users = df.user_id.values[np.asarray(splits[1])]
    known = np.isin(users, np.asarray(dls.train_ds.classes['user_id'].items[1:], dtype=users.dtype))
    ref,per = ref_rank(prob, y, np.where(known, users, 0), 10)
    ref_mrr = ref_rank(prob, y, np.where(known, users, 0), None)[0]['mrr']   # MRR has no cut-off
    assert abs(vals[3] - ref_mrr) < 1e-9 and abs(vals[4] - ref['ndcg']) < 1e-9 and abs(vals[5] - ref['hit_rate']) < 1e-9
    assert mets[3].n_groups == len(per) > 900
    learn.show_results(max_n=3)   # unchanged by the metrics

def test_learner_checks_group_before_training(movielens):
    dls = movielens[2]
    with pytest.raises(ValueError, match="'genres' is multi-hot"): tabular_learner(dls, metrics=NDCG(group='genres'))
    with pytest.raises(ValueError, match="'userId' is not one of"): tabular_learner(dls, metrics=MRR(group='userId'))

# ---- two processes -------------------------------------------------------------------------------------------------
N_ROWS,BS = 1003,100

def _data():
    """The same rows in every process: float32 logits (margins past 17 for many: probabilities that saturate and tie),
    targets, groups with ties."""
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(N_ROWS, 2, generator=g) * 12).round(decimals=1)
    return x, torch.randint(0, 2, (N_ROWS, 1), generator=g), torch.randint(0, 30, (N_ROWS, 1), generator=g)

def _single_process_values():
    x,y,xc = _data()
    return {m.name: run_metric(m, x, y, xc, BS) for m in _metrics()}

def _small_learner():
    "A seeded frame and learner, identical in every process."
    g = np.random.default_rng(0)
    df = pd.DataFrame({'user': g.integers(0, 40, 3000), 'item': g.integers(0, 60, 3000), 'x': g.normal(size=3000)})
    df['y'] = (df.x + (df.item % 3) + g.normal(size=3000) > 1).map({True: 'yes', False: 'no'})
    splits = RandomSplitter(seed=0)(range_of(df))
    to = TabularGPU(df, procs=[Categorify, Normalize], cat_names=['item', 'user'], cont_names=['x'], y_names='y',
                    splits=splits)
    set_seed(0)
    mets = [AUC(), LogLoss(), MRR(group='user'), NDCG(5, group='user'), HitRate(3, group='user')]
    return df.iloc[splits[1]], tabular_learner(to.dataloaders(bs=256), layers=[16], metrics=mets)

def worker(rank, world, store, out):
    """One process: (1) a Learner validates half the validation rows; (2) a shard as fastai's DistributedDL makes it
    (the last rows padded with the first ones) through the metrics. Both must give the whole set's values. The ranks
    meet at the file `store` (a port picked beforehand could be taken by another run before rank 0 binds it)."""
    valid,learn = _small_learner()
    with learn.no_bar(): full = learn.validate()[1:]   # before the process group: this process's rows only
    torch.distributed.init_process_group('gloo', init_method=f'file://{store}', rank=rank, world_size=world,
                                         timeout=__import__('datetime').timedelta(seconds=60))
    with learn.no_bar(): half = learn.validate(dl=learn.dls.test_dl(valid.iloc[rank::world], with_labels=True))[1:]
    x,y,xc = _data()
    n_padded = -(-N_ROWS // world) * world
    idx = (list(range(N_ROWS)) * 2)[:n_padded][rank * n_padded // world:(rank + 1) * n_padded // world]
    x,y,xc = x[idx],y[idx],xc[idx]
    dl = SimpleNamespace(dataset=SimpleNamespace(cat_names=['g']), n=N_ROWS, n_padded=n_padded, rank=rank,
                         world_size=world, i=0)
    mets = _metrics()
    for m in mets: m.reset()
    for i in range(0, len(y), BS):
        dl.i = min(i + BS, len(y))   # DistributedDL counts the rows read, this batch's included
        for m in mets: m.accumulate(fake_learn(x[i:i+BS], y[i:i+BS], x_cat=xc[i:i+BS], dl=dl))
    res = {m.name: m.value for m in mets}
    res['again'] = mets[0].value   # read twice: cached, no second collective
    res['learner'] = [list(map(float, full)), list(map(float, half))]
    with open(out, 'w') as f: json.dump(res, f)
    torch.distributed.destroy_process_group()

def test_two_processes_gather_once(tmp_path):
    world = 2
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=os.pathsep.join([os.getcwd(), os.path.dirname(__file__)]))
    code = 'import sys, test_metrics as t; t.worker(int(sys.argv[1]), 2, sys.argv[2], sys.argv[3])'
    args = lambda r: [sys.executable, '-c', code, str(r), str(tmp_path/'store'), str(tmp_path/f'{r}.json')]
    procs = [subprocess.Popen(args(r), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    try: outs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None: p.kill()
    assert all(p.returncode == 0 for p in procs), outs
    ref = _single_process_values()
    x,y,xc = _data()
    y = y.numpy().ravel()
    sk = skm.roc_auc_score(y, CrossEntropyLossFlat().activation(x)[:, 1].numpy())   # what get_preds would gather
    assert sk != skm.roc_auc_score(y, (x[:, 1] - x[:, 0]).numpy())   # distinct margins tie as probabilities
    for r in range(world):
        res = json.loads((tmp_path/f'{r}.json').read_text())
        assert res.pop('again') == res['auc']
        full,half = res.pop('learner')
        # float32 outputs of a model vary in the last bits with the batch's composition: not the metrics' doing
        assert np.allclose(full, half, rtol=0, atol=1e-7) and len(full) == 5, (full, half)
        assert res.keys() == ref.keys()
        for k in ref: assert abs(res[k] - ref[k]) < 1e-12, (r, k, res[k], ref[k])
        assert res['auc'] == sk   # sklearn's on the probabilities of every rank's rows, to the last bit
    # a shard alone gives another value: the gather is what makes them equal
    assert abs(run_metric(AUC(), x[:N_ROWS // 2], torch.tensor(y[:N_ROWS // 2])) - ref['auc']) > 1e-6

# ---- the bench suite ------------------------------------------------------------------------------------------------
def test_bench_suite_small(tmp_path):
    "`--suite metrics` runs, and our AUC is fastai's RocAucBinary's value on the same batches."
    from fastai_gpu_tabular.bench import main
    res = main(['--suite', 'metrics', '--metric-rows', '20000', '--metric-repeat', '1', '--metric-bs', '4096',
                '--out', str(tmp_path/'m.json')])
    r = res['metrics']['rows'][20000]
    assert set(r) == {'RocAucBinary (fastai)', 'AUC', 'LogLoss', 'MRR', 'NDCG@10'}
    assert r['AUC']['value'] == r['RocAucBinary (fastai)']['value']
    assert json.loads((tmp_path/'m.json').read_text())['meta']['suite'] == 'metrics'
