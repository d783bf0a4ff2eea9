"""A processed `TabularGPU` saved as plain data and loaded back without pickle. `save_tabular` (`TabularGPU.save`)
writes the packed rows (train/ and valid/ `PackedChunks` folders: `.npy` int32 files, as the streaming loader reads
them) and `tabular.json`: the names, the split, the frame's dtypes and row index, each proc's learned state under
fastai's attribute names (typed JSON: see `SAVED_TYPES`), and the size and sha256 of every file. `load_tabular`
(`TabularGPU.load`) checks every file against it, and rebuilds the processed Tabular, ready for `dataloaders()`; on
Linux it maps the rows files' pages (their headers are padded for that) rather than reading them."""
from __future__ import annotations

import ctypes
import hashlib
import io
import json
import math
import mmap
import os
import re
import shutil
import struct
import sys
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path
import numpy as np
import pandas as pd
import torch
from fastai.data.block import TransformBlock
from fastai.data.transforms import Categorize, CategoryMap, EncodedMultiCategorize, Normalize, RegressionSetup
from fastai.tabular import core as fatc
from fastai.tabular.core import FillMissing, FillStrategy

from .backend import frame_device, frame_of_tensors, is_dask, to_backend, to_host
from .groupby import JoinGroupby
from .hashing import HashBucket, HashedCross
from .pack import Layout, ReleasedFrame, cat_spans, packs_whole, unpack_rows
from .procs import Categorify, LazyCategoryMap
from .progress import progress_rows
from .stream import PackedChunks
from .target import TargetEncode

__all__ = ['SavedFormatError', 'register_saved_proc']

FORMAT_VERSION = 1
MANIFEST = 'tabular.json'
_NUMPY = ('bool', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64', 'float16', 'float32',
          'float64')
# the value types of vocabularies, fill values and stats that a saved Tabular holds
SAVED_TYPES = ('str', 'bool', 'int', 'float', 'Timestamp', *(f'numpy.{t}' for t in _NUMPY))

class SavedFormatError(ValueError):
    "A saved Tabular that cannot be read back: a missing, truncated or altered file, or an unknown format version."

# --- typed values ---------------------------------------------------------------------------------------------------
def _tag(v) -> str|None:
    "The `SAVED_TYPES` name of `v`'s type, or None."
    if isinstance(v, (bool, str)): return type(v).__name__   # before int: a bool is an int
    if isinstance(v, pd.Timestamp): return 'Timestamp'
    if isinstance(v, (np.bool_, np.integer, np.floating)):
        return f'numpy.{v.dtype.name}' if v.dtype.name in _NUMPY else None
    if isinstance(v, (int, float)): return type(v).__name__ if type(v) in (int, float) else None
    return None

def _plain(v, tag):
    "`v` as JSON: numbers as numbers (floats exact: Python writes the shortest repr), NaN/inf as strings."
    if tag == 'Timestamp': return [v.isoformat(), None if v.tz is None else str(v.tz)]
    if tag in ('float', 'numpy.float16', 'numpy.float32', 'numpy.float64'):
        f = float(v)
        return f if math.isfinite(f) else str(f)   # 'nan', 'inf', '-inf': strict JSON has no NaN
    return v.item() if isinstance(v, np.generic) else v

def _typed(tag, v):
    "The value of type `tag` that `_plain` wrote as `v`."
    if tag == 'Timestamp':
        ts = pd.Timestamp(v[0])
        return ts if v[1] is None else ts.tz_convert(v[1])
    if tag not in SAVED_TYPES: raise ValueError(f"unknown value type {tag!r} (known: {', '.join(SAVED_TYPES)})")
    want = {'str': str, 'bool': bool, 'numpy.bool': bool}.get(tag, (int, float, str) if 'float' in tag else int)
    if not isinstance(v, want) or (isinstance(v, bool) and want is not bool) or (isinstance(v, str) and want is not str
                                                                                and v not in ('nan', 'inf', '-inf')):
        raise ValueError(f"a {tag} value written as {v!r}")
    if tag.startswith('numpy.'): return np.dtype(tag[6:]).type(float(v) if isinstance(v, str) else v)
    return float(v) if tag == 'float' else v

def encode_values(values, where:str) -> dict:
    """`values` (a vocabulary, or a dict's values) as typed JSON: `{"type": t, "values": [...]}` when all share a type,
    else `{"types": [...], "values": [...]}`. A value of a type not in `SAVED_TYPES` is a TypeError naming `where`."""
    if values and set(map(type, values)) == {str}: return {'type': 'str', 'values': list(values)}   # big vocabularies
    tags = [_tag(v) for v in values]
    if None in tags:
        v = values[tags.index(None)]
        raise TypeError(f"{where} holds {v!r}, a {type(v).__module__}.{type(v).__name__}, which a saved Tabular cannot "
                        f"hold (it holds {', '.join(SAVED_TYPES)}): cast that column to one of those before processing")
    vals = [_plain(v, t) for v,t in zip(values, tags)]
    if len(set(tags)) > 1: return {'types': tags, 'values': vals}
    return {'type': tags[0] if tags else 'str', 'values': vals}

