"""The first pass over a Dask frame's rows, which every later pass reads instead of the source: each partition is read
once, the facts fastai's procs need are taken from it, and its columns go to a cache on disk, one file a partition,
numbers as they are, everything else as codes into the partition's own distinct values (`pd.factorize`, or Arrow's
`dictionary_encode` for Arrow strings, outside the GIL). So no Parquet page is decoded, and no string hashed, twice.

What a partition gives (`_scan_part`): its training and validation rows; for each continuous column its missing and
+-inf counts and a sample of its training values (the median's bracket); for the numbers fastai's `df_shrink` casts,
their min and max; for each cat column (and a target with classes) its distinct values with their training-row counts
(a list column's elements, and its list lengths). The partitions' distinct values are then merged on the host, a
column at a time, into fastai's vocabulary order (`ColumnValues`), and each partition's codes remapped into it once.

`CachedParts` reads the cache back as the partitions of a Dask frame: numbers cast as `df_shrink` casts them, cat
columns as pandas Categoricals over the sorted distinct values of all rows (what fastai's category cast makes in
memory), so that encoding a partition looks up its codes, not its strings. Peak memory is a partition's columns in
the pass, then the distinct values of one column on the host; the cache on disk is about the size of the source's
columns uncompressed (cat columns as 1-4 byte codes)."""
from __future__ import annotations

import dataclasses
import os
import shutil
import weakref
from pathlib import Path
from typing import Any, NamedTuple
import numpy as np
import pandas as pd

from ..atomic import lock_path
from ..backend import (
    arrow_strings,
    codes_dtype,
    explode_lists,
    holds_strings,
    is_list_dtype,
    nan_as_null,
    ranked,
    short_string_keys,
    strings_of_keys,
    to_backend,
    to_pandas,
)
from ..rows.chunks import part_name
from ..splits import valid_mask
from .shipping import Shipped

__all__ = []

@dataclasses.dataclass(frozen=True)
class ColumnValues:
    """A raw column's distinct values over all rows in fastai's vocabulary order (sorted, or a categorical's categories
    in their order), how many training rows hold each (a list column: how many of their elements), and whether its
    training rows hold a missing value; for a list column, how many rows (all of them) have lists of each length."""
    values: np.ndarray
    train: np.ndarray  # int64, one a value
    nan_train: bool
    all_rows: bool = False  # the vocabulary is every value: a categorical's categories, or fastai's category cast
    lens: np.ndarray|None = None  # np.bincount of the list lengths (a missing list counts 1)

    def vocab(self) -> list:
        "fastai's vocabulary of the column: every value (`all_rows`), else those the training rows hold."
        return list(self.values if self.all_rows else self.values[self.train > 0])

    def training(self) -> list:
        "The values the training rows hold, sorted (as `sorted_uniques` gives the distinct values of a column)."
        v = self.values[self.train > 0]
        return list(v) if v.dtype != object else sorted(v)

    def counts(self) -> pd.Series:
        "Training-row counts by value, for `keep_frequent`."
        return pd.Series(self.train, index=pd.Index(list(self.values), dtype=object, tupleize_cols=False))

@dataclasses.dataclass(frozen=True)
class ContFacts:
    "A continuous column's missing values (training rows, all rows), +-inf count, and each partition's training sample."
    nan_train: int = 0
    nan_all: int = 0
    inf: int = 0
    samples: tuple|None = None  # per partition: (non-missing training values, a sorted float64 sample of those)

class ScanSpec(NamedTuple):
    "What `scan_part` takes from each partition, and where its columns go."
    path: str
    columns: list  # the frame's columns: file `j` holds column `columns[j]`
    split: str|None
    on: Any
    distinct: frozenset  # columns whose distinct values and training counts are taken: cats, targets with classes
    lists: frozenset  # declared multi-hot columns (undeclared ones are found: object cells that are lists)
    known: frozenset  # categorical columns whose categories Dask knows (codes into them, the same in every partition)
    conts: frozenset  # continuous columns: missing and +-inf counts
    shrink: frozenset  # numbers whose min and max fastai's `df_shrink` reads
    ys: frozenset  # targets: whether they hold missing values
    sample: int  # training values sampled from each continuous column (0: none)

def _numbers(dtype) -> bool:
    "NumPy numbers (and dates), which the cache keeps as they are."
    return isinstance(dtype, np.dtype) and dtype.kind in 'biufmM'

