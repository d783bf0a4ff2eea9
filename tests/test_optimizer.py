"""LAMB: equivalence with fastai's `Lamb`, no host sync in `step`, fastai Learner integration, torch-optimizer,
batch-size helpers."""
import copy
import sys
import warnings
from contextlib import nullcontext
from pathlib import Path
import numpy as np
import pandas as pd
import pytest
import torch
from fastai.callback.fp16 import MixedPrecision
from fastai.optimizer import Adam
from fastai.optimizer import Lamb as FastaiLamb
from fastai.tabular.all import (
    Callback,
    Categorify,
    FillMissing,
    Normalize,
    RandomSplitter,
    TabularModel,
    TabularPandas,
    combined_cos,
    norm_bias_params,
    range_of,
    set_seed,
    tabular_learner,
)
from helpers.host_sync import HostConversions
from torch import nn
import fastai_gpu_tabular
from fastai_gpu_tabular.train.optimizer import (
    ExcludeFromAdaptation,
    Lamb,
    LambOptimizer,
    WDGroupsOptimWrapper,
    lamb,
    lamb_param_groups,
    no_wd_params,
    scale_lr,
    scale_wd,
    torch_optimizer_lamb,
    warmup_pct,
)

# ---- helpers ----------------------------------------------------------------------------------------------------
CATS = ['workclass', 'education', 'marital-status', 'occupation', 'relationship', 'race', 'gender', 'native-country']
CONTS = ['age', 'fnlwgt', 'educational-num', 'capital-gain', 'capital-loss', 'hours-per-week']

@pytest.fixture(scope='module', autouse=True)
def one_thread():
    """These tensors are tiny: a second intra-op thread buys nothing, and on a busy 2-core machine its spin-waits made
    this module 40x slower (1 s -> 40 s for 100 steps)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

@pytest.fixture(scope='module')
def dls():
    """2,000 rows of the shipped adult dataset: 6 train batches of 256. fastai's own TabularPandas keeps these tests
    about the optimizer (the project's loader has its own tests)."""
    df = pd.read_parquet(Path(fastai_gpu_tabular.__file__).parent/'datasets'/'adult.parquet')
    df = df.sample(2000, random_state=0).reset_index(drop=True)
    to = TabularPandas(df, procs=[Categorify, FillMissing, Normalize], cat_names=CATS, cont_names=CONTS,
                       y_names='income', splits=RandomSplitter(seed=0)(range_of(df)))
    return to.dataloaders(bs=256)

def _learner(dls, tmp_path, opt_func, seed=0, **kwargs):
    torch.manual_seed(seed)
    learn = tabular_learner(dls, layers=[32, 16], opt_func=opt_func, path=tmp_path, **kwargs)
    learn.no_bar(); learn.no_logging()
    return learn

def _tab_model(dtype=torch.float32, seed=0):
    "fastai's TabularModel: embeddings, BatchNorm on the conts, Linear+BatchNorm layers."
    torch.manual_seed(seed)
    return TabularModel([(10, 4), (7, 3)], n_cont=3, out_sz=1, layers=[16, 8]).to(dtype)

def _batches(n, dtype=torch.float32, bs=64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.stack([torch.randint(0, 10, (bs,), generator=g), torch.randint(0, 7, (bs,), generator=g)], 1),
             torch.randn(bs, 3, generator=g).to(dtype), torch.randn(bs, 1, generator=g).to(dtype)) for _ in range(n)]

def _opt(model, opt_func, wd, decouple_wd):
    "Two param groups (the second at twice the lr), fastai's wd_bn_bias=False flags."
    body, head = list(model.embeds.parameters()) + list(model.bn_cont.parameters()), list(model.layers.parameters())
    opt = opt_func([body, head], lr=1e-2, wd=wd, decouple_wd=decouple_wd)
    for p in norm_bias_params(model): opt.state[p]['do_wd'] = False
    return opt

def _hypers(opt, i):
    "A changing lr and mom at step `i`."
    lr = 1e-2*(1 + i%7)/4
    opt.set_hyper('lr', [lr/2, lr])
    opt.set_hyper('mom', 0.85 + 0.01*(i%10))

def _train(model, opt_func, batches, wd, decouple_wd):
    opt = _opt(model, opt_func, wd, decouple_wd)
    for i,(xc,xn,y) in enumerate(batches):
        _hypers(opt, i)
        loss = ((model(xc, xn) - y)**2).mean()
        loss.backward(); opt.step(); opt.zero_grad()
    return opt

