"""No device->host sync in the batch loop of what this package owns, inside a real fastai `Learner` on UCI Adult: the
loader making each batch (a shuffled `BatchDataLoader`, one drawing rows by `wgts`, a `StreamDataLoader` reading
`PackedChunks`) and the `accumulate` of its metrics (`AUC`, `LogLoss`), through `fit` and `validate`.

The guard is on from the end of one batch's callbacks to the start of the next (the loader yielding the batch) and
inside each metric's `accumulate`. fastai's own per-batch work stays outside it: the loss, the backward pass and the
optimizer step, and the Recorder (its smoothed loss is a tensor, but `ProgressCallback` reads it with `.item()` each
batch, and `AccumMetric`s such as `RocAucBinary` copy each batch to the host: not this package's to change).

On CUDA the guard is `torch.cuda.set_sync_debug_mode('error')`; the CPU stand-in records, in the same scopes, every
call that would make the host wait for the device on a GPU (`helpers.host_sync.HostConversions`): a Python read of a
tensor's value or a host copy, an op whose output size depends on the values (a boolean-mask index, `nonzero`...), an
upload of Python data. The tests at the end hold the record to what CUDA's guard catches."""
import numpy as np
import pytest
import torch
from fastai.callback.core import Callback
from fastai.data.core import DataLoaders
from fastai.data.transforms import RandomSplitter
from fastai.learner import Learner
from fastai.losses import CrossEntropyLossFlat
from fastai.metrics import RocAucBinary
from fastai.tabular.core import FillMissing, Normalize
from fastai.tabular.model import TabularModel, get_emb_sz
from fastai.torch_core import set_seed
from helpers.host_sync import HostConversions
from fastai_gpu_tabular.all import AUC, Categorify, LogLoss, TabularGPU
from fastai_gpu_tabular.datasets import load_adult
from fastai_gpu_tabular.rows.chunks import PackedChunks
from fastai_gpu_tabular.rows.stream import StreamDataLoader

CATS = ['workclass', 'education', 'marital-status', 'occupation', 'relationship', 'race', 'gender']
CONTS = ['age', 'fnlwgt', 'educational-num', 'capital-gain', 'capital-loss', 'hours-per-week']
LOADERS = ('shuffle', 'weighted', 'stream')

class Guard:
    "A scope that may be entered many times: CUDA's sync guard, or (on the CPU) a record of host reads into `seen`."
    def __init__(self, cuda:bool): self.cuda,self.seen,self.mode,self.entered = cuda,[],None,0
    def on(self):
        self.entered += 1
        if self.cuda: return torch.cuda.set_sync_debug_mode('error')
        self.mode = HostConversions()
        self.mode.__enter__()
    def off(self):
        if self.cuda: return torch.cuda.set_sync_debug_mode(0)
        if self.mode is None: return
        self.mode.__exit__(None, None, None)
        self.seen += self.mode.seen
        self.mode = None

class GuardOn(Callback):
    "Turns the loader's guard on once every other callback is done: what runs next is the loader making a batch."
    order = 1000
    def __init__(self, guard): self.guard = guard
    def before_train(self): self.guard.on()
    def before_validate(self): self.guard.on()
    def after_batch(self): self.guard.on()

class GuardOff(Callback):
    "Turns it off before any other callback sees the batch (or the end of the epoch)."
    order = -1000
    def __init__(self, guard): self.guard,self.batches = guard,0
    def before_batch(self):
        self.guard.off()
        self.batches += 1
    def after_train(self): self.guard.off()
    def after_validate(self): self.guard.off()

def guard_accumulate(metric, guard):
    "Run `metric.accumulate` inside `guard`."
    f = metric.accumulate
    def accumulate(learn):
        guard.on()
        try: f(learn)
        finally: guard.off()
    metric.accumulate = accumulate
    return metric

