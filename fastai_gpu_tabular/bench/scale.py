"""The `scale` suite: bigger than memory: fastai's TabularPandas, the in-memory TabularGPU and TabularGPU over Dask on
the same parquet parts, the stream against the resident loader, and the stream's shuffle quality."""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from .cli import int_list, name_list
from .fastai_suite import run_child
from .machine import MB, RSSMeter
from .report import fmt, ratio, table
from .timing import time_loader

__all__ = ['ETLS', 'scale_suite', 'etl_worker', 'shuffle_stats', 'run', 'format_table', 'add_args']

ETLS = ('fastai', 'memory', 'dask')

def add_args(g):
    a = g.add_argument
    a('--scale-rows', type=int_list, default=[1_000_000, 10_000_000],
      help='row counts of the scale suite (default 1M,10M; --rows N runs N alone)')
    a('--scale-etls', type=name_list, default=list(ETLS),
      help=f'a subset of {",".join(ETLS)} (none: the loaders on chunks a run left)')
    a('--part-rows', type=int, default=250_000, help='rows per parquet part (one Dask partition each)')
    a('--scale-repeat', type=int, default=1, help='rounds of the ETLs, each running once a round in turn (so that '
      "the machine's drift reaches all alike); each reports its median run, each ratio the median of its rounds'")
    a('--dask-scheduler', default='threads', help="threads, sync, processes, local-cluster (distributed's "
      "LocalCluster, a worker process a core, one thread each: their CPU counts), or a scheduler's address")
    a('--dask-strings', choices=['arrow', 'object'], default='arrow', help="the Dask frame's strings: Arrow's (Dask's "
      "default, `dataframe.convert-string`) or Python objects")
    a('--windows', type=int_list, default=[8, 32, 128],
      help="pieces in the stream's shuffle window: the shuffle is measured for each (the same rows in the window: "
      "smaller pieces for more of them); the loader's rows/s for the middle one")
    a('--piece-rows', type=int, default=None, help='rows the stream reads at a time (default: 1%% of the training '
      'rows, so that the window holds a small share of them, as it would of data bigger than memory)')
    a('--max-ram-frac', type=float, default=0.7, help='skip an in-memory ETL whose estimated peak (its peak at a '
      'smaller size, scaled by rows) exceeds this fraction of the RAM available')

# --- one ETL (runs in its own process) ------------------------------------------------------------------------------
def _digest(to) -> str:
    "A hash of the learned state (vocabularies, fill values, means, stds), exact to the bit."
    import hashlib
    st = [(n, [str(v) for v in to.classes[n]]) for n in to.classes]
    for d in ('na_dict', 'means', 'stds'):
        st.append((d, [(k, type(v).__name__, float(v).hex()) for k,v in getattr(to, d).items()]))
    return hashlib.sha1(repr(st).encode()).hexdigest()[:12]

class _Passes:
    "Counts a Dask ETL's passes over the rows (its computes) and its Parquet file reads (each partition's read)."
    def __init__(self):
        from dask.callbacks import Callback
        from dask.dataframe.io.parquet.arrow import ArrowDatasetEngine
        self.passes,self.reads,self.engine = 0, 0, ArrowDatasetEngine
        self.read = ArrowDatasetEngine.read_partition.__func__
        def read(cls, *a, **k):
            self.reads += 1
            return self.read(cls, *a, **k)
        def start(dsk): self.passes += 1
        self.callback,self.counting = Callback(start=start), classmethod(read)

    def __enter__(self):
        self.engine.read_partition = self.counting
        self.callback.__enter__()
        return self

    def __exit__(self, *exc):
        self.callback.__exit__(*exc)
        self.engine.read_partition = classmethod(self.read)

def _dask_client(sched):
    "A distributed Client for `--dask-scheduler` (local-cluster, or an address), its workers ready; else None."
    if sched != 'local-cluster' and ':' not in sched: return None
    from distributed import Client, LocalCluster
    if sched != 'local-cluster': return Client(sched)
    client = Client(LocalCluster(n_workers=os.cpu_count(), threads_per_worker=1, dashboard_address=None))
    client.run(lambda: __import__('fastai_gpu_tabular.dask.tabular'))   # its imports too, before the clock
    return client