def _max_diff(m1, m2):
    return max((p1 - p2).abs().max().item() for p1,p2 in zip(m1.parameters(), m2.parameters(), strict=True))

# ---- same math as fastai's Lamb -----------------------------------------------------------------------------------
MOMENTS = ('grad_avg', 'sqr_avg', 'step')

def _lockstep(ref, ref_opts, ours, opt, batches, hypers, wd, decouple_wd, copy_state=True):
    """Step `ref` (with `ref_opts`, fastai's) and `ours` (with `opt`) from the reference's weights, moments
    (`copy_state`) and grads at every step, and compare each step's results: the same math differs only by that step's
    rounding. (Compared after many steps on their own grads instead, two runs are apart by rounding each step feeds
    back and amplifies, up to lr/eps where grads are tiny: a bound then holds only on the CPU it was seen on.)
    The moments: a few roundings of the terms they average. The weights: their own rounding, plus the step's, relative
    to its size: a dozen element-wise ops, the moments' rounding relative to Adam's normalized step m/(sqrt(v)+eps)
    (below 30 eps at these betas) and LAMB's trust ratio, two norms of up to n elements (n*eps each at most)."""
    eps = torch.finfo(next(ref.parameters()).dtype).eps
    n = max(p.numel() for p in ref.parameters())
    owner = {id(p): (o, o.hypers[j]) for o in ref_opts for j,pg in enumerate(o.param_lists) for p in pg}
    for i,(xc,xn,y) in enumerate(batches):
        for o in (*ref_opts, opt): hypers(o, i)
        ((ref(xc, xn) - y)**2).mean().backward()
        before = []
        with torch.no_grad():
            for p_ref,p in zip(ref.parameters(), ours.parameters(), strict=True):
                p.copy_(p_ref); p.grad = p_ref.grad.clone()
                st = owner[id(p_ref)][0].state[p_ref]
                m0 = {k: st[k].clone() for k in MOMENTS[:2] if k in st}
                if copy_state:
                    opt.state[p].update({k: v.clone() for k,v in m0.items()})
                    if 'step' in st: opt.state[p]['step'] = st['step']
                before.append((p_ref.detach().clone(), p.grad.clone(), m0))
        for o in (*ref_opts, opt): o.step(); o.zero_grad()
        for (name,p_ref),p,(p0,g,m0) in zip(ref.named_parameters(), ours.parameters(), before, strict=True):
            o_ref,hyper = owner[id(p_ref)]
            g_eff = g.abs().max() + (0 if decouple_wd else wd * p0.abs().max())   # L2: the moments average g + wd*p
            s_ref, s = o_ref.state[p_ref], opt.state[p]
            assert s['step'] == s_ref['step'], name
            for k,term in (('grad_avg', g_eff), ('sqr_avg', g_eff**2)):
                tol = 4 * eps * (m0[k].abs().max() + term if k in m0 else term)
                torch.testing.assert_close(s[k], s_ref[k], rtol=0, atol=tol.item(), msg=f'step {i}: {name} {k}')
            _assert_step(p, p_ref, p0, hyper['lr'] * wd, n, f'step {i}: {name}')

def _assert_step(p, p_ref, p0, lr_wd, n, msg):
    """`p` is the step from `p0` that gave `p_ref`, but for rounding: each result within two roundings of the exact
    one, and the step's own, relative to its size (see `_lockstep`; `n`: the most elements of a param)."""
    eps = torch.finfo(p.dtype).eps
    scale = (p_ref - p0).abs().max() + lr_wd * p0.abs().max()   # the step (and weight decay's part of it)
    torch.testing.assert_close(p, p_ref, rtol=4 * eps, atol=((n + 64) * eps * scale).item(), msg=msg)

@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('decouple_wd', [True, False])
def test_matches_fastai_lamb(decouple_wd, dtype):
    "100 steps with a changing lr and mom, two groups, no wd on norms and biases: each as fastai's Lamb takes it."
    ref, ours = _tab_model(dtype), _tab_model(dtype)
    opt_ref, opt = _opt(ref, FastaiLamb, 0.1, decouple_wd), _opt(ours, Lamb, 0.1, decouple_wd)
    assert isinstance(opt, LambOptimizer)
    _lockstep(ref, [opt_ref], ours, opt, _batches(100, dtype), _hypers, 0.1, decouple_wd)
    assert opt.state[next(ours.parameters())]['step'] == 100
    # the tolerance sees a missing weight decay
    ref, ours = _tab_model(dtype), _tab_model(dtype)
    opt_ref, opt = _opt(ref, FastaiLamb, 0.1, decouple_wd), _opt(ours, Lamb, 0., decouple_wd)
    with pytest.raises(AssertionError):
        _lockstep(ref, [opt_ref], ours, opt, _batches(3, dtype), _hypers, 0.1, decouple_wd)

