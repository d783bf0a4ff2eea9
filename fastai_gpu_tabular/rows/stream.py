"""Packed rows bigger than memory: `StreamDataLoader` streams `PackedChunks` (chunks.py: the int32 rows of
`TabularGPU.packed_rows` as `.npy` files, one a partition): pieces of chunks in a new random order each epoch, read a
block of pieces ahead by a thread straight into one half of a ring buffer on the device (on a GPU through pinned
buffers, copied on a side stream) while batches are drawn from the other half, each batch one gather."""
from __future__ import annotations

import os
import queue
import threading
import numpy as np
import torch
from fastcore.meta import delegates

from ..collectives import rank_and_world
from .chunks import PackedChunks
from .loader import BatchDataLoader
from .pack import unpack_rows

__all__ = ['StreamDataLoader']

def free_memory(device:torch.device|str, frac:float=0.5) -> int:
    "`frac` of the memory free now on `device` (the GPU's, or the host's RAM for the CPU), in bytes."
    device = torch.device(device)
    if device.type == 'cuda': return int(torch.cuda.mem_get_info(device)[0] * frac)
    try:
        import psutil
        return int(psutil.virtual_memory().available * frac)
    except ImportError: return int(os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') * frac)

def byte_count(b:int|str|None) -> int|None:
    "A byte count from an int or a string such as '2GB' (Dask's `parse_bytes`); None stays None."
    if b is None or isinstance(b, (int, np.integer)): return b
    from dask.utils import parse_bytes  # an optional dependency: imported when a string needs it
    return parse_bytes(b)

def _rank_slices(pieces:list, rank:int, ws:int) -> list:
    """Rank `rank`'s share of the rows of `pieces` end to end: the `rank`-th of `ws` equal runs of `ceil(n/ws)` rows,
    wrapping round to the start for the last ranks (as torch's DistributedSampler pads), so every rank gets as many."""
    n = sum(b - a for _,a,b in pieces)
    per = -(-n // ws)
    lo, hi, res, pos = rank * per, (rank + 1) * per, [], 0
    for _ in range(2):   # the run may wrap round once
        for i,a,b in pieces:
            s, e = max(lo - pos, 0), min(hi - pos, b - a)
            if s < e: res.append((i, a + s, a + e))
            pos += b - a
        if pos >= hi: break
    return res

class _Blocks:
    """A thread reading an epoch's `blocks` (runs of `(file, start, stop)` slices of `chunks`) into the two halves of
    one ring buffer, one half filling while the consumer gathers batches from the other (`release` hands a half back).
    On the CPU each piece is read straight into its place; on a GPU into two pinned host buffers in turn, each copied
    to the ring on the GPU on a side CUDA stream (the consumer's stream waits for a block's copies, and the next copy
    into a half waits for the consumer's last gather from it). Another device gets each batch moved there."""
    def __init__(self, chunks:PackedChunks, blocks:list, device, ring:torch.Tensor|None=None):
        self.chunks, self.blocks, self.device = chunks, blocks, torch.device(device)
        cuda = self.device.type == 'cuda'
        if cuda and self.device.index is None: self.device = torch.device('cuda', torch.cuda.current_device())
        self.cap = max((sum(b - a for _,a,b in blk) for blk in blocks), default=0)   # rows of a half
        # the last epoch's ring where it is big enough: fresh memory costs a page fault every 4 KB on the host
        fits = ring is not None and ring.shape == (len(ring), chunks.width)
        at = self.device if cuda else torch.device('cpu')
        fits = fits and ring.device == at and len(ring) >= 2 * self.cap
        self.ring = ring if fits else torch.empty((2 * self.cap, chunks.width), dtype=torch.int32, device=at)
        self.stream = torch.cuda.Stream(self.device) if cuda else None
        if cuda: self.ring.record_stream(self.stream)   # written there: freed only once those copies are done
        self.full, self.free, self.stop = queue.Queue(), queue.Queue(), threading.Event()
        now = self._queued()   # on CUDA the first copies wait for a kept ring's last gathers too
        for half in range(2): self.free.put((half, now))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _get(self, q):
        "The next item of `q`, or None once closed."
        while not self.stop.is_set():
            try: return q.get(timeout=0.1)
            except queue.Empty: pass

    def _run(self):
        try:
            with self.chunks.open_files() as files: self._read(files)
        except BaseException as e: self.full.put(e)

    def _read(self, files:dict):
        "Each block into a free half of the ring; then None (the end)."
        cuda = self.stream is not None
        if cuda:
            torch.cuda.set_device(self.device)
            most = max((b - a for blk in self.blocks for _,a,b in blk), default=0)
            stage = [torch.empty((most, self.chunks.width), dtype=torch.int32, pin_memory=True) for _ in range(2)]
            done, k = [None, None], 0
        for blk in self.blocks:
            got = self._get(self.free)
            if got is None: return
            half, ev = got
            at = half * self.cap
            if ev is not None: self.stream.wait_event(ev)   # the consumer's last gather from this half
            for i,a,b in blk:
                if not cuda: self.chunks.read(i, a, b, self.ring[at:at + b - a], files)
                else:
                    if done[k % 2] is not None: done[k % 2].synchronize()   # its last copy has left the buffer
                    host = self.chunks.read(i, a, b, stage[k % 2], files)
                    with torch.cuda.stream(self.stream):
                        self.ring[at:at + b - a].copy_(host, non_blocking=True)
                        done[k % 2] = self.stream.record_event()
                    k += 1
                at += b - a
            self.full.put((half, at - half * self.cap, self.stream.record_event() if cuda else None))
        self.full.put(None)

    def __iter__(self):
        "`(half, rows)` of each block once it is in the ring."
        while True:
            item = self._get(self.full)
            if item is None: return
            if isinstance(item, BaseException): raise item
            half, n, ev = item
            if ev is not None: torch.cuda.current_stream(self.device).wait_event(ev)
            yield half, n

    def _queued(self):
        "An event after the work queued so far on the consumer's CUDA stream (None elsewhere: a gather there is done)."
        return None if self.stream is None else torch.cuda.current_stream(self.device).record_event()

    def release(self, half:int):
        "Hand `half` back for the next block, once the gathers queued so far have read it."
        self.free.put((half, self._queued()))

    def close(self):
        self.stop.set()
        self.thread.join()
        # no copy into the ring may outlive its epoch: what the consumer queues next (the next epoch's gathers, a ring
        # kept or freed) waits for the side stream's copies on the device, and the host waits for nothing
        if self.stream is not None: torch.cuda.current_stream(self.device).wait_stream(self.stream)

@delegates(BatchDataLoader.__init__)
class StreamDataLoader(BatchDataLoader):
    """A `BatchDataLoader` over `PackedChunks` (a `TabularDask` subset's, or given): the rows stream from disk, never
    all in memory. Each epoch the chunks' pieces are read in a new random order, a block of `window` pieces at a time,
    into one half of a ring buffer on the device while the batches come from the other: each block's rows are served
    in a random order, a batch at a time, each batch one gather. Under torch.distributed every rank reads its own
    equal share of the rows, so all ranks get the same number of batches."""
    shards_by_rank = True   # a distributed wrapper must not wrap this loader: it already takes its rank's share

    def __init__(self, dataset, bs=64, shuffle=False,
                 window:int=32, # pieces a block, shuffled together on the device: the more, the better mixed
                 piece_rows:int|None=None, # rows read at a time (default: from `memory_budget`)
                 memory_budget:int|str|None=None, # bytes the two blocks and read-ahead may take (default: 1/4 free)
                 seed:int|None=None, # seed of the piece order (default: drawn from torch's generator each epoch)
                 shard:bool|None=None, # take this rank's share under torch.distributed (default: when shuffling)
                 **kwargs):
        self.chunks = dataset if isinstance(dataset, PackedChunks) else dataset.chunks
        if self.chunks is dataset and kwargs.get('after_batch') is None: kwargs['after_batch'] = []   # no names
        if kwargs.get('wgts') is not None: raise ValueError("StreamDataLoader cannot sample by weight (wgts)")
        if int(window) < 1: raise ValueError(f"window must be a positive number of pieces, got {window!r}")
        self.window, self.seed, self.shard, self.epoch = int(window), seed, shard, 0
        self.memory_budget, self._piece_rows = byte_count(memory_budget), piece_rows
        kwargs.setdefault('indexed', True)   # fastai's test for shufflable datasets: ours are, a piece at a time
        super().__init__(dataset, bs=bs, shuffle=shuffle, **kwargs)

    @property
    def piece_rows(self) -> int:
        "Rows read at a time: two blocks of `window` pieces and two pieces' pinned buffers fit in `memory_budget`."
        if self._piece_rows: return int(self._piece_rows)
        budget = self.memory_budget or free_memory(self.device or 'cpu', 0.25)
        return max(budget // ((2 * self.window + 2) * self.chunks.width * 4), 1024)

    def to(self, device):
        "Nothing moves: the rows go to `device` a piece at a time."
        self.device = device
        return self

    @property
    def rows(self): raise AttributeError("a StreamDataLoader holds no packed rows: they stream from its chunks")

    def _sharded(self) -> tuple:
        "`(rank, world_size)` this loader takes its share by: torch.distributed's if `shard` (default: if shuffling)."
        shard = self.shuffle if self.shard is None else self.shard
        return rank_and_world() if shard else (0, 1)

    def _rows_here(self) -> int:
        rank, ws = self._sharded()
        return -(-len(self.chunks) // ws)

    def __len__(self):
        n = self._rows_here()
        return n // self.bs if self.drop_last else -(-n // self.bs)

    def get_idxs(self):
        "An epoch's row order: in order without shuffling (or sharding); a shuffled order is only drawn as it streams."
        if self.shuffle or self._sharded()[1] > 1:
            raise NotImplementedError("a shuffled or sharded StreamDataLoader draws its row order as it streams")
        return torch.arange(len(self.chunks))

    def _epoch_seed(self) -> int:
        if self.seed is not None: return self.seed + self.epoch
        s = [int(torch.randint(0, 2**62, (1,)))]
        if self._sharded()[1] > 1: torch.distributed.broadcast_object_list(s, src=0)   # every rank, the same order
        return s[0]

    def _slices(self) -> list:
        "This epoch's pieces `(file, start, stop)` for this rank."
        pieces = self.chunks.pieces(self.piece_rows)
        if self.shuffle:
            g = torch.Generator().manual_seed(self._epoch_seed())
            pieces = [pieces[i] for i in torch.randperm(len(pieces), generator=g).tolist()]
        rank, ws = self._sharded()
        return _rank_slices(pieces, rank, ws)

    def _blocks(self, slices:list) -> list:
        """This epoch's slices in runs, the blocks the ring holds: `window` pieces each when shuffling (one otherwise),
        and at least `bs` rows but the last, so that a batch never needs rows of more than two blocks."""
        per, res, cur, n = self.window if self.shuffle else 1, [], [], 0
        for sl in slices:
            cur.append(sl)
            n += sl[2] - sl[1]
            if len(cur) >= per and n >= self.bs: res, cur, n = res + [cur], [], 0
        return res + [cur] if cur else res

    def _batches(self, blocks:_Blocks):
        """Each block's rows in a random order (in order without shuffling), `bs` at a time as one gather from the
        ring: a batch that starts in one block ends in the next, whose rows are already in the other half."""
        ring, left, held = blocks.ring, None, []   # left: positions in the ring not yet served
        if ring.is_cuda:
            dev = ring.device
            order = lambda n: torch.randperm(n, device=dev) if self.shuffle else torch.arange(n, device=dev)
            join, gather = torch.cat, lambda idx: ring.index_select(0, idx)
        else:   # the host's ring (a device besides CUDA gets each batch moved there)
            # in NumPy, on this thread alone: torch's randperm and index_select on the CPU run on its OpenMP team,
            # whose threads then spin on the cores the reader thread needs (0.6x of the resident loader on 2 cores);
            # torch's generator seeds the order, so that torch.manual_seed still fixes it
            src = ring.numpy()
            rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,)))) if self.shuffle else None
            order = lambda n: rng.permutation(n) if self.shuffle else np.arange(n)
            join, gather = np.concatenate, lambda idx: torch.from_numpy(np.take(src, idx, axis=0)).to(blocks.device)
        for half, n in blocks:
            pos = order(n) + half * blocks.cap
            held.append(half)
            if left is not None:
                k = self.bs - len(left)
                pos, left = pos[k:], join([left, pos[:k]])
                if len(left) < self.bs: continue   # the last block, and too short: the epoch's last rows
                yield gather(left)
                blocks.release(held.pop(0))
                left = None
            full = len(pos) - len(pos) % self.bs
            for i in range(0, full, self.bs): yield gather(pos[i:i + self.bs])
            if full < len(pos): left = pos[full:]
            else: blocks.release(held.pop())
        if left is not None and not self.drop_last: yield gather(left)

    def _stream(self):
        if 'get_idxs' in self.__dict__:   # fastai's get_preds(reorder=True) pins the order get_idxs gave: in order
            idxs = torch.as_tensor(self.get_idxs())
            if self.shuffle or not torch.equal(idxs, torch.arange(len(idxs))) or len(idxs) != len(self.chunks):
                raise NotImplementedError("a StreamDataLoader reads rows in its own order: get_idxs cannot change it")
        blocks = self._blocks(self._slices())
        self.epoch += 1
        reader = _Blocks(self.chunks, blocks, self.device or 'cpu', getattr(self, '_ring', None))
        self._ring = reader.ring   # kept for the next epoch
        try:
            for b in self._batches(reader): yield unpack_rows(b, self.chunks.layout)
        finally: reader.close()

    def create_batches(self, samps): return self._stream()
    def sample(self): return iter(())

    def create_batch(self, idx):
        "The rows at positions `idx` (a sample batch for fastai's `one_batch` machinery), read from the chunks."
        return unpack_rows(self.chunks.take(torch.as_tensor(idx).cpu()).to(self.device or 'cpu'), self.chunks.layout)

    def do_batch(self, b): return self.typed(self.create_batch(b))

    def __iter__(self):
        self.randomize()
        self.before_iter()
        for b in self._stream(): yield self.after_batch(self.typed(b))
        self.after_iter()

    def new(self, dataset=None, cls=None, **kwargs):
        "Another loader like this one; over a dataset with packed rows in memory, a `BatchDataLoader` (e.g. `test_dl`)."
        ds = self.dataset if dataset is None else dataset
        if cls is None and not isinstance(ds, PackedChunks) and getattr(ds, 'chunks', None) is None:
            return super().new(dataset, cls=BatchDataLoader, **kwargs)
        kw = dict(window=self.window, piece_rows=self._piece_rows, memory_budget=self.memory_budget, seed=self.seed,
                  shard=self.shard)
        return super().new(dataset, cls, **{**kw, **kwargs})
