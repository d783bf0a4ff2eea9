"""`distrib_ctx` with `BatchDataLoader`: the sharding rules in one process, then two ranks on gloo (127.0.0.1), started
by torchrun on a free port with a time limit, which save what they saw; the tests compare that with one process.
Run as a script, this file is the ranks' program."""
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path
import numpy as np
import pytest
import sklearn.metrics as skm
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip('accelerate', reason="fastai's distrib_ctx needs accelerate (the test extra installs it)")
from fastai.callback.fp16 import MixedPrecision
from fastai.distributed import DistributedDL
from fastai.learner import Callback, CancelFitException, load_learner
from fastai.metrics import RocAucBinary, accuracy
from fastai.tabular.all import Categorify, FillMissing, Normalize, tabular_config
from fastai.torch_core import noop, rank_distrib, set_seed
from fastai_gpu_tabular import core
from fastai_gpu_tabular.all import AUC, DistributedBatchDL, Lamb, TabularGPU, tabular_learner
from fastai_gpu_tabular.bench.ddp import rank_epochs
from fastai_gpu_tabular.datasets import load_adult
from fastai_gpu_tabular.train.distributed import shard_layout, shard_span

CATS = ['workclass', 'education', 'marital-status', 'occupation', 'relationship', 'race', 'gender']
CONTS = ['age', 'fnlwgt', 'educational-num', 'capital-gain', 'capital-loss', 'hours-per-week']
# 9,767 validation rows = 19 global batches of 2x257 + 1 row: uneven pieces, the 1-row tail joining the batch before
N_VALID, BS, VAL_BS, BS_SPARSE = 9767, 1024, 257, 512
SPARSE = {'sparse_lamb': dict(sparse=True, opt_func=Lamb), 'fused_adam': dict(sparse=True, fused=True, emb_szs=8)}
TIMEOUT = 600   # seconds for the whole 2-rank run (a shared, loaded 2-core machine); nothing waits longer
# the ddp bench suite at a tiny size (`bench.ddp.rank_epochs`' arguments): its ranks run in this file's rank program
BENCH = dict(rows=5000, bs=512, device='cpu', contenders=['ours', 'fastai'], epochs=1, warmup=0, max_s=120., threads=1)

# --- the data and learners, built alike by the ranks and by the single-process references ---------------------------
def frame():
    "Adult with `rid` (the row number, a cont left unnormalised so batches trace back to rows) and a multi-hot `tags`."
    df = load_adult()
    df['rid'] = np.arange(len(df), dtype=np.float64)
    df['tags'] = [[a, b] for a,b in zip(df['workclass'], df['occupation'])]
    perm = np.random.default_rng(0).permutation(len(df))
    return df, (sorted(perm[N_VALID:]), sorted(perm[:N_VALID]))

def dense_to(df, splits):
    return TabularGPU(df, procs=[Categorify, FillMissing], cat_names=CATS, cont_names=['rid'] + CONTS,
                      y_names='income', splits=splits)

def sparse_to(df, splits):
    return TabularGPU(df, procs=[Categorify, FillMissing, Normalize], cat_names=CATS + ['tags'], cont_names=CONTS,
                      y_names='income', splits=splits)

def dense_learner(to, **kwargs):
    return tabular_learner(to.dataloaders(bs=BS, val_bs=VAL_BS), layers=[32, 16],
                           metrics=[accuracy, RocAucBinary(), AUC(), AUC(score='margin')], **kwargs)

def sparse_learner(to, kind, bs, device=None, **kwargs):
    "No BatchNorm, unshuffled training: `bs` rows on each of 2 ranks then step exactly as `2*bs` rows on one process."
    dls = to.dataloaders(bs=bs, device=device)
    dls.loaders[0] = dls.train.new(shuffle=False)
    return tabular_learner(dls, layers=[16], config=tabular_config(use_bn=False, bn_cont=False), **SPARSE[kind],
                           **kwargs)

class Float64Step(Callback):
    "One training step of a float64 model: the conts cast to it, the fit stopped after the step."
    def before_batch(self): self.learn.xb = (self.xb[0], self.xb[1].double())
    def after_step(self): raise CancelFitException

class CPUBFloat16(MixedPrecision):
    "fastai's `to_bf16` autocasts on CUDA only: the same callback autocasting on the CPU."
    def before_fit(self):
        self.autocast,self.scales = torch.autocast('cpu', dtype=torch.bfloat16),[]
        self.learn.scaler = torch.GradScaler('cpu', enabled=False)

