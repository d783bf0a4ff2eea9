"The `multi_hot` suite: a multi-hot column as a padded block (this package's layout) or as values+offsets."
from __future__ import annotations

import time

from .machine import MB, sync
from .report import table
from .timing import median_ms

__all__ = ['multi_hot_suite', 'add_args', 'run', 'format_table']

def _list_lengths(kind, n, rng):
    if kind == 'genres': return rng.choice([1, 2, 3, 4, 5, 6], n, p=[.32, .36, .2, .08, .03, .01])   # MovieLens-like
    return rng.zipf(1.8, n).clip(max=100)   # a long tail: tags, items in a session

def multi_hot_suite(n=400_000, bs=32768, vocab=1000, dim=16, reps=3, device='cpu', seed=0) -> dict:
    """A multi-hot column as a padded block (this package's layout) or as values+offsets: per-batch gather ms, embedding
    bag forward+backward ms (padded: the model's `bag_lookup`; ragged: `embedding_bag` with offsets), and memory."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from ..backend import pad_bags
    from ..train.model import bag_lookup
    res = {}
    for kind in ('genres', 'long_tail'):
        lens = torch.as_tensor(_list_lengths(kind, n, np.random.default_rng(seed)), device=device)
        vals = torch.randint(0, vocab, (int(lens.sum()),), dtype=torch.int32, device=device)
        starts = torch.cumsum(lens, 0) - lens
        padded = pad_bags(vals, lens, int(lens.max()))
        w = torch.randn(vocab, dim, device=device, requires_grad=True)
        def ragged(idx, lens=lens, starts=starts, vals=vals):   # bound now: the loop rebinds them
            l = lens[idx]
            off = torch.cumsum(l, 0) - l
            return vals[torch.repeat_interleave(starts[idx] - off, l) + torch.arange(int(l.sum()), device=device)], off
        layouts = {'padded': (lambda idx, padded=padded: padded.index_select(0, idx), lambda c, w=w: bag_lookup(c, w)),
                   'values_offsets': (ragged, lambda vo, w=w: F.embedding_bag(vo[0], w, vo[1], mode='mean'))}
        r = {'mean_len': round(lens.float().mean().item(), 2), 'max_len': int(lens.max())}
        for name,(gather,bag) in layouts.items():
            tg,tb = [], []
            for _ in range(reps):
                perm = torch.randperm(n, device=device)
                for i in range(0, n - bs + 1, bs):
                    t0 = time.perf_counter(); b = gather(perm[i:i+bs]); sync(device)
                    t1 = time.perf_counter(); bag(b).sum().backward(); sync(device)
                    tg.append(t1 - t0); tb.append(time.perf_counter() - t1)
            mem = padded.numel() * 4 if name == 'padded' else (vals.numel() + 2 * n) * 4
            r[name] = dict(gather_ms=median_ms(tg), bag_fwd_bwd_ms=median_ms(tb), memory_mb=round(mem / MB, 1))
        res[kind] = r
    return res

def add_args(group):
    group.add_argument('--mh-rows', type=int, default=400_000, help='rows of each list column')
    group.add_argument('--mh-bs', type=int, default=32768, help='batch size')
    group.add_argument('--mh-reps', type=int, default=3, help='timed epochs')

def run(opts) -> dict:
    return multi_hot_suite(n=opts.mh_rows, bs=opts.mh_bs, reps=opts.mh_reps, device=opts.device, seed=opts.seed)

def format_table(res) -> str:
    "The suite's results as a table."
    rows = [[kind, f"{r['mean_len']} / {r['max_len']}", name, r[name]['gather_ms'], r[name]['bag_fwd_bwd_ms'],
             r[name]['memory_mb']] for kind,r in res.items() for name in ('padded', 'values_offsets')]
    return table(['lists', 'mean / max length', 'layout', 'gather ms', 'bag fwd+bwd ms', 'memory MB'], rows)
