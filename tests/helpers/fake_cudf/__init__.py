"""FGT_FAKE_CUDF=26.10 (or 26.06): the cuDF backend's code runs, on a CPU, against a stand-in for cuDF and CuPy, as
FGT_FAKE_DEVICE=lazy runs the torch side against a device that is not the CPU. `install(version)` puts modules named
`cudf` and `cupy` in `sys.modules` (and `dask_cudf`'s backend in Dask, see dask_backend.py), so the package's lazy
`import cudf` (backend.py's `_probe`) finds them: frames wrap pandas but answer only to cuDF's API at that version,
refuse every implicit copy to the host, and hold nulls, dtypes and results as cuDF does where the package depends on
it (frame.py, fake_cupy.py: each behaviour cites the cuDF or CuPy source line it reproduces). Columns reach torch on
the stand-in device (the lazy one when FGT_FAKE_DEVICE=lazy, else the CPU), as cuDF's reach it on CUDA.

What it cannot serve, a test marks with `CUDF_STAND_IN_CANNOT` (a real kernel's rounding or hash, RMM, device
pointers): such a test skips under the stand-in and says why."""
import contextlib
import importlib.machinery
import json
import sys
import types
import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from . import fake_cupy
from . import frame as F
from .config import API_DIR, CONF, VERSIONS

__all__ = ['install', 'VERSIONS', 'CUDF_STAND_IN_CANNOT', 'parse_float', 'NA_VALUES']

_NO_KERNEL = "the stand-in has no libcudf kernels: {} runs only on cuDF"
# a test function's name, or one case of it (`name[param]`): why the stand-in cannot serve it
CUDF_STAND_IN_CANNOT = {
    'test_cudf_murmur3_is_this_hash': _NO_KERNEL.format("Series.hash_values (murmur3)"),
    'test_cudf_columns_to_tensors_share_memory': "device pointers: the stand-in copies a column's values to torch",
    'test_torch_allocates_from_rmm': "RMM: the stand-in has no device memory resource",
    'test_device_memory_after_dataloaders': "RMM's statistics: the stand-in has no device memory resource",
    'test_training_epoch_makes_no_device_sync': "torch.cuda.set_sync_debug_mode needs CUDA (the loop's host reads: "
                                                "test_training_epoch_reads_no_tensor_on_the_host)",
}

def get_option(key): return CONF.options[key]
def set_option(key, value): CONF.options[key] = value

@contextlib.contextmanager
def option_context(*args):
    old = dict(CONF.options)
    for k,v in zip(args[::2], args[1::2]): CONF.options[k] = v
    try: yield
    finally: CONF.options.update(old)

_INT = r'^\s*[-+]?\d+\s*$'
# libcudf's default NA tokens (cpp/src/io/csv/reader_impl.cu:1108-1130 @6a22d1d, the same at v26.06.01): pandas' less
# "None", so a `None` field is a string
NA_VALUES = ['', '#N/A', '#N/A N/A', '#NA', '-1.#IND', '-1.#QNAN', '-NaN', '-nan', '1.#IND', '1.#QNAN', '<NA>', 'N/A',
             'NA', 'NULL', 'NaN', 'n/a', 'nan', 'null']

def parse_float(text:str) -> float:
    """libcudf's `parse_numeric<double>` (cpp/src/io/utilities/parsing_utils.cuh:122-185 @6a22d1d): the digits of the
    whole part as `value * 10 + digit`, of the fraction as `value += digit * divisor` with `divisor /= 10` (inexact),
    then `value *= exp10(exponent)`: not correctly rounded (`0.3` is 0.30000000000000004). In double arithmetic without
    nvcc's FMA contraction, which may change the last bit of some values on a GPU."""
    t = text.strip()
    sign = -1.0 if t[:1] == '-' else 1.0
    if t.lstrip('+-').lower() in ('inf', 'infinity'): return sign * np.inf
    t = t.lstrip('+-')
    mant, _, exp = t.replace('E', 'e').partition('e')
    whole, _, frac = mant.partition('.')
    value = 0.0
    for d in whole: value = value * 10 + int(d)
    divisor = 1.0
    for d in frac:
        divisor /= 10
        value += int(d) * divisor
    if exp:
        e = int(exp)
        if e: value *= 10.0 ** e
    return value * sign