def decode_values(d:dict, copy:bool=True) -> list:
    "The values `encode_values` wrote (a str list is `d`'s own list unless `copy`)."
    vals = d['values']
    if not isinstance(vals, list): raise ValueError(f"values written as a {type(vals).__name__}, not a list")
    if 'types' not in d and d['type'] == 'str':   # the common case (big string vocabularies), checked at once
        try: ''.join(vals)   # C's loop: a TypeError at the first non-string
        except TypeError: raise ValueError("a str list holding non-strings") from None
        return list(vals) if copy else vals
    tags = d['types'] if 'types' in d else [d['type']] * len(vals)
    if len(tags) != len(vals): raise ValueError("a typed list with as many types as values")
    return [_typed(t, v) for t,v in zip(tags, vals)]

def _enc_dict(d:dict, where:str) -> dict:
    return {'keys': list(d), **encode_values(list(d.values()), where)}
def _dec_dict(d:dict) -> dict: return dict(zip(d['keys'], decode_values(d), strict=True))

SavedCategoryMap = LazyCategoryMap   # a loaded vocabulary (the name that earlier pickles hold)

def _enc_map(cm:CategoryMap, where:str) -> dict:
    "A fastai `CategoryMap`: with `#na#` first (and unknown values mapping to it) or not, and its values."
    na = cm.add_na if isinstance(cm, LazyCategoryMap) else isinstance(cm.o2i, defaultdict)
    items = list(cm.items)
    if na and (not items or items[0] != '#na#'): raise TypeError(f"{where} maps unknown values but has no '#na#' first")
    return {'na': na, **encode_values(items[1:] if na else items, where)}
def _dec_map(d:dict) -> CategoryMap:
    "The `CategoryMap` `_enc_map` wrote (one copy of a big vocabulary at most: it takes seconds for millions)."
    na, items = bool(d['na']), decode_values(d, copy=False)
    return LazyCategoryMap(['#na#', *items] if na else items, na)

# --- procs ------------------------------------------------------------------------------------------------------------
_SAVERS = {}

def register_saved_proc(cls:type, state:Callable, restore:Callable) -> None:
    """Let a saved Tabular hold procs of type `cls` (matched exactly): `state(proc)` gives its learned state as a dict
    of plain values (names, numbers, `encode_values`); `restore(state)` makes the proc back from it, running no code of
    the file. Loading looks the type up by the name saved, in these registrations only."""
    _SAVERS[f'{cls.__module__}.{cls.__qualname__}'] = (cls, state, restore)

def saved_proc_types() -> list:
    "The proc classes a saved Tabular holds: those `register_saved_proc` registered."
    return [c for c,_,_ in _SAVERS.values()]

def _need(p, *attrs):
    missing = [a for a in attrs if not hasattr(p, a)]
    if missing: raise ValueError(f"{type(p).__name__} has no {missing}: save a Tabular after its procs are set up")

def _categorify_state(p) -> dict:
    _need(p, 'classes')
    res = {'classes': {n: _enc_map(cm, f"Categorify.classes[{n!r}]") for n,cm in p.classes.items()},
           'multi_hot_lens': {n: int(w) for n,w in (getattr(p, 'multi_hot_lens', None) or {}).items()}}
    if isinstance(p, Categorify):
        mb = p.max_bag
        nb = p.num_buckets
        res['init'] = {'min_freq': p.min_freq, 'max_vocab': p.max_vocab,
                       'max_bag': dict(mb) if isinstance(mb, dict) else mb,
                       'num_buckets': dict(nb) if isinstance(nb, dict) else nb, 'seed': p.seed}
        if hasattr(p, 'bucket_counts'): res['bucket_counts'] = {n: int(k) for n,k in p.bucket_counts.items()}
    return res

def _categorify_restore(cls):
    def restore(s):
        p = cls(**s['init']) if 'init' in s else cls()
        p.classes = {n: _dec_map(d) for n,d in s['classes'].items()}
        p.multi_hot_lens = {n: int(w) for n,w in s['multi_hot_lens'].items()}
        if 'bucket_counts' in s: p.bucket_counts = {n: int(k) for n,k in s['bucket_counts'].items()}
        return p
    return restore

_FILLS = {'median': FillStrategy.median, 'constant': FillStrategy.constant, 'mode': FillStrategy.mode}