def _cpu_s(client) -> float:
    "CPU seconds of this process, and of its children (a local cluster's workers) when it has a client."
    if client is None: return time.process_time()
    import psutil
    me = psutil.Process()
    return sum(sum(p.cpu_times()[:2]) for p in [me, *me.children(recursive=True)])

def etl_worker(name, data, out, opts):
    """Parquet parts to ready rows by ETL `name`; seconds (wall and this process's CPU, all its threads), peak RSS, the
    Dask ETL's passes and Parquet reads, and the learned state's digest into the JSON `out`."""
    import shutil
    import warnings
    warnings.filterwarnings('ignore')
    # what each ETL imports, before the clock: a one-off per process (dask.dataframe alone takes ~0.9 CPU-s)
    import pandas as pd
    import pyarrow.parquet  # noqa: F401
    import torch
    from fastai.data.block import CategoryBlock
    from fastai.data.transforms import ColSplitter
    from fastai.tabular.core import Categorify, FillMissing, Normalize, TabularPandas

    from ..core import TabularGPU
    from ..datasets import criteo_names
    if name == 'dask':
        import dask
        import dask.dataframe as dd

        from ..dask import tabular  # noqa: F401  (what `TabularGPU` imports for a Dask frame)
        try:   # Dask's first compute imports it where it is installed (~0.3 CPU-s)
            import distributed  # noqa: F401
        except ImportError: pass
    if opts.get('threads'): torch.set_num_threads(opts['threads'])
    cats,conts,y = criteo_names()
    kw = lambda: dict(procs=[Categorify, FillMissing, Normalize], cat_names=list(cats), cont_names=list(conts),
                      y_names=y, y_block=CategoryBlock())
    rss,res = RSSMeter(), dict(status='ok', etl=name)
    res['baseline_rss_mb'] = round(rss.now(), 1)
    client = None
    if name == 'dask':
        shutil.rmtree(opts['chunk_dir'], ignore_errors=True)   # a last run's chunks: not this ETL's work
        client = _dask_client(opts['dask_scheduler'])
    rss.reset()
    t0,c0 = time.perf_counter(), _cpu_s(client)
    if name == 'dask':
        sched = opts['dask_scheduler']
        strings = {'dataframe.convert-string': opts.get('dask_strings', 'arrow') == 'arrow'}
        with dask.config.set({**strings, **({} if client else {'scheduler': sched})}), _Passes() as count:
            ddf = dd.read_parquet(data)
            res['partitions'] = ddf.npartitions
            to = TabularGPU(ddf, splits='is_valid', chunk_dir=opts['chunk_dir'], progress=False, **kw())
        # a cluster's computes and reads are not this process's: neither is counted (nor its workers' memory)
        if client: res['workers'] = len(client.scheduler_info()['workers'])
        res.update(build_s=round(time.perf_counter() - t0, 2), load_s=0., passes=None if client else count.passes,
                   parquet_reads=None if client else count.reads,
                   packed_mb=round(sum(c.nbytes for c in to.chunks) / MB, 1))
    else:
        df = pd.read_parquet(data)
        res['load_s'] = round(time.perf_counter() - t0, 2)
        t1 = time.perf_counter()
        # each as its users write it: fastai takes row positions, `TabularGPU` also the split column (read vectorized)
        if name == 'fastai': to = TabularPandas(df, splits=ColSplitter('is_valid')(df), **kw())
        else: to = TabularGPU(df, splits=ColSplitter('is_valid'), **kw())
        if name == 'memory':
            rows = to.packed_rows()[0]
            res['packed_mb'] = round(rows.numel() * rows.element_size() / MB, 1)
        res['build_s'] = round(time.perf_counter() - t1, 2)
    cpu = _cpu_s(client) - c0
    if client is not None:
        cluster = client.cluster   # ours to close for local-cluster (None for an address)
        client.close()
        if cluster is not None: cluster.close()
    res.update(total_s=round(time.perf_counter() - t0, 2), cpu_s=round(cpu, 2), rows_per_cpu_s=round(len(to) / cpu),
               peak_rss_mb=round(rss.peak(), 1), rows=len(to), n_train=len(to.train), state=_digest(to),
               loadavg=[round(x, 2) for x in os.getloadavg()])
    Path(out).write_text(json.dumps(res))

