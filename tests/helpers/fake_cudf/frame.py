"""The cuDF stand-in's objects: `DataFrame`, `Series`, `Index` (and `RangeIndex`, `CategoricalIndex`, `MultiIndex`),
their accessors, groupby and indexers, and cuDF's dtypes, each over a pandas object in a form that keeps cuDF's
semantics: every column nullable (pandas' masked and Arrow dtypes hold the nulls, so an int column with nulls stays
an int column), NaN a null where cuDF makes it one. Each object answers only to the names cuDF's own class has at the
version served (tests/data/cudf_api/<version>.json): anything else is an AttributeError, a keyword cuDF's signature
lacks a TypeError. A name cuDF has is served by pandas' method of that name on the held object, with its result
wrapped back (arrays as device arrays), unless a method here says how cuDF does it differently; each such method
cites the cuDF source line (rapidsai/cudf at v26.06.01 = 77ced62, and 6a22d1d = 26.10.00) whose behaviour it
reproduces."""
import contextlib
import functools
import numpy as np
import pandas as pd
import pyarrow as pa

from . import fake_cupy as cp
from .config import CONF

__all__ = ['DataFrame', 'Series', 'Index', 'RangeIndex', 'CategoricalIndex', 'MultiIndex', 'DatetimeIndex',
           'TimedeltaIndex', 'IntervalIndex', 'CategoricalDtype',
           'ListDtype', 'MixedTypeError', 'NA', 'no_default']

NA = pd.NA
no_default = object()

class MixedTypeError(TypeError):
    "cudf.errors.MixedTypeError (errors.py:9): a TypeError"
MixedTypeError.__module__ = 'cudf.errors'

# --- dtypes: the held (pandas) dtype and the one cuDF shows -----------------------------------------------------------
try: pd.get_option('future.distinguish_nan_and_na'); _NAN_OPTION = True   # pandas 3
except (KeyError, pd.errors.OptionError): _NAN_OPTION = False

def _nan_kept():
    """Where a NaN made by arithmetic stays a NaN, not a null, in the held nullable floats: libcudf's binary ops give
    NaN for 0/0, and a null only where an operand is null (the operands' masks ANDed: cpp/src/binaryop/binaryop.cpp:
    264-330 @6a22d1d). pandas 3 turns such a NaN into NA unless `future.distinguish_nan_and_na` is set; 2 keeps it."""
    return pd.option_context('future.distinguish_nan_and_na', True) if _NAN_OPTION else contextlib.nullcontext()

_MASKED = {np.dtype(n): pd.api.types.pandas_dtype(m) for n,m in [
    ('int8', 'Int8'), ('int16', 'Int16'), ('int32', 'Int32'), ('int64', 'Int64'), ('uint8', 'UInt8'),
    ('uint16', 'UInt16'), ('uint32', 'UInt32'), ('uint64', 'UInt64'), ('float32', 'Float32'),
    ('float64', 'Float64'), ('bool', 'boolean')]}
_HELD_STR = pd.StringDtype('pyarrow')

def string_dtype():
    """The dtype of a string column a cuDF operation makes: NumPy's object on 26.06 (`utils/dtypes.py:636`
    @v26.06.01), pandas' `StringDtype(na_value=nan)` on 26.10 (`DEFAULT_STRING_DTYPE`, `utils/dtypes.py:24,642`
    @6a22d1d)."""
    return np.dtype(object) if CONF.version == '26.06' else pd.StringDtype(na_value=np.nan)

def _is_str(dt) -> bool: return isinstance(dt, pd.StringDtype) or (isinstance(dt, np.dtype) and dt.kind in 'OU')

class _Dtype:
    "Base of cuDF's own dtypes: `_BaseDtype(ExtensionDtype, Serializable)` (dtypes.py:160-166 @v26.06.01), not pandas'"
    _api = None
    def __getattr__(self, name): return _missing(self, name)

class CategoricalDtype(_Dtype):
    "cudf.CategoricalDtype: its categories a cuDF Index; not a `pd.CategoricalDtype` (dtypes.py:165-166 @v26.06.01)"
    _api = 'CategoricalDtype'
    name = 'category'
    kind = 'O'   # ExtensionDtype's
    def __init__(self, categories=None, ordered=False):
        cats = None if categories is None else categories if isinstance(categories, Index) else \
            Index._of(_held_index(pd.Index(_host(categories))))
        self._categories,self._ordered = cats, ordered
    @property
    def categories(self): return self._categories
    @property
    def ordered(self): return self._ordered
    def to_pandas(self):
        return pd.CategoricalDtype(None if self._categories is None else self._categories.to_pandas(), self._ordered)
    @property
    def _held(self): return pd.CategoricalDtype(None if self._categories is None else self._categories._pd,
                                                self._ordered)
    def __eq__(self, other):
        if isinstance(other, str): return other == 'category'
        if not isinstance(other, CategoricalDtype): return False
        if self._categories is None or other._categories is None: return True
        return self._ordered == other._ordered and self._categories._pd.equals(other._categories._pd)
    def __hash__(self): return hash(('category', self._ordered))
    def __repr__(self): return f'CategoricalDtype(categories={self._categories!r}, ordered={self._ordered})'
    @property
    def _codes_dtype(self):
        """The codes as stored: the smallest unsigned type on both lines (dtypes.py:248-250 @v26.06.01, :248-251
        @6a22d1d), which `memory_usage` counts"""
        n = 0 if self._categories is None else len(self._categories)
        return next(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64) if n <= np.iinfo(t).max)
    @property
    def _pandas_codes_dtype(self):
        "26.10's `.cat.codes`: pandas' signed type (dtypes.py:253-270 @6a22d1d); 26.06 has no such cast"
        n = 0 if self._categories is None else len(self._categories)
        return pd.Categorical.from_codes([], categories=range(n)).codes.dtype
CategoricalDtype.__module__ = 'cudf.core.dtypes'

class ListDtype(_Dtype):
    "cudf.ListDtype (dtypes.py:368 @v26.06.01): its name is 'list' (dtypes.py:401)"
    _api = 'ListDtype'
    name = 'list'
    kind = 'O'
    def __init__(self, element_type): self._element = element_type
    @property
    def element_type(self): return self._element
    def __eq__(self, other):
        return other == 'list' if isinstance(other, str) else isinstance(other, ListDtype) and \
            other._element == self._element
    def __hash__(self): return hash(('list', str(self._element)))
    def __repr__(self): return f'ListDtype({self._element})'
ListDtype.__module__ = 'cudf.core.dtypes'

def _shown_dtype(held):
    "The dtype cuDF shows for a column held with pandas dtype `held`."
    if isinstance(held, pd.CategoricalDtype):
        return CategoricalDtype(Index._of(held.categories), held.ordered)
    if isinstance(held, pd.ArrowDtype) and pa.types.is_list(held.pyarrow_dtype):
        t = held.pyarrow_dtype.value_type
        return ListDtype(string_dtype() if pa.types.is_string(t) or pa.types.is_large_string(t)
                         else np.dtype(t.to_pandas_dtype()))
    if isinstance(held, pd.StringDtype): return string_dtype()
    if isinstance(held, pd.api.extensions.ExtensionDtype) and hasattr(held, 'numpy_dtype'): return held.numpy_dtype
    return held

def _held_dtype(dtype):
    "The pandas dtype to hold a column cast to the cuDF `dtype` in."
    if isinstance(dtype, CategoricalDtype): return dtype._held if dtype.categories is not None else 'category'
    if isinstance(dtype, str) and dtype == 'category': return 'category'
    if isinstance(dtype, pd.CategoricalDtype): return dtype
    if dtype is str or (isinstance(dtype, str) and dtype in ('str', 'string', 'object')) or _is_str(
            pd.api.types.pandas_dtype(dtype)):
        return _HELD_STR
    d = pd.api.types.pandas_dtype(dtype)
    if isinstance(d, np.dtype) and d in _MASKED: return _MASKED[d]
    return d

