"The one module that knows cuDF/CuPy versus pandas/NumPy: lazy probes, the frame ops that differ, columns to tensors."
from __future__ import annotations

import functools
import os
import warnings
from typing import TYPE_CHECKING, Any, TypeAlias
import numpy as np
import pandas as pd
import torch
from fastai.tabular.core import FillStrategy, df_shrink_dtypes

from .extras import import_extra

if TYPE_CHECKING:   # for the hints only: cuDF is imported when first used (see `_probe`)
    import cudf

__all__ = ['cudf_available', 'require_cudf', 'to_pandas', 'use_rmm_for_torch']

# the hints' names for a frame and a column on either backend (public, not star-exported)
Frame: TypeAlias = 'pd.DataFrame | cudf.DataFrame'
Column: TypeAlias = 'pd.Series | cudf.Series'

# cuDF is never imported at module import: importing it initialises CUDA, and a laptop has neither.
@functools.cache
def _probe():
    "Import cuDF and CuPy once; return `(cudf, cupy, None)` or `(None, None, reason)`."
    if os.environ.get('FGT_DISABLE_CUDF'): return None, None, 'FGT_DISABLE_CUDF is set'
    try:
        import cudf
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1: return None, None, 'no CUDA device is visible'
        return cudf, cupy, None
    # cuDF validates the driver at import and can fail with more than ImportError
    except Exception as e: return None, None, f'{type(e).__name__}: {e}'

def cudf_available() -> bool:
    "Whether cuDF and CuPy import and a CUDA device is visible (imports them on the first call)."
    return _probe()[0] is not None

def cudf_reason() -> str|None:
    "Why cuDF is unavailable, or None."
    return _probe()[2]

def require_cudf() -> Any:
    "Return the `cudf` module, or raise an ImportError that says how to get it."
    cudf, _, reason = _probe()
    if cudf is None:
        raise ImportError(f"cuDF is not usable here ({reason}). Install fastai_gpu_tabular[cuda12] or [cuda13], "
                          "matching the CUDA major that `nvidia-smi` reports, on a machine with an NVIDIA GPU.")
    return cudf

def use_rmm_for_torch(pool:bool=True, initial_pool_size:int|None=None):
    """Make torch allocate CUDA memory from RMM (cuDF's allocator), so that cuDF and torch share one pool instead of
    each caching memory the other cannot use. Call it first, before torch or cuDF allocates on the GPU: RMM's resource
    is set here (a pool unless `pool=False`), and torch accepts a new allocator only before its first allocation."""
    try:
        import rmm
        from rmm.allocators.torch import rmm_torch_allocator
    except ImportError as e:
        raise ImportError(f"use_rmm_for_torch needs RMM, which comes with cuDF ({e}): install "
                          "fastai_gpu_tabular[cuda12] or [cuda13] on a machine with an NVIDIA GPU") from e
    # RMM leaves it None where torch lacks CUDAPluggableAllocator (a CPU build of torch, or an old one)
    if rmm_torch_allocator is None: raise ImportError(f"torch {torch.__version__} cannot take RMM as its allocator")
    rmm.reinitialize(pool_allocator=pool, initial_pool_size=initial_pool_size)
    torch.cuda.memory.change_current_allocator(rmm_torch_allocator)

def _cupy(): return _probe()[1]

def array_module(a:Any) -> Any:
    "NumPy, or CuPy for a CuPy array or a cuDF object: the array module of `a`'s device (never imports CuPy for NumPy)."
    return _cupy() if is_cudf(a) or type(a).__module__.split('.')[0] == 'cupy' else np

def column_values(col:Column) -> Any:
    """A column's values as a 1-d array on its device (NumPy or CuPy), null as NaN: a cuDF int column with nulls as
    float64, as pandas holds it."""
    if not is_cudf(col): return col.to_numpy()
    if col.dtype.kind != 'f' and col.has_nulls: col = col.astype('float64')
    return col.to_cupy(na_value=np.nan) if col.dtype.kind == 'f' else col.to_cupy()

def frame_like(like:Frame|Column, data:Any, **kwargs) -> Frame:
    "A DataFrame of `data` (columns or a 2-d array on `like`'s device) on `like`'s backend and index."
    return (require_cudf().DataFrame if is_cudf(like) else pd.DataFrame)(data, index=like.index, **kwargs)

def series_like(like:Frame|Column, data:Any, name:Any=None) -> Column:
    """A Series of `data` (an array on `like`'s device, or a host one) on `like`'s backend and index. A host object
    array of missing values only goes to cuDF as a pandas Series: `cudf.Series` of it raises MixedTypeError ("Cannot
    have all NaN values with object dtype", core/column/column.py:3680-3687 @6a22d1d), where from a pandas Series it is
    a column of nulls, as pandas has it (a frame where no row's key is in a side table)."""
    if not is_cudf(like): return pd.Series(data, index=like.index, name=name)
    cudf = require_cudf()
    if not (isinstance(data, np.ndarray) and data.dtype == object and len(data) and pd.isna(data).all()):
        return cudf.Series(data, index=like.index, name=name)
    res = cudf.from_pandas(pd.Series(data, dtype=object, name=name))
    res.index = like.index
    return res

def shallow_copy(df:Frame) -> Frame:
    """A frame over `df`'s data whose columns can be set without touching `df`'s: pandas' `copy(deep=False)`; a cuDF
    row slice is a frame of its own already."""
    return df if is_cudf(df) else df.copy(deep=False)

# the NA tokens of pandas' `read_csv` that libcudf's default list lacks (cpp/src/io/csv/reader_impl.cu:1108-1130
# @6a22d1d): a `None` field is missing for fastai's `from_csv`, a string to cuDF
CUDF_MISSING_NA = ('None',)