def _spawn_etl(name, data, opts, chunk_dir) -> dict:
    with tempfile.TemporaryDirectory() as d:
        o = dict(dask_scheduler=opts.dask_scheduler, dask_strings=opts.dask_strings, threads=opts.threads,
                 chunk_dir=str(chunk_dir))
        code = ('import json, sys; from fastai_gpu_tabular.bench.scale import etl_worker; '
                'etl_worker(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))')
        return run_child([sys.executable, '-c', code, name, str(data), f'{d}/r.json', json.dumps(o)], opts.timeout,
                         Path(d, 'r.json'))

def _available_mb():
    for line in Path('/proc/meminfo').read_text().splitlines():
        if line.startswith('MemAvailable:'): return int(line.split()[1]) / 1024
    return None

def _window(opts): return sorted(opts.windows)[len(opts.windows) // 2]

def _piece(chunks, opts, window=None):
    "Rows a piece: `--piece-rows`, or such that the window holds 8% of the rows (a small share, as of data bigger "
    "than memory) whatever its number of pieces."
    return opts.piece_rows or max(len(chunks) * 8 // (100 * (window or _window(opts))), 1024)

# --- the loader, streaming or resident ------------------------------------------------------------------------------
def _loaders(chunks, opts, device) -> dict:
    "Rows/s of shuffled epochs at each batch size: the stream from the chunks, and the same rows resident."
    from ..rows.loader import BatchDataLoader
    from ..rows.stream import StreamDataLoader
    res = {}
    for bs in opts.bs:
        if bs > len(chunks): continue
        dls = {'stream': StreamDataLoader(chunks, bs=bs, shuffle=True, window=_window(opts),
                                          piece_rows=_piece(chunks, opts), device=device),
               'resident': BatchDataLoader(chunks, bs=bs, shuffle=True, after_batch=[], indexed=True, device=device)}
        res[str(bs)] = {k: time_loader(dl, opts.epochs_loader, opts.warmup_epochs, opts.max_loader_s, device, opts.stat)
                        for k,dl in dls.items()}
        res[str(bs)]['piece_rows'] = dls['stream'].piece_rows
    return res

# --- shuffle quality -----------------------------------------------------------------------------------------------
def _positions(dl):
    import torch
    return torch.cat([b[0][:, 0].long().cpu() for b in dl])

def shuffle_stats(order, n0:int, bs:int) -> dict:
    """How well an epoch's row order (`order[k]`: the file position of the k-th row out) mixes a file whose first `n0`
    rows have label 0 and the rest label 1. `neighbour_gap`: the median distance, as a fraction of the rows, between
    rows that were next to each other in the file (about 0.29 for a full permutation, 0 in order); `moved`: the mean
    distance a row moves (1/3 for a full permutation); `batch_label_std`: the spread of the batches' label means over
    what independent draws would give (about 1 for a full permutation)."""
    import torch
    n = len(order)
    out = torch.empty(n, dtype=torch.long)
    out[order] = torch.arange(n)   # where each file row went
    gap = (out[1:] - out[:-1]).abs().float().median().item() / n
    moved = (out - torch.arange(n)).abs().float().mean().item() / n
    y = (order >= n0).float()
    means = y[:n - n % bs].view(-1, bs).mean(1)
    p = 1 - n0 / n
    return dict(neighbour_gap=round(gap, 4), moved=round(moved, 4),
                batch_label_std=round((means.std().item() / ((p * (1 - p) / bs) ** 0.5)), 2))

def _sorted_copy(chunks, path):
    "The training rows sorted by label, in files of the same sizes (so the stream cuts the same pieces)."
    import torch
    rows = chunks.packed_rows()[0]   # cached: the resident loader's, on the CPU
    a,b,dt = chunks.layout.ys
    y = rows[:, a:b].view(dt)[:, 0]
    rows = rows[torch.argsort(y, stable=True)]
    return _store_like(chunks, path, lambda s, e: rows[s:e], chunks.layout, chunks.width), int((y == 0).sum())

def _positions_store(chunks, path):
    "A store of the same file sizes whose row k holds k: what each loader does to row order, without the data."
    import torch

    from ..rows.pack import Layout
    rows = lambda s, e: torch.arange(int(s), int(e), dtype=torch.int32)[:, None].repeat(1, 2)
    return _store_like(chunks, path, rows, *Layout.plan(1, 1))

def _store_like(chunks, path, rows, layout, width):
    "`PackedChunks` in `path` with the files and sizes of `chunks`, file rows `[s, e)` holding `rows(s, e)`."
    from ..rows.chunks import PackedChunks
    Path(path).mkdir(parents=True, exist_ok=True)
    files = [(f, PackedChunks.write_rows(path, f, rows(s, e)))
             for f,s,e in zip(chunks.files, chunks.starts[:-1], chunks.starts[1:])]
    return PackedChunks.write(path, files, layout, width)

def _train_auc(train_dl, valid, n_cont, cards, opts, device) -> dict:
    "One epoch of a fixed TabularModel on `train_dl`, then the validation AUC."
    import fastai.callback.schedule  # noqa: F401  (fit_one_cycle)
    from fastai.data.core import DataLoaders
    from fastai.learner import Learner
    from fastai.losses import CrossEntropyLossFlat
    from fastai.optimizer import Adam
    from fastai.tabular.model import TabularModel
    from fastai.torch_core import set_seed
    from sklearn.metrics import roc_auc_score
    set_seed(opts.seed)
    model = TabularModel([(c, min(opts.emb_sz, c)) for c in cards], n_cont, 2, layers=list(opts.layers))
    learn = Learner(DataLoaders(train_dl, valid, device=device), model, loss_func=CrossEntropyLossFlat(), opt_func=Adam)
    t0 = time.perf_counter()
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(1, opts.lr)
    s,loss = time.perf_counter() - t0, float(learn.recorder.losses[-1])   # get_preds empties the recorder
    with learn.no_bar(): preds, targs = learn.get_preds()
    return dict(valid_auc=round(float(roc_auc_score(targs.reshape(-1).numpy(), preds[:, 1].numpy())), 4),
                train_s=round(s, 1), train_loss=round(loss, 4))

def _shuffle(work, train, valid, cards, n_cont, opts, device) -> dict:
    """Window streams (each window the same 8% of the rows, in `--windows` pieces) against a full permutation and no
    shuffle, on the label-sorted training rows: the row-order statistics, and the AUC after one epoch."""
    from ..rows.loader import BatchDataLoader
    from ..rows.stream import StreamDataLoader
    srt,n0 = _sorted_copy(train, work/'sorted')
    pos = _positions_store(train, work/'positions')
    bs = opts.train_bs or 32768
    def orders(store):
        kw = dict(bs=bs, drop_last=False, device=device)
        return {**{f'window {w} x {_piece(store, opts, w):,} rows': StreamDataLoader(store, shuffle=True, window=w,
                                                                      piece_rows=_piece(store, opts, w), **kw)
                   for w in sorted(opts.windows)},
                'full permutation': BatchDataLoader(store, shuffle=True, after_batch=[], indexed=True, **kw),
                'in order': StreamDataLoader(store, shuffle=False, **kw)}
    res = {k: shuffle_stats(_positions(dl), n0, bs) for k,dl in orders(pos).items()}
    vdl = BatchDataLoader(valid, bs=bs, after_batch=[], indexed=True, device=device)
    for k,dl in orders(srt).items(): res[k].update(_train_auc(dl, vdl, n_cont, cards, opts, device))
    return dict(orders=res, bs=bs, label_1_share=round(1 - n0 / len(srt), 4))

# --- the suite -----------------------------------------------------------------------------------------------------
def scale_suite(opts) -> dict:
    """For each size, Criteo-like rows in parquet parts (`data.criteo_parts`) go through three ETLs, each in its own
    process (so that peak RSS is its own): fastai's `TabularPandas`, the in-memory `TabularGPU` (both read the whole
    frame, then build; ours also packs) and `TabularGPU` over a Dask frame (partitions read, learned and packed into
    `.npy` chunks one at a time). The learned state of each is digested, to show that they agree. Then, on the
    smallest size's chunks: the loader's rows/s streaming (`StreamDataLoader`) against resident (`BatchDataLoader`),
    and the stream's shuffle quality on a label-sorted copy of the training rows: how far rows move, how mixed batches
    are, and the validation AUC after one epoch, with the window shuffle, a full permutation and none."""
    import torch

    from ..datasets import criteo_parts
    from ..rows.chunks import PackedChunks
    device = torch.device(opts.device)
    sizes = [opts.rows] if opts.rows else sorted(opts.scale_rows)
    work = Path(opts.out).resolve().parent/'scale_work'
    res,avail = {'sizes': {}}, _available_mb()
    for n in sizes:
        t0 = time.perf_counter()
        data = criteo_parts(work/f'criteo_{n}_s{opts.seed}', n, opts.seed, part_rows=opts.part_rows)
        r = res['sizes'][str(n)] = {'data': {'path': str(data), 'make_s': round(time.perf_counter() - t0, 1),
                                             'parts': len(list(data.glob('part.*.parquet')))}, 'etl': {}}
        runs = {}
        for rnd in range(max(opts.scale_repeat, 1)):
            for name in opts.scale_etls:
                if rnd and runs[name][-1].get('status') != 'ok': continue   # failed or skipped: once is enough
                smaller = [res['sizes'][str(m)]['etl'].get(name, {}) for m in sizes if m < n]
                prev = next((e for e in reversed(smaller) if e.get('status') == 'ok'), None)
                need = prev and prev['peak_rss_mb'] * n / prev['rows']
                if name != 'dask' and need and avail and need > opts.max_ram_frac * avail:
                    runs[name] = [{'status': 'skipped', 'reason': f'would need ~{need / 1024:.0f} GB (its peak at '
                                   f'{prev["rows"]:,} rows scaled), {avail / 1024:.0f} GB available'}]
                    continue
                print(f'[scale] {n:,} rows: {name} ETL' + (f', round {rnd + 1}' if opts.scale_repeat > 1 else ''),
                      file=sys.stderr, flush=True)
                runs.setdefault(name, []).append(_spawn_etl(name, data, opts, work/f'chunks_{n}'))
        r['etl'] = {k: _median_run(v) for k,v in runs.items()}
        ok = {k: v for k,v in r['etl'].items() if v.get('status') == 'ok'}
        r['same_state'] = len({v['state'] for v in ok.values()}) == 1 if len(ok) > 1 else None
        r['ratios'] = {f'{k}_vs_{ref}': _ratios(runs[k], runs[ref])
                       for ref in ('fastai', 'memory') if ref in ok for k in ('memory', 'dask') if k in ok and k != ref}
    n = sizes[0]
    if not opts.no_loader and (work/f'chunks_{n}'/'train'/'chunks.json').exists():
        train,valid = (PackedChunks(work/f'chunks_{n}'/s) for s in ('train', 'valid'))
        print(f'[scale] loaders on {n:,} rows', file=sys.stderr, flush=True)
        res['loader'] = {'rows': len(train), 'by_bs': _loaders(train, opts, device)}
        if not opts.no_train:
            print('[scale] shuffle quality', file=sys.stderr, flush=True)
            cards = _cards(train, valid)
            res['shuffle'] = {'rows': len(train), **_shuffle(work/f'shuffle_{n}', train, valid, cards,
                                                             train.layout.conts.stop - train.layout.conts.start,
                                                             opts, device)}
    return res

def _median_run(runs:list) -> dict:
    "An ETL's run of median CPU seconds (the lower of the middle two), with all its runs' figures, or its failure."
    if any(r.get('status') != 'ok' for r in runs): return next(r for r in runs if r.get('status') != 'ok')
    if len(runs) == 1: return runs[0]
    keys = ('total_s', 'cpu_s', 'rows_per_cpu_s', 'peak_rss_mb', 'state')
    return {**sorted(runs, key=lambda r: r['cpu_s'])[(len(runs) - 1) // 2],
            'runs': [{k: r[k] for k in keys} for r in runs]}

def _ratios(runs:list, refs:list) -> dict:
    """An ETL against a reference: end-to-end speedup, rows per CPU-second and peak RSS ratios, each the median of the
    rounds' (a round's two runs ran one after the other), with every round's rows per CPU-second ratio."""
    import statistics
    pairs = list(zip(runs, refs))
    by = lambda key: [a[key] / b[key] for a,b in pairs]   # this ETL's figure over the reference's, a round each
    rows = by('rows_per_cpu_s')
    res = {'total_speedup': statistics.median(1 / x for x in by('total_s')),
           'rows_per_cpu_s_ratio': statistics.median(rows), 'peak_rss_ratio': statistics.median(by('peak_rss_mb'))}
    if len(pairs) > 1: res['rows_per_cpu_s_ratios'] = [round(x, 3) for x in rows]
    return res

def _cards(*chunks) -> list:
    "Embedding table sizes: the largest code in each cat column of the chunks, plus one."
    a,b,_ = chunks[0].layout.cats
    top = [c.packed_rows()[0][:, a:b].amax(0) for c in chunks if len(c)]   # cached for the loaders
    return [int(c) + 1 for c in (top[0] if len(top) == 1 else top[0].maximum(top[1])).tolist()]

def run(opts) -> dict:
    bad = [e for e in opts.scale_etls if e not in ETLS]
    if bad: raise SystemExit(f'unknown ETL(s) {bad}: pick from {",".join(ETLS)}')
    return scale_suite(opts)

def format_table(res) -> str:
    "The suite's results as tables: ETL per size, the loaders, the shuffle."
    out,rows = [], []
    for n,r in res['sizes'].items():
        for k,e in r['etl'].items():
            if e.get('status') != 'ok':
                rows.append([f'{int(n):,}', k, e.get('status')] + ['-'] * 7 + [e.get('reason', '')[:60]]); continue
            rows.append([f'{int(n):,}', k, 'ok', fmt(e['load_s']), fmt(e['build_s']), fmt(e['total_s']),
                         fmt(e.get('cpu_s')), fmt(e.get('rows_per_cpu_s')), fmt(e.get('passes')),
                         f"{e['peak_rss_mb']:,.0f}", e['state'] + (' (same)' if r['same_state'] else '')])
    out.append(table(['rows', 'ETL', 'status', 'read s', 'build+pack s', 'total s', 'CPU s', 'rows/CPU-s', 'passes',
                      'peak RSS MB', 'state digest'], rows))
    for n,r in res['sizes'].items():
        for k,v in r.get('ratios', {}).items():
            rounds = v.get('rows_per_cpu_s_ratios')
            out.append(f"{int(n):,} rows, {k}: {fmt(v['total_speedup'], 'x')} faster end to end, "
                       f"{fmt(v.get('rows_per_cpu_s_ratio'), 'x')} the rows per CPU-second, peak RSS "
                       f"{fmt(v['peak_rss_ratio'], 'x')}" +
                       (f" (medians of {len(rounds)} rounds; rows per CPU-second by round: "
                        f"{', '.join(fmt(x, 'x') for x in rounds)})" if rounds else ''))
    if 'loader' in res:
        rows = [[bs, f"{d['stream']['rows_per_s']:,.0f}", f"{d['resident']['rows_per_s']:,.0f}",
                 fmt(ratio(d['stream']['rows_per_s'], d['resident']['rows_per_s']), 'x'), f"{d['piece_rows']:,}"]
                for bs,d in res['loader']['by_bs'].items()]
        out.append(table(['bs', 'stream rows/s', 'resident rows/s', 'stream/resident', 'piece rows'], rows))
    if 'shuffle' in res:
        s = res['shuffle']
        rows = [[k, v['neighbour_gap'], v['moved'], v['batch_label_std'], v['valid_auc']]
                for k,v in s['orders'].items()]
        out.append(f"shuffle, label-sorted training rows ({s['rows']:,}, bs {s['bs']:,}):")
        out.append(table(['order', 'neighbour gap', 'moved', 'batch label std', 'valid AUC after 1 epoch'], rows))
    return '\n\n'.join(out)
