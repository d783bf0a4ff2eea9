"""Progress of long passes over rows (a Dask ETL pass, writing packed chunks, a save or a load): fastprogress's bar, the
one fastai's `fit` shows, in a notebook or a terminal; plain lines where output is not a terminal (a log, a job's
output), which fastprogress leaves silent; nothing when turned off."""
from __future__ import annotations

import sys, time
from fastprogress import fastprogress as fp

__all__ = ['RowProgress', 'progress_rows']

def _interactive() -> bool:
    "A notebook, or a terminal on stdout (fastprogress's `printing()` takes any stdout for one: it never calls isatty)."
    return fp.IN_NOTEBOOK or sys.stdout.isatty()

class RowProgress:
    """Rows done of `total` in the pass `what`, with rows/s: `update(n)` after each `n` rows. On a terminal or in a
    notebook fastprogress's `progress_bar`; elsewhere a plain line every `every` seconds and one at the end."""
    def __init__(self, total:int, what:str, show:bool=True, every:float=10.):
        self.total, self.what, self.show, self.every = int(total), what, show, every
        self.done, self.t0 = 0, time.perf_counter()
        self.last, self.bar = self.t0, None
        if show and _interactive() and self.total:
            self.bar = fp.progress_bar(range(self.total), total=self.total)
            self.bar.comment = what
            self.bar.update(0)

    def _text(self) -> str:
        s = time.perf_counter() - self.t0
        return f"{self.done:,} rows, {self.done / max(s, 1e-9):,.0f} rows/s"

    def update(self, n:int):
        "`n` more rows done."
        self.done += int(n)
        if not self.show: return
        if self.bar is not None:
            self.bar.comment = f"{self.what}: {self._text()}"
            self.bar.update(min(self.done, self.total))
        elif time.perf_counter() - self.last >= self.every and self.done < self.total:
            self.last = time.perf_counter()
            print(f"{self.what}: {self.done:,}/{self.total:,} rows ({100 * self.done / self.total:.0f}%), "
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