def read_csv(path:Any, backend:str|None=None, **kwargs) -> Frame:
    """The csv at `path`, read by cuDF when `backend` is 'cudf', else by pandas, as pandas reads it: `None` is missing
    too (`CUDF_MISSING_NA`); the float columns are pandas' (libcudf parses a float digit by digit, `value += digit *
    divisor` with an inexact `divisor /= 10`, cpp/src/io/utilities/parsing_utils.cuh:122-185 @6a22d1d: not correctly
    rounded, so `0.3` reads 0.30000000000000004, and a float category would miss the host's rows); with
    `skipinitialspace`, which libcudf stores and never reads (cpp/include/cudf/io/csv.hpp:93,344 @6a22d1d,
    rapidsai/cudf#6659; csv_gpu.cu:354 trims numbers only), the header's names and the string columns are stripped of
    their leading spaces here, a field left empty null, as pandas reads them."""
    if backend != 'cudf': return pd.read_csv(path, **kwargs)
    if not {'na_values', 'keep_default_na', 'na_filter'} & set(kwargs):
        kwargs = {**kwargs, 'na_values': list(CUDF_MISSING_NA)}
    at = path.tell() if hasattr(path, 'tell') else None
    df = require_cudf().read_csv(path, **kwargs)
    strip = kwargs.get('skipinitialspace')
    if strip: df.columns = [c.lstrip(' ') if isinstance(c, str) else c for c in df.columns]
    floats = [c for c in df.columns if getattr(df[c].dtype, 'kind', None) == 'f']
    if floats:   # correctly rounded, from the host: only these columns are parsed twice
        if at is not None: path.seek(at)
        host = pd.read_csv(path, **{**kwargs, 'usecols': floats})
        for c in floats: df[c] = _moved(host[c].astype(df[c].dtype), df.index)
    if not strip: return df
    for c in df.columns:
        if is_str_dtype(df[c].dtype):
            s = df[c].str.lstrip(' ')
            df[c] = s.mask(s == '')
    return df

# --- Parquet ----------------------------------------------------------------------------------------------------------
def _parquet_source(path:Any) -> Any:
    "A file, a folder or a list of files as pyarrow and cuDF take them (`str`s), each checked to exist."
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    missing = [str(p) for p in paths if not os.path.exists(p)]
    if missing or not paths: raise FileNotFoundError(f"no Parquet file or folder at {missing or path}")
    return str(paths[0]) if isinstance(path, (str, os.PathLike)) else [str(p) for p in paths]

def parquet_schema(path:Any) -> Any:
    "The Arrow schema of the Parquet data at `path` (a file, a folder, a list of files), read from its footers only."
    import pyarrow.dataset as ds
    return ds.dataset(_parquet_source(path), format='parquet').schema

def read_parquet(path:Any, columns:list, backend:str, dictionary:list|tuple=()) -> Frame:
    """Columns `columns` of the Parquet data at `path` as `pd.read_parquet(path, columns=columns)` reads them, by cuDF
    for `backend='cudf'`. On pandas the string columns in `dictionary` are read as Parquet stores them, as
    dictionaries (pyarrow's `read_dictionary`), and become categoricals of the values that occur, sorted: what
    `astype('category')` of the strings gives (fastai's `df_shrink`), without a Python string per row or a
    factorisation of the rows (`sorted_dictionary`)."""
    src = _parquet_source(path)
    if backend == 'cudf': return pandas_holds(require_cudf().read_parquet(src, columns=list(columns)))
    import pyarrow as pa
    import pyarrow.parquet as pq
    schema = parquet_schema(src)   # only strings: a column stored as a dictionary reads as pandas reads it, unsorted
    strs = lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)
    dicts = [c for c in dictionary if c in schema.names and strs(schema.field(c).type)]
    t = pq.read_table(src, columns=list(columns), use_pandas_metadata=True, read_dictionary=dicts or None)
    if not dicts: return t.to_pandas()
    df = t.drop_columns(dicts).to_pandas()
    # the categoricals put in place into the frame pandas made of the rest (a new frame would stack its blocks again)
    names = [c for c in t.column_names if c in columns]
    for c in sorted(dicts, key=names.index): df.insert(names.index(c), c, sorted_dictionary(t[c]))
    return df

def sorted_dictionary(col:Any) -> pd.Categorical:
    """A column of Arrow dictionary chunks (each row group's chunks share its own dictionary) as a pandas Categorical of
    the values that occur, sorted as `to_category` sorts strings: the distinct dictionaries encoded together once, the
    small dictionary sorted, the rows' codes remapped by gathers, never re-factorised."""
    import pyarrow as pa
    import pyarrow.compute as pc
    seen, which = {}, []   # each distinct dictionary once (by its buffers), and the one each chunk uses
    for c in col.chunks:
        d = c.dictionary
        which.append(seen.setdefault((*(b.address for b in d.buffers()[1:]), len(d)), (len(seen), d))[0])
    dicts = [d for _,d in seen.values()]
    if len(dicts) > 1:   # one hash of the dictionaries' values: `unify_dictionaries` hashes each chunk's again
        enc = pc.dictionary_encode(pa.chunked_array(dicts))
        full = enc.chunk(0).dictionary
        maps = [np.append(pc.fill_null(e.indices, -1).to_numpy(), -1) for e in enc.chunks]   # [-1]: missing stays
    else: full, maps = (dicts[0] if dicts else pa.array([], col.type.value_type)), None
    codes = [pc.fill_null(c.indices, -1).to_numpy().astype(np.int64, copy=False) for c in col.chunks]
    if maps is not None: codes = [maps[w][k] for w,k in zip(which, codes)]
    codes = np.concatenate(codes) if codes else np.zeros(0, np.int64)
    used = np.flatnonzero(np.bincount(codes[codes >= 0], minlength=len(full)))   # a file's dictionary may hold more
    vals = full if len(used) == len(full) else full.take(pa.array(used))
    keys = short_string_keys(vals)   # distinct: any sort gives their one order
    order = np.argsort(keys) if keys is not None else pc.array_sort_indices(vals).to_numpy()
    rank = np.full(len(full) + 1, -1, np.int64)   # -1 (a missing value) reads the last
    rank[used[order]] = np.arange(len(used))
    cats = pd.Index(vals.take(pa.array(order)).to_pandas())   # pandas' dtype for the strings: object, or 3's str
    return pd.Categorical.from_codes(rank[codes], dtype=pd.CategoricalDtype(cats), validate=False)

def _moved(col:pd.Series, index) -> Column:
    "A host column on the device, on `index` (a cuDF frame's)."
    res = require_cudf().from_pandas(col)
    res.index = index
    return res

def is_cudf(o:Any) -> bool:
    "Whether `o` is a cuDF object; checks the type's module, so it never imports cuDF."
    return type(o).__module__.split('.')[0] == 'cudf'

def backend_name(o:Any) -> str:
    "'cudf' for any cuDF object (a frame, a column, an index: a released frame's row index), else 'pandas'."
    return 'cudf' if is_cudf(o) else 'pandas'