def _held(s:pd.Series, dtype=None) -> pd.Series:
    """A pandas column as the stand-in holds it: numbers and bools nullable (float NaN as null, `nan_as_null`), strings
    as Arrow strings, lists as Arrow lists; categoricals and datetimes as they are."""
    dt = s.dtype
    if isinstance(dt, pd.CategoricalDtype) or dt.kind in 'mM': return s
    if isinstance(dt, np.dtype) and dt in _MASKED: return s.astype(_MASKED[dt])
    if isinstance(dt, pd.StringDtype): return s.astype(_HELD_STR)
    if isinstance(dt, pd.ArrowDtype) and not pa.types.is_list(dt.pyarrow_dtype):   # an element of a list, exploded
        t = dt.pyarrow_dtype
        if pa.types.is_string(t) or pa.types.is_large_string(t): return s.astype(_HELD_STR)
        return s.astype(_MASKED[np.dtype(t.to_pandas_dtype())])
    if isinstance(dt, pd.api.extensions.ExtensionDtype): return s
    inferred = pd.api.types.infer_dtype(s, skipna=True)
    if inferred in ('string', 'empty'): return s.astype(_HELD_STR)
    if inferred == 'boolean': return s.astype('boolean')
    arr = pa.array(s.to_numpy(dtype=object), from_pandas=True)
    return pd.Series(pd.arrays.ArrowExtensionArray(arr), index=s.index, name=s.name)

def _held_index(ix:pd.Index) -> pd.Index:
    if isinstance(ix, (pd.RangeIndex, pd.MultiIndex)): return ix
    return pd.Index(_held(pd.Series(ix, copy=False)).array, name=ix.name)

# --- the API check ----------------------------------------------------------------------------------------------------
def _missing(obj, name):
    "Raise as cuDF does for a name its class lacks at the version served."
    raise AttributeError(f"'{type(obj).__name__}' object has no attribute '{name}' (not in cuDF {CONF.version}'s "
                         f"{obj._api} API)")

def _host(o):
    "A stand-in object's value as its pandas/NumPy equivalent (for pandas' methods, which the stand-in calls)."
    if isinstance(o, (Series, Index, DataFrame)): return o._pd
    if isinstance(o, cp.ndarray): return o._a
    if isinstance(o, list): return [_host(v) for v in o]
    if isinstance(o, tuple): return tuple(_host(v) for v in o)
    if isinstance(o, dict): return {k: _host(v) for k,v in o.items()}
    if isinstance(o, (CategoricalDtype, ListDtype)): return _held_dtype(o)
    return o

def _device(r, like=None):
    "A pandas method's result as cuDF gives it: frames, columns and indexes as the stand-in's, arrays on the device."
    if isinstance(r, pd.DataFrame): return DataFrame._of(r)
    if isinstance(r, pd.Series):
        keep = like._dtype if isinstance(like, Series) and r.dtype == like._pd.dtype else None
        return Series._of(r, keep)
    if isinstance(r, pd.Index): return Index._of(r)
    if isinstance(r, np.ndarray): return cp.ndarray(r)
    if isinstance(r, tuple): return tuple(_device(v) for v in r)
    if isinstance(r, list): return [_device(v) for v in r]
    if r is pd.NA: return NA
    return r

class _Obj:
    "The stand-in's objects: cuDF's names only, served by pandas' methods of the same name where not written here."
    _api = None
    _pd = None
    def __getattr__(self, name):
        if name.startswith('__') or name in ('_pd', '_dtype', '_dtypes'): raise AttributeError(name)
        if self._api == 'DataFrame' and not name.startswith('_') and name in self._pd.columns:
            return self[name]   # GetAttrGetItemMixin (mixins/getitem.py): columns as attributes
        _missing(self, name)

class _Served:
    "A name of cuDF's class that the stand-in has not written: pandas' attribute of that name on the held object"
    def __init__(self, name, info): self.name, self.info = name, info
    def __get__(self, obj, cls=None):
        if obj is None: return self   # the class has the name, as cuDF's does (Dask's `is_dataframe_like` looks)
        name, info = self.name, self.info
        try: target = getattr(obj._pd, name)
        except AttributeError:
            raise NotImplementedError(f"the cuDF stand-in does not serve {obj._api}.{name} yet") from None
        if info['kind'] in ('property', 'attribute') or not callable(target): return _device(target, obj)
        if isinstance(obj, _GroupBy) and obj._hashed and name in _GROUP_REDUCTIONS:   # one row a group: hash order
            f = lambda *a, **k: _device(_hashed_groups(target(*_host(a), **_host(k))))
            return _checked(obj._api, name, info, f)
        return _checked(obj._api, name, info, lambda *a, **k: _device(target(*_host(a), **_host(k)), obj))

def _checked(cls, name, info, f):
    "`f`, refusing what cuDF's signature of `cls.name` refuses: too many positional arguments, unknown keywords."
    if info.get('kind') not in ('method', 'classmethod', 'staticmethod', 'function'): return f
    allowed = set(info['args']) | set(info['kwonly'])
    @functools.wraps(f)
    def g(*a, **k):
        if len(a) > len(info['args']) and not info['varargs']:
            raise TypeError(f"{cls}.{name}() takes {len(info['args'])} positional arguments but {len(a)} were given")
        bad = [n for n in k if n not in allowed]
        if bad and not info['varkw']: raise TypeError(f"{cls}.{name}() got an unexpected keyword argument '{bad[0]}'")
        return f(*a, **k)
    return g

def seal(cls):
    """Check the methods written on stand-in class `cls` (and its bases) against cuDF's API at the version served:
    those cuDF lacks raise AttributeError, the others refuse what cuDF's signature refuses."""
    names, seen = CONF.api['classes'][cls._api]['names'], set()
    for klass in cls.__mro__:
        for n,v in list(vars(klass).items()):
            if n in seen or n.startswith('_'): continue
            seen.add(n)
            v = getattr(v, '_unsealed', v)
            info = names.get(n)
            if info is None: setattr(cls, n, property(lambda self, n=n: _missing(self, n)))
            elif callable(v) and not isinstance(v, (type, property, _Served)):
                def method(self, *a, _f=v, _n=n, _info=info, **k):
                    return _checked(cls._api, _n, _info, functools.partial(_f, self))(*a, **k)
                method._unsealed = v
                setattr(cls, n, method)
    for n,info in names.items():   # the rest of cuDF's names: served by pandas
        if not n.startswith('__') and n not in seen and not any(n in vars(k) for k in cls.__mro__):
            setattr(cls, n, _Served(n, info))

# --- what every cuDF frame refuses: no implicit host copy -------------------------------------------------------------
class _DeviceData(_Obj):
    def __array__(self, dtype=None, copy=None):
        # core/frame.py:619-625 @v26.06.01, :603-609 @6a22d1d
        raise TypeError("Implicit conversion to a host NumPy array via __array__ is not allowed, To explicitly "
                        "construct a GPU matrix, consider using .to_cupy()\nTo explicitly construct a host matrix, "
                        "consider using .to_numpy().")
    def __len__(self): return len(self._pd)
    def __bool__(self):
        raise ValueError(f"The truth value of a {type(self).__name__} is ambiguous. Use a.empty, a.bool(), a.item(), "
                         "a.any() or a.all().")
    def to_pandas(self, *, nullable=False, arrow_type=False): raise NotImplementedError
    def __repr__(self): return f'{self.to_pandas()!r}\n[cuDF stand-in {CONF.version}]'

