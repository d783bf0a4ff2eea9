"BatchDataLoader: fastai's DataLoader contract, one true permutation an epoch, one gather a batch."
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fastai.tabular.all import Categorify, FillMissing, TabDataLoader, TabularPandas, default_device
from helpers.parity import assert_same_batches
from scipy.stats import chisquare
from fastai_gpu_tabular.all import BatchDataLoader, TabularGPU
from fastai_gpu_tabular.datasets import load_adult

N = 3000
def kw():
    "The Tabular arguments, with fresh lists (fastai appends the `_na` names to the cat_names it is given)."
    return dict(procs=[Categorify, FillMissing], cat_names=['workclass', 'education'], cont_names=['row', 'age'],
                y_names='income', splits=(list(range(2400)), list(range(2400, N))))

@pytest.fixture(scope='module')
def df():
    "Adult rows with a `row` cont that is the row id, so batches can be traced back to rows."
    df = load_adult().iloc[:N].reset_index(drop=True)
    df['row'] = np.arange(N, dtype=np.float64)
    return df

@pytest.fixture(scope='module')
def to(df): return TabularGPU(df, **kw())

def rows_of(batches): return torch.cat([b[1][:, 0] for b in batches]).long().tolist()

def test_epoch_is_a_true_permutation(to):
    dl = BatchDataLoader(to.train, bs=256, shuffle=True, drop_last=False)
    e1, e2 = rows_of(dl), rows_of(dl)
    assert sorted(e1) == list(range(2400)) and sorted(e2) == list(range(2400))   # every row exactly once
    assert e1 != list(range(2400)) and e1 != e2                                    # shuffled, anew each epoch
    assert len(dl) == 10

def test_drop_last_and_len(to):
    dl = BatchDataLoader(to.train, bs=1000, shuffle=True, drop_last=True)
    bs = [len(b[0]) for b in dl]
    assert bs == [1000, 1000] and len(dl) == 2
    dl = BatchDataLoader(to.train, bs=1000, shuffle=False, drop_last=False)
    assert [len(b[0]) for b in dl] == [1000, 1000, 400] and len(dl) == 3
    assert rows_of(dl) == list(range(2400))

def test_get_idxs_and_new(to):
    dl = BatchDataLoader(to.train, bs=256, shuffle=True)
    idxs = dl.get_idxs()
    assert isinstance(idxs, torch.Tensor) and idxs.device.type == 'cpu' and idxs.dtype == torch.int64
    assert sorted(idxs.tolist()) == list(range(2400))
    plain = dl.new(shuffle=False, drop_last=False, bs=100)
    assert plain.bs == 100 and not plain.shuffle and not plain.drop_last and plain.device == dl.device
    assert plain.get_idxs().tolist() == list(range(2400))
    # new(get_idxs=...) is honoured: this is how Learner.get_preds(reorder=True) replays an order
    order = list(range(2399, -1, -1))
    rev = plain.new(get_idxs=lambda: order)
    assert rows_of(rev) == order

def test_unshuffled_batches_are_views(to):
    """Validation batches are slices of the packed tensors: no copy at all, but the cat codes' cast to int64 (with
    `cat_dtype=torch.int32`, none)."""
    cats, conts, ys = to.valid.packed()
    b = next(iter(BatchDataLoader(to.valid, bs=128)))
    assert b[1].data_ptr() == conts.data_ptr() and b[2].data_ptr() == ys.data_ptr()
    assert b[0].dtype == torch.int64 and torch.equal(b[0], cats[:128].long())
    b = next(iter(BatchDataLoader(to.valid, bs=128, cat_dtype=torch.int32)))
    assert b[0].data_ptr() == cats.data_ptr() and b[1].data_ptr() == conts.data_ptr()
    # and the subsets' packed rows are views of the whole object's: packing happens once, in one buffer
    assert (cats.untyped_storage().data_ptr() == to.packed()[0].untyped_storage().data_ptr()
            == conts.untyped_storage().data_ptr())
    rows, layout = to.packed_rows()
    assert rows.dtype == torch.int32 and rows.is_contiguous()
    assert [dt for *_, dt in layout] == [torch.int32, torch.float32, torch.int64]

