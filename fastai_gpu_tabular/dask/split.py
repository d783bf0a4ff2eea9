"""The train/valid split of a Dask-backed Tabular: fastai's `ColSplitter` rule on its split column, lazily."""
from __future__ import annotations

from fastcore.foundation import L

from ..backend import is_dask

__all__ = []

def _truthy(col): return col.astype(bool)

def valid_mask(col, on=None):
    "fastai's `ColSplitter` rule on a column (pandas, cuDF or Dask): truthy values (or those equal to/in `on`) validate"
    if on is None:
        # on Dask, not `col.astype(bool)`: dask 2026.8's optimizer drops that cast when it pushes a projection through
        # the filter, so `frame[mask][cols]` indexes by the column's values or returns the mask itself
        return col.map_partitions(_truthy, meta=(col.name, bool)) if is_dask(col) else col.astype(bool)
    return col.isin(list(on)) if isinstance(on, (list, tuple, set, L)) else col == on