def state(learn): return {k: v.detach().clone() for k,v in learn.model.state_dict().items()}

# --- the ranks' program ------------------------------------------------------------------------------------------
class Rows(Callback):
    "Row ids of each epoch's training batches, and what `len()` said at the epoch's start."
    def before_fit(self): self.epochs,self.lens = [],[]
    def before_epoch(self): self.epochs.append([]); self.lens.append(len(self.dls.train))
    def after_batch(self):
        if self.training: self.epochs[-1].append(self.xb[1][:, 0].long().cpu())

def rank_main(out):
    import torch.distributed as dist
    from accelerate.utils import InitProcessGroupKwargs
    out,res = Path(out),{}
    dist.init_process_group('gloo', timeout=timedelta(seconds=120))
    ctx = dict(cpu=True, sync_bn=False, kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=120))])
    df,splits = frame()
    to = dense_to(df, splits)
    set_seed(rank_distrib())   # ranks start apart: DDP must hand them rank 0's weights
    learn = dense_learner(to, cbs=(rows := Rows()))
    with learn.distrib_ctx(**ctx):
        res['wrapped'] = type(DistributedDL(learn.dls.train)).__name__
        learn.fit_one_cycle(2, 1e-2)
        res.update(epochs=rows.epochs, lens=rows.lens, train_iter=learn.train_iter, pct_train=learn.pct_train,
                   state=state(learn), validate=learn.validate(), preds=learn.get_preds(),
                   preds_raw=learn.get_preds(act=noop),
                   preds_train=learn.get_preds(ds_idx=0), preds_one=learn.get_preds(dl=learn.dls.test_dl(df.iloc[:1])),
                   validate_few=learn.validate(dl=learn.dls.test_dl(df.iloc[:5])))   # 3 rows on rank 0, 2 on rank 1
        pad = DistributedDL(learn.dls.train.new(drop_last=False))
        res['pad_len'],res['pad_epochs'] = len(pad),[[b[1][:, 0].long() for b in pad] for _ in range(2)]
        before = state(learn)
        res['lr_find'] = learn.lr_find(end_lr=1e-2, num_it=30, show_plot=False).valley,len(learn.recorder.losses)
        res['lr_restored'] = all(torch.equal(before[k], v) for k,v in state(learn).items())
        shown,display = [],core.display_df
        core.display_df = shown.append
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                learn.dls.show_batch(max_n=3)
                DistributedDL(learn.dls.train).show_batch(max_n=2)
        finally: core.display_df = display
        res['shown'] = shown
        res['cbs_in'] = [type(cb).__name__ for cb in learn.cbs]
    res['cbs_out'] = [type(cb).__name__ for cb in learn.cbs]
    learn.export(out/'export.pkl')   # after distrib_ctx, as fastai's docs do; fastai writes it on rank 0 only
    for name,cb in (('fp16', None), ('bf16', CPUBFloat16())):   # fastai's to_fp16 (autocast is off on a CPU); bf16
        set_seed(0)
        learn = dense_learner(to, cbs=cb)
        if cb is None: learn.to_fp16()
        with learn.distrib_ctx(**ctx):
            learn.fit(1, 1e-2)
            res[name] = dict(state=state(learn), validate=learn.validate())
    to2 = sparse_to(df, splits)
    for kind in SPARSE:
        set_seed(rank_distrib())
        learn = sparse_learner(to2, kind, BS_SPARSE)
        init = state(learn)
        with learn.distrib_ctx(**ctx): learn.fit_one_cycle(1, 1e-2)
        res[kind] = dict(init=init, state=state(learn))
        set_seed(rank_distrib())   # and one step in float64, from weights apart again
        learn = sparse_learner(to2, kind, BS_SPARSE, cbs=Float64Step())
        init = state(learn)
        learn.model.double()
        with learn.distrib_ctx(**ctx): learn.fit(1, 1e-2)
        res[kind]['step64'] = dict(init=init, state=state(learn))
    res['stream'] = stream_run(df, splits, ctx)
    # the ddp bench suite's ranks at a tiny size, in this process group (test_ddp_bench_suite_small)
    rank_epochs(json.dumps(BENCH), out/'bench')
    torch.save(res, out/f'rank{rank_distrib()}.pt')

