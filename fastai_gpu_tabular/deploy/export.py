"""Deployment: a learner as one ONNX graph from raw columns to `get_preds`' output (the procs' learned state as ONNX
ops, merged with the model), the model alone through `torch.export`, and a Triton model repository."""
from __future__ import annotations

import copy
import glob
import json
import warnings
from contextlib import contextmanager
from pathlib import Path
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from fastai.data.transforms import Categorize, EncodedMultiCategorize, MultiCategorize, Normalize, RegressionSetup
from fastai.learner import Learner
from fastai.tabular import core as fatc
from fastai.tabular.core import FillMissing
from fastcore.basics import noop

from ..atomic import carry, fsync_path, held, remove, replacing, temp_prefix
from ..backend import float_casts
from ..extras import import_extra
from ..ops.groupby import JoinGroupby
from ..ops.hashing import HashBucket, HashedCross, host_input, host_sources, host_specs
from ..ops.history import DifferenceLag, History, ListSlice
from ..ops.joins import JoinExternal
from ..ops.numeric import Bucketize, Clip, LogOp, NormalizeMinMax
from ..ops.procs import buckets_of, operand_dtype, vocab_values
from ..ops.target import TargetEncode
from ..rows.pack import cat_widths

__all__ = ['export_onnx', 'onnx_inputs', 'export_model', 'export_triton']

NA_STRING = '#na#'   # what a client sends for a missing string: ONNX string tensors cannot hold a null
_OPSET,_ML_OPSET = 20, 4   # StringSplit is opset 20; LabelEncoder with double keys is ai.onnx.ml 4
_META = 'fastai_gpu_tabular.'

@contextmanager
def _quiet_export():
    "torch's exporters warn about their internals (a deprecated pytree check, dynamic-axis renaming): not the user's."
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='.*LeafSpec.*', category=FutureWarning)
        warnings.filterwarnings('ignore', message='# The axis name', category=UserWarning)
        yield

class PredsModel(nn.Module):
    """A tabular model as `get_preds` runs it: cat codes cast to long in the graph (an int32 input, as a loader with
    `cat_dtype=torch.int32` yields, otherwise makes the dynamo export unloadable: Concat of int32 and int64), then the
    loss's activation."""
    def __init__(self, model, act=noop, has_cat=True, has_cont=True):
        super().__init__()
        self.model,self.act = model,act
        self.has_cat,self.has_cont = has_cat,has_cont
    def forward(self, *xs):
        x_cat = xs[0].long() if self.has_cat else None
        x_cont = xs[-1] if self.has_cont else None
        return self.act(self.model(x_cat, x_cont))

def _preds_model(learn, widths:list):
    """A CPU float32 copy of `learn.model` in eval mode inside `PredsModel`, and example inputs `(x_cat, x_cont)`, the
    codes as the loader serves them (its `cat_dtype`; int64, fastai's, for fastai's loaders); `widths`: the train
    set's `cat_widths`."""
    n_cat,n_cont = sum(widths),len(learn.dls.train_ds.cont_names)
    model = copy.deepcopy(learn.model).float().cpu().eval()
    act = getattr(learn.loss_func, 'activation', noop)
    xs = []
    if n_cat: xs.append(torch.zeros(2, n_cat, dtype=getattr(learn.dls.train, 'cat_dtype', torch.int64)))
    if n_cont: xs.append(torch.zeros(2, n_cont))
    xs = tuple(xs)
    return PredsModel(model, act, n_cat > 0, n_cont > 0).eval(), xs

def _target_vocab(learn):
    "A classifier's classes (the target's Categorize vocab), else None."
    to = learn.dls.train_ds
    return getattr(learn.dls, 'vocab', None) if any(isinstance(t, Categorize) for t in to.procs.fs) else None

def _input_names(xs, has_cat): return ['x_cat', 'x_cont'] if len(xs) == 2 else ['x_cat' if has_cat else 'x_cont']

def export_model(learn:Learner, path:str|Path|None=None, batch:tuple|None=None):
    """`torch.export` of `learn.model` with `get_preds`' activation, a dynamic batch dimension, and multi-hot bags as
    the masked lookup. `batch`: an example `(x_cat, x_cont, ...)` (cloned: loader batches are views of one packed
    storage, which `torch.export.save` refuses); default zeros. Saved to `path` (a .pt2) if given."""
    pm,xs = _preds_model(learn, cat_widths(learn.dls.train_ds))
    if batch is not None: xs = tuple(t.detach().cpu().clone() for t,k in zip(batch[:2], (pm.has_cat, pm.has_cont)) if k)
    dim = torch.export.Dim('batch')
    with _quiet_export(): ep = torch.export.export(pm, xs, dynamic_shapes=(tuple({0: dim} for _ in xs),))
    if path is not None: torch.export.save(ep, path)
    return ep

# --- the procs as ONNX ops ------------------------------------------------------------------------------------------

