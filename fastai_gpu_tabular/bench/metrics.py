"The `metrics` suite: validation metric time, this package's device metrics against fastai's RocAucBinary."
from __future__ import annotations

import time

from .machine import sync
from .report import fmt, table

__all__ = ['metric_suite', 'run', 'add_args', 'format_table']

def _learn(pred, y, x_cat, dl):
    "What fastai's Recorder hands a metric after a validation batch (the model's cost is the same for every metric)."
    from types import SimpleNamespace
    from fastai.losses import CrossEntropyLossFlat
    from fastai.torch_core import to_detach
    return SimpleNamespace(pred=pred, yb=(y,), y=y, xb=(x_cat, None), dl=dl, loss_func=CrossEntropyLossFlat(),
                           to_detach=to_detach)

def _time(metric, data, bs, device) -> dict:
    "One validation epoch of `metric`: accumulate every batch, then read `value` (where the work happens, or the sync)."
    from types import SimpleNamespace
    x,y,g = data
    dl = SimpleNamespace(dataset=SimpleNamespace(cat_names=['user']))
    metric.reset()
    sync(device)
    t0,c0 = time.perf_counter(),time.process_time()
    for i in range(0, len(y), bs): metric.accumulate(_learn(x[i:i+bs], y[i:i+bs], g[i:i+bs], dl))
    sync(device)
    t1,c1 = time.perf_counter(),time.process_time()
    v = metric.value
    t2,c2 = time.perf_counter(),time.process_time()
    return {'accumulate_s': t1 - t0, 'value_s': t2 - t1, 'total_s': t2 - t0, 'value': float(v),
            'accumulate_cpu_s': c1 - c0, 'value_cpu_s': c2 - c1, 'total_cpu_s': c2 - c0}

def metric_suite(rows=(1_000_000, 10_000_000), bs=65536, repeat=2, device='cpu', seed=0) -> dict:
    """Seconds of one validation epoch of each metric (fastest of `repeat`; on a CPU, the process's CPU seconds, which
    other jobs on a shared machine disturb less than the wall clock) on `rows` rows of 2-class logits, targets and
    user ids (20 rows a user on average, power-law), in batches of `bs`, on `device`: fastai's `RocAucBinary`
    (`AccumMetric`: a host copy per batch, sklearn at the end) against this package's `AUC`, `LogLoss`, `MRR` and
    `NDCG(10)` (kept on the device, computed once)."""
    import torch
    from fastai.metrics import RocAucBinary

    from ..train.metrics import AUC, MRR, NDCG, LogLoss
    res = {}
    for n in rows:
        g = torch.Generator().manual_seed(seed)
        y = torch.randint(0, 2, (n, 1), generator=g)
        x = torch.randn(n, 2, generator=g) + torch.cat([-y, y], 1) * 0.4   # an AUC of ~0.66
        users = (torch.rand(n, 1, generator=g) ** 2 * (n // 20)).long() + 1   # codes from 1: 0 is #na#
        data = tuple(t.to(device) for t in (x, y, users))
        mets = {'RocAucBinary (fastai)': RocAucBinary, 'AUC': AUC, 'LogLoss': LogLoss,
                'MRR': lambda: MRR(group='user'), 'NDCG@10': lambda: NDCG(10, group='user')}
        r,key = {},'total_cpu_s' if str(device) == 'cpu' else 'total_s'
        for name,f in mets.items():
            runs = [_time(f(), data, bs, device) for _ in range(repeat)]
            r[name] = min(runs, key=lambda d: d[key])
        r['AUC']['speedup_vs_fastai'] = r['RocAucBinary (fastai)'][key] / r['AUC'][key]
        res[n] = r
        del data, x, y, users
    return {'bs': bs, 'repeat': repeat, 'device': str(device), 'rows': res}

def add_args(group):
    a = group.add_argument
    a('--metric-rows', type=lambda s: [int(float(x)) for x in s.split(',') if x], default=[1_000_000, 10_000_000],
      help='validation rows, comma separated')
    a('--metric-bs', type=int, default=65536, help='validation batch size')
    a('--metric-repeat', type=int, default=2, help='epochs per metric and size; the fastest counts')

def run(opts) -> dict:
    return metric_suite(opts.metric_rows, opts.metric_bs, opts.metric_repeat, opts.device, opts.seed)

def format_table(res) -> str:
    "The suite's results as a table."
    cpu = res['device'] == 'cpu'
    sfx,out = '_cpu_s' if cpu else '_s',[]
    for n,r in res['rows'].items():
        base = r['RocAucBinary (fastai)']['total' + sfx]
        for name,v in r.items():
            out.append([f'{int(n):,}', name, fmt(v['accumulate' + sfx]), fmt(v['value' + sfx]), fmt(v['total' + sfx]),
                        fmt(v['total_s']), fmt(base / v['total' + sfx], 'x'), f"{v['value']:.6f}"])
    what = 'CPU seconds of the process' if cpu else 'seconds'
    return (f"validation metric time ({what}), bs {res['bs']:,}, {res['device']}, fastest of {res['repeat']}\n"
            + table(['rows', 'metric', 'accumulate', 'value()', 'epoch', 'epoch wall s', 'vs RocAucBinary', 'result'],
                    out))
