"`TabularGPU`: fastai's `Tabular` on a cuDF or pandas frame, processed on the frame's device and packed into tensors once."
from __future__ import annotations

import warnings
import numpy as np, pandas as pd, torch
from fastcore.foundation import L
from fastcore.basics import attrdict
from fastcore.xtras import is_listy
from fastcore.meta import delegates
from fasttransform import Pipeline
from plum import dispatch
from fastai.data.block import CategoryBlock, RegressionBlock, TransformBlock
from fastai.data.transforms import Categorize, EncodedMultiCategorize, RegressionSetup
from fastai.tabular import core as fatc
from fastai.tabular.core import FillMissing, Tabular
from fastai.torch_core import display_df

from .backend import (backend_of, col_to_tensor, encode_codes, explode_lists, frame_device, frame_of_tensors,
                      gather_columns, is_cudf, is_dask, is_list_dtype, is_numeric_dtype, is_str_dtype, holds_strings,
                      pad_bags, shrink_dtypes, split_lists, to_backend, to_category, to_pandas)
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

def _fill_missing(procs):
    "The `FillMissing` among `procs` (classes, instances or a Pipeline) that adds `_na` columns, or None."
    for p in getattr(procs, 'fs', L(procs)):
        if isinstance(p, type) and issubclass(p, FillMissing): p = p()   # a class: its defaults say
        if isinstance(p, FillMissing) and p.add_col: return p

def _n_inf(col) -> int:
    "Rows of `col` holding +-inf: one vectorized pass (only float columns can hold inf)."
    if getattr(col.dtype, 'kind', None) != 'f': return 0
    if not is_cudf(col) and isinstance(col.dtype, np.dtype): return int(np.isinf(col.to_numpy()).sum())
    return int((col.abs() == np.inf).sum())   # cuDF, and pandas' nullable floats

def _check_inf(counts:dict):
    "A ValueError naming the continuous columns that hold +-inf (`counts`: {name: rows}), which Normalize turns to NaN."
    inf = ", ".join(f"{n!r} in {k} row(s)" for n,k in counts.items() if k)
    if inf: raise ValueError(f"continuous column(s) hold +-inf: {inf}. Replace them with NaN, e.g. "
                             "df[col].replace([np.inf, -np.inf], np.nan), for FillMissing to fill them (and flag "
                             "them in `<col>_na`), or clip them to finite values")

class _TabIloc(fatc._TabIloc):
    "fastai's `to.iloc[rows, cols]` (cols by name), handing `new` a frame, a row or a value, as fastai's does."
    def __getitem__(self, idxs):
        df = self.to.items
        rows,cols = idxs if isinstance(idxs, tuple) else (idxs, slice(None))
        if isinstance(idxs, tuple):   # names as positions: cuDF's `iloc` takes no boolean mask
            cols = np.flatnonzero(df.columns.isin(cols)).tolist() if is_listy(cols) else df.columns.get_loc(cols)
        if not isinstance(rows, (int, np.integer)) or not isinstance(cols, (slice, list)):
            return self.to.new(df.iloc[rows, cols])
        # one row: a host Series keeping each column's own type (pandas would turn int codes into floats next to the
        # float conts; fastai's rows are object Series, from the string columns it keeps)
        one = to_pandas(df.iloc[[rows], cols])
        row = pd.Series([one[c].iloc[0] for c in one.columns], index=one.columns, name=one.index[0], dtype=object)
        return self.to.new(row)