# The procs `export_onnx` puts in the graph (the hashes: on the host, see `onnx_inputs`), by class (subclasses too):
# the kind `_procs` files each under. A Tabular holds one proc of each kind, or a list of the kinds in `_MANY`.
ONNX_PROCS = {fatc.Categorify: 'cat', FillMissing: 'fill', Normalize: 'norm', HashBucket: 'hash', HashedCross: 'hash',
              TargetEncode: 'te', JoinGroupby: 'jg', JoinExternal: 'join', Bucketize: 'num', LogOp: 'num', Clip: 'num',
              NormalizeMinMax: 'num'}
_MANY = ('hash', 'te', 'jg', 'join', 'num')
# the procs whose columns come from the rows before each row (a key's history): a graph of independent rows has none
HISTORY_PROCS = (DifferenceLag, History, ListSlice)
# the target's procs, which the graph needs not: it ends at `get_preds`' output
TARGET_PROCS = (Categorize, RegressionSetup, MultiCategorize, EncodedMultiCategorize)

def _procs(to) -> dict:
    "`to`'s procs by kind (`ONNX_PROCS`); any but those and the target's is an error."
    res,other = {},[]
    hist = [type(t).__name__ for t in to.procs.fs if isinstance(t, HISTORY_PROCS)]
    if hist: raise TypeError(f"export_onnx cannot put {', '.join(hist)} in the graph: its columns come from each key's "
                             "earlier rows and the last events it learned, which a graph of independent rows does not "
                             "have (ListSlice: lists cut in the graph are not done yet). Serve such a learner with "
                             "`learn.dls.test_dl(df)` or `learn.predict(row)`, which follow the learned state")
    multi = [n for t in to.procs.fs if isinstance(t, JoinGroupby) for n in t.names if not isinstance(n, str)]
    if multi: raise TypeError(f"export_onnx cannot put JoinGroupby's key(s) {multi} of several columns in the graph: "
                              "its lookup takes one column. Group by one column (a HashedCross of them, say), or "
                              "serve with `learn.dls.test_dl(df)`")
    for t in to.procs.fs:
        kind = next((k for c,k in ONNX_PROCS.items() if isinstance(t, c)), None)
        if kind == 'te' and t.parts: res.setdefault(kind, []).extend(t.parts)   # a proc a target (`targets`)
        elif kind in _MANY: res.setdefault(kind, []).append(t)
        elif kind is not None: res[kind] = t
        elif not isinstance(t, TARGET_PROCS): other.append(t)
    if other: raise TypeError(f"export_onnx knows {', '.join(c.__name__ for c in ONNX_PROCS)} and the target's procs, "
                              f"not {[type(t).__name__ for t in other]}")
    return res

def _key_type(name, values) -> str:
    "'string', 'int64' (ints and bools) or 'double': the LabelEncoder key type of a vocabulary, or an error."
    if all(isinstance(v, str) for v in values): return 'string'   # an empty vocabulary too
    if all(isinstance(v, (bool, int, np.bool_, np.integer)) for v in values): return 'int64'
    if all(isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating)) for v in values): return 'double'
    kinds = sorted({type(v).__name__ for v in values})
    raise TypeError(f"cat column {name!r} has categories of type {kinds}: export_onnx encodes strings, integers, "
                    "floats and bools; convert the column (e.g. to str) before building the TabularGPU")

def _onnx_type(name:str) -> int:
    "ONNX's element type of a key type ('string', 'int64', 'double': see `_key_type`) or of a float dtype's name."
    from onnx import TensorProto as T
    return {'string': T.STRING, 'int64': T.INT64, 'double': T.DOUBLE, 'float64': T.DOUBLE, 'float32': T.FLOAT}[name]