def _dls(loader, device, tmp_path, bs=1024):
    "Adult's loaders on `device`, the training one (of `bs` rows a batch) as `loader` says; and the TabularGPU."
    df = load_adult()
    splits = RandomSplitter(0.2, seed=0)(range(len(df)))
    to = TabularGPU(df, procs=[Categorify, FillMissing, Normalize], cat_names=list(CATS), cont_names=list(CONTS),
                    y_names='income', splits=splits)
    dls = to.dataloaders(bs=bs, val_bs=2048, device=device)
    if loader == 'weighted': train = dls.train.new(wgts=np.linspace(0, 1, len(dls.train_ds)))
    elif loader == 'stream':
        rows,layout = to.train.packed_rows()
        tmp_path.mkdir(parents=True, exist_ok=True)
        cut = np.linspace(0, len(rows), 4).astype(int)   # 3 files, cut into pieces of 3,000 rows
        files = [(f'c{i}.npy', PackedChunks.write_rows(tmp_path, f'c{i}.npy', rows[a:b]))
                 for i,(a,b) in enumerate(zip(cut[:-1], cut[1:]))]
        chunks = PackedChunks.write(tmp_path, files, layout, rows.shape[1])
        train = StreamDataLoader(chunks, bs=bs, shuffle=True, window=4, piece_rows=3000, device=device)
    else: train = dls.train
    return DataLoaders(train, dls.valid, device=device), to

def _learner(dls, to, metrics, cbs):
    set_seed(0)
    model = TabularModel(get_emb_sz(to), len(to.cont_names), 2, layers=[64, 32])
    return Learner(dls, model, loss_func=CrossEntropyLossFlat(), metrics=metrics, cbs=cbs)

def _run(loader, device, tmp_path, bs=1024):
    """One epoch of `fit`, then `validate()`, with the guards in place: `(loader guard, metric guard, learner,
    batches seen)`."""
    cuda = device == 'cuda'
    dls,to = _dls(loader, device, tmp_path, bs)
    lg,mg = Guard(cuda),Guard(cuda)
    off = GuardOff(lg)
    learn = _learner(dls, to, [guard_accumulate(m, mg) for m in (AUC(), LogLoss())], [GuardOn(lg), off])
    learn.model.to(device)
    if cuda: torch.cuda.synchronize()
    try:
        with learn.no_bar(), learn.no_logging():
            learn.fit(1, 1e-3)
            res = learn.validate()
    finally: lg.off(); mg.off()
    if cuda: torch.cuda.synchronize()
    return lg, mg, res, off.batches, len(dls.train), len(dls.valid)

def _check(lg, mg, res, batches, n_train, n_valid):
    "Every batch went through the guards, and the metrics are values."
    assert batches == n_train + 2 * n_valid and n_train > 5 and n_valid > 2
    assert lg.entered == batches + 3 and mg.entered == 2 * 2 * n_valid   # 2 metrics, in fit and in validate
    assert all(np.isfinite(v) for v in res) and 0.5 < res[1] <= 1   # loss, AUC, log loss; Adult is learnable

@pytest.mark.cuda
@pytest.mark.parametrize('loader', LOADERS)
def test_batch_loop_makes_no_device_sync(loader, tmp_path):
    "A device->host sync in the guarded scopes (`.item()`, a host copy, a boolean-mask index, a pageable upload) raises"
    _check(*_run(loader, 'cuda', tmp_path))

@pytest.mark.cuda
def test_the_cuda_guard_catches_a_per_batch_host_copy(tmp_path):
    "fastai's `RocAucBinary` copies each batch to the host: under the same guard, `validate()` raises."
    dls,to = _dls('shuffle', 'cuda', tmp_path)
    learn = _learner(dls, to, [guard_accumulate(RocAucBinary(), Guard(True))], [])
    learn.model.to('cuda')
    try:
        with learn.no_bar(), pytest.raises(RuntimeError, match='synchroniz'): learn.validate()
    finally: torch.cuda.set_sync_debug_mode(0)