def test_state_dict_interchangeable_with_fastai():
    "Same hypers and state keys: a checkpoint of fastai's Lamb resumes in ours, where it takes fastai's next step."
    batches = _batches(4)
    ref, ours = _tab_model(), _tab_model()
    opt_ref = _train(ref, FastaiLamb, batches[:3], wd=0.1, decouple_wd=True)
    ours.load_state_dict(ref.state_dict())
    body = list(ours.embeds.parameters()) + list(ours.bn_cont.parameters())
    opt = Lamb([body, list(ours.layers.parameters())], lr=1.)
    opt.load_state_dict(copy.deepcopy(opt_ref.state_dict()))
    assert opt.hypers == opt_ref.hypers
    # the next step from the loaded moments (not the reference's, copied), the same weights and grads
    _lockstep(ref, [opt_ref], ours, opt, batches[3:], lambda o,i: None, 0.1, True, copy_state=False)
    for p_ref,p in zip(ref.parameters(), ours.parameters(), strict=True):
        assert opt.state[p]['step'] == 4 and opt.state[p].get('do_wd', True) == opt_ref.state[p_ref].get('do_wd', True)

# ---- parameters kept out of the trust ratio ------------------------------------------------------------------------
@pytest.mark.parametrize('decouple_wd', [True, False])
def test_excluded_params_take_fastai_adams_step(decouple_wd):
    "`do_adapt=False` params follow fastai's Adam, the others fastai's Lamb, all in one of our optimizers: 50 steps."
    ref, ours = _tab_model(torch.float64), _tab_model(torch.float64)
    assert any(p is ours.embeds[0].weight for p in no_wd_params(ours))   # the tables are among them
    kw = dict(lr=1e-2, mom=0.9, sqr_mom=0.99, eps=1e-5, wd=0.1, decouple_wd=decouple_wd)
    out_ref = set(map(id, no_wd_params(ref)))
    refs = [Adam([p for p in ref.parameters() if id(p) in out_ref], **kw),
            FastaiLamb([p for p in ref.parameters() if id(p) not in out_ref], **kw)]
    opt = Lamb(list(ours.parameters()), **kw)
    for p in no_wd_params(ours): opt.state[p]['do_adapt'] = False
    lrs = lambda o,i: o.set_hyper('lr', 1e-2*(1 + i%7)/4)
    batches = _batches(50, torch.float64)
    _lockstep(ref, refs, ours, opt, batches, lrs, 0.1, decouple_wd)
    # and the exclusion matters at that tolerance: plain LAMB leaves it at once
    lamb_all = _tab_model(torch.float64)
    with pytest.raises(AssertionError):
        _lockstep(ref, refs, lamb_all, Lamb(list(lamb_all.parameters()), **kw), batches[:3], lrs, 0.1, decouple_wd)

def _one_step(opt_func, ps, grads, **kw):
    ps = [p.clone().requires_grad_() for p in ps]
    for p,g in zip(ps, grads, strict=True): p.grad = g.clone()
    opt_func(ps, lr=0.1, **kw).step()
    return [p.detach() for p in ps]

def test_zero_weight_or_zero_grad_gives_trust_ratio_one():
    g = torch.randn(4, 3)
    ps    = [torch.zeros(4, 3), torch.randn(5), torch.zeros(6), torch.randn(2, 2)]
    grads = [g,                 torch.zeros(5), torch.zeros(6), torch.randn(2, 2)]
    ref, ours = _one_step(FastaiLamb, ps, grads), _one_step(Lamb, ps, grads)
    for p_ref,p in zip(ref, ours, strict=True): torch.testing.assert_close(p, p_ref, atol=1e-7, rtol=1e-6)
    # r1 == 0: q=1, so the step is -lr*g/(|g|+eps) after one debiased step (a naive r1/r2 would give q=0: no move)
    torch.testing.assert_close(ours[0], -0.1*g/(g.abs() + 1e-5))
    # r2 == 0: nothing moves, and a zero weight with a zero grad (0/0 in r1/r2) stays 0, not NaN
    torch.testing.assert_close(ours[1], ps[1])
    assert torch.equal(ours[2], torch.zeros(6))