class _Graph:
    """An ONNX graph under construction: `op` adds a node and returns its output's name, `const` an initializer's.
    `floats`: the training frame's float dtypes by column, which `raw` casts an input to."""
    def __init__(self, floats:dict): self.nodes,self.inits,self.inputs,self.n,self.floats = [],[],[],0,floats
    def name(self):
        self.n += 1
        return f'fgt/{self.n}'
    def const(self, a):
        from onnx import numpy_helper
        self.inits.append(numpy_helper.from_array(np.asarray(a), self.name()))
        return self.inits[-1].name
    def op(self, op_type, *ins, n_out=1, **attrs):
        from onnx import helper
        outs = [self.name() for _ in range(n_out)]
        domain = 'ai.onnx.ml' if op_type == 'LabelEncoder' else ''
        self.nodes.append(helper.make_node(op_type, list(ins), outs, domain=domain, **attrs))
        return outs if n_out > 1 else outs[0]
    def input(self, name, elem_type):
        "The graph input `name`, made once (a column TargetEncode and Categorify both read is one input)."
        from onnx import helper
        have = {i.name: i.type.tensor_type.elem_type for i in self.inputs}
        if name in have and have[name] != elem_type:
            raise TypeError(f"column {name!r} would be two ONNX inputs of different types: export_onnx reads each "
                            "column as one type")
        if name in have: return name
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, ['batch']))
        return name

    def raw(self, name, kind):
        """Input `name` of `kind`; a double whose training column was float32 as the float32 value the procs learned
        from (cast in the graph, so the input stays double: any client's float64 gets what `process` gives it)."""
        from onnx import TensorProto as T
        x = self.input(name, _onnx_type(kind))
        if kind != 'double' or self.floats.get(name) != 'float32': return x
        return self.op('Cast', self.op('Cast', x, to=T.FLOAT), to=T.DOUBLE)

    def output(self, name, blocks, elem_type, width):
        "The graph output `fgt/<name>`, `[batch, width]`: the `blocks` side by side."
        from onnx import helper
        x = self.op('Concat', *blocks, axis=1) if len(blocks) > 1 else blocks[0]
        self.nodes.append(helper.make_node('Identity', [x], [f'fgt/{name}']))
        return helper.make_tensor_value_info(f'fgt/{name}', elem_type, ['batch', width])

    def encode(self, x, vocab, kind):
        "Codes of `x` against `vocab` (fastai's: position + 1), 0 (`#na#`) for anything else."
        from onnx import TensorProto as T
        from onnx import helper
        tt = _onnx_type(kind)
        cast = {'string': str, 'int64': int, 'double': float}[kind]
        keys = [cast(v) for v in vocab] or [NA_STRING if kind == 'string' else 0]   # LabelEncoder needs one key
        vals = list(range(1, len(vocab) + 1)) or [0]
        return self.op('LabelEncoder', x, keys_tensor=helper.make_tensor('keys', tt, [len(keys)], keys),
                       values_tensor=helper.make_tensor('values', T.INT64, [len(vals)], vals),
                       default_tensor=helper.make_tensor('default', T.INT64, [1], [0]))

    def bag(self, x, vocab, kind, sep, width, empty_is_element):
        """A multi-hot string column: split on `sep`, encode, pad with -1 or cut to `width` slots. Python splits '' into
        [''] (one element), ONNX's StringSplit into none: `empty_is_element` restores Python's count."""
        y,z = self.op('StringSplit', x, n_out=2, delimiter=sep)
        if empty_is_element: z = self.op('Max', z, self.const(np.int64(1)))
        codes = self.encode(y, vocab, kind)
        # padding past the split's own columns: the code of '' (an element when the row is '')
        empty = vocab.index('') + 1 if '' in vocab else 0
        codes = self.op('Pad', codes, self.const(np.array([0, 0, 0, width], np.int64)), self.const(np.int64(empty)))
        codes = self.op('Slice', codes, self.const(np.array([0], np.int64)), self.const(np.array([width], np.int64)),
                        self.const(np.array([1], np.int64)))
        keep = self.op('Less', self.const(np.arange(width, dtype=np.int64)), self.column(z))
        return self.op('Where', keep, codes, self.const(np.int64(-1)))

    def target(self, x, enc, kind, mean):
        """TargetEncode's value (double) of `x` from `enc` (a category's value by category, a missing category's last
        if seen): the missing one's for a missing input ('#na#', the int64 minimum, NaN), `mean` for anything else."""
        from onnx import TensorProto as T
        from onnx import helper
        nan = len(enc) > 0 and pd.isna(enc.index[-1])
        missing = float(enc.iloc[-1]) if nan else float(mean)
        cast = {'string': str, 'int64': int, 'double': float}[kind]
        keys,vals = [cast(v) for v in enc.index[:len(enc) - nan]], [float(v) for v in enc.iloc[:len(enc) - nan]]
        na_key = {'string': NA_STRING, 'int64': int(np.iinfo(np.int64).min)}.get(kind)   # what onnx_inputs sends
        if na_key is not None and na_key not in keys: keys, vals = [*keys, na_key], [*vals, missing]
        if not keys: keys, vals = [NA_STRING if kind == 'string' else 0], [float(mean)]   # LabelEncoder needs one key
        tt = _onnx_type(kind)
        y = self.op('LabelEncoder', x, keys_tensor=helper.make_tensor('keys', tt, [len(keys)], keys),
                    values_tensor=helper.make_tensor('values', T.DOUBLE, [len(vals)], vals),
                    default_tensor=helper.make_tensor('default', T.DOUBLE, [1], [float(mean)]))
        return self.op('Where', self.op('IsNaN', x), self.const(np.float64(missing)), y) if kind == 'double' else y

    def column(self, x): return self.op('Unsqueeze', x, self.const(np.array([1], np.int64)))

def _joined_values(jg, s, c) -> tuple:
    """`(values, default)` of JoinGroupby's column `c` (of cat column `s`): its value by category, the missing
    category's last, a category with no values given the default, as its encodes looks them up."""
    x,stat = c[len(s) + 1:].rsplit('_', 1)
    default = float(jg.defaults[x][stat])
    v = jg.groups[s][c]
    na = np.asarray(pd.isna(v.index))
    return pd.concat([v[~na], v[na]]).fillna(default), default

def _bag_sep(to, name, list_sep) -> tuple:
    "`(separator, empty_is_element)` of a multi-hot column: its own for strings, `list_sep` for list columns."
    sep = to.multi_hot[name]
    return (sep, True) if sep is not None else (list_sep, False)

# --- one function per proc kind: each adds its ops to `g`, and its inputs to `cols` ---------------------------------
def _target_encoded(g, te, s, i, cols):
    "TargetEncode's `i`-th column of cat column `s`: the column's raw values through a LabelEncoder to doubles."
    enc = te.encodings[s].iloc[:, i]
    kind = _key_type(s, [v for v in enc.index if not pd.isna(v)])
    cols.setdefault(s, {'type': kind, 'kind': 'cat'})
    return g.target(g.raw(s, kind), enc, kind, np.atleast_1d(te.target_mean)[i])

