"""Multi-GPU training with fastai's own `with learn.distrib_ctx(): learn.fit(...)`: a `BatchDataLoader` is sharded on
every rank's device (equal batches, no per-epoch broadcast, no Python lists), tables with sparse gradients are averaged
outside DDP, and `lr_find` restores every rank."""
from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from copy import copy
from functools import wraps
import torch
import torch.distributed as dist
from fastai.callback.core import Callback
from fastai.callback.schedule import LRFinder
from fastai.data.core import TfmdDL
from fastai.learner import Learner
from fastai.torch_core import apply, default_device, get_model, maybe_gather, num_distrib, to_detach, to_device
from torch.nn.parallel import DistributedDataParallel

from ..collectives import all_gather_rows, comm_device
from ..rows.loader import BatchDataLoader
from ..rows.pack import gather_rows

try:
    from fastai.distributed import DistributedDL, DistributedTrainer
except (ImportError, NameError): DistributedDL = DistributedTrainer = None   # fastai.distributed needs `accelerate`

__all__ = ['DistributedBatchDL']

def shard_layout(n:int, bs:int, world_size:int, drop_last:bool=False, pad:bool=True) -> tuple:
    """`(N, n_batches)`: ranks share the first `N` positions of an epoch's row order (repeated from its start past `n`)
    as `n_batches` batches each. `drop_last`: whole global batches of `bs*world_size`. Else `pad` (training: every step
    needs equal batches) rounds `n` up to a multiple of `world_size`, and no pad keeps `n` (no row twice) unless
    `n < world_size`. A tail of fewer than `2*world_size` rows joins the batch before it: no rank gets an empty
    batch, nor a 1-row training batch (which BatchNorm refuses), and `n_batches` is the same with or without `pad`."""
    g = bs * world_size
    if drop_last: N = n // g * g
    elif pad or n < world_size: N = -(-n // world_size) * world_size
    else: N = n
    nb = -(-N // g)
    tail = n % g
    short_tail = nb > 1 and not drop_last and 0 < tail < 2 * world_size
    return N, nb - 1 if short_tail else nb

def shard_span(N:int, n_batches:int, bs:int, world_size:int, b:int, rank:int) -> tuple:
    """Positions `[start, stop)` of `rank`'s batch `b`: the global batch `b` (`bs*world_size` positions, the last one
    up to `N`) cut into `world_size` contiguous pieces in rank order, so that gathering them in rank order gives the
    epoch's order back. The last batch's pieces differ by at most one row (none with `pad`)."""
    start = b * bs * world_size
    stop = N if b == n_batches - 1 else start + bs * world_size
    q,e = divmod(stop - start, world_size)   # the first `e` ranks take one row more
    a = start + rank * q + min(rank, e)
    return a, a + q + (1 if rank < e else 0)

@contextmanager
def _seeded(device, seed):
    "Draws inside use the CPU generator and `device`'s, seeded with `seed` (so alike on every rank), then restored."
    gens = [torch.default_generator]
    if device.type == 'cuda':
        i = torch.cuda.current_device() if device.index is None else device.index
        gens.append(torch.cuda.default_generators[i])
    states = [g.get_state() for g in gens]
    for g in gens: g.manual_seed(seed)
    try: yield
    finally:
        for g,s in zip(gens, states): g.set_state(s)

class DistributedBatchDL(DistributedDL or TfmdDL):
    """fastai's `DistributedDL` for a `BatchDataLoader`, which `DistributedDL(dl)` (and so `distrib_ctx`) makes for one.
    Every rank draws the wrapped loader's epoch order on its own device from generators seeded alike, and takes its
    pieces of each global batch of `bs*world_size` rows (`shard_layout`/`shard_span`): every rank yields `len(self)`
    batches. Training pads (repeated rows) or trims (`drop_last`) to equal batches; validation (no gradients) shares
    out exactly the `n` rows. `to_detach` gathers the rows in the epoch's order, without padding, and weighs a batch
    mean (fastai's `AvgMetric`/`AvgLoss`) by the rows behind it, so metrics equal the single-process ones."""
    _default = 'dl'   # anything else (after_batch, dataset, shuffle...) is the wrapped loader's

    def __init__(self, dl, rank=None, world_size=None, device=None,
                 seed:int=None): # base of the epochs' seeds; None: rank 0 draws one and broadcasts it (once)
        if DistributedDL is None: raise ImportError("fastai's distrib_ctx needs accelerate: `pip install accelerate`")
        super().__init__(dl, rank, world_size, device)
        self.world_size = max(self.world_size or 1, 1)
        if self.rank >= self.world_size: raise ValueError(f"rank {self.rank} is not below world_size {self.world_size}")
        # the rows go where the model is (fastai's `_wrap_dl` passes its device): packed there once
        if device is not None and dl.n and dl.rows[0].device != torch.device(device): self.dl = copy(dl).to(device)
        g = dl.bs * self.world_size
        if dl.drop_last and 0 < dl.n < g:
            raise ValueError(f"bs={dl.bs} on {self.world_size} ranks is {g} rows a step, more than the {dl.n} rows, "
                             "and drop_last=True, so no batch would come out: lower bs, or pass drop_last=False")
        self.seed,self.epoch,self._cur = seed,0,None

    def __len__(self): return shard_layout(self.dl.n, self.dl.bs, self.world_size, self.dl.drop_last)[1]

    def _base_seed(self) -> int:
        if self.seed is None:   # once per wrap (a `fit`), never per epoch
            t = torch.randint(0, 2**62, (1,))
            if dist.is_available() and dist.is_initialized() and self.world_size > 1:
                t = t.to(comm_device())
                dist.broadcast(t, 0)
            self.seed = int(t)
        return self.seed

    def _epoch_order(self):
        "The wrapped loader's order for this epoch (None: `range(n)`), on its device, the same on every rank."
        dl = self.dl
        if not (dl.shuffle or dl.wgts is not None): return dl.epoch_order()
        with _seeded(dl.rows[0].device, self._base_seed() + self.epoch): order = dl.epoch_order()
        self.epoch += 1
        return order

    def __iter__(self):
        dl,ws,bs = self.dl,self.world_size,self.dl.bs
        dl.randomize()
        dl.before_iter()
        order = self._epoch_order()
        n = dl.n if order is None else len(order)
        N,nb = shard_layout(n, bs, ws, dl.drop_last, pad=torch.is_grad_enabled())
        if N > n:   # padding repeats the order from its start
            if order is None: order = torch.arange(n, device=dl.rows[0].device)
            order = order.repeat(-(-N // n))[:N]
        rows,layout = dl.rows
        last = [shard_span(N, nb, bs, ws, nb - 1, r) for r in range(ws)] if nb else []
        n_rank = [(nb - 1) * bs + z - a for a,z in last]   # each rank's rows this epoch
        for b in range(nb):
            spans = [shard_span(N, nb, bs, ws, b, r) for r in range(ws)]
            a,z = spans[self.rank]
            # for `to_detach`: every rank's rows in this batch, how many of them are real (not padding), epoch rows
            self._cur = dict(sizes=[z_ - a_ for a_,z_ in spans], keep=max(0, min(spans[-1][1], n) - spans[0][0]),
                             n_rank=n_rank, N=N)
            yield dl.after_batch(dl.typed(gather_rows(rows, layout, slice(a, z) if order is None else order[a:z])))
        self._cur = None
        dl.after_iter()

    def _mean(self, x, c):
        """A batch mean over this rank's rows, as fastai's `AvgMetric`/`AvgLoss` want it: they sum `value * rows` over
        batches and divide by this rank's rows, which then gives the mean over all ranks' rows of the epoch."""
        sizes = c['sizes']
        ms = [x.new_zeros(1) for _ in sizes]
        dist.all_gather(ms, x.reshape(1).contiguous())
        total = (torch.cat(ms).double() * torch.tensor(sizes, dtype=torch.float64, device=x.device)).sum()
        return (total * c['n_rank'][self.rank] / (c['N'] * sizes[self.rank])).to(x.dtype)   # no piece is empty

    def to_detach(self, b, cpu=True, gather=True):
        "fastai's `to_detach`, gathering this batch's rows from every rank in the epoch's order (padding dropped)."
        c = self._cur
        if not gather or c is None or self.world_size < 2: return to_detach(b, cpu, gather)
        def _inner(x):
            if not isinstance(x, torch.Tensor): return x
            x = x.detach()
            if x.ndim == 0: x = self._mean(x, c)
            elif len(x) == c['sizes'][self.rank]: x = all_gather_rows(x, c['sizes'])[:c['keep']]
            else: x = maybe_gather(x)
            return x.cpu() if cpu else x
        return apply(_inner, b)

    def get_idxs(self): return self.dl.get_idxs()   # the whole order: what `to_detach` gives back
    def new(self, *args, **kwargs):
        return type(self)(self.dl.new(*args, **kwargs), self.rank, self.world_size, self.device, self.seed)
    @property
    def n_inp(self): return self.dl.n_inp
    def decode(self, b): return self.dl.decode(b)
    def decode_batch(self, b, max_n=9, full=True): return self.dl.decode_batch(b, max_n, full)
    def show_batch(self, b=None, max_n=9, **kwargs):
        "The wrapped loader's `show_batch` of this rank's first batch."
        return self.dl.show_batch(self.one_batch() if b is None else b, max_n=max_n, **kwargs)

if DistributedDL is not None:
    def _new(cls, dl=None, *args, **kwargs):
        """`DistributedDL(dl)` of a `BatchDataLoader` makes a `DistributedBatchDL` (which fastai's `_wrap_dl` passes
        on). A loader that reads its rank's share itself (`shards_by_rank`: the `StreamDataLoader`) comes back
        unwrapped, moved to `device` (the rank's, where fastai's `_wrap_dl` puts the model)."""
        if cls is DistributedDL and getattr(dl, 'shards_by_rank', False):
            return dl if kwargs.get('device') is None else dl.to(kwargs['device'])
        return object.__new__(DistributedBatchDL if cls is DistributedDL and isinstance(dl, BatchDataLoader) else cls)
    DistributedDL.__new__ = _new

def _under_distrib_ctx(learn) -> bool:
    "Whether `learn` trains under fastai's `distrib_ctx` on more than one process."
    if DistributedTrainer is None or num_distrib() < 2: return False
    return any(isinstance(cb, DistributedTrainer) for cb in learn.cbs)

def _host_copy(x):
    "A copy of a (nested) state dict with its tensors on the host."
    return apply(lambda o: o.detach().to('cpu', copy=True) if isinstance(o, torch.Tensor) else copy(o), x)

def _sparse_params(model) -> list:
    "`(name, param)` of the tables with sparse gradients: parameters of modules whose `sparse` is True."
    names = {id(p): n for n,p in model.named_parameters()}
    return list({id(p): (names[id(p)], p) for m in model.modules() if getattr(m, 'sparse', None) is True
                 for p in m.parameters()}.values())

def _empty_grad(p):
    return torch.sparse_coo_tensor(p.new_zeros((1, 0), dtype=torch.long), p.new_zeros((0, *p.shape[1:])), p.shape)

class SparseGradSync(Callback):
    """Under `distrib_ctx`, tables with sparse gradients (`tabular_learner(sparse=...)`, `nn.Embedding(sparse=True)`)
    are left out of DDP, which cannot average them (NCCL has no sparse all-reduce; DDP only knows `nn.Embedding` and
    `nn.EmbeddingBag` to be sparse), and averaged here before the step: every rank's rows and values gathered, divided
    by the world size. One host sync a step (the sizes). `distrib_ctx` adds it (see `to_distributed` below)."""
    order = 9   # before_fit before DistributedTrainer's DDP wrap (11); before_step before MixedPrecision's unscale (10)

    def before_fit(self):
        self.params,self.synced = [],False
        if not _under_distrib_ctx(self.learn): return
        params = _sparse_params(self.model)
        if not params: return
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(self.model, [n for n,_ in params])
        self.module,self.params = self.model,[p for _,p in params]   # DDP wraps the model next: keep the module

    def before_train(self):
        if self.synced: return
        for p in self.params: dist.broadcast(p.data, 0)   # DDP starts every rank from rank 0's weights: these too
        self.synced = True

    def before_step(self):
        if not self.params: return
        ws = num_distrib()
        gs = [(_empty_grad(p) if p.grad is None else p.grad).coalesce() for p in self.params]
        nnz = torch.tensor([g._nnz() for g in gs], device=comm_device())
        sizes = [torch.empty_like(nnz) for _ in range(ws)]
        dist.all_gather(sizes, nnz)
        for p,g,s in zip(self.params, gs, torch.stack(sizes).T.tolist()):   # the host sync: [param][rank] rows
            if not sum(s): continue
            idx,val = all_gather_rows(g.indices()[0], s),all_gather_rows(g.values(), s)
            p.grad = torch.sparse_coo_tensor(idx[None], val / ws, p.shape)

    def after_fit(self):
        if not self.params: return
        del self.module._ddp_params_and_buffers_to_ignore
        for p in self.params: del p._ddp_ignored
        self.module,self.params = None,[]

class DistributedLRFind(Callback):
    """`lr_find` under `distrib_ctx` as on one process: `num_it` steps (fastai counts epochs with the unsharded `len`),
    and every rank gets its model and optimizer back, from a copy in host memory. fastai's `LRFinder` saves them on
    rank 0 only, into a temporary folder of each rank's own: the other ranks never reload, and rank 0 then waits for
    them in `load`'s barrier until the process group times out. `distrib_ctx` adds it (see `to_distributed` below)."""
    order = LRFinder.order - 1   # after DistributedTrainer's wrap; after_fit before LRFinder's: it then loads nothing

    def before_fit(self):
        self.state = None
        lrf = [cb for cb in self.learn.cbs if isinstance(cb, LRFinder)]
        if not (lrf and _under_distrib_ctx(self.learn)): return
        self.learn.n_epoch = max(self.learn.n_epoch, lrf[0].num_it // len(self.dls.train) + 1)
        self.state = _host_copy(get_model(self.model).state_dict()),_host_copy(self.opt.state_dict())

    def after_fit(self):
        if self.state is None: return
        for cb in self.learn.cbs:
            if isinstance(cb, LRFinder) and hasattr(cb, 'tmp_d'): cb.tmp_d.cleanup()
        m = get_model(self.model)
        m.load_state_dict(self.state[0])
        self.opt.load_state_dict(to_device(self.state[1], next(m.parameters()).device))   # as `learn.load` maps it
        self.state = None

if DistributedDL is not None and not hasattr(Learner.to_distributed, '_fgt'):   # once, even if reloaded
    _to_distributed,_detach_distributed = Learner.to_distributed,Learner.detach_distributed
    _OURS = (SparseGradSync, DistributedLRFind)

    @wraps(_to_distributed)
    def to_distributed(self:Learner, *args, **kwargs):
        "fastai's `to_distributed` (which `distrib_ctx` calls), plus `SparseGradSync` and `DistributedLRFind`."
        _to_distributed(self, *args, **kwargs)
        return self.add_cbs([cb() for cb in _OURS])

    @wraps(_detach_distributed)
    def detach_distributed(self:Learner):
        "fastai's `detach_distributed`, removing our callbacks too: an exported learner carries none of them."
        self.remove_cbs([cb for cb in self.cbs if isinstance(cb, _OURS)])
        return _detach_distributed(self)

    to_distributed._fgt = True
    Learner.to_distributed,Learner.detach_distributed = to_distributed,detach_distributed

    def _one_process_launched():
        "`accelerate launch --num_processes N` without `--multi_gpu` and without GPUs: one process, no word of it."
        if num_distrib() > 1 or 'ACCELERATE_MIXED_PRECISION' not in os.environ: return
        if 'MASTER_PORT' not in os.environ: return   # its one-process launcher sets it only when asked for more
        warnings.warn("distrib_ctx runs on one process: `accelerate launch` starts several without `--multi_gpu` only "
                      "where it finds several GPUs. Run `accelerate launch --multi_gpu --num_processes N train.py` "
                      "(on CPUs too: gloo) or `torchrun --nproc_per_node N train.py`", stacklevel=3)

    _distrib_ctx = Learner.distrib_ctx

    def distrib_ctx(self:Learner, sync_bn:bool|None=None, in_notebook:bool=False, **kwargs):
        """fastai's `distrib_ctx`, ready for CPUs: where the loaders are on the CPU, accelerate's `cpu=True` (gloo;
        without it accelerate wraps nothing and fastai stops at `model.device`) and `sync_bn=False` (SyncBatchNorm
        runs on GPUs only) unless given. Warns where `accelerate launch` started one process instead of several."""
        kwargs.setdefault('cpu', torch.device(self.dls.device or default_device()).type == 'cpu')
        _one_process_launched()
        return _distrib_ctx(self, not kwargs['cpu'] if sync_bn is None else sync_bn, in_notebook, **kwargs)

    Learner.distrib_ctx = distrib_ctx
