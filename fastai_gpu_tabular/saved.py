"""A processed `TabularGPU` saved as plain data and loaded back without pickle. `save_tabular` (`TabularGPU.save`)
writes the packed rows (train/ and valid/ `PackedChunks` folders: `.npy` int32 files, as the streaming loader reads
them; rows/chunks.py) and `tabular.json`: the names, the split, the frame's dtypes and row index, each proc's learned
state under fastai's attribute names (typed JSON: ops/proc_state.py), and the size and sha256 of every file.
`load_tabular` (`TabularGPU.load`) checks every file against it, and rebuilds the processed Tabular, ready for
`dataloaders()`; on Linux it maps the rows files' pages (their headers are padded for that) rather than reading them."""
from __future__ import annotations

import glob
import io
import json
import os
from importlib.metadata import version
from pathlib import Path
import numpy as np
import pandas as pd
import torch
from fastai.data.block import TransformBlock
from fastai.tabular import core as fatc

from .atomic import carry, fsync_tree, replacing, temp_prefix
from .backend import frame_device, frame_of_tensors, to_backend, to_host
from .ops.proc_state import decode_dict, encode_dict, restore_proc, saved_state
from .ops.procs import LazyCategoryMap
from .progress import progress_rows
from .rows.chunks import SavedFormatError, check_header, is_part_name, load_rows, read_checked, write_blocks, write_npy
from .rows.pack import Layout, ReleasedFrame, cat_spans, packs_whole, unpack_rows

__all__ = ['SavedFormatError']

FORMAT_VERSION = 1
MANIFEST = 'tabular.json'

SavedCategoryMap = LazyCategoryMap   # a loaded vocabulary (the name that earlier pickles hold)

# --- save -------------------------------------------------------------------------------------------------------------
def _index_entry(index, path:Path, files:dict) -> dict:
    "The frame's row index: a range as its bounds, integers as `index.npy`."
    index = to_host(index)   # a cuDF frame's stays on the device
    if isinstance(index, pd.RangeIndex): return {'start': index.start, 'stop': index.stop, 'step': index.step}
    if not pd.api.types.is_integer_dtype(index.dtype) or isinstance(index, pd.MultiIndex):
        raise TypeError(f"the frame's row index holds {index.dtype} labels: a saved Tabular holds integer row labels; "
                        "call df.reset_index() before making the Tabular")
    files['index.npy'] = write_npy(path/'index.npy', np.asarray(index, dtype=np.int64))
    return {'file': 'index.npy'}

SAVED_NAMES = frozenset(('train', 'valid', MANIFEST, 'index.npy'))   # what a save writes in its folder

def _check_target(path:Path):
    "`path` can be saved into: nothing there, an empty folder, or an earlier save (which the new one replaces)."
    if path.exists() and not path.is_dir(): raise FileExistsError(f"{path} is a file, not a folder to save into")
    if path.is_dir() and any(path.iterdir()) and not (path/MANIFEST).exists():
        raise FileExistsError(f"{path} holds files and no {MANIFEST}: save into a new or empty folder")

def save_tabular(to, path, chunk_rows:int=1 << 18, progress:bool=True) -> Path:
    """Save the processed Tabular `to` in the folder `path` (see the module's docstring); `chunk_rows` rows a file.
    Writes nothing but plain data: the learned state must be of `SAVED_TYPES` (a TypeError naming the column if not).
    The rows are `to.row_blocks(chunk_rows)`: a `TabularDask`'s read from its chunks, `chunk_rows` rows in memory at a
    time, on a range index. All or nothing: an earlier save in `path` stays whole until the new one replaces it
    (`atomic.replacing`), so that a save killed or short of disk leaves it."""
    if int(chunk_rows) != chunk_rows or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    named = set(to.cat_names) | set(to.cont_names) | set(to.y_names)
    columns = [c for c in to.column_names if c in named]
    dtypes = to.released.dtypes if to.released is not None else dict(to.items.dtypes)
    for c in columns:
        d = dtypes[c]
        if c not in to.multi_hot and not (isinstance(d, np.dtype) and d.kind in 'biuf'):
            raise TypeError(f"column {c!r} holds {d} values after processing: a saved Tabular holds numbers (process "
                            "it first, with Categorify for categories)")
    procs = [saved_state(p) for p in to.procs.fs]   # before writing: a TypeError leaves nothing behind
    rows = to.row_blocks(int(chunk_rows))   # a TabularDask's read from its chunks as they are written
    path = Path(path)
    _check_target(path)
    # written beside `path`, then swapped in: `path` holds the earlier save or this one, whole, at every instant
    with replacing(path) as tmp:
        if path.is_dir(): carry(path, tmp, SAVED_NAMES)   # the folder's other files stay
        files = {}
        meta = {'format': 'fastai_gpu_tabular.saved', 'version': FORMAT_VERSION,
                'library': {'fastai_gpu_tabular': version('fastai_gpu_tabular') if _installed() else None,
                            'fastai': version('fastai')},
                'cat_names': list(to.cat_names), 'cont_names': list(to.cont_names), 'y_names': list(to.y_names),
                'multi_hot': dict(to.multi_hot), 'columns': columns,
                'dtypes': {c: 'object' if c in to.multi_hot else dtypes[c].name for c in columns},
                # the training frame's float dtypes, which a later frame is cast to (a file without them: no casts)
                'float_dtypes': encode_dict(dict(to.float_dtypes), 'float_dtypes'),
                'index': _index_entry(rows.index, tmp, files),
                'layout': rows.layout.to_json(), 'width': rows.width,
                'procs': procs}
        with progress_rows(len(to), f'saving to {path}', progress) as pb:
            meta['splits'] = {}
            for k,blocks,at in (('train', rows.train, 0), ('valid', rows.valid, to.split)):
                meta['splits'][k], entries = write_blocks(tmp/k, blocks, rows.layout, rows.width, at, pb)
                files.update({f'{k}/{f}': e for f,e in entries.items()})
        meta['files'] = files
        fsync_tree(tmp)   # every file durable before the manifest names it: a crash cannot leave it naming lost bytes
        (tmp/MANIFEST).write_text(json.dumps(meta, allow_nan=False))   # no indent: C's encoder, not Python's
    return path