def test_mixed_dtypes_in_one_group():
    ps = [torch.randn(3, 4), torch.randn(5, dtype=torch.float64), torch.randn(2)]
    grads = [torch.randn_like(p) for p in ps]
    ref, ours = _one_step(FastaiLamb, ps, grads, wd=0.1), _one_step(Lamb, ps, grads, wd=0.1)
    for p_ref,p in zip(ref, ours, strict=True):
        assert p.dtype == p_ref.dtype
        torch.testing.assert_close(p, p_ref, atol=1e-6, rtol=1e-5)

def test_sparse_grad_raises_before_any_update():
    lin, emb = nn.Linear(3, 1), nn.Embedding(10, 3, sparse=True)
    lin(emb(torch.tensor([1, 2]))).sum().backward()
    before = [p.detach().clone() for p in (*lin.parameters(), emb.weight)]
    opt = Lamb([list(lin.parameters()), [emb.weight]], lr=0.1)
    with pytest.raises(RuntimeError, match='LAMB needs dense gradients'): opt.step()
    for p0,p in zip(before, (*lin.parameters(), emb.weight), strict=True): assert torch.equal(p0, p)

def test_lamb_partial():
    opt_func = lamb(mom=0.8, wd=0.05, decouple_wd=False)
    opt = opt_func(nn.Linear(2, 2).parameters(), lr=3e-3)
    assert isinstance(opt, LambOptimizer) and not opt.decouple_wd
    assert opt.hypers[0] == dict(lr=3e-3, mom=0.8, sqr_mom=0.99, eps=1e-5, wd=0.05)

# ---- no host synchronization --------------------------------------------------------------------------------------
def _count_conversions(opt_func, n_steps=3, no_adapt=False):
    model = _tab_model()
    opt = opt_func([list(model.embeds.parameters()), list(model.layers.parameters())], lr=1e-2, wd=0.1)
    for p in norm_bias_params(model): opt.state[p]['do_wd'] = False
    for p in (no_wd_params(model) if no_adapt else []): opt.state[p]['do_adapt'] = False
    seen = []
    for xc,xn,y in _batches(n_steps):
        ((model(xc, xn) - y)**2).mean().backward()
        with HostConversions() as mode: opt.step()
        seen += mode.seen
        opt.zero_grad()
    return seen

def test_no_host_conversion_in_step():
    assert _count_conversions(FastaiLamb), "the counter must see fastai's `r1 == 0` and `min(r1/r2, 10)`"
    assert _count_conversions(Lamb) == []
    assert _count_conversions(Lamb, no_adapt=True) == []

@pytest.mark.cuda
@pytest.mark.parametrize('no_adapt', [False, True])
def test_no_host_sync_in_step_cuda(no_adapt):
    model = _tab_model().cuda()
    opt = Lamb([list(model.embeds.parameters()), list(model.layers.parameters())], lr=1e-2, wd=0.1)
    for p in norm_bias_params(model): opt.state[p]['do_wd'] = False
    for p in (no_wd_params(model) if no_adapt else []): opt.state[p]['do_adapt'] = False
    ref = copy.deepcopy(model).cpu()
    for xc,xn,y in _batches(3):
        ((model(xc.cuda(), xn.cuda()) - y.cuda())**2).mean().backward()
        torch.cuda.set_sync_debug_mode('error')
        try: opt.step()
        finally: torch.cuda.set_sync_debug_mode(0)
        opt.zero_grad()
    assert _max_diff(model.cpu(), ref) > 0

# ---- fastai Learner integration -----------------------------------------------------------------------------------
def _params(learn): return [p.detach().cpu().clone() for p in learn.model.parameters()]
def _same(p0, p): return torch.equal(p0, p.detach().cpu())   # `fit` may have moved the model to the loaders' device

class RecordSteps(Callback):
    "The hypers at every step, the weights after the first, and the params that weight decay skips (`do_wd`)."
    def before_fit(self): self.hypers = []
    def before_step(self): self.hypers.append([dict(h) for h in self.opt.hypers])
    def after_step(self):
        if self.train_iter == 0: self.first = _params(self.learn)
    def after_fit(self): self.no_wd = [not self.opt.state[p].get('do_wd', True) for p in self.model.parameters()]