def stream_run(df, splits, ctx):
    "A Dask frame's loaders, streamed (TabularDask, StreamDataLoader) under distrib_ctx: what each rank trained on."
    import dask
    import dask.dataframe as dd
    df = df.drop(columns='tags').assign(is_valid=np.isin(np.arange(len(df)), splits[1]))
    with dask.config.set(scheduler='sync'):
        to = TabularGPU(dd.from_pandas(df, npartitions=4), procs=[Categorify, FillMissing], cat_names=CATS,
                        cont_names=['rid'] + CONTS, y_names='income', splits='is_valid')
    set_seed(0)
    learn = tabular_learner(to.dataloaders(bs=BS, stream=True, seed=0), layers=[16], cbs=(rows := Rows()))
    with learn.distrib_ctx(**ctx):
        wrapped = type(DistributedDL(learn.dls.train)).__name__
        learn.fit(1, 1e-2)
    return dict(wrapped=wrapped, epochs=rows.epochs, lens=rows.lens, state=state(learn))

if __name__ == '__main__':
    rank_main(sys.argv[1])
    sys.exit()

# --- one process: the sharding rules -----------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 2000), bs=st.integers(1, 300), ws=st.integers(1, 8), drop_last=st.booleans(), pad=st.booleans())
def test_shard_layout_tiles_the_epoch(n, bs, ws, drop_last, pad):
    N,nb = shard_layout(n, bs, ws, drop_last, pad)
    assert nb == shard_layout(n, bs, ws, drop_last, not pad)[1]   # len() is the same with or without padding
    spans = [[shard_span(N, nb, bs, ws, b, r) for b in range(nb)] for r in range(ws)]
    assert sorted(p for r in spans for a,z in r for p in range(a, z)) == list(range(N))   # disjoint, nothing skipped
    for b in range(nb):
        sizes = [z - a for a,z in (spans[r][b] for r in range(ws))]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= (0 if pad or drop_last or n < ws else 1)
        if pad and not drop_last and b == nb - 1 > 0 and n % (bs * ws):   # a partial tail: never 1-row (BatchNorm)
            assert min(sizes) >= 2
        if b < nb - 1: assert sizes == [bs] * ws
        # in rank order the pieces are the global batch's positions in order: what `to_detach` relies on
        assert [spans[r][b][0] for r in range(ws)] == sorted(spans[r][b][0] for r in range(ws))
    g = bs * ws
    if drop_last: assert N == n // g * g
    elif pad or n < ws: assert N % ws == 0 and n <= N < n + ws
    else: assert N == n

@pytest.fixture(scope='module')
def adult():
    df,splits = frame()
    return df, splits, dense_to(df, splits)

def rids(batches): return [torch.cat([b[1][:, 0] for b in bs]).long() for bs in batches]

def test_wrapper_shards_the_loader(adult):
    "Two ranks' wrappers in one process (a given seed instead of a broadcast): what fastai's `_wrap_dl` gets."
    *_,to = adult
    dl = to.dataloaders(bs=BS).train
    n,g = dl.n,2 * BS
    ws = [DistributedDL(dl, rank=r, world_size=2, seed=7) for r in range(2)]
    assert all(type(w) is DistributedBatchDL for w in ws) and len(ws[0]) == len(ws[1]) == n // g
    e1,e2 = rids([list(w) for w in ws]),rids([list(w) for w in ws])
    for e in (e1, e2):
        assert len(e[0]) == len(e[1]) == n // g * BS and not set(e[0].tolist()) & set(e[1].tolist())
    assert not torch.equal(e1[0], e2[0])   # a new permutation each epoch
    # drop_last=False pads with repeated rows: every row, at most world_size-1 of them twice
    ws = [DistributedDL(dl.new(drop_last=False), rank=r, world_size=2, seed=7) for r in range(2)]
    e = rids([list(w) for w in ws])
    counts = Counter(torch.cat(e).tolist())
    assert len(e[0]) == len(e[1]) and sorted(counts) == sorted(to.train.items['rid'].astype(int))
    assert sum(counts.values()) - n == (-n) % 2
    # without gradients (validation) nothing is repeated, and rank order gives the loader's order back
    va = to.dataloaders(bs=BS, val_bs=VAL_BS).valid
    ws = [DistributedDL(va, rank=r, world_size=2) for r in range(2)]
    with torch.no_grad(): parts = [list(w) for w in ws]
    assert [len(p) for p in parts] == [len(ws[0])] * 2 == [N_VALID // (2 * VAL_BS)] * 2
    order = torch.cat([torch.cat([parts[r][b][1][:, 0] for r in range(2)]) for b in range(len(parts[0]))]).long()
    assert torch.equal(order.cpu(), torch.as_tensor(to.valid.items['rid'].values).long())

def test_wrapper_refuses_a_step_larger_than_the_data(adult):
    *_,to = adult
    dl = to.dataloaders(bs=30000).train   # 39,075 rows: one batch alone, none on 2 ranks with drop_last
    with pytest.raises(ValueError, match='drop_last'): DistributedDL(dl, rank=0, world_size=2, seed=0)

# --- two ranks ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope='module')
def ranks(tmp_path_factory):
    "Both ranks' results, from one torchrun of this file (gloo, 127.0.0.1, a port the OS picks)."
    out = tmp_path_factory.mktemp('ddp')
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2', '--rdzv-backend', 'c10d',
           '--rdzv-endpoint', '127.0.0.1:0', __file__, str(out)]
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, 'OMP_NUM_THREADS': '1',
           'PYTHONPATH': os.pathsep.join([root, os.environ.get('PYTHONPATH', '')])}
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=out,
                         start_new_session=True)   # cwd: lr_find's models/ folder lands there
    try: log,_ = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        log,_ = p.communicate()
        pytest.fail(f'the 2-rank run took over {TIMEOUT} s:\n{log[-4000:]}')
    if p.returncode: pytest.fail(f'the 2-rank run failed ({p.returncode}):\n{log[-6000:]}')
    return [torch.load(out/f'rank{r}.pt', weights_only=False) for r in range(2)], out

