"`TabularGPU`: fastai's `Tabular` on a cuDF or pandas frame, processed on the frame's device and packed into tensors once."
from __future__ import annotations

import warnings
import numpy as np, pandas as pd, torch
from fastcore.foundation import L
from fastcore.basics import attrdict
from fastcore.meta import delegates
from fasttransform import Pipeline
from plum import dispatch
from fastai.data.block import CategoryBlock, RegressionBlock, TransformBlock
from fastai.data.transforms import Categorize, EncodedMultiCategorize, RegressionSetup
from fastai.tabular import core as fatc
from fastai.tabular.core import FillMissing, Tabular, df_shrink_dtypes
from fastai.torch_core import display_df

from .backend import (col_to_tensor, encode_codes, explode_lists, frame_device, gather_columns, is_cudf, is_list_dtype,
                      is_numeric_dtype, is_str_dtype, holds_strings, pad_bags, split_lists, to_backend, to_category, to_pandas)
from .backend import is_dask
from .loader import BatchDataLoader, BatchDataLoaders, unpack_rows
from .procs import fill_nan_check, register_procs

__all__ = ['TabularGPU', 'show_results']

def _is_num(dt): return pd.api.types.is_numeric_dtype(dt) and not pd.api.types.is_bool_dtype(dt)

def _row_order(splits, n):
    "fastai's `df.iloc[sum(splits, [])]` as an index array, or None when that order is already `range(n)`."
    if splits is None: return None
    order = np.concatenate([np.asarray(list(s), dtype=np.int64) for s in splits]) if len(splits) else np.zeros(0, np.int64)
    if len(order) and (order.min() < 0 or order.max() >= n):
        raise IndexError(f"splits hold row positions outside the frame's {n} rows")
    return None if len(order) == n and (order == np.arange(n)).all() else order

