"""What the ranks of torch.distributed do together, for the loaders, the metrics and DDP training: which rank this is,
where collective tensors live, and all-gathers of row blocks whose lengths differ between ranks."""
from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = []

def rank_and_world() -> tuple[int, int]:
    "`(rank, world_size)` of torch.distributed when it is initialised, else `(0, 1)`."
    if not (dist.is_available() and dist.is_initialized()): return 0, 1
    return dist.get_rank(), dist.get_world_size()

def comm_device() -> torch.device:
    "Where tensors for collectives live: NCCL wants CUDA tensors, gloo takes CPU ones."
    return torch.device('cuda', torch.cuda.current_device()) if dist.get_backend() == 'nccl' else torch.device('cpu')

def all_gather_rows(x:torch.Tensor, sizes:list[int]) -> torch.Tensor:
    """Every rank's `x` (rank r's has `sizes[r]` rows), concatenated in rank order: each padded to the largest for
    `all_gather` (bools as uint8: gloo has no bool)."""
    u = x.to(torch.uint8) if x.dtype == torch.bool else x
    m = max(sizes)
    if len(u) < m: u = torch.cat([u, u.new_zeros((m - len(u), *u.shape[1:]))])
    out = [torch.empty_like(u) for _ in sizes]
    dist.all_gather(out, u.contiguous())
    return torch.cat([o[:s] for o,s in zip(out, sizes)]).to(x.dtype)

def all_gather(*ts:torch.Tensor) -> tuple:
    """Each tensor's rows (the same number in each, on this rank) from every rank, in rank order: one all-gather of
    the lengths, then one per tensor. The tensors themselves outside torch.distributed (or with one process)."""
    ws = rank_and_world()[1]
    if ws < 2: return ts
    n = torch.tensor([len(ts[0])], device=ts[0].device)
    ns = [torch.zeros_like(n) for _ in range(ws)]
    dist.all_gather(ns, n)
    sizes = [int(k) for k in ns]
    return tuple(all_gather_rows(t, sizes) for t in ts)
