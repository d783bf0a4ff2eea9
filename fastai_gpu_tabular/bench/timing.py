"Timing a loader: shuffled epochs (rows/s, capped), bare gathers (the memory system's floor), gather vs copy bandwidth."
from __future__ import annotations

import time

from .machine import MB, sync

__all__ = ['fastest', 'loader_epoch', 'time_loader', 'bare_epoch', 'gather_bandwidth', 'median_ms']

def fastest(f, repeat:int=1) -> tuple:
    "The fastest of `repeat` runs of `f()`, in seconds (the least disturbed by other processes), and the last result."
    best,res = None, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = f()
        s = time.perf_counter() - t0
        best = s if best is None else min(best, s)
    return best, res

def _touch(b):
    "Read each yielded tensor (its last row), as a training step would, without forcing a device sync."
    for t in b: t[-1].sum()

def loader_epoch(dl, deadline:float, device) -> tuple:
    "One pass over `dl`, stopping past `deadline` (a `perf_counter` time): (s, rows, batches, first_batch_s, complete)."
    t0 = time.perf_counter()
    rows = nb = 0
    first = None
    for b in dl:
        _touch(b)
        rows += len(b[0])
        nb += 1
        if first is None:
            sync(device)
            first = time.perf_counter() - t0
        if time.perf_counter() > deadline: break
    sync(device)
    # `complete` from the count, not the loop: the deadline can fall on the last batch
    return time.perf_counter() - t0, rows, nb, first or 0., nb == len(dl)

def bare_epoch(tensors, bs, device='cpu') -> tuple:
    "One epoch of bare gathers (a fresh permutation, an `index_select` a batch): the memory system's cost, no loader."
    import torch
    n = tensors[0].shape[0]
    t0 = time.perf_counter()
    p = torch.randperm(n, device=tensors[0].device)
    for i in range(0, n - bs + 1, bs):
        for t in tensors: t.index_select(0, p[i:i + bs])
    sync(device)
    return time.perf_counter() - t0, n // bs * bs

def time_loader(dl, epochs=2, warmup=1, max_s=None, device='cpu', stat='best', bare=None) -> dict:
    """Rows/s of shuffled epochs of `dl` after `warmup` epochs (allocator and page-cache warm-up): the `best` complete
    epoch (least disturbed by other processes) or their `mean`. Past `max_s` seconds it stops; with no complete epoch,
    rows/s comes from the epoch extrapolated to its end. `bare()` -> (seconds, rows), if given, runs after each epoch,
    so that the loader's own cost (loader - bare) is measured under the same conditions."""
    inf = float('inf') if max_s is None else max_s
    t0 = time.perf_counter()
    for _ in range(warmup):
        if not loader_epoch(dl, t0 + inf / 2, device)[-1]: break   # a partial warm-up is enough for per-batch costs
    t0,runs,bares = time.perf_counter(),[],[]
    for _ in range(epochs):
        runs.append(loader_epoch(dl, t0 + inf, device))
        if bare is not None: bares.append(bare())
        if not runs[-1][-1]: break
    full = [r for r in runs if r[-1]]
    res = {'epochs': len(full), 'batches_per_epoch': len(dl), 'capped': len(full) < epochs,
           'rows': sum(r[1] for r in runs), 'seconds': round(sum(r[0] for r in runs), 4),
           'first_batch_s': round(runs[0][3], 4)}
    if full:
        res['epoch_rows_per_s'] = [round(r[1] / r[0], 1) for r in full]
        res['mean_rows_per_s'] = sum(r[1] for r in full) / sum(r[0] for r in full)
        res['rows_per_s'] = max(res['epoch_rows_per_s']) if stat == 'best' else res['mean_rows_per_s']
        res['method'] = f'full_epochs_{stat}'
    else:
        s,rows,nb,first,_ = runs[0]
        per_batch = (s - first) / (nb - 1) if nb > 1 else s
        est = first + per_batch * (len(dl) - 1)   # the epoch's start (index list, shuffle) counted once
        res['rows_per_s'] = rows / nb * len(dl) / est
        res['method'] = 'extrapolated'
        res['estimated_epoch_s'] = round(est, 3)
    res['rows_per_s'] = round(res['rows_per_s'], 1)
    if bares:
        ns = [s / r * 1e9 for s,r in bares]
        res['bare_ns_per_row'] = round(min(ns) if stat == 'best' else sum(ns) / len(ns), 2)
        res['overhead_ns_per_row'] = round(1e9 / res['rows_per_s'] - res['bare_ns_per_row'], 2)
        # the loader's rows/s over the bare gathers': 1 is the memory system's floor, reached
        res['loader_vs_bare'] = round(res['bare_ns_per_row'] * res['rows_per_s'] / 1e9, 3)
    return res

def gather_bandwidth(tensors, bs, floor_mb=256) -> dict:
    """Bytes/s of the batch gather (`index_select` of every packed tensor, over an epoch's distinct batches) against
    `copy_` of same-size buffers cycled through >= `floor_mb` MB: neither is served from a cache, as a loader isn't."""
    import torch
    dev = tensors[0].device
    n = tensors[0].shape[0]
    bs = min(bs, n)
    perm = torch.randperm(n, device=dev)
    idxs = [perm[i:i + bs] for i in range(0, n - bs + 1, bs)]
    nbytes = sum(bs * t[0].numel() * t.element_size() for t in tensors)
    k = max(2, -(-floor_mb * MB // nbytes))
    src = torch.ones(k, nbytes, dtype=torch.uint8, device=dev)   # written: untouched pages would all read one zero page
    dst = torch.empty_like(src)
    def _time(f, count):
        for j in range(count): f(j)   # a first pass faults the pages in
        sync(dev)
        t0,j = time.perf_counter(),0
        while j < count or time.perf_counter() - t0 < 0.2:   # small batches: enough calls for a stable mean
            f(j)
            j += 1
        sync(dev)
        return (time.perf_counter() - t0) / j
    tg = _time(lambda j: [t.index_select(0, idxs[j % len(idxs)]) for t in tensors], len(idxs))
    tc = _time(lambda j: dst[j % k].copy_(src[(j + 1) % k]), k)
    return {'bs': bs, 'bytes_per_batch': nbytes, 'gather_s': tg, 'copy_s': tc, 'gather_gb_s': nbytes / tg / 1e9,
            'copy_gb_s': nbytes / tc / 1e9, 'fraction_of_copy': tc / tg, 'gather_ns_per_row': tg / bs * 1e9}

def median_ms(ts): return round(1e3 * sorted(ts)[len(ts) // 2], 2)
