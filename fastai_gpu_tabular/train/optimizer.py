"""LAMB for large tabular batches: a sync-free foreach `Lamb` for fastai, `torch_optimizer.Lamb` through `OptimWrapper`
with proper weight-decay groups, and the batch-size helpers of the large-batch recipe; and for embedding tables with
sparse gradients, a lazy row-wise Adam (`sparse_adam_step`: `torch.optim.SparseAdam`'s math, moments only for the rows
touched) that `sparse_opt` joins to any fastai optimizer.

Large-batch recipe (what the helpers below are for):

1. Find a good `lr` at a batch size that is cheap to try, `ref_bs` (`learn.lr_find()` on a `dls` built with that bs).
2. Scale it to the large batch: `lr = scale_lr(lr, bs, ref_bs)`. The default `rule='sqrt'` suits adaptive optimizers
   (LAMB, Adam); `'linear'` is the SGD rule. Both are starting points: check with `lr_find` at the large bs too
   (it runs `100 // len(dls.train) + 1` epochs when batches are few).
3. Warm up for a fixed number of *steps*, not a fraction: at 200k rows a batch, an epoch of 10M rows is 50 steps, so
   fastai's default `pct_start=0.25` can be far too short or far too long.
   `learn.fit_one_cycle(n, lr, pct_start=warmup_pct(n, len(dls.train), warmup=...))`.
4. Weight decay goes through `wd=` with fastai's default `wd_bn_bias=False`, so norms and biases are not decayed
   (for `torch_optimizer_lamb`, pass `splitter=lamb_param_groups` instead, see there).
5. With few steps (an epoch of a few dozen 200k-row batches), keep embeddings, norms and biases out of the trust
   ratio: `cbs=ExcludeFromAdaptation()`.
6. Scale the weight decay too: decoupled decay shrinks the weights once per step, and the large batch takes
   `bs/ref_bs` times fewer steps an epoch. `wd = scale_wd(wd, bs, ref_bs, lr=lr, ref_lr=ref_lr)` keeps the decay
   per epoch.
"""
from __future__ import annotations

import functools
import math
import warnings
from collections import defaultdict
import torch
from fastai.callback.core import Callback
from fastai.optimizer import Adam, Optimizer, OptimWrapper
from fastai.torch_core import norm_types, trainable_params
from fastcore.basics import partialler
from fastcore.foundation import L
from torch import nn

from ..extras import import_extra

__all__ = ['Lamb', 'lamb', 'lamb_param_groups', 'ExcludeFromAdaptation', 'no_wd_params', 'scale_lr', 'scale_wd',
           'warmup_pct', 'torch_optimizer_lamb']

def _check_dense(grads):
    "LAMB's moments and norms are dense ops: refuse sparse grads before anything is mutated."
    for g in grads:
        if g.layout != torch.strided:
            raise RuntimeError(f"LAMB needs dense gradients, got a {g.layout} one: use `nn.Embedding(sparse=False)` "
                               "for the parameters this optimizer steps")

def _by_device_dtype(ps):
    "Indices of `ps` grouped by (device, dtype), since a foreach call needs one of each."
    res = defaultdict(list)
    for i,p in enumerate(ps): res[(p.device, p.dtype)].append(i)
    return res.values()

