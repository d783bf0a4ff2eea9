"""The procs' learned state as plain values, which a saved Tabular holds in its manifest (saved.py): typed JSON for
vocabularies, fill values and statistics (`encode_values`, of `SAVED_TYPES`), and for each registered proc class its
state and the constructor back (`register_saved_proc`), so that a load rebuilds procs without pickle or code of the
file."""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
import numpy as np
import pandas as pd
from fastai.data.transforms import Categorize, CategoryMap, EncodedMultiCategorize, Normalize, RegressionSetup
from fastai.tabular import core as fatc
from fastai.tabular.core import FillMissing, FillStrategy

from .groupby import JoinGroupby
from .hashing import HashBucket, HashedCross
from .history import DifferenceLag, History, ListSlice
from .joins import JoinExternal
from .numeric import Bucketize, Clip, LogOp, NormalizeMinMax
from .procs import Categorify, LazyCategoryMap
from .target import TargetEncode

__all__ = ['register_saved_proc']

_NUMPY = ('bool', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64', 'float16', 'float32',
          'float64')
# the value types of vocabularies, fill values and stats that a saved Tabular holds
SAVED_TYPES = ('str', 'bool', 'int', 'float', 'Timestamp', *(f'numpy.{t}' for t in _NUMPY))

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

def encode_dict(d:dict, where:str) -> dict:
    "A dict of values as typed JSON: its keys (strings), and its values as `encode_values` writes them."
    return {'keys': list(d), **encode_values(list(d.values()), where)}
def decode_dict(d:dict) -> dict:
    "The dict `encode_dict` wrote."
    return dict(zip(d['keys'], decode_values(d), strict=True))

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

def _saved_type(name:str) -> str:
    "A saved type's name today: before the ops had their folder, an op's was `fastai_gpu_tabular.<module>.<op>`."
    old = name.split('.')
    return '.'.join([old[0], 'ops', *old[1:]]) if len(old) == 3 and old[0] == 'fastai_gpu_tabular' else name

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
        plain = lambda v: dict(v) if isinstance(v, dict) else v
        vocab = getattr(p, 'vocab', None)
        res['init'] = {'min_freq': plain(p.min_freq), 'max_vocab': plain(p.max_vocab), 'max_bag': plain(mb),
                       'num_buckets': plain(nb), 'seed': p.seed, 'joint': list(getattr(p, 'joint', None) or []),
                       'vocab': None if vocab is None else
                                {n: encode_values(v, f"Categorify.vocab[{n!r}]") for n,v in vocab.items()}}
        if hasattr(p, 'bucket_counts'): res['bucket_counts'] = {n: int(k) for n,k in p.bucket_counts.items()}
    return res

def _categorify_restore(cls):
    def restore(s):
        init = dict(s.get('init', {}))
        if init.get('vocab') is not None: init['vocab'] = {n: decode_values(d) for n,d in init['vocab'].items()}
        p = cls(**init) if 'init' in s else cls()
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
            'fill_vals': encode_dict(p.fill_vals, 'FillMissing.fill_vals'),
            'na_dict': encode_dict(p.na_dict, 'FillMissing.na_dict')}

def _fillmissing_restore(s):
    if s['fill_strategy'] not in _FILLS: raise ValueError(f"unknown fill_strategy {s['fill_strategy']!r}")
    p = FillMissing(fill_strategy=_FILLS[s['fill_strategy']], add_col=bool(s['add_col']),
                    fill_vals=defaultdict(int, decode_dict(s['fill_vals'])))
    p.na_dict, p.fill_strategy = decode_dict(s['na_dict']), s['fill_strategy']   # a name, as set-up leaves it
    return p

def _normalize_state(p) -> dict:
    _need(p, 'means', 'stds')
    return {'means': encode_dict(p.means, 'Normalize.means'), 'stds': encode_dict(p.stds, 'Normalize.stds')}

def _normalize_restore(s):
    p = Normalize()
    p.means, p.stds = decode_dict(s['means']), decode_dict(s['stds'])
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

def _enc_index(idx:pd.Index, where:str) -> dict:
    return {'index': encode_values(list(idx), f"{where}.index"), 'index_dtype': str(idx.dtype)}

def _dec_index(d:dict) -> pd.Index:
    idx, dt = pd.Index(decode_values(d['index']), dtype=object), d['index_dtype']
    if dt not in (*_NUMPY, 'object', 'str', 'string', 'category'): raise ValueError(f"an index of dtype {dt!r}")
    if dt not in ('object', 'category'): idx = idx.astype(dt)   # a categorical's: its values are what procs read
    return idx