def is_dask(o:Any) -> bool:
    """Whether `o` is a Dask collection (dask.dataframe, or dask-cudf's); checks the type's module, so it never
    imports Dask."""
    return type(o).__module__.split('.')[0] in ('dask', 'dask_cudf', 'dask_expr')

def is_polars(o:Any) -> bool:
    "Whether `o` is a Polars object (DataFrame, LazyFrame, Series); checks the type's module, never imports Polars."
    return type(o).__module__.split('.')[0] == 'polars'

def _not_a_frame(o) -> TypeError:
    "The error for `o`, which is not a frame: its type, and how to turn it into one."
    t = type(o)
    name = t.__name__ if t.__module__ == 'builtins' else f"{t.__module__.split('.')[0]}.{t.__name__}"
    if isinstance(o, dict): how = "build one with pd.DataFrame(your_dict)"
    elif isinstance(o, (np.ndarray, list, tuple)):
        how = "build one with pd.DataFrame(values, columns=[...]), naming the columns"
    elif is_dask(o): how = "convert it with .to_dask_dataframe()"
    elif is_polars(o): how = "convert it with .to_frame()"   # a Polars Series
    elif hasattr(o, 'to_pandas'): how = "convert it with .to_pandas()"
    else: how = "load the data into one"
    return TypeError(f"Expected a pandas, cuDF, Polars or Dask DataFrame, got {name}: {how}")

def backend_of(df:Frame|Column) -> str:
    """'cudf' or 'pandas', from the type of `df` (a DataFrame or Series; for a Dask one, its partitions'). The one place
    that decides which types are accepted: anything else is a TypeError that names them and says how to convert."""
    meta = getattr(df, '_meta', None) if is_dask(df) else df   # a Dask frame: its partitions' type
    if is_cudf(meta): return 'cudf'
    if isinstance(meta, (pd.DataFrame, pd.Series)): return 'pandas'
    raise _not_a_frame(df)

def default_backend() -> str:
    "The backend for data that has none of its own (a Polars frame, a Parquet file): cuDF where usable, else pandas."
    return 'cudf' if cudf_available() else 'pandas'

def to_backend(df:Frame, backend:str|None=None) -> Frame:
    """Move `df` to `backend` ('pandas' or 'cudf'); None keeps the frame's own (a Polars frame, which has none, goes to
    `default_backend()`). Anything but a frame is a TypeError. A cuDF frame (moved or not) holds its values as pandas
    would (`pandas_holds`)."""
    if is_polars(df): return from_arrow(polars_arrow(df), backend or default_backend())
    own = backend_of(df)
    if is_dask(df):
        return df if backend is None or backend == own else df.to_backend(backend)   # dask-cudf for 'cudf'
    if backend is None or backend == own: return pandas_holds(df) if own == 'cudf' and df.ndim == 2 else df
    if backend == 'cudf':
        if df.ndim == 1: return to_backend(df.to_frame(), 'cudf')[df.name if df.name is not None else 0]
        try: return pandas_holds(_from_pandas(df))
        except (TypeError, ValueError):   # cuDF's MixedTypeError (Arrow's errors) names no column: find it
            for n,c in df.items():
                vals = c.dropna() if c.dtype == object else ()
                if len({value_kind(o) for o in vals}) > 1: raise mixed_types_error(n, vals) from None
            raise
    if backend == 'pandas': return df.to_pandas()
    raise ValueError(f"backend must be 'pandas', 'cudf' or None, not {backend!r}")

def polars_arrow(df) -> Any:
    """A Polars DataFrame (a LazyFrame collected) as an Arrow table, in Arrow's classic types (large strings, not
    views), which both pandas' and cuDF's Arrow readers take; the columns' buffers are shared, not copied."""
    pl = import_extra('polars', 'polars', 'a Polars frame')
    if isinstance(df, pl.LazyFrame): df = df.collect()
    if not isinstance(df, pl.DataFrame): raise _not_a_frame(df)
    return df.to_arrow(compat_level=pl.CompatLevel.oldest())

def from_arrow(table, backend:str) -> Frame:
    """An Arrow table as a frame: on pandas as `pd.read_parquet` makes it (`to_pandas`: Arrow's nulls as pandas holds
    them, dictionaries as categoricals in their order, strings as object or pandas 3's `str`), on cuDF by
    `cudf.DataFrame.from_arrow` (the host's buffers straight to the device), held as pandas would (`pandas_holds`)."""
    if backend == 'cudf': return pandas_holds(require_cudf().DataFrame.from_arrow(table))
    if backend == 'pandas': return table.to_pandas()
    raise ValueError(f"backend must be 'pandas', 'cudf' or None, not {backend!r}")

def _nullable(dt) -> bool:
    "pandas' nullable numbers and booleans (Int64, Float64, boolean, ...): masked dtypes, with a NumPy equivalent"
    return isinstance(dt, pd.api.extensions.ExtensionDtype) and hasattr(dt, 'numpy_dtype') and dt.kind in 'biuf'

def _from_pandas(df:pd.DataFrame):
    """`cudf.from_pandas` of a pandas frame, its columns first given a form cuDF holds as the pandas path reads them:
    pandas' nullable numbers and bools as NumPy's (float64 where they hold NA; cuDF would keep the pandas dtype,
    column/column.py:3350-3368 @v26.06.01, and NumPy cannot promote it), every string dtype as objects (cuDF 26.06
    joins a pandas StringDtype with nothing but itself: _join_helpers.py:96,133-136 @v26.06.01), an object column of
    numbers as numbers (cuDF refuses it: column.py:3509-3518 @26.10), and one of bools as the category that fastai's
    shrink makes of it (a cuDF bool column's vocabulary would hold NumPy bools; and under cudf.pandas'
    `mode.pandas_compatible` `from_pandas` fails on object bools: column.py:3520-3526 @26.10)."""
    ready = df.copy(deep=False)
    for n,c in df.items():
        dt = c.dtype
        if _nullable(dt):
            ready[n] = c.astype('float64' if dt.kind in 'iuf' else object) if c.isna().any() else \
                c.astype(dt.numpy_dtype)
            dt = ready[n].dtype
        elif isinstance(dt, pd.StringDtype): ready[n] = c.astype(object).where(c.notna(), None)
        if dt != object: continue
        kind = pd.api.types.infer_dtype(ready[n], skipna=True)
        if kind in ('integer', 'floating', 'mixed-integer-float'): ready[n] = pd.to_numeric(ready[n])
        elif kind == 'boolean': ready[n] = ready[n].astype('category')
    return require_cudf().from_pandas(ready)

