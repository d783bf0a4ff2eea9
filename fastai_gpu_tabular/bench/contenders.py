"""The `fastai` suite (the default of `python -m fastai_gpu_tabular.bench`): stock fastai against this package on the
same Criteo-like data and machine.

Each contender runs in its own fresh subprocess (so peak memory is its own) on the same parquet file:
`stock_weighted` (`TabularPandas` + its default `TabWeightedDL`, sampling with replacement), `stock_shuffle`
(`TabularPandas` + `TabDataLoader`, a true shuffle), `gpu_pandas` (`TabularGPU` on pandas + `BatchDataLoader`) and
`gpu_cudf` (the same on a cuDF frame), `stock_cudf_pandas` (stock fastai as `stock_shuffle`, run under `cudf.pandas`:
what a user can do today with no plugin; its process calls `cudf.pandas.install()` before anything imports pandas, and
an extra, untimed build under cudf.pandas' profiler records which operations ran on the CPU) and, with `--rmm-torch`,
`gpu_cudf_rmm` (`gpu_cudf` with torch allocating from RMM's pool: `use_rmm_for_torch`). Those needing cuDF are
skipped, with the reason, where it is not usable.

The JSON it writes (schema_version 1; sizes in MB = 2**20 bytes, batch sizes as string keys):

    meta        {schema_version, timestamp, wall_s, command, hardware{cpu, cores, cores_usable, ram_gb, gpu, platform,
                 python, loadavg}, loadavg_end, versions{torch, fastai, ...}, git{commit, changed}, args{...},
                 data{path, rows, seed, bytes, make_s}}
    contenders  {name: {status 'ok'|'skipped'|'failed', reason, tabular_type, loader_type, backend, device,
                 torch_threads, rows, n_train, n_valid, n_cat, n_cont, load_s, preprocess_s (the fastest build),
                 preprocess_s_all, preprocess_cpu_s (the least CPU time of the builds), preprocess_cpu_s_all,
                 dataloaders_s, dataloaders_cpu_s (packing, for TabularGPU), baseline_rss_mb, peak_rss_mb,
                 rss_increase_mb, rss_phases_mb{phase: peak}, rss_method, peak_gpu_mb, gpu_detail{...},
                 held_after_dataloaders{frame_mb, index_mb, packed_mb, resident_mb, resident_vs_packed},
                 gpu_after_dataloaders_mb, gpu_resident_vs_packed, etl_peak_gpu_mb,
                 cpu_fallbacks{operation: CPU calls} (stock_cudf_pandas), loader_rows_per_s{bs: rows/s},
                 loader_detail{bs: {rows_per_s, method, capped, epochs, epoch_rows_per_s, mean_rows_per_s,
                 bare_ns_per_row, overhead_ns_per_row, loader_vs_bare, ...}}, loader_capped,
                 batch[[shape, dtype, device]], gather_bandwidth{bs: {...}}, train_rows_per_s, train_s, train_rows,
                 train_bs, train_loss, valid_s, valid_auc, end_to_end_s, model{...}, wall_s, cpu_s, loadavg_start,
                 loadavg_end}}
    ratios      {vs_stock_shuffle|vs_stock_weighted: {name: {preprocess_speedup, preprocess_total_speedup,
                 preprocess_total_cpu_speedup (build + dataloaders(), by CPU time), end_to_end_speedup,
                 loader_speedup{bs}, train_speedup, peak_rss_ratio, rss_increase_ratio, valid_auc_delta}}}
                 (speedups are reference time / contender time: >1 is faster; memory ratios are contender / reference)
    targets     [{name, contender, reference, value, target, met}] (the device's targets: `check_targets`)
    curve       {name: [{rows, preprocess_s, preprocess_us_per_row, loader_rows_per_s{bs}, loader_ns_per_row{bs},
                 gather_ns_per_row{bs}, overhead_ns_per_row{bs}, peak_rss_mb}]} (the gather keys for packed tensors)
    curve_growth {name: {loader_ns_per_row|gather_ns_per_row|overhead_ns_per_row: {bs: value at the largest N / at
                 the smallest}}}
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from .machine import MB, GPUMeter, RSSMeter, git_state, hardware, sync, versions
from .report import fmt, ratio, table
from .timing import bare_epoch, gather_bandwidth, time_loader

__all__ = ['CONTENDERS', 'OPTIONAL', 'SCHEMA_VERSION', 'cpu_fallbacks', 'run_contender', 'held_memory',
           'compute_ratios', 'check_targets', 'format_table', 'plot_ratios', 'run_bench', 'run_child', 'worker']

CONTENDERS = ('stock_weighted', 'stock_shuffle', 'gpu_pandas', 'gpu_cudf', 'stock_cudf_pandas')
OPTIONAL = ('gpu_cudf_rmm',)   # run only when asked for (`--rmm-torch`)
CUDF_FRAMES = ('gpu_cudf', 'gpu_cudf_rmm')   # read the parquet with cuDF
NEED_CUDF = CUDF_FRAMES + ('stock_cudf_pandas',)
REFERENCES = ('stock_shuffle', 'stock_weighted')
SCHEMA_VERSION = 1

# --- one contender (runs in its own process) -----------------------------------------------------------------------
def _log(name, msg): print(f'[bench:{name}] {msg}', file=sys.stderr, flush=True)

def _train_callback():
    from fastai.callback.core import Callback, CancelTrainException
    from fastai.torch_core import find_bs
    class EpochTimer(Callback):
        "Seconds and rows of the training pass, device-synchronised; stops training after `max_batches` if set."
        order = -100
        def __init__(self, device, max_batches=None): self.device,self.max_batches = device,max_batches
        def before_train(self):
            sync(self.device)
            self.rows,self.batches,self.t0 = 0,0,time.perf_counter()
        def after_batch(self):
            if not self.learn.training: return
            self.rows += find_bs(self.learn.yb)
            self.batches += 1
            if self.max_batches and self.batches >= self.max_batches: raise CancelTrainException()
        def after_train(self):
            sync(self.device)
            self.train_s = time.perf_counter() - self.t0
    return EpochTimer

def _train(res, dls, to, opts, device):
    "One epoch of the same fixed `TabularModel` for every contender; rows/s of the training pass, validation AUC."
    import fastai.callback.progress  # patches Learner.no_bar
    import fastai.callback.schedule  # noqa: F401  (patches Learner.fit_one_cycle)
    import numpy as np
    from fastai.optimizer import Adam, Lamb
    from fastai.tabular.learner import tabular_learner
    from fastai.torch_core import set_seed
    from sklearn.metrics import roc_auc_score
    set_seed(opts.seed)
    # fixed sizes, not fastai's rule: the model must be the same whatever vocab sizes a contender reports
    emb_szs = {n: min(opts.emb_sz, len(to.classes[n])) for n in to.cat_names}
    timer = _train_callback()(device, opts.train_max_batches)
    opt_func = {'adam': Adam, 'lamb': Lamb}[opts.opt]
    learn = tabular_learner(dls, layers=list(opts.layers), emb_szs=emb_szs, opt_func=opt_func, cbs=[timer])
    learn.model.to(device)
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(1, opts.lr)
    # now: get_preds runs `before_fit`, which empties the recorder
    res['train_loss'] = float(learn.recorder.losses[-1]) if learn.recorder.losses else None
    t0 = time.perf_counter()
    with learn.no_bar(): preds,targs = learn.get_preds()
    res['valid_s'] = round(time.perf_counter() - t0, 3)
    targs = targs.reshape(-1).cpu().numpy()
    score = preds[:, 1] if preds.ndim == 2 and preds.shape[1] == 2 else preds.reshape(-1)
    res['valid_auc'] = float(roc_auc_score(targs, score.float().cpu().numpy())) if len(np.unique(targs)) == 2 else None
    res.update(train_s=round(timer.train_s, 3), train_rows=timer.rows, train_bs=dls.train.bs,
               train_rows_per_s=round(timer.rows / timer.train_s, 1),
               model={'layers': list(opts.layers), 'emb_sz': opts.emb_sz, 'opt': opts.opt, 'lr': opts.lr,
                      'params': sum(p.numel() for p in learn.model.parameters()),
                      'max_batches': opts.train_max_batches, 'batches': timer.batches})

def _read_frame(path, cudf:bool):
    if cudf:
        from ..backend import require_cudf
        return require_cudf().read_parquet(path)
    import pandas as pd
    return pd.read_parquet(path)

def _setup_contender(name, opts, res):
    "Load the frame; return what the phases share. None when `name` cannot run here (then `res` says why)."
    if name in NEED_CUDF:
        from ..backend import cudf_available, cudf_reason
        why = f'cuDF is not usable: {cudf_reason()}' if not cudf_available() else \
              'cuDF frames live on a GPU: run with --device cuda' if opts.device != 'cuda' else None
        if why is None and name == 'stock_cudf_pandas' and not getattr(sys.modules.get('cudf.pandas'), 'LOADED', False):
            why = 'cudf.pandas is not active in this process: `cudf.pandas.install()` must come first'
        if why:
            res.update(status='skipped', reason=why)
            return None
    if name == 'gpu_cudf_rmm':   # first: torch takes a new allocator only before its first allocation
        from ..backend import use_rmm_for_torch
        use_rmm_for_torch()
    import warnings
    warnings.filterwarnings('ignore', category=FutureWarning)
    warnings.filterwarnings('ignore', category=DeprecationWarning)
    import torch
    from fastai.data.transforms import RandomSplitter
    from fastai.torch_core import set_seed
    device = torch.device(opts.device)
    if opts.threads: torch.set_num_threads(opts.threads)
    res['torch_threads'] = torch.get_num_threads()
    rss,phases = RSSMeter(),{}
    gpu = GPUMeter(device, rmm_stats=name in NEED_CUDF, torch_stats=name != 'gpu_cudf_rmm')
    t0 = time.perf_counter()
    df = _read_frame(opts.data, name in CUDF_FRAMES)
    sync(device)
    res['load_s'] = round(time.perf_counter() - t0, 3)
    rss.phase(phases, 'load')
    res['baseline_rss_mb'] = round(rss.now(), 1)
    gpu.reset_base()
    set_seed(opts.seed)
    splits = RandomSplitter(opts.valid_pct, seed=opts.seed)(range(len(df)))
    res.update(rows=len(df), n_train=len(splits[0]), n_valid=len(splits[1]))
    return argparse.Namespace(df=df, splits=splits, device=device, rss=rss, phases=phases, gpu=gpu)

def _builder(name, opts, ctx):
    "A function building the contender's Tabular from the loaded frame: (object, seconds)."
    from fastai.data.block import CategoryBlock
    from fastai.tabular.core import Categorify, FillMissing, Normalize, TabularPandas

    from ..core import TabularGPU
    from ..datasets import criteo_names
    cats,conts,y = criteo_names()
    cls = TabularPandas if name.startswith('stock') else TabularGPU
    def build():
        t0, c0 = time.perf_counter(), time.process_time()
        # fresh name lists: fastai's FillMissing appends the `_na` columns to the caller's `cat_names`
        to = cls(ctx.df, procs=[Categorify, FillMissing, Normalize], cat_names=list(cats), cont_names=list(conts),
                 y_names=y, y_block=CategoryBlock() if opts.target == 'category' else None, splits=ctx.splits)
        sync(ctx.device)
        return to,round(time.perf_counter() - t0, 3),round(time.process_time() - c0, 3)
    return build

def _packed_tensors(dl) -> tuple|None:
    "What a `BatchDataLoader` batch gathers from: one packed row buffer."
    from ..loader import BatchDataLoader
    if not isinstance(dl, BatchDataLoader): return None
    return (dl.rows[0],)

def held_memory(to) -> dict:
    """MB a Tabular holds once its loaders exist: the processed frame (0 once a TabularGPU released it), its row
    index, the packed rows (TabularGPU, one copy), their sum, and that sum over the packed rows (target: <= 1.2)."""
    released = getattr(to, 'released', None) is not None
    frame = None if released else to.items
    index = to.row_index if released else frame.index
    out = {'frame_mb': 0. if released else float(frame.memory_usage(index=False, deep=True).sum()) / MB,
           'index_mb': float(index.memory_usage(deep=True)) / MB}
    if hasattr(to, 'packed_rows'):
        rows = to.packed_rows()[0]
        out['packed_mb'] = rows.numel() * rows.element_size() / MB
    out['resident_mb'] = sum(out.values())
    if out.get('packed_mb'): out['resident_vs_packed'] = out['resident_mb'] / out['packed_mb']
    return {k: round(v, 3) for k,v in out.items()}

def _loaders(name, opts, ctx, dls, res):
    "Rows/s of the shuffled training loader at each batch size (and, for packed tensors, the gather's bandwidth)."
    from fastai.torch_core import set_seed
    res['loader_rows_per_s'],res['loader_detail'] = {},{}
    for bs in [] if opts.no_loader else opts.bs:
        if bs > res['n_train']:
            res['loader_detail'][str(bs)] = {'skipped': f'bs {bs} > {res["n_train"]} training rows'}
            continue
        set_seed(opts.seed)
        dl = dls.train.new(bs=bs)
        ts = _packed_tensors(dl)
        bare = partial(bare_epoch, ts, bs, ctx.device) if ts else None
        d = time_loader(dl, opts.epochs_loader, opts.warmup_epochs, opts.max_loader_s, ctx.device, opts.stat, bare)
        res['loader_detail'][str(bs)],res['loader_rows_per_s'][str(bs)] = d,d['rows_per_s']
        _log(name, f'loader bs={bs}: {d["rows_per_s"]:,.0f} rows/s ({d["method"]}, {d["seconds"]:.1f} s timed)')
    res['loader_capped'] = any(d.get('capped') for d in res['loader_detail'].values())

def cpu_fallbacks(build) -> dict:
    "`{operation: calls}` of the pandas operations cudf.pandas ran on the CPU during `build()` (its profiler's record)."
    from cudf.pandas import Profiler
    with Profiler() as p: build()
    return {f: len(v['cpu']) for f,v in sorted(p.per_function_stats.items()) if v.get('cpu')}

def run_contender(name:str, opts, res:dict|None=None) -> dict:
    "Measure contender `name` in this process (a fresh one: peak RSS is the whole process's), filling `res`."
    if name not in CONTENDERS + OPTIONAL:
        raise ValueError(f"unknown contender {name!r}: pick from {CONTENDERS + OPTIONAL}")
    t_start = time.perf_counter()
    res = {} if res is None else res
    res.update(status='ok', reason=None, device=opts.device, loadavg_start=[round(x, 2) for x in os.getloadavg()])
    ctx = _setup_contender(name, opts, res)
    if ctx is None: return res
    from fastai.tabular.core import TabDataLoader
    build = _builder(name, opts, ctx)
    _log(name, f'{res["rows"]:,} rows loaded in {res["load_s"]:.1f} s')
    to,t,c = build()
    res['etl_peak_gpu_mb'] = ctx.gpu.peak()   # the load and the build: reset after the load (`reset_base`)
    res['preprocess_s'],res['preprocess_s_all'],res['preprocess_cpu_s_all'] = t,[t],[c]
    ctx.rss.phase(ctx.phases, 'preprocess')
    t0, c0 = time.perf_counter(), time.process_time()
    # the stock true shuffle; else the Tabular's own loader (fastai's default, TabWeightedDL, for stock_weighted)
    dl_kw = {'dl_type': TabDataLoader} if name in ('stock_shuffle', 'stock_cudf_pandas') else {}
    dls = to.dataloaders(bs=opts.train_bs, device=ctx.device, **dl_kw)
    sync(ctx.device)
    res['dataloaders_s'] = round(time.perf_counter() - t0, 3)
    res['dataloaders_cpu_s'] = round(time.process_time() - c0, 3)   # TabularGPU packs its rows here
    ctx.rss.phase(ctx.phases, 'dataloaders')
    res['held_after_dataloaders'] = held_memory(to)
    res['gpu_after_dataloaders_mb'] = ctx.gpu.current()
    packed = res['held_after_dataloaders'].get('packed_mb')
    res['gpu_resident_vs_packed'] = ratio(res['gpu_after_dataloaders_mb'], packed) if packed else None
    b = dls.train.one_batch()
    res.update(tabular_type=type(to).__name__, loader_type=type(dls.train).__name__, n_cat=len(to.cat_names),
               n_cont=len(to.cont_names),
               backend='cudf.pandas' if name == 'stock_cudf_pandas' else 'cudf' if name in CUDF_FRAMES else 'pandas',
               batch=[[list(x.shape), str(x.dtype).replace('torch.', ''), str(x.device)] for x in b])
    _log(name, f'{res["tabular_type"]} in {t:.2f} s, dataloaders() in {res["dataloaders_s"]:.2f} s '
               f'({res["loader_type"]})')
    _loaders(name, opts, ctx, dls, res)
    ctx.rss.phase(ctx.phases, 'loader')
    if not opts.no_train:
        _train(res, dls, to, opts, ctx.device)
        _log(name, f'train {res["train_rows_per_s"]:,.0f} rows/s, valid AUC {res["valid_auc"]}')
        # what a user waits for: read the file, build the Tabular (the first build), dataloaders(), train an epoch,
        # predict the validation rows
        res['end_to_end_s'] = round(sum(res[k] for k in ('load_s', 'preprocess_s', 'dataloaders_s', 'train_s',
                                                         'valid_s')), 3)
        ctx.rss.phase(ctx.phases, 'train')
    res['rss_phases_mb'],res['rss_method'] = ctx.phases,ctx.rss.method
    res['peak_rss_mb'] = max(ctx.phases.values())
    res['rss_increase_mb'] = round(res['peak_rss_mb'] - res['baseline_rss_mb'], 1)
    res['peak_gpu_mb'],res['gpu_detail'] = ctx.gpu.result()
    # after the memory phases: its copy buffers (>= 256 MB) are the bench's, not the loader's
    ts = _packed_tensors(dls.train)
    if ts: res['gather_bandwidth'] = {bs: gather_bandwidth(ts, int(bs)) for bs in res['loader_rows_per_s']}
    # more builds, for time only, after every memory phase (freed memory kept by the allocator would blur those)
    del dls,to
    for _ in range(opts.repeat_preprocess - 1):
        gc.collect()
        _, t, c = build()
        res['preprocess_s_all'].append(t)
        res['preprocess_cpu_s_all'].append(c)
    res['preprocess_s'], res['preprocess_cpu_s'] = min(res['preprocess_s_all']), min(res['preprocess_cpu_s_all'])
    if name == 'stock_cudf_pandas': res['cpu_fallbacks'] = cpu_fallbacks(build)   # untimed: the profiler traces
    res['wall_s'] = round(time.perf_counter() - t_start, 2)
    # other processes on the machine show up here: cpu_s far below wall_s x cores, or a load above the core count
    res['cpu_s'] = round(sum(os.times()[:2]), 2)
    res['loadavg_end'] = [round(x, 2) for x in os.getloadavg()]
    return res

# --- comparing -----------------------------------------------------------------------------------------------------
def compute_ratios(contenders:dict) -> dict:
    "Every ok contender against each ok reference: speedups (>1 faster) and memory ratios (<1 smaller)."
    out = {}
    for ref in REFERENCES:
        r = contenders.get(ref, {})
        if r.get('status') != 'ok': continue
        vs = out[f'vs_{ref}'] = {}
        for name,c in contenders.items():
            if name == ref or c.get('status') != 'ok': continue
            tot = lambda o, k='_s': (o.get('preprocess' + k) or 0) + (o.get('dataloaders' + k) or 0)
            auc = (c.get('valid_auc'), r.get('valid_auc'))
            vs[name] = {
                'preprocess_speedup': ratio(r.get('preprocess_s'), c.get('preprocess_s')),
                'preprocess_total_speedup': ratio(tot(r), tot(c)),
                'preprocess_total_cpu_speedup': ratio(tot(r, '_cpu_s'), tot(c, '_cpu_s')),
                'loader_speedup': {bs: ratio(v, r.get('loader_rows_per_s', {}).get(bs))
                                   for bs,v in c.get('loader_rows_per_s', {}).items()},
                'train_speedup': ratio(c.get('train_rows_per_s'), r.get('train_rows_per_s')),
                'end_to_end_speedup': ratio(r.get('end_to_end_s'), c.get('end_to_end_s')),
                'peak_rss_ratio': ratio(c.get('peak_rss_mb'), r.get('peak_rss_mb')),
                # a tiny increase (small data) would make a meaningless ratio
                'rss_increase_ratio': ratio(c.get('rss_increase_mb'), r.get('rss_increase_mb'))
                                      if (r.get('rss_increase_mb') or 0) > 64 else None,
                'valid_auc_delta': None if None in auc else auc[0] - auc[1]}
    return out

def check_targets(res:dict) -> list:
    "The project's targets for this run's device, each with the measured value and whether it is met."
    gpu = res['meta']['args']['device'] == 'cuda'
    cs,vs = res['contenders'],res['ratios'].get('vs_stock_shuffle', {})
    # both stock contenders build the same TabularPandas: the faster build is the (stricter) reference
    tp = [cs[n]['preprocess_s'] for n in REFERENCES if cs.get(n, {}).get('status') == 'ok']
    cpu = lambda c: (c.get('preprocess_cpu_s') or 0) + (c.get('dataloaders_cpu_s') or 0) or None
    tc = [cpu(cs[n]) for n in REFERENCES if cs.get(n, {}).get('status') == 'ok' and cpu(cs[n])]
    out = []
    def add(label, name, ref, v, target, smaller=False):
        met = None if v is None else (v <= target if smaller else v >= target)
        out.append({'name': label, 'contender': name, 'reference': ref, 'value': v, 'target': target, 'met': met})
    def worst(d, lo=32768, hi=204800):
        "The smallest value over the batch sizes in the targets' range (all batch sizes if none is)."
        v = [x for bs,x in (d or {}).items() if lo <= int(bs) <= hi and x is not None] or \
            [x for x in (d or {}).values() if x is not None]
        return min(v) if v else None
    for name in ('gpu_cudf', 'gpu_pandas') if gpu else ('gpu_pandas',):
        if name not in vs: continue
        cuda = gpu and name == 'gpu_cudf'
        add('preprocess vs TabularPandas', name, 'fastest stock TabularPandas build',
            ratio(min(tp), cs[name].get('preprocess_s')) if tp else None, 20. if cuda else 1.)
        add('loader vs TabDataLoader (true shuffle), bs 32k-200k', name, 'stock_shuffle',
            worst(vs[name]['loader_speedup']), 200. if cuda else 10.)
        if cuda: add('one training epoch vs stock fastai', name, 'stock_shuffle', vs[name]['train_speedup'], 20.)
        else:
            add('peak RSS <= TabularPandas (ratio)', name, 'stock_shuffle', vs[name]['peak_rss_ratio'], 1., True)
            # CPU time is steadier than wall time where other jobs share the machine
            add('in-memory ETL (build + packing) vs TabularPandas, CPU time', name, 'least stock TabularPandas CPU',
                ratio(min(tc), cpu(cs[name])) if tc and cpu(cs[name]) else None, 1.5)
        held = cs[name].get('held_after_dataloaders') or {}
        if cuda: add('resident after dataloaders() <= packed rows (ratio)', name, 'its packed rows',
                     held.get('resident_vs_packed'), 1.2, True)
        if gpu: add('device memory after dataloaders() <= packed rows (ratio)', name, 'its packed rows',
                    cs[name].get('gpu_resident_vs_packed'), 1.2, True)
        gb = cs[name].get('gather_bandwidth')
        if gpu and gb:
            add('batch gather vs device copy bandwidth', name, 'copy_ of same-size buffers',
                worst({bs: d['fraction_of_copy'] for bs,d in gb.items()}), .5)
    return out

def _curve_growth(curve:dict) -> dict:
    "Per-row cost at the largest N over the smallest: the loader's, and the raw gather's (the memory system's floor)."
    out = {}
    for name,pts in curve.items():
        pts = [p for p in pts if p.get('loader_ns_per_row')]
        if len(pts) < 2: continue
        lo,hi = min(pts, key=lambda p: p['rows']),max(pts, key=lambda p: p['rows'])
        out[name] = {k: {bs: ratio(v, lo.get(k, {}).get(bs)) for bs,v in hi.get(k, {}).items()}
                     for k in ('loader_ns_per_row', 'gather_ns_per_row', 'overhead_ns_per_row') if hi.get(k)}
    return out

def format_table(res:dict) -> str:
    "The run as text: hardware, contender x metric, ratios against each stock loader, targets, caps."
    m,cs = res['meta'],res['contenders']
    hw,v = m['hardware'],m['versions']
    out = [f"fastai_gpu_tabular bench: {m['data']['rows']:,} rows, device {m['args']['device']}, {m['timestamp']}",
           (f"CPU {hw['cpu']} ({hw['cores_usable']}/{hw['cores']} cores), RAM {hw['ram_gb']} GB, GPU "
            f"{(hw['gpu'] or {}).get('name', 'none')}; load average {hw['loadavg'][0]} at the start, "
            f"{m.get('loadavg_end', ['?'])[0]} at the end; torch threads {m['args']['threads'] or 'default'}"),
           'versions: ' + ', '.join(f'{k} {x}' for k,x in v.items() if x), '']
    names = list(cs)
    bss = sorted({bs for c in cs.values() for bs in c.get('loader_rows_per_s', {})}, key=int)
    metrics = [('status', 'status'), ('preprocess s' + (', fastest build' if m['args'].get('repeat_preprocess', 1) > 1
                                                       else ''), 'preprocess_s'), ('dataloaders() s', 'dataloaders_s'),
               ('preprocess CPU s' + (', least' if m['args'].get('repeat_preprocess', 1) > 1 else ''),
                'preprocess_cpu_s'), ('dataloaders() CPU s', 'dataloaders_cpu_s'),
               ('peak RSS MB', 'peak_rss_mb'), ('RSS increase MB', 'rss_increase_mb'), ('peak GPU MB', 'peak_gpu_mb'),
               ('GPU peak during load+build MB', 'etl_peak_gpu_mb'),
               ('GPU allocated after dataloaders() MB', 'gpu_after_dataloaders_mb'),
               ('GPU allocated after dataloaders() / packed rows (x)', 'gpu_resident_vs_packed')]
    rows = [[lbl] + [cs[n].get(k) if k == 'status' else fmt(cs[n].get(k)) for n in names] for lbl,k in metrics]
    held = lambda n,k: fmt((cs[n].get('held_after_dataloaders') or {}).get(k))
    rows += [[lbl] + [held(n, k) for n in names] for lbl,k in (
        ('held after dataloaders(): frame MB', 'frame_mb'), ('held: packed rows MB', 'packed_mb'),
        ('held: frame+index+packed MB', 'resident_mb'), ('held / packed rows (x)', 'resident_vs_packed'))]
    if any(len(cs[n].get('preprocess_s_all') or ()) > 1 for n in names):   # the fastest build is the row above
        rows.insert(2, ['preprocess s, first build'] + [fmt((cs[n].get('preprocess_s_all') or [None])[0])
                                                        for n in names])
    for bs in bss:
        rows.append([f'loader rows/s bs={bs}'] + [fmt(cs[n].get('loader_rows_per_s', {}).get(bs)) +
                     ('*' if cs[n].get('loader_detail', {}).get(bs, {}).get('capped') else '') for n in names])
    for bs in bss:   # the loader against bare `index_select`s of the same packed rows: the gather's floor
        share = [cs[n].get('loader_detail', {}).get(bs, {}).get('loader_vs_bare') for n in names]
        if any(share): rows.append([f'loader / bare index_select rows/s bs={bs}'] + [fmt(x, 'x') for x in share])
    rows += [['train rows/s (1 epoch)'] + [fmt(cs[n].get('train_rows_per_s')) for n in names],
             ['end to end s (load, build, loaders, epoch, preds)'] + [fmt(cs[n].get('end_to_end_s')) for n in names],
             ['valid AUC'] + [fmt(cs[n].get('valid_auc'), 'num') if cs[n].get('valid_auc') is None
                              else f"{cs[n]['valid_auc']:.4f}" for n in names]]
    out.append(table(['metric'] + names, rows))
    for ref,vs in res['ratios'].items():
        if not vs: continue
        out += ['', f'ratios {ref} (speedup = reference time / contender time; RSS = contender / reference)']
        ns = list(vs)
        rows = [['preprocess speedup'] + [fmt(vs[n]['preprocess_speedup'], 'x') for n in ns],
                ['preprocess+dataloaders speedup'] + [fmt(vs[n]['preprocess_total_speedup'], 'x') for n in ns],
                ['preprocess+dataloaders CPU-time speedup'] + [fmt(vs[n].get('preprocess_total_cpu_speedup'), 'x')
                                                               for n in ns]]
        rows += [[f'loader speedup bs={bs}'] + [fmt(vs[n]['loader_speedup'].get(bs), 'x') for n in ns] for bs in bss]
        rows += [['train speedup'] + [fmt(vs[n]['train_speedup'], 'x') for n in ns],
                 ['end-to-end speedup'] + [fmt(vs[n].get('end_to_end_speedup'), 'x') for n in ns],
                 ['peak RSS ratio'] + [fmt(vs[n]['peak_rss_ratio'], 'x') for n in ns],
                 ['RSS increase ratio'] + [fmt(vs[n]['rss_increase_ratio'], 'x') for n in ns],
                 ['valid AUC delta'] + [fmt(vs[n]['valid_auc_delta'], 'd') for n in ns]]
        out.append(table(['metric'] + ns, rows))
    if res.get('targets'):
        out += ['', 'targets']
        rows = [[t['name'], t['contender'], fmt(t['value'], 'x'), f"{'<=' if 'ratio' in t['name'] else '>='} "
                 + f"{t['target']}x", {True: 'met', False: 'NOT met', None: '-'}[t['met']]] for t in res['targets']]
        out.append(table(['target', 'contender', 'value', 'target', ''], rows))
    for n in names:
        gb = cs[n].get('gather_bandwidth')
        if not gb: continue
        out.append(f'{n} gather vs copy_ of same-size buffers (GB/s): ' + ', '.join(
            f"bs={bs} {d['gather_gb_s']:.2f}/{d['copy_gb_s']:.2f} ({d['fraction_of_copy']:.0%})"
            for bs,d in gb.items()))
    for n in names:
        fb = cs[n].get('cpu_fallbacks')
        if fb is not None:
            out.append(f'{n}: operations cudf.pandas ran on the CPU (calls): '
                       + (', '.join(f'{k} {v}' for k,v in fb.items()) or 'none'))
    capped = [f"{n} bs={bs} ({d['method']}, {d['rows']:,} rows in {d['seconds']:.0f} s)" for n in names
              for bs,d in cs[n].get('loader_detail', {}).items() if d.get('capped')]
    if capped: out.append(f"* capped at --max-loader-s {m['args']['max_loader_s']}: " + '; '.join(capped))
    for n in names:
        if cs[n].get('status') != 'ok': out.append(f"{n}: {cs[n]['status']}: {cs[n].get('reason')}")
    for name,pts in res.get('curve', {}).items():
        ks = [k for k in ('loader_ns_per_row', 'gather_ns_per_row', 'overhead_ns_per_row')
              if any(p.get(k) for p in pts)]
        what = (', of bare gathers (a randperm, then an index_select a batch: the memory system\'s floor) and of the '
                'loader\'s own work (loader - gather)') if len(ks) > 1 else ''
        out += ['', f'cost curve {name}: ns per row of the loader{what}; growth = largest N / smallest N']
        rows = [[f"{p['rows']:,}", fmt(p.get('preprocess_us_per_row'))] +
                [fmt(p.get(k, {}).get(bs)) for bs in bss for k in ks] for p in pts]
        g = res.get('curve_growth', {}).get(name, {})
        rows.append(['growth', ''] + [fmt(g.get(k, {}).get(bs), 'x') for bs in bss for k in ks])
        out.append(table(['rows', 'prep us/row'] + [f"{k.split('_')[0]} bs={bs}" for bs in bss for k in ks], rows))
    return '\n'.join(out)

def plot_ratios(res:dict, path) -> Path:
    "A PNG of the speedups against each stock loader (log scale, targets dashed), and the cost curve if there is one."
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    refs = [(ref, vs) for ref,vs in res['ratios'].items() if vs]
    curve = {n: pts for n,pts in res.get('curve', {}).items() if len(pts) > 1}
    n_ax = max(len(refs), 1) + (1 if curve else 0)
    fig = Figure(figsize=(6.5 * n_ax, 5), layout='constrained')
    FigureCanvasAgg(fig)
    axs = fig.subplots(1, n_ax, squeeze=False)[0]
    gpu = res['meta']['args']['device'] == 'cuda'
    for ax,(ref,vs) in zip(axs, refs):
        names = list(vs)
        bss = sorted({bs for v in vs.values() for bs in v['loader_speedup']}, key=int)
        labels = ['preprocess'] + [f'loader\nbs={int(bs):,}' for bs in bss] + ['train\nepoch', 'peak RSS\n(ref/ours)']
        w = 0.8 / max(len(names), 1)
        for i,n in enumerate(names):
            v = vs[n]
            ys = [v['preprocess_speedup']] + [v['loader_speedup'].get(bs) for bs in bss] + \
                 [v['train_speedup'], ratio(1., v['peak_rss_ratio'])]
            xs = [j + (i - (len(names) - 1) / 2) * w for j in range(len(labels))]
            ax.bar(xs, [y if y else 0 for y in ys], w, label=n)
            for x,y in zip(xs, ys):
                if y: ax.annotate(f'{y:.2g}x', (x, y), ha='center', va='bottom', fontsize=7)
        tg = {'preprocess': 20. if gpu else 1., 'peak RSS\n(ref/ours)': None if gpu else 1.}
        for bs in bss:
            if 32768 <= int(bs) <= 204800: tg[f'loader\nbs={int(bs):,}'] = 200. if gpu else 10.
        if gpu: tg['train\nepoch'] = 20.
        for j,lbl in enumerate(labels):   # the targets are set against TabDataLoader's true shuffle
            if ref == 'vs_stock_shuffle' and tg.get(lbl): ax.hlines(tg[lbl], j - .45, j + .45, colors='red', ls='--')
        ax.axhline(1, color='grey', lw=0.8)
        ax.set_yscale('log')
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_ylabel(f'speedup vs {ref[3:]} (x, log)')
        ax.set_title(f"vs {ref[3:]}: {res['meta']['data']['rows']:,} rows, {res['meta']['args']['device']}, "
                     f"torch threads {res['meta']['args']['threads'] or 'default'}"
                     + ("\n(red dashes: the targets)" if ref == 'vs_stock_shuffle' else ''), fontsize=9)
        ax.legend(fontsize=8)
    if curve:
        ax = axs[-1]
        for n,pts in curve.items():
            for bs in sorted({bs for p in pts for bs in p.get('loader_ns_per_row', {})}, key=int):
                for k,st,lbl in (('loader_ns_per_row', 'o-', 'loader'), ('gather_ns_per_row', 'x:', 'bare gather')):
                    p2 = [p for p in pts if bs in p.get(k, {})]
                    if len(p2) < 2: continue
                    ax.plot([p['rows'] for p in p2], [p[k][bs] for p in p2], st, label=f'{n} {lbl} bs={bs}')
        ax.set_xscale('log')
        ax.set_yscale('log')
        ax.set_xlabel('rows')
        ax.set_ylabel('loader ns per row')
        ax.set_title('loader cost per row against N (flat = no growth)', fontsize=9)
        ax.legend(fontsize=7)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path

# --- the run -------------------------------------------------------------------------------------------------------
def _parquet_rows(path):
    import pyarrow.parquet as pq
    return pq.read_metadata(path).num_rows

def _make_data(path, rows, seed) -> float:
    "Write the synthetic parquet in a child process (its multi-GB peak stays out of this one); seconds taken."
    t0 = time.perf_counter()
    code = ('import sys; from fastai_gpu_tabular.datasets import criteo_parquet; '
            'criteo_parquet(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))')
    subprocess.run([sys.executable, '-c', code, str(path), str(rows), str(seed)], check=True)
    return round(time.perf_counter() - t0, 2)

def _spawn(name, opts, data, no_train=False) -> dict:
    "Run one contender in a fresh interpreter; a crash or timeout becomes a 'failed' record."
    if name in NEED_CUDF:   # what is known without importing cuDF (which starts CUDA) skips without a process
        import importlib.util
        if importlib.util.find_spec('cudf') is None: return {'status': 'skipped', 'reason': 'cuDF is not installed'}
        if opts.device != 'cuda': return {'status': 'skipped', 'reason': 'cuDF needs a GPU: --device cuda'}
    pre = []
    if name == 'stock_cudf_pandas':   # cudf.pandas must be installed before pandas is first imported
        pre = ['-c', 'import runpy, sys, cudf.pandas; cudf.pandas.install(); '
                     "runpy.run_module('fastai_gpu_tabular.bench', run_name='__main__')"]
    with tempfile.TemporaryDirectory() as d:
        o = {**vars(opts), 'data': str(data), 'no_train': opts.no_train or no_train}
        Path(d, 'opts.json').write_text(json.dumps(o))
        cmd = [sys.executable, *(pre or ['-m', 'fastai_gpu_tabular.bench']), '--worker', name, '--worker-dir', d]
        return run_child(cmd, opts.timeout, Path(d, 'result.json'))

def run_child(cmd, timeout, out) -> dict:
    "Run `cmd` and read the JSON record it writes to `out`; a crash or a timeout becomes a 'failed' record."
    try: p = subprocess.run(cmd, timeout=timeout, check=False)
    except subprocess.TimeoutExpired: return {'status': 'failed', 'reason': f'timed out after {timeout} s'}
    if Path(out).exists(): return json.loads(Path(out).read_text())
    why = ' (killed: out of memory?)' if p.returncode in (-9, 137) else ''
    return {'status': 'failed', 'reason': f'the worker exited with code {p.returncode}{why} and wrote no result'}

def worker(name, d):
    o = json.loads(Path(d, 'opts.json').read_text())
    opts = argparse.Namespace(**o)
    res = {}
    try: run_contender(name, opts, res)
    except Exception as e:   # what was measured before the error is kept
        traceback.print_exc()
        res.update(status='failed', reason=f'{type(e).__name__}: {e}')
    Path(d, 'result.json').write_text(json.dumps(res, default=str))

def _curve_point(c):
    p = {'rows': c['rows'], 'preprocess_s': c.get('preprocess_s'), 'peak_rss_mb': c.get('peak_rss_mb'),
         'loader_rows_per_s': c.get('loader_rows_per_s', {})}
    p['preprocess_us_per_row'] = 1e6 * p['preprocess_s'] / c['rows'] if p['preprocess_s'] else None
    p['loader_ns_per_row'] = {bs: 1e9 / v for bs,v in p['loader_rows_per_s'].items() if v}
    # the bare gather, timed between the loader's epochs: what is left over is the loader's own cost
    det = {bs: d for bs,d in c.get('loader_detail', {}).items() if 'bare_ns_per_row' in d}
    if det:
        p['gather_ns_per_row'] = {bs: d['bare_ns_per_row'] for bs,d in det.items()}
        p['overhead_ns_per_row'] = {bs: d['overhead_ns_per_row'] for bs,d in det.items()}
    return p

def run_bench(opts) -> dict:
    "Every contender in `opts.contenders`, each in its own process, plus ratios, targets and the optional cost curve."
    t_start = time.perf_counter()
    data = Path(opts.data) if opts.data else Path(opts.out).parent/f'criteo_{opts.rows}_s{opts.seed}.parquet'
    make_s = None if data.exists() else _make_data(data, opts.rows, opts.seed)
    rows = _parquet_rows(data)
    if opts.rows and rows != opts.rows:
        print(f'[bench] note: {data} holds {rows:,} rows, not --rows {opts.rows:,}', file=sys.stderr)
    opts.rows = rows
    meta = {'schema_version': SCHEMA_VERSION, 'timestamp': datetime.now(UTC).isoformat(timespec='seconds'),
            'command': ' '.join(['python -m fastai_gpu_tabular.bench'] + [shlex.quote(a) for a in opts.argv]),
            'hardware': hardware(opts.device), 'versions': versions(), 'git': git_state(),
            'args': {k: v for k,v in vars(opts).items() if k != 'argv'},
            'data': {'path': str(data), 'rows': rows, 'seed': opts.seed, 'bytes': data.stat().st_size,
                     'make_s': make_s}}
    res = {'meta': meta, 'contenders': {}}
    for name in opts.contenders:
        t0 = time.perf_counter()
        res['contenders'][name] = c = _spawn(name, opts, data)
        print(f"[bench] {name}: {c['status']} in {time.perf_counter() - t0:.0f} s"
              + (f" ({c['reason']})" if c.get('reason') else ''), file=sys.stderr, flush=True)
    if opts.curve:
        res['curve'] = {}
        for n in opts.curve:
            p = data if n == rows else Path(opts.out).parent/f'criteo_{n}_s{opts.seed}.parquet'
            if not p.exists(): _make_data(p, n, opts.seed)
            for name in opts.curve_contenders:
                main_run = res['contenders'].get(name, {})
                # the main run already measured this N: no second process
                c = main_run if n == rows and main_run.get('status') == 'ok' else _spawn(name, opts, p, no_train=True)
                if c['status'] == 'ok': res['curve'].setdefault(name, []).append(_curve_point(c))
                print(f"[bench] curve {name} {n:,} rows: {c['status']}", file=sys.stderr, flush=True)
        res['curve_growth'] = _curve_growth(res['curve'])
    res['ratios'] = compute_ratios(res['contenders'])
    res['targets'] = check_targets(res)
    meta['wall_s'] = round(time.perf_counter() - t_start, 1)
    meta['loadavg_end'] = [round(x, 2) for x in os.getloadavg()]
    return res

