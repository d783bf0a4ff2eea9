"""dask-cudf for the cuDF stand-in: Dask's "cudf" backend (`ddf.to_backend('cudf')`) over stand-in partitions, and
the dispatches dask-cudf registers for cuDF's types (python/dask_cudf/dask_cudf/backends.py @6a22d1d), each done on
the host through pandas' own implementation and brought back, so a Dask graph over stand-in partitions runs as one
over cuDF partitions does. `dask_cudf` is also a module in `sys.modules`, for `importlib.util.find_spec` and tests
that import it."""
import sys
import types
import numpy as np
import pandas as pd

from . import frame as F

__all__ = ['install_dask']

_TYPES = (F.DataFrame, F.Series, F.Index)

def _pd(o): return o.to_pandas() if isinstance(o, _TYPES) else o

try:
    import dask.dataframe as dd
    from dask.dataframe.dask_expr import new_collection
    from dask.dataframe.dask_expr._backends import DataFrameBackendEntrypoint
    from dask.dataframe.dask_expr._expr import ToBackend
except ImportError: dd = None   # no Dask: nothing to register
else:
    class ToCudfBackend(ToBackend):
        "backends.py:526-536: pandas partitions through `cudf.from_pandas`, cuDF ones as they are"
        @staticmethod
        def operation(df, options): return df if isinstance(df, _TYPES) else F.from_pandas(df, **options)
        def _simplify_down(self):
            if isinstance(self.frame._meta, _TYPES): return self.frame

    class CudfBackendEntrypoint(DataFrameBackendEntrypoint):
        "backends.py:539-565 @6a22d1d"
        @staticmethod
        def to_backend(data, **kwargs): return new_collection(ToCudfBackend(data, kwargs))
        @staticmethod
        def from_dict(data, npartitions, orient='columns', **kwargs):
            return dd.from_pandas(F.from_pandas(pd.DataFrame.from_dict(data, orient=orient)), npartitions=npartitions)

def _nonempty_column(s, n=2):
    "Two rows of `s`'s dtype (backends.py:94-140 @6a22d1d, `_get_non_empty_data`): a value that dtype holds."
    dt = s._dtype
    if isinstance(dt, F.CategoricalDtype):
        cats = dt.categories._pd
        held = pd.Series(pd.Categorical([cats[0]] * n if len(cats) else ['__UNKNOWN_CATEGORIES__'] * n,
                                        categories=cats if len(cats) else ['__UNKNOWN_CATEGORIES__']))
    elif isinstance(dt, F.ListDtype): held = F._held(pd.Series([[v] for v in _nonempty_values(dt.element_type, n)]))
    else: held = F._held(pd.Series(_nonempty_values(dt, n)))
    if not isinstance(dt, (F.CategoricalDtype, F.ListDtype)): held = held.astype(s._pd.dtype)
    return F.Series._of(held.rename(s.name), dt)

def _nonempty_values(dt, n):
    if F._is_str(dt): return ['cat'] * n
    dt = getattr(dt, 'numpy_dtype', dt)
    if dt.kind == 'b': return [True] * n
    if dt.kind in 'mM': return np.array([0] * n, dtype=dt)
    return np.ones(n, dtype=dt)

def _nonempty(x):
    "meta_nonempty (backends.py:142-175 @6a22d1d): columns of two rows, on a two-row index of the meta's kind"
    if isinstance(x, F.Index): return F.Index._of(pd.RangeIndex(2) if isinstance(x._pd, pd.RangeIndex)
                                                  else pd.Index(_nonempty_column(F.Series._of(pd.Series(x._pd)))._pd))
    if isinstance(x, F.Series): return _nonempty_column(x)
    cols = {c: _nonempty_column(x[c]) for c in x.columns}
    res = F.DataFrame._of(pd.DataFrame({c: s._pd for c,s in cols.items()}), {c: s._dtype for c,s in cols.items()})
    return res if not len(x.columns) else res[list(x.columns)]