def pandas_holds(df:Frame) -> Frame:
    """A cuDF frame whose int columns with missing values (what `cudf.read_csv`/`read_parquet` give, and dask-cudf's
    partitions) are float64, as pandas holds them: fastai's shrink would make them int8/16 (cuDF's reductions skip
    nulls), `fillna(37.5)` would then fail (numerical.py:1183-1209 @26.10), and a vocabulary would hold ints where
    fastai's holds floats; pandas' nullable dtypes as NumPy's. The frame itself where nothing needs it (a shallow copy
    otherwise)."""
    casts = {c: 'float64' if df[c].has_nulls and df[c].dtype.kind in 'iuf' else df[c].dtype.numpy_dtype
             for c in df.columns
             if _nullable(df[c].dtype) or (isinstance(df[c].dtype, np.dtype) and df[c].dtype.kind in 'iu'
                                           and df[c].has_nulls)}
    if not casts: return df
    df = df.copy(deep=False)
    for c,t in casts.items(): df[c] = df[c].astype(t)
    return df

def to_pandas(o:Any) -> Any:
    "Host copy of a (small) cuDF object; pandas and NumPy pass through."
    return o.to_pandas() if is_cudf(o) else o

def frame_device(df:Frame) -> torch.device:
    """The device the frame's data lives on: for cuDF, where torch finds its first number column's values (a one-row
    view through DLPack, as `col_to_tensor` reads them), not CuPy's current device, which may be another GPU's; the
    current device for a frame with no rows or no such column."""
    if not is_cudf(df): return torch.device('cpu')
    for c in df.columns:
        col = df[c]
        if len(col) and getattr(col.dtype, 'kind', None) in ('i', 'u', 'f'):
            return torch.from_dlpack(col.iloc[:1].to_cupy(na_value=0)).device
    return torch.device('cuda', _cupy().cuda.runtime.getDevice())

def arrow_strings(col:Column) -> Any:
    """The pyarrow array under a pandas column of Arrow strings (pandas 3's `str`, `string[pyarrow]`, an `ArrowDtype`
    of strings), without a copy; None for any other column."""
    dt = col.dtype
    if isinstance(dt, pd.StringDtype) and dt.storage == 'pyarrow' or \
       isinstance(dt, pd.ArrowDtype) and dt.kind in 'OU' and 'string' in str(dt.pyarrow_dtype):
        import pyarrow as pa
        return pa.array(col.array)   # the array's `__arrow_array__`: its own (chunked) buffers
    return None

def ranked(codes:np.ndarray, order:np.ndarray) -> np.ndarray:
    "Codes into some values as codes into the same values sorted (`values[order]`); a missing value's -1 stays -1."
    rank = np.empty(len(order) + 1, np.int64)
    rank[order], rank[-1] = np.arange(len(order)), -1   # -1 reads the last entry
    return rank[codes]

def _arrow_category(col:pd.Series, arr) -> pd.Series:
    """`col.astype('category')` of Arrow strings `arr` in Arrow's kernels: one dictionary encoding, the dictionary
    sorted (by bytes: UTF-8's order is the code points', as pandas sorts them; short strings as integer keys), no
    Python object per value."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if isinstance(arr, pa.ChunkedArray): arr = arr.combine_chunks()   # one dictionary for all chunks
    enc = pc.dictionary_encode(arr)
    keys = short_string_keys(enc.dictionary)
    order = np.argsort(keys) if keys is not None else pc.array_sort_indices(enc.dictionary).to_numpy()
    codes = ranked(pc.fill_null(enc.indices, -1).to_numpy(), order)
    cats = pd.Index(col.dtype.__from_arrow__(enc.dictionary.take(pa.array(order))))
    cat = pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(cats), validate=False)
    return pd.Series(cat, index=col.index, name=col.name)

_KEY_MASKS = np.array([(1 << 64) - (1 << 8 * (8 - n)) for n in range(9)], dtype=np.uint64)   # a key's first n bytes

def short_string_keys(arr) -> np.ndarray|None:
    """Arrow strings `arr` (no nulls) as uint64 keys in the strings' order, when each is at most 8 UTF-8 bytes and none
    holds NUL (IDs, hashes): the bytes big-endian, zero-padded. UTF-8's byte order is the code points', and the padding
    sorts a prefix first, as Python does; so NumPy hashes and sorts them as integers, several times quicker than Arrow
    does strings. None for other strings. Read from the array's buffers: the 8 bytes from each string's start, those
    past its end masked to zero."""
    import pyarrow as pa
    if arr.null_count: return None
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)): arr = arr.cast(pa.large_string())
    n = len(arr)
    if not n: return np.zeros(0, np.uint64)
    _, offsets, data = arr.buffers()
    dt = np.dtype(np.int64 if pa.types.is_large_string(arr.type) else np.int32)
    o = np.frombuffer(offsets, dt, n + 1, arr.offset * dt.itemsize)
    size = np.diff(o)
    if size.max() > 8: return None
    b = np.frombuffer(data, np.uint8, int(o[-1] - o[0]), int(o[0]))
    if not b.all(): return None   # a NUL byte: it would read as padding
    padded = np.zeros(len(b) + 8, np.uint8)   # so the last strings' 8 bytes are in the buffer
    padded[:len(b)] = b
    window = np.lib.stride_tricks.sliding_window_view(padded, 8)
    keys = window[o[:-1] - o[0]].view('>u8').ravel()
    return keys.astype(np.uint64) & _KEY_MASKS[size]

def strings_of_keys(keys:np.ndarray):
    "The Arrow strings (`large_string`) whose `short_string_keys` are `keys`."
    import pyarrow as pa
    import pyarrow.compute as pc
    b = np.ascontiguousarray(keys, dtype='>u8')
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), len(b), [None, pa.py_buffer(b)])
    return pc.utf8_rtrim(fixed.cast(pa.large_binary()).cast(pa.large_string()), characters='\x00')

def to_category(col:Column) -> Column:
    """`col.astype('category')`: categories sorted, missing values -1. For a pandas column of strings the distinct
    values are sorted in C: Arrow strings by Arrow's kernels, object strings as a NumPy unicode array (code-point
    order, Python's), never by comparing Python objects."""
    if is_cudf(col): return col.astype('category')
    arr = arrow_strings(col)
    if arr is not None: return _arrow_category(col, arr)
    if col.dtype != object: return col.astype('category')
    try: codes, uniq = pd.factorize(col, sort=False)
    except TypeError as e:   # lists (not multi-hot), dicts, sets: pandas' message names neither the column nor a fix
        raise TypeError(f"cat column {col.name!r} holds unhashable values ({e}): cast it to str, or declare a column "
                        "of lists multi-hot") from None
    if pd.api.types.infer_dtype(uniq, skipna=False) != 'string': return col.astype('category')
    order = np.argsort(np.asarray(uniq, dtype=str), kind='stable')
    cat = pd.Categorical.from_codes(ranked(codes, order), validate=False,
                                    categories=pd.Index(uniq[order], dtype=object))
    return pd.Series(cat, index=col.index, name=col.name)