def _grouped(g, jg, s, n, cont_names, cols):
    "JoinGroupby's column `n` (of column `s`): the same lookup, default the cont's statistic over all training rows."
    enc,default = _joined_values(jg, s, n)
    # a cont grouped by as a category is one double input
    kind = 'double' if s in cont_names else _key_type(s, [v for v in enc.index if not pd.isna(v)])
    cols.setdefault(s, {'type': kind, 'kind': 'cat'})
    return g.target(g.raw(s, kind), enc, kind, default)

def _filled(g, fill, n, x, dt) -> tuple:
    "FillMissing of cont `n` (`x`, of dtype `dt`): the flag from IsNaN (int64 codes), the fill by Where; `(x, flag)`."
    from onnx import TensorProto as T
    isna = g.op('IsNaN', x)
    flag = g.op('Cast', isna, to=T.INT64)
    return g.op('Where', isna, g.const(dt.type(fill.na_dict[n])), x), flag

def _normalized(g, norm, n, x, dt, norm_dt):
    """Normalize of cont `n` (`x`, of dtype `dt`), in the dtypes fastai's frame-wide `(conts - means) / stds` computes
    in; `norm_dt`: `operand_dtype` of its means and of its stds."""
    for op,v,vt in (('Sub', norm.means[n], norm_dt[0]), ('Div', norm.stds[n], norm_dt[1])):
        t = np.result_type(dt, vt)
        if t != dt: x, dt = g.op('Cast', x, to=_onnx_type(t.name)), t
        x = g.op(op, x, g.const(t.type(vt.type(v))))
    return x

def _multi_hot(g, to, n, vocab, width, list_sep, cols):
    "A multi-hot column's codes: its string input split on its separator, encoded, in `width` slots padded with -1."
    from onnx import TensorProto as T
    sep,empty = _bag_sep(to, n, list_sep)
    if _key_type(n, vocab) == 'double':
        raise TypeError(f"multi-hot column {n!r} holds floats: export_onnx encodes strings and ints there")
    bad = [v for v in vocab if sep in str(v)]
    if bad: raise ValueError(f"multi-hot column {n!r} has elements containing the separator {sep!r}, e.g. "
                             f"{bad[:3]}: pass another `list_sep`")
    cols[n] = {'type': 'string', 'kind': 'multi_hot', 'sep': sep, 'lists': not empty}
    return g.bag(g.input(n, T.STRING), [str(v) for v in vocab], 'string', sep, width, empty)

def _categorified(g, cat, n, x, vocab, kind, made, cols):
    """Categorify's codes of `x` (column `n`); with `num_buckets`, where the vocabulary gives 0, the bucket code of an
    input `<n>#bucket` that `onnx_inputs` computes on the host (`made`: `host_specs` of the hashing procs)."""
    from onnx import TensorProto as T
    code = g.encode(x, vocab, kind)
    if not buckets_of(cat, n): return code
    b = g.input(f'{n}#bucket', T.INT64)
    oov = {'oov_of': n, 'offset': len(vocab) + 1, 'buckets': buckets_of(cat, n), 'seed': cat.seed}
    cols[b] = {'type': 'int64', 'kind': 'oov', 'host': oov | ({'made': made[n]} if n in made else {})}
    return g.op('Where', g.op('Equal', code, g.const(np.int64(0))), b, code)

def _cont_input(g, n, cols) -> tuple:
    "`(value, dtype)` of cont `n`'s double input, as the procs see it: cast to float32 if the training frame's was."
    from onnx import TensorProto as T
    x = g.input(n, T.DOUBLE)
    cols[n] = {'type': 'double', 'kind': 'cont'}
    if g.floats.get(n) == 'float32': return g.op('Cast', x, to=T.FLOAT), np.dtype('float32')
    return x, np.dtype('float64')

def _joined_key(g, je, cols) -> tuple:
    "`(input, key type)` of JoinExternal's key column, a cat input of the graph."
    kind = _key_type(je.on, list(je.table[je.on]))
    cols.setdefault(je.on, {'type': kind, 'kind': 'cat'})
    return g.raw(je.on, kind), kind

def _joined_cont(g, je, c, cols):
    "JoinExternal's cont `c`: the key through a LabelEncoder to the table's doubles, NaN for a key it lacks."
    x, kind = _joined_key(g, je, cols)
    return g.target(x, pd.Series(je.table[c].to_numpy(), index=pd.Index(je.table[je.on])), kind, np.nan)

def _joined_cat(g, je, n, vocab, cols):
    "JoinExternal's cat `n` as Categorify's codes: the key through a LabelEncoder to its table value's code, else 0."
    from onnx import TensorProto as T
    from onnx import helper
    x, kind = _joined_key(g, je, cols)
    at = {v: i + 1 for i,v in enumerate(vocab)}
    codes = [0 if pd.isna(v) else at.get(v, 0) for v in je.table[n]]
    cast = {'string': str, 'int64': int, 'double': float}[kind]
    keys = [cast(k) for k in je.table[je.on]] or [NA_STRING if kind == 'string' else 0]
    return g.op('LabelEncoder', x, keys_tensor=helper.make_tensor('keys', _onnx_type(kind), [len(keys)], keys),
                values_tensor=helper.make_tensor('values', T.INT64, [len(keys)], codes or [0]),
                default_tensor=helper.make_tensor('default', T.INT64, [1], [0]))

