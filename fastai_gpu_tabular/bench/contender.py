"""One contender of the `fastai` suite (fastai_suite.py), measured in the process it runs in: the suite starts a fresh
one for each (so peak memory is its own) on the same parquet file. `stock_weighted` (`TabularPandas` + its default
`TabWeightedDL`, sampling with replacement), `stock_shuffle` (`TabularPandas` + `TabDataLoader`, a true shuffle),
`gpu_pandas` (`TabularGPU` on pandas + `BatchDataLoader`) and `gpu_cudf` (the same on a cuDF frame),
`stock_cudf_pandas` (stock fastai as `stock_shuffle`, run under `cudf.pandas`: what a user can do today with no
plugin; its process calls `cudf.pandas.install()` before anything imports pandas, and an extra, untimed build under
cudf.pandas' profiler records which operations ran on the CPU) and, with `--rmm-torch`, `gpu_cudf_rmm` (`gpu_cudf`
with torch allocating from RMM's pool: `use_rmm_for_torch`). Those needing cuDF are skipped, with the reason, where
it is not usable."""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import traceback
from functools import partial
from pathlib import Path

from .machine import MB, GPUMeter, RSSMeter, sync
from .report import ratio, spread
from .timing import bare_epoch, gather_bandwidth, time_loader

__all__ = ['CONTENDERS', 'OPTIONAL', 'NEED_CUDF', 'cpu_fallbacks', 'run_contender', 'warm', 'repeat_spreads',
           'held_memory', 'batch_bytes', 'worker']

CONTENDERS = ('stock_weighted', 'stock_shuffle', 'gpu_pandas', 'gpu_cudf', 'stock_cudf_pandas')
OPTIONAL = ('gpu_cudf_rmm',)   # run only when asked for (`--rmm-torch`)
CUDF_FRAMES = ('gpu_cudf', 'gpu_cudf_rmm')   # read the parquet with cuDF
NEED_CUDF = CUDF_FRAMES + ('stock_cudf_pandas',)
TIMED = ('preprocess_s', 'preprocess_cpu_s', 'dataloaders_s', 'dataloaders_cpu_s')   # once per build, each in `_all`

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
        t0,c0 = time.perf_counter(), time.process_time()
        # fresh name lists: fastai's FillMissing appends the `_na` columns to the caller's `cat_names`
        to = cls(ctx.df, procs=[Categorify, FillMissing, Normalize], cat_names=list(cats), cont_names=list(conts),
                 y_names=y, y_block=CategoryBlock() if opts.target == 'category' else None, splits=ctx.splits)
        sync(ctx.device)
        return to,round(time.perf_counter() - t0, 3),round(time.process_time() - c0, 3)
    return build

def _packed_tensors(dl) -> tuple|None:
    "What a `BatchDataLoader` batch gathers from: one packed row buffer."
    from ..rows.loader import BatchDataLoader
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
        if ts: d['int32_codes'] = _int32_codes(dl, d, opts, ctx)
    res['loader_capped'] = any(d.get('capped') for d in res['loader_detail'].values())

def batch_bytes(b) -> int:
    "Bytes a batch holds: its tensors' storages (the views of one gather share one)."
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in b}.values())

def _int32_codes(dl, d:dict, opts, ctx) -> dict:
    """What fastai's int64 codes cost a `BatchDataLoader`: the same loader serving the packed int32 codes
    (`cat_dtype=torch.int32`), timed as `dl` was just now, and the bytes of a batch of each."""
    import torch
    dl32 = dl.new(cat_dtype=torch.int32)
    d32 = time_loader(dl32, opts.epochs_loader, opts.warmup_epochs, opts.max_loader_s, ctx.device, opts.stat)
    return {'rows_per_s': d32['rows_per_s'], 'int64_vs_int32_rows_per_s': ratio(d['rows_per_s'], d32['rows_per_s']),
            'batch_bytes': batch_bytes(next(iter(dl))), 'batch_bytes_int32': batch_bytes(next(iter(dl32)))}

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
    # the stock true shuffle; else the Tabular's own loader (fastai's default, TabWeightedDL, for stock_weighted)
    dl_kw = {'dl_type': TabDataLoader} if name in ('stock_shuffle', 'stock_cudf_pandas') else {}
    def loaders(to):
        "`to.dataloaders()`, timed: (dls, seconds, CPU seconds); TabularGPU packs its rows here."
        t0,c0 = time.perf_counter(), time.process_time()
        dls = to.dataloaders(bs=opts.train_bs, device=ctx.device, **dl_kw)
        sync(ctx.device)
        return dls,round(time.perf_counter() - t0, 3),round(time.process_time() - c0, 3)
    dls,res['dataloaders_s'],res['dataloaders_cpu_s'] = loaders(to)
    res['dataloaders_s_all'],res['dataloaders_cpu_s_all'] = [res['dataloaders_s']],[res['dataloaders_cpu_s']]
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
    # more builds and dataloaders(), for time only, after every memory phase (freed memory kept by the allocator
    # would blur those): the least of each (`warm`) counts, and their spread says how steady the machine was
    del dls,to
    for _ in range(opts.repeat_preprocess - 1):
        gc.collect()
        to,t,c = build()
        res['preprocess_s_all'].append(t)
        res['preprocess_cpu_s_all'].append(c)
        _,t,c = loaders(to)
        res['dataloaders_s_all'].append(t)
        res['dataloaders_cpu_s_all'].append(c)
        del to
    for k in TIMED: res[k] = min(warm(res[k + '_all']))
    if name == 'stock_cudf_pandas': res['cpu_fallbacks'] = cpu_fallbacks(build)   # untimed: the profiler traces
    res['wall_s'] = round(time.perf_counter() - t_start, 2)
    # other processes on the machine show up here: cpu_s far below wall_s x cores, or a load above the core count
    res['cpu_s'] = round(sum(os.times()[:2]), 2)
    res['loadavg_end'] = [round(x, 2) for x in os.getloadavg()]
    res['spread'] = repeat_spreads(res)
    return res

def warm(xs:list) -> list:
    """The builds (or dataloaders() calls) after the first, if there are any: a fresh process's first build also pays
    for its page faults and first calls, 5-40% more on 1M rows here, as the loader's untimed warm-up epoch would."""
    return xs[1:] or xs

def repeat_spreads(res:dict) -> dict:
    """The spread (`report.spread`) of each figure of a contender's record that was timed more than once: the
    builds after the first (`--repeat-preprocess`), their dataloaders(), each batch size's loader epochs."""
    out = {k: spread(warm(res.get(k + '_all') or [])) for k in TIMED}
    out['loader_rows_per_s'] = {bs: spread(d.get('epoch_rows_per_s')) for bs,d in res.get('loader_detail', {}).items()}
    return out


def worker(name, d):
    "The child's entry point (`--worker`): run contender `name` with the options in `d`, writing its record there."
    o = json.loads(Path(d, 'opts.json').read_text())
    opts = argparse.Namespace(**o)
    res = {}
    try: run_contender(name, opts, res)
    except Exception as e:   # what was measured before the error is kept
        traceback.print_exc()
        res.update(status='failed', reason=f'{type(e).__name__}: {e}')
    Path(d, 'result.json').write_text(json.dumps(res, default=str))