def test_learner_fit_one_cycle_matches_fastai(dls, tmp_path):
    """wd_bn_bias=False, train_bn and the lr/mom schedule all go through the Learner as with fastai's Lamb: the same
    hypers at every step, the same params kept from weight decay, and (the same weights and batch) the same first step.
    (What each step then does: `test_matches_fastai_lamb`. After many steps on their own grads, the two runs would be
    apart by rounding that each step amplifies: by how much depends on the CPU.)"""
    res = {}
    for name,opt_func in (('fastai', FastaiLamb), ('ours', lamb())):
        learn = _learner(dls, tmp_path, opt_func, cbs=(rec := RecordSteps()))
        p0 = _params(learn)
        np.random.seed(0)   # the same batches: fastai's TabularPandas samples them with numpy (TabWeightedDL)
        learn.fit_one_cycle(2, 1e-2, wd=0.1)
        res[name] = learn,rec,p0
    (_, r_ref, p0_ref), (ours, r, p0) = res['fastai'], res['ours']
    assert isinstance(ours.opt, LambOptimizer) and all(torch.equal(a, b) for a,b in zip(p0, p0_ref, strict=True))
    assert len(r.hypers) == 2*len(dls.train) and r.hypers == r_ref.hypers
    assert len({h[0]['lr'] for h in r.hypers}) > 5 and len({h[0]['mom'] for h in r.hypers}) > 5
    assert r.no_wd == r_ref.no_wd and 0 < sum(r.no_wd) < len(r.no_wd)
    n = max(p.numel() for p in p0)
    for (name,_),a,b,w in zip(ours.model.named_parameters(), r.first, r_ref.first, p0, strict=True):
        _assert_step(a, b, w, r.hypers[0][0]['lr'] * 0.1, n, name)
    p = next(ours.model.parameters())
    assert ours.opt.state[p]['step'] == 2*len(dls.train)

def test_lr_find(dls, tmp_path):
    """lr_find with our Lamb: fastai's lrs, `num_it` steps, the first loss (the same model and batch), and the model
    restored. (Its later losses, and the suggestion drawn from them, follow each run's own rounding.)"""
    res = {}
    for name,opt_func in (('fastai', FastaiLamb), ('ours', lamb())):
        learn = _learner(dls, tmp_path, opt_func)
        before = _params(learn)
        np.random.seed(0)   # the same batches (fastai's TabWeightedDL samples with numpy)
        learn.lr_find(num_it=30, stop_div=False, show_plot=False)   # no stop where a loss crosses a threshold
        res[name] = learn.recorder.lrs, torch.stack(learn.recorder.losses).cpu()
        for p0,p in zip(before, learn.model.parameters(), strict=True): assert _same(p0, p)   # restored
    (lrs_ref, loss_ref), (lrs, loss) = res['fastai'], res['ours']
    assert lrs == lrs_ref and len(lrs) == len(loss) == 30 and loss[0] == loss_ref[0]

def test_exclude_from_adaptation_callback(dls, tmp_path):
    "The flags land on exactly `no_wd_params`, survive `clear_state` and save/load, and change training."
    def run(**kw):   # every RNG seeded (numpy's draws TabWeightedDL's batches): the runs see the same batches
        learn = _learner(dls, tmp_path, lamb(wd=0.01), **kw)
        set_seed(1)
        learn.lr_find(num_it=10, show_plot=False)
        learn.fit_one_cycle(1, 1e-2)
        return learn
    learn = run(cbs=ExcludeFromAdaptation())
    out = set(map(id, no_wd_params(learn.model)))
    flags = {id(p): learn.opt.state[p].get('do_adapt', True) for p in learn.model.parameters()}
    assert 0 < len(out) < len(flags) and {i for i,f in flags.items() if not f} == out
    learn.opt.clear_state()
    assert {id(p) for p in learn.model.parameters() if not learn.opt.state[p].get('do_adapt', True)} == out
    learn.save('x', with_opt=True)
    fresh = _learner(dls, tmp_path, lamb(wd=0.01))
    fresh.create_opt(); fresh.load('x', with_opt=True)
    assert [fresh.opt.state[p].get('do_adapt', True) for p in fresh.model.parameters()] == list(flags.values())
    plain, again = run(), run()
    # same batches, same result (to the last bits of a GPU's atomic adds): the difference is the callback's
    assert _max_diff(plain.model, again.model) < 1e-4 and _max_diff(plain.model, learn.model) > 1e-3   # 0 and 0.03 here