def _factorize(col) -> tuple:
    """`(codes, distinct)` of a host column: int codes (-1: missing) into its distinct values, Arrow strings where they
    are strings (Arrow's hash, outside the GIL, for a column of Arrow strings; short ones as their keys, see
    `_string_values`), else a NumPy array."""
    import pyarrow as pa
    import pyarrow.compute as pc
    a = arrow_strings(col)
    if a is not None:
        if isinstance(a, pa.ChunkedArray): a = a.combine_chunks()
        d = a.dictionary_encode()
        return pc.fill_null(d.indices, -1).to_numpy(zero_copy_only=False), _string_values(d.dictionary)
    codes, uniq = pd.factorize(col.to_numpy() if col.dtype == object else col)
    uniq = np.asarray(uniq)
    if uniq.dtype == object and len(uniq) and pd.api.types.infer_dtype(uniq, skipna=False) == 'string':
        return codes, _string_values(pa.array(uniq, type=pa.large_string()))
    return codes, uniq

def _string_values(uniq):
    """A partition's distinct strings: short ones (`short_string_keys`) as their uint64 keys in an Arrow array, which
    the merge hashes as integers; others as Arrow large strings, whose values of every partition concatenate."""
    import pyarrow as pa
    keys = short_string_keys(uniq)
    return uniq.cast(pa.large_string()) if keys is None else pa.array(keys)

def _counts(codes, at:np.ndarray, k) -> tuple[np.ndarray, bool]:
    """`(counts, nan_train)`: how many training rows hold each of `k` values, and whether one holds a missing value,
    from the rows' `codes` (-1: missing) taken at the training rows' positions `at` (two to three times quicker than a
    mask of them)."""
    n = np.bincount(np.add(codes.take(at), 1, dtype=np.int64), minlength=k + 1)
    return n[1:], bool(n[0])

class _Appender:
    """A partition's arrays (1-D, NumPy numbers) written one after another to its one open file, and where each went,
    `at`: `{name: (offset, dtype, length)}`. One file a partition, not one an array: creating a file cost more CPU
    than filling it (1.1-1.5 ms each on the project's machine: ~70 files, 0.1 CPU-s, a partition)."""
    def __init__(self, f): self.f, self.at = f, {}
    def __call__(self, name:str, a:np.ndarray):
        a = np.ascontiguousarray(a)
        self.at[name] = (self.f.tell(), a.dtype.str, len(a))
        a.tofile(self.f)

def _part_file(root, i:int, suffix:str='.bin') -> Path:
    "Partition `i`'s file in the cache at `root`: its arrays (`.bin`), or a string row index (`.index.arrow`)."
    return Path(root)/part_name(i, suffix)

def _read(f, at:tuple) -> np.ndarray:
    "The array an `_Appender` wrote `at` `(offset, dtype, length)` of the open file `f`."
    offset, dtype, n = at
    f.seek(offset)
    return np.fromfile(f, np.dtype(dtype), n)

def _cont_facts(x:np.ndarray, train:np.ndarray, at:np.ndarray, sample:int, seed:int) -> dict:
    """A continuous column's missing and +-inf counts, and a sorted sample of its training values (as float64): those
    of `sample` training rows drawn at random (`at`: their positions), less the missing ones."""
    f = x.dtype.kind == 'f'
    nan = np.isnan(x) if f else np.zeros(len(x), bool)
    r = dict(nan_train=np.count_nonzero(nan & train), nan_all=np.count_nonzero(nan),
             inf=np.count_nonzero(np.isinf(x)) if f else 0)
    if sample:   # rows drawn, not values: a mask of the training values would cost ten times the draw
        s = x[at if len(at) <= sample else at[np.random.default_rng(seed).choice(len(at), sample, replace=False)]]
        r['sample'] = (len(at) - r['nan_train'], np.sort((s[~np.isnan(s)] if f else s).astype('f8')))
    return r