def _bucket(g, x, dt, bins, right):
    "Bucketize's bucket (int64) of `x`: how many of `bins` it passes (`np.digitize`); int64's minimum for NaN."
    from onnx import TensorProto as T
    nan = g.op('IsNaN', x)
    if not len(bins): idx = g.op('Mul', g.op('Cast', nan, to=T.INT64), g.const(np.int64(0)))
    else:
        passed = g.op('Greater' if right else 'GreaterOrEqual', g.column(x), g.const(np.asarray([bins], dt)))
        idx = g.op('ReduceSum', g.op('Cast', passed, to=T.INT64), g.const(np.array([1], np.int64)), keepdims=0)
    return g.op('Where', nan, g.const(np.int64(np.iinfo(np.int64).min)), idx)

def _numbers(g, to, cols) -> tuple:
    """`(conts, buckets)`: the conts JoinExternal makes and LogOp and Clip rewrite, `{name: (value, dtype)}` after all
    of them (in the procs' order, before FillMissing and Normalize); Bucketize's cat columns as their int64 buckets,
    each of its cont as it stood when Bucketize ran."""
    from onnx import TensorProto as T
    cur, buckets = {}, {}
    def value(n):
        if n not in cur: cur[n] = _cont_input(g, n, cols)
        return cur[n]
    for p in to.procs.fs:
        if isinstance(p, JoinExternal): cur.update({c: (_joined_cont(g, p, c, cols), np.dtype('float64'))
                                                    for c in p.cont_names})
        elif isinstance(p, LogOp):   # log1p in float64, as the frame computes it (ONNX has Log: of 1 + x)
            for n in p.names:
                x, dt = value(n)
                x = x if dt == np.float64 else g.op('Cast', x, to=T.DOUBLE)
                cur[n] = g.op('Log', g.op('Add', x, g.const(np.float64(1)))), np.dtype('float64')
        elif isinstance(p, Clip):   # NaN stays NaN: it is neither below nor above a bound
            for n in p.names:
                x, dt = value(n)
                for v,op in ((p.min_value, 'Less'), (p.max_value, 'Greater')):
                    if v is not None: x = g.op('Where', g.op(op, x, g.const(dt.type(v))), g.const(dt.type(v)), x)
                cur[n] = x, dt
        elif isinstance(p, NormalizeMinMax):   # (x - min) / range in float64, as the frame computes it
            for n in p.names:
                x, dt = value(n)
                x = x if dt == np.float64 else g.op('Cast', x, to=T.DOUBLE)
                lo, hi = p.mins[n], p.maxs[n]
                x = g.op('Div', g.op('Sub', x, g.const(np.float64(lo))), g.const(np.float64((hi - lo) or 1.0)))
                cur[n] = x, np.dtype('float64')
        elif isinstance(p, Bucketize):
            buckets.update({c: _bucket(g, *value(n), p.bins[n], p.closed_right) for n,c in zip(p.names, p.made_names)})
    return cur, buckets

def _conts(g, to, procs, cols, numbers) -> tuple:
    """The conts as the packed rows hold them (float32 `[batch, 1]` blocks) from their inputs through TargetEncode,
    JoinGroupby or `numbers` (`_numbers`' conts), FillMissing and Normalize; and FillMissing's `_na` flags by name, if
    it adds them."""
    from onnx import TensorProto as T
    fill,norm = procs.get('fill'),procs.get('norm')
    grouped = list({s: te.groups[s] for te in procs.get('te', []) for s in te.encodings if s in te.groups}.values())
    if grouped: raise TypeError(f"export_onnx cannot put TargetEncode of the column group(s) {grouped} in the graph: "
                                "a combination's code needs each column's vocabulary lookup and arithmetic that is not "
                                "done yet; serve it with `learn.dls.test_dl(df)`, or encode a HashedCross of them")
    te_out = {c: (te, s, i) for te in procs.get('te', []) for s in te.encodings for i,c in enumerate(te.out_names(s))}
    jg_out = {c: (p, s) for p in procs.get('jg', []) for s,gr in p.groups.items() for c in gr.columns}
    na_dict = fill.na_dict if fill is not None else {}
    norm_dt = (operand_dtype(norm.means), operand_dtype(norm.stds)) if norm is not None else None
    conts,flags = [],{}
    for n in to.cont_names:
        dt = np.dtype('float64')   # the dtype the procs compute this cont in (ints are float64 against the stats)
        if n in te_out: x = _target_encoded(g, *te_out[n], cols)
        elif n in jg_out: x = _grouped(g, *jg_out[n], n, to.cont_names, cols)
        else: x, dt = numbers[n] if n in numbers else _cont_input(g, n, cols)
        if n in na_dict:
            x,flag = _filled(g, fill, n, x, dt)
            if fill.add_col: flags[f'{n}_na'] = flag
        if norm is not None: x = _normalized(g, norm, n, x, dt, norm_dt)
        conts.append(g.column(g.op('Cast', x, to=T.FLOAT)))
    return conts, flags