def lamb_foreach_step(
    ps:list, # Parameters of one device and dtype, all with a grad
    grads:list, # Their grads (modified in place by L2 regularization, as fastai's `l2_reg` does)
    grad_avgs:list, # Gradient moving averages (state 'grad_avg')
    sqr_avgs:list, # Squared gradient moving averages (state 'sqr_avg')
    steps:list, # Step count of each parameter, *after* this step (state 'step')
    do_wd:list, # Whether each parameter is decayed (state 'do_wd', False for norms/biases with `wd_bn_bias=False`)
    lr:float, # Learning rate
    mom:float, # Gradient moving average (β1) coefficient
    sqr_mom:float, # Gradient squared moving average (β2) coefficient
    eps:float, # Added for numerical stability
    wd:float, # Weight decay (true or L2)
    decouple_wd:bool=True, # Apply true weight decay or L2 regularization
    # Whether each parameter gets the trust ratio (state 'do_adapt'); those that don't take Adam's step
    do_adapt:list=None
):
    "fastai's `weight_decay|l2_reg`, `average_grad(dampening=True)`, `average_sqr_grad` and `lamb_step` as foreach ops"
    if wd != 0:
        wd_idx = [i for i,d in enumerate(do_wd) if d]
        if wd_idx and decouple_wd: torch._foreach_mul_([ps[i] for i in wd_idx], 1 - lr*wd)
        elif wd_idx: torch._foreach_add_([grads[i] for i in wd_idx], [ps[i] for i in wd_idx], alpha=wd)
    torch._foreach_lerp_(grad_avgs, grads, 1 - mom)  # mom*avg + (1-mom)*g in one pass
    torch._foreach_mul_(sqr_avgs, sqr_mom)
    torch._foreach_addcmul_(sqr_avgs, grads, grads, value=1 - sqr_mom)
    # Debias factors are host floats (steps are host ints), so they cost no sync
    debias1 = [1 - mom**s for s in steps]
    debias2 = [1 - sqr_mom**s for s in steps]
    # upd = (grad_avg/debias1) / (sqrt(sqr_avg/debias2) + eps), built in one temporary list
    upd = torch._foreach_div(sqr_avgs, debias2)
    torch._foreach_sqrt_(upd)
    torch._foreach_add_(upd, eps)
    torch._foreach_mul_(upd, debias1)
    torch._foreach_reciprocal_(upd)
    torch._foreach_mul_(upd, grad_avgs)
    if do_adapt is not None and not all(do_adapt):   # parameters kept out of the trust ratio take Adam's step
        out,keep = [i for i,a in enumerate(do_adapt) if not a],[i for i,a in enumerate(do_adapt) if a]
        torch._foreach_add_([ps[i] for i in out], [upd[i] for i in out], alpha=-lr)
        if not keep: return
        ps,upd = [ps[i] for i in keep],[upd[i] for i in keep]
    # Trust ratio on the device: rms(p)/rms(upd) is a ratio of norms (numel cancels), q=1 where either is 0, else ≤10.
    # Half-precision norms are taken to fp32 for the ratio; fp64 stays fp64
    r1 = torch.stack(torch._foreach_norm(ps))
    r1 = r1.to(torch.promote_types(r1.dtype, torch.float32))
    r2 = torch.stack(torch._foreach_norm(upd)).to(r1.dtype)
    q = torch.where((r1 == 0) | (r2 == 0), 1., (r1/r2).clamp(max=10.))
    torch._foreach_mul_(upd, (q * -lr).unbind())
    torch._foreach_add_(ps, upd)