def _cast(col, t): return to_category(col) if t == 'category' else col.astype(t)

def gather_columns(df:Frame, cols:list, order:np.ndarray|None=None, casts:dict|None=None) -> Frame:
    """Columns `cols` of `df` (rows in `order`, if given), each cast as `casts` says, as a new frame of `df`'s backend.
    The casts run over all rows, before the gather, as fastai's `df_shrink` does: a category's vocabulary includes
    the rows that splits leave out."""
    casts = casts or {}
    if is_cudf(df):
        res = df[cols]
        for c,t in casts.items(): res[c] = _cast(res[c], t)
        return res if order is None else res.take(order)
    # pandas: cast first, so that the row gather moves category codes rather than Python object pointers
    data = {}
    for c in cols:
        a = (_cast(df[c], casts[c]) if c in casts else df[c]).array
        data[c] = a if order is None else a.take(order)
    if order is None: return pd.DataFrame(data, index=df.index)   # copied: the caller's frame stays the caller's
    # the gathered arrays are new: kept as they are, not copied again into blocks of one dtype (1.3 s at 4M rows)
    return pd.DataFrame(data, index=df.index.take(order), copy=False)

def col_to_tensor(col:Column) -> torch.Tensor:
    "A column as a torch tensor on the column's own device: zero-copy via `from_numpy`, or DLPack on the GPU."
    if is_cudf(col): return torch.from_dlpack(col.values)
    a = col.to_numpy()
    if a.dtype == object: raise TypeError(f"column {col.name!r} holds Python objects, not numbers")
    with warnings.catch_warnings():   # pandas 3 (copy-on-write) gives read-only views: the caller only reads, to copy
        warnings.filterwarnings('ignore', 'The given NumPy array is not writable', UserWarning)
        return torch.from_numpy(a)   # strided views are fine: the caller copies into the packed tensor

def frame_of_tensors(cols:dict, dtypes:dict, index:Any) -> Frame:
    """A frame of 1-d tensors `cols` ({name: tensor}, strided views are fine), each copied as `dtypes[name]`, on `index`
    (pandas or cuDF: the frame's backend; CUDA tensors go to cuDF through DLPack): the inverse of `col_to_tensor`."""
    if is_cudf(index):
        cp = _cupy()
        return require_cudf().DataFrame({c: cp.from_dlpack(t.contiguous()).astype(dtypes[c]) for c,t in cols.items()},
                                        index=index)
    return pd.DataFrame({c: t.numpy().astype(dtypes[c]) for c,t in cols.items()}, index=index)

def to_host(o:Any) -> Any:
    "Small device results (Series, Index, arrays) as pandas/NumPy; host objects pass through."
    if is_cudf(o): return o.to_pandas()
    if type(o).__module__.split('.')[0] == 'cupy': return o.get()
    return o

def host_scalar(v:Any) -> Any:
    "A device scalar (0-d CuPy array) as a NumPy scalar; host scalars pass through."
    return v.get()[()] if type(v).__module__.split('.')[0] == 'cupy' else v

def is_str_dtype(dtype:Any) -> bool:
    "Object or string columns: the ones fastai's `df_shrink` casts to category."
    return getattr(dtype, 'name', str(dtype)).startswith(('object', 'str'))

def is_numeric_dtype(dtype:Any) -> bool:
    return pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)

def _first_value(col):
    "The first non-null value of a pandas column, or None (looks at a few rows before scanning them all)."
    for a in (col.iloc[:64], col):
        a = a.to_numpy()
        ok = ~pd.isna(a) if a.dtype != object else np.fromiter((not _isnull(v) for v in a), bool, len(a))
        if ok.any(): return a[ok.argmax()]
    return None

def _isnull(v): return v is None or (isinstance(v, float) and v != v) or v is pd.NA or v is pd.NaT

def is_categorical(dtype:Any) -> bool:
    "Whether `dtype` is a categorical's: pandas' or cuDF's (`cudf.CategoricalDtype` is not a `pd.CategoricalDtype`)."
    return type(dtype).__name__ == 'CategoricalDtype'

def host_dtype(dtype:Any) -> Any:
    "`dtype` as pandas has it: cuDF's CategoricalDtype as pandas' (its categories on the host), others as they are."
    return dtype.to_pandas() if is_categorical(dtype) and not isinstance(dtype, pd.CategoricalDtype) else dtype

def is_list_dtype(col:Column) -> bool:
    "Whether a column holds lists (cuDF list dtype, or pandas object cells that are lists/arrays)."
    if is_cudf(col): return type(col.dtype).__name__ == 'ListDtype'
    return col.dtype == object and isinstance(_first_value(col), (list, tuple, np.ndarray))

def first_value(col:Column) -> Any:
    "The first non-null value of a column (pandas or cuDF), or None."
    if not is_cudf(col): return _first_value(col)
    v = to_host(col.dropna().head(1))
    return v.iloc[0] if len(v) else None

def value_kind(v:Any) -> str:
    "'str', 'number' (bools, ints and floats, NumPy's too) or the type's name: values of one kind sort together."
    if isinstance(v, str): return 'str'
    if isinstance(v, (bool, int, float, np.bool_, np.number)): return 'number'
    return type(v).__name__