class _Column(_DeviceData):
    "What Series and Index share (single_column_frame.py)"
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """A NumPy ufunc runs as CuPy's of that name on the values, keeping the index (indexed_frame.py:5155-5190,
        utils/utils.py:65-90 @6a22d1d); one CuPy lacks is not implemented."""
        if method != '__call__' or ufunc.__name__ not in cp._FUNCS or 'out' in kwargs: return NotImplemented
        return _device(ufunc(*(_host(x) for x in inputs), **kwargs))

    def __array_function__(self, func, types, args, kwargs):
        """A NumPy function: the Series method of that name if there is one (`unique` sorted), else CuPy's on the
        values, as a Series on the same index (series.py:1192-1250 @6a22d1d); else NotImplemented."""
        if 'out' in kwargs or not all(issubclass(t, Series) for t in types): return NotImplemented
        try:
            if func.__name__ in CONF.api['classes']['Series']['names']:
                r = getattr(Series, func.__name__)(*args, **kwargs)
                return r.sort_values() if func.__name__ == 'unique' else r
            f = cp._FUNCS.get(func.__name__)
            if f is None or not all(a.index.equals(args[0].index) for a in args): return NotImplemented
            out = f(*(a.values for a in args), **kwargs)
            if not isinstance(out, cp.ndarray): return out
            if out.ndim == 0: return out.item()
            if out.ndim == 1 and len(out) == len(args[0]): return Series(out, index=args[0].index)
        except Exception: pass
        return NotImplemented

    def __iter__(self):
        # mixins/notiterable.py:7-15 (and single_column_frame.py)
        raise TypeError(f"{type(self).__name__} object is not iterable. Consider using `.to_arrow()`, `.to_pandas()` "
                        "or `.to_numpy()` if you wish to iterate over the values.")
    def tolist(self):
        # single_column_frame.py:232-250 @v26.06.01, :225-243 @6a22d1d
        raise TypeError("cuDF does not support conversion to host memory via the `tolist()` method. Consider using "
                        "`.to_arrow().to_pylist()` to construct a Python list.")
    to_list = tolist
    @property
    def dtype(self): return self._dtype
    @property
    def values(self): return self.to_cupy()
    def __contains__(self, item):   # a Series looks in its index (series.py:690-692 @6a22d1d), an Index at its values
        return item in (self._pd.index if isinstance(self._pd, pd.Series) else self._pd)
    @property
    def has_nulls(self): return bool(self._pd.isna().any())
    @property
    def null_count(self): return int(self._pd.isna().sum())

    def _col(self) -> pd.Series: return self._pd if isinstance(self._pd, pd.Series) else pd.Series(self._pd)

    def to_cupy(self, dtype=None, copy=True, na_value=None):
        return cp.ndarray(self._array(dtype, None if na_value is None else na_value, device=True))
    def to_numpy(self, dtype=None, copy=True, na_value=no_default):
        return self._array(dtype, None if na_value is no_default else na_value, device=False)

    def _array(self, dtype, na_value, device:bool) -> np.ndarray:
        """Frame._to_array (frame.py @6a22d1d) for one column: nulls are an error for a given dtype without `na_value`;
        a categorical gives its values; an int column with nulls float64 and NaN; a bool one with nulls is refused on
        the device ("Column must have no nulls", numerical.py:149-172), objects on the host; strings never reach the
        device."""
        s = self._col()
        nulls = bool(s.isna().any())
        if nulls and dtype is not None and na_value is None and not _is_str(np.dtype(dtype)):
            raise ValueError(f"cannot convert to '{dtype}'-dtype NumPy array with missing values. Specify an "
                             "appropriate 'na_value' for this dtype.")
        if na_value is not None: s, nulls = s.fillna(na_value), False
        if isinstance(s.dtype, pd.CategoricalDtype): s = pd.Series(np.asarray(s.cat.categories)[s.cat.codes].astype(
            object) if not nulls else s.astype(object))
        shown = _shown_dtype(s.dtype)
        if device and (_is_str(shown) or isinstance(shown, (ListDtype, CategoricalDtype))):
            raise TypeError(f"{shown} columns have no device array (cupy has no such dtype)")
        if isinstance(shown, np.dtype) and shown.kind == 'b' and nulls:
            if device: raise ValueError("Column must have no nulls.")
            return s.to_numpy(dtype=object, na_value=None)
        if isinstance(shown, np.dtype) and shown.kind in 'iu' and nulls:
            return s.to_numpy(dtype='float64', na_value=np.nan)
        if isinstance(shown, np.dtype) and shown.kind in 'biuf':
            return s.to_numpy(dtype=np.dtype(dtype) if dtype is not None else shown, na_value=np.nan)
        return s.to_numpy(dtype=dtype or object, na_value=None)

    def to_arrow(self): return pa.array(self._col().array, from_pandas=True)

    def _host_pandas(self, s:pd.Series) -> pd.Series:
        """to_pandas (column.py:1132-1166 @v26.06.01; `ColumnBase.to_pandas` and string.py:486-520 @6a22d1d): through
        Arrow's `to_numpy`: an int with nulls float64 and NaN, a bool with nulls objects and None, strings objects (or
        the StringDtype the column had), categoricals pandas' with their categories on the host."""
        dt = self._dtype
        if isinstance(dt, CategoricalDtype):
            cats = dt.categories.to_pandas() if dt.categories is not None else None
            return pd.Series(pd.Categorical(s.astype(object).where(s.notna(), None), categories=cats,
                                            ordered=dt.ordered), index=s.index, name=s.name)
        if isinstance(dt, pd.api.extensions.ExtensionDtype) and not isinstance(dt, (ListDtype,)):
            return s.astype(dt)   # a pandas dtype the column kept (nullable numbers, StringDtype)
        if isinstance(dt, ListDtype): return pd.Series(s.to_numpy(dtype=object, na_value=None), index=s.index,
                                                       name=s.name)
        if _is_str(dt): return pd.Series(s.to_numpy(dtype=object, na_value=None), index=s.index, name=s.name,
                                         dtype=object)
        vals = self._array(None, None, device=False) if isinstance(dt, np.dtype) and dt.kind in 'biuf' \
            else s.to_numpy()
        return pd.Series(vals, index=s.index, name=s.name, copy=False)