class LambOptimizer(Optimizer):
    "A fastai `Optimizer` running LAMB as foreach ops per param group, with the trust ratio kept on the device"
    _keep_on_clear = [*Optimizer._keep_on_clear, 'do_adapt']
    def __init__(self,
        params, # Model parameters or parameter groups
        decouple_wd:bool=True, # Apply true weight decay or L2 regularization
        **defaults # Hyper-parameters: lr, mom, sqr_mom, eps, wd
    ):
        super().__init__(params, [], **defaults)
        self.decouple_wd = decouple_wd

    def _bump(self, p):
        "State of `p` (created on its first step) with 'step' counted: fastai's `Lamb` keys, so checkpoints interchange"
        st = self.state[p]
        if 'grad_avg' not in st: st['grad_avg'] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if 'sqr_avg' not in st: st['sqr_avg'] = torch.zeros_like(p, memory_format=torch.preserve_format)
        st['step'] = st.get('step', 0) + 1
        return st

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None: raise NotImplementedError("fastai optimizers currently do not support closure")
        # Like `all_params(with_grad=True)`: frozen params have no grad and are skipped
        groups = [[p for p in pg if getattr(p, 'grad', None) is not None] for pg in self.param_lists]
        _check_dense([p.grad for ps in groups for p in ps])
        for ps,hyper in zip(groups, self.hypers, strict=True):
            hp = {k: float(hyper[k]) for k in ('lr','mom','sqr_mom','eps','wd')}
            for idx in _by_device_dtype(ps):
                sub = [ps[i] for i in idx]
                sts = [self._bump(p) for p in sub]
                lamb_foreach_step(sub, [p.grad for p in sub], [s['grad_avg'] for s in sts], [s['sqr_avg'] for s in sts],
                                  [s['step'] for s in sts], [s.get('do_wd', True) for s in sts],
                                  decouple_wd=self.decouple_wd, do_adapt=[s.get('do_adapt', True) for s in sts], **hp)

def Lamb(
    params, # Model parameters or parameter groups
    lr:float|slice, # Default learning rate
    mom:float=0.9, # Gradient moving average (β1) coefficient
    sqr_mom:float=0.99, # Gradient squared moving average (β2) coefficient
    eps:float=1e-5, # Added for numerical stability
    wd:float=0., # Optional weight decay (true or L2)
    decouple_wd:bool=True # Apply true weight decay or L2 regularization
) -> LambOptimizer:
    "fastai's LAMB `Optimizer` (same signature, math and state), with foreach ops and no host sync in `step`"
    return LambOptimizer(params, decouple_wd=decouple_wd, lr=lr, mom=mom, sqr_mom=sqr_mom, eps=eps, wd=wd)

def lamb(
    mom:float=0.9, # Gradient moving average (β1) coefficient
    sqr_mom:float=0.99, # Gradient squared moving average (β2) coefficient
    eps:float=1e-5, # Added for numerical stability
    wd:float=0., # Optional weight decay (true or L2)
    decouple_wd:bool=True # Apply true weight decay or L2 regularization
):
    "`Lamb` as a Learner `opt_func`: `tabular_learner(dls, opt_func=lamb(wd=0.01))`"
    return partialler(Lamb, mom=mom, sqr_mom=sqr_mom, eps=eps, wd=wd, decouple_wd=decouple_wd)

# torch-optimizer's LAMB through `OptimWrapper`
_no_wd_types = tuple({*norm_types, nn.SyncBatchNorm, nn.GroupNorm, nn.RMSNorm, nn.Embedding, nn.EmbeddingBag})

def no_wd_params(model:nn.Module) -> L:
    "Biases and the parameters of norm and embedding layers: what LAMB recipes keep out of weight decay"
    res = L()
    for m in model.modules():
        for n,p in m.named_parameters(recurse=False):
            if isinstance(m, _no_wd_types) or n == 'bias': res.append(p)
    return res

class ExcludeFromAdaptation(Callback):
    """Keeps `params(model)` (by default biases, norms and embedding tables) out of `Lamb`'s trust ratio: they take
    Adam's step, as TF's LAMB does by default (`exclude_from_layer_adaptation`: the weight-decay exclusions). LAMB
    moves each tensor by about `lr` times its own norm a step, so tensors that start near zero (biases, norm shifts,
    tables at std 0.01) stall for dozens of steps: in the LAMB study (bs 204,800, 11 steps an epoch) the exclusion
    removed that plateau and cut the AUC gap to bs 4,096 at 16 epochs from 0.031 to 0.018."""
    def __init__(self, params=no_wd_params): self.params = params
    def before_fit(self):
        # after `create_opt`; `LambOptimizer.clear_state` keeps the flag, as fastai's keeps `do_wd`
        if not isinstance(self.opt, LambOptimizer):
            warnings.warn("ExcludeFromAdaptation only acts on fastai_gpu_tabular's Lamb, "
                          f"not {type(self.opt).__name__}", stacklevel=2)
        for p in self.params(self.model): self.opt.state[p]['do_adapt'] = False

