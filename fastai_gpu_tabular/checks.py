"""The input checks `TabularGPU` (in memory) and `TabularDask` (over partitions) share, each error written once: names,
columns, rows, +-inf, NaN nothing fills, targets, value types; and the guard every proc's `setups` wears. Each takes
what its caller has already counted (in one pass over the frame, or one Dask computation) and raises, naming the
columns, when the input is bad. The steps that change the frame are prepare.py's."""
from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable
from typing import Any
import numpy as np
import pandas as pd
from fastai.tabular.core import FillMissing, Tabular
from fastcore.foundation import L

from .backend import (
    Column,
    Frame,
    column_kind,
    first_value,
    is_cudf,
    mixed_types_error,
    mixed_values,
    value_kind,
)

__all__ = []

def guard_setups(f:Callable) -> Callable:
    """A proc's `setups`, with an AttributeError raised inside it made a RuntimeError naming the proc: fasttransform's
    `Transform.setup` returns None on an AttributeError, which leaves the proc unset, and the Tabular without its
    columns, without a word. Every proc wears it: ours on their `setups`, fastai's through `procs.register_proc`."""
    @functools.wraps(f)
    def _inner(self, to):
        try: return f(self, to)
        except AttributeError as e: raise RuntimeError(f"{type(self).__name__}.setups failed: {e}") from e
    return _inner

def check_rows(n:int) -> None:
    "Set-up needs rows: a ValueError for an empty frame (`n` rows)."
    if n == 0: raise ValueError("TabularGPU got an empty frame: there are no rows to set up on")

def check_names(cat_names:list, cont_names:list, y_names:list) -> None:
    "Each column named once."
    for kind,names in (('cat', cat_names), ('cont', cont_names), ('y', y_names)):
        if len(set(names)) != len(names): raise ValueError(f"{kind}_names lists a column twice: {list(names)}")
    xs = set(cat_names) | set(cont_names)
    both = (set(cat_names) & set(cont_names)) | (set(y_names) & xs)
    if both: raise ValueError(f"column(s) {sorted(both)} are named in more than one of cat_names/cont_names/y_names")

def _fill_missing(procs) -> FillMissing|None:
    "The `FillMissing` among `procs` (classes, instances or a Pipeline) that adds `_na` columns, or None."
    for p in getattr(procs, 'fs', L(procs)):
        if isinstance(p, type) and issubclass(p, FillMissing): p = p()   # a class: its defaults say
        if isinstance(p, FillMissing) and p.add_col: return p

def check_columns(columns:Iterable, cat_names:list, cont_names:list, y_names:list, procs:list|None,
                  setup:bool=True) -> None:
    """A KeyError unless the frame's `columns` hold the named ones (the targets only at set-up: a frame given to `new`
    may lack them, as in fastai). `<cont>_na` in cat_names (an earlier TabularPandas appended it to the list) may be
    missing when FillMissing makes it, which runs before Categorify: `check_na_names` checks it will, once the training
    rows are known."""
    columns = list(columns)
    made = {f'{n}_na' for n in cont_names} if _fill_missing(procs) is not None else set()
    made |= made_columns(procs)   # a HashedCross's crosses; TargetEncode's conts, once set up
    need = [n for n in [*cat_names, *cont_names] if n not in made] + (list(y_names) if setup else [])
    have = set(columns)
    missing = [n for n in need if n not in have]
    if not missing: _check_read(columns, procs, made | set(need))   # every frame's: the procs read them
    if not missing: return
    na = [n for n in missing if n.endswith('_na') and n[:-3] in cont_names]
    hint = f"; {na} would be made by FillMissing (with add_col=True), which procs lacks" if na else ""
    raise KeyError(f"column(s) {missing} are not in the frame (it has {columns[:20]})" + hint)

def check_new_columns(what:str, made:list, columns:Iterable, y_names:list, hint:str='') -> None:
    "A ValueError if proc `what` would make columns `made` that the frame (`columns`, or the targets) already has."
    have = set(columns) | set(y_names)
    clash = [c for c in made if c in have]
    if clash: raise ValueError(f"{what} would make column(s) {clash}, which the frame already has{hint}")