class TabularGPU(Tabular):
    "A `Tabular` over a cuDF or pandas frame: fastai's procs run on the frame's own device, batches come from packed tensors"
    def __new__(cls, df=None, *args, **kwargs):
        "A Dask frame gives a `TabularDask` (dask/tabular.py): learned over its partitions, packed into chunks on disk."
        if cls is TabularGPU and is_dask(df):
            from .dask.tabular import TabularDask
            cls = TabularDask
        return super().__new__(cls)

    def __init__(self, df, procs=None, cat_names=None, cont_names=None, y_names=None, y_block=None, splits=None,
                 do_setup=True, device=None, inplace=False, reduce_memory=True,
                 backend:str|None=None, # 'cudf' or 'pandas' to move `df` there first; None keeps the frame's own
                 multi_hot:dict|list|None=None): # multi-hot cat columns: {name: separator} for strings; list columns are found
        df = to_backend(df, backend)   # a TypeError for anything but a frame
        if df.ndim != 2: raise TypeError(f"TabularGPU takes a DataFrame, not a {type(df).__name__}: use "
                                         "series.to_frame() for a column, series.to_frame().T for a row")
        # copies: FillMissing appends `_na` names, and fastai's would land in the caller's own list
        cat_names,cont_names,y_names = L(cat_names).copy(),L(cont_names).copy(),L(y_names).copy()
        self._check_names(cat_names, cont_names, y_names)
        if do_setup: self._check_columns(df, cat_names, cont_names, y_names, procs)
        order = _row_order(splits, len(df))
        self.multi_hot = self._multi_hot(df, cat_names, multi_hot)
        # fastai's df_shrink (when reduce_memory): numbers downcast, object/str cat columns cast to category over all
        # rows, which is where fastai's vocabulary for them comes from (valid-only values included)
        casts = self._shrink_dtypes(df, cat_names, cont_names, y_names) if reduce_memory and len(df) else {}
        if inplace and order is None:
            items = df
            for c,t in casts.items(): items[c] = to_category(items[c]) if t == 'category' else items[c].astype(t)
        # only the named columns, in the frame's order, copied once (fastai copies the whole frame, twice with splits)
        else:
            named = set(cat_names + cont_names + y_names)
            items = gather_columns(df, [c for c in df.columns if c in named], order, casts)
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
    def _check_names(cat_names, cont_names, y_names):
        "Each column named once."
        for kind,names in (('cat', cat_names), ('cont', cont_names), ('y', y_names)):
            if len(set(names)) != len(names): raise ValueError(f"{kind}_names lists a column twice: {list(names)}")
        both = (set(cat_names) & set(cont_names)) | (set(y_names) & (set(cat_names) | set(cont_names)))
        if both: raise ValueError(f"column(s) {sorted(both)} are named in more than one of cat_names/cont_names/y_names")

    @staticmethod
    def _check_columns(df, cat_names, cont_names, y_names, procs, setup=True):
        """The frame has rows and the named columns: at set-up before any copy, and before any proc runs (a frame given
        to `new` may lack some, as in fastai: `iloc[rows, cols]` makes one)."""
        if setup and len(df) == 0: raise ValueError("TabularGPU got an empty frame: there are no rows to set up on")
        # `<cont>_na` in cat_names (an earlier TabularPandas appended it to the list) is made by FillMissing, which runs
        # before Categorify; `_check_na_names` checks it will be, once the training rows are known
        made = {f'{n}_na' for n in cont_names} if _fill_missing(procs) is not None else set()
        need = [n for n in cat_names if n not in made] + list(cont_names) + (list(y_names) if setup else [])
        missing = [n for n in need if n not in df.columns]
        if not missing: return
        na = [n for n in missing if n.endswith('_na') and n[:-3] in cont_names]
        raise KeyError(f"column(s) {missing} are not in the frame (it has {list(df.columns)[:20]})" + (
            f"; {na} would be made by FillMissing (with add_col=True), which procs lacks" if na else ""))

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
        """A `TabularGPU` for `df` with this one's procs and names (fastai's `Tabular.new`, keeping `multi_hot`). A row
        (Series) or a value, which `iloc` gives for a scalar row or cell, is held as it is, as fastai does."""
        value = pd.api.types.is_scalar(df)
        if value or (getattr(df, 'ndim', None) == 1 and backend_of(df)):
            res = self._derive(df)
            res.split = 1 if value else len(df)
            return res
        return type(self)(df, do_setup=False, reduce_memory=False, y_block=TransformBlock(), inplace=inplace,
                          multi_hot=self.multi_hot, **attrdict(self, 'procs', 'cat_names', 'cont_names', 'y_names', 'device'))

    @property
    def iloc(self): return _TabIloc(self)

    def _shrink_dtypes(self, df, cat_names, cont_names, y_names) -> dict:
        "fastai's `df_shrink_dtypes` on the named columns; the category cast only for single-hot cats and targets."
        named = set(cat_names) | set(cont_names) | set(y_names)
        dtypes = shrink_dtypes(df, skip=[c for c in df.columns if c not in named or c in self.multi_hot])
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
        self._stale()

    def __setitem__(self, k, v):
        super().__setitem__(k, v)
        self._stale()

    def transform(self, cols, f, all_col=True):
        "Apply `f` to each column in `cols`, as `TabularPandas.transform` (for custom procs)."
        if not all_col: cols = [c for c in cols if c in self.items.columns]
        for c in cols: self.set_col(c, f(self.items[c]))

    def _before_procs(self, setup=False):
        "Bad input fails here, naming the columns, before any proc runs; and the packed rows are about to go stale."
        self._check_columns(self.items, self.cat_names, self.cont_names, self.y_names, self.procs, setup)
        _check_inf({n: _n_inf(self.items[n]) for n in self.cont_names})
        if not self._has(FillMissing): fill_nan_check(self, None)
        self._check_na_names(setup, lambda c: self.items[c].iloc[:self.split].isna().any())
        self._stale()

    def _check_na_names(self, setup, train_nan):
        """`<cont>_na` names in cat_names that are not columns yet: FillMissing must be about to make them (at set-up:
        `train_nan(col)` says whether the training rows of `col` hold NaN)."""
        fm = _fill_missing(self.procs)
        for n in [n for n in self.cat_names if n not in self.items.columns]:
            c = n[:-3]   # `_check_columns` let only `<cont>_na` names through, and only with such a FillMissing
            made = train_nan(c) if setup else c in getattr(fm, 'na_dict', {c: None})
            if not made:
                raise KeyError(f"cat_names has {n!r}, the column FillMissing adds for NaN in {c!r}, but {c!r} has no "
                               f"NaN in the training rows, so FillMissing makes no {n!r}: remove it from cat_names")

    def setup(self): self._before_procs(setup=True); self.procs.setup(self)
    def process(self): self._before_procs(); self.procs(self)

    def _has(self, tfm_type): return any(isinstance(t, tfm_type) for t in self.procs.fs)

    def _derive(self, items, parent=None, rows=None):
        "A sibling of this object (same procs and names) over `items`, which it holds without a copy."
        res = object.__new__(type(self))
        res.__dict__.update({k:v for k,v in self.__dict__.items() if k not in ('dataloaders', '_rows')})
        res.dataloaders = delegates(res._dl_type.__init__)(res.dataloaders)
        res.cat_names = self.cat_names.copy()
        res.items,res._packed,res._parent,res._rows = items,{},parent,rows
        return res

    def subset(self, i):
        "Train (0) or valid (1) rows as a view: no frame copy (fastai copies), and packed tensors sliced from this object's."
        rows = slice(0, self.split) if i == 0 else slice(self.split, len(self))
        if self._items is None:   # released: so is the subset, over its slice of the row index
            res = self._derive(None, self, rows)
            res._schema = (*self._schema[:2], self._schema[2][rows], self._schema[3])
        else:   # a shallow copy, so assigning a column to the subset is allowed and leaves this object's frame alone
            items = self._items.iloc[rows]
            res = self._derive(items if is_cudf(items) else items.copy(deep=False), self, rows)
        res.split = len(res)
        return res

    def decode(self):
        "Decode in place, on the host: decoded columns are for display, and `#na#` among numbers has no cuDF dtype."
        self.items = to_pandas(self.items)
        self._stale()
        return self.procs.decode(self)

    def show(self, max_n=10, **kwargs):
        "Display the first `max_n` rows (or the row `iloc` gave) decoded: category names, de-normalised values."
        rows = self.all_cols[:max_n] if self.items.ndim == 2 else self.items.to_frame().T
        display_df(self.new(to_pandas(rows)).decode().items)

    def __getstate__(self):
        # packed tensors are a cache, and a subset's parent would pickle the whole frame: both are rebuilt on demand
        state = {k:v for k,v in self.__dict__.items() if k not in ('_packed', '_parent', '_rows', '_schema')}
        if self._items is None: state['_items'] = self._unpack_frame()   # released: the frame, not the packed rows
        return state

    def __setstate__(self, state):
        if 'items' in state: state['_items'] = state.pop('items')   # pickled before `items` was a property
        self.__dict__.update(state)
        self._packed,self._parent,self._schema = {},None,None

    # --- the processed frame, released once packed ----------------------------------------------------------------
    @property
    def items(self):
        "The processed frame; after `release_frame` (which `dataloaders()` calls) it is rebuilt from the packed rows."
        if self._items is None: self._items,self._schema = self._unpack_frame(),None
        return self._items

    @items.setter
    def items(self, df): self._items,self._schema = df,None

    def __len__(self): return len(self._items) if self._items is not None else len(self._schema[2])

    @property
    def _columns(self) -> list:
        "The frame's column names, without rebuilding a released frame."
        return list(self._items.columns) if self._items is not None else self._schema[0]

    def _stale(self):
        "The packed rows are about to go stale: a released frame comes back first (they are all it is made of)."
        if self._items is None: self.items
        self._packed = {}

    def _packs_whole(self) -> bool:
        """Whether the packed rows can stand in for the frame: every column is packed, cats as integer codes, conts as
        floats (a float64 one comes back holding the float32 that batches hold), targets as codes or floats. Not:
        multi-hot lists (packed as codes, cut to a width), integer conts or regression targets (float32 rounds them)."""
        named = set(self.cat_names + self.cont_names + self.y_names)
        if self.multi_hot or set(self._items.columns) != named: return False
        kind = {n: getattr(d, 'kind', None) for n,d in self._items.dtypes.items()}
        ys = [n for n in self.y_names if n in kind]
        return (all(kind[n] == 'i' for n in self.cat_names) and all(kind[n] == 'f' for n in self.cont_names)
                and all(kind[n] == 'f' or kind[n] == 'i' and self._y_dtype() == torch.int64 for n in ys))

    def release_frame(self) -> bool:
        """Drop the processed frame, keeping its row index, so that the device holds the packed rows and not both;
        `dataloaders()` calls this on the object and its subsets. Whatever reads `items` later (`to.train.xs`,
        `Interpretation`'s `interp[idxs]`, `show`, pickling) gets the frame back, rebuilt from the packed rows (and kept
        then: using the frame undoes the freeing). Codes come back exact, float conts as the float32 every batch holds.
        Returns whether the frame is released: not where the packed rows cannot rebuild it (see `_packs_whole`)."""
        if self._items is None: return True
        if not self._packs_whole(): return False
        df = self._items
        home = frame_device(df)
        self.packed_rows(home)   # packed now if not yet
        self._schema,self._items = (list(df.columns), dict(df.dtypes), df.index, home),None
        return True

    def _unpack_frame(self):
        "The released frame, rebuilt from the packed rows on the frame's device: a copy, with its dtypes and index."
        cols,dtypes,index,home = self._schema
        cats,conts,*ys = self.packed(home)
        at = {n: t[:, j] for names,t in zip((self.cat_names, self.cont_names, self.y_names), (cats, conts, *ys))
              for j,n in enumerate(names)}
        return frame_of_tensors({c: at[c] for c in cols}, dtypes, index)

    def new_empty(self):
        "fastai's `new_empty`, taking the column names without rebuilding a released frame."
        return self.new(pd.DataFrame({}, columns=self._columns))

    def dataloaders(self, *args, keep_frame=False, **kwargs):
        """fastai's `Tabular.dataloaders`, then `release_frame` on this object and the loaders' subsets (unless
        `keep_frame`): once packed, the processed frame is not needed to train, show or predict."""
        dls = super().dataloaders(*args, **kwargs)
        if not keep_frame:
            for o in [self, *(dl.dataset for dl in dls.loaders)]:
                if isinstance(o, TabularGPU): o.release_frame()
        return dls

    # --- packing --------------------------------------------------------------------------------------------------
    @property
    def has_y(self) -> bool: return len(self.y_names) > 0 and all(n in self._columns for n in self.y_names)

    def packed_rows(self, device=None) -> tuple:
        """`(rows, layout)`: every processed column in one row-major int32 tensor on `device` (default: the frame's),
        y first, then cats, then conts as float32 bits, so that a batch is a single gather; `layout` says where each
        of `(cats, conts[, ys])` is and its dtype (see `unpack_rows`). Packed once, then cached per device."""
        device = torch.device(device) if device is not None else \
            frame_device(self._items) if self._items is not None else self._schema[3]
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
        if n and not conts.isfinite().all():   # a frame changed after `process()`, or values beyond float32's range
            bad = [c for j,c in enumerate(self.cont_names) if not conts[:, j].isfinite().all()]
            raise ValueError(f"continuous column(s) {bad} hold NaN or +-inf, which the model cannot take: "
                             + ("call `process()` on this TabularGPU, and check nothing set them after it" if
                                self._has(FillMissing) else "add FillMissing to procs"))
        if ys: _fill(ys[0], self.y_names, 'y')
        return rows,layout

    def _y_dtype(self):
        "long for class indices (as fastai's CrossEntropy wants), float32 for regression and multi-label targets."
        if self._has(EncodedMultiCategorize): return torch.float32   # a Categorize subclass: test it first
        if self._has(Categorize): return torch.int64
        ints = all(pd.api.types.is_integer_dtype(self.items[n].dtype) for n in self.y_names)
        return torch.int64 if ints and not self._has(RegressionSetup) else torch.float32

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
