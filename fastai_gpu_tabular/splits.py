"""The train/valid split given as a column: its name, or fastai's `ColSplitter(col, on)` not yet called. The rule is
fastai's `ColSplitter`, read in one vectorized pass over the column (pandas, cuDF, or lazily on Dask), rather than
through the Python lists of row positions fastai's splitters build (a second of CPU at 1M rows)."""
from __future__ import annotations

import numpy as np
from fastcore.foundation import L

from .backend import backend_of, is_dask, is_str_dtype, to_pandas, truthy

__all__ = []

# Dask's `from_pandas` (its `dataframe.convert-string`) makes every object column strings: bools with None, 0/1
_FROM_DASK = ("; Dask's `from_pandas` makes an object column (bools with None, numbers) strings ('True', 'False', "
              "missing): cast it to bool before that (`df[col].astype(bool)`: None is False, as for fastai), or pass "
              "ColSplitter(col, on=...)")

def _truthy(col):
    "`truthy(col)`, or a ValueError naming the column where a value has no truth value (pandas' NA: fastai fails too)."
    try: return truthy(col)
    except (TypeError, ValueError):
        raise ValueError(f"the split column {col.name!r} ({col.dtype}) holds missing values (pandas' NA), which "
                         "fastai's ColSplitter cannot read as True or False: fill them first"
                         + (_FROM_DASK if is_str_dtype(col.dtype) else '')) from None

def check_training_rows(n_train:int, col, dtype):
    "A split column that validates every row leaves no row to learn from: a ValueError naming it, before the procs."
    if n_train: return
    hint = (": it holds strings, and fastai's ColSplitter reads every non-empty one as True" + _FROM_DASK
            if is_str_dtype(dtype) else '')
    raise ValueError(f"the split column {col!r} puts every row in the validation set, none in training{hint}")

def valid_mask(col, on=None):
    "fastai's `ColSplitter` rule on a column (pandas, cuDF or Dask): truthy values (or those equal to/in `on`) validate"
    if on is None:
        # on Dask, not `col.astype(bool)`: dask 2026.8's optimizer drops that cast when it pushes a projection through
        # the filter, so `frame[mask][cols]` indexes by the column's values or returns the mask itself
        return col.map_partitions(_truthy, meta=(col.name, bool)) if is_dask(col) else _truthy(col)
    res = col.isin(list(on)) if isinstance(on, (list, tuple, set, L)) else col == on
    return res.fillna(False) if backend_of(res) == 'cudf' else res   # a null compares as null on cuDF: not equal

def column_split(splits, columns) -> tuple|None:
    """`(column, on)` of `splits` given as a column name or fastai's `ColSplitter(col, on)` (a KeyError, naming it, for
    a column not in `columns`); None for splits given otherwise."""
    if isinstance(splits, str): col, on = splits, None
    elif callable(splits) and getattr(splits, '__qualname__', '') == 'ColSplitter.<locals>._inner':
        cells = dict(zip(splits.__code__.co_freevars, (c.cell_contents for c in splits.__closure__)))
        col, on = cells['col'], cells['on']
    else: return None
    columns = list(columns)
    if isinstance(col, int): col = columns[col]
    if col not in columns: raise KeyError(f"the split column {col!r} is not in the frame (it has {columns[:20]})")
    return col, on

def split_rows(df, splits):
    """`splits` of an in-memory frame as `(train, valid)` row positions: a split column's (`column_split`), in
    `ColSplitter`'s order; a splitter (any other callable) called on `df`; positions as they are."""
    spec = column_split(splits, df.columns)
    if spec is None: return splits(df) if callable(splits) else splits
    valid = to_pandas(valid_mask(df[spec[0]], spec[1])).to_numpy(dtype=bool, na_value=False)
    if len(valid): check_training_rows(int((~valid).sum()), spec[0], df[spec[0]].dtype)
    return np.flatnonzero(~valid), np.flatnonzero(valid)