def _enc_frame(df:pd.DataFrame, where:str) -> dict:
    """A float frame by category (TargetEncode's `encodings`, JoinGroupby's `groups`): its index typed (a MultiIndex,
    a key of several columns: each level's values and its names), its columns."""
    if isinstance(df.index, pd.MultiIndex):
        lv = [_enc_index(df.index.get_level_values(i), where) for i in range(df.index.nlevels)]
        idx = {'levels': lv, 'names': [str(n) for n in df.index.names]}
    else: idx = _enc_index(df.index, where)
    return {**idx, 'columns': [str(c) for c in df.columns],
            'values': [encode_values([float(v) for v in df[c]], where) for c in df.columns]}

def _dec_frame(d:dict) -> pd.DataFrame:
    idx = (pd.MultiIndex.from_arrays([_dec_index(x) for x in d['levels']], names=d['names']) if 'levels' in d
           else _dec_index(d))
    return pd.DataFrame({c: decode_values(v) for c,v in zip(d['columns'], d['values'], strict=True)}, index=idx,
                        dtype='float64')

def _target_state(p) -> dict:
    init = {'names': p.names, 'smooth': p.smooth, 'folds': p.folds, 'seed': int(p.seed),
            'target_type': p.target_type, 'targets': p.targets}
    if p.parts: return {'init': init, 'parts': [_target_state(q) for q in p.parts]}
    _need(p, 'encodings', 'target_mean')
    mean = np.atleast_1d(np.asarray(p.target_mean, dtype='f8'))
    return {'init': init, 'target': p.target,
            'target_type_': p.target_type_, 'scalar_mean': np.ndim(p.target_mean) == 0,
            'target_mean': encode_values([float(v) for v in mean], 'TargetEncode.target_mean'),
            'target_classes': None if p.target_classes is None else
                              encode_values(list(p.target_classes), 'TargetEncode.target_classes'),
            'group_vocabs': {n: [encode_values(list(v), f"TargetEncode.group_vocabs[{n!r}]") for v in vs]
                             for n,vs in getattr(p, 'group_vocabs', {}).items()},
            'encodings': {n: _enc_frame(e, f"TargetEncode.encodings[{n!r}]") for n,e in p.encodings.items()}}

def _target_restore(s):
    p = TargetEncode(**s['init'])
    if 'parts' in s:
        p.parts = [_target_restore(d) for d in s['parts']]
        return p
    p.target = s.get('target')
    mean = np.array(decode_values(s['target_mean']), dtype='f8')
    p.target_mean = float(mean[0]) if s['scalar_mean'] else mean
    p.target_type_ = s['target_type_']
    p.target_classes = None if s['target_classes'] is None else decode_values(s['target_classes'])
    p.group_vocabs = {n: [decode_values(d) for d in vs] for n,vs in s.get('group_vocabs', {}).items()}
    p.encodings = {n: _dec_frame(d) for n,d in s['encodings'].items()}
    return p

def _groupby_state(p) -> dict:
    _need(p, 'defaults')
    return {'init': {'names': p.names, 'conts': p.conts, 'stats': p.stats},
            'groups': {n: _enc_frame(g, f"JoinGroupby.groups[{n!r}]") for n,g in p.groups.items()},
            'defaults': {x: encode_dict(d, f"JoinGroupby.defaults[{x!r}]") for x,d in p.defaults.items()}}

def _groupby_restore(s):
    p = JoinGroupby(**s['init'])
    p.groups = {n: _dec_frame(d) for n,d in s['groups'].items()}
    p.defaults = {x: decode_dict(d) for x,d in s['defaults'].items()}
    return p

_TABLE_DTYPES = (*_NUMPY, 'object', 'str', 'string')

def _enc_table(df:pd.DataFrame, where:str) -> dict:
    """A host frame of plain columns (a proc's last events, a side table) as typed JSON: each column's dtype and its
    values, the missing ones' positions apart (typed JSON has no missing value)."""
    cols = []
    for c in df.columns:
        s = df[c]
        miss = np.asarray(s.isna())
        dt = str(s.dtype) if str(s.dtype) in _TABLE_DTYPES else 'object'
        cols.append({'name': str(c), 'dtype': dt, 'missing': np.flatnonzero(miss).tolist(),
                     **encode_values(list(s[~miss]), f"{where}[{c!r}]")})
    return {'rows': len(df), 'columns': cols}