def lamb_param_groups(
    model:nn.Module, # The model, as a `Learner` passes it to its splitter
    splitter=trainable_params # The splitter whose groups are each split in two
) -> list:
    "A Learner `splitter` for torch optimizers: each group split into decayed weights and a `weight_decay=0` part"
    no_wd = set(map(id, no_wd_params(model)))
    groups = splitter(model)
    if not isinstance(L(groups)[0], (list, L)): groups = [groups]
    res = []
    for g in groups:
        decay,keep = [p for p in g if id(p) not in no_wd],[p for p in g if id(p) in no_wd]
        # `do_wd` is kept in each torch group, so `WDGroupsOptimWrapper` knows where fastai's `wd` must not go
        if decay: res.append({'params': decay, 'do_wd': True})
        if keep: res.append({'params': keep, 'do_wd': False, 'weight_decay': 0.})
    return res

class WDGroupsOptimWrapper(OptimWrapper):
    "`OptimWrapper` that sets fastai's `wd` only on param groups without `do_wd=False` (see `lamb_param_groups`)"
    def __init__(self, params=None, opt=None, **kwargs):
        super().__init__(params, opt, **kwargs)
        self._warn_ungrouped([pg.get('weight_decay', 0) for pg in self.opt.param_groups])

    def _warn_ungrouped(self, wds):
        # fastai's `wd_bn_bias` flags never reach a torch optimizer: without the groups, wd hits biases/norms/embeddings
        if any(wds) and not any('do_wd' in pg for pg in self.opt.param_groups):
            warnings.warn("weight decay applies to every parameter, biases, norms and embeddings included: "
                          "pass `splitter=lamb_param_groups` to the Learner to exclude them", stacklevel=3)

    def _set_hyper(self, k, v):
        if k == 'wd':
            v = [v_ if pg.get('do_wd', True) else 0. for pg,v_ in zip(self.opt.param_groups, v, strict=True)]
            self._warn_ungrouped(v)
        super()._set_hyper(k, v)

def _torch_optimizer(): return import_extra('torch_optimizer', 'lamb', 'torch_optimizer_lamb')

def torch_optimizer_lamb(
    wd:float=0., # Weight decay of the groups with `do_wd=True`
    **kwargs # Passed to `torch_optimizer.Lamb`: betas, eps, clamp_value, adam, debias
):
    """`torch_optimizer.Lamb` as a Learner `opt_func` through fastai's `OptimWrapper`, so `fit_one_cycle` schedules
    `lr` and `mom` (betas[0]); use it with `splitter=lamb_param_groups` so biases, norms and embeddings are not decayed:
    `tabular_learner(dls, opt_func=torch_optimizer_lamb(wd=0.01), splitter=lamb_param_groups)`.

    Known deviations of torch-optimizer 0.3.0's Lamb from the paper and from fastai's `Lamb`/ours:
    - it clamps the *weight norm* to [0, `clamp_value`=10] instead of the trust ratio
      (cybertronai/pytorch-lamb#5, jettify/pytorch-optimizer#64, #65);
    - it has no bias correction unless `debias=True`, and that debias is reported wrong (jettify/pytorch-optimizer#443);
    - weight decay is L2 added to the Adam step, so it is part of the trust ratio (not decoupled);
    - it raises on sparse gradients;
    - it loops over parameters in Python and `weight_norm == 0` syncs with the host for every parameter;
    - fastai's `wd_bn_bias`/`train_bn` flags do not reach a wrapped torch optimizer: that is why the weight decay
      exclusions are param groups (`lamb_param_groups`), and each splitter group becomes two torch groups, which
      discriminative lrs (`lr=slice(...)`) and `freeze_to` then count as two."""
    tlamb = _torch_optimizer().Lamb
    return partialler(WDGroupsOptimWrapper, opt=tlamb, weight_decay=wd, **kwargs)