def test_exclude_from_adaptation_params(dls, tmp_path):
    "ExcludeFromAdaptation(params): exactly the params that function returns are kept out of the trust ratio."
    pick = lambda m: [m.embeds[0].weight, m.layers[-1][0].weight]
    learn = _learner(dls, tmp_path, lamb(), cbs=ExcludeFromAdaptation(pick))
    learn.fit(1, 1e-2)
    out = {id(p) for p in learn.model.parameters() if not learn.opt.state[p].get('do_adapt', True)}
    assert out == set(map(id, pick(learn.model))) and len(out) == 2

def test_exclude_from_adaptation_warns_for_other_optimizers(dls, tmp_path):
    learn = _learner(dls, tmp_path, Adam, cbs=ExcludeFromAdaptation())
    with pytest.warns(UserWarning, match="only acts on fastai_gpu_tabular's Lamb, not Optimizer"): learn.fit(1, 1e-3)

def test_save_load_keeps_optimizer_state(dls, tmp_path):
    learn = _learner(dls, tmp_path, lamb(wd=0.01))
    learn.fit_one_cycle(1, 1e-2)
    learn.save('lamb', with_opt=True)
    sd = learn.opt.state_dict()
    fresh = _learner(dls, tmp_path, lamb(wd=0.01), seed=1)
    fresh.create_opt()
    fresh.load('lamb', with_opt=True)
    sd2 = fresh.opt.state_dict()
    assert [dict(h) for h in sd2['hypers']] == [dict(h) for h in sd['hypers']]
    assert len(sd2['state']) == len(sd['state'])
    for s,s2 in zip(sd['state'], sd2['state'], strict=True):
        assert s.keys() == s2.keys() and {'grad_avg', 'sqr_avg', 'step'} <= set(s)
        for k in s: assert torch.equal(s[k], s2[k]) if torch.is_tensor(s[k]) else s[k] == s2[k]
    fresh.fit(1, 1e-3)   # and training goes on from the loaded state
    p = next(fresh.model.parameters())
    assert fresh.opt.state[p]['step'] == 2*len(dls.train)

@pytest.mark.parametrize('wd_bn_bias', [False, True])
def test_wd_bn_bias(dls, tmp_path, wd_bn_bias):
    "With zero grads only weight decay moves weights (zero moments: step 0, q=1): norms and biases keep theirs."
    learn = _learner(dls, tmp_path, lamb(), wd_bn_bias=wd_bn_bias)
    learn.create_opt()
    learn.opt.set_hypers(lr=0.1, wd=0.5)
    for p in learn.model.parameters(): p.grad = torch.zeros_like(p)
    before = _params(learn)
    learn.opt.step()
    bn_bias = set(map(id, norm_bias_params(learn.model)))
    assert len(bn_bias) > 0
    for p0,p in zip(before, learn.model.parameters(), strict=True):
        decayed = wd_bn_bias or id(p) not in bn_bias
        torch.testing.assert_close(p, p0*(1 - 0.1*0.5) if decayed else p0, atol=0, rtol=1e-6)

def test_frozen_params_and_train_bn(dls, tmp_path):
    "Frozen params have no grad and are not stepped; with train_bn the norm layers of the frozen group still train."
    splitter = lambda m: [list(m.embeds.parameters()) + list(m.bn_cont.parameters()) + list(m.layers[:-1].parameters()),
                          list(m.layers[-1].parameters())]
    learn = _learner(dls, tmp_path, lamb(), splitter=splitter)
    learn.freeze()
    bn = set(map(id, norm_bias_params(learn.model, with_bias=False)))
    frozen, head = (set(map(id, g)) for g in splitter(learn.model))
    before = _params(learn)
    learn.fit(1, 1e-2)
    for p0,(n,p) in zip(before, learn.model.named_parameters(), strict=True):
        if id(p) in head or id(p) in bn: assert not _same(p0, p), n
        else: assert id(p) in frozen and _same(p0, p), n

class CountSteps(Callback):
    "The training batches, and the steps cancelled (fastai's `MixedPrecision` cancels those whose grads overflowed)."
    def before_fit(self): self.batches,self.skipped = 0,0
    def after_batch(self): self.batches += self.training
    def after_cancel_step(self): self.skipped += 1