# --- Series -----------------------------------------------------------------------------------------------------------
class Series(_Column):
    "cudf.Series, over a pandas Series in the held form"
    _api = 'Series'
    def __init__(self, data=None, index=None, dtype=None, name=no_default, copy=False, nan_as_null=no_default):
        if isinstance(data, Series):
            s = data._pd.copy() if copy else data._pd
            s = s if index is None else s.set_axis(_as_index(index)._pd)
            shown = data._dtype
        else:
            if isinstance(data, cp.ndarray): data = data._a
            if isinstance(data, Index): data = data._pd
            if isinstance(data, np.ndarray) and data.dtype.kind == 'O': s, shown = _object_array(data)
            else:
                ps = pd.Series(data, copy=False) if isinstance(data, (pd.Series, pd.Index)) else pd.Series(data)
                s, shown = column_of(ps, nan_as_null=nan_as_null is not False)
            s = s.set_axis(_as_index(index)._pd if index is not None else pd.RangeIndex(len(s)))
        if dtype is not None: s, shown = _cast(s, dtype), None
        if name is not no_default: s = s.rename(name)
        self._pd, self._dtype = s, shown if shown is not None else _shown_dtype(s.dtype)

    @classmethod
    def _of(cls, s:pd.Series, dtype=None) -> 'Series':
        obj = cls.__new__(cls)
        obj._pd = s if _is_held(s.dtype) else _held(s)
        obj._dtype = dtype if dtype is not None else _shown_dtype(obj._pd.dtype)
        return obj

    # the host moves
    def to_pandas(self, *, index=True, nullable=False, arrow_type=False):
        s = self._host_pandas(self._pd)
        return s.set_axis(Index._of(self._pd.index).to_pandas()) if index else s.reset_index(drop=True)
    def to_frame(self, name=no_default):
        df = self._pd.to_frame() if name is no_default else self._pd.to_frame(name)
        return DataFrame._of(df, {df.columns[0]: self._dtype})
    @classmethod
    def from_arrow(cls, array): return Series._of(_arrow_held(pa.table({'_': array}))['_'])
    @classmethod
    def from_pandas(cls, s, nan_as_null=no_default): return from_pandas(s, nan_as_null)

    # attributes
    @property
    def index(self): return Index._of(self._pd.index)
    @index.setter
    def index(self, value): self._pd = self._pd.set_axis(_as_index(value)._pd)
    @property
    def name(self): return self._pd.name
    @name.setter
    def name(self, value): self._pd = self._pd.rename(value)
    @property
    def str(self): return StringMethods(self)
    @property
    def cat(self): return CategoricalAccessor(self)
    @property
    def list(self): return ListMethods(self)
    @property
    def dt(self): return DatetimeProperties(self)
    @property
    def iloc(self): return _SeriesIlocIndexer(self)
    @property
    def loc(self): return _SeriesLocIndexer(self)

    # missing values: for a float column NaN counts as null too (numerical.py:219-234 @6a22d1d)
    def isna(self): return Series._of(_nulls(self._pd))
    isnull = isna
    def notna(self): return Series._of(~_nulls(self._pd))
    notnull = notna
    @property
    def has_nulls(self):
        "the column's nulls only, not a NaN in a float column (series.py:1684-1710 @6a22d1d: `_column.has_nulls()`)"
        return bool(self._pd.isna().any())
    def nans_to_nulls(self): return Series._of(self._pd.mask(_nulls(self._pd)), self._dtype)
    def dropna(self, axis=0, inplace=False, how=None, ignore_index=False):
        return Series._of(self._pd[~_nulls(self._pd).to_numpy()], self._dtype)
    def fillna(self, value=None, method=None, axis=None, inplace=False, limit=None):
        return Series._of(_fill(self._pd, _host(value)), self._dtype)

    def astype(self, dtype, copy=False, errors='raise'):
        res = Series._of(_cast(self._pd, dtype), _cast_dtype(dtype))
        if isinstance(res._dtype, CategoricalDtype) and not isinstance(self._dtype, CategoricalDtype):
            # the categories are the column's distinct values, in its dtype (categorical.py: `self.unique()`)
            res._dtype = CategoricalDtype(Index._of(res._pd.cat.categories, self._dtype), res._dtype.ordered)
        return res

    def unique(self):
        "In order of first appearance (as a Series, unlike pandas' array)"
        return Series._of(pd.Series(self._pd.drop_duplicates().to_numpy(), dtype=self._pd.dtype,
                                    name=self.name), self._dtype)

    def factorize(self, sort=False, use_na_sentinel=True):
        "cupy int64 codes, uniques in order of first appearance (algorithms.py:21-108 @v26.06.01)"
        codes, uniq = pd.factorize(self._pd, sort=sort, use_na_sentinel=use_na_sentinel)
        return cp.ndarray(codes.astype(np.int64)), Index._of(pd.Index(uniq, dtype=self._pd.dtype))

    def value_counts(self, normalize=False, sort=True, ascending=False, bins=None, dropna=True):
        """26.06 groups with sort=False: the counts come in hash order, not by first appearance (series.py:3205,
        indexed_frame.py:5646 @v26.06.01); 26.10 orders them by first position (series.py:3341-3364 @6a22d1d)."""
        vc = self._pd.value_counts(normalize=normalize, sort=sort, ascending=ascending, dropna=dropna)
        if not sort and CONF.version == '26.06': vc = vc.iloc[np.argsort(_hash_order(vc.index), kind='stable')]
        return Series._of(vc)

    def sort_values(self, axis=0, ascending=True, inplace=False, kind='quicksort', na_position='last',
                    ignore_index=False, key=None):
        "A categorical sorts by its codes, not its values (column.py:2234-2251 @v26.06.01; categorical.py:111-122)"
        s = self._pd
        by = pd.Series(s.cat.codes.where(s.notna(), np.nan), index=s.index) if isinstance(
            s.dtype, pd.CategoricalDtype) else s
        order = by.sort_values(ascending=ascending, kind='stable', na_position=na_position).index
        res = s.loc[order] if s.index.is_unique else s.iloc[np.argsort(by.to_numpy(na_value=np.inf), kind='stable')]
        return Series._of(res.reset_index(drop=True) if ignore_index else res, self._dtype)

    def groupby(self, by=None, axis=0, level=None, as_index=True, sort=no_default, group_keys=False, observed=True,
                dropna=True):
        return SeriesGroupBy(self._pd.groupby(_host(by), level=level, as_index=as_index, observed=observed,
                                              dropna=dropna, sort=sort is True), self, sort is not True)

    def _reduce(self, op, axis=no_default, skipna=True, numeric_only=False, min_count=0, ddof=1, **kwargs):
        """A reduction as `ColumnBase._reduce` makes it (column.py:2945-2990 @6a22d1d): NaN counts as null and nulls
        are dropped (with skipna), then the values are reduced; nothing left: NaN (sum 0, product 1)."""
        s = self._pd
        if op in ('any', 'all'):   # series.py:2039-2076: nulls skipped; an empty column is all, and not any
            v = s[~_nulls(s).to_numpy()].to_numpy(dtype=bool)
            return np.bool_(v.any() if op == 'any' else v.all())
        if skipna: s = s[~_nulls(s).to_numpy()]
        elif bool(_nulls(s).any()): return np.nan
        if len(s) < max(min_count, 1):
            return {'sum': 0, 'product': 1, 'prod': 1}.get(op, np.nan) if len(s) >= min_count else np.nan
        shown = self._dtype
        vals = pd.Series(s.to_numpy(dtype=shown if isinstance(shown, np.dtype) and shown.kind in 'biuf' else None))
        extra = {'ddof': ddof} if op in ('var', 'std') else {}
        return getattr(vals, 'prod' if op == 'product' else op)(**extra)

    def memory_usage(self, index=True, deep=False):
        return _col_memory(self._pd, self._dtype) + (self.index.memory_usage() if index else 0)

    def hash_values(self, method='murmur3', seed=None):
        raise NotImplementedError("the cuDF stand-in has no libcudf hash kernels: hash_values runs only on cuDF")

    def __getitem__(self, arg):
        if isinstance(arg, (Series, cp.ndarray, np.ndarray)) and _dtype_of(arg).kind == 'b':
            return Series._of(self._pd[_mask(arg, self._pd)], self._dtype)
        if isinstance(arg, slice): return Series._of(self._pd.iloc[arg] if _positional(arg) else self._pd[arg],
                                                     self._dtype)
        return _device(self._pd[_host(arg)], self)
    def __setitem__(self, key, value):
        key = _mask(key, self._pd) if isinstance(key, (Series, cp.ndarray)) else _host(key)
        self._pd[key] = _host(value)

    def _binop(self, other, op):
        o = _operand(other, self._pd)
        with _nan_kept(): return Series._of(op(self._pd, o))

class _SeriesIlocIndexer(_Obj):
    _api = '_SeriesIlocIndexer'
    def __init__(self, s): self._s = s
    def __getitem__(self, arg):
        return _device(self._s._pd.iloc[_positions(arg)], self._s)
    def __setitem__(self, key, value): self._s._pd.iloc[_positions(key)] = _host(value)

class _SeriesLocIndexer(_SeriesIlocIndexer):
    _api = '_SeriesLocIndexer'
    def __getitem__(self, arg): return _device(self._s._pd.loc[_host(arg)], self._s)
    def __setitem__(self, key, value): self._s._pd.loc[_host(key)] = _host(value)

