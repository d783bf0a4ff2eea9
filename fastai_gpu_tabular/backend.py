"The one module that knows cuDF/CuPy versus pandas/NumPy: lazy probes, the frame ops that differ, columns to tensors."
from __future__ import annotations

import functools, os
import numpy as np, pandas as pd, torch

__all__ = ['cudf_available', 'cudf_reason', 'require_cudf', 'is_cudf', 'backend_of', 'to_backend', 'to_pandas',
           'frame_device', 'to_category', 'gather_columns', 'col_to_tensor', 'to_host', 'host_scalar', 'sorted_uniques',
           'encode_codes', 'take_values', 'is_str_dtype', 'is_numeric_dtype', 'is_list_dtype', 'holds_strings',
           'split_lists', 'explode_lists', 'pad_bags', 'is_dask']

# cuDF is never imported at module import: importing it initialises CUDA, and a laptop has neither.
@functools.cache
def _probe():
    "Import cuDF and CuPy once; return `(cudf, cupy, None)` or `(None, None, reason)`."
    if os.environ.get('FGT_DISABLE_CUDF'): return None, None, 'FGT_DISABLE_CUDF is set'
    try:
        import cudf, cupy
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

def require_cudf():
    "Return the `cudf` module, or raise an ImportError that says how to get it."
    cudf, _, reason = _probe()
    if cudf is None:
        raise ImportError(f"cuDF is not usable here ({reason}). Install fastai_gpu_tabular[cuda12] or [cuda13], "
                          "matching the CUDA major that `nvidia-smi` reports, on a machine with an NVIDIA GPU.")
    return cudf

def _cupy(): return _probe()[1]

def is_cudf(o) -> bool:
    "Whether `o` is a cuDF object; checks the type's module, so it never imports cuDF."
    return type(o).__module__.split('.')[0] == 'cudf'

def is_dask(o) -> bool:
    "Whether `o` is a Dask collection (dask.dataframe, or dask-cudf's); checks the type's module, so it never imports Dask."
    return type(o).__module__.split('.')[0] in ('dask', 'dask_cudf')

def backend_of(df) -> str:
    "'cudf' or 'pandas' (for a Dask frame: its partitions')"
    if is_dask(df): return backend_of(df._meta)
    if is_cudf(df): return 'cudf'
    if isinstance(df, (pd.DataFrame, pd.Series)): return 'pandas'
    raise TypeError(f"Expected a pandas or cuDF DataFrame, got {type(df).__name__}")

def to_backend(df, backend:str|None=None):
    "Move `df` to `backend` ('pandas' or 'cudf'); None keeps the frame's own."
    if backend is None or backend == backend_of(df): return df
    if is_dask(df) and backend in ('cudf', 'pandas'): return df.to_backend(backend)   # dask-cudf for 'cudf'
    if backend == 'cudf': return require_cudf().from_pandas(df)
    if backend == 'pandas': return df.to_pandas()
    raise ValueError(f"backend must be 'pandas', 'cudf' or None, not {backend!r}")

def to_pandas(o):
    "Host copy of a (small) cuDF object; pandas and NumPy pass through."
    return o.to_pandas() if is_cudf(o) else o

def frame_device(df) -> torch.device:
    "The device the frame's data lives on."
    return torch.device('cuda', _cupy().cuda.runtime.getDevice()) if is_cudf(df) else torch.device('cpu')

def to_category(col):
    """`col.astype('category')`: categories sorted, missing values -1. For a pandas column of strings the distinct
    values are sorted as a NumPy unicode array, in C (code-point order, Python's), not by comparing Python objects."""
    if is_cudf(col) or col.dtype != object: return col.astype('category')
    codes, uniq = pd.factorize(col, sort=False)
    if pd.api.types.infer_dtype(uniq, skipna=False) != 'string': return col.astype('category')
    order = np.argsort(np.asarray(uniq, dtype=str), kind='stable')
    rank = np.empty(len(order), np.intp)
    rank[order] = np.arange(len(order))
    cat = pd.Categorical.from_codes(np.where(codes >= 0, rank[codes], -1), validate=False,
                                    categories=pd.Index(uniq[order], dtype=object))
    return pd.Series(cat, index=col.index, name=col.name)

def _cast(col, t): return to_category(col) if t == 'category' else col.astype(t)

def gather_columns(df, cols:list, order=None, casts:dict|None=None):
    "Columns `cols` of `df` (rows in `order`, if given), each cast as `casts` says, as a new frame of `df`'s backend."
    casts = casts or {}
    if is_cudf(df):
        res = df[cols] if order is None else df[cols].take(order)
        for c,t in casts.items(): res[c] = _cast(res[c], t)
        return res
    # pandas: cast first, so that the row gather moves category codes rather than Python object pointers
    data = {}
    for c in cols:
        a = (_cast(df[c], casts[c]) if c in casts else df[c]).array
        data[c] = a if order is None else a.take(order)
    return pd.DataFrame(data, index=df.index if order is None else df.index.take(order))

def col_to_tensor(col) -> torch.Tensor:
    "A column as a torch tensor on the column's own device: zero-copy via `from_numpy`, or DLPack on the GPU."
    if is_cudf(col): return torch.from_dlpack(col.values)
    a = col.to_numpy()
    if a.dtype == object: raise TypeError(f"column {col.name!r} holds Python objects, not numbers")
    return torch.from_numpy(a)   # strided views are fine: the caller copies into the packed tensor

