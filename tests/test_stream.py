"""`PackedChunks` and `StreamDataLoader`: every row once an epoch, fastai's batch contract, equal shares per rank
(two gloo processes), and an out-of-core run (data bigger than a memory budget, peak RSS measured in a subprocess)."""
import json
import os
import subprocess
import sys
from collections import Counter
import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from fastai_gpu_tabular.rows.chunks import PackedChunks
from fastai_gpu_tabular.rows.stream import StreamDataLoader, _rank_slices

SIZES = [100, 0, 2345, 17, 900, 1, 1500]   # rows of each chunk file (one empty)
LAYOUT = ((0, 3, torch.int32), (3, 4, torch.float32))

def _write_chunks(path, sizes=SIZES):
    "Chunk files whose row `i` holds `[i, i % 7, file, i / 2 as float32 bits]`."
    path.mkdir(parents=True, exist_ok=True)
    files, start = [], 0
    for f,n in enumerate(sizes):
        ids = torch.arange(start, start + n, dtype=torch.int32)
        rows = torch.stack([ids, ids % 7, torch.full_like(ids, f), (ids.float() / 2).view(torch.int32)], 1)
        files.append((f'c{f}.npy', PackedChunks.write_rows(path, f'c{f}.npy', rows)))
        start += n
    return PackedChunks.write(path, files, LAYOUT, 4)

@pytest.fixture(scope='module')
def chunks(tmp_path_factory): return _write_chunks(tmp_path_factory.mktemp('chunks'))

N = sum(SIZES)

def _ids(dl):
    "Row ids of one epoch, and the batch sizes."
    ids, sizes = [], []
    for cats, conts in dl:
        assert cats.dtype == torch.int32 and conts.dtype == torch.float32 and cats.shape[1] == 3
        assert torch.equal(conts[:, 0], cats[:, 0].float() / 2)   # the columns of a row stay together
        ids.append(cats[:, 0]); sizes.append(len(cats))
    return torch.cat(ids) if ids else torch.zeros(0, dtype=torch.int32), sizes

def test_chunks(chunks, tmp_path):
    assert len(chunks) == N and chunks.nbytes == N * 16 and len(chunks.files) == 6   # the empty one is not listed
    rows = chunks.load()
    assert torch.equal(rows[:, 0], torch.arange(N, dtype=torch.int32))
    idx = torch.tensor([0, 99, 100, 2444, 2445, N - 1])
    assert torch.equal(chunks.take(idx), rows[idx])
    assert torch.equal(chunks.read(1, 5, 9), rows[105:109])   # file 1 is c2: the empty c1 is not listed
    assert PackedChunks(chunks.path).layout == LAYOUT   # the folder alone reopens it
    assert [p for p in chunks.pieces(1000) if p[0] == 1] == [(1, 0, 1000), (1, 1000, 2000), (1, 2000, 2345)]

@pytest.mark.parametrize('shuffle,bs,window,piece', [(False, 256, 8, 300), (True, 256, 4, 300), (True, 1000, 2, 64),
                                                    (True, 64, 50, 500), (True, 7, 1, 4000)])
def test_every_row_once(chunks, shuffle, bs, window, piece):
    "Shuffled or not, whatever the window and piece sizes: each row exactly once an epoch, in len(dl) batches of bs."
    dl = StreamDataLoader(chunks, bs=bs, shuffle=shuffle, window=window, piece_rows=piece, drop_last=False)
    ids, sizes = _ids(dl)
    assert torch.equal(ids.sort().values, torch.arange(N, dtype=torch.int32))
    assert len(sizes) == len(dl) and all(s == bs for s in sizes[:-1]) and sizes[-1] == N - bs * (len(dl) - 1)
    assert torch.equal(ids, torch.arange(N, dtype=torch.int32)) != shuffle
    if shuffle:
        again, _ = _ids(dl)
        assert not torch.equal(again, ids)   # a new order every epoch