def _cats(g, to, procs, widths, flags, buckets, list_sep, cols) -> list:
    """The cats' codes as the packed rows hold them (int64 blocks of `widths` columns); `flags`: FillMissing's,
    `buckets`: Bucketize's (`_numbers`)."""
    cat = procs.get('cat')
    if cat is None and len(to.cat_names):
        raise TypeError("export_onnx encodes cat columns with Categorify's vocabularies: add Categorify to procs")
    mh,made = getattr(to, 'multi_hot', {}),host_specs(procs.get('hash', []))
    joined = {c: p for p in procs.get('join', []) for c in p.cat_names}
    bad = [n for n in [*joined, *buckets] if buckets_of(cat, n) or n in made or n in mh]
    if bad: raise TypeError(f"export_onnx: column(s) {bad}, made in the graph (JoinExternal, Bucketize), are hashed "
                            "on the host (Categorify(num_buckets), HashBucket, HashedCross), which it cannot do")
    cats = []
    for n,w in zip(to.cat_names, widths):
        vocab = list(vocab_values(cat, n))
        if n in mh:
            cats.append(_multi_hot(g, to, n, vocab, w, list_sep, cols))
            continue
        if n in joined:
            cats.append(g.column(_joined_cat(g, joined[n], n, vocab, cols)))
            continue
        kind = _key_type(n, vocab)
        if n in flags: x = flags[n]
        elif n in buckets: x = buckets[n]
        else:
            x = g.raw(n, kind)
            cols[n] = {'type': kind, 'kind': 'cat'}
            if n in made: cols[n]['host'] = made[n]   # hashed or crossed: `onnx_inputs` makes it from raw columns
        cats.append(g.column(_categorified(g, cat, n, x, vocab, kind, made, cols)))
    return cats

def _procs_graph(to, widths:list, list_sep='|'):
    """The procs of `to` as an ONNX graph: one input per raw column (strings, int64 or double), outputs `x_cat` (int64
    codes, multi-hot columns as -1-padded slots; `widths` columns a cat) and `x_cont` (float32), as the packed rows
    hold them. Returns `(graph, columns)`, `columns` being {input: {'type', 'kind'[, 'sep']}}."""
    from onnx import TensorProto as T
    from onnx import helper
    procs,cols = _procs(to),{}
    g = _Graph(getattr(to, 'float_dtypes', {}))   # the training frame's: fastai's TabularPandas keeps none
    conts,buckets = _numbers(g, to, cols)
    conts,flags = _conts(g, to, procs, cols, conts)
    cats = _cats(g, to, procs, widths, flags, buckets, list_sep, cols)
    outs = [g.output(name, blocks, tt, w) for name,blocks,tt,w in
            (('x_cat', cats, T.INT64, sum(widths)), ('x_cont', conts, T.FLOAT, len(to.cont_names))) if blocks]
    return helper.make_graph(g.nodes, 'fastai_gpu_tabular_procs', g.inputs, outs, initializer=g.inits), cols

def _rename_output(model, old, new):
    for node in model.graph.node: node.output[:] = [new if o == old else o for o in node.output]
    for o in model.graph.output:
        if o.name == old: o.name = new

