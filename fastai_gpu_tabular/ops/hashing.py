"""Hashed buckets and crosses: a seeded, stable hash of column values (MurmurHash3 x86_32), the `HashBucket` proc (a
column hashed into N buckets, no vocabulary), `HashedCross` (a categorical made of two or more columns, exact or
hashed), and the out-of-vocabulary buckets of `Categorify(num_buckets=...)`.

The hash of a value is `murmur3_32(key_bytes(value), seed)` where the key bytes are:
- a string: its UTF-8 bytes;
- an integer (any width, signed or unsigned) or a bool: its value as a little-endian 8-byte two's-complement int64 (an
  unsigned value above 2**63 as its 8 bytes), so `True` hashes as `1` and an int8 column as its int64 copy;
- a float: as the integer it equals when it is integral (so an int column that gained NaN hashes as before), else its
  little-endian IEEE-754 float64 bytes.
Values equal in Python (`1 == 1.0 == True`) so get the same hash, whatever the column's dtype. This is what cuDF's
`Series.hash_values(method='murmur3', seed=seed)` computes on a string or int64 column, and sklearn's
`murmurhash3_32(key_bytes, seed, positive=True)` on each value. Only the distinct values of a column are hashed (on
the host, vectorised in NumPy), then mapped back to the rows by their codes. A missing value is not hashed: it gets
code 0 (`#na#`), as in fastai's Categorify.

A value's bucket is `hash % num_buckets`; in a vocabulary (`classes`) bucket k shows as `'#bucket{k}#'`."""
from __future__ import annotations

import functools
import numpy as np
import pandas as pd
from fastai.tabular.core import Tabular, TabularProc

from ..backend import (
    Column,
    array_module,
    backend_of,
    codes_dtype,
    factorize,
    is_cudf,
    series_like,
    to_backend,
    to_host,
)
from ..checks import guard_setups

__all__ = ['HashBucket', 'HashedCross', 'murmur3_32', 'hash_values', 'hash_column']

_C1, _C2 = np.uint32(0xcc9e2d51), np.uint32(0x1b873593)
_ROWS = 1 << 16   # strings hashed per block: bounds the padded byte matrix

def _rotl(x, r): return (x << np.uint32(r)) | (x >> np.uint32(32 - r))

def _mix_k(k): return _rotl(k * _C1, 15) * _C2

def _fmix(h):
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85ebca6b)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xc2b2ae35)
    return h ^ (h >> np.uint32(16))

def _murmur3_blocks(words:np.ndarray, lens:np.ndarray, seed:int) -> np.ndarray:
    """MurmurHash3 x86_32 of keys given as little-endian uint32 `words` (n, w), zero-padded past each key's byte length
    `lens`: the body is the full words, the tail the zero-padded word after them (padding with zeros is the tail's
    own rule), one vectorised step per word position."""
    h = np.full(len(lens), seed, np.uint32)
    full, rem = lens // 4, lens % 4
    with np.errstate(over='ignore'):
        if len(lens) and (lens == lens[0]).all() and lens[0] % 4 == 0:   # keys of one length in whole words: no masks
            for j in range(int(full[0])):
                h ^= _mix_k(words[:, j])
                h = _rotl(h, 13) * np.uint32(5) + np.uint32(0xe6546b64)
            return _fmix(h ^ lens.astype(np.uint32))
        for j in range(words.shape[1]):
            k = _mix_k(words[:, j])
            body, tail = j < full, (j == full) & (rem > 0)
            hb = _rotl(h ^ k, 13) * np.uint32(5) + np.uint32(0xe6546b64)
            h = np.where(body, hb, np.where(tail, h ^ k, h))
        return _fmix(h ^ lens.astype(np.uint32))

