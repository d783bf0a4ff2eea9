"""The train/valid split of a Dask-backed Tabular: fastai's `ColSplitter` rule on its split column, lazily."""
from __future__ import annotations

from fastcore.foundation import L

__all__ = ['valid_mask']

def valid_mask(col, on=None):
    "fastai's `ColSplitter` rule on a column (pandas, cuDF or Dask): truthy values (or those equal to/in `on`) validate"
    if on is None: return col.astype(bool)
    return col.isin(list(on)) if isinstance(on, (list, tuple, set, L)) else col == on