def _scan_column(col, train:np.ndarray, at:np.ndarray, save:_Appender, j:int, name:str, spec:ScanSpec,
                 seed:int) -> dict:
    """Column `name` of a partition `save`d as array `j`; what the procs need to know of it. The training rows: their
    mask `train` and their positions `at`."""
    r = {'nan': bool(col.isna().any())} if name in spec.ys else {}
    if _numbers(col.dtype):
        x = col.to_numpy()
        save(str(j), x)
        r['store'], r['dtype'] = 'values', x.dtype.str
        if name in spec.shrink: r['min'], r['max'] = col.min(), col.max()
        if name in spec.conts: r['cont'] = _cont_facts(x, train, at, spec.sample, seed)
        if name in spec.distinct:
            codes, uniq = pd.factorize(x)
            counts, r['nan_train'] = _counts(codes, at, len(uniq))
            r['distinct'] = uniq, counts
        return r
    if name in spec.known:   # codes into the categories Dask knows: the same in every partition
        codes = col.cat.codes.to_numpy()
        save(str(j), codes)
        counts, r['nan_train'] = _counts(codes, at, len(col.cat.categories))
        r.update(store='codes', distinct=(None, counts))
        return r
    if name in spec.lists or is_list_dtype(col):
        if holds_strings(col): raise TypeError(f"multi-hot column {name!r} holds strings: give its separator, e.g. "
                                               f"multi_hot={{{name!r}: '|'}}")
        elems, lens = explode_lists(col)
        codes, uniq = _factorize(elems)
        save(str(j), codes.astype(codes_dtype(len(uniq))))
        save(f'{j}.lens', np.where(col.isna().to_numpy(), -1, lens))
        r.update(store='lists', hist=np.bincount(lens),
                 distinct=(uniq, _counts(codes, np.flatnonzero(train[elems.index.to_numpy()]), len(uniq))[0]))
        return r
    codes, uniq = _factorize(col)
    save(str(j), codes.astype(codes_dtype(len(uniq))))
    counts, r['nan_train'] = _counts(codes, at, len(uniq))
    r.update(store='codes', distinct=(uniq, counts))
    return r

def _save_index(index:pd.Index, save:_Appender, path:Path):
    """A partition's row index: a RangeIndex as its range, NumPy values `save`d, others (strings) in an Arrow file at
    `path`."""
    if isinstance(index, pd.RangeIndex): return ('range', index.start, index.stop, index.step)
    if _numbers(index.dtype):
        save('index', index.to_numpy())
        return ('npy',)
    import pyarrow as pa
    import pyarrow.feather as feather
    feather.write_feather(pa.table({'index': pa.array(np.asarray(index))}), path, compression='uncompressed')
    return ('arrow', index.dtype)

def scan_part(part, i:int, spec:ScanSpec) -> dict:
    """Pass A on partition `i`: its columns written to `spec.path`/part.{i}.bin, and what the procs need to know of
    them: training and validation rows, where each array went (`arrays`), and each column's facts (see the module's
    docstring)."""
    part = to_pandas(part)   # the cache holds host arrays (a cuDF frame's come back to the device)
    valid = (np.zeros(len(part), bool) if spec.split is None else
             valid_mask(part[spec.split], spec.on).to_numpy(dtype=bool, na_value=False))
    train = ~valid
    at = np.flatnonzero(train)
    with open(_part_file(spec.path, i), 'wb') as f:
        save = _Appender(f)
        if valid.any(): save('valid', valid)   # the training rows, for `CachedParts.training`
        cols = {c: _scan_column(part[c], train, at, save, j, c, spec, i) for j,c in enumerate(spec.columns)}
        index = _save_index(part.index, save, _part_file(spec.path, i, '.index.arrow'))
    return dict(rows=(len(at), len(part) - len(at)), index=index, arrays=save.at, cols=cols)

# --- the partitions' distinct values merged --------------------------------------------------------------------------
def _sort_order(u:np.ndarray, name:str) -> np.ndarray:
    "The order that sorts distinct values `u` as `sorted_uniques` does: numbers, strings (code points), other objects."
    if u.dtype != object: return np.argsort(u, kind='stable')
    if pd.api.types.infer_dtype(u, skipna=False) == 'string': return np.argsort(u.astype(str), kind='stable')
    try: return np.array(sorted(range(len(u)), key=u.__getitem__), dtype=np.int64)
    except TypeError:
        kinds = sorted({type(o).__name__ for o in u})
        raise TypeError(f"column {name!r} mixes value types {kinds}: cast it to one type first") from None