def murmur3_32(keys:list|np.ndarray, seed:int=0) -> np.ndarray:
    """MurmurHash3 x86_32 (Austin Appleby's; sklearn's `murmurhash3_32(key, seed, positive=True)`) of each byte string
    in `keys`, or of each row of a 2-d uint8 array (fixed-length keys), as a uint32 array."""
    seed = check_seed(seed)
    if isinstance(keys, np.ndarray) and keys.ndim == 2:   # fixed-length keys, e.g. 8-byte ints
        b = np.ascontiguousarray(keys, np.uint8)
        pad = -b.shape[1] % 4
        if pad: b = np.pad(b, ((0, 0), (0, pad)))
        return _murmur3_blocks(b.view('<u4'), np.full(len(b), keys.shape[1], np.int64), seed)
    keys = list(keys)
    out = np.empty(len(keys), np.uint32)
    lens = np.fromiter(map(len, keys), np.int64, len(keys))
    order = np.argsort(lens, kind='stable')   # blocks of similar lengths: little padding
    for s in range(0, len(keys), _ROWS):
        idx = order[s:s + _ROWS]
        width = -(-int(lens[idx].max()) // 4) * 4 if len(idx) else 0
        # NumPy's 'S' array pads each key with zero bytes to the block's width (the true lengths come from `lens`)
        b = np.array([keys[i] for i in idx], dtype=f'S{max(width, 4)}').view(np.uint8).reshape(len(idx), -1)
        out[idx] = _murmur3_blocks(b.view('<u4'), lens[idx], seed)
    return out

def check_seed(seed) -> int:
    "`seed` as an int, or a ValueError unless it is an integer in [0, 2**32) (MurmurHash3's seed is 32 bits)."
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    return int(seed)

def check_buckets(num_buckets, what='num_buckets') -> int:
    "`num_buckets` as an int, or a ValueError unless it is a positive integer."
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, (int, np.integer)) or num_buckets < 1:
        raise ValueError(f"{what} must be a positive integer, got {num_buckets!r}")
    return int(num_buckets)

def _number_bytes(a:np.ndarray) -> np.ndarray:
    "The 8 key bytes (rows of a uint8 array) of numbers: ints, bools and integral floats as int64, others as float64."
    if a.dtype.kind in 'biu': return a.astype('<u8' if a.dtype.kind == 'u' else '<i8').view(np.uint8).reshape(-1, 8)
    a = a.astype('<f8')
    integral = (np.floor(a) == a) & (np.abs(a) < 2.0**63)
    bits = a.view('<u8').copy()
    bits[integral] = a[integral].astype('<i8').view('<u8')
    return bits.view(np.uint8).reshape(-1, 8)

def _unhashable(name, v) -> TypeError:
    return TypeError(f"column {name!r} holds values of type {type(v).__name__} (e.g. {v!r}), which cannot be hashed: "
                     "hashing takes strings, integers, floats and bools; cast the column first")

def hash_values(values, seed:int=0, name=None) -> np.ndarray:
    """The hash (uint32) of each of `values` (distinct, non-missing: a column's uniques), by the key bytes in this
    module's docstring; `name` names the column in errors."""
    a = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
    if a.dtype.kind in 'biuf': return murmur3_32(_number_bytes(a), seed)
    if a.dtype.kind in 'US': a = a.astype(object)
    if a.dtype != object: raise _unhashable(name, a[0] if len(a) else a.dtype)
    is_str = np.fromiter((isinstance(v, str) for v in a), bool, len(a))
    out = np.empty(len(a), np.uint32)
    if is_str.any(): out[is_str] = murmur3_32([v.encode('utf-8') for v in a[is_str]], seed)
    if not is_str.all():
        rest = a[~is_str]
        bad = next((v for v in rest if not isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating))), None)
        if bad is not None: raise _unhashable(name, bad)
        ints = np.fromiter((isinstance(v, (bool, int, np.bool_, np.integer)) for v in rest), bool, len(rest))
        h = np.empty(len(rest), np.uint32)
        try:
            if ints.any(): h[ints] = murmur3_32(_number_bytes(np.array([int(v) for v in rest[ints]], np.int64)), seed)
        except OverflowError: raise ValueError(f"column {name!r} holds integers outside int64, which hashing keys "
                                               "by their 8 bytes: cast the column to str first") from None
        if not ints.all(): h[~ints] = murmur3_32(_number_bytes(rest[~ints].astype(np.float64)), seed)
        out[~is_str] = h
    return out

def _factorize(col:Column, name=None) -> tuple:
    "`(codes, uniques)` of a column on the host (`backend.factorize`), with an error naming a value it cannot hash."
    try: return factorize(col)
    except TypeError as e:   # lists, dicts, sets: pandas cannot hash them
        bad = next((v for v in to_host(col) if not pd.api.types.is_hashable(v)), None)
        raise _unhashable(name if name is not None else col.name, bad) from e