def column_kind(col:Column) -> str|None:
    """The `value_kind` a column holds, cheaply: from its dtype (a categorical's categories'), or from its first value
    for an object column; None for a column with no value, or of another dtype (lists, dates)."""
    dt = col.dtype
    if is_categorical(dt):   # its first category says (one, not all: they may be millions)
        return value_kind(to_host(dt.categories[:1])[0]) if len(dt.categories) else None
    if getattr(dt, 'kind', None) in ('b', 'i', 'u', 'f'): return 'number'   # NumPy's, cuDF's, pandas' nullable
    if isinstance(dt, pd.StringDtype) or (is_cudf(col) and is_str_dtype(dt)): return 'str'
    if dt != object or is_cudf(col): return None
    v = _first_value(col)
    return None if v is None else value_kind(v)

def mixed_types_error(name:str, values:Any) -> TypeError:
    "The error for column `name`, whose distinct non-missing `values` mix types that fastai's vocabulary cannot sort."
    kinds = sorted({type(o).__name__ for o in values})
    return TypeError(f"column {name!r} mixes value types {kinds}: cast it to one type first")

def mixed_values(col:Column) -> np.ndarray|None:
    """The distinct non-missing values of a cat column (a categorical's categories), if they are of kinds that do not
    sort together (strings and numbers; ints and floats sort), else None. None and NaN are missing values, not a type;
    a cuDF column holds one type."""
    if is_cudf(col): return None
    vals = col.cat.categories if isinstance(col.dtype, pd.CategoricalDtype) else col if col.dtype == object else ()
    # pandas' C pass says which may mix; the distinct values then say whether they do
    if not len(vals) or pd.api.types.infer_dtype(vals, skipna=True) not in ('mixed', 'mixed-integer'): return None
    u = pd.unique(np.asarray(vals, dtype=object))
    u = u[~pd.isna(u)]
    return u if len({value_kind(v) for v in u}) > 1 else None

def nan_as_null(df:Frame) -> dict:
    """cuDF keeps NaN apart from null, which fastai's procs treat alike: {name: the column with NaN as null} of `df`'s
    float columns on cuDF, {} on pandas."""
    if not is_cudf(df): return {}
    return {c: df[c].nans_to_nulls() for c in df.columns if df[c].dtype.kind == 'f'}

def as_numbers(col:Column) -> Column|None:
    """pandas' `to_numeric(col)` of a host column of numbers held as objects or strings (predict's `row.to_frame().T`
    is all object), raising as it does; None where no such coercion is made: a categorical column, or a cuDF one."""
    if is_cudf(col) or is_categorical(col.dtype): return None
    return pd.to_numeric(col)

def factorize(col:Column) -> tuple:
    """`(codes, uniques)` of a column as host arrays: int64 codes (-1: missing) and its distinct values (a categorical's
    categories; object unless numbers), found on the column's device. A TypeError, pandas', for unhashable values."""
    if is_cudf(col):   # distinct values found on the device; only they and the codes come to the host
        codes, uniq = col.factorize()
        return to_host(codes).astype(np.int64), to_host(uniq).to_numpy()
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy().astype(np.int64), col.cat.categories.to_numpy()
    codes, uniq = pd.factorize(col, use_na_sentinel=True)
    return codes.astype(np.int64), np.asarray(uniq.to_numpy(dtype=object) if uniq.dtype.kind not in 'biuf' else uniq)

def group_by(col:Column, keys:Column, **kwargs) -> Any:
    """`col.groupby(keys, **kwargs)` over the categories that occur: pandas' `observed=True` (pandas 2 would add a
    categorical key's unseen categories); cuDF takes no such argument."""
    return col.groupby(keys, **kwargs) if is_cudf(col) else col.groupby(keys, observed=True, **kwargs)

def holds_strings(col:Column) -> bool:
    "Whether a column's values are strings (a cuDF string column, or pandas cells that are `str`)."
    if is_cudf(col): return is_str_dtype(col.dtype)
    return isinstance(_first_value(col), str)

def sorted_uniques(col:Column) -> list:
    """Sorted distinct non-null values of `col` as a host list of NumPy scalars or Python objects, as fastai's
    `L.sorted()`."""
    # `drop_duplicates`, not `unique`: under cudf.pandas' compatible mode cuDF's `unique()` is a CuPy array
    if is_cudf(col):
        # a categorical sorts by its codes on cuDF (column.py:2234-2251 @v26.06.01), by value in pandas
        if is_categorical(col.dtype): col = col.astype(col.dtype.categories.dtype)
        vals = to_host(col.dropna().drop_duplicates().sort_values()).to_numpy()
        return [bool(v) for v in vals] if holds_py_bools(col) else list(vals)   # pandas holds those as Python bools
    u = np.asarray(col.unique())   # then drop the missing ones: cheaper than `dropna` on every row of an object column
    u = u[~pd.isna(u)]
    if u.dtype != object: return list(np.sort(u))
    try: return sorted(u)
    except TypeError: raise mixed_types_error(col.name, u) from None

def truthy(col:Column) -> Column:
    """`col.astype(bool)` as fastai's `ColSplitter` casts the column's NumPy values: NaN is True (validation). On cuDF
    NaN is null, which the cast makes False (training: a string's `astype(bool)` is "non-empty", null False,
    core/column/string.py:265-273 @6a22d1d): a float column's nulls are NaN, so True; so are a string or categorical
    column's (pandas' missing string and category is NaN: pandas 3's `str`, `read_csv`, a categorical's NaN); a bool
    column's null is pandas' None, False."""
    if not is_cudf(col): return col.astype(bool)
    if col.dtype.kind == 'f': col = col.fillna(1.0)
    if is_str_dtype(col.dtype) or is_categorical(col.dtype): return col.astype(bool) | col.isna()
    return col.astype(bool).fillna(False)

def py_values(values:list) -> list:
    "`values` as Python objects (NumPy scalars as theirs): the elements of pandas' lists are, where cuDF's are typed."
    return [v.item() if isinstance(v, np.generic) else v for v in values]

def holds_py_bools(col:Column) -> bool:
    """A cuDF bool column with nulls: pandas holds those values as an object column of Python bools (what cuDF's own
    `to_pandas` gives, and what `cudf.from_pandas` turned into this column), so fastai's vocabulary holds `bool`s."""
    return is_cudf(col) and getattr(col.dtype, 'kind', None) == 'b' and bool(col.isna().any())