# Large-batch helpers
def _check_bs(bs, ref_bs):
    for n,v in (('bs', bs), ('ref_bs', ref_bs)):
        if not v >= 1: raise ValueError(f"{n} must be at least 1, got {v!r}")

def scale_lr(
    lr:float, # Learning rate that works at `ref_bs`
    bs:int, # Batch size to train with
    ref_bs:int, # Batch size `lr` was found at
    rule:str='sqrt' # 'sqrt' (LAMB/Adam) or 'linear' (SGD, Goyal et al. 2017)
) -> float:
    "`lr` scaled from `ref_bs` to `bs`: `lr*sqrt(bs/ref_bs)` or `lr*bs/ref_bs`, a start to check with `lr_find`"
    if rule not in ('sqrt', 'linear'): raise ValueError(f"rule must be 'sqrt' or 'linear', got {rule!r}")
    _check_bs(bs, ref_bs)
    if not lr > 0: raise ValueError(f"lr must be positive, got {lr!r}")
    k = bs/ref_bs
    return lr * (math.sqrt(k) if rule == 'sqrt' else k)

def scale_wd(
    wd:float, # Weight decay that works at `ref_bs`
    bs:int, # Batch size to train with
    ref_bs:int, # Batch size `wd` was used at
    lr:float=None, # Learning rate at `bs` (with `ref_lr`; default: the same lr at both)
    ref_lr:float=None # Learning rate at `ref_bs`
) -> float:
    """`wd` scaled from `ref_bs` to `bs` so that decoupled weight decay (fastai's default) shrinks the weights as much
    per epoch: `wd*(bs/ref_bs)*(ref_lr/lr)`. Each step multiplies them by `1-lr*wd`, and `bs` takes `ref_bs/bs` as
    many steps an epoch."""
    if (lr is None) != (ref_lr is None): raise ValueError("pass both lr and ref_lr, or neither")
    _check_bs(bs, ref_bs)
    if not wd >= 0: raise ValueError(f"wd must be non-negative, got {wd!r}")
    if lr is not None and not (lr > 0 and ref_lr > 0):
        raise ValueError(f"lr and ref_lr must be positive, got {lr!r}, {ref_lr!r}")
    return wd * bs/ref_bs * (1 if lr is None else ref_lr/lr)

def warmup_pct(
    n_epoch:int, # Epochs `fit_one_cycle` will run
    n_iter:int, # Batches per epoch: `len(dls.train)`
    warmup:float, # Warmup length, in `unit`s
    unit:str='steps' # 'steps' or 'epochs'
) -> float:
    "`fit_one_cycle`'s `pct_start` that warms up for `warmup` steps (or epochs), rounded to at least one whole step"
    if unit not in ('steps', 'epochs'): raise ValueError(f"unit must be 'steps' or 'epochs', got {unit!r}")
    total = n_epoch * n_iter
    if not total >= 1: raise ValueError(f"n_epoch*n_iter must be at least 1, got {n_epoch}*{n_iter}")
    steps = max(1, round(warmup * (n_iter if unit == 'epochs' else 1)))
    if not warmup > 0 or steps >= total:
        raise ValueError(f"warmup of {warmup} {unit} must be positive and shorter than the {total} steps of training")
    return steps/total