# --- Index ------------------------------------------------------------------------------------------------------------
class Index(_Column):
    "cudf.Index, over a pandas Index in the held form"
    _api = 'Index'
    def __new__(cls, data=None, dtype=None, copy=False, name=no_default, nan_as_null=no_default, **kwargs):
        if isinstance(data, Index): return data
        if isinstance(data, cp.ndarray): data = data._a
        s, shown = column_of(pd.Series(data, copy=False), nan_as_null=nan_as_null is not False)
        if dtype is not None: s, shown = _cast(s, dtype), None
        return Index._of(pd.Index(s.array, name=None if name is no_default else name), shown)

    @classmethod
    def _of(cls, ix:pd.Index, dtype=None) -> 'Index':
        kind = next((k for p,k in _INDEXES if isinstance(ix, p)), Index)
        obj = object.__new__(kind)
        obj._pd = ix if kind in (RangeIndex, MultiIndex) or _is_held(ix.dtype) else _held_index(ix)
        obj._dtype = dtype if dtype is not None else _shown_dtype(obj._pd.dtype) if kind is not MultiIndex else None
        return obj

    def to_pandas(self, *, nullable=False, arrow_type=False):
        if isinstance(self._pd, (pd.RangeIndex, pd.MultiIndex)): return self._pd
        return pd.Index(self._host_pandas(pd.Series(self._pd, copy=False)), name=self._pd.name)
    @property
    def name(self): return self._pd.name

    def __getitem__(self, key):
        r = self._pd[_host(key)]
        return Index._of(r) if isinstance(r, pd.Index) else _device(r)

    def isin(self, values):
        "a device bool array (index.py:2447-2455 @v26.06.01)"
        return cp.ndarray(np.asarray(self._pd.isin(_host(values) if not isinstance(values, Series) else
                                                    values._pd.to_numpy(dtype=object, na_value=None))))

    def get_indexer(self, target, method=None, limit=None, tolerance=None):
        """Positions of `target`'s values by an inner join on keys cast to a common dtype (index.py:1949-2032
        @v26.06.01, `_match_join_keys` in join/_join_helpers.py:71-135; index.py:1885-1972 and _join_helpers.py:72-153
        @6a22d1d): both strings of unequal dtypes (a pandas StringDtype against object) go to float64 on 26.06, so an
        error casting them makes every position -1; a string against a number is cast to float64 on both, so '5' finds
        5. A device int64 array, -1 where not found."""
        if pd.api.types.is_scalar(target): raise TypeError("Should be a sequence")
        if not self._pd.is_unique: raise ValueError("Cannot get index for a non-unique Index.")
        needle = target if isinstance(target, (Series, Index)) else Series(target)
        n = len(needle)
        res = np.full(n, -1, np.int64)
        if not len(self): return cp.ndarray(res)
        try: lcol, rcol = _match_join_keys(pd.Series(needle._pd, copy=False), needle._dtype,
                                           pd.Series(self._pd, copy=False), self._dtype)
        except ValueError: return cp.ndarray(res)
        pos = pd.Index(rcol).get_indexer(lcol)
        found = pos >= 0
        res[found] = pos[found]
        return cp.ndarray(res)

    def equals(self, other):
        return isinstance(other, Index) and self._pd.equals(other._pd)
    def astype(self, dtype, copy=True):
        return Index._of(pd.Index(_cast(pd.Series(self._pd, copy=False), dtype).array, name=self._pd.name),
                         _cast_dtype(dtype))
    def memory_usage(self, deep=False):
        if isinstance(self._pd, pd.RangeIndex): return 0
        return _col_memory(pd.Series(self._pd, copy=False), self._dtype)
    def take(self, indices, axis=0, allow_fill=True, fill_value=None):
        return Index._of(self._pd.take(_host(indices)))

class RangeIndex(Index):
    _api = 'RangeIndex'
    def __new__(cls, start, stop=None, step=1, dtype=None, copy=False, name=None):
        return Index._of(pd.RangeIndex(start, stop, step, name=name))
    start = property(lambda self: self._pd.start)
    stop = property(lambda self: self._pd.stop)
    step = property(lambda self: self._pd.step)

class CategoricalIndex(Index):
    _api = 'CategoricalIndex'

class MultiIndex(Index):
    _api = 'MultiIndex'

class DatetimeIndex(Index):
    _api = 'DatetimeIndex'

class TimedeltaIndex(Index):
    _api = 'TimedeltaIndex'

class IntervalIndex(Index):
    _api = 'IntervalIndex'

for _c in (Series, Index, RangeIndex, CategoricalIndex, MultiIndex, DatetimeIndex, TimedeltaIndex, IntervalIndex):
    _c.__module__ = 'cudf.core.series' if _c is Series else 'cudf.core.index'

_INDEXES = ((pd.RangeIndex, RangeIndex), (pd.MultiIndex, MultiIndex), (pd.CategoricalIndex, CategoricalIndex),
            (pd.DatetimeIndex, DatetimeIndex), (pd.TimedeltaIndex, TimedeltaIndex), (pd.IntervalIndex, IntervalIndex))

def _as_index(ix) -> Index:
    if isinstance(ix, Index): return ix
    if isinstance(ix, pd.Index): return Index._of(ix)
    return Index(ix)

# --- DataFrame --------------------------------------------------------------------------------------------------------
class DataFrame(_DeviceData):
    "cudf.DataFrame, over a pandas DataFrame of held columns, with the dtype cuDF shows for each"
    _api = 'DataFrame'
    def __init__(self, data=None, index=None, columns=None, dtype=None, copy=None, nan_as_null=no_default):
        if isinstance(data, DataFrame):
            self._pd, self._dtypes = data._pd.copy() if copy else data._pd, dict(data._dtypes)
        elif isinstance(data, cp.ndarray) or (isinstance(data, np.ndarray) and data.ndim == 2):
            a = _host(data)
            names = list(columns) if columns is not None else list(range(a.shape[1]))
            cols = {c: Series(a[:, j], nan_as_null=nan_as_null) for j,c in enumerate(names)}
            self._set_columns(cols, index)
        elif isinstance(data, pd.DataFrame):
            self._set_columns({c: Series(data[c], nan_as_null=nan_as_null) for c in data.columns}, data.index)
        else:
            data = {} if data is None else data
            cols = {}
            for c,v in data.items():
                if isinstance(v, Series) and index is not None:   # aligned on the index, as cuDF does
                    cols[c] = v
                else: cols[c] = v if isinstance(v, Series) else Series(v, nan_as_null=nan_as_null)
            if columns is not None: cols = {c: cols[c] for c in columns}
            self._set_columns(cols, index)
        if dtype is not None: self._pd, self._dtypes = self.astype(dtype)._pd, self.astype(dtype)._dtypes

    def _set_columns(self, cols:dict, index):
        n = len(next(iter(cols.values()))) if cols else (0 if index is None else len(_as_index(index)))
        ix = _as_index(index)._pd if index is not None else (next(iter(cols.values()))._pd.index if cols
                                                               else pd.RangeIndex(n))
        data = {}
        for c,s in cols.items():
            p = s._pd
            data[c] = p.set_axis(ix) if len(p) == len(ix) and (index is None or not p.index.equals(ix)) and \
                isinstance(p.index, pd.RangeIndex) else p.reindex(ix)
        self._pd = pd.DataFrame(data, index=ix) if data else pd.DataFrame(index=ix)
        self._dtypes = {c: s._dtype for c,s in cols.items()}

    @classmethod
    def _of(cls, df:pd.DataFrame, dtypes:dict|None=None) -> 'DataFrame':
        obj = cls.__new__(cls)
        obj._pd = pd.DataFrame({c: df[c] if _is_held(df[c].dtype) else _held(df[c]) for c in df.columns},
                               index=df.index) if len(df.columns) else df
        known = dtypes or {}
        obj._dtypes = {c: known[c] if c in known and obj._pd[c].dtype == df[c].dtype else _shown_dtype(obj._pd[c].dtype)
                       for c in obj._pd.columns}
        return obj

    @classmethod
    def from_arrow(cls, table): return DataFrame._of(_arrow_held(table))
    @classmethod
    def from_pandas(cls, df, nan_as_null=no_default): return from_pandas(df, nan_as_null)

    def to_pandas(self, *, nullable=False, arrow_type=False):
        cols = {c: self[c].to_pandas() for c in self._pd.columns}
        ix = Index._of(self._pd.index).to_pandas()
        return pd.DataFrame({c: s.set_axis(ix) for c,s in cols.items()}, index=ix, columns=self._pd.columns)
    def __iter__(self): return iter(self._pd.columns)   # dataframe.py:3205-3206 @6a22d1d: the column names
    @property
    def columns(self): return self._pd.columns   # a pandas Index
    @columns.setter
    def columns(self, value):
        old = list(self._pd.columns)
        self._pd.columns = value
        self._dtypes = {n: self._dtypes[o] for o,n in zip(old, self._pd.columns)}
    @property
    def dtypes(self): return pd.Series([self._dtypes[c] for c in self._pd.columns], index=self._pd.columns,
                                       dtype=object)
    @property
    def index(self): return Index._of(self._pd.index)
    @index.setter
    def index(self, value): self._pd.index = _as_index(value)._pd
    @property
    def iloc(self): return _DataFrameIlocIndexer(self)
    @property
    def loc(self): return _DataFrameLocIndexer(self)
    @property
    def shape(self): return self._pd.shape

    def __getitem__(self, arg):
        if isinstance(arg, (Series, cp.ndarray)) and _dtype_of(arg).kind == 'b':
            return DataFrame._of(self._pd[_mask(arg, self._pd)], self._dtypes)
        if isinstance(arg, slice): return DataFrame._of(self._pd.iloc[arg], self._dtypes)
        if pd.api.types.is_list_like(arg) and not isinstance(arg, tuple):
            names = list(arg)
            return DataFrame._of(self._pd[names], {c: self._dtypes[c] for c in names})
        return Series._of(self._pd[arg], self._dtypes[arg])

    def __setitem__(self, key, value):
        if isinstance(key, (list, pd.Index)) and isinstance(value, DataFrame):   # columns paired by position
            for k,c in zip(key, value._pd.columns): self[k] = value[c]
            return
        if isinstance(value, Series):
            s = value._pd if value._pd.index.equals(self._pd.index) else value._pd.reindex(self._pd.index)
            self._pd[key], self._dtypes[key] = s, value._dtype
        else:
            s = Series(value if not np.isscalar(value) else np.full(len(self._pd), value))
            self._pd[key], self._dtypes[key] = s._pd.set_axis(self._pd.index), s._dtype

    def __contains__(self, item): return item in self._pd.columns

    def memory_usage(self, index=True, deep=False):
        "dataframe.py:1855-1900 @6a22d1d: each column's device bytes (`_col_memory`), the index's first"
        cols = [c for c in self._pd.columns]
        mem = [self[c].memory_usage(index=False) for c in cols]
        labels = [str(c) for c in cols]
        if index: mem, labels = [self.index.memory_usage()] + mem, ['Index'] + labels
        return Series(np.array(mem, np.int64), index=pd.Index(labels))

    def astype(self, dtype, copy=False, errors='raise'):
        ts = dtype if isinstance(dtype, dict) else {c: dtype for c in self._pd.columns}
        out = {c: self[c].astype(ts[c]) if c in ts else self[c] for c in self._pd.columns}
        return DataFrame._of(pd.DataFrame({c: s._pd for c,s in out.items()}, index=self._pd.index),
                             {c: s._dtype for c,s in out.items()})

    def isna(self):
        return DataFrame._of(pd.DataFrame({c: _nulls(self._pd[c]) for c in self._pd.columns}, index=self._pd.index))
    isnull = isna
    def notna(self): return DataFrame._of(~self.isna()._pd)
    notnull = notna

    def take(self, indices, axis=0):
        return DataFrame._of(self._pd.take(_positions(indices)), self._dtypes)
    def copy(self, deep=True): return DataFrame._of(self._pd.copy(deep=deep), self._dtypes)

    def groupby(self, by=None, axis=0, level=None, as_index=True, sort=no_default, group_keys=False, observed=True,
                dropna=True):
        return DataFrameGroupBy(self._pd.groupby(_host(by), level=level, as_index=as_index, observed=observed,
                                                 dropna=dropna, sort=sort is True), self, sort is not True)

    def _binop(self, other, op):
        with _nan_kept(): return DataFrame._of(op(self._pd, _operand(other, self._pd)))