def _fillmissing_state(p) -> dict:
    _need(p, 'na_dict')
    fs = p.fill_strategy if isinstance(p.fill_strategy, str) else p.fill_strategy.__name__
    if fs not in _FILLS: raise TypeError(f"FillMissing.fill_strategy {fs!r}: a saved Tabular holds {list(_FILLS)}")
    return {'fill_strategy': fs, 'add_col': bool(p.add_col),
            'fill_vals': _enc_dict(p.fill_vals, 'FillMissing.fill_vals'),
            'na_dict': _enc_dict(p.na_dict, 'FillMissing.na_dict')}

def _fillmissing_restore(s):
    if s['fill_strategy'] not in _FILLS: raise ValueError(f"unknown fill_strategy {s['fill_strategy']!r}")
    p = FillMissing(fill_strategy=_FILLS[s['fill_strategy']], add_col=bool(s['add_col']),
                    fill_vals=defaultdict(int, _dec_dict(s['fill_vals'])))
    p.na_dict, p.fill_strategy = _dec_dict(s['na_dict']), s['fill_strategy']   # a name, as set-up leaves it
    return p

def _normalize_state(p) -> dict:
    _need(p, 'means', 'stds')
    return {'means': _enc_dict(p.means, 'Normalize.means'), 'stds': _enc_dict(p.stds, 'Normalize.stds')}

def _normalize_restore(s):
    p = Normalize()
    p.means, p.stds = _dec_dict(s['means']), _dec_dict(s['stds'])
    return p

def _categorize_state(p) -> dict:
    _need(p, 'vocab')
    return {'vocab': _enc_map(p.vocab, 'Categorize.vocab'), 'sort': bool(p.sort), 'add_na': bool(p.add_na),
            'c': int(p.c)}

def _categorize_restore(s):
    p = Categorize(sort=bool(s['sort']), add_na=bool(s['add_na']))
    p.vocab, p.c = _dec_map(s['vocab']), int(s['c'])
    return p

def _multicat_restore(s):
    vocab = _dec_map(s['vocab'])
    p = EncodedMultiCategorize(list(vocab.items))
    p.vocab, p.c = vocab, int(s['c'])
    return p

def _regression_state(p) -> dict: return {'c': None if p.c is None else int(p.c)}
def _regression_restore(s): return RegressionSetup(c=s['c'])

def _hashing_state(p) -> dict:
    "HashBucket's and HashedCross's state is their arguments: the hash learns nothing."
    return {'names': [n if isinstance(n, str) else list(n) for n in p.names], 'num_buckets': dict(p.num_buckets),
            'seed': int(p.seed)}
def _hashing_restore(cls): return lambda s: cls(s['names'], s['num_buckets'], s['seed'])

def _enc_frame(df:pd.DataFrame, where:str) -> dict:
    "A float frame by category (TargetEncode's `encodings`, JoinGroupby's `groups`): its index typed, its columns."
    return {'index': encode_values(list(df.index), f"{where}.index"), 'index_dtype': str(df.index.dtype),
            'columns': [str(c) for c in df.columns],
            'values': [encode_values([float(v) for v in df[c]], where) for c in df.columns]}

def _dec_frame(d:dict) -> pd.DataFrame:
    idx, dt = pd.Index(decode_values(d['index']), dtype=object), d['index_dtype']
    if dt not in (*_NUMPY, 'object', 'str', 'string', 'category'): raise ValueError(f"an index of dtype {dt!r}")
    if dt not in ('object', 'category'): idx = idx.astype(dt)   # a categorical's: its values are what procs read
    return pd.DataFrame({c: decode_values(v) for c,v in zip(d['columns'], d['values'], strict=True)}, index=idx,
                        dtype='float64')

def _target_state(p) -> dict:
    _need(p, 'encodings', 'target_mean')
    mean = np.atleast_1d(np.asarray(p.target_mean, dtype='f8'))
    return {'init': {'names': p.names, 'smooth': p.smooth, 'folds': p.folds, 'seed': int(p.seed),
                     'target_type': p.target_type},
            'target_type_': p.target_type_, 'scalar_mean': np.ndim(p.target_mean) == 0,
            'target_mean': encode_values([float(v) for v in mean], 'TargetEncode.target_mean'),
            'target_classes': None if p.target_classes is None else
                              encode_values(list(p.target_classes), 'TargetEncode.target_classes'),
            'encodings': {n: _enc_frame(e, f"TargetEncode.encodings[{n!r}]") for n,e in p.encodings.items()}}

def _target_restore(s):
    p = TargetEncode(**s['init'])
    mean = np.array(decode_values(s['target_mean']), dtype='f8')
    p.target_mean = float(mean[0]) if s['scalar_mean'] else mean
    p.target_type_ = s['target_type_']
    p.target_classes = None if s['target_classes'] is None else decode_values(s['target_classes'])
    p.encodings = {n: _dec_frame(d) for n,d in s['encodings'].items()}
    return p

