"""`python -m fastai_gpu_tabular.bench`: stock fastai against this package on the same Criteo-like data and machine.

Each contender runs in its own fresh subprocess (so peak memory is its own) on the same parquet file:
`stock_weighted` (`TabularPandas` + its default `TabWeightedDL`, sampling with replacement), `stock_shuffle`
(`TabularPandas` + `TabDataLoader`, a true shuffle), `gpu_pandas` (`TabularGPU` on pandas + `BatchDataLoader`) and
`gpu_cudf` (the same on a cuDF frame; skipped, with the reason, where cuDF is not usable).

The JSON it writes (schema_version 1; sizes in MB = 2**20 bytes, batch sizes as string keys):

    meta        {schema_version, timestamp, wall_s, command, hardware{cpu, cores, cores_usable, ram_gb, gpu, platform,
                 python, loadavg}, loadavg_end, versions{torch, fastai, ...}, git{commit, changed}, args{...},
                 data{path, rows, seed, bytes, make_s}}
    contenders  {name: {status 'ok'|'skipped'|'failed', reason, tabular_type, loader_type, backend, device,
                 torch_threads, rows, n_train, n_valid, n_cat, n_cont, load_s, preprocess_s (the fastest build),
                 preprocess_s_all, dataloaders_s, baseline_rss_mb, peak_rss_mb, rss_increase_mb, rss_phases_mb{phase:
                 peak}, rss_method, peak_gpu_mb, gpu_detail{...}, loader_rows_per_s{bs: rows/s}, loader_detail{bs:
                 {rows_per_s, method, capped, epochs, epoch_rows_per_s, mean_rows_per_s, bare_ns_per_row,
                 overhead_ns_per_row, ...}}, loader_capped,
                 batch[[shape, dtype, device]], gather_bandwidth{bs: {...}}, train_rows_per_s, train_s, train_rows,
                 train_bs, train_loss, valid_s, valid_auc, model{...}, wall_s, cpu_s, loadavg_start, loadavg_end}}
    ratios      {vs_stock_shuffle|vs_stock_weighted: {name: {preprocess_speedup, preprocess_total_speedup,
                 loader_speedup{bs}, train_speedup, peak_rss_ratio, rss_increase_ratio, valid_auc_delta}}}
                 (speedups are reference time / contender time: >1 is faster; memory ratios are contender / reference)
    targets     [{name, contender, reference, value, target, met}] (DESIGN.md's targets for the device)
    curve       {name: [{rows, preprocess_s, preprocess_us_per_row, loader_rows_per_s{bs}, loader_ns_per_row{bs},
                 gather_ns_per_row{bs}, overhead_ns_per_row{bs}, peak_rss_mb}]} (the gather keys for packed tensors)
    curve_growth {name: {loader_ns_per_row|gather_ns_per_row|overhead_ns_per_row: {bs: value at the largest N / at
                 the smallest}}}
"""
from __future__ import annotations

import argparse, gc, json, os, platform, re, shlex, subprocess, sys, tempfile, threading, time, traceback
from datetime import UTC, datetime
from functools import partial
from importlib import metadata
from pathlib import Path

__all__ = ['CONTENDERS', 'SCHEMA_VERSION', 'hardware', 'versions', 'git_state', 'RSSMeter', 'time_loader', 'bare_epoch',
           'gather_bandwidth', 'run_contender', 'compute_ratios', 'check_targets', 'format_table', 'plot_ratios',
           'run_bench', 'embedding_suite', 'multi_hot_suite', 'main']

CONTENDERS = ('stock_weighted', 'stock_shuffle', 'gpu_pandas', 'gpu_cudf')
REFERENCES = ('stock_shuffle', 'stock_weighted')
SCHEMA_VERSION = 1
_MB = 2**20

# --- the machine ---------------------------------------------------------------------------------------------------
def _cpu_model():
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'): return line.split(':', 1)[1].strip()
    except OSError: pass
    return platform.processor() or platform.machine()

def _ram_gb():
    try: return round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30, 1)
    except (ValueError, OSError, AttributeError): return None

def _gpu():
    "The GPUs as nvidia-smi lists them: asked in a child process, so this one makes no CUDA context."
    try:
        q = ['nvidia-smi', '--query-gpu=name,memory.total,driver_version', '--format=csv,noheader,nounits']
        out = subprocess.run(q, capture_output=True, text=True, timeout=30, check=True).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError): return None
    name,mem,driver = [x.strip() for x in out[0].split(',')]
    return {'name': name, 'memory_gb': round(float(mem) / 1024, 1), 'driver': driver, 'count': len(out)}

def hardware(device='cpu') -> dict:
    "CPU model, cores, RAM and (on CUDA) the GPU: what a reader needs to compare two runs."
    gpu = _gpu() if device == 'cuda' else None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    return {'cpu': _cpu_model(), 'cores': os.cpu_count(), 'cores_usable': cores, 'ram_gb': _ram_gb(), 'gpu': gpu,
            'platform': platform.platform(), 'python': platform.python_version(),
            'loadavg': [round(x, 2) for x in os.getloadavg()]}

