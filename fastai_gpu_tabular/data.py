"`BatchDataLoaders`: fastai's `TabularDataLoaders` for `TabularGPU`, with its `from_df`/`from_csv` on cuDF or pandas."
from __future__ import annotations

from pathlib import Path
from fastai.data.transforms import IndexSplitter, RandomSplitter
from fastai.tabular.core import Tabular
from fastai.tabular.data import TabularDataLoaders
from fastcore.foundation import L
from fastcore.meta import delegates

from .backend import backend_of, default_backend, is_dask, is_polars, parquet_schema, read_csv, to_backend
from .core import TabularGPU
from .extras import pickled_by_lookup

__all__ = ['BatchDataLoaders']

class BatchDataLoaders(TabularDataLoaders):
    "`TabularDataLoaders` of `BatchDataLoader`s; `test_dl` takes a cuDF, pandas or Polars frame"
    def __reduce_ex__(self, protocol): return pickled_by_lookup(self, super().__reduce_ex__(2))

    @classmethod
    @delegates(Tabular.dataloaders, but=["dl_type", "dl_kwargs"])
    def from_df(cls, df, path:str|Path='.', procs=None, cat_names=None, cont_names=None, y_names=None, y_block=None,
                valid_idx:list|None=None, backend:str|None=None, **kwargs) -> BatchDataLoaders:
        "Create `BatchDataLoaders` from a cuDF or pandas `df`, as `TabularDataLoaders.from_df`"
        if is_polars(df): df,backend = to_backend(df, backend),None   # through Arrow, to cuDF where usable
        backend_of(df)   # a TypeError that says which types are taken, before `df.columns` is read
        if is_dask(df): raise TypeError("from_df splits by row positions, which a Dask frame cannot address: use "
                                        "TabularGPU(ddf, ..., splits='is_valid').dataloaders(...) "
                                        "with a boolean column")
        cat_names = L(cat_names)
        if cont_names is None: cont_names = [c for c in df.columns if c not in set(cat_names) | set(L(y_names))]
        splits = RandomSplitter()(df) if valid_idx is None else IndexSplitter(valid_idx)(df)
        to = TabularGPU(df, procs, cat_names, cont_names, y_names, splits=splits, y_block=y_block, backend=backend)
        return to.dataloaders(path=path, **kwargs)

    @classmethod
    def from_csv(cls, csv, skipinitialspace:bool=True, backend:str|None=None, **kwargs) -> BatchDataLoaders:
        "Create `BatchDataLoaders` from `csv`, read by cuDF when `backend='cudf'`, else by pandas"
        df = read_csv(csv, backend, skipinitialspace=skipinitialspace)
        return cls.from_df(df, backend=backend, **kwargs)

    @classmethod
    def from_parquet(cls, path, cat_names=None, cont_names=None, y_names=None, backend:str|None=None,
                     columns:list|None=None, **kwargs) -> BatchDataLoaders:
        """Create `BatchDataLoaders` from the Parquet file, folder or list of files `path`, as `from_csv`: read as
        `TabularGPU.from_parquet` reads it (only the named columns; `cont_names=None` means every other column)."""
        cat_names,y_names = list(L(cat_names)),list(L(y_names))
        if cont_names is None:
            cont_names = [c for c in parquet_schema(path).names if c not in set(cat_names + y_names + list(L(columns)))
                          and not c.startswith('__index_level_')]
        valid_idx = kwargs.pop('valid_idx', None)
        # from_df's splitters, uncalled: TabularGPU calls them on the frame it read, as from_df does on its frame
        splits = RandomSplitter() if valid_idx is None else IndexSplitter(valid_idx)
        to = TabularGPU.from_parquet(path, kwargs.pop('procs', None), cat_names, cont_names, y_names, splits=splits,
                                     backend=backend or default_backend(), columns=columns,
                                     y_block=kwargs.pop('y_block', None))
        return to.dataloaders(path=kwargs.pop('path', '.'), **kwargs)