def _groupby_state(p) -> dict:
    _need(p, 'defaults')
    return {'init': {'names': p.names, 'conts': p.conts, 'stats': p.stats},
            'groups': {n: _enc_frame(g, f"JoinGroupby.groups[{n!r}]") for n,g in p.groups.items()},
            'defaults': {x: _enc_dict(d, f"JoinGroupby.defaults[{x!r}]") for x,d in p.defaults.items()}}

def _groupby_restore(s):
    p = JoinGroupby(**s['init'])
    p.groups = {n: _dec_frame(d) for n,d in s['groups'].items()}
    p.defaults = {x: _dec_dict(d) for x,d in s['defaults'].items()}
    return p

register_saved_proc(Categorify, _categorify_state, _categorify_restore(Categorify))
register_saved_proc(fatc.Categorify, _categorify_state, _categorify_restore(fatc.Categorify))
register_saved_proc(FillMissing, _fillmissing_state, _fillmissing_restore)
register_saved_proc(Normalize, _normalize_state, _normalize_restore)
register_saved_proc(Categorize, _categorize_state, _categorize_restore)
register_saved_proc(EncodedMultiCategorize, _categorize_state, _multicat_restore)
register_saved_proc(RegressionSetup, _regression_state, _regression_restore)
register_saved_proc(HashBucket, _hashing_state, _hashing_restore(HashBucket))
register_saved_proc(HashedCross, _hashing_state, _hashing_restore(HashedCross))
register_saved_proc(TargetEncode, _target_state, _target_restore)
register_saved_proc(JoinGroupby, _groupby_state, _groupby_restore)

def _proc_state(p) -> dict:
    name = f'{type(p).__module__}.{type(p).__qualname__}'
    if name not in _SAVERS:
        raise TypeError(f"proc {type(p).__name__} ({name}) has no saved form: a saved Tabular holds "
                        f"{', '.join(c.__name__ for c in saved_proc_types())} (see `register_saved_proc`)")
    return {'type': name, 'state': _SAVERS[name][1](p)}

def _restore_proc(d:dict):
    if d['type'] not in _SAVERS: raise ValueError(f"proc type {d['type']!r} is not one this version can load")
    return _SAVERS[d['type']][2](d['state'])

# --- files ------------------------------------------------------------------------------------------------------------
def file_digest(path) -> str:
    "The sha256 of the file at `path`, in hex."
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        while b := f.read(1 << 24): h.update(b)
    return h.hexdigest()

# a rows file's header is as long as where its rows go in the loaded rows, modulo this: so a load maps its pages
_PAGE = 4096

def _npy_header(a:np.ndarray, at:int|None=None) -> bytes:
    """`a`'s `.npy` header (what `np.save` writes); with `at` (the byte where its rows go in the loaded rows), padded
    with spaces, as numpy pads it, to a length equal to `at` modulo `_PAGE`, so that its rows' file pages line up."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, np.lib.format.header_data_from_array_1_0(a))
    b = head.getvalue()
    if at is None: return b
    n = len(b) + (at - len(b)) % _PAGE
    return b[:8] + struct.pack('<H', n - 10) + b[10:-1] + b' ' * (n - len(b)) + b'\n'

def _write_npy(path:Path, a:np.ndarray, at:int|None=None) -> dict:
    "Write `a` as a `.npy` file (header as `_npy_header`), hashing it as it goes: its entry in the manifest."
    a = np.ascontiguousarray(a)
    head = _npy_header(a, at)
    h = hashlib.sha256(head)
    body = memoryview(a.reshape(-1)).cast('B') if a.size else b''
    h.update(body)
    with open(path, 'wb') as f:
        f.write(head)
        f.write(body)
    return {'bytes': len(head) + len(body), 'sha256': h.hexdigest()}

def _write_text(path:Path, text:str) -> dict:
    b = text.encode()
    path.write_bytes(b)
    return {'bytes': len(b), 'sha256': hashlib.sha256(b).hexdigest()}

def _check_size(path:Path, entry:dict):
    # a link's target can be any file, and can change under a loaded Tabular's mapped rows: its own files only
    if path.is_symlink(): raise SavedFormatError(f"{path} is a symbolic link (to {os.readlink(path)}): a saved "
                                                 "Tabular's files must be its own; copy the files, not links to them")
    if not path.exists(): raise SavedFormatError(f"{path} is missing: the saved Tabular is incomplete")
    n = path.stat().st_size
    if n != entry['bytes']:
        raise SavedFormatError(f"{path} is {n:,} bytes, not the {entry['bytes']:,} it was saved with: "
                               f"{'truncated' if n < entry['bytes'] else 'altered'}")

def _bad_digest(path:Path) -> SavedFormatError:
    return SavedFormatError(f"{path} does not match the sha256 it was saved with: the file was altered or damaged")

def _read_bytes(path:Path, entry:dict, verify:bool) -> bytes:
    _check_size(path, entry)
    b = path.read_bytes()
    if verify and hashlib.sha256(b).hexdigest() != entry['sha256']: raise _bad_digest(path)
    return b

def _read_header(f, path:Path, shape:tuple|None, want:str='<i4') -> int:
    """Check the `.npy` header of the open file `f`, which `want`s values in `shape` (int32 rows; None: any length)
    and no more or fewer bytes than they take: the header's length."""
    try:
        major,_ = np.lib.format.read_magic(f)
        got,fortran,dtype = (np.lib.format.read_array_header_1_0 if major == 1 else
                             np.lib.format.read_array_header_2_0)(f)
    except ValueError as e: raise SavedFormatError(f"{path} is not a .npy file: {e}") from None
    want, shape = np.dtype(want), tuple(got) if shape is None and len(got) == 1 else shape
    if dtype != want or fortran or tuple(got) != shape:
        raise SavedFormatError(f"{path} holds {dtype} {tuple(got)} values, not the {want} {shape} saved")
    n = f.tell()
    size = f.seek(0, io.SEEK_END)
    if size != n + math.prod(shape) * want.itemsize:
        raise SavedFormatError(f"{path} is {size:,} bytes, not the {n + math.prod(shape) * want.itemsize:,} its header "
                               "says: truncated or altered")
    return n