def _version(*dists):
    for d in dists:
        try: return metadata.version(d)
        except metadata.PackageNotFoundError: pass
    return None

def git_state() -> dict|None:
    "The checkout this package runs from: commit and changed files (other work in progress shows up here)."
    root = Path(__file__).resolve().parent.parent
    if not (root/'.git').exists(): return None
    try:
        git = lambda *a: subprocess.run(['git', '-C', str(root), *a], capture_output=True, text=True, timeout=30,
                                        check=True).stdout.strip()
        return {'commit': git('rev-parse', 'HEAD'), 'changed': git('status', '--porcelain').splitlines()}
    except (OSError, subprocess.SubprocessError): return None

def versions() -> dict:
    "Installed versions, read from package metadata: nothing is imported (cuDF would start CUDA)."
    pkgs = {'fastai_gpu_tabular': ('fastai_gpu_tabular',), 'torch': ('torch',), 'fastai': ('fastai',),
            'fastcore': ('fastcore',), 'fasttransform': ('fasttransform',), 'pandas': ('pandas',), 'numpy': ('numpy',),
            'pyarrow': ('pyarrow',), 'cudf': ('cudf-cu13', 'cudf-cu12', 'cudf'),
            'cupy': ('cupy-cuda13x', 'cupy-cuda12x', 'cupy'), 'rmm': ('rmm-cu13', 'rmm-cu12', 'rmm')}
    return {k: _version(*v) for k,v in pkgs.items()}

# --- memory --------------------------------------------------------------------------------------------------------
def _status_mb(key):
    m = re.search(rf'^{key}:\s+(\d+) kB', Path('/proc/self/status').read_text(), re.MULTILINE)
    return int(m.group(1)) / 1024 if m else None

class RSSMeter:
    "Peak resident memory of this process, per phase: Linux's VmHWM, reset through /proc/self/clear_refs."
    def __init__(self):
        try:
            self.reset()
            self.method = 'VmHWM'
        except OSError: self.method = 'ru_maxrss'   # not resettable: every phase reports the process peak so far

    def reset(self):
        "Start a phase: the high-water mark drops to the current RSS."
        with open('/proc/self/clear_refs', 'w') as f: f.write('5')

    def now(self) -> float:
        "Current RSS in MB."
        if self.method == 'VmHWM': return _status_mb('VmRSS')
        try: import psutil
        except ImportError: return self.peak()
        return psutil.Process().memory_info().rss / _MB

    def peak(self) -> float:
        "Peak RSS in MB since the last `reset`."
        if self.method == 'VmHWM': return _status_mb('VmHWM')
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (_MB if sys.platform == 'darwin' else 1024)

    def phase(self, phases:dict, name:str):
        "Record this phase's peak under `name` and start the next one."
        phases[name] = round(self.peak(), 1)
        if self.method == 'VmHWM': self.reset()

class _GPUMeter:
    "Peak device memory: torch's allocator, RMM's (cuDF) when its statistics can be enabled, and the device as a whole."
    def __init__(self, device, rmm_stats=False):
        import torch
        self.torch,self.on = torch,device.type == 'cuda'
        self.rmm,self.used_peak,self._stop = None,0,threading.Event()
        if not self.on: return
        if rmm_stats:
            try:
                import rmm.statistics   # must wrap the memory resource before cuDF allocates
                rmm.statistics.enable_statistics()
                self.rmm = rmm.statistics
            except Exception: self.rmm = None   # an older RMM, or none: the device-wide poller still counts cuDF
        free,total = torch.cuda.mem_get_info()
        self.base_used = total - free
        # a poller sees what neither allocator counts (CuPy's pool, the CUDA context), at 10 ms resolution
        self._t = threading.Thread(target=self._poll, daemon=True)
        self._t.start()

    def _poll(self):
        while not self._stop.wait(0.01):
            free,total = self.torch.cuda.mem_get_info()
            self.used_peak = max(self.used_peak, total - free)

    def reset_base(self):
        if not self.on: return
        self.torch.cuda.reset_peak_memory_stats()

    def result(self) -> tuple:
        if not self.on: return None, {}
        self._stop.set()
        detail = {'torch_max_allocated_mb': self.torch.cuda.max_memory_allocated() / _MB,
                  'device_used_increase_mb': max(self.used_peak - self.base_used, 0) / _MB}
        if self.rmm is not None:
            try: detail['rmm_peak_mb'] = self.rmm.get_statistics().peak_bytes / _MB
            except Exception: pass   # statistics off after all (another memory resource was set): leave it out
        detail = {k: round(v, 1) for k,v in detail.items()}
        return round(detail['torch_max_allocated_mb'] + detail.get('rmm_peak_mb', 0), 1), detail

# --- timing --------------------------------------------------------------------------------------------------------
def _sync(device):
    if getattr(device, 'type', device) == 'cuda':
        import torch
        torch.cuda.synchronize()

def _touch(b):
    "Read each yielded tensor (its last row), as a training step would, without forcing a device sync."
    for t in b: t[-1].sum()