def test_one_gather_per_batch_no_per_row_work(to, monkeypatch):
    """An epoch costs one permutation and, per batch, one index_select of the packed rows: no per-row call into the
    dataset."""
    calls = {'index_select': 0, 'iloc': 0}
    orig = torch.Tensor.index_select
    def spy(self, *a, **k):
        calls['index_select'] += 1
        return orig(self, *a, **k)
    monkeypatch.setattr(torch.Tensor, 'index_select', spy)
    monkeypatch.setattr(TabularGPU, 'iloc', property(lambda self: calls.__setitem__('iloc', calls['iloc'] + 1)))
    dl = BatchDataLoader(to.train, bs=300, shuffle=True)
    n = sum(1 for _ in dl)
    assert n == 8 and calls['index_select'] == 8 and calls['iloc'] == 0

def test_batches_match_fastai(df, to):
    "Unshuffled, every batch is the one fastai's TabDataLoader makes over TabularPandas: (cats, conts, y), y (bs, 1)."
    ref = TabularPandas(df.copy(), **kw())
    for ref_ds, ds in ((ref.valid, to.valid), (ref.train, to.train)):
        assert_same_batches(TabDataLoader(ref_ds, bs=64), BatchDataLoader(ds, bs=64))
    b = BatchDataLoader(to.valid, bs=64).one_batch()
    assert len(b) == 3 and b[2].shape == (64, 1) and b[0].shape == (64, len(to.cat_names))

def test_batches_hold_fastais_dtypes(df, to):
    """The batches' dtypes are fastai's TabDataLoader's, so that code written against fastai's batches runs on ours:
    int64 codes (`F.one_hot`, `torch.gather` and `scatter` take no other), float32 conts, equal values; targets are
    int64 class indices where fastai's are its codes' int8 (a deliberate difference: `F.one_hot(y)` takes ours).
    `cat_dtype=torch.int32` serves the packed int32 codes instead, which those functions refuse; `new` and `test_dl`
    keep the loader's choice."""
    ref = TabularPandas(df.copy(), **kw())
    rb, ob = next(iter(TabDataLoader(ref.valid, bs=64))), next(iter(BatchDataLoader(to.valid, bs=64)))
    assert [t.dtype for t in rb] == [torch.int64, torch.float32, torch.int8]
    assert [t.dtype for t in ob] == [torch.int64, torch.float32, torch.int64]
    assert torch.equal(ob[0].cpu(), rb[0]) and torch.equal(ob[2].cpu(), rb[2].long())
    n = len(to.classes['education'])   # what a user does with fastai's batches: the same on ours
    for x in (rb[0], ob[0]):
        x = x.cpu()
        assert torch.equal(F.one_hot(x[:, 1], n), F.one_hot(rb[0][:, 1], n))
        assert torch.equal(torch.gather(x, 1, x[:, :1] % 2), torch.gather(rb[0], 1, rb[0][:, :1] % 2))
        assert torch.equal(torch.zeros(64, n, dtype=torch.long).scatter(1, x[:, 1:], 1), F.one_hot(rb[0][:, 1], n))
    assert torch.equal(F.one_hot(ob[2][:, 0].cpu(), 2), F.one_hot(rb[2][:, 0].long(), 2))
    with pytest.raises(RuntimeError, match='one_hot is only applicable to index tensor'): F.one_hot(rb[2][:, 0])
    dl = BatchDataLoader(to.valid, bs=64, cat_dtype=torch.int32)
    b = next(iter(dl))
    assert b[0].dtype == torch.int32 and torch.equal(b[0].cpu().long(), rb[0])
    with pytest.raises(RuntimeError, match='one_hot is only applicable to index tensor'): F.one_hot(b[0][:, 1].cpu())
    assert dl.new(bs=32).one_batch()[0].dtype == torch.int32
    dls = to.dataloaders(bs=64, cat_dtype=torch.int32)
    assert dls.test_dl(df.iloc[:100]).one_batch()[0].dtype == torch.int32
    assert to.dataloaders(bs=64).test_dl(df.iloc[:100]).one_batch()[0].dtype == torch.int64
    with pytest.raises(ValueError, match='cat_dtype must be torch.int64'):
        BatchDataLoader(to.valid, cat_dtype=torch.int16)