def read_csv(filepath_or_buffer, **kwargs):
    """cudf.read_csv (its keywords checked against cuDF's by `install`): `skipinitialspace` is stored and never read by
    libcudf (cpp/include/cudf/io/csv.hpp:93,344 @6a22d1d; nothing under cpp/src/io/csv/ reads it, and
    csv_gpu.cu:354 trims only non-string fields; rapidsai/cudf#6659), so string fields, and the header's names
    (reader_impl.cu:141-180), keep their leading spaces. libcudf's NA tokens (`NA_VALUES`) lack "None". A column of
    integers with empty fields is an int column with nulls (pandas reads float64 and NaN); one with no value at all
    INT8 (reader_impl.cu:614-616 @6a22d1d). Floats are parsed as libcudf does (`parse_float`)."""
    kw = {**kwargs, 'skipinitialspace': False}
    if kw.get('delimiter'): kw['sep'] = kw.pop('delimiter')
    user = kw.pop('na_values', None)
    user = [user] if isinstance(user, str) else list(user or [])
    keep = kw.pop('keep_default_na', True)
    kw.update(keep_default_na=False, na_values=(NA_VALUES if keep else []) + user)
    at = filepath_or_buffer.tell() if hasattr(filepath_or_buffer, 'tell') else None
    df = pd.read_csv(filepath_or_buffer, **kw)
    if at is not None: filepath_or_buffer.seek(at)
    raw = pd.read_csv(filepath_or_buffer, **{**kw, 'dtype': str})
    res = F.from_pandas(df)
    for c in df.columns:
        if raw[c].isna().all(): res[c] = F.Series._of(pd.Series(pd.NA, index=df.index, dtype='Int8'))
        elif df[c].dtype == np.float64 and df[c].isna().any() and raw[c].dropna().str.fullmatch(_INT).all():
            res[c] = F.Series._of(df[c].astype('Int64'))
        elif df[c].dtype == np.float64:
            vals = np.array([np.nan if pd.isna(v) else parse_float(v) for v in raw[c]], dtype='f8')
            res[c] = F.Series._of(pd.Series(pd.arrays.FloatingArray(np.nan_to_num(vals), np.isnan(vals)),
                                            index=df.index))
    return res

def read_parquet(filepath_or_buffer, columns=None, filters=None, **kwargs):
    "cudf.read_parquet (keywords checked as `read_csv`'s): Arrow's types as cuDF holds them (ints with nulls stay ints)"
    df = F._arrow_held(pq.read_table(filepath_or_buffer, columns=columns, filters=filters))
    res = F.DataFrame._of(df)
    res._dtypes = {c: (np.dtype(object) if isinstance(df[c].dtype, pd.StringDtype) else res._dtypes[c])
                   for c in df.columns}
    return res

def concat(objs, axis=0, join='outer', ignore_index=False, sort=None):
    objs = list(objs)
    r = pd.concat([o._pd for o in objs], axis=axis, join=join, ignore_index=ignore_index, sort=sort)
    return F._device(r)

def _module(name, **attrs) -> types.ModuleType:
    m = types.ModuleType(name)
    for k,v in attrs.items(): setattr(m, k, v)
    sys.modules[name] = m
    return m