@pytest.mark.parametrize('loader', LOADERS)
def test_batch_loop_reads_no_tensor_on_the_host(loader, tmp_path):
    """The CPU stand-in: no tensor value is read in the guarded scopes; fastai's `RocAucBinary`, guarded alike, is
    caught. The stream reads a few CPU tensors once an epoch (its seed and piece order, from a CPU generator; no sync on
    a GPU either, and here they cannot be told apart from device ones): as many with twice the batches, none a batch."""
    lg,mg,res,*n = _run(loader, 'cpu', tmp_path/'a')
    _check(lg, mg, res, *n)
    assert mg.seen == []
    if loader != 'stream': assert lg.seen == []
    else:
        lg2,_,_,batches,*_ = _run(loader, 'cpu', tmp_path/'b', bs=512)
        assert batches > n[0] and sorted(lg2.seen) == sorted(lg.seen)
    dls,to = _dls(loader, 'cpu', tmp_path)
    g = Guard(False)
    learn = _learner(dls, to, [guard_accumulate(RocAucBinary(), g)], [])
    with learn.no_bar(): learn.validate()
    assert g.seen and set(g.seen) <= HostConversions.names   # its per-batch `.cpu()`: the record is not blind

# --- the record against CUDA's guard ---------------------------------------------------------------------------------
# calls that make the host wait for a CUDA device: each one the record must see, and CUDA's guard raises at
SYNCS = {
    'item': lambda x: x.sum().item(),
    'bool': lambda x: bool(x.sum() > 0),
    'cpu': lambda x: x.cpu(),
    'boolean-mask index': lambda x: x[x > 0],
    'boolean-mask assignment of a tensor': lambda x: x.__setitem__(x > 0, x[:1]),
    'nonzero': lambda x: x.nonzero(),
    'where(condition)': lambda x: torch.where(x > 0),
    'masked_select': lambda x: x.masked_select(x > 0),
    'unique': lambda x: x.unique(),
    'repeat_interleave by a tensor': lambda x: x.repeat_interleave(torch.full_like(x, 2, dtype=torch.long)),
    'tensor of a list': lambda x: torch.tensor([1, 2], device=x.device),
}
# their counterparts that need no host: the record must not see them, and CUDA's guard lets them run
NO_SYNCS = {
    'masked_fill': lambda x: x.masked_fill(x > 0, 0),
    'boolean-mask assignment of a number': lambda x: x.__setitem__(x > 0, 0),   # a masked_fill_ in ATen
    'where(condition, x, 0)': lambda x: torch.where(x > 0, x, 0),
    'index_select': lambda x: x.index_select(0, torch.arange(3, device=x.device)),
    'repeat_interleave with output_size': lambda x: x.repeat_interleave(torch.full_like(x, 2, dtype=torch.long),
                                                                        output_size=2 * len(x)),
    'nonzero_static': lambda x: torch.nonzero_static(x > 0, size=3),
}

def _values(device): return torch.linspace(-1, 1, 8, device=device)

@pytest.mark.parametrize('name', [*SYNCS, *NO_SYNCS])
def test_the_record_sees_each_sync(name):
    "The CPU record sees each call that syncs on CUDA, and none of the calls that do the same without a sync."
    x = _values('cpu')
    with HostConversions() as mode: (SYNCS | NO_SYNCS)[name](x)
    assert bool(mode.seen) == (name in SYNCS), mode.seen

@pytest.mark.cuda
@pytest.mark.parametrize('name', [*SYNCS, *NO_SYNCS])
def test_the_record_is_what_cuda_catches(name):
    "On CUDA, the guard raises at each call the record sees (`SYNCS`), and at none of the others."
    x = _values('cuda')
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode('error')
    try:
        if name in NO_SYNCS: NO_SYNCS[name](x)
        else:
            with pytest.raises(RuntimeError, match='synchroniz'): SYNCS[name](x)
    finally: torch.cuda.set_sync_debug_mode(0)