class TabularGPU(Tabular):
    "A `Tabular` over a cuDF or pandas frame: fastai's procs run on the frame's own device, batches come from packed tensors"
    def __new__(cls, df=None, *args, **kwargs):
        "A Dask frame gives a `TabularDask` (dask_tabular.py): learned over its partitions, packed into chunks on disk."
        if cls is TabularGPU and is_dask(df):
            from .dask_tabular import TabularDask
            cls = TabularDask
        return super().__new__(cls)

    def __init__(self, df, procs=None, cat_names=None, cont_names=None, y_names=None, y_block=None, splits=None,
                 do_setup=True, device=None, inplace=False, reduce_memory=True,
                 backend:str|None=None, # 'cudf' or 'pandas' to move `df` there first; None keeps the frame's own
                 multi_hot:dict|list|None=None): # multi-hot cat columns: {name: separator} for strings; list columns are found
        df = to_backend(df, backend)
        # copies: FillMissing appends `_na` names, and fastai's would land in the caller's own list
        cat_names,cont_names,y_names = L(cat_names).copy(),L(cont_names).copy(),L(y_names).copy()
        self._check_names(df, cat_names, cont_names, y_names, do_setup)
        order = _row_order(splits, len(df))
        self.multi_hot = self._multi_hot(df, cat_names, multi_hot)
        # fastai's df_shrink (when reduce_memory): numbers downcast, object/str cat columns cast to category over all
        # rows, which is where fastai's vocabulary for them comes from (valid-only values included)
        casts = self._shrink_dtypes(df, cat_names, cont_names, y_names) if reduce_memory and len(df) else {}
        if inplace and order is None:
            items = df
            for c,t in casts.items(): items[c] = to_category(items[c]) if t == 'category' else items[c].astype(t)
        # only the named columns, copied once (fastai copies the whole frame, twice with splits): no caller mutation
        else: items = gather_columns(df, [c for c in dict.fromkeys(cat_names + cont_names + y_names) if c in df.columns],
                                     order, casts)
        items = self._prepare(items, cat_names, cont_names, y_names, self.multi_hot)
        self.dataloaders = delegates(self._dl_type.__init__)(self.dataloaders)
        self.items,self._packed,self._parent = items,{},None
        self.y_names,self.device = y_names,device
        if y_block is None and self.y_names:
            # Make ys categorical if they're not numeric (fastai's rule)
            y_block = RegressionBlock() if all(_is_num(items[n].dtype) for n in self.y_names) else CategoryBlock()
        if y_block is not None and do_setup:
            if callable(y_block): y_block = y_block()
            procs = L(procs) + y_block.type_tfms
        self.cat_names,self.cont_names,self.procs = cat_names,cont_names,Pipeline(procs)
        self.split = len(items) if splits is None else len(splits[0])
        if do_setup: self.setup()

    @staticmethod
    def _check_names(df, cat_names, cont_names, y_names, do_setup):
        "Fail fast, naming the columns, before any copy or proc runs."
        if do_setup and len(df) == 0: raise ValueError("TabularGPU got an empty frame: there are no rows to set up on")
        for kind,names in (('cat', cat_names), ('cont', cont_names), ('y', y_names)):
            if len(set(names)) != len(names): raise ValueError(f"{kind}_names lists a column twice: {list(names)}")
        both = (set(cat_names) & set(cont_names)) | (set(y_names) & (set(cat_names) | set(cont_names)))
        if both: raise ValueError(f"column(s) {sorted(both)} are named in more than one of cat_names/cont_names/y_names")
        made = {f'{n}_na' for n in cont_names}   # FillMissing makes these
        need = [n for n in cat_names if not (n in made and not do_setup)] + list(cont_names) + (list(y_names) if do_setup else [])
        missing = [n for n in need if n not in df.columns]
        if missing: raise KeyError(f"column(s) {missing} are not in the frame (it has {list(df.columns)[:20]})")

    @staticmethod
    def _multi_hot(items, cat_names, multi_hot) -> dict:
        "{name: separator or None} of the multi-hot cat columns: those declared, and those holding lists."
        mh = dict.fromkeys(multi_hot) if isinstance(multi_hot, (list, tuple, L)) else dict(multi_hot or {})
        bad = [n for n in mh if n not in cat_names]
        if bad: raise ValueError(f"multi_hot names {bad}, which are not in cat_names {list(cat_names)}")
        for n in cat_names:
            if n in items.columns and n not in mh and is_list_dtype(items[n]): mh[n] = None
        return mh

    def new(self, df, inplace=False):
        "A `TabularGPU` for `df` with this one's procs and names (fastai's `Tabular.new`, keeping `multi_hot`)."
        return type(self)(df, do_setup=False, reduce_memory=False, y_block=TransformBlock(), inplace=inplace,
                          multi_hot=self.multi_hot, **attrdict(self, 'procs', 'cat_names', 'cont_names', 'y_names', 'device'))

    def _shrink_dtypes(self, df, cat_names, cont_names, y_names) -> dict:
        "fastai's `df_shrink_dtypes` on the named columns; the category cast only for single-hot cats and targets."
        named = set(cat_names) | set(cont_names) | set(y_names)
        dtypes = df_shrink_dtypes(df, skip=[c for c in df.columns if c not in named or c in self.multi_hot])
        return {c:t for c,t in dtypes.items() if t != 'category' or c in cat_names or c in y_names}

    @staticmethod
    def _prepare(items, cat_names, cont_names, y_names, multi_hot):
        "Coerce conts to numbers (predict's `row.to_frame().T` is all object), split multi-hot strings, reject the rest."
        for n,sep in multi_hot.items():
            if n in items.columns and holds_strings(items[n]):
                if sep is None: raise TypeError(f"multi-hot column {n!r} holds strings: give its separator, e.g. "
                                                f"multi_hot={{{n!r}: '|'}}")
                items[n] = split_lists(items[n], sep)
        for n in cont_names:
            if n not in items.columns: continue
            dt = items[n].dtype
            if is_numeric_dtype(dt) and not is_str_dtype(dt): continue
            if is_cudf(items) or type(dt).__name__ == 'CategoricalDtype':
                raise TypeError(f"continuous column {n!r} has dtype {dt}, not a number: put it in cat_names or convert it")
            try: v = pd.to_numeric(items[n])
            except (ValueError, TypeError) as e:
                raise TypeError(f"continuous column {n!r} is not numeric ({e}): put it in cat_names or convert it") from None
            items[n] = v
        if is_cudf(items):   # cuDF keeps NaN apart from null; fastai's procs treat both as missing
            floats = [c for c in items.columns if items[c].dtype.kind == 'f']
            if floats: items[floats] = items[floats].nans_to_nulls()
        for n in y_names:
            if n in items.columns and items[n].isna().any():
                raise ValueError(f"target column {n!r} contains NaN/null: drop or fill those rows (or drop the column "
                                 "for unlabelled data)")
        return items

    # --- what the procs use ---------------------------------------------------------------------------------------
    @property
    def full_items(self):
        "The frame of the object this one is a train/valid subset of (its own frame otherwise)."
        return self._parent.items if self._parent is not None else self.items

    def set_col(self, n, v):
        "Set column `n` (a Series on this frame's index) and forget the packed tensors."
        self.items[n] = v
        self._packed = {}

    def __setitem__(self, k, v):
        super().__setitem__(k, v)
        self._packed = {}

    def transform(self, cols, f, all_col=True):
        "Apply `f` to each column in `cols`, as `TabularPandas.transform` (for custom procs)."
        if not all_col: cols = [c for c in cols if c in self.items.columns]
        for c in cols: self.set_col(c, f(self.items[c]))

    def _before_procs(self):
        "NaN that no FillMissing will fill fails here, before any proc runs; and the packed rows are about to go stale."
        if not self._has(FillMissing): fill_nan_check(self, None)
        self._packed = {}

    def setup(self): self._before_procs(); self.procs.setup(self)
    def process(self): self._before_procs(); self.procs(self)

    def _has(self, tfm_type): return any(isinstance(t, tfm_type) for t in self.procs.fs)

    def subset(self, i):
        "Train (0) or valid (1) rows as a view: no frame copy (fastai copies), and packed tensors sliced from this object's."
        rows = slice(0, self.split) if i == 0 else slice(self.split, len(self))
        items = self.items.iloc[rows]
        res = object.__new__(type(self))
        res.__dict__.update({k:v for k,v in self.__dict__.items() if k != 'dataloaders'})
        res.dataloaders = delegates(res._dl_type.__init__)(res.dataloaders)
        # a shallow copy, so assigning a column to the subset is allowed and leaves this object's frame alone
        res.items = items if is_cudf(items) else items.copy(deep=False)
        res.split,res._packed,res._parent,res._rows = len(items),{},self,rows
        return res

    def decode(self):
        "Decode in place, on the host: decoded columns are for display, and `#na#` among numbers has no cuDF dtype."
        self.items,self._packed = to_pandas(self.items),{}
        return self.procs.decode(self)

    def show(self, max_n=10, **kwargs):
        "Display the first `max_n` rows decoded (category names, de-normalised values), on the host."
        display_df(self.new(to_pandas(self.all_cols[:max_n])).decode().items)

    def __getstate__(self):
        # packed tensors are a cache, and a subset's parent would pickle the whole frame: both are rebuilt on demand
        return {k:v for k,v in self.__dict__.items() if k not in ('_packed', '_parent', '_rows')}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._packed,self._parent = {},None

    # --- packing --------------------------------------------------------------------------------------------------
    @property
    def has_y(self) -> bool: return len(self.y_names) > 0 and all(n in self.items.columns for n in self.y_names)

    def packed_rows(self, device=None) -> tuple:
        """`(rows, layout)`: every processed column in one row-major int32 tensor on `device` (default: the frame's),
        y first, then cats, then conts as float32 bits, so that a batch is a single gather; `layout` says where each
        of `(cats, conts[, ys])` is and its dtype (see `unpack_rows`). Packed once, then cached per device."""
        device = torch.device(device) if device is not None else frame_device(self.items)
        if device.type == 'cuda' and device.index is None: device = torch.device('cuda', torch.cuda.current_device())
        if device not in self._packed:
            if self._parent is None: rows,layout = self._pack()
            else:   # a subset's rows are a slice of the whole object's: no copy
                rows,layout = self._parent.packed_rows()
                rows,layout = rows[self._rows],layout[:3 if self.has_y else 2]
            self._packed[device] = (rows.to(device), layout)
        return self._packed[device]

    def packed(self, device=None) -> tuple:
        "`(cats, conts[, ys])` on `device`: views of `packed_rows` (cats int32, conts float32, ys int64 or float32)."
        return unpack_rows(*self.packed_rows(device))

    @property
    def bag_widths(self) -> dict:
        "{name: slots} of the multi-hot columns in the packed `cats` (learned by Categorify, see `bag_width`)."
        return {n: w for n,w in (getattr(self.procs, 'multi_hot_lens', None) or {}).items() if n in self.multi_hot}

    def cat_widths(self) -> list:
        "Columns of each cat in the packed `cats`: 1, or a multi-hot column's slots (codes, padded with -1)."
        bags = self.bag_widths
        return [bags.get(n, 1) for n in self.cat_names]

    def _bag_block(self, n, width):
        "A multi-hot column's codes as a `[rows, width]` block padded with -1."
        cats = [t for t in self.procs.fs if isinstance(t, fatc.Categorify)]
        if not cats: raise ValueError(f"multi-hot column {n!r} needs Categorify in procs")
        elems, lens = explode_lists(self.items[n])
        codes = col_to_tensor(encode_codes(elems, cats[0].classes[n].items[1:], add=1))
        lens = torch.as_tensor(lens, device=codes.device)
        if len(lens) and int(lens.max()) > width:
            warnings.warn(f"multi-hot column {n!r} has lists of up to {int(lens.max())} elements, more than the {width} "
                          "seen in training: the extra elements are dropped")
        return pad_bags(codes.to(torch.int32), lens, width)

    def _pack(self):
        n,dev = len(self.items),frame_device(self.items)
        ydt = self._y_dtype() if self.has_y else None
        # columns of the int32 row: y first (an int64 y takes two, at an 8-byte aligned start), cats, conts, then
        # one pad column if needed so that rows stay 8-byte aligned too
        ny = len(self.y_names) * (2 if ydt == torch.int64 else 1) if ydt is not None else 0
        nc,nk = sum(self.cat_widths()),len(self.cont_names)
        width = ny + nc + nk + (ny + nc + nk) % 2 * (ydt == torch.int64)
        layout = ((ny, ny+nc, torch.int32), (ny+nc, ny+nc+nk, torch.float32)) + (((0, ny, ydt),) if ny else ())
        rows = torch.zeros((n, width), dtype=torch.int32, device=dev)
        cats,conts,*ys = unpack_rows(rows, layout)
        def _fill(out, names, what, widths=None):
            j = 0
            for c,w in zip(names if n else [], widths or [1] * len(names)):
                if c in self.multi_hot: out[:, j:j+w] = self._bag_block(c, w)
                else:
                    col = self.items[c]
                    if is_str_dtype(col.dtype) or not is_numeric_dtype(col.dtype):
                        raise TypeError(f"{what} column {c!r} holds {col.dtype} values, not codes: call `process()` on "
                                        "this TabularGPU first (test_dl does unless process=False)")
                    out[:, j] = col_to_tensor(col)
                j += w
        _fill(cats, self.cat_names, 'cat', self.cat_widths())
        _fill(conts, self.cont_names, 'cont')
        if n and conts.isnan().any():
            bad = [c for j,c in enumerate(self.cont_names) if conts[:, j].isnan().any()]
            raise ValueError(f"continuous column(s) {bad} hold NaN after processing: add FillMissing to procs")
        if ys: _fill(ys[0], self.y_names, 'y')
        return rows,layout

    def _y_dtype(self):
        "long for class indices (as fastai's CrossEntropy wants), float32 for regression and multi-label targets."
        if self._has(Categorize): return torch.int64
        ints = all(pd.api.types.is_integer_dtype(self.items[n].dtype) for n in self.y_names)
        return torch.int64 if ints and not self._has((RegressionSetup, EncodedMultiCategorize)) else torch.float32

@dispatch
def show_results(x:TabularGPU, y:TabularGPU, samples, outs, ctxs=None, max_n=10, **kwargs):
    "Inputs, targets and predictions decoded (fastai's `show_results` for `Tabular` shows the raw codes)."
    df = x.new(to_pandas(x.all_cols[:max_n])).decode().items
    preds = y.new(to_pandas(y.all_cols[:max_n])).decode().items
    for n in x.y_names: df[n+'_pred'] = preds[n].values
    display_df(df)

register_procs(TabularGPU)
TabularGPU._dl_type,TabularGPU._dbunch_type = BatchDataLoader,BatchDataLoaders
BatchDataLoaders._tabular_type = TabularGPU
