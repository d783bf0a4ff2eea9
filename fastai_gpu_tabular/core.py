"""`TabularGPU`: fastai's `Tabular` on a cuDF or pandas frame, processed on the frame's device and packed into tensors
once."""
from __future__ import annotations

from collections.abc import Callable
import numpy as np
import pandas as pd
import torch
from fastai.data.block import TransformBlock
from fastai.data.core import DataLoaders
from fastai.tabular import core as fatc
from fastai.tabular.core import FillMissing, Tabular
from fastai.torch_core import display_df
from fastcore.basics import attrdict
from fastcore.foundation import L
from fastcore.meta import delegates
from fastcore.xtras import is_listy
from plum import dispatch

from .backend import (
    Column,
    Frame,
    backend_name,
    backend_of,
    default_backend,
    float_casts,
    float_dtypes,
    frame_device,
    gather_columns,
    is_dask,
    is_polars,
    parquet_schema,
    read_parquet,
    shallow_copy,
    shrink_dtypes,
    to_backend,
    to_category,
    to_pandas,
)
from .checks import (
    check_columns,
    check_inf,
    check_na_names,
    check_rows,
    check_value_types,
    count_inf,
    fill_nan_check,
    raw_columns,
    read_columns,
)
from .extras import import_extra
from .ops.procs import register_procs
from .prepare import multi_hot_columns, prepare_columns, prepare_names, set_procs
from .rows.chunks import RowBlocks
from .rows.loader import BatchDataLoader
from .rows.pack import Layout, ReleasedFrame, pack_rows, packs_whole, unpack_frame, unpack_rows
from .saved import load_tabular, save_tabular
from .splits import column_split, split_rows

__all__ = ['TabularGPU']

