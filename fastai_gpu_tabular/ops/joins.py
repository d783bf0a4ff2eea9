"""`JoinExternal`: a side table (an item's features: its category, brand, price) joined onto every row by a key, as a
fastai proc (NVTabular's `JoinExternal`): a left join that keeps the frame's rows and their order, its columns then
processed by the other procs."""
from __future__ import annotations

from pathlib import Path
import numpy as np
import pandas as pd
from fastai.tabular.core import Tabular, TabularProc

from ..backend import Frame, array_module, column_values, encode_codes, is_str_dtype, series_like, to_host, to_pandas
from ..checks import check_new_columns, guard_setups

__all__ = ['JoinExternal']

def _is_number(dtype) -> bool:
    return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)

def side_table(table, max_bytes:int):
    """A side table as a frame in memory: a Parquet file read, an Arrow table converted, a Dask frame computed once its
    size in memory (one pass) is known to be under `max_bytes` (it is broadcast to every partition)."""
    if isinstance(table, (str, Path)): return pd.read_parquet(table)
    if type(table).__module__.startswith('pyarrow') and hasattr(table, 'to_pandas'): return table.to_pandas()
    if hasattr(table, 'npartitions') and hasattr(table, 'compute'):   # a Dask frame, without importing Dask
        size = int(table.memory_usage(deep=True, index=True).sum().compute())
        if size > max_bytes:
            raise ValueError(f"JoinExternal: the Dask side table takes {size} bytes in memory, more than "
                             f"max_table_bytes={max_bytes}: it is broadcast to every partition; join it with Dask's "
                             "merge before TabularGPU, or raise max_table_bytes")
        return table.compute()
    return table