class _DataFrameIlocIndexer(_Obj):
    _api = '_DataFrameIlocIndexer'
    def __init__(self, df): self._df = df
    def __getitem__(self, arg):
        rows, cols = arg if isinstance(arg, tuple) else (arg, slice(None))
        if np.isscalar(rows) and not np.isscalar(cols): return _row(self._df, self._df._pd.iloc[[rows], _host(cols)])
        r = self._df._pd.iloc[_positions(rows), _host(cols)]
        return _device(r) if not isinstance(r, pd.DataFrame) else DataFrame._of(r, self._df._dtypes)

def _row(df:DataFrame, one:pd.DataFrame):
    """One row as a Series, if its columns have a common dtype, else a 1-row frame: no mixed-type Series in cuDF
    (dataframe.py:1557-1587 @6a22d1d)"""
    shown = [df._dtypes[c] for c in one.columns]
    if all(isinstance(t, np.dtype) and t.kind in 'biuf' for t in shown):
        return Series._of(one.iloc[0].astype(_MASKED[np.result_type(*shown)]).rename(one.index[0]))
    if all(_is_str(t) for t in shown): return Series._of(one.iloc[0].astype(_HELD_STR).rename(one.index[0]))
    return DataFrame._of(one, df._dtypes)

class _DataFrameLocIndexer(_DataFrameIlocIndexer):
    _api = '_DataFrameLocIndexer'
    def __getitem__(self, arg):
        r = self._df._pd.loc[_host(arg)]
        return _device(r) if not isinstance(r, pd.DataFrame) else DataFrame._of(r, self._df._dtypes)
    def __setitem__(self, key, value): self._df._pd.loc[_host(key)] = _host(value)
DataFrame.__module__ = 'cudf.core.dataframe'

# --- accessors, groupby -----------------------------------------------------------------------------------------------
class _Accessor(_Obj):
    "A cuDF accessor over a stand-in Series, served by pandas' accessor of the same name"
    _attr = None
    def __init__(self, s:Series): self._s, self._pd = s, getattr(s._pd, self._attr)
    def __iter__(self): raise TypeError(f"{type(self).__name__} object is not iterable")   # BaseAccessor(NotIterable)

class StringMethods(_Accessor):
    _api, _attr = 'StringMethods', 'str'
    def split(self, pat=None, n=-1, expand=False, regex=None):
        """`regex=None` with a `pat` longer than one character is a regular expression (accessors/string.py:2612-2616
        @v26.06.01, :2628-2632 @6a22d1d)"""
        regex = regex if regex is not None else pat is not None and len(pat) > 1
        s = self._s._pd.str.split(pat, n=n, regex=regex)
        return Series._of(pd.Series(s.to_numpy(dtype=object, na_value=None), index=s.index, name=s.name))

class CategoricalAccessor(_Accessor):
    _api, _attr = 'CategoricalAccessor', 'cat'
    @property
    def categories(self): return self._s._dtype.categories
    @property
    def codes(self):
        """the codes with the column's nulls: 26.06's as stored, unsigned (accessors/categorical.py:87-97 @v26.06.01);
        26.10's cast to pandas' signed type (accessors/categorical.py:97-99 @6a22d1d)"""
        s, dt = self._s._pd, self._s._dtype
        c = s.cat.codes.to_numpy().astype(np.int64)
        vals = np.where(c < 0, 0, c).astype(dt._codes_dtype if CONF.version == '26.06' else dt._pandas_codes_dtype)
        return Series._of(pd.Series(pd.arrays.IntegerArray(vals, c < 0), index=s.index, name=s.name))

class ListMethods(_Accessor):
    _api, _attr = 'ListMethods', 'list'
    def len(self):
        "int32, null for a null list (accessors/lists.py:223-245)"
        return Series._of(self._s._pd.list.len().astype('Int32'))

class DatetimeProperties(_Accessor):
    _api, _attr = 'DatetimeProperties', 'dt'

class _GroupBy(_Obj):
    """`hashed`: groups come in a hash table's order, not sorted: `sort` defaults to False (indexed_frame.py:5752-5753
    @6a22d1d, :5645-5646 @v26.06.01), and only `sort=True` sorts the keys (groupby.py:1391-1392 @6a22d1d)."""
    def __init__(self, g, parent, hashed=False): self._pd, self._parent, self._hashed = g, parent, hashed
    def __getitem__(self, key): return SeriesGroupBy(self._pd[_host(key)], self._parent, self._hashed)
    def __iter__(self): raise TypeError("cuDF groupby objects are not iterable")

class DataFrameGroupBy(_GroupBy):
    _api = 'DataFrameGroupBy'

class SeriesGroupBy(_GroupBy):
    _api = 'SeriesGroupBy'

for _c in (StringMethods, CategoricalAccessor, ListMethods, DatetimeProperties, DataFrameGroupBy, SeriesGroupBy):
    _c.__module__ = 'cudf.core.accessors' if issubclass(_c, _Accessor) else 'cudf.core.groupby.groupby'

# --- the semantics shared by the classes ------------------------------------------------------------------------------
def _is_held(dt) -> bool:
    "Whether a pandas dtype is one the stand-in holds columns in (Arrow's only for lists)"
    if isinstance(dt, np.dtype): return dt.kind in 'mM'
    if isinstance(dt, pd.ArrowDtype): return pa.types.is_list(dt.pyarrow_dtype)
    return True

def _dtype_of(o):
    if isinstance(o, Series): return o._dtype
    return o.dtype

def _nulls(s:pd.Series) -> pd.Series:
    "null, or NaN in a float column (numerical.py:219-234 @6a22d1d)"
    n = s.isna()
    if isinstance(s.dtype, pd.Float32Dtype | pd.Float64Dtype):
        n = n | pd.Series(np.isnan(s.to_numpy(dtype='float64', na_value=0.0)), index=s.index)
    return n.astype('boolean')