def install_dask():
    "Register the stand-in's types with Dask and its 'cudf' backend (as dask-cudf's entry point does)."
    if dd is None: return None
    from dask._dispatch import get_collection_type
    from dask.dataframe import dispatch as D
    from dask.dataframe.dask_expr import DataFrame, Index, Series
    from dask.dataframe.dask_expr._backends import dataframe_creation_dispatch
    from dask.sizeof import sizeof
    from_pandas = F.from_pandas
    dataframe_creation_dispatch.register_backend('cudf', CudfBackendEntrypoint())
    for t,c in ((F.DataFrame, DataFrame), (F.Series, Series), (F.Index, Index)):
        get_collection_type.register(t, lambda _, c=c: c)
        D.get_parallel_type.register(t, lambda _, c=c: c)

    # each of dask-cudf's dispatches: pandas' on the host copy, then back to the stand-in
    back = lambda r: from_pandas(r) if isinstance(r, (pd.DataFrame, pd.Series, pd.Index)) else r
    D.make_meta_dispatch.register(_TYPES, lambda x, index=None: x.head(0) if not isinstance(x, F.Index) else x[:0])
    D.meta_nonempty.register(_TYPES, _nonempty)
    # a meta from (name, dtype) tuples, dicts, scalars (backends.py:197-265): pandas', as a stand-in object
    pandas_obj = D.make_meta_obj.dispatch(pd.DataFrame)
    D.make_meta_obj.register(_TYPES, lambda x, index=None: back(pandas_obj(x, index=_pd(index))))
    D.concat_dispatch.register(_TYPES, lambda dfs, axis=0, join='outer', uniform=False, filter_warning=True,
                               ignore_index=False, **kw: back(D.concat([_pd(d) for d in dfs], axis=axis, join=join,
                                                                     ignore_index=ignore_index)))
    D.categorical_dtype_dispatch.register(_TYPES, lambda categories=None, ordered=False: F.CategoricalDtype(
        categories, ordered))
    D.tolist_dispatch.register((F.Series, F.Index), lambda obj: obj.to_pandas().tolist())
    D.is_categorical_dtype_dispatch.register(_TYPES, lambda obj: isinstance(getattr(obj, 'dtype', obj),
                                                                             F.CategoricalDtype))
    D.hash_object_dispatch.register(_TYPES, lambda x, index=True: back(pd.util.hash_pandas_object(_pd(x),
                                                                                                   index=index)))
    D.group_split_dispatch.register((F.DataFrame, F.Series), lambda df, c, k, ignore_index=False: {
        i: back(p) for i,p in D.group_split_dispatch(_pd(df), _pd(c), k, ignore_index=ignore_index).items()})
    D.grouper_dispatch.register((F.DataFrame, F.Series), lambda obj: pd.core.groupby.Grouper)
    D.to_pandas_dispatch.register(_TYPES, lambda data, nullable=False, **kw: data.to_pandas())
    D.union_categoricals_dispatch.register((F.Series, F.Index), lambda to_union, sort_categories=False,
                                           ignore_order=False: back(pd.api.types.union_categoricals(
                                               [_pd(u) for u in to_union], sort_categories, ignore_order)))
    D.pyarrow_schema_dispatch.register((F.DataFrame,), lambda obj, preserve_index=None, **kw:
                                       D.pyarrow_schema_dispatch(_pd(obj), preserve_index=preserve_index, **kw))
    D.to_pyarrow_table_dispatch.register(F.DataFrame, lambda obj, preserve_index=None, **kw:
                                         D.to_pyarrow_table_dispatch(_pd(obj), preserve_index=preserve_index, **kw))
    D.from_pyarrow_table_dispatch.register(F.DataFrame, lambda obj, table, self_destruct=None, **kw:
                                           F.DataFrame.from_arrow(table))
    sizeof.register(_TYPES, lambda x: int(x.memory_usage(index=True).sum()) if isinstance(x, F.DataFrame)
                    else int(x.memory_usage()))
    m = types.ModuleType('dask_cudf')
    m.__version__, m.__file__ = F.CONF.api['version'], __file__
    m.from_cudf = lambda data, npartitions=None, chunksize=None, sort=True, name=None: dd.from_pandas(
        data, npartitions=npartitions, chunksize=chunksize, sort=sort)
    import importlib.machinery
    m.__spec__ = importlib.machinery.ModuleSpec('dask_cudf', None)
    sys.modules['dask_cudf'] = m
    return m