class JoinExternal(TabularProc):
    """The columns of `table`, a (small) side frame with one row per value of its key column `on`, joined onto every
    row of the frame by its column `on`: a left join, as pandas' `df.merge(table, on=on, how='left')`, keeping the
    frame's rows in their order. `cat_names` and `cont_names` name the table's columns it adds as cats and as conts
    (default: every other column, numbers as conts, the rest as cats). A cont comes as float64, NaN where the table
    lacks the row's key (FillMissing then fills it and flags it); a cat as the table's values, missing there (so
    Categorify gives `#na#`). The joined columns are what the table holds: fastai's shrink does not run over them.
    Runs first (`order` -5), so every other proc can read them; the table is learned state (saved, exported, in the
    ONNX graph); on Dask it is joined to each partition (a broadcast join). `table` may also be a Parquet file, an
    Arrow table or a Dask frame (computed to the host, refused over `max_table_bytes`). A key the table holds twice is
    an error, or with `on_duplicates` 'first' / 'last' that row of the key is kept. An inner join, which drops rows, is
    not a proc (procs keep the rows, so that `new` and `predict` give one row per row): filter before `TabularGPU`."""
    order = -5
    def __init__(self,
        table:pd.DataFrame, # the side table, one row per key (a cuDF frame comes to the host)
        on:str, # the key column, in the frame and in the table
        cat_names:list|None=None, # the table's columns to add as cats (default: those not numbers)
        cont_names:list|None=None, # the table's columns to add as conts (default: the numbers)
        on_duplicates:str='error', # a key held twice: 'error', or keep its 'first' or 'last' row
        max_table_bytes:int=2**31 # a Dask table larger than this in memory is refused before it is computed
    ):
        if on_duplicates not in ('error', 'first', 'last'):
            raise ValueError(f"JoinExternal(on_duplicates=...) must be 'error', 'first' or 'last', got "
                             f"{on_duplicates!r}")
        table = to_pandas(side_table(table, max_table_bytes))
        if not isinstance(table, pd.DataFrame): raise TypeError(f"JoinExternal takes a DataFrame, not a {type(table)}")
        if on not in table.columns: raise KeyError(f"JoinExternal: the key column {on!r} is not in the table (it has "
                                                  f"{list(table.columns)[:20]})")
        rest = [c for c in table.columns if c != on]
        if cat_names is None and cont_names is None:
            cont_names = [c for c in rest if _is_number(table[c].dtype)]
            cat_names = [c for c in rest if c not in cont_names]
        cat_names, cont_names = list(cat_names or []), list(cont_names or [])
        bad = [c for c in cat_names + cont_names if c not in rest]
        if bad: raise KeyError(f"JoinExternal: column(s) {bad} are not columns of the table besides its key {on!r}")
        bad = [c for c in cont_names if not _is_number(table[c].dtype)]
        if bad: raise TypeError(f"JoinExternal: cont column(s) {bad} of the table are not numbers")
        keys = table[on]
        if bool(keys.isna().any()):
            raise ValueError(f"JoinExternal: the table's key column {on!r} holds missing values: a row joins on a key")
        dup = keys[keys.duplicated()]
        if len(dup) and on_duplicates != 'error':
            table = table[~keys.duplicated(keep=on_duplicates)]
        elif len(dup): raise ValueError(f"JoinExternal: the table holds key(s) {dup.unique()[:5].tolist()} of {on!r} "
                                      "more than once: a left join would repeat the frame's rows; keep one row a key, "
                                      "or pass on_duplicates='first' or 'last'")
        self.on, self.cat_names, self.cont_names = on, cat_names, cont_names
        # plain columns (NumPy numbers, else objects), conts as float64: what it joins, and what a save holds
        plain = lambda c: (c.to_numpy(dtype='f8', na_value=np.nan) if c.name in cont_names else
                           c.to_numpy() if isinstance(c.dtype, np.dtype) else c.to_numpy(dtype=object, na_value=None))
        self.table = pd.DataFrame({c: plain(table[c]) for c in [on, *cat_names, *cont_names]})
        self.made_names = cat_names + cont_names
        super().__init__()

    def raw_names(self, cat_names, cont_names, y_names) -> list:
        "The key: fastai's shrink leaves its values as they are (see `checks.raw_columns`), as the table's are."
        return [self.on]

    def reads(self) -> list:
        "The key (`checks.read_columns`): kept for it in every frame, in cat_names or not."
        return [self.on]

    def check_columns(self, to:Tabular):
        "The key is a column of the frame, or an error naming it."
        if self.on not in to.items.columns:
            raise KeyError(f"JoinExternal: the key column {self.on!r} is not in the frame (it has "
                           f"{list(to.items.columns)[:20]}): a later frame (new, test_dl, predict) must hold it too")

    @guard_setups
    def setups(self, to:Tabular):   # the table is its state, given
        self.check_columns(to)
        check_new_columns('JoinExternal', self.made_names, to.items.columns, to.y_names, ": rename them in the table")

    def rows(self, col):
        "Each row's row of the table, by its key `col` (on its device): -1 where the table lacks the key."
        keys = self.table[self.on]
        # strings as Python objects: what the table holds, without pandas 3 converting them to Arrow's
        vocab = pd.Index(keys.to_numpy(dtype=object) if is_str_dtype(keys.dtype) else keys.to_numpy(),
                         tupleize_cols=False)
        return column_values(encode_codes(col, vocab, add=0)).astype('int64')

    def joined(self, df:Frame) -> dict:
        "{column: the table's column for each row of `df`}, on `df`'s backend and index."
        at = self.rows(df[self.on])
        xp, res = array_module(at), {}
        miss = to_host(at) < 0
        for c in self.cont_names:   # float64, NaN for an unseen key: the last value, which -1 reads
            res[c] = series_like(df, xp.asarray(np.append(self.table[c].to_numpy(), np.nan))[at], name=c)
        for c in self.cat_names:   # as pandas' merge gives them: numbers as floats (NaN) only where a key is unseen
            v, host = self.table[c], to_host(at)
            if not _is_number(v.dtype): vals = np.append(v.to_numpy(dtype=object), None)[host]
            elif miss.any(): vals = np.append(v.to_numpy(dtype='f8', na_value=np.nan), np.nan)[host]
            else: vals = v.to_numpy()[host]
            res[c] = series_like(df, vals, name=c)
        return res

    def encodes(self, to:Tabular):
        self.check_columns(to)
        for c,v in self.joined(to.items).items():
            to[c] = v
            names = to.cat_names if c in self.cat_names else to.cont_names
            if c not in names: names.append(c)
        return to
