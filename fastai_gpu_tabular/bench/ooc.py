"""The `ooc` suite: bigger than memory, end to end. Criteo-like Parquet parts whose pandas frame would not fit in this
machine's RAM go through `TabularGPU(dd.read_parquet(...))` into packed chunks, then one streamed epoch (every row
checked to come once) and a short training, in a child process whose peak RSS (with its children's) is measured;
stock fastai, which needs the whole frame in memory, is the contender by its memory at a size that fits, scaled."""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from .machine import MB, hardware
from .report import fmt, table

__all__ = ['ooc_suite', 'ooc_worker', 'stock_worker', 'row_checksum', 'batch_checksum', 'chunks_checksum',
           'tree_rss_mb', 'add_args', 'run', 'format_table']

PROCS = ('Categorify', 'FillMissing', 'Normalize')

def tree_rss_mb(pid:int) -> float:
    "The resident memory of process `pid` and all its descendants now, in MB (Linux's /proc)."
    total,todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f'/proc/{p}/status').read_text()
            total += next(int(ln.split()[1]) for ln in status.splitlines() if ln.startswith('VmRSS:'))
            for t in os.listdir(f'/proc/{p}/task'): todo += [int(c) for c in Path(f'/proc/{p}/task/{t}/children')
                                                            .read_text().split()]
        except (OSError, StopIteration, ValueError): pass   # a process that ended meanwhile
    return total / 1024

class _TreePeak:
    "The largest `tree_rss_mb(pid)` seen, polled every `every` seconds on a thread."
    def __init__(self, pid, every=0.25):
        self.pid,self.every = pid,every
        self.peak,self.stop = 0.,threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
    def _run(self):
        while not self.stop.wait(self.every): self.peak = max(self.peak, tree_rss_mb(self.pid))
    def close(self) -> float:
        self.stop.set()
        self.thread.join()
        return round(self.peak, 1)

def _spawn(fn, args:dict, timeout) -> dict:
    "`fn(args, out)` of this module in a fresh interpreter; its JSON, with the peak RSS of its process tree."
    import subprocess
    with tempfile.TemporaryDirectory() as d:
        out = Path(d)/'r.json'
        code = f'import json, sys; from {__name__} import {fn}; {fn}(json.loads(sys.argv[1]), sys.argv[2])'
        p = subprocess.Popen([sys.executable, '-c', code, json.dumps(args), str(out)])
        meter,why = _TreePeak(p.pid), None
        try: p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            why = f'timed out after {timeout} s'
        peak = meter.close()
        # what it measured before a failure stays: its JSON is written as it goes
        res = json.loads(out.read_text()) if out.exists() else {}
    if p.returncode and res.get('status') != 'ok':
        res.update(status='failed', reason=why or f"exited with code {p.returncode}"
                   + (' (killed: out of memory?)' if p.returncode in (-9, 137) else ''))
    return {**res, 'peak_tree_rss_mb': peak}

def _du(path) -> int:
    "Bytes of the files under `path`."
    return sum(f.stat().st_size for f in Path(path).rglob('*') if f.is_file())

def _names():
    from ..datasets import criteo_names
    cats,conts,y = criteo_names()
    return dict(cat_names=list(cats), cont_names=list(conts), y_names=y)

def _procs():
    import fastai.tabular.core as fatc
    return [getattr(fatc, p) for p in PROCS]

# --- the rows served: an order-free checksum -----------------------------------------------------------------------
def row_checksum(rows) -> int:
    """A sum over `rows` (int32, a row each) of a 64-bit hash of each, mod 2**64: the same for any order of the same
    rows, and different, but for a collision, when a row is missing or comes twice."""
    import torch
    g = torch.Generator().manual_seed(0)
    w = torch.randint(-2**62, 2**62, (rows.shape[1],), generator=g, dtype=torch.int64).to(rows.device) | 1
    h = (rows.long() * w).sum(1)   # int64 arithmetic wraps round: mod 2**64
    h = (h ^ (h >> 29)) * -0x61c8864680b583eb   # a multiply-xorshift round: rows do not cancel out linearly
    return int((h ^ (h >> 32)).sum()) % 2**64