def shrink_dtypes(df:Frame, skip:list|tuple=()) -> dict:
    "fastai's `df_shrink_dtypes(df, skip)`, where a cuDF bool column with nulls is the object column pandas has for it."
    res = df_shrink_dtypes(df, skip=list(skip))
    if not is_cudf(df): return res
    objs = {c for c in df.columns if c not in skip and holds_py_bools(df[c])}   # fastai's obj2cat: to category
    return {c: 'category' if c in objs else res[c] for c in df.columns if c in objs or c in res}

def float_dtypes(df:Frame, names:Any) -> dict:
    "{name: dtype name} of the NumPy float columns of `df` (pandas, cuDF, or a Dask frame's meta) among `names`."
    names = set(names)
    return {c: t.name for c,t in df.dtypes.items() if c in names and isinstance(t, np.dtype) and t.kind == 'f'}

def float_casts(df:Frame, dtypes:dict) -> dict:
    """{name: dtype} of the columns of `df` to cast to the float `dtypes` (the training frame's, `float_dtypes`): those
    of another dtype that hold numbers (a numeric dtype, or an object column of numbers, as `predict`'s row is). Ints
    and strings are not cast to: an int's width changes no value (and a later int may not fit the training width), and
    a string is not a number (a cat column then holds another kind of value than its vocabulary: see `check_kind`)."""
    res = {}
    for c,t in dtypes.items():
        if c not in df.columns or df[c].dtype == t: continue
        dt = df[c].dtype
        if pd.api.types.is_numeric_dtype(dt) or (dt == object and not is_cudf(df) and pd.api.types.infer_dtype(
                df[c], skipna=True) in ('floating', 'integer', 'mixed-integer-float', 'boolean')): res[c] = t
    return res

def codes_dtype(n:int) -> np.dtype:
    "The signed dtype of pandas' codes for `n` categories (its `coerce_indexer_dtype`); cuDF's are unsigned to 26.06."
    return next(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64) if t is np.int64 or n < np.iinfo(t).max)

def encode_codes(col:Column, vocab:list|pd.Index, add:int=1) -> Column:
    """Codes of `col` against `vocab` (a list of values, or the Index `pd.CategoricalDtype(vocab).categories` built
    from them), plus `add`: a value not in `vocab`, or null, gives `add-1`.
    A Series on `col`'s index, on its backend, with pandas' code dtype: fastai's `pd.Categorical(col, vocab).codes+add`.
    Values are looked up in the index `pd.Categorical` builds from `vocab` (its `get_indexer`, which pandas 3 no longer
    lets `Categorical` do for values outside `vocab`); a categorical column maps its categories, then gathers its codes.
    On cuDF this avoids `astype(CategoricalDtype(vocab))`, whose codes are unsigned before 26.10 (an unseen value gets
    the largest code, not -1) and which fails on a categorical column whose categories need a wider code type."""
    cats = vocab if isinstance(vocab, pd.Index) else pd.CategoricalDtype(vocab).categories
    cu = is_cudf(col)
    if cu: cats = require_cudf().from_pandas(cats)
    xp = array_module(col)
    lookup = _device_indexer if cu else lambda cats, needle: cats.get_indexer(needle)
    if is_categorical(col.dtype):
        old = col.cat.codes.astype('int64').fillna(-1).values if cu else col.cat.codes.to_numpy()
        # the categories of the frame the vocabulary came from are the vocabulary: its codes, with no lookup
        if not cu and col.cat.categories.equals(cats): codes = old
        else: codes = xp.append(lookup(cats, col.cat.categories), -1)[old]   # a missing value, -1, reads the last
    else: codes = lookup(cats, col)
    dt = codes_dtype(len(cats))
    return series_like(col, (codes + add).astype(dt), col.name)

def _device_indexer(cats, needle):
    """`cats.get_indexer(needle)` on cuDF (a device array, -1 where not found), with pandas' answer where cuDF's join
    casts the keys otherwise: a string and a number never match (cuDF casts both to float64, so '5' finds 5:
    join/_join_helpers.py:133-136 @v26.06.01, :153 @26.10), and strings of two string dtypes do (cuDF 26.06 casts a
    pandas StringDtype against object to float64 too, which fails, and then finds nothing: _join_helpers.py:96)."""
    strs = is_str_dtype(cats.dtype), is_str_dtype(needle.dtype)
    if strs[0] != strs[1]: return _cupy().full(len(needle), -1, dtype=np.int64)
    if strs[0] and cats.dtype != needle.dtype: cats = cats.astype(needle.dtype)
    return cats.get_indexer(needle)

def _counts_by_first_row(col:Column) -> Frame:
    """The counts `n` of `col`'s non-missing values (the index), in order of their first row, counted on `col`'s own
    device: the pattern of cuDF 26.10's own `value_counts` (series.py:3341-3364 @26.10); 26.06's
    `value_counts(sort=False)` counts in hash order (series.py:3205, indexed_frame.py:5646 @v26.06.01)."""
    xp = array_module(col)
    frame = col.rename('v').reset_index(drop=True).to_frame()
    frame['p'] = xp.arange(len(col))
    g = frame.groupby('v', dropna=True, sort=False).agg({'p': ['count', 'min']})
    g.columns = ['n', 'first']
    return g.sort_values('first')

def counts_in_order(col:Column) -> pd.Series:
    """pandas' `col.dropna().value_counts(sort=False)` as a host Series: counts in order of first appearance (its hash
    table's order), on cuDF too."""
    if not is_cudf(col): return col.dropna().value_counts(sort=False)
    return to_host(_counts_by_first_row(col)['n']).rename_axis(None).rename('count')

def mode_value(col:Column) -> Any:
    """fastai's `FillStrategy.mode` (`col.dropna().value_counts().idxmax()`) by counting on `col`'s own backend, for
    cuDF: its Series has no `idxmax` (rapidsai/cudf#9602), and before 26.10 it orders equal counts by hash. pandas keeps
    the counts in order of first appearance and sorts them: stably from pandas 3 (the first value to appear wins a tie),
    with NumPy's quicksort before, whose order among ties depends on all the counts. So a tie is settled by that same
    sort of those same counts, on the host (only then do the counts leave the device). None if `col` is all missing."""
    g = _counts_by_first_row(col)
    if len(g) == 0: return None
    top = g['n'] == g['n'].max()
    if int(top.sum()) > 1 and int(pd.__version__.split('.')[0]) < 3:
        i = pd.Series(to_host(g['n']).to_numpy()).sort_values(ascending=False).index[0]
        return to_host(g.index[i:i+1])[0]
    return to_host(g[top].index[:1])[0]