def export_onnx(learn:Learner, path:str|Path, list_sep:str='|', procs:bool=True, opset:int=_OPSET) -> Path:
    """Write `learn` as one ONNX file from raw columns to predictions: the procs' learned state as ONNX ops (Categorify
    -> LabelEncoder, unseen -> 0 '#na#'; a multi-hot string column -> StringSplit, padded with -1 or cut to its slots;
    FillMissing -> IsNaN/Where and the `_na` flag; Normalize -> Sub/Div; TargetEncode -> LabelEncoder to doubles, the
    missing category's value for a missing input, the target's mean for an unseen one; JoinGroupby likewise, the cont's
    statistic over all training rows for an unseen category; JoinExternal -> a LabelEncoder from the key; Bucketize ->
    comparisons against its edges; LogOp -> Log of 1 + x; Clip -> Where; NormalizeMinMax -> Sub/Div; DifferenceLag,
    History and ListSlice are refused: their columns come from each key's earlier rows) merged with the model, whose
    multi-hot bags export as a masked lookup. One input per raw column: strings (a missing one as '#na#'), int64
    (integer and bool categories), double (continuous and float categories; NaN is missing; one that was float32 in
    training is cast to float32 first, as `process` casts it, and the procs compute in the dtypes the frame did); a
    list column as its elements joined by `list_sep`. The output `preds` is what `get_preds` returns: probabilities,
    or the (y_range-scaled) values.
    Standard ONNX has no MurmurHash3: a HashBucket or HashedCross column is an input holding what those procs make (its
    bucket labels, or the cross's text), and a `Categorify(num_buckets)` column has a second input `<name>#bucket`
    with each row's bucket code, which `onnx_inputs` computes on the host from the raw columns.
    `onnx_inputs(df, path)` makes the inputs from a frame. `procs=False`: the model alone, on the loader's batches
    (`x_cat` as the loader serves it, int64 or with `cat_dtype=torch.int32` int32; `x_cont` float32). Returns
    `path`."""
    onnx = import_extra('onnx', 'onnx', 'export_onnx')
    import_extra('onnxscript', 'onnx', 'export_onnx')   # torch's dynamo exporter writes the graph with it
    from onnx import helper
    to = learn.dls.train_ds
    widths = cat_widths(to)
    pm,xs = _preds_model(learn, widths)
    names = _input_names(xs, pm.has_cat)
    if procs:
        bad = [n for n in list(to.cat_names) + list(to.cont_names) if not isinstance(n, str)]
        if bad: raise TypeError(f"export_onnx names each ONNX input after its column: names {bad} must be strings")
        graph,cols = _procs_graph(to, widths, list_sep)
        if 'preds' in cols: raise ValueError("a column named 'preds' would clash with the ONNX output: rename it")
        xs = tuple(x.long() if n == 'x_cat' else x for n,x in zip(names, xs))   # what the procs graph gives
    dim = torch.export.Dim('batch')
    with _quiet_export():
        prog = torch.onnx.export(pm, xs, input_names=names, output_names=['preds'], opset_version=opset, dynamo=True,
                                 dynamic_shapes=(tuple({0: dim} for _ in xs),), external_data=False, verbose=False)
    model = prog.model_proto
    vocab = _target_vocab(learn)
    meta = {'y_names': list(to.y_names), 'vocab': None if vocab is None else [str(v) for v in vocab]}
    if procs:
        ops = {o.domain: o.version for o in model.opset_import}
        pre = helper.make_model(graph, ir_version=model.ir_version, opset_imports=[
            helper.make_opsetid('', ops.get('', opset)), helper.make_opsetid('ai.onnx.ml', _ML_OPSET)])
        model = onnx.compose.merge_models(pre, model, io_map=[(f'fgt/{n}', n) for n in names], prefix2='model/')
        _rename_output(model, 'model/preds', 'preds')
        # the training frame's float dtypes, which `onnx_inputs` casts the columns it hashes on the host to
        meta.update(columns=cols, na_string=NA_STRING, float_dtypes=dict(getattr(to, 'float_dtypes', {})))
    helper.set_model_props(model, {_META + k: json.dumps(v) for k,v in meta.items()})
    onnx.checker.check_model(model)
    _write_onnx(onnx, model, Path(path))
    return Path(path)

_EXTERNAL_BYTES = 2**31 - 2**26   # protobuf's 2 GiB limit, less room for the graph: beyond, the weights go beside

def _write_onnx(onnx, model, path:Path):
    """Write `model` at `path` all or nothing (`atomic.replacing`: a temporary file beside it, fsync, one rename). A
    model over protobuf's 2 GiB keeps its weights in a file of its own beside it, `<name>.<token>.data` (the token of
    its temporary file), written before the rename: the file at `path` always names weights that are there. Weights no
    model names (an earlier export's, one cut short) are removed after."""
    big = sum(t.ByteSize() for t in model.graph.initializer) > _EXTERNAL_BYTES
    weights = None
    try:
        with replacing(path, folder=False) as tmp:
            if big:
                weights = path.parent/_weights_name(path, tmp)
                onnx.save_model(model, str(tmp), save_as_external_data=True, location=weights.name)
                fsync_path(weights)
            else: onnx.save_model(model, str(tmp))
    except BaseException:
        if weights is not None: remove(weights)
        raise
    _clear_weights(onnx, path)

def _weights_name(path:Path, tmp:Path) -> str:
    "The weights file of the model written at `tmp` (see `atomic.replacing`) to go to `path`."
    return f'{path.name}.{tmp.name[len(temp_prefix(path)):]}.data'

def _clear_weights(onnx, path:Path):
    """Remove the weights files beside `path` (`_weights_name`) that the model at `path` does not name, but those of a
    write in progress (its temporary file held: `atomic.held`)."""
    # a write's temporary file is held while the write lives: then its weights are left alone
    tmp = lambda f: path.parent/(temp_prefix(path) + f.name[len(path.name) + 1:-len('.data')])
    done = [f for f in path.parent.glob(glob.escape(path.name) + '.*.data') if not held(tmp(f))]
    if not done: return
    # read after: a write that was in progress above has renamed its model to `path` by now, naming its weights
    try: inits = onnx.load(str(path), load_external_data=False).graph.initializer
    except Exception: inits = []   # no model there
    named = {e.value for t in inits for e in t.external_data if e.key == 'location'}
    for f in done:
        if f.name not in named: remove(f)

# --- the client side ----------------------------------------------------------------------------------------------
def _session(model):
    ort = import_extra('onnxruntime', 'onnx', 'onnx_inputs')
    if isinstance(model, ort.InferenceSession): return model
    return ort.InferenceSession(str(model), providers=['CPUExecutionProvider'])