def _dec_table(d:dict) -> pd.DataFrame:
    "The frame `_enc_table` wrote."
    n, res = int(d['rows']), {}
    for c in d['columns']:
        if c['dtype'] not in _TABLE_DTYPES: raise ValueError(f"a column of dtype {c['dtype']!r}")
        vals, miss = decode_values(c), np.asarray(c['missing'], dtype=np.int64)
        if len(vals) + len(miss) != n: raise ValueError(f"column {c['name']!r} holds {len(vals) + len(miss)} rows")
        a = np.empty(n, dtype=object)
        keep = np.ones(n, bool)
        keep[miss] = False
        a[keep] = vals
        res[c['name']] = pd.Series(a, dtype=object if c['dtype'] == 'object' else c['dtype'])
    return pd.DataFrame(res, index=pd.RangeIndex(n))

def _history_state(p) -> dict:
    "DifferenceLag's and History's arguments, and the last events of each key they learned (None before set-up)."
    init = {'keys': p.keys, 'time': p.time, 'names': p.names}
    if isinstance(p, History): init.update(n=p.n, lags=p.lags)
    elif p.shift != 1: init['shift'] = p.shift   # a Tabular saved before shifts existed has none: 1
    return {'init': init, 'last': None if p.last is None else _enc_table(p.last, f"{type(p).__name__}.last")}

def _history_restore(cls):
    def restore(s):
        p = cls(**s['init'])
        p.last = None if s['last'] is None else _dec_table(s['last'])
        return p
    return restore

def _slice_state(p) -> dict:
    pad = {'pad': True, 'pad_value': p.pad_value} if p.pad else {}   # none in a Tabular saved before padding
    return {'names': p.names, 'start': p.start, 'stop': p.stop, **pad}
def _slice_restore(s): return ListSlice(s['names'], s['start'], s['stop'], s.get('pad', False), s.get('pad_value'))

def _bucketize_state(p) -> dict:
    _need(p, 'bins')
    return {'init': {'names': p.names, 'boundaries': p.boundaries, 'q': p.q, 'right': p.right},
            'bins': None if p.bins is None else {n: [float(v) for v in b] for n,b in p.bins.items()}}

def _bucketize_restore(s):
    p = Bucketize(**s['init'])
    p.bins = None if s['bins'] is None else {n: [float(v) for v in b] for n,b in s['bins'].items()}
    return p

def _clip_state(p) -> dict: return {'names': p.names, 'min_value': p.min_value, 'max_value': p.max_value}
def _clip_restore(s): return Clip(s['names'], s['min_value'], s['max_value'])

def _minmax_state(p) -> dict:
    "Its names, and the min and max of each (lists in the names' order: a JSON object's keys are strings), or None."
    lists = lambda d: None if d is None else [float(d[n]) for n in p.names]
    return {'names': p.names, 'mins': lists(p.mins), 'maxs': lists(p.maxs)}

def _minmax_restore(s):
    p = NormalizeMinMax(s['names'])
    if s['mins'] is not None:
        p.mins, p.maxs = (dict(zip(p.names, map(float, s[k]), strict=True)) for k in ('mins', 'maxs'))
    return p

def _join_state(p) -> dict:
    return {'on': p.on, 'cat_names': p.cat_names, 'cont_names': p.cont_names,
            'table': _enc_table(p.table, 'JoinExternal.table')}
def _join_restore(s): return JoinExternal(_dec_table(s['table']), s['on'], s['cat_names'], s['cont_names'])

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
register_saved_proc(DifferenceLag, _history_state, _history_restore(DifferenceLag))
register_saved_proc(History, _history_state, _history_restore(History))
register_saved_proc(ListSlice, _slice_state, _slice_restore)
register_saved_proc(Bucketize, _bucketize_state, _bucketize_restore)
register_saved_proc(LogOp, lambda p: {'names': p.names}, lambda s: LogOp(s['names']))
register_saved_proc(Clip, _clip_state, _clip_restore)
register_saved_proc(NormalizeMinMax, _minmax_state, _minmax_restore)
register_saved_proc(JoinExternal, _join_state, _join_restore)

def saved_state(p) -> dict:
    "`{'type', 'state'}` of proc `p`: its class's name, and its learned state as its registration gives it."
    name = f'{type(p).__module__}.{type(p).__qualname__}'
    if name not in _SAVERS:
        raise TypeError(f"proc {type(p).__name__} ({name}) has no saved form: a saved Tabular holds "
                        f"{', '.join(c.__name__ for c in saved_proc_types())} (see `register_saved_proc`)")
    return {'type': name, 'state': _SAVERS[name][1](p)}

def restore_proc(d:dict):
    "The proc `saved_state` described, made back by its class's registration (the only classes a load makes)."
    name = _saved_type(d['type'])
    if name not in _SAVERS: raise ValueError(f"proc type {d['type']!r} is not one this version can load")
    return _SAVERS[name][2](d['state'])