def merge_values(name:str, pieces:list, cast=None) -> tuple:
    """`(values, train, remaps)` of column `name` from its partitions' `(distinct values, training counts)`: the
    distinct values of all partitions, sorted (cast first to `cast`, fastai's `df_shrink` dtype, which may merge some),
    their training counts, and for each partition the codes of its own values among them (`codes_dtype` ints)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    counts = np.concatenate([c for _,c in pieces]) if pieces else np.zeros(0, np.int64)
    lens = [len(c) for _,c in pieces]
    keyed = [isinstance(u, pa.Array) and pa.types.is_uint64(u.type) for u,_ in pieces]   # short strings' keys
    if any(keyed) and all(k or not len(u) for k,(u,_) in zip(keyed, pieces)):
        keys = np.concatenate([u.to_numpy() if k else np.zeros(0, np.uint64) for k,(u,_) in zip(keyed, pieces)])
    else:   # values of other kinds too: the keys as their strings
        pieces = [(strings_of_keys(u.to_numpy()) if k else u, c) for k,(u,c) in zip(keyed, pieces)]
        keys = None
    arrow = any(isinstance(u, pa.Array) for u,_ in pieces) and all(isinstance(u, pa.Array) or not len(u)
                                                                     for u,_ in pieces)
    if arrow and keys is None:
        allv = pa.concat_arrays([u if isinstance(u, pa.Array) else pa.array([], type=pa.large_string())
                                 for u,_ in pieces])
        keys = short_string_keys(allv)
    if keys is not None:   # short strings: hashed, then the distinct ones sorted, as the integers they pack into
        idx, uniq = pd.factorize(keys)   # as quick as merging sorted runs, and no partition need sort its keys
        order = np.argsort(uniq)
        values = strings_of_keys(uniq[order]).to_numpy(zero_copy_only=False)   # Python strings
    elif arrow:   # Arrow strings: one hash over the partitions' values, then one sort, outside the GIL
        d = allv.dictionary_encode()
        idx, order = d.indices.to_numpy(zero_copy_only=False), pc.sort_indices(d.dictionary).to_numpy()
        values = d.dictionary.take(order).to_numpy(zero_copy_only=False)   # Python strings
    else:
        us = [np.array(u.to_pylist(), dtype=object) if isinstance(u, pa.Array) else np.asarray(u) for u,_ in pieces]
        allv = np.concatenate(us) if us else np.zeros(0, object)
        if cast is not None: allv = allv.astype(cast)
        idx, u = pd.factorize(allv)
        u = np.asarray(u)
        order = _sort_order(u, name)
        values = u[order]
    codes = ranked(idx, order).astype(codes_dtype(len(values)))
    train = np.bincount(codes, weights=counts, minlength=len(values)).astype(np.int64)
    return values, train, np.split(codes, np.cumsum(lens)[:-1]) if lens else []

def save_remaps(path, j:int, remaps:list, arrays:list):
    """Each partition's codes remap of column `j`, with -1 (a missing value) kept -1, appended to its file; where
    they went added to its `arrays`."""
    for i,(r,at) in enumerate(zip(remaps, arrays)):
        with open(_part_file(path, i), 'ab') as f:
            save = _Appender(f)
            save(f'{j}.remap', np.append(r, r.dtype.type(-1)))
        at.update(save.at)

# --- the cache read back -------------------------------------------------------------------------------------------
class CacheDir:
    """The cache's folder, removed when the last reader of it is gone (a pickled copy, in another process, owns
    nothing). Its owner holds a lock on it meanwhile (`atomic.lock_path`), so that the next ETL into `chunk_dir`
    removes the caches of ETLs that died, and no live one."""
    def __init__(self, path, owner:bool=True):
        self.path = Path(path)
        if owner: weakref.finalize(self, _drop_cache, str(path), lock_path(path))
    def __reduce__(self): return type(self), (str(self.path), False)

def _drop_cache(path:str, held:int|None):
    shutil.rmtree(path, True)
    if held is not None: os.close(held)

class CachedColumn(NamedTuple):
    "How a cached column is read: `store` ('values', 'codes', 'lists'), and what it becomes."
    store: str
    dtype: Any  # the dtype it is presented in (a Categorical's, for cat columns)
    remap: bool = False  # codes of the partition's own values, remapped into the merged ones
    values: Any = None  # decoded columns (targets, the split) and lists: the merged values, as an object array
    known: bool = True  # a Categorical whose categories Dask knows (else, the merged values: too many to hash)

class _ReaderSpec(NamedTuple):
    columns: dict  # {name: CachedColumn}
    index: list  # each partition's row index: ('range', start, stop, step), ('npy',) or ('arrow', dtype)
    arrays: list  # each partition's {array: (offset, dtype, length)} in its file
    index_name: Any
    backend: str

class CachedParts:
    """The cache as the partitions of a Dask frame (`dd.from_map` calls it with a partition's number and the columns
    it needs): numbers cast as fastai's `df_shrink` casts them, cat columns as Categoricals over the merged values,
    targets and the split column decoded to their own dtype, list columns as lists, on the frame's backend. Partition
    `i` is the file `part.{i}.bin` of the cache, its arrays where `arrays[i]` says, and its row index as `index[i]`."""
    def __init__(self, cache, columns:dict, index:list, arrays:list, index_name, backend:str):
        self.cache = cache
        # what it reads, one file in the cache for all its tasks in other processes (shipping.py), not one pickle each
        self.spec = Shipped(_ReaderSpec(columns, index, arrays, index_name, backend), cache.path)

    def __getattr__(self, k):   # `columns`, `index`, ...: read where a task needs them first (not on the scheduler)
        if k in _ReaderSpec._fields: return getattr(self.spec.obj, k)
        raise AttributeError(k)
    @property
    def token(self) -> str: return self.spec.__dask_tokenize__()   # the spec's file, unique: no hash of the values
    def __dask_tokenize__(self): return self.token

    def _column(self, f, at:dict, j:int, c:CachedColumn):
        "Column `j` from partition file `f`, whose arrays are `at`."
        x = _read(f, at[str(j)])
        if c.store == 'values': return x if x.dtype == c.dtype else x.astype(c.dtype)
        if c.remap: x = _read(f, at[f'{j}.remap'])[x]
        if c.store == 'lists':   # a missing list holds one missing element (`explode_lists`)
            lens = _read(f, at[f'{j}.lens'])
            vals = pd.api.extensions.take(c.values, x.astype(np.intp), allow_fill=True)
            res = np.empty(len(lens), dtype=object)
            for k,(v,n) in enumerate(zip(np.split(vals, np.cumsum(np.where(lens < 0, 1, lens))[:-1]), lens)):
                res[k] = None if n < 0 else list(v)
            return pd.array(res, dtype=object)
        if c.values is None: return pd.Categorical.from_codes(x, dtype=c.dtype, validate=False)
        return pd.array(pd.api.extensions.take(c.values, x.astype(np.intp), allow_fill=True), dtype=c.dtype)

    def _index(self, f, i:int) -> pd.Index:
        spec = self.index[i]
        if spec[0] == 'range': return pd.RangeIndex(*spec[1:], name=self.index_name)
        if spec[0] == 'npy': return pd.Index(_read(f, self.arrays[i]['index']), name=self.index_name)
        import pyarrow.feather as feather
        values = feather.read_table(_part_file(self.cache.path, i, '.index.arrow'))['index'].to_pandas()
        return pd.Index(values, dtype=spec[1], name=self.index_name)

    def __call__(self, i:int, columns):   # `columns` required: so Dask always passes them, even none
        pos = {c: j for j,c in enumerate(self.columns)}
        with open(_part_file(self.cache.path, i), 'rb') as f:
            # not consolidated (`copy=False`): a proc replacing a column then replaces that column alone
            df = pd.DataFrame({c: self._column(f, self.arrays[i], pos[c], self.columns[c]) for c in columns},
                              index=self._index(f, i), copy=False)
        if self.backend != 'cudf': return df
        df = to_backend(df, 'cudf')
        return df.assign(**nan_as_null(df))

    def valid(self, i:int) -> np.ndarray|None:
        """Partition `i`'s validation rows as the scan split them (a bool mask; None: none validate): the write splits
        by it, so its rows are the ones the procs learned from (a missing split value read from the cache, an object
        column's None or NaN, could otherwise cast another way)."""
        at = self.arrays[i].get('valid')
        if at is None: return None
        with open(_part_file(self.cache.path, i), 'rb') as f: return _read(f, at)

    def training(self, names:list, rows:int) -> pd.DataFrame:
        """Columns `names` (numbers) of the `rows` training rows of all partitions, in order, on the host: read from the
        cache a partition at a time into one array a column (no second copy while they are joined)."""
        pos = {c: j for j,c in enumerate(self.columns)}
        out = {c: np.empty(rows, self.columns[c].dtype) for c in names}
        at = 0
        for i,arrays in enumerate(self.arrays):
            with open(_part_file(self.cache.path, i), 'rb') as f:
                train = ~_read(f, arrays['valid']) if 'valid' in arrays else slice(None)
                for c in names:
                    x = self._column(f, arrays, pos[c], self.columns[c])[train]
                    out[c][at:at + len(x)] = x
            at += len(x) if names else 0
        assert at == rows or not names, (at, rows)
        return pd.DataFrame(out, copy=False)

    def meta(self):
        "The frame's empty partition: the columns in their dtypes (a cat column's categories unknown to Dask)."
        from dask.dataframe.utils import clear_known_categories
        cols = {c: pd.Categorical([], categories=[]) if not s.known else pd.array([], dtype=s.dtype)
                for c,s in self.columns.items()}
        meta = pd.DataFrame(cols, index=pd.RangeIndex(0, name=self.index_name))
        meta = clear_known_categories(meta, cols=[c for c,s in self.columns.items() if not s.known])
        return meta if self.backend != 'cudf' else to_backend(meta, 'cudf')