def test_equal_batches_and_len(ranks):
    (r0,r1),_ = ranks
    assert r0['wrapped'] == 'DistributedBatchDL'
    n_train = len(frame()[1][0])
    per_rank = n_train // (2 * BS)   # drop_last (fastai's default for training): whole global batches
    for r in (r0, r1):
        assert r['lens'] == [len(e) for e in r['epochs']] == [per_rank] * 2
        assert r['train_iter'] == 2 * per_rank and r['pct_train'] == pytest.approx(1)   # one-cycle ran to its end
        assert all(len(b) == BS for e in r['epochs'] for b in e)
    assert r0['pad_len'] == r1['pad_len'] == -(-n_train // (2 * BS))

def test_rows_disjoint_and_covering(ranks):
    (r0,r1),_ = ranks
    train = set(frame()[1][0])
    for e0,e1 in zip(r0['epochs'], r1['epochs']):
        a,b = set(torch.cat(e0).tolist()),set(torch.cat(e1).tolist())
        assert not a & b and a | b <= train and len(a | b) == len(train) // (2 * BS) * 2 * BS
    assert r0['epochs'][0][0].tolist() != r0['epochs'][1][0].tolist()
    for e0,e1 in zip(r0['pad_epochs'], r1['pad_epochs']):   # drop_last=False: padded with one repeated row
        counts = Counter(torch.cat(e0 + e1).tolist())
        assert set(counts) == train and sum(counts.values()) == len(train) + len(train) % 2
        assert sum(len(x) for x in e0) == sum(len(x) for x in e1)

def test_stream_loader_takes_its_own_share(ranks):
    """distrib_ctx leaves a StreamDataLoader (a Dask frame's, streamed) unwrapped: it reads its rank's share of the
    chunks itself. Both ranks get the same number of whole batches, from disjoint rows, and step alike."""
    (r0,r1),_ = ranks
    s0,s1 = r0['stream'],r1['stream']
    assert s0['wrapped'] == s1['wrapped'] == 'StreamDataLoader'
    n_train = len(frame()[1][0])
    share = -(-n_train // 2)   # each rank ceil(n/2) rows of the epoch's piece order, in whole batches (drop_last)
    assert s0['lens'] == s1['lens'] == [len(s0['epochs'][0])] == [len(s1['epochs'][0])] == [share // BS]
    a,b = torch.cat(s0['epochs'][0]).tolist(),torch.cat(s1['epochs'][0]).tolist()
    train = set(frame()[1][0])
    assert len(set(a)) == len(a) and len(set(b)) == len(b) and set(a) | set(b) <= train
    assert len(set(a) & set(b)) <= n_train % 2   # the last rank's share wraps round to the first rows
    assert all(torch.equal(s0['state'][k], s1['state'][k]) for k in s0['state'])

def test_same_weights_on_both_ranks(ranks):
    (r0,r1),_ = ranks
    for s0,s1 in [(r0['state'], r1['state'])] + [(r0[k]['state'], r1[k]['state']) for k in ['fp16', 'bf16', *SPARSE]]:
        assert s0.keys() == s1.keys() and all(torch.equal(s0[k], s1[k]) for k in s0)
    # the sparse models began apart (seeded by rank): rank 0's tables reached rank 1 through `SparseGradSync`
    for k in SPARSE:
        tables = [p for p in r0[k]['init'] if p.startswith(('embeds.', 'fused.'))]
        assert tables and all(not torch.equal(r0[k]['init'][p], r1[k]['init'][p]) for p in tables)

def single(to, st, **kwargs):
    "A single-process learner with the ranks' weights."
    learn = dense_learner(to, **kwargs)
    learn.model.load_state_dict(st)
    return learn

def test_validation_equals_single_process(ranks, adult):
    (r0,r1),_ = ranks
    df,_,to = adult
    learn = single(to, r0['state'])
    for r in (r0, r1):   # batch means weighed by their rows, also where the ranks' rows differ most
        np.testing.assert_allclose(r['validate'], learn.validate(), rtol=1e-5)
        np.testing.assert_allclose(r['validate_few'], learn.validate(dl=learn.dls.test_dl(df.iloc[:5])), rtol=1e-5)
    one = learn.dls.test_dl(df.iloc[:1])
    for k,kw in (('preds', {}), ('preds_train', dict(ds_idx=0)), ('preds_one', dict(dl=one))):
        p,y = learn.get_preds(**kw)
        for r in (r0, r1):   # every row once, in the loader's order
            assert torch.equal(r[k][1], y)
            torch.testing.assert_close(r[k][0], p, rtol=1e-5, atol=1e-6)
    learn = single(to, r0['bf16']['state'], cbs=CPUBFloat16())
    np.testing.assert_allclose(r0['bf16']['validate'], learn.validate(), rtol=1e-3)

def test_auc_is_sklearn_on_gathered_preds(ranks):
    """Under distrib_ctx, AUC (each rank's rows gathered, DistributedDL's padding left out) is RocAucBinary's value and
    sklearn's on get_preds' probabilities (every rank's), to the last bit; `score='margin'` ranks the logit margins."""
    (r0,r1),_ = ranks
    for r in (r0, r1):
        (p,y),(x,_) = r['preds'],r['preds_raw']
        y = y.numpy().ravel()
        _,_,roc,auc,auc_margin = r['validate']
        assert auc == roc == skm.roc_auc_score(y, p[:, 1].numpy())
        assert auc_margin == skm.roc_auc_score(y, (x[:, 1] - x[:, 0]).numpy())
        for k in ('fp16', 'bf16'): assert r[k]['validate'][3] == r[k]['validate'][2]   # half outputs made float

def test_sparse_tables_step_as_one_process(ranks):
    """A step of 2 ranks x 512 rows is one of a process x 1,024 rows: DDP for the dense weights, `SparseGradSync` for
    the sparse tables. In float64, one step: each side's grads are a 1,024-row mean (summed in other orders: within
    bs*eps64 of the per-row grads' size, below 10), and the first step of Adam, lr*g/(|g|+eps), is lr/eps-Lipschitz in
    g, LAMB's at most 10(1+sqrt(n)) times that (its trust ratio, at most 10, and the norms of n elements in it). A row
    left unsynced, or a wrong average, moves elements by about the lr, 1e-2. (After an epoch in float32 the two would be
    apart by rounding that each step amplifies, up to lr/eps where grads are tiny: by how much depends on the CPU.)
    The ranks ran on CPUs (gloo), so the one process does too, whatever fastai's default device: a step on a GPU
    rounds otherwise."""
    (r0,_),_ = ranks
    df,splits = frame()
    to = sparse_to(df, splits)
    eps64,lr = torch.finfo(torch.float64).eps,1e-2
    for kind in SPARSE:
        learn = sparse_learner(to, kind, 2 * BS_SPARSE, device='cpu', cbs=Float64Step())
        learn.model.load_state_dict(r0[kind]['step64']['init'])   # DDP starts both ranks from rank 0's weights
        learn.model.double()
        learn.fit(1, lr)
        got,want = r0[kind]['step64']['state'],state(learn)
        n = max(p.numel() for p in learn.model.parameters())
        tol = lr / learn.opt.hypers[0]['eps'] * 10 * (1 + n ** 0.5) * 2 * BS_SPARSE * eps64 * 10
        for k in want:
            assert got[k].dtype == want[k].dtype
            torch.testing.assert_close(got[k], want[k], rtol=4 * eps64, atol=tol, msg=f'{kind}: {k}')
        assert any(not torch.equal(r0[kind]['step64']['init'][k], want[k].float()) for k in want)

def test_export_from_rank0_loads(ranks, adult):
    (r0,_),out = ranks
    ours = {'DistributedTrainer', 'SparseGradSync', 'DistributedLRFind'}
    assert ours <= set(r0['cbs_in']) and not ours & set(r0['cbs_out'])   # distrib_ctx adds them, and takes them away
    df,splits,_ = adult
    learn = load_learner(out/'export.pkl', cpu=True)
    p,_ = learn.get_preds(dl=learn.dls.test_dl(df.iloc[splits[1]]))
    torch.testing.assert_close(p, r0['preds'][0], rtol=1e-5, atol=1e-6)

def test_lr_find_and_show_batch(ranks):
    (r0,r1),_ = ranks
    assert r0['lr_find'] == r1['lr_find'] and r0['lr_find'][1] == 30   # num_it steps, as on one process
    assert r0['lr_restored'] and r1['lr_restored']
    for r in (r0, r1):   # decoded rows of dls.train and of this rank's shard (fastai shows 10 tabular rows, any max_n)
        assert [len(d) for d in r['shown']] == [10, 10]
        assert all(set(CATS) <= set(d.columns) and d['workclass'].map(type).eq(str).all() for d in r['shown'])

def test_ddp_bench_suite_small(ranks):
    """The ddp bench suite's ranks at a tiny size (2 ranks, gloo; run by the ranks' program, as `ddp_suite` runs them):
    our wrapper yields what len() says; no timing asserted."""
    from fastai_gpu_tabular.bench.ddp import format_table, rank_results
    r = rank_results(ranks[1]/'bench', 2, BENCH['contenders'])
    res = dict(nproc=2, bs=BENCH['bs'], contenders=dict.fromkeys(BENCH['contenders']), rows={'5000': r})
    assert r['ours']['batches'] == r['ours']['len'] == 5000 // 1024 and r['ours']['rows_per_rank'] == 5000 // 1024 * 512
    assert r['fastai']['batches'] > 0 and all(t > 0 for c in ('ours', 'fastai') for t in r[c]['rank_epoch_s'])
    assert '5,000' in format_table(res)

# --- distrib_ctx on CPUs, and launchers ------------------------------------------------------------------------------
def test_distrib_ctx_defaults_for_cpu_loaders(adult, monkeypatch):
    """With the loaders on the CPU, `distrib_ctx()` asks accelerate for its CPU (gloo) path and no SyncBatchNorm, which
    runs on GPUs only: fastai's defaults (no `cpu`, `sync_bn=True`) stopped at `model.device`. Given, they are kept."""
    from fastai.learner import Learner
    *_,to = adult
    learn = tabular_learner(to.dataloaders(bs=BS, device='cpu'), layers=[8])
    assert torch.device(learn.dls.device).type == 'cpu'
    seen = []
    monkeypatch.setattr(Learner, 'to_distributed', lambda self, sync_bn=True, **kw: seen.append((sync_bn, kw)) or self)
    monkeypatch.setenv('WORLD_SIZE', '2')   # what fastai's distrib_ctx reads to wrap the learner
    with learn.distrib_ctx(): pass
    with learn.distrib_ctx(sync_bn=True, cpu=False): pass
    assert seen == [(False, {'cpu': True}), (True, {'cpu': False})]

@pytest.mark.slow
def test_accelerate_launch_of_one_process_warns(tmp_path):
    """`accelerate launch --num_processes 2` without `--multi_gpu` starts one process on a machine without GPUs:
    distrib_ctx says so, and what to run instead."""
    (tmp_path/'one.py').write_text(
        "import warnings\nwarnings.simplefilter('always')\n"
        "from fastai.tabular.all import *\nfrom fastai_gpu_tabular.all import *\n"
        "df = load_adult().iloc[:500]\n"
        "to = TabularGPU(df, procs=[Categorify], cat_names=['workclass'], y_names='income', "
        "splits=RandomSplitter(seed=0)(range_of(df)))\n"
        "learn = tabular_learner(to.dataloaders(bs=64), layers=[8])\n"
        "with learn.distrib_ctx(): pass\n")
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([root, os.environ.get('PYTHONPATH', '')])}
    # port 0: accelerate picks a free one (its one process binds none)
    r = subprocess.run([sys.executable, '-m', 'accelerate.commands.launch', '--num_processes', '2',
                        '--main_process_port', '0', 'one.py'], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert 'distrib_ctx runs on one process' in r.stderr and '--multi_gpu' in r.stderr, r.stderr[-3000:]