def _row_order(splits, n):
    "fastai's `df.iloc[sum(splits, [])]` as an index array, or None when that order is already `range(n)`."
    if splits is None: return None
    # an L's list as it is (NumPy reads it in C), where `list(L)` would iterate it in Python
    parts = [np.asarray(s.items if isinstance(s, L) else s, dtype=np.int64) for s in splits]
    order = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    if len(order) and (order.min() < 0 or order.max() >= n):
        raise IndexError(f"splits hold row positions outside the frame's {n} rows")
    return None if len(order) == n and (order == np.arange(n)).all() else order

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
    """A `Tabular` over a cuDF or pandas frame: fastai's procs run on the frame's own device, batches come from packed
    tensors"""
    _dl_type = BatchDataLoader

    def __new__(cls, df=None, *args, **kwargs):
        "A Dask frame gives a `TabularDask` (dask/tabular.py): learned over its partitions, packed into chunks on disk."
        if cls is TabularGPU and is_dask(df):
            # lazily: dask/ builds on this module, and `TabularGPU(ddf)` is fastai's drop-in for a Dask frame too
            from .dask.tabular import TabularDask
            cls = TabularDask
        return super().__new__(cls)

    def __init__(self, df:Frame, procs:list|None=None, cat_names:list|None=None, cont_names:list|None=None,
                 y_names:list|str|None=None, y_block:TransformBlock|None=None,
                 # (train, valid) row positions, as fastai's splitters give them; or a boolean column (True:
                 # validation), by name or as fastai's `ColSplitter(col)` uncalled; or any splitter, uncalled
                 splits:tuple|str|Callable|None=None,
                 do_setup:bool=True, device:torch.device|str|None=None, inplace:bool=False, reduce_memory:bool=True,
                 backend:str|None=None, # 'cudf' or 'pandas' to move `df` there first; None keeps the frame's own
                 # multi-hot cat columns: {name: separator} for strings; list columns are found
                 multi_hot:dict|list|None=None):
        df = to_backend(df, backend)   # a TypeError for anything but a frame
        if df.ndim != 2: raise TypeError(f"TabularGPU takes a DataFrame, not a {type(df).__name__}: use "
                                         "series.to_frame() for a column, series.to_frame().T for a row")
        names = prepare_names(df, cat_names, cont_names, y_names, procs, do_setup, rows=len(df))   # before any copy
        cat_names,cont_names,y_names = names
        splits = split_rows(df, splits)
        order = _row_order(splits, len(df))
        self.multi_hot = multi_hot_columns(df, cat_names, multi_hot)
        # fastai's df_shrink (when reduce_memory): numbers downcast, object/str cat columns cast to category over all
        # rows, which is where fastai's vocabulary for them comes from (valid-only values included); the numbers procs
        # read as values (`raw_columns`) are left as they are
        self._raw_columns = raw_columns(procs, cat_names, cont_names, y_names)
        casts = self._shrink_dtypes(df, cat_names, cont_names, y_names) if reduce_memory and len(df) else {}
        if inplace and order is None:
            items = df
            for c,t in casts.items(): items[c] = to_category(items[c]) if t == 'category' else items[c].astype(t)
        # only the named columns and those procs read (`read_columns`: a raw time need not be a model input), in the
        # frame's order, copied once (fastai copies the whole frame, twice with splits)
        else:
            named = set(cat_names + cont_names + y_names + read_columns(procs))
            items = gather_columns(df, [c for c in df.columns if c in named], order, casts)
        items = prepare_columns(items, cont_names, y_names, self.multi_hot, read_columns(procs))
        # the float dtypes the procs learn from: `new` gives them to every later frame, which `process` casts to them
        self.float_dtypes = float_dtypes(items, cat_names + cont_names + y_names)
        self.dataloaders = delegates(self._dl_type.__init__)(self.dataloaders)
        self.items,self._packed,self._parent = items,{},None
        set_procs(self, items, names, procs, y_block, do_setup, device)
        self.split = len(items) if splits is None else len(splits[0])
        if do_setup: self.setup()

    @classmethod
    def from_parquet(cls, path, procs:list|None=None, cat_names:list|None=None, cont_names:list|None=None,
                     y_names:list|str|None=None, splits:tuple|str|Callable|None=None,
                     backend:str|None=None, # 'cudf' reads with cuDF, 'pandas' with pyarrow; None: cuDF where usable
                     columns:list|None=None, # more columns to read: those procs read that no name list holds
                     dask:bool=False, # read with Dask (`dd.read_parquet`): a `TabularDask`, for data bigger than memory
                     reduce_memory:bool=True, **kwargs) -> TabularGPU:
        """`TabularGPU(pd.read_parquet(path), ...)`, read faster: `path` is a Parquet file, a folder of them or a list,
        and only the named columns are read (cats, conts, targets, a split column, `columns`), checked against the
        file's schema first. On pandas the string cat columns are read as Parquet's dictionaries, whose sorted values
        are fastai's vocabulary (`read_parquet`); on cuDF by `cudf.read_parquet`."""
        schema = parquet_schema(path)
        cats,conts,ys = (list(L(n)) for n in (cat_names, cont_names, y_names))
        spec = column_split(splits, schema.names)   # a KeyError naming a split column the file lacks
        # the names checked as the constructor checks them, but before the rows are read
        prepare_names(pd.DataFrame(columns=schema.names), cats, conts, ys, procs, do_setup=kwargs.get('do_setup', True))
        want = set(cats + conts + ys + list(L(columns)) + read_columns(procs) + ([spec[0]] if spec else []))
        cols = [c for c in schema.names if c in want]   # the file's order, as the whole frame's
        backend = backend or default_backend()
        if dask:   # Dask's reader splits the files into partitions by row group; TabularGPU(ddf) is a TabularDask
            dd = import_extra('dask.dataframe', 'dask', 'from_parquet(dask=True)')
            df = dd.read_parquet(path, columns=cols)
            return cls(df, procs, cats, conts, ys, splits=splits, reduce_memory=reduce_memory, backend=backend,
                       **kwargs)
        mh = kwargs.get('multi_hot') or ()   # split into lists from the strings: not read as dictionaries
        dicts = [c for c in cats if c not in mh] if reduce_memory and backend == 'pandas' else []
        df = read_parquet(path, cols, backend, dictionary=dicts)
        return cls(df, procs, cats, conts, ys, splits=splits, reduce_memory=reduce_memory, **kwargs)

    def new(self, df:Frame|Column, inplace:bool=False) -> TabularGPU:
        """A `TabularGPU` for `df` with this one's procs and names (fastai's `Tabular.new`, keeping `multi_hot`). A row
        (Series) or a value, which `iloc` gives for a scalar row or cell, is held as it is, as fastai does."""
        value = pd.api.types.is_scalar(df)
        if value or (getattr(df, 'ndim', None) == 1 and backend_of(df)):
            res = self._derive(df)
            res.split = 1 if value else len(df)
            return res
        # a Polars frame has no backend of its own: it goes to this one's (through Arrow, never through pandas to cuDF)
        backend = backend_name(self.row_index) if is_polars(df) else None
        res = type(self)(df, do_setup=False, reduce_memory=False, y_block=TransformBlock(), inplace=inplace,
                         multi_hot=self.multi_hot, backend=backend,
                         **attrdict(self, 'procs', 'cat_names', 'cont_names', 'y_names', 'device'))
        res.float_dtypes = self.float_dtypes   # the training frame's, which `process` casts its floats to
        return res

    @property
    def iloc(self): return _TabIloc(self)

    def _shrink_dtypes(self, df, cat_names, cont_names, y_names) -> dict:
        """fastai's `df_shrink_dtypes` on the named columns; the category cast only for single-hot cats and targets, and
        the only one for the columns procs read as values (`raw_columns`: they keep the numbers they were given)."""
        named = set(cat_names) | set(cont_names) | set(y_names)
        dtypes = shrink_dtypes(df, skip=[c for c in df.columns if c not in named or c in self.multi_hot])
        return {c:t for c,t in dtypes.items()
                if ((c in cat_names or c in y_names) if t == 'category' else c not in self._raw_columns)}

    # --- what the procs use ---------------------------------------------------------------------------------------
    @property
    def full_items(self):
        "The frame of the object this one is a train/valid subset of (its own frame otherwise)."
        return self._parent.items if self._parent is not None else self.items

    def set_col(self, n:str, v:Column):
        "Set column `n` (a Series on this frame's index) and forget the packed tensors."
        self.items[n] = v
        self._drop_packed()

    def __setitem__(self, k, v):
        super().__setitem__(k, v)
        self._drop_packed()

    def transform(self, cols, f, all_col=True):
        "Apply `f` to each column in `cols`, as `TabularPandas.transform` (for custom procs)."
        if not all_col: cols = [c for c in cols if c in self.items.columns]
        for c in cols: self.set_col(c, f(self.items[c]))

    def _before_procs(self, setup=False):
        """Bad input fails here, naming the columns, before any proc runs; a later frame's floats are cast to the
        training frame's dtypes, so the procs see the values they learned from; the packed rows are about to go
        stale."""
        if setup: check_rows(len(self.items))
        check_columns(self.items.columns, self.cat_names, self.cont_names, self.y_names, self.procs, setup)
        if setup: check_value_types(self.items, self.cat_names, self.multi_hot)
        else:
            for c,t in float_casts(self.items, self.float_dtypes).items(): self.set_col(c, self.items[c].astype(t))
        check_inf({n: count_inf(self.items[n]) for n in self.cont_names if n in self.items.columns})
        if not self._has(FillMissing): fill_nan_check(self, None)
        train_nan = lambda c: self.items[c].iloc[:self.split].isna().any()
        check_na_names(self.cat_names, self.items.columns, self.procs, setup, train_nan)
        self._drop_packed()

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

    def subset(self, i:int) -> TabularGPU:
        """Train (0) or valid (1) rows as a view: no frame copy (fastai copies), and packed tensors sliced from this
        object's."""
        rows = slice(0, self.split) if i == 0 else slice(self.split, len(self))
        if self.released is not None:   # so is the subset, over its slice of the row index
            res = self._derive(None, self, rows)
            res.released = self.released.rows(rows)
        else:   # a shallow copy, so assigning a column to the subset is allowed and leaves this object's frame alone
            items = self._items.iloc[rows]
            res = self._derive(shallow_copy(items), self, rows)
        res.split = len(res)
        return res

    def decode(self):
        "Decode in place, on the host: decoded columns are for display, and `#na#` among numbers has no cuDF dtype."
        self.items = to_pandas(self.items)
        self._drop_packed()
        return self.procs.decode(self)

    def show(self, max_n=10, **kwargs):
        "Display the first `max_n` rows (or the row `iloc` gave) decoded: category names, de-normalised values."
        rows = self.all_cols[:max_n] if self.items.ndim == 2 else self.items.to_frame().T
        display_df(self.new(to_pandas(rows)).decode().items)

    def __getstate__(self):
        # packed tensors are a cache, and a subset's parent would pickle the whole frame: both are rebuilt on demand
        state = {k:v for k,v in self.__dict__.items() if k not in ('_packed', '_parent', '_rows', 'released')}
        if self._items is None: state['_items'] = self._unpack_frame()   # released: the frame, not the packed rows
        return state

    def __setstate__(self, state):
        self.__dict__.update({'float_dtypes': {}, **state})   # a Tabular pickled before it kept them: no casts
        self._packed,self._parent,self.released = {},None,None

    # --- the processed frame, released once packed ----------------------------------------------------------------
    @property
    def items(self):
        "The processed frame; after `release_frame` (which `dataloaders()` calls) it is rebuilt from the packed rows."
        self._restore_frame()
        return self._items

    @items.setter
    def items(self, df): self._items,self.released = df,None

    def __len__(self): return len(self._items) if self.released is None else len(self.released)

    @property
    def column_names(self) -> list:
        "The processed frame's column names, without rebuilding a released frame."
        return list(self._items.columns) if self.released is None else self.released.columns

    @property
    def row_index(self):
        "The processed frame's row index, without rebuilding a released frame."
        return self._items.index if self.released is None else self.released.index

    def _restore_frame(self):
        "Rebuild a released frame from the packed rows, and keep it (using the frame undoes the freeing)."
        if self.released is None: return
        self._items = self._unpack_frame()
        self.released = None

    def _drop_packed(self):
        "The frame is about to change: restore a released frame (the packed rows are all it is made of), drop the rows."
        self._restore_frame()
        self._packed = {}

    def release_frame(self) -> bool:
        """Drop the processed frame, keeping `released` (its row index, column names and dtypes), so that the device
        holds the packed rows and not both; `dataloaders()` calls this on the object and its subsets. Whatever reads
        `items` later (`to.train.xs`, `Interpretation`'s `interp[idxs]`, `show`, pickling) gets the frame back, rebuilt
        from the packed rows (and kept then: using the frame undoes the freeing). Codes come back exact, float conts as
        the float32 every batch holds. Returns whether the frame is released: not where the packed rows cannot rebuild
        it (see `packs_whole`)."""
        if self.released is not None: return True
        if not packs_whole(self): return False
        df = self._items
        self.packed_rows(frame_device(df))   # packed now if not yet
        self.released,self._items = ReleasedFrame.of(df),None
        return True

    def adopt_packed(self, rows:torch.Tensor, layout:Layout, released:ReleasedFrame|None=None):
        """Take `(rows, layout)` packed elsewhere (a saved Tabular's, read from disk) as this object's, cached on the
        host and the frame's device, so nothing is packed again; with `released`, the frame is dropped as
        `release_frame` drops it."""
        dev = frame_device(self._items) if released is None else released.device
        self._packed = {torch.device('cpu'): (rows, layout)}
        if dev.type != 'cpu': self._packed[dev] = (rows.to(dev), layout)
        if released is not None: self.released,self._items = released,None

    def _unpack_frame(self):
        "The released frame, rebuilt from the packed rows on the frame's device: a copy, with its dtypes and index."
        rows,layout = self.packed_rows(self.released.device)
        return unpack_frame(rows, layout, (self.cat_names, self.cont_names, self.y_names), self.released)

    def new_empty(self):
        "fastai's `new_empty`, taking the column names without rebuilding a released frame."
        return self.new(pd.DataFrame({}, columns=self.column_names))

    @property
    def _dbunch_type(self):
        "The `DataLoaders` fastai's `dataloaders()` makes: `BatchDataLoaders`."
        # lazily: data.py builds on this module (its `from_df` makes a TabularGPU), as fastai's tabular/data.py does
        from .data import BatchDataLoaders
        return BatchDataLoaders

    def dataloaders(self, *args, keep_frame:bool=False, **kwargs) -> DataLoaders:
        """fastai's `Tabular.dataloaders`, then `release_frame` on this object and the loaders' subsets (unless
        `keep_frame`): once packed, the processed frame is not needed to train, show or predict."""
        dls = super().dataloaders(*args, **kwargs)
        if not keep_frame:
            for o in [self, *(dl.dataset for dl in dls.loaders)]:
                if isinstance(o, TabularGPU): o.release_frame()
        return dls

    # --- saved as plain data (saved.py) ---------------------------------------------------------------------------
    def save(self, path, **kwargs):
        "Save the processed rows and the procs' state in the folder `path`, without pickle (see `save_tabular`)."
        return save_tabular(self, path, **kwargs)

    @classmethod
    def load(cls, path, **kwargs) -> TabularGPU:
        "The Tabular `save` saved in `path`, ready for `dataloaders()`; runs no code from the files (`load_tabular`)."
        return load_tabular(cls, path, **kwargs)

    def row_blocks(self, rows:int) -> RowBlocks:
        "The packed rows on the host, with their layout and row labels, each split's in blocks of `rows` (for `save`)."
        packed,layout = self.packed_rows('cpu')
        blocks = lambda x: (x[a:a + rows].numpy() for a in range(0, len(x), rows))
        return RowBlocks(layout, packed.shape[1], self.row_index, blocks(packed[:self.split]),
                         blocks(packed[self.split:]))

    # --- the packed rows (rows/pack.py) -------------------------------------------------------------------------------
    @property
    def has_y(self) -> bool: return len(self.y_names) > 0 and all(n in self.column_names for n in self.y_names)

    def packed_rows(self, device:torch.device|str|None=None) -> tuple[torch.Tensor, Layout]:
        """`(rows, layout)`: every processed column in one row-major int32 tensor on `device` (default: the frame's),
        so that a batch is a single gather (see rows/pack.py). Packed once, then cached per device."""
        if device is None: device = frame_device(self._items) if self.released is None else self.released.device
        device = torch.device(device)
        if device.type == 'cuda' and device.index is None: device = torch.device('cuda', torch.cuda.current_device())
        if device not in self._packed:
            if self._parent is None: rows,layout = pack_rows(self)
            else:   # a subset's rows are a slice of the whole object's: no copy
                rows,layout = self._parent.packed_rows()
                rows = rows[self._rows]
                if not self.has_y: layout = layout.without_ys()
            self._packed[device] = (rows.to(device), layout)
        return self._packed[device]

    def packed(self, device:torch.device|str|None=None) -> tuple:
        "`(cats, conts[, ys])` on `device`: views of `packed_rows` (cats int32, conts float32, ys int64 or float32)."
        return unpack_rows(*self.packed_rows(device))

    @property
    def bag_widths(self) -> dict:
        "{name: slots} of the multi-hot columns in the packed `cats` (learned by Categorify, see `bag_width`)."
        return {n: w for n,w in (getattr(self.procs, 'multi_hot_lens', None) or {}).items() if n in self.multi_hot}

@dispatch
def show_results(x:TabularGPU, y:TabularGPU, samples, outs, ctxs=None, max_n=10, **kwargs):
    "Inputs, targets and predictions decoded (fastai's `show_results` for `Tabular` shows the raw codes)."
    df = x.new(to_pandas(x.all_cols[:max_n])).decode().items
    preds = y.new(to_pandas(y.all_cols[:max_n])).decode().items
    for n in x.y_names: df[n+'_pred'] = preds[n].values
    display_df(df)

register_procs(TabularGPU)
