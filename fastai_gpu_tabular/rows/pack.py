"""Packed rows, the artifact every step shares: a processed frame as one row-major int32 tensor, targets first, then the
cat codes (a multi-hot column as a block of slots padded with -1), then the conts as float32 bits, so that a batch is
one gather. `Layout` says where each kind of value sits; `pack_rows` builds the rows of a processed Tabular,
`unpack_rows`/`gather_rows` read them as `(cats, conts[, ys])` views, and `unpack_frame` rebuilds from them the frame
`TabularGPU.release_frame` dropped (`ReleasedFrame`: what it kept)."""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, NamedTuple
import pandas as pd
import torch
from fastai.data.transforms import Categorize, EncodedMultiCategorize, RegressionSetup
from fastai.tabular import core as fatc
from fastai.tabular.core import FillMissing, Tabular

from ..backend import (
    Frame,
    col_to_tensor,
    encode_codes,
    explode_lists,
    frame_device,
    frame_of_tensors,
    is_numeric_dtype,
    is_str_dtype,
    pad_bags,
)

__all__ = []

class ColumnSpan(NamedTuple):
    "Columns `start:stop` of a packed int32 row, holding values of `dtype` (an int64 value takes two columns)"
    start: int
    stop: int
    dtype: torch.dtype

class Layout(tuple):
    """The `ColumnSpan`s `(cats, conts[, ys])` of packed rows, by position (a tuple, as `packed_rows` has always given
    it) or by name. Made by `Layout.plan`; a plain tuple of `(start, stop, dtype)` triples is read as one too."""
    __slots__ = ()
    def __new__(cls, spans=()): return super().__new__(cls, (ColumnSpan(*s) for s in spans))
    def __getnewargs__(self): return (tuple(self),)
    def __repr__(self): return f"Layout({', '.join(f'{a}:{b} {str(dt)[6:]}' for a,b,dt in self)})"

    @classmethod
    def plan(cls, n_cat:int, n_cont:int, n_y:int=0, y_dtype:torch.dtype|None=None) -> tuple[Layout, int]:
        """The layout of rows of `n_cat` code columns, `n_cont` floats and `n_y` targets of `y_dtype`, and their width:
        targets first (an int64 one takes two columns, at an 8-byte aligned start), cats, conts, then one pad column if
        needed so that rows stay 8-byte aligned too."""
        wide = y_dtype == torch.int64
        ny = 2 * n_y if wide else n_y
        end = ny + n_cat + n_cont
        spans = [(ny, ny + n_cat, torch.int32), (ny + n_cat, end, torch.float32)]
        if ny: spans.append((0, ny, y_dtype))
        pad = end % 2 if wide else 0
        return cls(spans), end + pad

    @property
    def cats(self) -> ColumnSpan: return self[0]
    @property
    def conts(self) -> ColumnSpan: return self[1]
    @property
    def ys(self) -> ColumnSpan|None: return self[2] if len(self) > 2 else None
    def without_ys(self) -> Layout: return Layout(self[:2])

    def to_json(self) -> list: return [[a, b, str(dt).removeprefix('torch.')] for a,b,dt in self]
    @classmethod
    def from_json(cls, spans:list) -> Layout: return cls((a, b, getattr(torch, dt)) for a,b,dt in spans)

@dataclasses.dataclass(frozen=True, eq=False)
class ReleasedFrame:
    "What `TabularGPU.release_frame` keeps of the processed frame: enough to rebuild it from the packed rows"
    columns: list  # the names, in the frame's order
    dtypes: dict  # {name: dtype}
    index: Any  # the row index (pandas or cuDF)
    device: torch.device  # where the frame was, and its packed rows are read from

    @classmethod
    def of(cls, df:Frame) -> ReleasedFrame: return cls(list(df.columns), dict(df.dtypes), df.index, frame_device(df))
    def __len__(self): return len(self.index)
    def rows(self, rows:slice) -> ReleasedFrame: return dataclasses.replace(self, index=self.index[rows])

def cat_widths(to:Tabular) -> list[int]:
    "Columns each cat of `to` takes in a packed row: a multi-hot column's slots (`to.bag_widths`), else one."
    bags = getattr(to, 'bag_widths', None) or {}   # none for fastai's TabularPandas
    return [bags.get(n, 1) for n in to.cat_names]

def cat_spans(widths:list[int]) -> list[tuple[int, int]]:
    "`(start, stop)` of each cat column in a batch's `cats`, from the columns each takes (`cat_widths`)."
    res,start = [], 0
    for w in widths:
        res.append((start, start + w))
        start += w
    return res

def unpack_rows(rows:torch.Tensor, layout:tuple) -> tuple:
    "Views `(cats, conts[, ys])` of packed int32 `rows`: each `(start, stop, dtype)` of `layout`, read as `dtype`."
    return tuple(rows[:, a:b] if dt == torch.int32 else rows[:, a:b].view(dt) for a,b,dt in layout)

def gather_rows(rows:torch.Tensor, layout:tuple, idx:slice|torch.Tensor) -> tuple:
    "The packed `rows` at `idx` as `(cats, conts[, ys])` views: one gather (none for a slice, which is a view)."
    return unpack_rows(rows[idx] if isinstance(idx, slice) else rows.index_select(0, idx), layout)

def _has(to, tfm_type) -> bool: return any(isinstance(t, tfm_type) for t in to.procs.fs)