def test_weighted_sampling(to):
    """wgts: shuffled epochs draw rows with replacement by weight (fastai's TabWeightedDL), on the device. 100 rows of
    weight 1, 100 of weight 4, the rest 0: the heavy rows must make 80% of the draws (a weight read as a mask: 50%)."""
    w = np.zeros(2400); w[:100] = 1.; w[100:200] = 4.
    dl = BatchDataLoader(to.train, bs=200, shuffle=True, wgts=w)
    torch.manual_seed(0)
    epochs = [rows_of(dl) for _ in range(3)]
    rows = np.array(sum(epochs, []))
    assert all(len(e) == 2400 for e in epochs) and epochs[0] != epochs[1]   # with replacement, a new draw each epoch
    assert rows.max() < 200                                                 # never a row of weight 0
    share = (rows >= 100).mean()   # binomial sd over 7,200 draws: 0.0047, so 0.8 +- 0.03 is over 6 sd
    assert abs(share - 0.8) < 0.03, share
    counts = np.bincount(rows, minlength=200)   # each row at its own rate (chi-square: a true sampler fails 1 in 1000)
    assert chisquare(counts, len(rows) * w[:200] / w.sum()).pvalue > 1e-3
    assert rows_of(dl.new(shuffle=False)) == list(range(2400))       # unshuffled: every row once, in order
    assert np.array(rows_of(dl.new(bs=300))).max() < 200 and dl.new(bs=300).bs == 300   # `new` keeps the weights
    assert dl.new(wgts=None).wgts is None and dl.new(to.valid).wgts is None           # unless told, or new rows
    with pytest.raises(ValueError, match='wgts has 5 entries for 2400 rows'):
        BatchDataLoader(to.train, bs=10, wgts=[1.]*5)

def test_seeded_shuffles_repeat(to):
    dl = BatchDataLoader(to.train, bs=256, shuffle=True)
    torch.manual_seed(3); a = rows_of(dl)
    torch.manual_seed(3); b = rows_of(dl)
    assert a == b

def test_device_moves(to):
    "The loaders start on fastai's default_device() (cuda on a GPU machine); cpu()/cuda()/to() move the packed rows."
    dev = default_device()
    dls = to.dataloaders(bs=128)
    assert dls.device == dev and dls.train.rows[0].device == dev and dls.valid.rows[0].device == dev
    on_dev = [t.cpu() for t in dls.valid.one_batch()]
    dls.cpu()
    assert dls.device.type == 'cpu' and dls.train.rows[0].device.type == 'cpu'
    b = dls.valid.one_batch()
    assert all(t.device.type == 'cpu' for t in b) and all(torch.equal(x, y) for x,y in zip(b, on_dev))
    # moving an existing loader: dls.cuda() is dls.to(default_device())
    dls.cuda()
    assert dls.device == dev and dls.train.rows[0].device == dev
    assert all(t.device == dev for t in dls.train.one_batch())
    assert isinstance(dls.train, TabDataLoader) and dls.train.fake_l.num_workers == 0   # no worker processes

def test_empty_and_new_empty(to):
    empty = to.new_empty()
    dl = BatchDataLoader(empty, bs=16)
    assert len(dl) == 0 and list(dl) == []
    dls = to.dataloaders(bs=128).new_empty()
    assert len(dls.train_ds) == 0 and dls.train.bs == 128

@pytest.mark.cuda
def test_pandas_frame_on_cuda(to):
    "A pandas frame packs on the host and moves to the GPU once; batches are then gathered there."
    dls = to.dataloaders(bs=128, device='cuda')
    assert dls.device.type == 'cuda'
    assert all(t.device.type == 'cuda' for t in dls.train.one_batch())
    # cached, not re-sent: holding the first, a second copy could not reuse its block, so this is the same tensor
    first = dls.valid_ds.packed_rows('cuda')[0]
    assert dls.valid_ds.packed_rows('cuda')[0] is first and dls.valid.rows[0] is first

@pytest.mark.cuda
def test_cuda_moves_an_existing_loader(to):
    "dls.cuda() moves loaders built on the CPU: the packed rows go to the GPU once, the batches are the same."
    dls = to.dataloaders(bs=128, device='cpu')
    ref = [t.clone() for t in dls.valid.one_batch()]
    dls.cuda()
    assert dls.device.type == 'cuda' and all(dl.rows[0].device.type == 'cuda' for dl in (dls.train, dls.valid))
    b = dls.valid.one_batch()
    assert all(t.device.type == 'cuda' for t in b) and all(torch.equal(x.cpu(), y) for x,y in zip(b, ref))
    assert all(t.device.type == 'cuda' for t in dls.train.one_batch())
