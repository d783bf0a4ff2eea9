"""The steps that make a frame and its names ready for the procs, shared by `TabularGPU` (in memory) and `TabularDask`
(over partitions): the name lists checked (`prepare_names`), the multi-hot columns found (`multi_hot_columns`), an
in-memory frame's columns made ready (`prepare_columns`), and the names, target block and procs set on the object
(`set_procs`). The checks they run are checks.py's."""
from __future__ import annotations

from collections.abc import Callable
import pandas as pd
from fastai.data.block import CategoryBlock, RegressionBlock, TransformBlock
from fastai.tabular.core import Tabular
from fastcore.foundation import L
from fasttransform import Pipeline

from .backend import (
    Frame,
    as_numbers,
    holds_strings,
    is_list_dtype,
    is_numeric_dtype,
    is_str_dtype,
    nan_as_null,
    split_lists,
)
from .checks import check_columns, check_names, check_rows, check_targets

__all__ = []   # the constructors' steps, imported by name

def prepare_names(df:Frame, cat_names:list|None, cont_names:list|None, y_names:list|str|None, procs:list|None,
                  do_setup:bool, rows:int|None=None) -> tuple:
    """`(cat_names, cont_names, y_names)` as copies (FillMissing appends `_na` names, and fastai's would land in the
    caller's own list), each column named once; at set-up, before any copy of `df`, its rows (`rows`, where they are
    counted: not on Dask, where that would read the frame) and its columns checked."""
    cat_names,cont_names,y_names = L(cat_names).copy(),L(cont_names).copy(),L(y_names).copy()
    check_names(cat_names, cont_names, y_names)
    if do_setup:
        if rows is not None: check_rows(rows)
        check_columns(df.columns, cat_names, cont_names, y_names, procs)
    return cat_names, cont_names, y_names

def set_procs(to:Tabular, frame:Frame, names:tuple, procs:list|None, y_block:TransformBlock|None, do_setup:bool,
              device) -> None:
    """Both constructors' common tail: `to`'s names, `device` and procs (a Pipeline), the target block's type tfms
    among them at set-up (by default fastai's rule on the targets' dtypes in `frame`: the prepared one, or Dask's
    meta)."""
    cat_names,cont_names,y_names = names
    if y_block is None and y_names: y_block = default_y_block([frame[n].dtype for n in y_names])
    to.cat_names,to.cont_names,to.y_names,to.device = cat_names,cont_names,y_names,device
    to.procs = Pipeline(add_y_procs(procs, y_block, do_setup))

def _is_number(dtype) -> bool: return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)

def default_y_block(dtypes:list) -> TransformBlock:
    "fastai's rule for the target block: a regression when every target is a number (bools are not), else classes."
    return RegressionBlock() if all(_is_number(dt) for dt in dtypes) else CategoryBlock()

def add_y_procs(procs:list|None, y_block:TransformBlock|Callable|None, do_setup:bool) -> list|None:
    "`procs` plus the target block's type tfms (Categorize, RegressionSetup...), which join them at set-up only."
    if y_block is None or not do_setup: return procs
    if callable(y_block): y_block = y_block()
    return L(procs) + y_block.type_tfms

def multi_hot_columns(items:Frame, cat_names:list, multi_hot:dict|list|None) -> dict:
    "{name: separator or None} of the multi-hot cat columns of `items`: those declared, and those holding lists."
    listed = isinstance(multi_hot, (list, tuple, L))
    mh = dict.fromkeys(multi_hot) if listed else dict(multi_hot or {})
    bad = [n for n in mh if n not in cat_names]
    if bad: raise ValueError(f"multi_hot names {bad}, which are not in cat_names {list(cat_names)}")
    for n in cat_names:
        if n in items.columns and n not in mh and is_list_dtype(items[n]): mh[n] = None
    return mh

def prepare_columns(items:Frame, cont_names:list, y_names:list, multi_hot:dict, reads:list=()) -> Frame:
    """The in-memory frame `items` (a copy, or the caller's with `inplace`) made ready for the procs, in place: conts
    coerced to numbers (predict's `row.to_frame().T` is all object), the object columns procs read (`reads`) to the
    type of their values (a time as a number or datetime again), multi-hot strings split into lists, NaN as null on
    cuDF; a TypeError or ValueError, naming the column, for what cannot be."""
    for n in reads:
        if isinstance(items, pd.DataFrame) and n in items.columns and n not in cont_names and items[n].dtype == object:
            items[n] = items[n].infer_objects()
    for n,sep in multi_hot.items():
        if n in items.columns and holds_strings(items[n]):
            if sep is None: raise TypeError(f"multi-hot column {n!r} holds strings: give its separator, e.g. "
                                            f"multi_hot={{{n!r}: '|'}}")
            items[n] = split_lists(items[n], sep)
    for n in cont_names:
        if n not in items.columns: continue
        dt = items[n].dtype
        if is_numeric_dtype(dt) and not is_str_dtype(dt): continue
        if getattr(dt, 'kind', None) == 'M' and bool(items[n].isna().any()):   # to_numeric makes NaT -2**63, silently
            raise ValueError(f"continuous column {n!r} holds {int(items[n].isna().sum())} missing datetime(s) (NaT), "
                             "which as a number would be -2**63: fill or drop them, or give the time as a number")
        try: v = as_numbers(items[n])
        except (ValueError, TypeError) as e:
            raise TypeError(f"continuous column {n!r} is not numeric ({e}): "
                            "put it in cat_names or convert it") from None
        if v is None:
            raise TypeError(f"continuous column {n!r} has dtype {dt}, not a number: put it in cat_names or convert it")
        items[n] = v
    for c,v in nan_as_null(items).items(): items[c] = v
    check_targets({n: bool(items[n].isna().any()) for n in y_names if n in items.columns})
    return items