def to_host(o):
    "Small device results (Series, Index, arrays) as pandas/NumPy; host objects pass through."
    if is_cudf(o): return o.to_pandas()
    if type(o).__module__.split('.')[0] == 'cupy': return o.get()
    return o

def host_scalar(v):
    "A device scalar (0-d CuPy array) as a NumPy scalar; host scalars pass through."
    return v.get()[()] if type(v).__module__.split('.')[0] == 'cupy' else v

def is_str_dtype(dtype) -> bool:
    "Object or string columns: the ones fastai's `df_shrink` casts to category."
    return getattr(dtype, 'name', str(dtype)).startswith(('object', 'str'))

def is_numeric_dtype(dtype) -> bool:
    return pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)

def _first_value(col):
    "The first non-null value of a pandas column, or None (looks at a few rows before scanning them all)."
    for a in (col.iloc[:64], col):
        a = a.to_numpy()
        ok = ~pd.isna(a) if a.dtype != object else np.fromiter((not _isnull(v) for v in a), bool, len(a))
        if ok.any(): return a[ok.argmax()]
    return None

def _isnull(v): return v is None or (isinstance(v, float) and v != v) or v is pd.NA or v is pd.NaT

def is_list_dtype(col) -> bool:
    "Whether a column holds lists (cuDF list dtype, or pandas object cells that are lists/arrays)."
    if is_cudf(col): return type(col.dtype).__name__ == 'ListDtype'
    return col.dtype == object and isinstance(_first_value(col), (list, tuple, np.ndarray))

def holds_strings(col) -> bool:
    "Whether a column's values are strings (a cuDF string column, or pandas cells that are `str`)."
    if is_cudf(col): return is_str_dtype(col.dtype)
    return isinstance(_first_value(col), str)

def sorted_uniques(col) -> list:
    "Sorted distinct non-null values of `col` as a host list of NumPy scalars or Python objects, as fastai's `L.sorted()`."
    if is_cudf(col): return list(to_host(col.dropna().unique().sort_values()).to_numpy())
    u = np.asarray(col.unique())   # then drop the missing ones: cheaper than `dropna` on every row of an object column
    u = u[~pd.isna(u)]
    if u.dtype != object: return list(np.sort(u))
    try: return sorted(u)
    except TypeError as e:
        kinds = sorted({type(o).__name__ for o in u})
        raise TypeError(f"column {col.name!r} mixes value types {kinds}: cast it to one type first") from None

def encode_codes(col, vocab:list, add:int=1):
    """Codes of `col` against `vocab` (a list of values), plus `add`: a value not in `vocab`, or null, gives `add-1`.
    Returns a Series on `col`'s index with pandas' smallest code dtype (as fastai's `pd.Categorical(...).codes+add`)."""
    if is_cudf(col):
        cudf = require_cudf()
        dt = col.dtype.categories.dtype if type(col.dtype).__name__ == 'CategoricalDtype' else col.dtype
        cats = cudf.Index(vocab) if is_str_dtype(dt) else cudf.Index(np.asarray(vocab), dtype=dt)
        return (col.astype(cudf.CategoricalDtype(categories=cats)).cat.codes + add).fillna(add - 1)
    if isinstance(col.dtype, pd.CategoricalDtype) and len(col.cat.categories) == len(vocab) and col.cat.categories.equals(pd.Index(vocab)):
        codes = col.cat.codes.to_numpy()   # what fastai does for a category column: no second hash of the values
    else: codes = pd.Categorical(col, categories=vocab).codes
    return pd.Series(codes + codes.dtype.type(add), index=col.index, name=col.name)

def take_values(vocab:list, codes) -> pd.Series:
    "The values of `vocab` at integer `codes` (a pandas Series; float codes from a decoded batch are fine)."
    return pd.Series(np.asarray(vocab, dtype=object)[codes.to_numpy().astype(np.int64)], index=codes.index, name=codes.name)

# --- multi-hot (list) columns -------------------------------------------------------------------------------------
def split_lists(col, sep:str):
    "A string column split on `sep` into a list column (null stays null), on the column's backend."
    return col.str.split(sep, regex=False) if not is_cudf(col) else col.str.split(sep)

def explode_lists(col):
    """`(elements, lengths)` of a list column: the elements in row order (a null list counts as one missing element, an
    empty list as none), and each row's element count as an int64 array on the column's device."""
    if is_cudf(col):
        lens = col.list.len()
        nulls, lens = lens.isna().values, lens.fillna(0).astype('int64').values
        xp = _cupy()
    else:
        xp, vals = np, col.to_numpy()
        lens = np.fromiter((len(v) if isinstance(v, (list, tuple, np.ndarray)) else -1 for v in vals), np.int64, len(vals))
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
    "Row-major `codes` of rows with `lens` elements as a `[len(lens), width]` block padded with `pad` (longer rows cut)."
    n = len(lens)
    out = torch.full((n, width), pad, dtype=codes.dtype, device=codes.device)
    rows = torch.repeat_interleave(torch.arange(n, device=codes.device), lens)
    pos = torch.arange(len(codes), device=codes.device) - torch.repeat_interleave(torch.cumsum(lens, 0) - lens, lens)
    keep = pos < width
    out[rows[keep], pos[keep]] = codes[keep]
    return out
