"""Progress of long passes over rows (a Dask ETL pass, writing packed chunks, a save or a load): fastprogress's bar, the
one fastai's `fit` shows, in a notebook or a terminal; plain lines where output is not a terminal (a log, a job's
output), which fastprogress leaves silent; nothing when turned off."""
from __future__ import annotations

import sys
import time
from fastprogress import fastprogress as fp

__all__ = []

def _interactive() -> bool:
    "A notebook, or a terminal on stdout (fastprogress's `printing()` takes any stdout for one: it never calls isatty)."
    return fp.IN_NOTEBOOK or sys.stdout.isatty()

class RowProgress:
    """Rows done of `total` in the pass `what`, with rows/s: `update(n)` after each `n` rows (or other `unit`s). On a
    terminal or in a notebook fastprogress's `progress_bar`; elsewhere a plain line every `every` seconds and one at the
    end."""
    def __init__(self, total:int, what:str, show:bool=True, every:float=10., unit:str='rows'):
        self.total,self.what,self.unit = int(total),what,unit
        self.show,self.every = show,every
        self.done,self.t0 = 0, time.perf_counter()
        self.last,self.bar = self.t0, None
        if show and _interactive() and self.total:
            self.bar = fp.progress_bar(range(self.total), total=self.total)
            self.bar.comment = what
            self.bar.update(0)

    def _text(self) -> str:
        s = time.perf_counter() - self.t0
        return f"{round(self.done):,} {self.unit}, {self.done / max(s, 1e-9):,.0f} {self.unit}/s"

    def update(self, n:int):
        "`n` more rows done."
        self.done += n
        if not self.show: return
        if self.bar is not None:
            self.bar.comment = f"{self.what}: {self._text()}"
            self.bar.update(min(round(self.done), self.total))
        elif time.perf_counter() - self.last >= self.every and self.done < self.total:
            self.last = time.perf_counter()
            pct = 100 * self.done / self.total
            print(f"{self.what}: {round(self.done):,}/{self.total:,} {self.unit} ({pct:.0f}%), "
                  f"{self._text().split(', ')[1]}", flush=True)

    def close(self):
        "The pass is over: the bar completes, or the last line says what it did."
        if not self.show: return
        if self.bar is not None:
            if self.bar.last_v is not None: self.bar.on_iter_end()   # stopped short (an error): close the bar
            return
        print(f"{self.what}: {self._text()} in {time.perf_counter() - self.t0:.1f} s", flush=True)

    def __enter__(self): return self
    def __exit__(self, *exc): self.close()

def progress_rows(total:int, what:str, progress:bool=True, every:float=10.) -> RowProgress:
    "A `RowProgress` for a pass over `total` rows (silent when `progress` is False), to use as a context manager."
    return RowProgress(total, what, progress, every)

def dask_progress(what:str, rows:int|None=None, progress:bool=True, every:float=10.):
    """A context in which each Dask compute (on a local scheduler: threads, processes, sync) shows its progress as a
    pass of `what`: the share of its tasks done, as rows of the `rows` it reads (tasks when `rows` is unknown)."""
    from dask.callbacks import Callback  # an optional dependency: imported when used
    n = [0]
    bars = {}
    def start_state(dsk, state):
        n[0] += 1
        tasks = sum(len(state[k]) for k in ('ready', 'waiting', 'running', 'finished'))
        total = rows if rows else tasks
        bars['p'] = RowProgress(total, f"{what}, pass {n[0]}", progress and tasks > 0, every,
                                'rows' if rows else 'tasks')
        bars['step'] = total / max(tasks, 1)
    def posttask(key, result, dsk, state, worker_id): bars['p'].update(bars['step'])
    def finish(dsk, state, errored):
        if 'p' in bars: bars.pop('p').close()
    return Callback(start_state=start_state, posttask=posttask, finish=finish)