def batch_checksum(b) -> int:
    "`row_checksum` of a batch `(cats, conts[, ys])`, its tensors' bits side by side, the codes as packed (int32)."
    import torch
    b = (b[0].to(torch.int32), *b[1:])   # a loader serves them as int64, fastai's
    return row_checksum(torch.cat([t.view(torch.int32).reshape(len(t), -1) for t in b], 1))

def chunks_checksum(chunks, piece_rows=1 << 20) -> tuple:
    "`(rows, sum of batch_checksum)` of every row of `chunks`, read in order a piece at a time."
    from ..rows.pack import unpack_rows
    n,s = 0, 0
    for i,a,b in chunks.pieces(piece_rows):
        n,s = n + b - a, s + batch_checksum(unpack_rows(chunks.read(i, a, b), chunks.layout))
    return n, s % 2**64

# --- the children --------------------------------------------------------------------------------------------------
def stock_worker(o:dict, out):
    "fastai's `TabularPandas` on the first parquet parts (`o['files']`): seconds, and its own peak RSS."
    import warnings
    warnings.filterwarnings('ignore')
    import pandas as pd
    from fastai.data.transforms import ColSplitter
    from fastai.tabular.core import TabularPandas

    from .machine import RSSMeter
    rss = RSSMeter()
    base = rss.now()   # the interpreter and its imports: what does not grow with the rows
    t0,c0 = time.perf_counter(), time.process_time()
    df = pd.concat([pd.read_parquet(f) for f in o['files']], ignore_index=True)
    frame = int(df.memory_usage(deep=True).sum())
    to = TabularPandas(df, procs=_procs(), splits=ColSplitter('is_valid')(df), **_names())
    Path(out).write_text(json.dumps(dict(status='ok', rows=len(to), frame_bytes=frame, baseline_rss_mb=round(base, 1),
                                         peak_rss_mb=round(rss.peak(), 1), wall_s=round(time.perf_counter() - t0, 2),
                                         cpu_s=round(time.process_time() - c0, 2), rss_method=rss.method)))