def hash_column(col:Column, seed:int=0) -> tuple:
    """`(hashes, missing)`: the uint32 hash of each row of `col` (a pandas or cuDF Series) and a bool mask of its
    missing rows (whose hash is 0), as host arrays: the distinct values are hashed, then gathered by their codes; a
    NumPy number column is hashed row by row, which costs less than finding its distinct values."""
    # a performance path for pandas: a NumPy column read in place (a cuDF one's distinct values are found on the device)
    if not is_cudf(col) and isinstance(col.dtype, np.dtype) and col.dtype.kind in 'biuf':
        a = col.to_numpy()
        miss = np.isnan(a) if a.dtype.kind == 'f' else np.zeros(len(a), bool)
        h = np.zeros(len(a), np.uint32)
        h[~miss] = hash_values(a[~miss] if miss.any() else a, seed, col.name)
        return h, miss
    codes, uniq = _factorize(col)
    h = hash_values(uniq, seed, col.name)
    miss = codes < 0
    return (np.where(miss, np.uint32(0), h[np.maximum(codes, 0)]) if len(h) else np.zeros(len(codes), np.uint32)), miss

def bucket_labels(num_buckets:int) -> list:
    "How bucket k shows in a vocabulary (`classes`): '#bucket{k}#'."
    return [f'#bucket{k}#' for k in range(num_buckets)]

def is_bucket_dtype(dtype) -> bool:
    "Whether `dtype` is the categorical of bucket labels that `HashBucket`/`HashedCross` make (all buckets its vocab)."
    if type(dtype).__name__ != 'CategoricalDtype' or dtype.categories is None or not len(dtype.categories): return False
    cats = to_host(dtype.categories)
    return cats[0] == '#bucket0#' and cats[-1] == f'#bucket{len(cats) - 1}#'

@functools.lru_cache(maxsize=8)   # one per bucket count, not one per encodes call: it holds num_buckets labels
def _bucket_dtype(num_buckets:int) -> pd.CategoricalDtype:
    "The categorical dtype whose categories are the `num_buckets` bucket labels: Categorify's vocab for the column."
    return pd.CategoricalDtype(bucket_labels(num_buckets), ordered=False)

def oov_buckets(codes:Column, col:Column, offset:int, num_buckets:int, seed:int=0) -> Column:
    """Categorify's codes `codes` of `col` where the values its vocabulary lacks (code 0 but not missing) get
    `offset + hash % num_buckets` instead: the out-of-vocabulary buckets after the vocabulary's `offset-1` values."""
    dt = codes_dtype(offset + num_buckets)
    res = to_host(codes).to_numpy().astype(dt)
    oov = (res == 0) & ~to_host(col.isna()).to_numpy()
    if oov.any():
        h, _ = hash_column(col[array_module(col).asarray(oov)], seed)   # the mask on the column's device
        res[oov] = (offset + h % np.uint32(num_buckets)).astype(dt)
    return series_like(codes, res, codes.name)

def _as_buckets(h:np.ndarray, miss:np.ndarray, num_buckets:int, like:Column, name) -> Column:
    "A categorical column of the bucket labels (missing rows missing), on `like`'s backend and index."
    codes = np.where(miss, -1, h % np.uint32(num_buckets)).astype(codes_dtype(num_buckets))
    res = pd.Series(pd.Categorical.from_codes(codes, dtype=_bucket_dtype(num_buckets)), index=to_host(like.index),
                    name=name)
    return to_backend(res, backend_of(like))

def _labels(buckets:np.ndarray, miss:np.ndarray, na) -> np.ndarray:
    "The label of each row's bucket ('#bucket{k}#'), `na` where missing: the labels made once per distinct bucket."
    u, inv = np.unique(buckets, return_inverse=True)
    res = np.array(bucket_labels(int(u.max()) + 1) if len(u) else [], dtype=object)[u][inv.reshape(-1)]
    res[miss] = na
    return res

class HashBucket(TabularProc):
    """Hash each of the cat columns `names` into `num_buckets` buckets, with no vocabulary (NVTabular's `HashBucket`,
    Keras' `Hashing`): the column becomes a categorical of the bucket labels '#bucket{k}#', which `Categorify` (after
    it in procs) encodes as codes 1..num_buckets, k+1 for bucket k (0: missing, `#na#`), so its embedding has
    num_buckets+1 rows (Categorify's min_freq, max_vocab and num_buckets leave such a column alone). The bucket is
    `murmur3_32(value, seed) % num_buckets` (see this module's docstring): the same in any process, on pandas, cuDF and
    Dask. `num_buckets` may be a dict {name: buckets}. It runs early (`order` -1), on the raw values."""
    order = -1
    def __init__(self, names:list|str, num_buckets:int|dict, seed:int=0):
        names = [names] if isinstance(names, str) else list(names)
        nb = dict(num_buckets) if isinstance(num_buckets, dict) else {n: num_buckets for n in names}
        missing = [n for n in names if n not in nb]
        if missing: raise ValueError(f"num_buckets has no entry for column(s) {missing}")
        self.names, self.seed = names, check_seed(seed)
        self.num_buckets = {n: check_buckets(nb[n], f"num_buckets of {n!r}") for n in names}
        super().__init__()

    def raw_names(self, cat_names, cont_names, y_names) -> list:
        "The columns it hashes: fastai's shrink leaves their values as they are (see `checks.raw_columns`)."
        return list(self.names)

    def check_columns(self, to:Tabular):
        "Its columns are single-hot cat columns of the frame; else an error naming them, before anything is hashed."
        _check_cols(to, self.names, 'HashBucket')
        bad = [n for n in self.names if n not in to.cat_names]
        if bad: raise KeyError(f"HashBucket hashes cat columns: {bad} are not in cat_names")

    @guard_setups
    def setups(self, to:Tabular): self.check_columns(to)   # it learns nothing

    def encodes(self, to:Tabular):
        for n in self.names:
            col = to.items[n]
            to[n] = _as_buckets(*hash_column(col, self.seed), self.num_buckets[n], col, n)
        return to