def install(version:str, device='cpu'):
    """Serve cuDF `version` ('26.06' or '26.10') as `cudf`, with CuPy's stand-in as `cupy`; columns reach torch on
    `device` (the stand-in device, 'lazy', or the CPU)."""
    if version not in VERSIONS: raise ValueError(f"FGT_FAKE_CUDF={version!r}: the stand-in serves {VERSIONS}")
    if pd.__version__.split('.')[0] != ('2' if version == '26.06' else '3'):
        raise RuntimeError(f"cuDF {version} runs on pandas {'2' if version == '26.06' else '3'}; this is pandas "
                           f"{pd.__version__}")
    CONF.version, CONF.api = version, json.loads((API_DIR/f'{version}.json').read_text())
    classes = (F.DataFrame, F.Series, F.Index, F.RangeIndex, F.CategoricalIndex, F.MultiIndex, F.DatetimeIndex,
               F.TimedeltaIndex, F.IntervalIndex, F.StringMethods,
               F.CategoricalAccessor, F.ListMethods, F.DatetimeProperties, F.DataFrameGroupBy, F.SeriesGroupBy,
               F._SeriesIlocIndexer, F._SeriesLocIndexer, F._DataFrameIlocIndexer, F._DataFrameLocIndexer)
    for c in classes: F.seal(c)
    F.add_operators()
    cupy = fake_cupy.install_module('cupy')
    cupy.__spec__ = importlib.machinery.ModuleSpec('cupy', None)
    fake_cupy.patch_torch(device)
    sys.modules['cupy'] = cupy
    errors = _module('cudf.errors', MixedTypeError=F.MixedTypeError)
    fns = dict(DataFrame=F.DataFrame, Series=F.Series, Index=F.Index, RangeIndex=F.RangeIndex,
               CategoricalIndex=F.CategoricalIndex, MultiIndex=F.MultiIndex, DatetimeIndex=F.DatetimeIndex,
               TimedeltaIndex=F.TimedeltaIndex, IntervalIndex=F.IntervalIndex, CategoricalDtype=F.CategoricalDtype,
               ListDtype=F.ListDtype, NA=F.NA, from_pandas=F.from_pandas, read_csv=read_csv, read_parquet=read_parquet,
               concat=concat, get_option=get_option, set_option=set_option, option_context=option_context)
    assert set(fns) <= set(CONF.api['functions']), sorted(set(fns) - set(CONF.api['functions']))
    fns = {n: F._checked('cudf', n, CONF.api['functions'][n], f) for n,f in fns.items()}
    cudf = _module('cudf', __spec__=importlib.machinery.ModuleSpec('cudf', None), __version__=CONF.api['version'],
                   __file__=__file__, errors=errors, **fns)
    cudf.__doc__ = f"cuDF {version} stand-in (tests/helpers/fake_cudf), API of rapidsai/cudf@{CONF.api['commit']}"
    cudf.__getattr__ = lambda name: _module_missing(name)
    core = _module('cudf.core')
    cudf.core = core
    for name,classes_ in (('dataframe', [F.DataFrame]), ('series', [F.Series]),
                          ('index', [F.Index, F.RangeIndex, F.CategoricalIndex, F.MultiIndex, F.DatetimeIndex,
                                     F.TimedeltaIndex, F.IntervalIndex]),
                          ('dtypes', [F.CategoricalDtype, F.ListDtype]),
                          ('accessors', [F.StringMethods, F.CategoricalAccessor, F.ListMethods,
                                         F.DatetimeProperties])):
        setattr(core, name, _module(f'cudf.core.{name}', **{c.__name__: c for c in classes_}))
    core.groupby = _module('cudf.core.groupby')
    core.groupby.groupby = _module('cudf.core.groupby.groupby', DataFrameGroupBy=F.DataFrameGroupBy,
                                   SeriesGroupBy=F.SeriesGroupBy)
    from .dask_backend import install_dask
    install_dask()
    if device == 'lazy': _cut_after_packing()
    from fastai_gpu_tabular import backend
    backend._probe.cache_clear()   # the next `import cudf` finds the stand-in
    return cudf

def _cut_after_packing():
    """On the lazy device the rows `pack_rows` writes from a stand-in frame's columns are a graph of its copies, which
    every batch would replay: materialize them once packed (`torch._lazy.mark_step`), as fake_device.py cuts the graph
    after each optimizer step."""
    import torch
    import fastai_gpu_tabular.rows.pack as pack
    orig = pack.pack_rows
    def pack_rows(to):
        res = orig(to)
        if res[0].device.type == 'lazy': torch._lazy.mark_step()
        return res
    for m in list(sys.modules.values()):
        if getattr(m, 'pack_rows', None) is orig: m.pack_rows = pack_rows

def _module_missing(name):
    if name in CONF.api['functions']: raise NotImplementedError(f"the cuDF stand-in does not serve cudf.{name} yet")
    raise AttributeError(f"module 'cudf' has no attribute '{name}' (not in cuDF {CONF.version}'s API)")
