"The `embeddings` suite: dense, sparse and fused embedding tables, with a 1M-row table among small ones."
from __future__ import annotations

import time

from .machine import MB, sync
from .report import table
from .timing import median_ms

__all__ = ['embedding_suite', 'add_args', 'run', 'format_table']

def embedding_suite(n_table=1_000_000, dim=32, n_small=8, bs=32768, steps=40, device='cpu', seed=0) -> dict:
    """Dense vs sparse vs fused (vs fused sparse) tables, with a `n_table`-row table among `n_small` small ones, Adam
    for dense parameters: optimizer step ms, optimizer state MB (allocated) and training rows/s (forward, backward,
    step).
    Ids are power-law distributed, as a user table sees them: hot rows recur, most of the tail is never touched."""
    import torch
    from fastai.optimizer import Adam

    from ..train.model import TabularModelGPU
    from ..train.optimizer import sparse_opt
    g = torch.Generator().manual_seed(seed)
    ids = (torch.rand(steps, bs, generator=g) ** 3 * n_table).long().clamp(max=n_table - 1)
    small = torch.randint(0, 1000, (steps, bs, n_small), generator=g)
    x_cont,y = torch.randn(steps, bs, 13, generator=g), torch.randint(0, 2, (steps, bs), generator=g)
    emb,res = [(n_table, dim)] + [(1000, dim)] * n_small, {}
    for config in ('dense', 'sparse', 'fused', 'fused_sparse'):
        torch.manual_seed(seed)
        sparse = {'sparse': (0,), 'fused_sparse': tuple(range(len(emb)))}.get(config, ())
        model = TabularModelGPU(emb, 13, 2, [256, 128], sparse=sparse, fused=config.startswith('fused')).to(device)
        opt = (sparse_opt(Adam) if sparse else Adam)(list(model.parameters()), lr=1e-3)
        t_step,t_all = [], []
        for i in range(steps):
            x_cat = torch.cat([ids[i, :, None], small[i]], 1).to(device)
            t0 = time.perf_counter()
            torch.nn.functional.cross_entropy(model(x_cat, x_cont[i].to(device)), y[i].to(device)).backward()
            sync(device); t1 = time.perf_counter()
            opt.step(); opt.zero_grad()
            sync(device); t2 = time.perf_counter()
            if i >= 5: t_step.append(t2 - t1); t_all.append(t2 - t0)   # after the sparse state's first growth
        state = sum(v.numel() * v.element_size() for st in opt.state.values() for v in st.values()
                    if isinstance(v, torch.Tensor))
        big = opt.state[model.fused.weights[-1] if config.startswith('fused') else model.embeds[0].weight]
        res[config] = dict(step_ms=median_ms(t_step), rows_per_s=round(bs / (sorted(t_all)[len(t_all) // 2])),
                           opt_state_mb=round(state / MB, 1), table_mb=round(n_table * dim * 4 / MB, 1),
                           rows_with_state=big.get('n', n_table + (n_small * 1000 + 1 if config.startswith('fused')
                                                                   else 0)))
    return res

def add_args(group):
    group.add_argument('--emb-rows', type=int, default=1_000_000, help='rows of the big table')
    group.add_argument('--emb-bs', type=int, default=32768, help='batch size')
    group.add_argument('--emb-steps', type=int, default=40, help='training steps (the first 5 are not timed)')

def run(opts) -> dict:
    return embedding_suite(n_table=opts.emb_rows, bs=opts.emb_bs, steps=opts.emb_steps, device=opts.device,
                           seed=opts.seed)

def format_table(res) -> str:
    "The suite's results as a table."
    rows = [[k, v['step_ms'], f"{v['rows_per_s']:,}", v['opt_state_mb'], v['table_mb'], f"{v['rows_with_state']:,}"]
            for k,v in res.items()]
    return table(['tables', 'optimizer step ms', 'train rows/s', 'optimizer state MB', 'big table MB',
                  'big table rows with state'], rows)