def cross_name(parts) -> str: return '_X_'.join(map(str, parts))

_SEP = '_X_'

def _key_str(v) -> str:
    "A cross's text of one value: a float that is an integer as that integer (5.0 -> '5', as an int column with NaN)."
    if isinstance(v, (float, np.floating)) and float(v).is_integer(): return str(int(v))
    return str(v)

def cross_values(cols:list, name:str) -> tuple:
    """`(codes, values)` of the cross of the columns `cols`: int64 codes (-1 where any part is missing) into the
    distinct crossed values, each its parts' texts joined by '_X_' (e.g. 'M_X_25'). Only distinct combinations are
    turned into text."""
    parts = [_factorize(c) for c in cols]
    key, miss = np.zeros(len(parts[0][0]), np.int64), np.zeros(len(parts[0][0]), bool)
    for codes, uniq in parts:   # mixed radix: one int64 key per row, the parts' codes as its digits
        if len(uniq) and key.max(initial=0) > (np.iinfo(np.int64).max - len(uniq)) // max(len(uniq), 1):
            raise ValueError(f"the cross {name!r} has too many combinations to key in int64")
        miss |= codes < 0
        key = key * max(len(uniq), 1) + np.maximum(codes, 0)
    uk, inv = np.unique(key[~miss], return_inverse=True)
    texts, digits = [], uk
    for _, uniq in reversed(parts):   # the digits back, last part first
        n = max(len(uniq), 1)
        t = np.array([_key_str(v) for v in uniq], dtype=object)
        bad = [s for s in t if _SEP in s]
        if bad: raise ValueError(f"the cross {name!r}: values such as {bad[0]!r} contain its separator {_SEP!r}")
        texts.insert(0, t[digits % n] if len(uniq) else t[:0])
        digits = digits // n
    values = np.array([_SEP.join(p) for p in zip(*texts)], dtype=object) if len(uk) else np.zeros(0, object)
    codes = np.full(len(key), -1, np.int64)
    codes[~miss] = inv.reshape(-1)
    return codes, values