def made_columns(procs) -> set:
    "Names of the columns set-up procs add to the frame (their `made_names`, e.g. TargetEncode's `<name>_te`)."
    return {c for p in getattr(procs, 'fs', L(procs)) if not isinstance(p, type) for c in getattr(p, 'made_names', ())}

def _check_read(columns:list, procs, skip:set) -> None:
    "A KeyError naming the first proc that reads columns (`reads`) the frame lacks, and them (but those of `skip`)."
    have = set(columns)
    for p in getattr(procs, 'fs', L(procs)):
        if isinstance(p, type) or not hasattr(p, 'reads'): continue
        bad = [c for c in p.reads() if c not in have and c not in skip]
        if bad: raise KeyError(f"{type(p).__name__}: column(s) {bad} are not in the frame (it has {columns[:20]}): it "
                               "reads them, so every frame must hold them, a later one too (new, test_dl, predict)")

def read_columns(procs) -> list:
    """Names of the columns procs read as their inputs (each proc's `reads`: DifferenceLag's and History's keys, time
    and values, JoinExternal's key), less those a proc makes: the Tabular keeps them in its frame for the procs,
    named in cat_names/cont_names or not, and every frame must hold them. Unnamed, they never reach the packed rows or
    the model (fastai's `TabularPandas` keeps every column of its frame, and packs only the named ones)."""
    made = made_columns(procs)
    res = [c for p in getattr(procs, 'fs', L(procs)) if not isinstance(p, type) and hasattr(p, 'reads')
           for c in p.reads()]
    return [c for c in dict.fromkeys(res) if c not in made]

def raw_columns(procs, cat_names:list, cont_names:list, y_names:list) -> set:
    """Names of the columns procs read as values (each proc's `raw_names`: HashBucket's, HashedCross', TargetEncode's,
    JoinGroupby's), whose numbers fastai's shrink leaves as they are; a proc given as a class means its defaults."""
    res = set()
    for p in getattr(procs, 'fs', L(procs)):
        if not hasattr(p, 'raw_names'): continue
        res.update((p() if isinstance(p, type) else p).raw_names(list(cat_names), list(cont_names), list(y_names)))
    return res

def check_na_names(cat_names:list, columns:Iterable, procs:list|None, setup:bool,
                   train_nan:Callable[[str], bool]) -> None:
    """`<cont>_na` names in `cat_names` that are not `columns` yet: FillMissing must be about to make them. At set-up
    `train_nan(col)` says whether the training rows of `col` hold NaN; later, FillMissing's `na_dict` says."""
    have = set(columns)
    fm = _fill_missing(procs)
    learned = getattr(fm, 'na_dict', None)   # None before set-up
    for n in [n for n in cat_names if n not in have and n not in made_columns(procs)]:
        c = n[:-3]   # `check_columns` let only `<cont>_na` names through, and only with such a FillMissing
        made = train_nan(c) if setup else (learned is None or c in learned)
        if not made:
            raise KeyError(f"cat_names has {n!r}, the column FillMissing adds for NaN in {c!r}, but {c!r} has no "
                           f"NaN in the training rows, so FillMissing makes no {n!r}: remove it from cat_names")

def check_value_types(items:Frame, cat_names:list, multi_hot:dict) -> None:
    """fastai sorts a cat column's values into its vocabulary: a TypeError naming the first single-hot cat column of
    `items` whose values are of kinds that do not sort together (strings and numbers), whether fastai's shrink cast it
    to a category (its categories then hold them) or not. None and NaN are missing values, not a type."""
    for n in cat_names:
        if n in multi_hot or n not in items.columns: continue
        u = mixed_values(items[n])
        if u is not None: raise mixed_types_error(n, u)