def ooc_worker(o:dict, out):
    """`TabularGPU(dd.read_parquet(data))` into chunks, `dataloaders(memory_budget)`, one streamed training epoch
    (timed), one more with every row's checksum (against the chunks read in order), and `train_batches` batches of
    training: each result into the JSON `out` as soon as it is measured."""
    import warnings
    warnings.filterwarnings('ignore')
    import torch
    if o.get('threads'): torch.set_num_threads(o['threads'])
    import dask
    import dask.dataframe as dd
    import fastai.callback.progress  # noqa: F401  (Learner.no_bar)
    from fastai.callback.core import Callback, CancelFitException
    from fastai.tabular.learner import tabular_learner

    from ..core import TabularGPU
    from .machine import RSSMeter
    from .timing import loader_epoch
    rss,res = RSSMeter(), dict(status='running')
    save = lambda **kw: (res.update(kw), Path(out).write_text(json.dumps(res)))
    save(baseline_rss_mb=round(rss.now(), 1))
    t0,c0 = time.perf_counter(), os.times()
    with dask.config.set(scheduler=o['scheduler']):
        ddf = dd.read_parquet(o['data'])
        to = TabularGPU(ddf, procs=_procs(), splits='is_valid', chunk_dir=o['chunk_dir'], **_names())
    c1 = os.times()
    cpu = lambda a, b: b.user + b.system + b.children_user + b.children_system - (a.user + a.system + a.children_user
                                                                                + a.children_system)
    wall = time.perf_counter() - t0
    save(partitions=ddf.npartitions, rows=len(to), n_train=len(to.train), n_valid=len(to.valid),
         etl_wall_s=round(wall, 1), etl_cpu_s=round(cpu(c0, c1), 1), etl_rows_per_s=round(len(to) / wall),
         etl_rows_per_cpu_s=round(len(to) / max(cpu(c0, c1), 1e-9)), packed_bytes=sum(c.nbytes for c in to.chunks),
         etl_peak_rss_mb=round(rss.peak(), 1))
    dls = to.dataloaders(bs=o['bs'], device='cpu', memory_budget=o['memory_budget'])
    train = dls.train
    save(loader=type(train).__name__, piece_rows=getattr(train, 'piece_rows', None), window=getattr(train, 'window',
                                                                                                      None))
    s,n,nb,first,whole = loader_epoch(train, float('inf'), 'cpu')
    save(epoch_s=round(s, 2), epoch_rows=n, epoch_batches=nb, epoch_rows_per_s=round(n / s))
    seen,total = 0, 0
    for b in train.new(drop_last=False):   # every row, the last partial batch too
        seen,total = seen + len(b[0]), total + batch_checksum(b)
    want = chunks_checksum(to.train.chunks)
    save(served_rows=seen, served_once=(seen, total % 2**64) == want, chunk_rows=want[0])

    class Stop(Callback):
        "Stops after `n` training batches; their rows/s."
        def __init__(self, n): self.n = n
        def before_fit(self): self.t0, self.k, self.rows = time.perf_counter(), 0, 0
        def after_batch(self):
            if not self.training: return
            self.k,self.rows = self.k + 1, self.rows + len(self.xb[0])
            if self.k >= self.n: raise CancelFitException()
        def after_fit(self): self.s = time.perf_counter() - self.t0
    stop = Stop(o['train_batches'])
    emb = {n: min(16, len(to.classes[n])) for n in to.cat_names}   # fixed: fastai's rule gives 600 for 1M values
    learn = tabular_learner(dls, layers=[200, 100], emb_szs=emb, cbs=stop)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    save(train_batches=stop.k, train_rows_per_s=round(stop.rows / stop.s), train_loss=float(learn.recorder.losses[-1]),
         peak_rss_mb=round(rss.peak(), 1), rss_method=rss.method, status='ok')

# --- the suite -----------------------------------------------------------------------------------------------------
def _frame_bytes(part) -> dict:
    "Bytes a row of the pandas frame takes, from one part: with pandas' default strings (pandas 3: `str`), and object."
    import pandas as pd
    df = pd.read_parquet(part)
    own = df.memory_usage(deep=True).sum() / len(df)
    obj = df.astype({c: object for c in df.columns if df[c].dtype.kind in 'OUT' or str(df[c].dtype) == 'str'})
    return {'sample_rows': len(df), 'row_bytes': round(own, 1), 'row_bytes_object': round(obj.memory_usage(
        deep=True).sum() / len(df), 1), 'dtypes': sorted({str(t) for t in df.dtypes})}

def _slice(chunks, rows:int, path):
    "The first files of `chunks` up to `rows` rows, as `PackedChunks` of links in `path` (at least one file)."
    from ..rows.chunks import PackedChunks
    Path(path).mkdir(parents=True, exist_ok=True)
    files,n = [], 0
    for f,k in zip(chunks.files, chunks.lens.tolist()):
        if files and n + k > rows: break
        (Path(path)/f).symlink_to((chunks.path/f).resolve())
        files.append((f, k))
        n += k
    return PackedChunks.write(path, files, chunks.layout, chunks.width)