class ScaledOverflow(MixedPrecision):
    """fastai's fp16 callback with its grad scaler on the CPU (fastai's scales on CUDA only) and without autocast, and
    an overflow in the first batch's grads (an inf), as fp16 grads overflow on a GPU."""
    def before_fit(self): self.autocast,self.learn.scaler,self.scales = nullcontext(),torch.GradScaler('cpu'),[]
    def after_backward(self):
        if self.iter == 0: next(self.model.parameters()).grad.view(-1)[0] = float('inf')

@pytest.mark.parametrize('precision', ['fp16', 'bf16', 'overflow'])
def test_mixed_precision(dls, tmp_path, precision):
    """On CPU the AMP callbacks disable autocast and the scaler (with a warning); on CUDA they run for real, and fp16's
    grad scaler skips the steps whose grads overflow: LAMB steps once a batch it was not skipped on. `overflow`: a
    scaler that runs on the CPU, and one overflow, skipped."""
    learn = _learner(dls, tmp_path, lamb(wd=0.01), cbs=(steps := CountSteps()))
    if precision == 'overflow': learn.add_cb(ScaledOverflow())
    else: learn = learn.to_fp16() if precision == 'fp16' else learn.to_bf16()
    cpu_amp = not torch.cuda.is_available() and precision != 'overflow'
    with pytest.warns(UserWarning, match='CUDA is not available') if cpu_amp else nullcontext():
        learn.fit_one_cycle(1, 1e-2)
    assert all(torch.isfinite(p).all() for p in learn.model.parameters())
    assert steps.batches == len(dls.train) and steps.skipped < steps.batches   # it trained
    if precision == 'overflow': assert steps.skipped == 1
    elif cpu_amp or precision == 'bf16': assert steps.skipped == 0   # no scaler (bf16 needs none): nothing skipped
    assert learn.opt.state[next(learn.model.parameters())]['step'] == steps.batches - steps.skipped

# ---- torch-optimizer's Lamb through OptimWrapper ------------------------------------------------------------------
def test_lamb_param_groups(dls, tmp_path):
    model = _learner(dls, tmp_path, lamb()).model
    groups = lamb_param_groups(model)
    assert [g['do_wd'] for g in groups] == [True, False] and groups[1]['weight_decay'] == 0.
    ids = [id(p) for g in groups for p in g['params']]
    assert sorted(ids) == sorted(map(id, model.parameters()))   # each param exactly once
    decay = set(map(id, groups[0]['params']))
    linear_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    assert decay == linear_weights
    no_wd = set(map(id, groups[1]['params']))
    assert {id(e.weight) for e in model.embeds} <= no_wd
    assert set(map(id, norm_bias_params(model))) <= no_wd
    assert set(map(id, no_wd_params(model))) == no_wd
    # a splitter's groups are each split in two
    split = lambda m: [list(m.embeds.parameters()), list(m.layers.parameters())]
    assert [g['do_wd'] for g in lamb_param_groups(model, split)] == [False, True, False]

def test_torch_optimizer_fit_one_cycle(dls, tmp_path):
    torch_optimizer = pytest.importorskip('torch_optimizer', reason="torch-optimizer is the `lamb` extra")
    learn = _learner(dls, tmp_path, torch_optimizer_lamb(wd=0.01), splitter=lamb_param_groups)
    before = _params(learn)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter('always')
        learn.fit_one_cycle(1, 1e-2, wd=0.1)
    assert not [w for w in seen if 'lamb_param_groups' in str(w.message)]
    assert isinstance(learn.opt, WDGroupsOptimWrapper) and isinstance(learn.opt.opt, torch_optimizer.Lamb)
    pgs = learn.opt.opt.param_groups
    # fit's wd reached the decayed group only; the schedule reached lr and betas[0] of the torch groups
    assert [pg['weight_decay'] for pg in pgs] == [0.1, 0.]
    last = (len(dls.train) - 1)/len(dls.train)   # fit_one_cycle's position at the last batch
    for pg in pgs:
        assert pg['lr'] == pytest.approx(combined_cos(0.25, 1e-2/25, 1e-2, 1e-2/1e5)(last))
        assert pg['betas'][0] == pytest.approx(combined_cos(0.25, 0.95, 0.85, 0.95)(last))
    assert len(set(learn.recorder.hps['mom'])) > 2
    assert all(not _same(p0, p) for p0,p in zip(before, learn.model.parameters(), strict=True))

