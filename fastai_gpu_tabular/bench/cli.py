"The command line: `python -m fastai_gpu_tabular.bench [--suite NAME]`."
from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from .contender import CONTENDERS, OPTIONAL, worker
from .fastai_suite import SCHEMA_VERSION, format_table, plot_ratios, run_bench
from .machine import hardware, versions
from .report import load_line

__all__ = ['SUITES', 'int_list', 'name_list', 'run_suite', 'format_suite', 'main']

# the suites besides `fastai` (the contenders): each a module here with `run(opts) -> dict` and
# `format_table(res) -> str` (and `add_args(group)` for options of its own); imported only when used
SUITES = ('embeddings', 'multi_hot', 'deploy', 'metrics', 'ddp', 'scale', 'saved', 'hashing', 'target',
          'groupby', 'stream', 'ooc', 'history', 'parquet')

def _suite(name): return importlib.import_module(f'.{name}', __package__)

def int_list(s:str) -> list[int]:
    "A comma-separated option as ints (`1e6` reads as 1,000,000): a suite's `type=` for row counts, batch sizes."
    return [int(float(x)) for x in s.split(',') if x]

def name_list(s:str) -> list[str]:
    "A comma-separated option as names: a suite's `type=` for a subset of its contenders."
    return [x for x in s.split(',') if x]

def _parser():
    p = argparse.ArgumentParser(prog='python -m fastai_gpu_tabular.bench',
                                description='Stock fastai against fastai_gpu_tabular on the same synthetic Criteo-like '
                                            'data: preprocessing, loader, training and memory, each contender in its '
                                            'own process.')
    a = p.add_argument
    a('--rows', type=lambda s: int(float(s)), default=None,
      help='rows of synthetic data (default 1,000,000; with --data, those of the file)')
    a('--device', choices=['cpu', 'cuda'], default='cpu')
    a('--bs', type=int_list, default=[4096, 32768, 204800], help='loader batch sizes, comma separated')
    a('--out', default='bench_results.json', help='the JSON results file')
    a('--png', default=None, help='the ratio chart (default: next to --out, .png)')
    a('--seed', type=int, default=0, help='seed of the data, the split and the model')
    a('--data', default=None, help='a parquet file to reuse (made with `criteo_parquet` if missing; default '
      'criteo_<rows>_s<seed>.parquet next to --out)')
    a('--contenders', type=name_list, default=list(CONTENDERS), help=f'a subset of {",".join(CONTENDERS + OPTIONAL)}')
    a('--rmm-torch', action='store_true', help='also run gpu_cudf with torch allocating from RMM\'s pool '
      '(`use_rmm_for_torch`; contender gpu_cudf_rmm): device memory and speed with and without')
    a('--epochs-loader', type=int, default=2, help='timed loader epochs per batch size')
    a('--warmup-epochs', type=int, default=1, help='untimed loader epochs first')
    a('--max-loader-s', type=float, default=120., help='cap on timed seconds per contender and batch size: past it, '
      'rows/s comes from the complete epochs, or the epoch extrapolated (recorded as capped)')
    a('--stat', choices=['best', 'mean'], default='best', help='loader rows/s of the best timed epoch (steadiest '
      'where other jobs share the machine) or of all timed epochs')
    a('--repeat-preprocess', type=int, default=3, help='build the Tabular (and call dataloaders()) this many times; '
      'memory is measured on the first, the fastest of the others counts, and their spread judges the targets '
      'against the noise')
    a('--no-loader', action='store_true', help='skip the loader timings')
    a('--no-train', action='store_true', help='skip the training epoch')
    a('--train-bs', type=int, default=None, help='batch size of the training epoch (default: the middle --bs)')
    a('--train-max-batches', type=int, default=None, help='stop the training epoch after this many batches '
      '(every contender alike)')
    a('--layers', type=int_list, default=[200, 100], help='TabularModel layers')
    a('--emb-sz', type=int, default=16, help='embedding size of every column (at most its cardinality)')
    a('--opt', choices=['adam', 'lamb'], default='adam', help="fastai's Adam or Lamb")
    a('--lr', type=float, default=1e-2)
    a('--valid-pct', type=float, default=0.2)
    a('--target', choices=['category', 'regression'], default='category',
      help="the label as a CategoryBlock (cross-entropy), or fastai's default for an int column")
    a('--curve', type=int_list, default=None, help='row counts of a loader/preprocessing cost curve, e.g. '
      '250000,1000000,4000000 (no training)')
    a('--curve-contenders', type=name_list, default=None, help="contenders of the curve (default: this package's)")
    a('--threads', type=int, default=None, help="torch's CPU threads in every contender (default: torch's choice); "
      '1 is steadier on a machine other jobs share')
    a('--timeout', type=float, default=3600., help='seconds before a contender is killed (then: failed)')
    a('--suite', choices=['fastai', *SUITES], default='fastai', help='fastai: the contenders above; '
      + '; '.join(f'{k}: {_suite(k).__doc__.split(": ", 1)[-1].rstrip(".")}' for k in SUITES))
    for k in SUITES:   # a suite's own options
        if hasattr(_suite(k), 'add_args'): _suite(k).add_args(p.add_argument_group(f'--suite {k}'))
    a('--worker', default=None, help=argparse.SUPPRESS)
    a('--worker-dir', default=None, help=argparse.SUPPRESS)
    return p

def run_suite(opts) -> dict:
    "One of the other suites, with the machine and versions; torch's threads as `--threads` says while it runs."
    import torch
    threads = torch.get_num_threads()   # given back after: `main` may be called from Python, as the tests do
    if opts.threads: torch.set_num_threads(opts.threads)
    t0,ran_on = time.perf_counter(),torch.get_num_threads()
    hw = hardware(opts.device)   # before the run: its load average is the start's
    try: res = _suite(opts.suite).run(opts)
    finally: torch.set_num_threads(threads)
    meta = {'schema_version': SCHEMA_VERSION, 'suite': opts.suite, 'hardware': hw,
            'versions': versions(), 'timestamp': datetime.now(UTC).isoformat(timespec='seconds'),
            'command': ' '.join(['python -m fastai_gpu_tabular.bench'] + [shlex.quote(a) for a in opts.argv]),
            'wall_s': round(time.perf_counter() - t0, 1), 'torch_threads': ran_on,
            'loadavg_end': [round(x, 2) for x in os.getloadavg()]}
    return {'meta': meta, opts.suite: res}

def format_suite(res) -> str:
    "A suite's results as its table, after how busy the machine was."
    m = res['meta']
    return (load_line(m['hardware'].get('loadavg'), m.get('loadavg_end'), m['hardware'].get('cores_usable')) + '\n'
            + _suite(m['suite']).format_table(res[m['suite']]))

def main(argv=None):
    "The command line: run the bench, print the table, write the JSON and the PNG."
    argv = sys.argv[1:] if argv is None else list(argv)
    opts = _parser().parse_args(argv)
    if opts.worker: return worker(opts.worker, opts.worker_dir)
    if opts.suite != 'fastai':
        opts.argv = argv
        res = run_suite(opts)
        Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.out).write_text(json.dumps(res, indent=1, default=str))
        print(format_suite(res))
        return res
    if opts.rmm_torch and 'gpu_cudf_rmm' not in opts.contenders: opts.contenders.append('gpu_cudf_rmm')
    bad = [c for c in opts.contenders + (opts.curve_contenders or []) if c not in CONTENDERS + OPTIONAL]
    if bad: raise SystemExit(f'unknown contender(s) {bad}: pick from {",".join(CONTENDERS + OPTIONAL)}')
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