def onnx_inputs(df:pd.DataFrame, model) -> dict:
    """The inputs of an `export_onnx` file (a path or an `onnxruntime.InferenceSession`) from a pandas frame of raw
    rows, as a client would make them: missing strings -> '#na#', list columns joined, bools and ints as int64 (a
    missing one -> an integer no vocabulary holds), numbers as float64 with NaN (the graph casts a column that was
    float32 in training to float32; the inputs hashed here are made from columns cast so)."""
    meta = {k[len(_META):]: json.loads(v) for k,v in _session(model).get_modelmeta().custom_metadata_map.items()
            if k.startswith(_META)}
    res = {}
    for n,c in meta['columns'].items():
        if 'host' in c:   # hashed on the host (see `export_onnx`), from the values the procs learned from
            src = list(dict.fromkeys(host_sources(c['host'])))
            bad = [o for o in src if o not in df.columns]
            if bad: raise KeyError(f"column(s) {bad}, which the ONNX model's input {n!r} is made from, are not in "
                                   "the frame")
            src = df[src]
            res[n] = host_input(src.astype(float_casts(src, meta.get('float_dtypes', {}))), c['host'], n,
                                meta['na_string'])
            continue
        if n not in df.columns: raise KeyError(f"column {n!r}, an input of the ONNX model, is not in the frame")
        col = df[n]
        if c['type'] == 'string':
            # pandas fills the missing values in its own copy: without any, pandas 3 gives a read-only view
            v = col.to_numpy(dtype=object, na_value=meta['na_string'])
            if c.get('lists'):
                v = np.array([c['sep'].join(map(str, o)) if isinstance(o, (list, tuple, np.ndarray)) else o for o in v],
                             dtype=object)
            bad = next((o for o in v if not isinstance(o, str)), None)
            if bad is not None: raise TypeError(f"column {n!r} is a string input of the ONNX model but holds "
                                                f"non-strings, e.g. {bad!r}")
            res[n] = v
        elif c['type'] == 'int64':
            try: v = col.astype('Int64')
            except (TypeError, ValueError) as e:
                raise TypeError(f"column {n!r} is an int64 input of the ONNX model: {e}") from None
            res[n] = v.fillna(np.iinfo(np.int64).min).to_numpy(np.int64)
        else: res[n] = pd.to_numeric(col).to_numpy(dtype=np.float64, na_value=np.nan)
    return res

# --- Triton -------------------------------------------------------------------------------------------------------
def _triton_type(vi) -> str:
    "Triton's data type of an ONNX input or output."
    from onnx import TensorProto as T
    return {T.STRING: 'TYPE_STRING', T.INT64: 'TYPE_INT64', T.DOUBLE: 'TYPE_FP64', T.INT32: 'TYPE_INT32',
            T.FLOAT: 'TYPE_FP32'}[vi.type.tensor_type.elem_type]

def export_triton(learn:Learner, repo:str|Path, name:str='fastai_tabular', version:int=1, max_batch_size:int=65536,
                  **kwargs) -> Path:
    """A model repository for Triton's onnxruntime backend: `repo/name/config.pbtxt`, `repo/name/<version>/model.onnx`
    (`export_onnx`'s file; `kwargs` go there) and, for a classifier, `labels.txt` (the target's vocab, for Triton's
    classification extension). Each input is a batched column: `dims: [1]` reshaped to the graph's 1-D input, strings
    as TYPE_STRING; the output `preds` is `[batch, n_out]`. Returns the model's folder."""
    onnx = import_extra('onnx', 'onnx', 'export_triton')
    d = Path(repo)/name
    # made beside `d`, with the other versions it holds (hard links), then swapped in: Triton, or a copy of the
    # repository, never finds a model folder half written
    with replacing(d) as tmp:
        if d.is_dir(): carry(d, tmp, {'config.pbtxt', 'labels.txt', str(version)})
        _triton_folder(learn, tmp, name, version, max_batch_size, onnx, **kwargs)
    return d

def _triton_folder(learn, d:Path, name:str, version:int, max_batch_size:int, onnx, **kwargs):
    "Write `export_triton`'s files into the folder `d`."
    (d/str(version)).mkdir()
    path = export_onnx(learn, d/str(version)/'model.onnx', **kwargs)
    g = onnx.load(str(path), load_external_data=False).graph
    out = g.output[0]
    n_out = out.type.tensor_type.shape.dim[1].dim_value
    vocab = _target_vocab(learn)
    if vocab is not None: (d/'labels.txt').write_text(''.join(f'{v}\n' for v in vocab))
    batched = lambda vi: len(vi.type.tensor_type.shape.dim) == 1   # a raw column: [batch]
    ins = ',\n'.join(f'  {{ name: {json.dumps(i.name)} data_type: {_triton_type(i)} '
                     + ('dims: [ 1 ] reshape: { shape: [ ] } }' if batched(i) else
                        f'dims: [ {i.type.tensor_type.shape.dim[1].dim_value} ] }}') for i in g.input)
    label = ' label_filename: "labels.txt"' if vocab is not None else ''
    (d/'config.pbtxt').write_text(f'''name: {json.dumps(name)}
backend: "onnxruntime"
max_batch_size: {max_batch_size}
input [
{ins}
]
output [
  {{ name: {json.dumps(out.name)} data_type: {_triton_type(out)} dims: [ {n_out} ]{label} }}
]
dynamic_batching {{ }}
''')