def y_dtype(to:Tabular) -> torch.dtype:
    "The dtype of packed targets: int64 for class indices (as fastai's CrossEntropy wants), else float32."
    if _has(to, EncodedMultiCategorize): return torch.float32   # a Categorize subclass: test it first
    if _has(to, Categorize): return torch.int64
    ints = all(pd.api.types.is_integer_dtype(to.items[n].dtype) for n in to.y_names)
    regression = _has(to, RegressionSetup)
    return torch.int64 if ints and not regression else torch.float32

def packs_whole(to:Tabular) -> bool:
    """Whether the packed rows of `to` can rebuild its frame: every column is packed, cats as integer codes, conts as
    floats (a float64 one comes back holding the float32 that batches hold), targets as codes or floats. Not: multi-hot
    lists (packed as codes, cut to a width), integer conts or regression targets (float32 rounds them)."""
    df = to.items
    named = set(to.cat_names + to.cont_names + to.y_names)
    if to.multi_hot or set(df.columns) != named: return False
    kind = {n: getattr(d, 'kind', None) for n,d in df.dtypes.items()}
    if not all(kind[n] == 'i' for n in to.cat_names): return False
    if not all(kind[n] == 'f' for n in to.cont_names): return False
    ys = [n for n in to.y_names if n in kind]
    class_ys = y_dtype(to) == torch.int64 if ys else False
    return all(kind[n] == 'f' or (kind[n] == 'i' and class_ys) for n in ys)

def _bag_block(to, name:str, width:int) -> torch.Tensor:
    "The codes of multi-hot column `name` of `to` as a `[rows, width]` block padded with -1."
    cats = [t for t in to.procs.fs if isinstance(t, fatc.Categorify)]
    if not cats: raise ValueError(f"multi-hot column {name!r} needs Categorify in procs")
    elems,lens = explode_lists(to.items[name])
    codes = col_to_tensor(encode_codes(elems, cats[0].classes[name].items[1:], add=1))
    lens = torch.as_tensor(lens, device=codes.device)
    longest = int(lens.max()) if len(lens) else 0
    if longest > width:
        warnings.warn(f"multi-hot column {name!r} has lists of up to {longest} elements, more than the {width} "
                      "seen in training: the extra elements are dropped", stacklevel=2)
    return pad_bags(codes.to(torch.int32), lens, width)

def _fill(out:torch.Tensor, to, names:list, what:str, widths:list[int]|None=None):
    "Copy the columns `names` of `to` into `out` (a view of the packed rows): `widths` columns each (default one)."
    if not len(to.items): return
    cols = []
    for c,(a,b) in zip(names, cat_spans(widths or [1] * len(names))):
        if c in to.multi_hot:
            out[:, a:b] = _bag_block(to, c, b - a)
            continue
        col = to.items[c]
        if is_str_dtype(col.dtype) or not is_numeric_dtype(col.dtype):
            raise TypeError(f"{what} column {c!r} holds {col.dtype} values, not codes: call `process()` on this "
                            "TabularGPU first (test_dl does unless process=False)")
        cols.append((a, col_to_tensor(col)))
    # on the host, a few MB of rows at a time, which stay in the cache while every column is written into them: a
    # column at a time over all rows would bring each row's cache line in from memory once per column; on a device,
    # one copy a column
    step = len(out) if out.device.type != 'cpu' else max(2**22 // (4 * out.stride(0)), 1)
    for r in range(0, len(out), step):
        for a,t in cols: out[r:r + step, a] = t[r:r + step]

def pack_rows(to:Tabular) -> tuple[torch.Tensor, Layout]:
    """`(rows, layout)` of a processed Tabular `to` (cat codes, conts and targets as numbers, multi-hot columns as
    lists), on its frame's device: `rows` one int32 tensor (see the module's docstring), `layout` what is where."""
    df = to.items
    has_y = len(to.y_names) > 0 and all(n in df.columns for n in to.y_names)
    ydt = y_dtype(to) if has_y else None
    widths = cat_widths(to)
    layout,width = Layout.plan(sum(widths), len(to.cont_names), len(to.y_names) if has_y else 0, ydt)
    rows = torch.zeros((len(df), width), dtype=torch.int32, device=frame_device(df))
    cats,conts,*ys = unpack_rows(rows, layout)
    _fill(cats, to, to.cat_names, 'cat', widths)
    _fill(conts, to, to.cont_names, 'cont')
    if len(df) and not conts.isfinite().all():   # a frame changed after `process()`, or values beyond float32's range
        bad = [c for j,c in enumerate(to.cont_names) if not conts[:, j].isfinite().all()]
        fix = "call `process()` on this TabularGPU, and check nothing set them after it" if _has(to, FillMissing) \
            else "add FillMissing to procs"
        raise ValueError(f"continuous column(s) {bad} hold NaN or +-inf, which the model cannot take: {fix}")
    if ys: _fill(ys[0], to, to.y_names, 'y')
    return rows,layout

def unpack_frame(rows:torch.Tensor, layout:tuple, names:tuple, released:ReleasedFrame) -> Frame:
    """The frame `released` describes, rebuilt from its packed `rows` (a copy, with its dtypes and index): `names` are
    `(cat_names, cont_names, y_names)`, one column each in `layout`'s spans (see `packs_whole`)."""
    at = {n: t[:, j] for ns,t in zip(names, unpack_rows(rows, layout)) for j,n in enumerate(ns)}
    return frame_of_tensors({c: at[c] for c in released.columns}, released.dtypes, released.index)