def _read_into(f, buf:memoryview, at:int, path:Path):
    "Bytes `at:` of the open file `f` (at `path`) into all of `buf`."
    f.seek(at)
    got = 0
    while got < len(buf):
        k = f.readinto(buf[got:])
        if not k: raise SavedFormatError(f"{path} ends before its rows do: truncated")
        got += k

if sys.platform == 'linux':
    _LIBC = ctypes.CDLL(None, use_errno=True)
    _LIBC.mmap.restype = ctypes.c_void_p
    _LIBC.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
else: _LIBC = None
_MAP_FIXED = 0x10   # Linux's: mmap's module does not name it

def _rows_memory(nbytes:int) -> mmap.mmap|None:
    "Private memory for the loaded rows, which `_map_file` maps rows files into (on Linux), or None."
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE) if _LIBC is not None and nbytes else None

def _map_file(mem:mmap.mmap, at:int, f, off:int, n:int) -> tuple[int, int]:
    """Map the whole pages of bytes `off:off+n` of the open file `f` over bytes `at:at+n` of `mem`, copy on write (so
    the rows are the page cache's pages, not a copy of them): `(lo, hi)`, the bytes of `mem` mapped (none: `lo==hi`)."""
    lo, hi = -(-at // _PAGE) * _PAGE, (at + n) // _PAGE * _PAGE
    if (off - at) % _PAGE or hi <= lo: return at, at   # a file saved before headers were padded: read
    c = ctypes.c_char.from_buffer(mem)
    base = ctypes.addressof(c)
    del c   # the buffer export, or `mem` could never be unmapped
    prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | _MAP_FIXED
    if _LIBC.mmap(base + lo, hi - lo, prot, flags, f.fileno(), off + lo - at) == base + lo: return lo, hi
    # a file system that cannot map it: fresh memory there again (a failed MAP_FIXED may have unmapped it), and read
    if _LIBC.mmap(base + lo, hi - lo, prot, flags | mmap.MAP_ANONYMOUS, -1, 0) != base + lo:
        raise OSError(ctypes.get_errno(), f"cannot map memory for the rows of {f.name}")
    return at, at

def _load_rows(path:Path, files:list, entries:dict, width:int, verify:bool, pb) -> torch.Tensor:
    """The rows of `files` (`[(name, rows)]` in row order) in one int32 tensor, each file's header and size checked
    and (with `verify`) its sha256, the first that differs named, in row order. On Linux, rows files saved with padded
    headers are mapped (copy on write), not read: the rows are the page cache's pages, so loading copies nothing and
    allocates no fresh memory; hashing them in threads reads them once. A new `save` into the folder writes new files
    and leaves the loaded rows as they were; altering the files in place would show through."""
    total = sum(n for _,n in files)
    mem = _rows_memory(total * width * 4)
    rows = torch.empty((total, width), dtype=torch.int32) if mem is None else \
           torch.frombuffer(mem, dtype=torch.int32).view(total, width)
    buf = memoryview(rows.numpy().reshape(-1)).cast('B') if total * width else memoryview(b'')
    at, checks = 0, []
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:   # hashlib lets other threads run meanwhile
        for name,n in files:
            f, entry, nb = path/name, entries[name], n * width * 4
            _check_size(f, entry)
            with open(f, 'rb', buffering=0) as fh:
                head = _read_header(fh, f, (n, width))
                lo, hi = _map_file(mem, at, fh, head, nb) if mem is not None else (at, at)
                for a,b in ((at, lo), (hi, at + nb)):
                    if b > a: _read_into(fh, buf[a:b], head + a - at, f)
                if verify:
                    fh.seek(0)
                    checks.append(pool.submit(_check_digest, f, entry, hashlib.sha256(fh.read(head)), buf[at:at + nb]))
            at += nb
            pb.update(n)
        for c in checks: c.result()
    return rows

def _check_digest(path:Path, entry:dict, h, buf):
    "The file's sha256 (`h` holding its header's) is the one saved."
    h.update(buf)
    if h.hexdigest() != entry['sha256']: raise _bad_digest(path)

# --- save -------------------------------------------------------------------------------------------------------------
def _index_entry(index, path:Path, files:dict) -> dict:
    "The frame's row index: a range as its bounds, integers as `index.npy`."
    index = to_host(index)   # a cuDF frame's stays on the device
    if isinstance(index, pd.RangeIndex): return {'start': index.start, 'stop': index.stop, 'step': index.step}
    if not pd.api.types.is_integer_dtype(index.dtype) or isinstance(index, pd.MultiIndex):
        raise TypeError(f"the frame's row index holds {index.dtype} labels: a saved Tabular holds integer row labels; "
                        "call df.reset_index() before making the Tabular")
    files['index.npy'] = _write_npy(path/'index.npy', np.asarray(index, dtype=np.int64))
    return {'file': 'index.npy'}

def _write_split(path:Path, name:str, parts, layout:Layout, width:int, files:dict, pb, at:int=0) -> list:
    """Rows of one split in files of `path/name` (a `PackedChunks` folder), one a block of `parts` (int32 arrays, made
    one at a time): `[file, rows]` of each. The split's rows start at row `at` of the whole (see `_npy_header`)."""
    d = path/name
    d.mkdir()
    res = []
    for i,part in enumerate(parts):
        f = f'part.{i:05d}.npy'
        files[f'{name}/{f}'] = _write_npy(d/f, part, at * width * 4)
        res.append([f, len(part)])
        at += len(part)
        pb.update(len(part))
    PackedChunks.write(d, res, layout, width)
    files[f'{name}/chunks.json'] = {'bytes': (d/'chunks.json').stat().st_size, 'sha256': file_digest(d/'chunks.json')}
    return res

def _blocks(rows:torch.Tensor, chunk_rows:int):
    "The host `rows` in blocks of `chunk_rows`."
    for a in range(0, len(rows), chunk_rows): yield rows[a:a + chunk_rows].numpy()

def _chunk_blocks(chunks:PackedChunks, chunk_rows:int):
    "The rows of `chunks` (a `TabularDask`'s, on disk) in blocks of at most `chunk_rows`, read one at a time."
    for i,a,b in chunks.pieces(chunk_rows): yield chunks.read(i, a, b).numpy()

def _clear(path:Path):
    "Make `path` an empty folder to save into: new, empty, or holding an earlier save (which is replaced)."
    if path.exists() and not path.is_dir(): raise FileExistsError(f"{path} is a file, not a folder to save into")
    if path.is_dir() and any(path.iterdir()):
        if not (path/MANIFEST).exists():
            raise FileExistsError(f"{path} holds files and no {MANIFEST}: save into a new or empty folder")
        for p in path.iterdir():   # only what a save writes
            if p.name in ('train', 'valid') and p.is_dir(): shutil.rmtree(p)
            elif p.name in (MANIFEST, 'index.npy'): p.unlink()
    path.mkdir(parents=True, exist_ok=True)

def save_tabular(to, path, chunk_rows:int=1 << 18, progress:bool=True) -> Path:
    """Save the processed Tabular `to` in the folder `path` (see the module's docstring); `chunk_rows` rows a file.
    Writes nothing but plain data: the learned state must be of `SAVED_TYPES` (a TypeError naming the column if not).
    A `TabularDask` is saved from its chunks, `chunk_rows` rows in memory at a time, on a range index."""
    if int(chunk_rows) != chunk_rows or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    dask = is_dask(getattr(to, 'items', None))
    if dask and getattr(to, 'chunks', None) is None:
        raise RuntimeError("this TabularDask is not processed yet: call `process()` before saving it")
    named = set(to.cat_names) | set(to.cont_names) | set(to.y_names)
    columns = [c for c in to.column_names if c in named]
    dtypes = to.released.dtypes if to.released is not None else dict(to.items.dtypes)
    for c in columns:
        d = dtypes[c]
        if c not in to.multi_hot and not (isinstance(d, np.dtype) and d.kind in 'biuf'):
            raise TypeError(f"column {c!r} holds {d} values after processing: a saved Tabular holds numbers (process "
                            "it first, with Categorify for categories)")
    procs = [_proc_state(p) for p in to.procs.fs]   # before writing: a TypeError leaves nothing behind
    # a TabularDask's rows are streamed from its chunks, a block at a time, on a range index (partitions' labels
    # are seldom unique, and reading them would be another pass); the in-memory Tabular's from its packed rows
    chunk_rows = int(chunk_rows)
    if dask:
        layout, width = to.chunks[0].layout, to.chunks[0].width
        blocks = [_chunk_blocks(c, chunk_rows) for c in to.chunks]
    else:
        rows,layout = to.packed_rows('cpu')
        width, blocks = rows.shape[1], [_blocks(rows[:to.split], chunk_rows), _blocks(rows[to.split:], chunk_rows)]
    path = Path(path)
    _clear(path)
    files = {}
    meta = {'format': 'fastai_gpu_tabular.saved', 'version': FORMAT_VERSION,
            'library': {'fastai_gpu_tabular': version('fastai_gpu_tabular') if _installed() else None,
                        'fastai': version('fastai')},
            'cat_names': list(to.cat_names), 'cont_names': list(to.cont_names), 'y_names': list(to.y_names),
            'multi_hot': dict(to.multi_hot), 'columns': columns,
            'dtypes': {c: 'object' if c in to.multi_hot else dtypes[c].name for c in columns},
            # the training frame's float dtypes, which a later frame is cast to (a file without them: no casts)
            'float_dtypes': _enc_dict(dict(to.float_dtypes), 'float_dtypes'),
            'index': _index_entry(pd.RangeIndex(len(to)) if dask else to.row_index, path, files),
            'layout': layout.to_json(), 'width': width,
            'procs': procs}
    with progress_rows(len(to), f'saving to {path}', progress) as pb:
        meta['splits'] = {k: _write_split(path, k, b, layout, width, files, pb, a)
                          for k,b,a in (('train', blocks[0], 0), ('valid', blocks[1], to.split))}
    meta['files'] = files
    # the manifest last: a save cut short has none, so it cannot be loaded
    (path/MANIFEST).write_text(json.dumps(meta, allow_nan=False))   # no indent: C's encoder, not Python's
    return path

def _installed() -> bool:
    try: return bool(version('fastai_gpu_tabular'))
    except Exception: return False

# --- load -------------------------------------------------------------------------------------------------------------
def _read_manifest(path:Path) -> dict:
    f = path/MANIFEST
    if not f.exists():
        raise SavedFormatError(f"{f} is missing: {path} holds no saved Tabular (or its save was cut short)")
    try: meta = json.loads(f.read_bytes())   # bytes: json decodes UTF-8 itself, faster than a text file
    except (ValueError, UnicodeDecodeError) as e:
        raise SavedFormatError(f"{f} is not valid JSON ({e}): altered or truncated") from None
    if not isinstance(meta, dict) or meta.get('format') != 'fastai_gpu_tabular.saved':
        raise SavedFormatError(f"{f} is not a saved Tabular's manifest")
    if meta.get('version') != FORMAT_VERSION:
        raise SavedFormatError(f"{f} is in format version {meta.get('version')!r}; this fastai_gpu_tabular reads "
                               f"version {FORMAT_VERSION}: load it with the version that saved it "
                               f"({(meta.get('library') or {}).get('fastai_gpu_tabular')})")
    return meta

def _read_index(path:Path, meta:dict, verify:bool):
    ix = meta['index']
    if 'file' not in ix: return pd.RangeIndex(ix['start'], ix['stop'], ix['step'])
    if ix['file'] != 'index.npy': raise ValueError(f"an index file {ix['file']!r}")
    f = path/ix['file']
    b = _read_bytes(f, meta['files'][ix['file']], verify)
    fh = io.BytesIO(b)
    n = _read_header(fh, f, None, '<i8')
    return pd.Index(np.frombuffer(b, dtype='<i8', offset=n), copy=False)   # the bytes read, not a copy of them

def _multi_hot_lists(codes:torch.Tensor, vocab:list) -> pd.Series:
    "The lists of a multi-hot block of codes (padded with -1): each row's vocabulary values."
    c = codes.numpy()
    keep = c >= 0
    vals = np.empty(len(vocab), dtype=object)
    vals[:] = vocab
    return [list(v) for v in np.split(vals[c[keep]], np.cumsum(keep.sum(1))[:-1])] if len(c) else []

def _frame(rows:torch.Tensor, layout:Layout, meta:dict, procs:list, index) -> pd.DataFrame:
    "The processed frame, from the packed rows: codes and numbers as the dtypes saved, multi-hot columns as lists."
    cats, conts, *ys = unpack_rows(rows, layout)
    bags = {n: w for p in procs for n,w in (getattr(p, 'multi_hot_lens', None) or {}).items()}
    cat_names, mh = meta['cat_names'], meta['multi_hot']
    spans = cat_spans([bags.get(n, 1) if n in mh else 1 for n in cat_names])
    at = {n: cats[:, a] for n,(a,b) in zip(cat_names, spans) if n not in mh}
    at.update({n: conts[:, j] for j,n in enumerate(meta['cont_names'])})
    if ys: at.update({n: ys[0][:, j] for j,n in enumerate(meta['y_names'])})
    plain = [c for c in meta['columns'] if c not in mh]
    df = frame_of_tensors({c: at[c] for c in plain}, {c: np.dtype(meta['dtypes'][c]) for c in plain}, index)
    classes = next((p.classes for p in procs if isinstance(p, fatc.Categorify)), {})
    for n,(a,b) in zip(cat_names, spans):
        if n in mh: df[n] = pd.Series(_multi_hot_lists(cats[:, a:b], list(classes[n].items)), index=index, dtype=object)
    return df[meta['columns']]

def load_tabular(cls:type, path, device:torch.device|str|None=None, backend:str|None=None, verify:bool=True,
                 progress:bool=True):
    """The Tabular `save_tabular` saved in `path`, as a `cls` (use `TabularGPU.load`): checked file by file (size, and
    sha256 unless `verify=False`), its procs made back from their state, its frame from the packed rows (conts as the
    float32 batches hold), ready for `dataloaders()` on `device`; `backend` moves the frame ('cudf' or 'pandas')."""
    path = Path(path)
    meta = _read_manifest(path)
    try:
        procs = [_restore_proc(d) for d in meta['procs']]
        index = _read_index(path, meta, verify)
        # names and types from the file only from these sets: nothing it says is looked up elsewhere
        if not all(dt in ('int32', 'int64', 'float32') for _,_,dt in meta['layout']): raise ValueError("a layout dtype")
        layout, width = Layout.from_json(meta['layout']), int(meta['width'])
        bad = [c for c,t in meta['dtypes'].items() if t != 'object' and np.dtype(t).kind not in 'biuf']
        if bad: raise ValueError(f"columns {bad} of no numeric dtype")
        floats = _dec_dict(meta['float_dtypes']) if 'float_dtypes' in meta else {}
        bad = [c for c,t in floats.items() if t not in ('float16', 'float32', 'float64')]
        if bad: raise ValueError(f"float_dtypes of columns {bad} that are no float dtype")
        splits = [[(f'{k}/{f}', int(n)) for f,n in meta['splits'][k]] for k in ('train', 'valid')]
        bad = [f for s in splits for f,_ in s if not re.fullmatch(r'(train|valid)/part\.\d{5}\.npy', f)]
        if bad: raise ValueError(f"rows files {bad[:3]} not named as a save names them")
        for k in ('train', 'valid'): _read_bytes(path/k/'chunks.json', meta['files'][f'{k}/chunks.json'], verify)
    except SavedFormatError: raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SavedFormatError(f"{path/MANIFEST} does not describe a saved Tabular ({type(e).__name__}: {e}): "
                               "altered") from e
    n_train, total = sum(n for _,n in splits[0]), sum(n for s in splits for _,n in s)
    if total != len(index): raise SavedFormatError(f"{path/MANIFEST}: {total} rows saved, {len(index)} row labels")
    with progress_rows(total, f'loading {path}', progress) as pb:
        rows = _load_rows(path, splits[0] + splits[1], meta['files'], width, verify, pb)
    # on the host, a frame the packed rows can rebuild is left to them (as `release_frame` leaves it): built from its
    # dtypes alone, then released; otherwise (multi-hot lists, or to cuDF) built from the rows now
    lazy = backend in (None, 'pandas') and not meta['multi_hot']
    df = to_backend(_frame(rows[:0] if lazy else rows, layout, meta, procs, index[:0] if lazy else index), backend)
    to = cls(df, procs=procs, cat_names=meta['cat_names'], cont_names=meta['cont_names'], y_names=meta['y_names'],
             y_block=TransformBlock(), do_setup=False, device=device, inplace=True, reduce_memory=False,
             multi_hot=meta['multi_hot'])
    to.split, to.float_dtypes = n_train, floats
    # the packed rows as read: nothing is packed again
    released = lazy and packs_whole(to)
    to.adopt_packed(rows, layout, ReleasedFrame(list(df.columns), dict(df.dtypes), index, frame_device(df))
                                  if released else None)
    if lazy and not released: to.items = _frame(rows, layout, meta, procs, index)
    return to
