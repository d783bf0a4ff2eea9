"`BatchDataLoaders`: fastai's `TabularDataLoaders` for `TabularGPU`, with its `from_df`/`from_csv` on cuDF or pandas."
from __future__ import annotations

from pathlib import Path
import pandas as pd
from fastcore.foundation import L
from fastcore.meta import delegates
from fastai.data.transforms import IndexSplitter, RandomSplitter
from fastai.tabular.core import Tabular
from fastai.tabular.data import TabularDataLoaders

from .backend import backend_of, is_dask, require_cudf
from .core import TabularGPU

__all__ = ['BatchDataLoaders']

class BatchDataLoaders(TabularDataLoaders):
    "`TabularDataLoaders` of `BatchDataLoader`s; `test_dl` takes a cuDF or pandas frame"
    @classmethod
    @delegates(Tabular.dataloaders, but=["dl_type", "dl_kwargs"])
    def from_df(cls, df, path:str|Path='.', procs=None, cat_names=None, cont_names=None, y_names=None, y_block=None,
                valid_idx:list|None=None, backend:str|None=None, **kwargs) -> BatchDataLoaders:
        "Create `BatchDataLoaders` from a cuDF or pandas `df`, as `TabularDataLoaders.from_df`"
        backend_of(df)   # a TypeError that says which types are taken, before `df.columns` is read
        if is_dask(df): raise TypeError("from_df splits by row positions, which a Dask frame cannot address: use "
                                        "TabularGPU(ddf, ..., splits='is_valid').dataloaders(...) with a boolean column")
        cat_names = L(cat_names)
        if cont_names is None: cont_names = [c for c in df.columns if c not in set(cat_names) | set(L(y_names))]
        splits = RandomSplitter()(df) if valid_idx is None else IndexSplitter(valid_idx)(df)
        to = TabularGPU(df, procs, cat_names, cont_names, y_names, splits=splits, y_block=y_block, backend=backend)
        return to.dataloaders(path=path, **kwargs)

    @classmethod
    def from_csv(cls, csv, skipinitialspace:bool=True, backend:str|None=None, **kwargs) -> BatchDataLoaders:
        "Create `BatchDataLoaders` from `csv`, read by cuDF when `backend='cudf'`, else by pandas"
        read = require_cudf().read_csv if backend == 'cudf' else pd.read_csv
        df = read(csv, skipinitialspace=skipinitialspace)
        return cls.from_df(df, backend=backend, **kwargs)