# --- tables with sparse gradients ---------------------------------------------------------------------------------
@torch.no_grad()
def sparse_adam_step(p, grad, state:dict, lr:float, mom:float=0.9, sqr_mom:float=0.99, eps:float=1e-8):
    """`torch.optim.SparseAdam`'s update of the rows of `p` in the sparse `grad` (same moments and bias correction),
    with moments kept for the rows ever touched only: `state['slot']` maps a row to its moments (-1: none yet, 4 bytes a
    row), `exp_avg`/`exp_avg_sq` grow by half (never past the table), and `state['n']` rows of them are used. A step
    costs the rows in `grad`, not the table. New rows need their count on the host: one sync per step and table on
    CUDA."""
    g = grad.coalesce()
    rows,vals = g.indices()[0],g.values()
    if 'slot' not in state:
        state.update(slot=torch.full((p.shape[0],), -1, dtype=torch.int32, device=p.device), n=0, step=0,
                     exp_avg=vals.new_zeros((0, *vals.shape[1:])), exp_avg_sq=vals.new_zeros((0, *vals.shape[1:])))
    state['step'] += 1
    pos = state['slot'][rows]
    new = rows[pos < 0]
    if len(new):   # rows seen for the first time get the next slots; storage grows by half when full
        n,k,cap = state['n'],len(new),len(state['exp_avg'])
        if n + k > cap:
            grow = max(n + k, min(cap * 3 // 2, p.shape[0])) - cap
            for key in ('exp_avg', 'exp_avg_sq'):
                state[key] = torch.cat([state[key], state[key].new_zeros((grow, *state[key].shape[1:]))])
        state['slot'][new] = torch.arange(n, n + k, dtype=torch.int32, device=rows.device)
        state['n'] = n + k
        pos = state['slot'][rows]
    m,v = state['exp_avg'],state['exp_avg_sq']
    m_old,v_old = m[pos],v[pos]
    m_new = m_old + (vals - m_old) * (1 - mom)
    v_new = v_old + (vals * vals - v_old) * (1 - sqr_mom)
    m[pos],v[pos] = m_new,v_new
    step_size = lr * math.sqrt(1 - sqr_mom ** state['step']) / (1 - mom ** state['step'])
    p.index_add_(0, rows, m_new / (v_new.sqrt() + eps), alpha=-step_size)

@functools.cache
def _with_sparse(cls):
    "`cls` whose `step` also updates the parameters with sparse gradients (embedding tables) by `sparse_adam_step`."
    class _Sparse(cls):
        def step(self, closure=None):
            # hide the sparse grads from the dense step (it skips params without grads), then step those rows
            sparse = [(p, hyper) for pg,hyper in zip(self.param_lists, self.hypers) for p in pg
                      if p.grad is not None and p.grad.is_sparse]
            grads = [p.grad for p,_ in sparse]
            for p,_ in sparse: p.grad = None
            super().step(closure)
            for (p,hyper),g in zip(sparse, grads):
                sparse_adam_step(p, g, self.state[p], hyper['lr'] * self.sparse_lr_mult, hyper.get('mom', 0.9),
                                 hyper.get('sqr_mom', 0.99), hyper.get('eps', 1e-8))
    _Sparse.__name__ = _Sparse.__qualname__ = f'Sparse{cls.__name__}'
    return _Sparse

def _sparse_opt(params, opt_func=Adam, sparse_lr_mult=1., **kwargs):
    opt = opt_func(params, **kwargs)
    if not isinstance(opt, Optimizer): raise TypeError(f"sparse_opt needs a fastai Optimizer, got {type(opt).__name__}")
    opt.__class__ = _with_sparse(type(opt))
    opt.sparse_lr_mult = sparse_lr_mult
    return opt

def sparse_opt(opt_func=Adam, sparse_lr_mult:float=1.):
    """An `opt_func`: dense parameters step with `opt_func` (fastai's `Adam`, our `Lamb`, ...), tables with sparse
    gradients with a lazy row-wise Adam (`sparse_adam_step`, at `lr*sparse_lr_mult`; no weight decay), in one fastai
    optimizer, so `fit_one_cycle` schedules both and `learn.save/load` keeps both states."""
    return partialler(_sparse_opt, opt_func=opt_func, sparse_lr_mult=sparse_lr_mult)