def _mask(m, like) -> np.ndarray:
    "A boolean mask (a device array or a bool Series) as NumPy, nulls as False"
    if isinstance(m, cp.ndarray): return m._a
    if isinstance(m, Series): return m._pd.to_numpy(dtype=bool, na_value=False)
    return np.asarray(m)

def _positional(s:slice) -> bool: return all(v is None or isinstance(v, (int, np.integer)) for v in (s.start, s.stop))

def _positions(arg):
    "Row positions: a device array, a Series or NumPy array of ints, a slice, an int, a bool mask"
    if isinstance(arg, cp.ndarray): return arg._a
    if isinstance(arg, Series): return arg._pd.to_numpy()
    return arg

def _operand(o, like):
    "The other side of a binary operation, as pandas aligns it: a device array positionally, a column by index"
    if isinstance(o, cp.ndarray): return pd.Series(o._a, index=like.index) if o.ndim == 1 else o._a
    if isinstance(o, np.ndarray) and o.ndim > 0: return pd.Series(o, index=like.index)
    return _host(o)

def _fill(s:pd.Series, value):
    """fillna: a float column's NaN too; an int column only with a value its dtype holds exactly, else the TypeError
    of numerical.py:867-893, 988-1007 @v26.06.01 (1183-1209, 1310-1325 @6a22d1d); a narrower float column refuses a
    float64 value that is exactly π (`can_cast_safely`: numerical.py:941-950 @v26.06.01, :1261-1270 @6a22d1d)"""
    dt = _shown_dtype(s.dtype)
    if isinstance(dt, np.dtype) and dt.kind == 'f' and isinstance(value, (float, np.floating)) and \
       np.asarray(value).dtype.itemsize > dt.itemsize and value == np.pi:
        raise TypeError(f"Cannot safely cast non-equivalent {type(value).__name__} to {dt.name}")
    if isinstance(dt, np.dtype) and dt.kind in 'iu' and np.isscalar(value) and not pd.isna(value):
        if np.dtype(dt).type(value) != value:
            raise TypeError(f"Cannot safely cast non-equivalent {type(value).__name__} to {dt}")
    if isinstance(s.dtype, pd.CategoricalDtype) and value not in s.cat.categories and not isinstance(value, pd.Series):
        raise ValueError(f"Cannot setitem on a Categorical with a new category ({value}), set the categories first")
    return s.mask(_nulls(s)).fillna(value)

def _cast_dtype(dtype):
    "The dtype cuDF shows for a cast to `dtype`: a pandas extension dtype asked for is kept (`as_column`), else None"
    if isinstance(dtype, pd.api.extensions.ExtensionDtype) and not isinstance(dtype, pd.CategoricalDtype): return dtype
    return None

def _cast(s:pd.Series, dtype) -> pd.Series:
    """astype to cuDF `dtype`: 'category' sorts the distinct values, nulls left out (column.py:2330-2347 @v26.06.01);
    a string column to a number raises ValueError where a value is not one (string.py:248-253), to bool is whether it
    is non-empty (null False); a categorical to bool casts its values; a datetime to an int is the int64 under it"""
    held = _held_dtype(dtype)
    if isinstance(s.dtype, pd.CategoricalDtype) and held == pd.BooleanDtype():   # the values' cast (categorical.py)
        s = _held(s.astype(s.cat.categories.dtype))
    if isinstance(s.dtype, pd.StringDtype) and held == pd.BooleanDtype():
        # string.py:265-273 @6a22d1d (:230-238 @v26.06.01): `count_characters() > 0`, null then False
        return (s.str.len() > 0).fillna(False).astype(held)
    if s.dtype.kind == 'M' and isinstance(held, pd.api.extensions.ExtensionDtype) and held.kind in 'iu':
        # temporal_base.py:315-335 @6a22d1d: the int64 under the column (its unit's count, UTC), nulls kept, then cast
        return pd.Series(pd.arrays.IntegerArray(s.array.asi8.copy(), s.isna().to_numpy()), index=s.index,
                         name=s.name).astype(held)
    if isinstance(s.dtype, pd.StringDtype) and not isinstance(held, (pd.StringDtype, pd.CategoricalDtype)) and \
       held != 'category':
        nums = pd.to_numeric(s.astype(object).where(s.notna(), None), errors='raise')
        return pd.Series(nums, index=s.index, name=s.name).astype(held)
    if isinstance(s.dtype, pd.CategoricalDtype) and not (isinstance(held, pd.CategoricalDtype) or held == 'category'):
        return _held(s.astype(s.cat.categories.dtype)).astype(held)
    return s.astype(held)

def _match_join_keys(lcol, ltype, rcol, rtype):
    "`_match_join_keys(lcol, rcol, 'inner')` (join/_join_helpers.py:71-135 @v26.06.01, :72-153 @6a22d1d)"
    lcat, rcat = isinstance(ltype, CategoricalDtype), isinstance(rtype, CategoricalDtype)
    if lcat or rcat:   # decategorize, then match the categories' dtype (the common case of the package)
        if lcat: lcol, ltype = _held(lcol.astype(lcol.cat.categories.dtype)), ltype.categories.dtype
        if rcat: rcol, rtype = _held(rcol.astype(rcol.cat.categories.dtype)), rtype.categories.dtype
    if _dtype_equal(ltype, rtype): return lcol, rcol
    num = lambda t: isinstance(t, np.dtype) and t.kind in 'biuf'
    if num(ltype) and num(rtype): common = np.result_type(ltype, rtype)
    elif CONF.version != '26.06' and _is_str(ltype) and _is_str(rtype): return lcol, rcol   # one string dtype
    else: common = np.dtype('float64')
    return _cast(lcol, common), _cast(rcol, common)

def _dtype_equal(a, b) -> bool:
    "cuDF's `is_dtype_equal`: a pandas StringDtype is not NumPy's object (_join_helpers.py:96 @v26.06.01)"
    if isinstance(a, pd.StringDtype) or isinstance(b, pd.StringDtype): return type(a) is type(b) and a == b
    try: return a == b
    except TypeError: return False

# the groupby methods that give one row a group, indexed by the keys: in a hash table's order unless sorted
_GROUP_REDUCTIONS = {'agg', 'aggregate', 'count', 'first', 'idxmax', 'idxmin', 'last', 'max', 'mean', 'median', 'min',
                     'nunique', 'prod', 'size', 'std', 'sum', 'var'}

def _hashed_groups(r):
    "A groupby's result (one row a group, the keys its index) in the order of the keys' hashes"
    if not isinstance(r, (pd.Series, pd.DataFrame)) or isinstance(r.index, pd.RangeIndex): return r
    return r.iloc[np.argsort(pd.util.hash_pandas_object(r.index, index=False).to_numpy(), kind='stable')]

def _hash_order(ix:pd.Index) -> np.ndarray:
    "A stand-in for the order of a hash table's groups: the values' hashes (pandas' `hash_array`), not their order"
    return pd.util.hash_array(np.asarray(ix.astype(object)), categorize=False)