def fill_stat(strategy:Any, col:Column, fill:Any) -> Any:
    """fastai's FillMissing value `strategy(col, fill)` of a column with values, as the host scalar pandas gives:
    on cuDF the mode is counted on the device (`mode_value`), and a computed float of a float column has its dtype."""
    # cuDF has no `idxmax` for fastai's mode (`value_counts().idxmax()`): counted on the device, with pandas' tie rule
    if strategy is FillStrategy.mode and is_cudf(col): v = mode_value(col)
    else: v = host_scalar(to_host(strategy(col, fill)))
    # pandas' median/mode of a float32 column is a float32: give cuDF's results that type too
    cast = (is_cudf(col) and strategy is not FillStrategy.constant and isinstance(v, (float, np.floating))
            and col.dtype.kind == 'f')
    return col.dtype.type(v) if cast else v

def normalize_stats(conts:Frame) -> tuple:
    """fastai's `dict(conts.mean())` and `dict(conts.std(ddof=0)+1e-7)`. On cuDF, which reduces a float32 column in
    float32 and refuses a bool column next to numbers, each column is reduced in float64 and rounded as pandas rounds:
    to float32 for a float32 column (pandas' `std` is float64 inside), then to the frame's result dtype (float32 only
    if every column is), where the 1e-7 is added."""
    if not is_cudf(conts): return dict(conts.mean()), dict(conts.std(ddof=0) + 1e-7)
    own = {n: np.float32 if conts[n].dtype == np.float32 else np.float64 for n in conts.columns}
    t = np.float32 if all(o is np.float32 for o in own.values()) else np.float64
    cols = {n: conts[n].astype('float64') for n in conts.columns}
    means = {n: t(own[n](host_scalar(c.mean()))) for n,c in cols.items()}
    stds = {n: t(own[n](host_scalar(c.std(ddof=0)))) + t(1e-7) for n,c in cols.items()}
    return means, stds

def column_op(col:Column, op:Any, v:Any, dt:np.dtype) -> Column:
    """`op(col, v)` as fastai's frame-wide `op(conts, means)` computes it: pandas broadcasts the `dt` Series to the
    frame's shape, so numpy promotes a float32 column against float64 means (against a scalar pandas keeps float32)."""
    if not is_cudf(col): return op(col, np.broadcast_to(np.asarray(v, dt), col.shape))   # zero strides: no copy
    # cuDF takes no host array: the column in numpy's promoted dtype, then the value in it
    t = np.result_type(col.dtype, dt)
    return op(col if col.dtype == t else col.astype(t), t.type(dt.type(v)))

def take_values(vocab:list, codes:Column) -> pd.Series:
    """The values of `vocab` at integer `codes` (float codes from a decoded batch are fine), as a host Series: a cuDF
    column (and its index) is brought to the host first, as pandas cannot build an Index from a cuDF one."""
    codes = to_host(codes)
    return pd.Series(np.asarray(vocab, dtype=object)[codes.to_numpy().astype(np.int64)], index=codes.index,
                     name=codes.name)

# --- multi-hot (list) columns -------------------------------------------------------------------------------------
def split_lists(col:Column, sep:str) -> Column:
    "A string column split on `sep` into a list column (null stays null), on the column's backend."
    # regex=False on both: cuDF reads a `sep` longer than one character as a regular expression by default
    return col.str.split(sep, regex=False)

def explode_lists(col:Column) -> tuple:
    """`(elements, lengths)` of a list column: the elements in row order (a null list counts as one missing element, an
    empty list as none), and each row's element count as an int64 array on the column's device."""
    if is_cudf(col):
        lens = col.list.len()
        nulls, lens = lens.isna().values, lens.fillna(0).astype('int64').values
        xp = _cupy()
    else:
        xp, vals = np, col.to_numpy()
        lens = np.fromiter((len(v) if isinstance(v, (list, tuple, np.ndarray)) else -1 for v in vals), np.int64,
                           len(vals))
        nulls = lens < 0   # not a list: null, or an error below
        bad = [v for v in vals[nulls][:50] if not pd.isna(v)]
        if bad: raise TypeError(f"multi-hot column {col.name!r} holds {type(bad[0]).__name__} values, not lists: "
                                "give its separator, e.g. multi_hot={%r: '|'}" % col.name)
    lens = xp.where(nulls, 1, lens)
    # explode gives one (null) element for an empty list too: drop those (its index is the row position)
    ex = col.reset_index(drop=True).explode()
    if bool((lens == 0).any()): ex = ex[ex.index.isin(xp.flatnonzero(lens > 0))]
    return ex.rename(col.name), lens

def pad_bags(codes:torch.Tensor, lens:torch.Tensor, width:int, pad:int=-1) -> torch.Tensor:
    """Row-major `codes` of rows with `lens` elements as a `[len(lens), width]` block padded with `pad` (longer rows
    cut)."""
    n = len(lens)
    out = torch.full((n, width), pad, dtype=codes.dtype, device=codes.device)
    rows = torch.repeat_interleave(torch.arange(n, device=codes.device), lens)
    pos = torch.arange(len(codes), device=codes.device) - torch.repeat_interleave(torch.cumsum(lens, 0) - lens, lens)
    keep = pos < width
    out[rows[keep], pos[keep]] = codes[keep]
    return out

def lists_like(like:Frame|Column, values:np.ndarray, lens:np.ndarray, name:Any=None) -> Column:
    """A list column on `like`'s backend and index whose row i holds the next `lens[i]` of `values` (host arrays), in
    order: what `explode_lists` reads back. Built by Arrow from the values and their offsets, without a Python loop:
    on pandas an object column of NumPy arrays, on cuDF a list column (from the Arrow array)."""
    import pyarrow as pa
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    big = offsets[-1] >= np.iinfo(np.int32).max
    arr = (pa.LargeListArray if big else pa.ListArray).from_arrays(
        pa.array(offsets if big else offsets.astype(np.int32)), pa.array(values, from_pandas=True))
    if is_cudf(like):
        res = require_cudf().Series.from_arrow(arr)
        res.index, res.name = like.index, name
        return res
    return pd.Series(arr.to_numpy(zero_copy_only=False), index=like.index, name=name, dtype=object)