class HashedCross(TabularProc):
    """New cat columns, each the cross of two or more columns (`names`: a list of tuples of names), named by
    `cross_name` ('a_X_b'): a row's value is its parts' values joined by '_X_' ('M_X_25'; missing where a part is).
    With `num_buckets` unset the cross is exact, and Categorify (after it in procs) learns its vocabulary from the
    training rows; with `num_buckets` (an int, or {cross name: int}) it is hashed into buckets as `HashBucket` does
    (the hash of the joined text, see this module's docstring). The parts must be named columns (cat or cont); it
    runs first (`order` -2, before HashBucket), on their raw values (fastai's `reduce_memory` leaves them as they
    are). A float part is written as its text, an integral one as an int."""
    order = -2
    def __init__(self, names:list, num_buckets:int|dict|None=None, seed:int=0):
        names = [names] if names and isinstance(names[0], str) else list(names)
        bad = [p for p in names if isinstance(p, str) or len(p) < 2]
        if bad: raise ValueError(f"HashedCross crosses two or more columns: got {bad}")
        self.names, self.seed = [tuple(p) for p in names], check_seed(seed)
        self.made_names = [cross_name(p) for p in self.names]
        nb = num_buckets if isinstance(num_buckets, dict) else {n: num_buckets for n in self.made_names}
        self.num_buckets = {n: None if nb.get(n) is None else check_buckets(nb[n], f"num_buckets of {n!r}")
                            for n in self.made_names}
        super().__init__()

    def raw_names(self, cat_names, cont_names, y_names) -> list:
        "The columns it crosses: fastai's shrink leaves their values as they are (see `checks.raw_columns`)."
        return list(dict.fromkeys(c for p in self.names for c in p))

    def check_columns(self, to:Tabular):
        "Its parts are single-hot columns of the frame, its crosses new names; else an error naming them."
        _check_cols(to, [c for p in self.names for c in p], 'HashedCross')
        clash = [n for n in self.made_names if n in to.cont_names or n in to.y_names]
        if clash: raise ValueError(f"HashedCross would make column(s) {clash}, which are already named columns")

    @guard_setups
    def setups(self, to:Tabular): self.check_columns(to)   # it learns nothing

    def encodes(self, to:Tabular):
        for p, n in zip(self.names, self.made_names):
            cols = [to.items[c] for c in p]
            codes, values = cross_values(cols, n)
            if self.num_buckets[n] is None:   # exact: the texts, for Categorify's vocabulary
                v = pd.Series(np.where(codes < 0, None, values[np.maximum(codes, 0)] if len(values) else None),
                              index=to_host(cols[0].index), name=n, dtype=object)
                to[n] = to_backend(v, backend_of(cols[0]))
            else:
                h = hash_values(values, self.seed, n)
                miss = codes < 0
                to[n] = _as_buckets(np.where(miss, np.uint32(0), h[np.maximum(codes, 0)] if len(h) else 0), miss,
                                    self.num_buckets[n], cols[0], n)
            if n not in to.cat_names: to.cat_names.append(n)
        return to

def _check_cols(to, names, what):
    "Columns `names` are in the frame and single-hot, or an error naming them, before anything is hashed."
    missing = [n for n in names if n not in to.items.columns]
    if missing: raise KeyError(f"{what}: column(s) {missing} are not in the frame; name them in cat_names or "
                               "cont_names so that the Tabular keeps them")
    lists = [n for n in names if n in getattr(to, 'multi_hot', {})]
    if lists: raise TypeError(f"{what} hashes one value a row: column(s) {lists} hold lists (multi-hot), which "
                              "cannot be hashed")

def host_sources(spec:dict) -> list:
    "The raw columns `host_input` reads for `spec`."
    return spec['hash'] if 'hash' in spec else host_sources(spec['made']) if 'made' in spec else [spec['oov_of']]

def host_specs(procs) -> dict:
    """{column: what makes it from raw columns} for the columns the hashing procs among `procs` make, which an ONNX
    graph cannot (it has no MurmurHash3): `onnx_inputs` computes them on the host with `host_input`."""
    res = {}
    for p in procs:
        if isinstance(p, HashBucket): parts = [(n, [n]) for n in p.names]
        elif isinstance(p, HashedCross): parts = [(n, list(q)) for q,n in zip(p.names, p.made_names)]
        else: continue
        res.update({n: dict(hash=q, buckets=p.num_buckets[n], seed=p.seed) for n,q in parts})
    return res

def host_input(df:pd.DataFrame, spec:dict, name:str, na:str|None) -> np.ndarray:
    """Column `name` as the procs make it before Categorify, from the raw frame `df` (`spec` from `host_specs`): bucket
    labels or a cross's text as strings (`na` where missing); or, for `spec` {'oov_of', 'offset', 'buckets', 'seed'},
    the out-of-vocabulary bucket code (int64) of each row of the column `oov_of` (0 where missing), itself made as
    `spec['made']` says if given (an exact cross)."""
    if 'oov_of' in spec:
        of = spec['oov_of']
        col = pd.Series(host_input(df, spec['made'], of, None), index=df.index) if 'made' in spec else df[of]
        h, miss = hash_column(col, spec['seed'])
        return np.where(miss, 0, spec['offset'] + (h % np.uint32(spec['buckets'])).astype(np.int64))
    nb, seed = spec['buckets'], spec['seed']
    if len(spec['hash']) == 1:
        h, miss = hash_column(df[spec['hash'][0]], seed)
        return _labels(h % np.uint32(nb), miss, na)
    codes, values = cross_values([df[c] for c in spec['hash']], name)
    miss = codes < 0
    if nb is None: res = values[np.maximum(codes, 0)] if len(values) else np.full(len(codes), na, dtype=object)
    else:
        h = hash_values(values, seed, name)
        res = _labels(h[np.maximum(codes, 0)] % np.uint32(nb) if len(h) else np.zeros(len(codes), np.uint32), miss, na)
    res = np.asarray(res, dtype=object).copy()
    res[miss] = na
    return res