def _epoch(dl, deadline, device):
    "One pass over `dl`, stopping past `deadline`: (seconds, rows, batches, first_batch_s, complete)."
    t0 = time.perf_counter()
    rows = nb = 0
    first = None
    for b in dl:
        _touch(b)
        rows += len(b[0])
        nb += 1
        if first is None:
            _sync(device)
            first = time.perf_counter() - t0
        if time.perf_counter() > deadline: break
    _sync(device)
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
    _sync(device)
    return time.perf_counter() - t0, n // bs * bs

def time_loader(dl, epochs=2, warmup=1, max_s=None, device='cpu', stat='best', bare=None) -> dict:
    """Rows/s of shuffled epochs of `dl` after `warmup` epochs (allocator and page-cache warm-up): the `best` complete
    epoch (least disturbed by other processes) or their `mean`. Past `max_s` seconds it stops; with no complete epoch,
    rows/s comes from the epoch extrapolated to its end. `bare()` -> (seconds, rows), if given, runs after each epoch,
    so that the loader's own cost (loader - bare) is measured under the same conditions."""
    inf = float('inf') if max_s is None else max_s
    t0 = time.perf_counter()
    for _ in range(warmup):
        if not _epoch(dl, t0 + inf / 2, device)[-1]: break   # a partial warm-up is enough for per-batch costs
    t0,runs,bares = time.perf_counter(),[],[]
    for _ in range(epochs):
        runs.append(_epoch(dl, t0 + inf, device))
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
    k = max(2, -(-floor_mb * _MB // nbytes))
    src = torch.ones(k, nbytes, dtype=torch.uint8, device=dev)   # written: untouched pages would all read one zero page
    dst = torch.empty_like(src)
    def _time(f, count):
        for j in range(count): f(j)   # a first pass faults the pages in
        _sync(dev)
        t0,j = time.perf_counter(),0
        while j < count or time.perf_counter() - t0 < 0.2:   # small batches: enough calls for a stable mean
            f(j)
            j += 1
        _sync(dev)
        return (time.perf_counter() - t0) / j
    tg = _time(lambda j: [t.index_select(0, idxs[j % len(idxs)]) for t in tensors], len(idxs))
    tc = _time(lambda j: dst[j % k].copy_(src[(j + 1) % k]), k)
    return {'bs': bs, 'bytes_per_batch': nbytes, 'gather_s': tg, 'copy_s': tc, 'gather_gb_s': nbytes / tg / 1e9,
            'copy_gb_s': nbytes / tc / 1e9, 'fraction_of_copy': tc / tg, 'gather_ns_per_row': tg / bs * 1e9}

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
            _sync(self.device)
            self.rows,self.batches,self.t0 = 0,0,time.perf_counter()
        def after_batch(self):
            if not self.learn.training: return
            self.rows += find_bs(self.learn.yb)
            self.batches += 1
            if self.max_batches and self.batches >= self.max_batches: raise CancelTrainException()
        def after_train(self):
            _sync(self.device)
            self.train_s = time.perf_counter() - self.t0
    return EpochTimer

def _train(res, dls, to, opts, device):
    "One epoch of the same fixed `TabularModel` for every contender; rows/s of the training pass, validation AUC."
    import numpy as np
    import fastai.callback.progress, fastai.callback.schedule  # noqa: F401  (they patch `no_bar`, `fit_one_cycle`)
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
        from .backend import require_cudf
        return require_cudf().read_parquet(path)
    import pandas as pd
    return pd.read_parquet(path)

def _setup_contender(name, opts, res):
    "Load the frame; return what the phases share. None when `name` cannot run here (then `res` says why)."
    if name == 'gpu_cudf':
        from .backend import cudf_available, cudf_reason
        why = f'cuDF is not usable: {cudf_reason()}' if not cudf_available() else \
              'cuDF frames live on a GPU: run with --device cuda' if opts.device != 'cuda' else None
        if why:
            res.update(status='skipped', reason=why)
            return None
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
    gpu = _GPUMeter(device, rmm_stats=name == 'gpu_cudf')
    t0 = time.perf_counter()
    df = _read_frame(opts.data, name == 'gpu_cudf')
    _sync(device)
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
    from .core import TabularGPU
    from .data import criteo_names
    cats,conts,y = criteo_names()
    cls = TabularPandas if name.startswith('stock') else TabularGPU
    def build():
        t0 = time.perf_counter()
        # fresh name lists: fastai's FillMissing appends the `_na` columns to the caller's `cat_names`
        to = cls(ctx.df, procs=[Categorify, FillMissing, Normalize], cat_names=list(cats), cont_names=list(conts),
                 y_names=y, y_block=CategoryBlock() if opts.target == 'category' else None, splits=ctx.splits)
        _sync(ctx.device)
        return to,round(time.perf_counter() - t0, 3)
    return build

def _packed_tensors(dl) -> tuple|None:
    "What a `BatchDataLoader` batch gathers from: one packed row buffer (or, before it, one tensor per kind)."
    from .loader import BatchDataLoader
    if not isinstance(dl, BatchDataLoader): return None
    return (dl.rows[0],) if hasattr(type(dl), 'rows') else tuple(dl.tensors)

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

def run_contender(name:str, opts, res:dict|None=None) -> dict:
    "Measure contender `name` in this process (a fresh one: peak RSS is the whole process's), filling `res`."
    if name not in CONTENDERS: raise ValueError(f"unknown contender {name!r}: pick from {CONTENDERS}")
    t_start = time.perf_counter()
    res = {} if res is None else res
    res.update(status='ok', reason=None, device=opts.device, loadavg_start=[round(x, 2) for x in os.getloadavg()])
    ctx = _setup_contender(name, opts, res)
    if ctx is None: return res
    from fastai.tabular.core import TabDataLoader
    build = _builder(name, opts, ctx)
    _log(name, f'{res["rows"]:,} rows loaded in {res["load_s"]:.1f} s')
    to,t = build()
    res['preprocess_s'],res['preprocess_s_all'] = t,[t]
    ctx.rss.phase(ctx.phases, 'preprocess')
    t0 = time.perf_counter()
    dl_kw = {'dl_type': TabDataLoader} if name == 'stock_shuffle' else {}   # else the Tabular's own: fastai's default
    dls = to.dataloaders(bs=opts.train_bs, device=ctx.device, **dl_kw)
    _sync(ctx.device)
    res['dataloaders_s'] = round(time.perf_counter() - t0, 3)
    ctx.rss.phase(ctx.phases, 'dataloaders')
    b = dls.train.one_batch()
    res.update(tabular_type=type(to).__name__, loader_type=type(dls.train).__name__, n_cat=len(to.cat_names),
               n_cont=len(to.cont_names), backend='cudf' if name == 'gpu_cudf' else 'pandas',
               batch=[[list(x.shape), str(x.dtype).replace('torch.', ''), str(x.device)] for x in b])
    _log(name, f'{res["tabular_type"]} in {t:.2f} s, dataloaders() in {res["dataloaders_s"]:.2f} s '
               f'({res["loader_type"]})')
    _loaders(name, opts, ctx, dls, res)
    ctx.rss.phase(ctx.phases, 'loader')
    if not opts.no_train:
        _train(res, dls, to, opts, ctx.device)
        _log(name, f'train {res["train_rows_per_s"]:,.0f} rows/s, valid AUC {res["valid_auc"]}')
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
        res['preprocess_s_all'].append(build()[1])
    res['preprocess_s'] = min(res['preprocess_s_all'])
    res['wall_s'] = round(time.perf_counter() - t_start, 2)
    # other processes on the machine show up here: cpu_s far below wall_s x cores, or a load above the core count
    res['cpu_s'] = round(sum(os.times()[:2]), 2)
    res['loadavg_end'] = [round(x, 2) for x in os.getloadavg()]
    return res

# --- comparing -----------------------------------------------------------------------------------------------------
def _ratio(a, b):
    "a/b, or None when either is missing or b is not positive."
    if a is None or b is None or b <= 0 or a < 0: return None
    return a / b

def compute_ratios(contenders:dict) -> dict:
    "Every ok contender against each ok reference: speedups (>1 faster) and memory ratios (<1 smaller)."
    out = {}
    for ref in REFERENCES:
        r = contenders.get(ref, {})
        if r.get('status') != 'ok': continue
        vs = out[f'vs_{ref}'] = {}
        for name,c in contenders.items():
            if name == ref or c.get('status') != 'ok': continue
            tot = lambda o: (o.get('preprocess_s') or 0) + (o.get('dataloaders_s') or 0)
            auc = (c.get('valid_auc'), r.get('valid_auc'))
            vs[name] = {
                'preprocess_speedup': _ratio(r.get('preprocess_s'), c.get('preprocess_s')),
                'preprocess_total_speedup': _ratio(tot(r), tot(c)),
                'loader_speedup': {bs: _ratio(v, r.get('loader_rows_per_s', {}).get(bs))
                                   for bs,v in c.get('loader_rows_per_s', {}).items()},
                'train_speedup': _ratio(c.get('train_rows_per_s'), r.get('train_rows_per_s')),
                'peak_rss_ratio': _ratio(c.get('peak_rss_mb'), r.get('peak_rss_mb')),
                # a tiny increase (small data) would make a meaningless ratio
                'rss_increase_ratio': _ratio(c.get('rss_increase_mb'), r.get('rss_increase_mb'))
                                      if (r.get('rss_increase_mb') or 0) > 64 else None,
                'valid_auc_delta': None if None in auc else auc[0] - auc[1]}
    return out

def check_targets(res:dict) -> list:
    "DESIGN.md's targets for this run's device, each with the measured value and whether it is met."
    gpu = res['meta']['args']['device'] == 'cuda'
    cs,vs = res['contenders'],res['ratios'].get('vs_stock_shuffle', {})
    # both stock contenders build the same TabularPandas: the faster build is the (stricter) reference
    tp = [cs[n]['preprocess_s'] for n in REFERENCES if cs.get(n, {}).get('status') == 'ok']
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
            _ratio(min(tp), cs[name].get('preprocess_s')) if tp else None, 20. if cuda else 1.)
        add('loader vs TabDataLoader (true shuffle), bs 32k-200k', name, 'stock_shuffle',
            worst(vs[name]['loader_speedup']), 200. if cuda else 10.)
        if cuda: add('one training epoch vs stock fastai', name, 'stock_shuffle', vs[name]['train_speedup'], 20.)
        else: add('peak RSS <= TabularPandas (ratio)', name, 'stock_shuffle', vs[name]['peak_rss_ratio'], 1., True)
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
        out[name] = {k: {bs: _ratio(v, lo.get(k, {}).get(bs)) for bs,v in hi.get(k, {}).items()}
                     for k in ('loader_ns_per_row', 'gather_ns_per_row', 'overhead_ns_per_row') if hi.get(k)}
    return out

# --- reporting -----------------------------------------------------------------------------------------------------
def _fmt(v, kind='num'):
    if v is None: return '-'
    if isinstance(v, str): return v
    if kind == 'x': return f'{v:.2f}x'
    if kind == 'd': return f'{v:+.4f}'
    if abs(v) >= 1000: return f'{v:,.0f}'
    return f'{v:.3g}' if abs(v) < 10 else f'{v:.1f}'

def _table(header, rows) -> str:
    w = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: '  '.join(str(x).ljust(w[0]) if i == 0 else str(x).rjust(w[i]) for i,x in enumerate(r))
    return '\n'.join([line(header), '  '.join('-' * x for x in w)] + [line(r) for r in rows])

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
               ('peak RSS MB', 'peak_rss_mb'), ('RSS increase MB', 'rss_increase_mb'), ('peak GPU MB', 'peak_gpu_mb')]
    rows = [[lbl] + [cs[n].get(k) if k == 'status' else _fmt(cs[n].get(k)) for n in names] for lbl,k in metrics]
    if any(len(cs[n].get('preprocess_s_all') or ()) > 1 for n in names):   # the fastest build is the row above
        rows.insert(2, ['preprocess s, first build'] + [_fmt((cs[n].get('preprocess_s_all') or [None])[0])
                                                        for n in names])
    for bs in bss:
        rows.append([f'loader rows/s bs={bs}'] + [_fmt(cs[n].get('loader_rows_per_s', {}).get(bs)) +
                     ('*' if cs[n].get('loader_detail', {}).get(bs, {}).get('capped') else '') for n in names])
    rows += [['train rows/s (1 epoch)'] + [_fmt(cs[n].get('train_rows_per_s')) for n in names],
             ['valid AUC'] + [_fmt(cs[n].get('valid_auc'), 'num') if cs[n].get('valid_auc') is None
                              else f"{cs[n]['valid_auc']:.4f}" for n in names]]
    out.append(_table(['metric'] + names, rows))
    for ref,vs in res['ratios'].items():
        if not vs: continue
        out += ['', f'ratios {ref} (speedup = reference time / contender time; RSS = contender / reference)']
        ns = list(vs)
        rows = [['preprocess speedup'] + [_fmt(vs[n]['preprocess_speedup'], 'x') for n in ns],
                ['preprocess+dataloaders speedup'] + [_fmt(vs[n]['preprocess_total_speedup'], 'x') for n in ns]]
        rows += [[f'loader speedup bs={bs}'] + [_fmt(vs[n]['loader_speedup'].get(bs), 'x') for n in ns] for bs in bss]
        rows += [['train speedup'] + [_fmt(vs[n]['train_speedup'], 'x') for n in ns],
                 ['peak RSS ratio'] + [_fmt(vs[n]['peak_rss_ratio'], 'x') for n in ns],
                 ['RSS increase ratio'] + [_fmt(vs[n]['rss_increase_ratio'], 'x') for n in ns],
                 ['valid AUC delta'] + [_fmt(vs[n]['valid_auc_delta'], 'd') for n in ns]]
        out.append(_table(['metric'] + ns, rows))
    if res.get('targets'):
        out += ['', 'targets (DESIGN.md)']
        rows = [[t['name'], t['contender'], _fmt(t['value'], 'x'), f"{'<=' if 'ratio' in t['name'] else '>='} "
                 + f"{t['target']}x", {True: 'met', False: 'NOT met', None: '-'}[t['met']]] for t in res['targets']]
        out.append(_table(['target', 'contender', 'value', 'target', ''], rows))
    for n in names:
        gb = cs[n].get('gather_bandwidth')
        if not gb: continue
        out.append(f'{n} gather vs copy_ of same-size buffers (GB/s): ' + ', '.join(
            f"bs={bs} {d['gather_gb_s']:.2f}/{d['copy_gb_s']:.2f} ({d['fraction_of_copy']:.0%})"
            for bs,d in gb.items()))
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
        rows = [[f"{p['rows']:,}", _fmt(p.get('preprocess_us_per_row'))] +
                [_fmt(p.get(k, {}).get(bs)) for bs in bss for k in ks] for p in pts]
        g = res.get('curve_growth', {}).get(name, {})
        rows.append(['growth', ''] + [_fmt(g.get(k, {}).get(bs), 'x') for bs in bss for k in ks])
        out.append(_table(['rows', 'prep us/row'] + [f"{k.split('_')[0]} bs={bs}" for bs in bss for k in ks], rows))
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
                 [v['train_speedup'], _ratio(1., v['peak_rss_ratio'])]
            xs = [j + (i - (len(names) - 1) / 2) * w for j in range(len(labels))]
            ax.bar(xs, [y if y else 0 for y in ys], w, label=n)
            for x,y in zip(xs, ys):
                if y: ax.annotate(f'{y:.2g}x', (x, y), ha='center', va='bottom', fontsize=7)
        tg = {'preprocess': 20. if gpu else 1., 'peak RSS\n(ref/ours)': None if gpu else 1.}
        for bs in bss:
            if 32768 <= int(bs) <= 204800: tg[f'loader\nbs={int(bs):,}'] = 200. if gpu else 10.
        if gpu: tg['train\nepoch'] = 20.
        for j,lbl in enumerate(labels):   # DESIGN.md's targets are set against TabDataLoader's true shuffle
            if ref == 'vs_stock_shuffle' and tg.get(lbl): ax.hlines(tg[lbl], j - .45, j + .45, colors='red', ls='--')
        ax.axhline(1, color='grey', lw=0.8)
        ax.set_yscale('log')
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_ylabel(f'speedup vs {ref[3:]} (x, log)')
        ax.set_title(f"vs {ref[3:]}: {res['meta']['data']['rows']:,} rows, {res['meta']['args']['device']}, "
                     f"torch threads {res['meta']['args']['threads'] or 'default'}"
                     + ("\n(red dashes: DESIGN.md targets)" if ref == 'vs_stock_shuffle' else ''), fontsize=9)
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
    code = ('import sys; from fastai_gpu_tabular.data import criteo_parquet; '
            'criteo_parquet(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))')
    subprocess.run([sys.executable, '-c', code, str(path), str(rows), str(seed)], check=True)
    return round(time.perf_counter() - t0, 2)

