"""The `ddp` suite: a loader epoch per rank under torchrun, `DistributedBatchDL` against fastai's `DistributedDL`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .cli import int_list, name_list
from .report import table
from .timing import loader_epoch

__all__ = ['ddp_suite', 'rank_epochs', 'rank_results', 'run', 'format_table', 'add_args']

CONTENDERS = {'ours': "DistributedBatchDL (distrib_ctx's wrapper of a BatchDataLoader, this package)",
              'fastai': "fastai's DistributedDL on the same BatchDataLoader, patched to run (see `_fastai_ddl`)",
              'single': 'the BatchDataLoader alone: one process, every row'}

def _criteo_rows(n, device, seed=0):
    "`(rows, layout)` as `TabularGPU.packed_rows` holds Criteo: an int64 label, 26 cats, 13 conts, 1 pad column."
    import torch

    from ..rows.pack import Layout
    layout,width = Layout.plan(26, 13, 1, torch.int64)
    g = torch.Generator(device=device).manual_seed(seed)   # the same rows on every rank
    rows = torch.randint(0, 1000, (n, width), dtype=torch.int32, device=device, generator=g)
    (c0,c1,_),(y0,y1,_) = layout.conts,layout.ys
    rows[:, c0:c1] = torch.randn(n, c1 - c0, device=device, generator=g).view(torch.int32)
    rows[:, y0:y1] = torch.randint(0, 2, (n, 1), device=device, generator=g).view(torch.int32)
    return rows, layout

class _Packed:
    "A dataset that is only packed rows (all `BatchDataLoader` reads of a `TabularGPU`): no frame to build."
    def __init__(self, rows, layout): self.rows,self.layout = rows,layout
    def __len__(self): return len(self.rows)
    def __getitem__(self, i): raise NotImplementedError   # indexed, so fastai lets it shuffle; batches come from rows
    def packed_rows(self, device=None): return self.rows, self.layout

def _fastai_ddl():
    """fastai's `DistributedDL`, patched as little as makes it run: `_broadcast` keeps its tensor on the CPU under gloo
    (fastai calls `.cuda()`), and the single row numbers its `sample` yields reach `BatchDataLoader.create_batches`
    (which takes whole batches) as index tensors, chunked as fastai's `DataLoader` chunks them (`drop_last` per rank).
    Its epoch order is `get_idxs` as a Python list, broadcast from rank 0."""
    import torch
    import torch.distributed as dist
    from fastai.distributed import DistributedDL
    from fastcore.basics import chunked
    class FastaiDDL(DistributedDL):
        def _broadcast(self, t, rank):
            t = torch.LongTensor(t)
            if dist.get_backend() == 'nccl': t = t.cuda()
            dist.broadcast(t, rank)
            return t.cpu().tolist()
        def create_batches(self, samps):
            dev = self.dl.rows[0].device
            idxs = (torch.tensor(c, device=dev) for c in chunked(samps, self.bs, drop_last=self.drop_last))
            return self.dl.create_batches(idxs)
    return FastaiDDL

def _worker(args, out):
    "One rank started by `ddp_suite`: its process group, `rank_epochs`, and the group destroyed."
    import torch
    import torch.distributed as dist
    cuda = json.loads(args)['device'] == 'cuda'
    if cuda: torch.cuda.set_device(int(os.environ['LOCAL_RANK']))
    dist.init_process_group('nccl' if cuda else 'gloo')
    rank_epochs(args, out)
    dist.destroy_process_group()

def rank_epochs(args, out):
    """One rank of a process group already made (`args`: `ddp_suite`'s, as JSON): each contender's warm-up epochs in
    turn (its peak RSS), then the timed epochs in rounds, one epoch of each contender a round, so that the shared
    machine's drift touches them alike; what it measured goes to `out/rank{rank}.json`."""
    import torch
    import torch.distributed as dist
    from fastai.distributed import DistributedDL
    from fastai.torch_core import rank_distrib

    from ..rows.loader import BatchDataLoader
    from ..train.distributed import DistributedBatchDL
    from .machine import RSSMeter
    a = json.loads(args)
    torch.set_num_threads(a['threads'])
    device = torch.device('cuda', torch.cuda.current_device()) if a['device'] == 'cuda' else torch.device('cpu')
    rss = RSSMeter()
    rows,layout = _criteo_rows(a['rows'], device)
    dl = BatchDataLoader(_Packed(rows, layout), bs=a['bs'], shuffle=True, drop_last=True, after_batch=[], device=device)
    make = {'ours': lambda: DistributedDL(dl), 'fastai': lambda: _fastai_ddl()(dl), 'single': lambda: dl}
    loaders,res = {c: make[c]() for c in a['contenders']},{}
    assert 'ours' not in loaders or type(loaders['ours']) is DistributedBatchDL   # what distrib_ctx would make
    for c,d in loaders.items():
        rss.reset()
        for _ in range(a['warmup']): loader_epoch(d, float('inf'), device)
        res[c] = dict(epoch_s=[], len=len(d), peak_rss_mb=round(rss.peak(), 1))
    for e in range(a['epochs']):
        for c,d in loaders.items():
            spent = torch.tensor([sum(res[c]['epoch_s'])], device=device)
            dist.all_reduce(spent, op=dist.ReduceOp.MAX)   # every rank skips alike, and they start together
            if e and spent.item() > a['max_s']: continue
            t,n,nb = loader_epoch(d, float('inf'), device)[:3]
            res[c]['epoch_s'].append(round(t, 4))
            res[c].update(batches=nb, rows=n)
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out)/f'rank{rank_distrib()}.json').write_text(json.dumps(res))