def ooc_suite(rows=64_000_000, part_rows=1_000_000, seed=0, bs=32768, train_batches=50, slice_rows=2_000_000,
              stock_rows=1_000_000, memory_budget='1GB', scheduler='threads', threads=1, work=None, keep=False,
              timeout=6 * 3600., loader_rounds=2) -> dict:
    """Writes (or reuses) `rows` Criteo-like rows in Parquet parts of `part_rows` (`datasets.criteo_parts`, a part at a
    time), estimates their pandas frame from a part, runs stock fastai on the first parts (`stock_rows`) and ours on
    all of them (`ooc_worker`), each in its own process, then the stream against the resident loader on the first
    chunk files (`slice_rows`: resident, they must fit)."""
    import pandas as pd
    import torch

    from ..datasets import criteo_parts
    from ..rows.chunks import PackedChunks
    from .stream import stream_vs_resident
    work = Path(work or tempfile.gettempdir())/'fgt_ooc'
    t0 = time.perf_counter()
    data = criteo_parts(work/f'criteo_{rows}_s{seed}_p{part_rows}', rows, seed, part_rows=part_rows)
    parts = sorted(data.glob('part.*.parquet'))
    ram = hardware()['ram_gb']
    res = {'rows': rows, 'part_rows': part_rows, 'parts': len(parts), 'data_s': round(time.perf_counter() - t0, 1),
           'parquet_bytes': _du(data), 'ram_bytes': int(ram * 2**30) if ram else None, 'scheduler': scheduler,
           'pandas': pd.__version__}
    fb = res['frame'] = _frame_bytes(parts[0])
    fb['bytes'] = int(fb['row_bytes'] * rows)
    fb['bytes_object'] = int(fb['row_bytes_object'] * rows)
    fb['over_ram'] = round(fb['bytes'] / res['ram_bytes'], 2) if res['ram_bytes'] else None
    print(f'[ooc] {rows:,} rows in {len(parts)} parts; the pandas frame: ~{fb["bytes"] / 2**30:.1f} GiB',
          file=sys.stderr, flush=True)
    k = max(1, min(len(parts), round(stock_rows / part_rows)))
    st = res['stock'] = _spawn('stock_worker', {'files': [str(p) for p in parts[:k]]}, timeout)
    if st.get('status') == 'ok':   # what grows with the rows, scaled to all of them
        base = st['baseline_rss_mb']
        st['estimate_mb'] = round(base + (st['peak_rss_mb'] - base) * rows / st['rows'])
        st['estimate_over_ram'] = round(st['estimate_mb'] * MB / res['ram_bytes'], 2) if res['ram_bytes'] else None
    chunk_dir = work/f'chunks_{rows}_s{seed}'
    shutil.rmtree(chunk_dir, ignore_errors=True)
    print('[ooc] TabularGPU(dd.read_parquet(...)), a streamed epoch, training', file=sys.stderr, flush=True)
    o = dict(data=str(data), chunk_dir=str(chunk_dir), bs=bs, memory_budget=memory_budget, scheduler=scheduler,
             threads=threads, train_batches=train_batches)
    ours = res['ours'] = _spawn('ooc_worker', o, timeout)
    if (chunk_dir/'train'/'chunks.json').exists():
        ours['chunk_bytes'] = _du(chunk_dir)
        train = PackedChunks(chunk_dir/'train')
        if threads: torch.set_num_threads(threads)
        sl = _slice(train, slice_rows, chunk_dir/'slice')
        window = 32
        res['slice'] = {'rows': len(sl), 'files': len(sl.files), 'bs': bs, 'window': window,
                        **stream_vs_resident(sl, [bs], window, max(len(sl) * 8 // (100 * window), 1024),
                                             rounds=loader_rounds).get(str(bs), {})}
    if not keep: shutil.rmtree(chunk_dir, ignore_errors=True)
    if ours.get('peak_tree_rss_mb') and res['ram_bytes']:
        ours['peak_over_ram'] = round(ours['peak_tree_rss_mb'] * MB / res['ram_bytes'], 3)
    return res

def add_args(g):
    a = g.add_argument
    a('--ooc-rows', type=lambda s: int(float(s)), default=64_000_000,
      help='rows of Parquet (64M: a pandas frame of ~29 GiB with pandas 3 strings)')
    a('--ooc-part-rows', type=lambda s: int(float(s)), default=1_000_000, help='rows of each Parquet part')
    a('--ooc-bs', type=int, default=32768, help='batch size of the streamed epoch and the training')
    a('--ooc-train-batches', type=int, default=50, help='training batches after the streamed epochs')
    a('--ooc-slice-rows', type=lambda s: int(float(s)), default=2_000_000,
      help='rows of the chunks (the first files) on which the stream is timed against the resident loader')
    a('--ooc-stock-rows', type=lambda s: int(float(s)), default=1_000_000,
      help="rows of the first parts stock fastai processes: its peak RSS, scaled to all rows, is its estimate")
    a('--ooc-memory-budget', default='1GB', help='dataloaders(memory_budget=): below the packed rows, so they stream')
    a('--ooc-scheduler', default='threads', help="Dask's scheduler: threads, sync or processes")
    a('--ooc-dir', default=None, help='where the Parquet parts (kept for reruns) and chunks go (default: the temp dir)')
    a('--ooc-keep', action='store_true', help='keep the chunks')

def run(opts) -> dict:
    return ooc_suite(opts.ooc_rows, opts.ooc_part_rows, opts.seed, opts.ooc_bs, opts.ooc_train_batches,
                     opts.ooc_slice_rows, opts.ooc_stock_rows, opts.ooc_memory_budget, opts.ooc_scheduler,
                     opts.threads, opts.ooc_dir, opts.ooc_keep, opts.timeout)

def format_table(res) -> str:
    "The suite's results as tables."
    gb = lambda b: '-' if b is None else f'{b / 2**30:,.1f} GiB' if b >= 2**30 else f'{b / MB:,.0f} MB'
    f,st,o = res['frame'], res['stock'], res['ours']
    out = [f"{res['rows']:,} Criteo-like rows in {res['parts']} Parquet parts ({gb(res['parquet_bytes'])} on disk); "
           f"RAM {gb(res['ram_bytes'])}; pandas {res['pandas']}",
           f"the pandas frame: {f['row_bytes']:,.0f} bytes a row ({', '.join(f['dtypes'])}; "
           f"memory_usage(deep=True) of {f['sample_rows']:,} rows) x {res['rows']:,} = {gb(f['bytes'])} "
           f"({fmt(f['over_ram'], 'x')} the RAM); with object strings {gb(f['bytes_object'])}"]
    if st.get('status') == 'ok':
        out.append(f"stock fastai TabularPandas on {st['rows']:,} rows: peak RSS {st['peak_rss_mb']:,.0f} MB in "
                   f"{st['wall_s']} s; scaled to {res['rows']:,} rows ~{st['estimate_mb'] / 1024:,.0f} GiB "
                   f"({fmt(st['estimate_over_ram'], 'x')} the RAM): not run at full size")
    else: out.append(f"stock fastai: {st.get('status')} ({st.get('reason')})")
    rows = [['ETL wall s', fmt(o.get('etl_wall_s'))], ['ETL CPU s', fmt(o.get('etl_cpu_s'))],
            ['ETL rows/s', fmt(o.get('etl_rows_per_s'))], ['ETL rows per CPU-s', fmt(o.get('etl_rows_per_cpu_s'))],
            ['packed chunks on disk', gb(o.get('chunk_bytes'))],
            [f"streamed epoch rows/s ({o.get('loader')})", fmt(o.get('epoch_rows_per_s'))],
            ['every training row served once', str(o.get('served_once'))],
            [f"training rows/s ({o.get('train_batches')} batches)", fmt(o.get('train_rows_per_s'))],
            ['peak RSS of the process tree', f"{fmt(o.get('peak_tree_rss_mb'))} MB ({fmt(o.get('peak_over_ram'), 'x')} "
                                             "the RAM)"],
            ['status', f"{o.get('status')} {o.get('reason') or ''}"]]
    out.append(table(['TabularGPU over Dask, streamed', 'value'], rows))
    if 'slice' in res:
        s = res['slice']
        out.append(f"stream against resident on the first {s['rows']:,} training rows ({s['files']} files), bs "
                   f"{s['bs']:,}: {fmt(s.get('ratio'), 'x')} (stream {fmt(s.get('stream', {}).get('rows_per_s'))}, "
                   f"resident {fmt(s.get('resident', {}).get('rows_per_s'))} rows/s)")
    return '\n\n'.join(out)