def _col_memory(s:pd.Series, shown) -> int:
    """Device bytes of a column as `_plc_memory_usage` counts them (column.py:1541-1557 @6a22d1d): its data, a null
    mask where it has nulls (padded to 64 bytes), its children (a string's or list's int32 offsets, a list's
    elements); a categorical's, its unsigned codes and its categories (categorical.py:702-703 @v26.06.01, :726-727
    @6a22d1d)."""
    n = len(s)
    nulls = s.isna()
    mask = ((n + 511) // 512) * 64 if bool(nulls.any()) else 0
    if isinstance(shown, CategoricalDtype):
        cats = pd.Series(s.cat.categories)
        return n * shown._codes_dtype.itemsize + mask + _col_memory(cats, _shown_dtype(cats.dtype))
    if isinstance(shown, ListDtype):
        flat = pd.Series(pc_list_flatten(s))
        return 4 * (n + 1) + _col_memory(flat, _shown_dtype(flat.dtype)) + mask
    if _is_str(shown):
        chars = int(s[~nulls].astype(object).map(lambda v: len(v.encode())).sum()) if n else 0
        return chars + 4 * (n + 1) + mask
    return n * np.dtype(shown).itemsize + mask

def pc_list_flatten(s:pd.Series):
    import pyarrow.compute as pc
    return pd.arrays.ArrowExtensionArray(pc.list_flatten(pa.array(s.array)))

# --- from pandas: what cuDF takes, refuses, and how it holds it -------------------------------------------------------
def column_of(ps:pd.Series, nan_as_null=True):
    """`as_column` of a pandas Series (column/column.py:3330-3600 @6a22d1d; 3262-3470 @v26.06.01): `(held, dtype)` or
    cuDF's error. Object columns are inferred: numbers in an object column are refused (mixed-integer(-float):
    "Cannot create column with mixed types"; integer or floating: "Cannot convert a integer of object type",
    column.py:3509-3518 @6a22d1d, 3410-3421 @v26.06.01); bools (with missing values) become a bool column with nulls,
    except under `mode.pandas_compatible`, where the check reads `dtype.kind` of a dtype that is None
    (column.py:3520-3526 @6a22d1d, 3423-3428 @v26.06.01): an AttributeError. pandas' nullable dtypes keep their dtype
    (`dtype = arbitrary.dtype`, column.py:3350-3368 @v26.06.01). NaN is null unless `nan_as_null` is False."""
    dt = ps.dtype
    if isinstance(dt, pd.CategoricalDtype):
        return ps, CategoricalDtype(Index._of(dt.categories), dt.ordered)
    if isinstance(dt, pd.api.extensions.ExtensionDtype) and not isinstance(dt, pd.ArrowDtype):
        if not hasattr(dt, 'numpy_dtype') and not isinstance(dt, pd.StringDtype):
            raise NotImplementedError("Custom pandas ExtensionDtypes are not supported")
        return _held(ps), dt   # the pandas dtype is kept
    if isinstance(dt, pd.ArrowDtype): return ps, _shown_dtype(dt)
    if dt.kind in 'fiubmM':
        if dt.kind == 'f' and dt.itemsize == 2: raise TypeError("Unsupported type float16")
        held = _held(ps)
        if dt.kind == 'f' and not nan_as_null: raise NotImplementedError("nan_as_null=False in the stand-in")
        return held, dt
    if dt.kind != 'O': raise NotImplementedError(f"{type(ps).__name__} with {type(dt).__name__} is not supported.")
    compat = CONF.options['mode.pandas_compatible']
    inferred = pd.api.types.infer_dtype(ps, skipna=not compat and nan_as_null)
    if inferred in ('mixed-integer', 'mixed-integer-float'):
        raise MixedTypeError("Cannot create column with mixed types")
    if inferred not in ('mixed', 'decimal', 'string', 'empty', 'boolean'):
        raise MixedTypeError(f"Cannot convert a {inferred} of object type")
    if inferred == 'boolean' and compat:
        dtype = None
        if dtype.kind != 'b' or pd.isna(ps).any(): raise MixedTypeError(f"Cannot have mixed values with {inferred}")
    try: arr = pa.array(ps.to_numpy(dtype=object), from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e: raise MixedTypeError(str(e)) from None
    nested = pa.types.is_list(arr.type) or pa.types.is_struct(arr.type) or pa.types.is_string(arr.type)
    if compat and inferred == 'mixed' and not (nested or pa.types.is_null(arr.type)):
        # column.py:3553-3563 @6a22d1d: with missing values counted, bools and NaN are "mixed"
        raise MixedTypeError("Cannot create column with mixed types")
    if inferred in ('string', 'empty') or pa.types.is_string(arr.type):
        return ps.astype(_HELD_STR), np.dtype(object)
    if inferred == 'boolean': return ps.astype('boolean'), np.dtype(bool)
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        held = pd.Series(pd.arrays.ArrowExtensionArray(arr), index=ps.index, name=ps.name)
        return held, _shown_dtype(held.dtype)
    raise NotImplementedError(f"the cuDF stand-in does not hold {arr.type} columns")

def _object_array(a:np.ndarray) -> tuple:
    """`as_column` of a NumPy object array (column.py:3680-3690 @6a22d1d, :3548-3558 @v26.06.01): all missing is a
    MixedTypeError; some missing, Arrow's `pa.array` of it (so ints with None are ints, a NaN among strings an Arrow
    error); none, a pandas Series of it. `(held, dtype)`, as `column_of`."""
    na = pd.isna(a)
    if not na.any(): return column_of(pd.Series(a))
    if na.all(): raise MixedTypeError("Cannot have all NaN values with object dtype.")
    held = _held(pd.Series(pd.arrays.ArrowExtensionArray(pa.array(a))))
    return held, _shown_dtype(held.dtype)

def _arrow_held(t:pa.Table) -> pd.DataFrame:
    "An Arrow table as the stand-in holds it: Arrow's nulls as nulls (a float's NaN stays NaN: `from_arrow` keeps it)"
    mapping = {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
               pa.int64(): pd.Int64Dtype(), pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
               pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype(), pa.bool_(): pd.BooleanDtype(),
               pa.float32(): pd.Float32Dtype(), pa.float64(): pd.Float64Dtype(), pa.string(): _HELD_STR,
               pa.large_string(): _HELD_STR}
    df = t.to_pandas(types_mapper=mapping.get)
    for c in t.column_names:   # pandas' `__from_arrow__` would make NaN a null too
        col = t[c].combine_chunks() if t.num_columns else None
        if pa.types.is_floating(col.type):
            vals = col.to_numpy(zero_copy_only=False)
            df[c] = pd.arrays.FloatingArray(vals, col.is_null().to_numpy(zero_copy_only=False))
    return df

def from_pandas(obj, nan_as_null=no_default):
    "cudf.from_pandas (dataframe.py:8720-8760 @v26.06.01): a frame, series or index, column by column (`column_of`)"
    nan = nan_as_null is not False
    if isinstance(obj, pd.DataFrame):
        cols = {c: column_of(obj[c], nan) for c in obj.columns}
        res = DataFrame.__new__(DataFrame)
        res._pd = pd.DataFrame({c: s for c,(s,_) in cols.items()}, index=_held_index(obj.index)) if cols else \
            pd.DataFrame(index=_held_index(obj.index))
        res._dtypes = {c: t for c,(_,t) in cols.items()}
        return res
    if isinstance(obj, pd.Series):
        s, t = column_of(obj, nan)
        return Series._of(s.set_axis(_held_index(obj.index)), t)
    if isinstance(obj, pd.Index):
        if isinstance(obj, (pd.RangeIndex, pd.MultiIndex)): return Index._of(obj)
        s, t = column_of(pd.Series(obj), nan)
        return Index._of(pd.Index(s.array, name=obj.name), t)
    raise TypeError(f"from_pandas takes a pandas object, not {type(obj)}")

def add_operators():
    """The operators cuDF's BinaryOperand mixin defines on these classes (`_VALID_BINARY_OPERATIONS`, mixins/binops.py;
    frame.py:69 @6a22d1d), pandas' on the held objects; and the unary ones."""
    import operator
    for cls in (Series, DataFrame, Index):
        names = CONF.api['classes'][cls._api]['names']
        for n,info in names.items():
            if info.get('category') != 'BINARY_OPERATION': continue
            name = n[2:-2]
            fn = lambda b: getattr(operator, f'{b}_' if b in ('and', 'or') else b, None)
            if fn(name) is not None: op = fn(name)
            else:   # a reflected one: __radd__
                f = fn(name[1:])
                op = lambda a, b, f=f: f(b, a)
            setattr(cls, n, lambda self, o, op=op: self._binop(o, op))
        for n in ('__neg__', '__invert__', '__abs__', '__pos__'):
            if n in names or n in ('__invert__', '__neg__'):
                setattr(cls, n, lambda self, n=n: _device(getattr(self._pd, n)(), self))
    Index._binop = lambda self, other, op: _device(op(self._pd, _host(other)))

for _op in ('sum', 'product', 'prod', 'min', 'max', 'mean', 'var', 'std', 'median', 'any', 'all'):
    setattr(Series, _op, lambda self, *a, _op=_op, **k: self._reduce(_op, *a, **k))