def rank_results(out, nproc, contenders) -> dict:
    """Per contender, from what `nproc` ranks wrote in `out`: each rank's best timed epoch and the slowest rank's (a
    step waits for it), batches out against `len()`, peak RSS in its warm-up epoch; and fastai's time over ours."""
    ranks = [json.loads((Path(out)/f'rank{r}.json').read_text()) for r in range(nproc)]
    r = {}
    for c in contenders:
        per = [min(x[c]['epoch_s']) for x in ranks]
        r[c] = dict(epoch_s=max(per), rank_epoch_s=per, timed_epochs=len(ranks[0][c]['epoch_s']),
                    batches=ranks[0][c]['batches'], len=ranks[0][c]['len'], rows_per_rank=ranks[0][c]['rows'],
                    peak_rss_mb=max(x[c]['peak_rss_mb'] for x in ranks))
    if {'ours', 'fastai'} <= set(contenders):
        r['fastai_over_ours'] = round(r['fastai']['epoch_s'] / r['ours']['epoch_s'], 1)
    return r

def ddp_suite(rows=(1_000_000, 10_000_000), bs=65536, nproc=2, device='cpu', contenders=tuple(CONTENDERS), epochs=2,
              warmup=1, max_s=120., threads=1, timeout=3600.) -> dict:
    """Per rank, a shuffled `drop_last` loader epoch of Criteo-like packed rows (168 B a row) for each row count, in
    `nproc` processes started by torchrun (gloo on 127.0.0.1; NCCL with `device='cuda'`, one GPU a rank): this
    package's wrapper, fastai's `DistributedDL` path and the single-process loader, timed in rounds (`rank_epochs`). Per
    contender: each rank's best timed epoch and the slowest rank's (a step waits for it), batches out against `len()`,
    peak RSS in its warm-up epoch (only the first contender's is clean: memory freed is not always returned)."""
    bad = [c for c in contenders if c not in CONTENDERS]
    if bad: raise ValueError(f'unknown contender(s) {bad}: pick from {",".join(CONTENDERS)}')
    res = {}
    for n in rows:
        args = json.dumps(dict(rows=n, bs=bs, device=device, contenders=list(contenders), epochs=epochs, warmup=warmup,
                               max_s=max_s, threads=threads))
        cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', str(nproc), '--rdzv-backend', 'c10d',
               '--rdzv-endpoint', '127.0.0.1:0', '-m', __name__, args]
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as out:
            p = subprocess.Popen(cmd + [out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, 'OMP_NUM_THREADS': str(threads)}, start_new_session=True)
            try: _,err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)   # torchrun and its ranks: none left waiting on the others
                raise
            if p.returncode: raise RuntimeError(f'the {nproc}-rank run of {n:,} rows failed:\n{err[-4000:]}')
            res[str(n)] = {'wall_s': round(time.perf_counter() - t0, 1), **rank_results(out, nproc, contenders)}
    return dict(nproc=nproc, bs=bs, device=device, contenders={c: CONTENDERS[c] for c in contenders}, rows=res)

def add_args(group):
    a = group.add_argument
    a('--ddp-rows', type=int_list, default=[1_000_000, 10_000_000], help='row counts, comma separated (default 1M,10M)')
    a('--ddp-bs', type=int, default=65536, help='batch size per rank')
    a('--ddp-nproc', type=int, default=2, help='processes (ranks); with --device cuda at most one per GPU')
    a('--ddp-contenders', type=name_list, default=list(CONTENDERS), help=f'a subset of {",".join(CONTENDERS)}')
    a('--ddp-epochs', type=int, default=2, help='timed epochs per contender (after one warm-up epoch)')
    a('--ddp-max-s', type=float, default=120., help='no more timed epochs of a contender once they took this long')

def run(opts) -> dict:
    return ddp_suite(rows=opts.ddp_rows, bs=opts.ddp_bs, nproc=opts.ddp_nproc, device=opts.device,
                     contenders=opts.ddp_contenders,
                     epochs=opts.ddp_epochs, max_s=opts.ddp_max_s, threads=opts.threads or 1, timeout=opts.timeout)

def format_table(res) -> str:
    "Per row count and contender: the slowest rank's epoch, each rank's, batches out against len(), peak RSS."
    rows = [[f'{int(n):,}', c, v[c]['epoch_s'], ' / '.join(map(str, v[c]['rank_epoch_s'])),
             f"{v[c]['batches']} / {v[c]['len']}", f"{v[c]['rows_per_rank']:,}", v[c]['peak_rss_mb']]
            for n,v in res['rows'].items() for c in res['contenders']]
    ratios = ', '.join(f"{int(n):,} rows {v['fastai_over_ours']}x" for n,v in res['rows'].items()
                       if 'fastai_over_ours' in v)
    head = ['rows', 'loader', 'epoch s (slowest rank)', 'each rank', 'batches / len()', 'rows a rank', 'peak RSS MB']
    foot = f"\n{res['nproc']} ranks, bs {res['bs']:,} a rank" + (f'; fastai/ours: {ratios}' if ratios else '')
    return table(head, rows) + foot

if __name__ == '__main__': _worker(*sys.argv[1:3])