def _spawn(name, opts, data, no_train=False) -> dict:
    "Run one contender in a fresh interpreter; a crash or timeout becomes a 'failed' record."
    with tempfile.TemporaryDirectory() as d:
        o = {**vars(opts), 'data': str(data), 'no_train': opts.no_train or no_train}
        Path(d, 'opts.json').write_text(json.dumps(o))
        cmd = [sys.executable, '-m', 'fastai_gpu_tabular.bench', '--worker', name, '--worker-dir', d]
        try: p = subprocess.run(cmd, timeout=opts.timeout, check=False)
        except subprocess.TimeoutExpired: return {'status': 'failed', 'reason': f'timed out after {opts.timeout} s'}
        out = Path(d, 'result.json')
        if out.exists(): return json.loads(out.read_text())
        why = ' (killed: out of memory?)' if p.returncode in (-9, 137) else ''
        return {'status': 'failed', 'reason': f'the worker exited with code {p.returncode}{why} and wrote no result'}

def _worker(name, d):
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

# --- RecSys suites: embedding tables, multi-hot layouts ------------------------------------------------------------
def _median_ms(ts): return round(1e3 * sorted(ts)[len(ts) // 2], 2)

def embedding_suite(n_table=1_000_000, dim=32, n_small=8, bs=32768, steps=40, device='cpu', seed=0) -> dict:
    """Dense vs sparse vs fused (vs fused sparse) tables, with a `n_table`-row table among `n_small` small ones, Adam for
    dense parameters: optimizer step ms, optimizer state MB (allocated) and training rows/s (forward, backward, step).
    Ids are power-law distributed, as a user table sees them: hot rows recur, most of the tail is never touched."""
    import torch
    from fastai.optimizer import Adam
    from .model import TabularModelGPU
    from .optimizer import sparse_opt
    g = torch.Generator().manual_seed(seed)
    ids = (torch.rand(steps, bs, generator=g) ** 3 * n_table).long().clamp(max=n_table - 1)
    small = torch.randint(0, 1000, (steps, bs, n_small), generator=g)
    x_cont, y = torch.randn(steps, bs, 13, generator=g), torch.randint(0, 2, (steps, bs), generator=g)
    emb, res = [(n_table, dim)] + [(1000, dim)] * n_small, {}
    for config in ('dense', 'sparse', 'fused', 'fused_sparse'):
        torch.manual_seed(seed)
        sparse = {'sparse': (0,), 'fused_sparse': tuple(range(len(emb)))}.get(config, ())
        model = TabularModelGPU(emb, 13, 2, [256, 128], sparse=sparse, fused=config.startswith('fused')).to(device)
        opt = (sparse_opt(Adam) if sparse else Adam)(list(model.parameters()), lr=1e-3)
        t_step, t_all = [], []
        for i in range(steps):
            x_cat = torch.cat([ids[i, :, None], small[i]], 1).to(device)
            t0 = time.perf_counter()
            torch.nn.functional.cross_entropy(model(x_cat, x_cont[i].to(device)), y[i].to(device)).backward()
            _sync(device); t1 = time.perf_counter()
            opt.step(); opt.zero_grad()
            _sync(device); t2 = time.perf_counter()
            if i >= 5: t_step.append(t2 - t1); t_all.append(t2 - t0)   # after the sparse state's first growth
        state = sum(v.numel() * v.element_size() for st in opt.state.values() for v in st.values()
                    if isinstance(v, torch.Tensor))
        big = opt.state[model.fused.weights[-1] if config.startswith('fused') else model.embeds[0].weight]
        res[config] = dict(step_ms=_median_ms(t_step), rows_per_s=round(bs / (sorted(t_all)[len(t_all) // 2])),
                           opt_state_mb=round(state / _MB, 1), table_mb=round(n_table * dim * 4 / _MB, 1),
                           rows_with_state=big.get('n', n_table + (n_small * 1000 + 1 if config.startswith('fused') else 0)))
    return res

def _list_lengths(kind, n, rng):
    if kind == 'genres': return rng.choice([1, 2, 3, 4, 5, 6], n, p=[.32, .36, .2, .08, .03, .01])   # MovieLens-like
    return rng.zipf(1.8, n).clip(max=100)   # a long tail: tags, items in a session

def multi_hot_suite(n=400_000, bs=32768, vocab=1000, dim=16, reps=3, device='cpu', seed=0) -> dict:
    """A multi-hot column as a padded block (this package's layout) or as values+offsets: per-batch gather ms, embedding
    bag forward+backward ms (padded: the model's `bag_lookup`; ragged: `embedding_bag` with offsets), and memory."""
    import numpy as np, torch, torch.nn.functional as F
    from .backend import pad_bags
    from .model import bag_lookup
    res = {}
    for kind in ('genres', 'long_tail'):
        lens = torch.as_tensor(_list_lengths(kind, n, np.random.default_rng(seed)), device=device)
        vals = torch.randint(0, vocab, (int(lens.sum()),), dtype=torch.int32, device=device)
        starts = torch.cumsum(lens, 0) - lens
        padded = pad_bags(vals, lens, int(lens.max()))
        w = torch.randn(vocab, dim, device=device, requires_grad=True)
        def ragged(idx):
            l = lens[idx]
            off = torch.cumsum(l, 0) - l
            return vals[torch.repeat_interleave(starts[idx] - off, l) + torch.arange(int(l.sum()), device=device)], off
        layouts = {'padded': (lambda idx: padded.index_select(0, idx), lambda c: bag_lookup(c, w)),
                   'values_offsets': (ragged, lambda vo: F.embedding_bag(vo[0], w, vo[1], mode='mean'))}
        r = {'mean_len': round(lens.float().mean().item(), 2), 'max_len': int(lens.max())}
        for name,(gather,bag) in layouts.items():
            tg, tb = [], []
            for _ in range(reps):
                perm = torch.randperm(n, device=device)
                for i in range(0, n - bs + 1, bs):
                    t0 = time.perf_counter(); b = gather(perm[i:i+bs]); _sync(device)
                    t1 = time.perf_counter(); bag(b).sum().backward(); _sync(device)
                    tg.append(t1 - t0); tb.append(time.perf_counter() - t1)
            mem = padded.numel() * 4 if name == 'padded' else (vals.numel() + 2 * n) * 4
            r[name] = dict(gather_ms=_median_ms(tg), bag_fwd_bwd_ms=_median_ms(tb), memory_mb=round(mem / _MB, 1))
        res[kind] = r
    return res

def run_suite(opts) -> dict:
    "One of the RecSys suites, with the machine and versions."
    import torch
    if opts.threads: torch.set_num_threads(opts.threads)
    t0 = time.perf_counter()
    res = (embedding_suite(device=opts.device, seed=opts.seed) if opts.suite == 'embeddings'
           else multi_hot_suite(device=opts.device, seed=opts.seed))
    meta = {'schema_version': SCHEMA_VERSION, 'suite': opts.suite, 'hardware': hardware(opts.device),
            'versions': versions(), 'timestamp': datetime.now(UTC).isoformat(timespec='seconds'),
            'command': ' '.join(['python -m fastai_gpu_tabular.bench'] + [shlex.quote(a) for a in opts.argv]),
            'wall_s': round(time.perf_counter() - t0, 1), 'torch_threads': torch.get_num_threads()}
    return {'meta': meta, opts.suite: res}

def format_suite(res) -> str:
    "The suite's results as a table."
    suite = res['meta']['suite']
    if suite == 'embeddings':
        rows = [[k, v['step_ms'], f"{v['rows_per_s']:,}", v['opt_state_mb'], v['table_mb'], f"{v['rows_with_state']:,}"]
                for k,v in res[suite].items()]
        return _table(['tables', 'optimizer step ms', 'train rows/s', 'optimizer state MB', 'big table MB',
                       'big table rows with state'], rows)
    rows = [[kind, f"{r['mean_len']} / {r['max_len']}", name, r[name]['gather_ms'], r[name]['bag_fwd_bwd_ms'],
             r[name]['memory_mb']] for kind,r in res[suite].items() for name in ('padded', 'values_offsets')]
    return _table(['lists', 'mean / max length', 'layout', 'gather ms', 'bag fwd+bwd ms', 'memory MB'], rows)

def _ints(s): return [int(float(x)) for x in s.split(',') if x]

def _names(s): return [x for x in s.split(',') if x]

def _parser():
    p = argparse.ArgumentParser(prog='python -m fastai_gpu_tabular.bench',
                                description='Stock fastai against fastai_gpu_tabular on the same synthetic Criteo-like '
                                            'data: preprocessing, loader, training and memory, each contender in its '
                                            'own process.')
    a = p.add_argument
    a('--rows', type=lambda s: int(float(s)), default=None,
      help='rows of synthetic data (default 1,000,000; with --data, those of the file)')
    a('--device', choices=['cpu', 'cuda'], default='cpu')
    a('--bs', type=_ints, default=[4096, 32768, 204800], help='loader batch sizes, comma separated')
    a('--out', default='bench_results.json', help='the JSON results file')
    a('--png', default=None, help='the ratio chart (default: next to --out, .png)')
    a('--seed', type=int, default=0, help='seed of the data, the split and the model')
    a('--data', default=None, help='a parquet file to reuse (made with `criteo_parquet` if missing; default '
      'criteo_<rows>_s<seed>.parquet next to --out)')
    a('--contenders', type=_names, default=list(CONTENDERS), help=f'a subset of {",".join(CONTENDERS)}')
    a('--epochs-loader', type=int, default=2, help='timed loader epochs per batch size')
    a('--warmup-epochs', type=int, default=1, help='untimed loader epochs first')
    a('--max-loader-s', type=float, default=120., help='cap on timed seconds per contender and batch size: past it, '
      'rows/s comes from the complete epochs, or the epoch extrapolated (recorded as capped)')
    a('--stat', choices=['best', 'mean'], default='best', help='loader rows/s of the best timed epoch (steadiest '
      'where other jobs share the machine) or of all timed epochs')
    a('--repeat-preprocess', type=int, default=1, help='build the Tabular this many times; the fastest counts '
      '(memory is measured on the first)')
    a('--no-loader', action='store_true', help='skip the loader timings')
    a('--no-train', action='store_true', help='skip the training epoch')
    a('--train-bs', type=int, default=None, help='batch size of the training epoch (default: the middle --bs)')
    a('--train-max-batches', type=int, default=None, help='stop the training epoch after this many batches '
      '(every contender alike)')
    a('--layers', type=_ints, default=[200, 100], help='TabularModel layers')
    a('--emb-sz', type=int, default=16, help='embedding size of every column (at most its cardinality)')
    a('--opt', choices=['adam', 'lamb'], default='adam', help="fastai's Adam or Lamb")
    a('--lr', type=float, default=1e-2)
    a('--valid-pct', type=float, default=0.2)
    a('--target', choices=['category', 'regression'], default='category',
      help="the label as a CategoryBlock (cross-entropy), or fastai's default for an int column")
    a('--curve', type=_ints, default=None, help='row counts of a loader/preprocessing cost curve, e.g. '
      '250000,1000000,4000000 (no training)')
    a('--curve-contenders', type=_names, default=None, help="contenders of the curve (default: this package's)")
    a('--threads', type=int, default=None, help="torch's CPU threads in every contender (default: torch's choice); "
      '1 is steadier on a machine other jobs share')
    a('--timeout', type=float, default=3600., help='seconds before a contender is killed (then: failed)')
    a('--suite', choices=['fastai', 'embeddings', 'multi_hot'], default='fastai', help='fastai: the contenders above; '
      'embeddings: dense vs sparse vs fused tables (a 1M-row one); multi_hot: padded vs values+offsets layouts')
    a('--worker', default=None, help=argparse.SUPPRESS)
    a('--worker-dir', default=None, help=argparse.SUPPRESS)
    return p

def main(argv=None):
    "The command line: run the bench, print the table, write the JSON and the PNG."
    argv = sys.argv[1:] if argv is None else list(argv)
    opts = _parser().parse_args(argv)
    if opts.worker: return _worker(opts.worker, opts.worker_dir)
    if opts.suite != 'fastai':
        opts.argv = argv
        res = run_suite(opts)
        Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.out).write_text(json.dumps(res, indent=1, default=str))
        print(format_suite(res))
        return res
    bad = [c for c in opts.contenders + (opts.curve_contenders or []) if c not in CONTENDERS]
    if bad: raise SystemExit(f'unknown contender(s) {bad}: pick from {",".join(CONTENDERS)}')
    if opts.device == 'cuda':
        import torch
        if not torch.cuda.is_available(): raise SystemExit('--device cuda, but torch sees no CUDA device')
    if not opts.bs or min(opts.bs) < 1: raise SystemExit(f'--bs needs positive batch sizes, got {opts.bs}')
    if opts.rows is None and not opts.data: opts.rows = 1_000_000
    if opts.train_bs is None: opts.train_bs = sorted(opts.bs)[len(opts.bs) // 2]
    if opts.curve and opts.curve_contenders is None:
        opts.curve_contenders = ['gpu_pandas'] + (['gpu_cudf'] if opts.device == 'cuda' else [])
    opts.argv = argv
    res = run_bench(opts)
    out = Path(opts.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1, default=str))
    png = plot_ratios(res, opts.png or out.with_suffix('.png'))
    print(format_table(res))
    print(f'\nwrote {out} and {png} in {res["meta"]["wall_s"]:.0f} s')
    return res

if __name__ == '__main__': main()