def check_kind(name:str, col:Column, vocab:list, buckets:int=0) -> None:
    """A UserWarning when a later frame's cat column `col` holds another kind of value (`column_kind`) than its
    vocabulary `vocab` (strings against numbers, or numbers against strings): none of them can be in it, so each becomes
    `#na#` (or, with `buckets`, an out-of-vocabulary bucket), as fastai's Categorify maps them without a word. Valid
    data that training never saw (new IDs of the same kind) stays fastai's, without a warning."""
    if not len(vocab): return
    want, got = value_kind(vocab[0]), column_kind(col)
    if got is None or got == want: return
    example = first_value(col)
    if example is None: return   # all missing (e.g. a float column of NaN): '#na#' is what they are
    where = f"one of its {buckets} out-of-vocabulary buckets" if buckets else "'#na#' (code 0)"
    kinds = lambda k: {'str': 'strings', 'number': 'numbers'}.get(k, f'{k} values')
    plain = lambda v: v.item() if isinstance(v, np.generic) else v
    warnings.warn(f"cat column {name!r} holds {kinds(got)} (e.g. {plain(example)!r}) where its training "
                  f"vocabulary holds {kinds(want)} (e.g. {plain(vocab[0])!r}): every one of them becomes {where}. "
                  "Cast the column to the training type", UserWarning, stacklevel=2)

def count_inf(col:Column) -> int:
    "Rows of `col` holding +-inf: one vectorized pass (only float columns can hold inf)."
    if getattr(col.dtype, 'kind', None) != 'f': return 0
    # a performance path for pandas: NumPy's isinf in place, no Series of bools
    if not is_cudf(col) and isinstance(col.dtype, np.dtype): return int(np.isinf(col.to_numpy()).sum())
    return int((col.abs() == np.inf).sum())   # cuDF, and pandas' nullable floats

def check_inf(counts:dict) -> None:
    "A ValueError naming the continuous columns that hold +-inf (`counts`: {name: rows}), which Normalize turns to NaN."
    inf = ", ".join(f"{n!r} in {k} row(s)" for n,k in counts.items() if k)
    if inf: raise ValueError(f"continuous column(s) hold +-inf: {inf}. Replace them with NaN, e.g. "
                             "df[col].replace([np.inf, -np.inf], np.nan), for FillMissing to fill them (and flag "
                             "them in `<col>_na`), or clip them to finite values")

def check_unfilled_nan(bad:list, has_fill:bool) -> None:
    """A ValueError naming the continuous columns `bad`, which hold NaN that nothing fills: `procs` has no FillMissing
    (`has_fill` False), or it learned no fill value for them (they had no NaN in the training rows)."""
    if not bad: return
    if not has_fill:
        raise ValueError(f"continuous column(s) {bad} contain NaN and `procs` has no FillMissing: add FillMissing, "
                         "or fill them before TabularGPU")
    raise ValueError(f"continuous column(s) {bad} contain NaN, but had none in the training rows, so FillMissing "
                     "learned no fill value for them: fill them first (before TabularGPU or test_dl), or have NaN in "
                     "the training rows too")

def fill_nan_check(to:Tabular, na_dict:dict|None) -> None:
    "Raise, naming the columns, if a continuous column of `to` has NaN that nothing fills (`na_dict`: FillMissing's)."
    known = set(na_dict or ())
    have = set(to.items.columns)   # a column a proc makes (`made_columns`) is not there yet
    check_unfilled_nan([n for n in to.cont_names if n not in known and n in have and to.items[n].isna().any()],
                       na_dict is not None)

def check_fill_value(name:str, v:Any) -> None:
    "A ValueError if FillMissing computed no fill value `v` for continuous column `name`: it is all NaN in training."
    missing = v is None or (pd.api.types.is_scalar(v) and pd.isna(v))
    if missing: raise ValueError(f"continuous column {name!r} is entirely NaN in the training rows: FillMissing cannot "
                                 "compute a fill value. Drop the column or pass `fill_vals`")

def check_targets(nan:dict) -> None:
    "A ValueError naming the first target column holding NaN/null (`nan`: {name: whether it does})."
    bad = [n for n,v in nan.items() if v]
    if bad: raise ValueError(f"target column {bad[0]!r} contains NaN/null: drop or fill those rows (or drop the "
                             "column for unlabelled data)")

def check_labels(name:str, unseen:list, vocab:list) -> None:
    "A ValueError if target column `name` has labels `unseen` in its training rows' `vocab`."
    if len(unseen): raise ValueError(f"target column {name!r} has labels not seen in the training rows, e.g. "
                                     f"{list(unseen)[:5]}; the training labels are {list(vocab)[:10]}")