def _installed() -> bool:
    try: return bool(version('fastai_gpu_tabular'))
    except Exception: return False

# --- load -------------------------------------------------------------------------------------------------------------
def _read_manifest(path:Path) -> tuple[dict, os.stat_result]:
    "The manifest of the save in `path`, and its file's identity (`os.fstat`), to tell whether a save replaced it."
    f = path/MANIFEST
    try:
        with open(f, 'rb') as fh: b, seen = fh.read(), os.fstat(fh.fileno())
    except (FileNotFoundError, NotADirectoryError):
        # where folders cannot be swapped in one step, a save cut short between its two renames left a whole one beside
        whole = [p for p in sorted(path.parent.glob(glob.escape(temp_prefix(path)) + '*')) if (p/MANIFEST).exists()]
        hint = f"; {whole[-1]} holds a whole one that a save cut short left: rename it to {path}" if whole else ''
        raise SavedFormatError(f"{f} is missing: {path} holds no saved Tabular (or its save was cut short)"
                               + hint) from None
    try: meta = json.loads(b)   # bytes: json decodes UTF-8 itself, faster than a text file
    except (ValueError, UnicodeDecodeError) as e:
        raise SavedFormatError(f"{f} is not valid JSON ({e}): altered or truncated") from None
    if not isinstance(meta, dict) or meta.get('format') != 'fastai_gpu_tabular.saved':
        raise SavedFormatError(f"{f} is not a saved Tabular's manifest")
    if meta.get('version') != FORMAT_VERSION:
        raise SavedFormatError(f"{f} is in format version {meta.get('version')!r}; this fastai_gpu_tabular reads "
                               f"version {FORMAT_VERSION}: load it with the version that saved it "
                               f"({(meta.get('library') or {}).get('fastai_gpu_tabular')})")
    return meta, seen

def _read_index(path:Path, meta:dict, verify:bool):
    ix = meta['index']
    if 'file' not in ix: return pd.RangeIndex(ix['start'], ix['stop'], ix['step'])
    if ix['file'] != 'index.npy': raise ValueError(f"an index file {ix['file']!r}")
    f = path/ix['file']
    b = read_checked(f, meta['files'][ix['file']], verify)
    fh = io.BytesIO(b)
    n = check_header(fh, f, None, '<i8')
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
    meta, seen = _read_manifest(path)
    try:
        procs = [restore_proc(d) for d in meta['procs']]
        index = _read_index(path, meta, verify)
        # names and types from the file only from these sets: nothing it says is looked up elsewhere
        if not all(dt in ('int32', 'int64', 'float32') for _,_,dt in meta['layout']): raise ValueError("a layout dtype")
        layout, width = Layout.from_json(meta['layout']), int(meta['width'])
        bad = [c for c,t in meta['dtypes'].items() if t != 'object' and np.dtype(t).kind not in 'biuf']
        if bad: raise ValueError(f"columns {bad} of no numeric dtype")
        floats = decode_dict(meta['float_dtypes']) if 'float_dtypes' in meta else {}
        bad = [c for c,t in floats.items() if t not in ('float16', 'float32', 'float64')]
        if bad: raise ValueError(f"float_dtypes of columns {bad} that are no float dtype")
        splits = [[(f'{k}/{f}', int(n)) for f,n in meta['splits'][k]] for k in ('train', 'valid')]
        bad = [f for s in splits for f,_ in s if not is_part_name(f.split('/', 1)[1])]
        if bad: raise ValueError(f"rows files {bad[:3]} not named as a save names them")
        for k in ('train', 'valid'): read_checked(path/k/'chunks.json', meta['files'][f'{k}/chunks.json'], verify)
    except SavedFormatError: raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SavedFormatError(f"{path/MANIFEST} does not describe a saved Tabular ({type(e).__name__}: {e}): "
                               "altered") from e
    n_train, total = sum(n for _,n in splits[0]), sum(n for s in splits for _,n in s)
    if total != len(index): raise SavedFormatError(f"{path/MANIFEST}: {total} rows saved, {len(index)} row labels")
    with progress_rows(total, f'loading {path}', progress) as pb:
        rows = load_rows(path, splits[0] + splits[1], meta['files'], width, verify, pb)
    try: same = os.path.samestat(seen, (path/MANIFEST).stat())
    except FileNotFoundError: same = False
    # a save swapped in meanwhile: the files read may be its, the manifest the earlier one's (which sizes can miss)
    if not same: raise SavedFormatError(f"{path} was saved over while it loaded: load it again")
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