def test_drop_last_and_mixing(chunks):
    dl = StreamDataLoader(chunks, bs=100, shuffle=True, window=6, piece_rows=200, drop_last=True)
    ids, sizes = _ids(dl)
    assert len(dl) == N // 100 == len(sizes) and set(sizes) == {100} and len(ids.unique()) == len(ids)
    # a block mixes pieces: a batch holds rows of several 200-row pieces, not one run
    assert all(len((b // 200).unique()) > 2 for b in ids.split(100))

class _Ops(TorchFunctionMode):
    "Counts the torch calls made in this thread, by name, with the dimensions of their first tensor argument."
    def __init__(self):
        super().__init__()
        self.seen = Counter()
    def __torch_function__(self, func, types, args=(), kwargs=None):
        t = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if t is None and args and isinstance(args[0], (list, tuple)): t = args[0][0]   # torch.cat's list
        name = getattr(func, '__name__', str(func))
        if name == '__getitem__' and isinstance(args[1], torch.Tensor): name = 'gather by []'   # not a view
        self.seen[name, getattr(t, 'ndim', None)] += 1
        return func(*args, **(kwargs or {}))

@pytest.mark.parametrize('shuffle', [True, False])
def test_one_gather_a_batch(chunks, shuffle, monkeypatch):
    """The rows are read straight into the blocks and each batch is one gather from them: nothing copies rows into a
    window, out of it or joins them into a batch (a batch across two blocks gathers from both halves of the ring). On
    the host that gather is NumPy's `take`, and no torch op runs on a block's rows or positions (torch's CPU ops start
    its OpenMP team, whose spinning threads take the reader's core). The next epoch reads into the same ring."""
    takes, take = [], np.take
    monkeypatch.setattr(np, 'take', lambda a, *args, **kw: takes.append(a.shape) or take(a, *args, **kw))
    dl = StreamDataLoader(chunks, bs=100, shuffle=shuffle, window=3, piece_rows=200, drop_last=False)
    with _Ops() as ops: batches = sum(1 for _ in dl)
    assert batches == len(dl) and len(takes) == batches and set(takes) == {tuple(dl._ring.shape)}
    copies = [k for k in ops.seen if k[0] in ('index_select', 'cat', 'index_copy_', 'gather by []', 'clone', 'add',
                                              '__add__', 'arange')]
    assert not copies and ops.seen['randperm', None] <= 1, ops.seen   # one randperm: the order of the pieces
    ring = dl._ring
    assert torch.equal(_ids(dl)[0].sort().values, torch.arange(N, dtype=torch.int32)) and dl._ring is ring   # reused

def test_blocks(chunks):
    "An epoch's blocks: `window` pieces each (one in order), at least `bs` rows but the last, every piece once."
    for shuffle,bs,window,piece in [(True, 100, 3, 200), (True, 1000, 2, 64), (False, 300, 4, 128), (True, 7, 1, 9)]:
        dl = StreamDataLoader(chunks, bs=bs, shuffle=shuffle, window=window, piece_rows=piece)
        slices = dl._slices()
        blocks = dl._blocks(slices)
        assert sum(blocks, []) == slices
        per = window if shuffle else 1
        assert all(len(b) >= per and sum(e - s for _,s,e in b) >= bs for b in blocks[:-1])
        assert all(len(b) == per or sum(e - s for _,s,e in b[:-1]) < bs for b in blocks[:-1])   # no bigger than needed

def test_break_and_errors(chunks, tmp_path):
    "An epoch left early stops its reader (the next epoch is whole); a file that ends early is an error naming it."
    dl = StreamDataLoader(chunks, bs=64, shuffle=True, window=2, piece_rows=100)
    for _ in zip(range(3), dl): pass
    assert torch.equal(_ids(dl)[0].sort().values, torch.arange(N, dtype=torch.int32))
    bad = _write_chunks(tmp_path/'bad')
    with open(bad.path/bad.files[1], 'r+b') as f: f.truncate(f.seek(0, 2) - 40)
    with pytest.raises(EOFError, match='c2.npy'): _ids(StreamDataLoader(bad, bs=64, shuffle=True, piece_rows=100))

def test_seed_and_get_preds_order(chunks):
    "The piece order follows `seed` (and torch's generator for the order in a block); an unshuffled epoch is in order."
    dl = StreamDataLoader(chunks, bs=128, shuffle=True, window=3, piece_rows=150, seed=3)
    torch.manual_seed(0); a = _ids(dl)[0]
    dl.epoch = 0; torch.manual_seed(0); b = _ids(dl)[0]
    assert torch.equal(a, b)
    v = dl.new(shuffle=False, drop_last=False)
    assert type(v) is StreamDataLoader and v.window == 3 and torch.equal(v.get_idxs(), torch.arange(N))
    assert torch.equal(_ids(v)[0], torch.arange(N, dtype=torch.int32))
    with pytest.raises(NotImplementedError): dl.get_idxs()

def test_rank_slices():
    "Any pieces, any world size: every rank the same number of rows, together every row (at most ws-1 twice)."
    rng = np.random.default_rng(0)
    for _ in range(50):
        sizes = rng.integers(1, 60, rng.integers(1, 12))
        pieces = [(i, 0, int(s)) for i,s in enumerate(sizes)]
        n = int(sizes.sum())
        starts = np.concatenate([[0], np.cumsum(sizes)])
        for ws in (1, 2, 3, 5):
            shares = [_rank_slices(pieces, r, ws) for r in range(ws)]
            rows = [np.concatenate([np.arange(starts[i] + a, starts[i] + b) for i,a,b in s]) for s in shares]
            assert len({len(r) for r in rows}) == 1 and len(rows[0]) == -(-n // ws)
            allr = np.concatenate(rows)
            assert set(allr) == set(range(n)) and len(allr) - n < ws

_DDP = '''
import json, os, sys, torch, torch.distributed as dist
from fastai_gpu_tabular.rows.chunks import PackedChunks
from fastai_gpu_tabular.rows.stream import StreamDataLoader
dist.init_process_group('gloo', init_method=f"file://{sys.argv[3]}", rank=int(sys.argv[1]), world_size=2)
dl = StreamDataLoader(PackedChunks(sys.argv[2]), bs=100, shuffle=True, window=3, piece_rows=250, drop_last=True)
res = []
for _ in range(2):
    ids = [b[0][:, 0].tolist() for b in dl]
    res.append(dict(n=len(ids), expected=len(dl), ids=sum(ids, [])))
dist.barrier()
print(json.dumps(res))
'''

def test_ranks_get_equal_batches(chunks, tmp_path):
    """Two gloo processes on one store (a file: a port picked beforehand could be taken by another run before rank 0
    binds it): the same number of batches each epoch (len(dl) too), disjoint rows."""
    (tmp_path/'ddp.py').write_text(_DDP)
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    args = lambda r: [sys.executable, str(tmp_path/'ddp.py'), str(r), str(chunks.path), str(tmp_path/'store')]
    procs = [subprocess.Popen(args(r), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    r0, r1 = (json.loads(o[0].strip().splitlines()[-1]) for o in outs)
    for e0, e1 in zip(r0, r1):
        assert e0['n'] == e1['n'] == e0['expected'] == (-(-N // 2)) // 100
        # each rank its own share: N is odd, so the last rank's share wraps round to one row of the first's
        assert len(set(e0['ids']) & set(e1['ids'])) <= 1 and len(set(e0['ids'] + e1['ids'])) >= N - 2 * 100
    assert r0[0]['ids'] != r0[1]['ids']

def test_default_device(chunks):
    """On fastai's default device (the lazy one under FGT_FAKE_DEVICE=lazy, where the ring stays on the host and each
    batch moves): every batch there, each row once."""
    from fastai.torch_core import default_device
    dev = default_device()
    dl = StreamDataLoader(chunks, bs=256, shuffle=True, window=3, piece_rows=300, device=dev, drop_last=False)
    batches = [b for b in dl]
    assert all(t.device.type == dev.type for b in batches for t in b)
    ids = torch.cat([b[0][:, 0].cpu() for b in batches])
    assert torch.equal(ids.sort().values, torch.arange(N, dtype=torch.int32))

@pytest.mark.cuda
def test_cuda_stream(chunks):
    "Pinned buffers, a side stream: rows arrive on the GPU, each once, whole."
    dl = StreamDataLoader(chunks, bs=256, shuffle=True, window=4, piece_rows=300, device='cuda', drop_last=False)
    ids, _ = _ids(dl)
    assert ids.is_cuda and torch.equal(ids.sort().values.cpu(), torch.arange(N, dtype=torch.int32))

_OUT_OF_CORE = '''import json, os, sys, time
from pathlib import Path
import numpy as np, pandas as pd, pyarrow as pa, pyarrow.parquet as pq
data, budget, n, parts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def write(path, n, parts, seed):
    "Parquet files written a part at a time (the whole frame is never in memory); the frame's pandas size."
    os.makedirs(path, exist_ok=True)
    rng, size, m = np.random.default_rng(seed), 0, n // parts
    for p in range(parts):
        df = pd.DataFrame({f'c{j}': np.char.mod('v%06d', rng.integers(0, 50 * (j + 1), m)).astype(object)
                           for j in range(8)})
        for j in range(4):
            x = rng.lognormal(0, 1, m).astype(np.float32)
            x[rng.random(m) < 0.2] = np.nan
            df[f'x{j}'] = x
        df['rid'] = np.arange(p * m, (p + 1) * m, dtype=np.float32)   # the row's id, to check each is seen once
        df['y'], df['is_valid'] = rng.integers(0, 2, m).astype(np.int8), rng.random(m) < 0.1
        size += int(df.memory_usage(deep=True).sum())
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), f'{path}/part{p:03d}.parquet')
    return size

frame = write(data + '/big', n, parts, 0)
write(data + '/small', 20_000, 4, 1)
import dask, dask.dataframe as dd, torch
from fastai.tabular.all import Categorify, FillMissing, Normalize, CategoryBlock, Callback, tabular_learner
from fastai_gpu_tabular.all import TabularGPU
from fastai_gpu_tabular.bench.machine import RSSMeter
from fastai_gpu_tabular.dask import tabular as dask_tabular
torch.set_num_threads(1)
# the set-up holds the training rows' conts for the statistics up to a fixed size (`_TRAIN_CONTS_BYTES`, 512 MB),
# whatever the budget: here the bound is on what grows with the data, so each statistic passes over the partitions
dask_tabular._TRAIN_CONTS_BYTES = 0

class Seen(Callback):
    "The `rid` column of every training batch."
    def before_fit(self): self.ids = []
    def before_batch(self):
        if self.training: self.ids.append(self.xb[1][:, -1].clone())

def run(src, loader_budget, chunk_dir):
    with dask.config.set(scheduler='sync', **{'dataframe.convert-string': False}):
        to = TabularGPU(dd.read_parquet(src), procs=[Categorify, FillMissing, Normalize],
                        cat_names=[f'c{j}' for j in range(8)], cont_names=[f'x{j}' for j in range(4)] + ['rid'],
                        y_names='y', y_block=CategoryBlock(), splits='is_valid', chunk_dir=chunk_dir)
    dls = to.dataloaders(bs=2048, memory_budget=loader_budget, drop_last=False)
    learn = tabular_learner(dls, layers=[16], emb_szs={f'c{j}': 4 for j in range(8)}, cbs=Seen())
    learn.fit(1)
    ids = torch.round(torch.cat(learn.seen.ids) * to.stds['rid'] + to.means['rid']).long()
    return to, dls, ids, float(learn.recorder.losses[-1])

run(data + '/small', budget, data + '/small_chunks')   # it imports and allocates what any run does: not the data's
# each run's peak over its start: Linux's high-water mark, reset to the current RSS (getrusage's would keep this
# process's peak so far, and its parent's: a child started by vfork inherits the parent's high-water mark through exec)
meter = RSSMeter()
parts = sorted(str(f) for f in Path(data, 'big').glob('*.parquet'))
runs = {}
for k,files in (('third', parts[:len(parts) // 3]), ('all', parts)):   # the first third of the rows, then all
    meter.reset()
    base, t0 = meter.now(), time.time()
    to, dls, ids, loss = run(files, budget, f'{data}/chunks_{k}')
    peak = (meter.peak() - base) * 2**20
    runs[k] = dict(peak=peak, packed=sum(c.nbytes for c in to.chunks), s=time.time() - t0)
ids = ids.cpu().numpy()   # the batches' rows: on the loaders' device
want = pd.read_parquet(data + '/big', columns=['rid', 'is_valid']).query('~is_valid').rid.to_numpy().astype(np.int64)
print(json.dumps(dict(runs=runs, reset=meter.method == 'VmHWM', same=bool(np.array_equal(np.sort(ids), np.sort(want))),
                      frame=frame, stream=type(dls.train).__name__, distinct=len(np.unique(ids)), seen=len(ids),
                      train=len(to.train), loss=loss)))
'''

@pytest.mark.slow
def test_out_of_core(tmp_path):
    """Build and train on data bigger than the loader's memory budget (the frame in pandas and the packed rows are both
    over it), and one epoch sees every training row once; the process's peak RSS does not grow with the data: built
    and trained on all the rows, it rises over its start by less than the packed rows added to a run on a third of them
    (holding the rows would add all of that, and the frame's more). Each run's peak is over its own start, after a
    small run of the same steps, which imports and allocates what any run does. glibc's malloc would keep freed blocks
    (its mmap threshold rises with them), Arrow its pool: both are told to give memory back, so that RSS measures what
    is in use."""
    pytest.importorskip('dask', reason='the out-of-core build runs on Dask (the `dask` extra)')
    if os.environ.get('FGT_FAKE_DEVICE'):
        pytest.skip("FGT_FAKE_DEVICE: the stand-in device's tensors (the stream's window, each batch) and its compiled "
                    "graphs are host memory, as a GPU's are not: the memory bound cannot be measured (streaming to "
                    "the stand-in: test_default_device, tests/dask/test_dask_tabular.py)")
    budget, n, parts = 5 * 2**20, 300_000, 30   # 10k-row partitions: the third and the whole differ in their number
    (tmp_path/'ooc.py').write_text(_OUT_OF_CORE)
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'MALLOC_ARENA_MAX': '2', 'MALLOC_MMAP_THRESHOLD_': '65536',
           'ARROW_DEFAULT_MEMORY_POOL': 'system'}
    p = subprocess.run([sys.executable, str(tmp_path/'ooc.py'), str(tmp_path), str(budget), str(n), str(parts)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    third,whole = r['runs']['third'],r['runs']['all']
    # the frame in pandas: 160 MB of object strings on pandas 2, 43 MB of Arrow strings on pandas 3; packed: 24 MB
    assert r['stream'] == 'StreamDataLoader' and r['frame'] > whole['packed'] > 2 * third['packed'] > budget
    assert r['seen'] == r['distinct'] == r['train'] and r['same'] and np.isfinite(r['loss'])
    if not r['reset']: pytest.skip("this kernel cannot reset the peak RSS (/proc/self/clear_refs): the memory bound "
                                   "is not measured; every row was seen once")
    assert whole['peak'] - third['peak'] < whole['packed'] - third['packed'], r['runs']

@pytest.fixture
def two_threads():
    """torch on 2 threads while the test runs (then as before): not the suites' `--threads 1`, so that a suite that
    leaves its own setting behind (for every later test of this worker) is seen."""
    n = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(n)

def test_stream_suite_small(tmp_path, two_threads):
    """`--suite stream` at a small size: both loaders timed at each batch size, their ratio, and the row-order
    statistics of the block shuffle next to a full permutation's (no timing asserted); torch's threads given back."""
    from fastai_gpu_tabular.bench import main
    res = main(['--suite', 'stream', '--stream-rows', '6000', '--stream-part-rows', '1000', '--stream-window', '4',
                '--stream-rounds', '1', '--bs', '256,1024', '--epochs-loader', '1', '--threads', '1',
                '--out', str(tmp_path/'s.json')])['stream']
    assert torch.get_num_threads() == 2 and res['torch_threads'] == 1
    assert res['rows'] == 4800 and res['files'] == 5 and set(res['by_bs']) == {'256', '1024'}
    for d in res['by_bs'].values():
        assert d['ratio'] == round(d['stream']['rows_per_s'] / d['resident']['rows_per_s'], 3) > 0
        assert all(d[k]['ns_per_row'] > 0 and d[k]['cpu_ns_per_row'] > 0 for k in ('stream', 'resident'))
    o = res['order']
    assert o['bs'] == 1024 and o['full permutation']['neighbour_gap'] > o['stream']['neighbour_gap'] > 0
    assert json.loads((tmp_path/'s.json').read_text())['stream']['target']['value'] is None   # bs 32,768 not run

@pytest.mark.slow
def test_ooc_suite_small(tmp_path, two_threads):
    """`--suite ooc` on a few thousand rows: Parquet parts through TabularGPU over Dask into chunks, a streamed epoch
    that served every training row once, a short training, the pandas frame's arithmetic, stock fastai's estimate,
    the stream against the resident loader on a slice, and the process tree's peak RSS (no timing asserted); torch's
    threads given back."""
    pytest.importorskip('dask', reason='the ooc suite runs TabularGPU over Dask (the `dask` extra)')
    from fastai_gpu_tabular.bench import main
    res = main(['--suite', 'ooc', '--ooc-rows', '8000', '--ooc-part-rows', '2000', '--ooc-slice-rows', '2000',
                '--ooc-stock-rows', '2000', '--ooc-train-batches', '2', '--ooc-bs', '512', '--ooc-memory-budget',
                '64KB', '--ooc-dir', str(tmp_path), '--threads', '1', '--out', str(tmp_path/'o.json')])['ooc']
    assert torch.get_num_threads() == 2
    assert res['rows'] == 8000 and res['parts'] == 4 and res['parquet_bytes'] > 0
    f = res['frame']
    assert f['bytes'] == int(f['row_bytes'] * 8000) and f['bytes_object'] >= f['bytes']   # Arrow strings are smaller
    st, o = res['stock'], res['ours']
    assert st['status'] == 'ok' and st['rows'] == 2000 and st['estimate_mb'] > st['peak_rss_mb'] > 0
    assert o['status'] == 'ok', o.get('reason')
    assert o['loader'] == 'StreamDataLoader' and o['rows'] == 8000 and o['n_train'] + o['n_valid'] == 8000
    assert o['served_once'] and o['served_rows'] == o['chunk_rows'] == o['n_train']
    assert o['epoch_rows'] == o['n_train'] - o['n_train'] % 512   # the training loader drops the last partial batch
    assert o['train_batches'] == 2 and np.isfinite(o['train_loss']) and o['chunk_bytes'] >= o['packed_bytes']
    assert o['peak_tree_rss_mb'] >= o['peak_rss_mb'] * 0.9 > 0   # sampled, so it can miss the last bit of the peak
    assert res['slice']['rows'] <= 2000 and res['slice']['ratio'] > 0
    assert not (tmp_path/'fgt_ooc'/'chunks_8000_s0').exists()   # removed without --ooc-keep