def test_torch_optimizer_warns_without_groups(dls, tmp_path):
    pytest.importorskip('torch_optimizer', reason="torch-optimizer is the `lamb` extra")
    learn = _learner(dls, tmp_path, torch_optimizer_lamb(wd=0.01))
    with pytest.warns(UserWarning, match='splitter=lamb_param_groups'): learn.create_opt()

def test_torch_optimizer_missing_names_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, 'torch_optimizer', None)   # makes `import torch_optimizer` raise ImportError
    with pytest.raises(ImportError, match=r"fastai_gpu_tabular\[lamb\]"): torch_optimizer_lamb()

# ---- large-batch helpers ------------------------------------------------------------------------------------------
def test_scale_lr():
    assert scale_lr(1e-3, 1024, 256) == pytest.approx(2e-3)
    assert scale_lr(1e-3, 1024, 256, rule='linear') == pytest.approx(4e-3)
    assert scale_lr(1e-2, 200_000, 2_000) == pytest.approx(1e-2*np.sqrt(100))
    assert scale_lr(1e-2, 64, 256, rule='linear') == pytest.approx(2.5e-3)

@pytest.mark.parametrize('kw,match', [(dict(rule='cubic'), 'rule'), (dict(bs=0), 'bs'), (dict(ref_bs=0.5), 'ref_bs'),
                                      (dict(lr=0), 'lr'), (dict(lr=-1e-3), 'lr')])
def test_scale_lr_bad_input(kw, match):
    with pytest.raises(ValueError, match=match): scale_lr(**{**dict(lr=1e-3, bs=1024, ref_bs=256), **kw})

@pytest.mark.parametrize('opt_func', [Adam, lamb()])
def test_scale_wd_keeps_the_decay_per_epoch(opt_func):
    """An epoch of 100 steps at (ref_lr, wd) and one of 10 steps at 10x the batch, at (lr, scale_wd(...)), shrink the
    weights alike in fastai's decoupled weight decay (zero gradients: decay only)"""
    def epoch(n_steps, lr, wd):
        p = nn.Parameter(torch.ones(4))
        opt = opt_func([p], lr=lr, wd=wd)
        for _ in range(n_steps): p.grad = torch.zeros(4); opt.step()
        return p.detach()[0].item()
    ref_lr, lr = 1e-2, 3e-2
    shrink_ref, shrink = epoch(100, ref_lr, 0.1), epoch(10, lr, scale_wd(0.1, 2560, 256, lr=lr, ref_lr=ref_lr))
    assert shrink_ref < 0.95 and shrink == pytest.approx(shrink_ref, rel=0.01)
    assert 1 - epoch(10, lr, 0.1) < (1 - shrink_ref) / 2   # unscaled: a third of the decay (10 steps at 3x the lr)
    assert scale_wd(0.01, 204_800, 4_096) == pytest.approx(0.5)

@pytest.mark.parametrize('kw,match', [(dict(bs=0), 'bs'), (dict(wd=-0.1), 'wd'), (dict(lr=0.1), 'both'),
                                      (dict(lr=0, ref_lr=0.1), 'positive')])
def test_scale_wd_bad_input(kw, match):
    with pytest.raises(ValueError, match=match): scale_wd(**{**dict(wd=0.01, bs=1024, ref_bs=256), **kw})

def test_warmup_pct():
    assert warmup_pct(4, 50, 20) == pytest.approx(0.1)
    assert warmup_pct(4, 50, 1, unit='epochs') == pytest.approx(0.25)
    assert warmup_pct(10, 3, 0.2) == pytest.approx(1/30)   # at least one step
    for kw in (dict(warmup=200), dict(warmup=0), dict(warmup=5, unit='epochs'), dict(warmup=3, unit='batches'),
               dict(n_iter=0, warmup=1)):
        with pytest.raises(ValueError): warmup_pct(**{**dict(n_epoch=4, n_iter=50), **kw})

def test_warmup_pct_peaks_fit_one_cycle_at_that_step(dls, tmp_path):
    learn = _learner(dls, tmp_path, lamb())
    n_epoch, n_iter = 2, len(dls.train)
    learn.fit_one_cycle(n_epoch, 1e-2, pct_start=warmup_pct(n_epoch, n_iter, warmup=3))
    lrs = learn.recorder.hps['lr']
    assert len(lrs) == n_epoch*n_iter and int(np.argmax(lrs)) == 3 and lrs[3] == pytest.approx(1e-2)
