"""`DifferenceLag` and `History` on a Dask-backed Tabular. A key's rows are brought together by Dask's own shuffle (on
the key columns: no sort of the frame); each shuffled partition's features are then the in-memory procs' (history.py)
of its rows, ties broken by the Tabular's order (training rows first, then by position, as `TabularGPU` orders them),
so they are the in-memory ones bit for bit. They go to one Arrow IPC file per shuffled partition, a record batch per
partition of the frame, and are read back a partition at a time when the rows are packed: each partition reads its
batch of every file and puts each row's values at its place.

One pass (a Dask compute, the shuffle inside it) a proc, in its encodes. It also gives, with no pass more: the state
the set-up object learns (each key's last events: every key is in one shuffled partition), the lags' missing counts
(FillMissing's facts), the lists' elements of the training rows and their lengths (Categorify's vocabulary and bag
width), and the lags of the training rows for the held training conts (`DaskScan.train`), so that FillMissing and
Normalize learn from them in memory."""
from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
import numpy as np
import pandas as pd

from ..backend import array_module, frame_like, lists_like, series_like, sorted_uniques, to_host
from ..ops.history import DifferenceLag, History, sort_state
from ..ops.procs import register_proc
from ..splits import valid_mask
from .scan import CacheDir, ColumnValues, ContFacts
from .shipping import ship, unshipped
from .stats import compute, delayed, replace_columns

__all__ = []

_ROW, _VALID = '__fgt_row__', '__fgt_valid__'   # each row's position in the frame, and whether it validates

def _with_rows(part, starts:np.ndarray, split, on, partition_info=None):
    "A partition's columns, with each row's position in the frame (`starts`: the partitions' first) and validity."
    i = partition_info['number'] if partition_info else 0   # Dask's meta: an empty partition, no number
    valid = (np.zeros(len(part), bool) if split is None else
             to_host(valid_mask(part[split], on)).to_numpy(dtype=bool, na_value=False))
    return part.assign(**{_ROW: starts[i] + np.arange(len(part), dtype=np.int64), _VALID: valid})

def _features(proc, part, prefix, learn:bool, total:int) -> tuple:
    """`(columns, lists, last)` of `proc` for a shuffled partition: {lag column: host float64 values}, {list column:
    (values, lengths)}, each key's last events if `learn`; ties by the Tabular's order (training rows first)."""
    rows, valid = to_host(part[_ROW]).to_numpy(), to_host(part[_VALID]).to_numpy()
    xp = array_module(part[_ROW])
    ties = xp.asarray(valid.astype(np.int64) * total + rows)
    if isinstance(proc, DifferenceLag):
        res, last = proc.lags(part, prefix, ties, learn)
        return {c: to_host(res[c]).to_numpy('f8') for c in proc.made_names}, {}, last
    values, lens, lags, last = proc.history(part, prefix, ties, learn)
    cols = {} if lags is None else {c: to_host(lags[c]).to_numpy('f8') for c in proc.lag_names}
    return cols, {c: (values[c], lens) for c in proc.list_names}, last

def _list_array(values, lens):
    "An Arrow list array of rows with `lens` of `values`, as `lists_like` builds one."
    import pyarrow as pa
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values, from_pandas=True))

def _features_part(part, proc, prefix, learn:bool, path:str, starts:np.ndarray) -> dict:
    """A shuffled partition's features, written to the Arrow file `path` (a record batch per partition of the frame: its
    rows' positions, validity and features), and what the host keeps: the state (if `learn`), each lag's missing
    values (training rows, all rows), each list column's training elements' counts and its lengths' histogram."""
    import pyarrow as pa
    proc, prefix = unshipped(proc), unshipped(prefix)
    cols, lists, last = _features(proc, part, prefix, learn, int(starts[-1]))
    rows, valid = to_host(part[_ROW]).to_numpy(), to_host(part[_VALID]).to_numpy()
    res = {'last': last, 'nan': {c: (int(np.isnan(v[~valid]).sum()), int(np.isnan(v).sum())) for c,v in cols.items()},
           'elems': {}, 'hist': {}}
    arrays = {_ROW: pa.array(rows), _VALID: pa.array(valid), **{c: pa.array(v) for c,v in cols.items()}}
    for c,(v,lens) in lists.items():
        arrays[c] = _list_array(v, lens)
        train = np.repeat(~valid, lens)
        e = pd.Series(v[train])
        res['elems'][c] = (e.value_counts(dropna=True), bool(e.isna().any()))
        res['hist'][c] = np.bincount(lens)
    # the rows of each partition of the frame together, in the order they came
    of = np.searchsorted(starts, rows, side='right') - 1
    order = np.argsort(of, kind='stable')
    counts = np.bincount(of, minlength=len(starts) - 1)
    batch = pa.RecordBatch.from_pydict({k: a.take(pa.array(order)) for k,a in arrays.items()})
    with pa.OSFile(path, 'wb') as f, pa.ipc.new_file(f, batch.schema) as w:
        at = 0
        for k in counts:   # a record batch each, empty ones too (`write_table` writes none for an empty slice, and
            w.write_batch(batch.slice(at, int(k)))   # the batches would stop lining up): batch i is partition i's
            at += int(k)
    return res

class Features:
    """The features a shuffled pass wrote (`files`: one a shuffled partition), read back by the frame's partitions:
    partition i takes batch i of each file, and each row's values go to its place (`starts`: the partitions' first
    rows' positions). `lists`: the list columns, `floats`: the float64 ones. Its folder goes with it."""
    def __init__(self, folder:CacheDir, files:list, starts:np.ndarray, floats:list, lists:list):
        self.folder, self.files, self.starts, self.floats, self.lists = folder, files, starts, floats, lists

    def table(self, i:int):
        "Partition i's rows of every file, in their rows' order."
        import pyarrow as pa
        tables = []
        for f in self.files:
            with pa.memory_map(f) as m: tables.append(pa.Table.from_batches([pa.ipc.open_file(m).get_batch(i)]))
        t = pa.concat_tables(tables, promote_options='permissive')   # a list of no element has no element type
        n = len(t)
        place = np.empty(n, np.int64)
        place[t[_ROW].to_numpy() - self.starts[i]] = np.arange(n)   # each row's place: its position in the partition
        return t.take(pa.array(place))

    def part(self, part, i:int):
        "The features of partition `i` of the frame (`part`: one of its columns), on its index and backend."
        t = self.table(i)
        res = {c: series_like(part, t[c].to_numpy(), name=c) for c in self.floats}
        for c in self.lists:
            a = t[c].combine_chunks()
            res[c] = lists_like(part, a.flatten().to_numpy(zero_copy_only=False), a.value_lengths().to_numpy(), c)
        return frame_like(part, res, columns=self.floats + self.lists)

    def empty(self, part):
        "The features' columns of no row (Dask's meta): float64 lags, lists as objects."
        res = {c: series_like(part, np.zeros(0, 'f8'), name=c) for c in self.floats}
        res.update({c: series_like(part, np.zeros(0, dtype=object), name=c) for c in self.lists})
        return frame_like(part, res, columns=self.floats + self.lists)

    def training(self, names:list, n_parts:int) -> pd.DataFrame:
        "Columns `names` (floats) of the training rows of every partition, in order: as the held training conts."
        parts = []
        for i in range(n_parts):
            t = self.table(i)
            keep = ~t[_VALID].to_numpy(zero_copy_only=False)
            parts.append(pd.DataFrame({c: t[c].to_numpy()[keep] for c in names}))
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({c: [] for c in names})

def _read_part(part, feats, partition_info=None):
    "A partition's features from the files (Dask's meta, with no partition number: their empty columns)."
    feats = unshipped(feats)
    return feats.empty(part) if partition_info is None else feats.part(part, partition_info['number'])

def _elements(pieces:list, name:str) -> ColumnValues:
    "A list column's ColumnValues from its shuffled partitions' training elements' counts and lengths' histograms."
    counts = pd.concat([c for (c,_),_ in pieces]) if pieces else pd.Series([], dtype=object)
    counts = counts.groupby(level=0, sort=False).sum()
    u = sorted_uniques(pd.Series(counts.index, name=name))
    values = np.empty(len(u), dtype=object)
    values[:] = u
    hists = [h for _,h in pieces]
    hist = np.zeros(max(map(len, hists), default=1), np.int64)
    for h in hists: hist[:len(h)] += h
    train = counts.reindex(pd.Index(u, tupleize_cols=False)).to_numpy().astype(np.int64)
    return ColumnValues(values, train, any(nan for (_,nan),_ in pieces), False, hist)

def _history_encodes(self, to):
    """The features of every row: one pass, the shuffle on the keys and each shuffled partition's features written
    (and the state learned, for the set-up object), then read lazily a partition at a time."""
    self.check_columns(to)
    f = to.scan.conts.get(self.time)
    if f is not None and f.nan_all:   # the scan counted them: the error before the pass
        raise ValueError(f"{type(self).__name__}: time column {self.time!r} holds {f.nan_all} missing value(s): each "
                         "event needs a time; drop or fill those rows first")
    learn, prefix = to is self._fitting, self.prefix(to)
    lens = to.partition_rows()
    starts = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    split = to.split_col
    cols = list(dict.fromkeys([*self.keys, self.time, *self.names, *([split] if split else [])]))
    src = to.items[cols]
    rows = src.map_partitions(_with_rows, starts, split, to.split_on,
                              meta=_with_rows(src._meta, starts, split, to.split_on))
    shuffled = rows.shuffle(on=list(self.keys))
    folder = CacheDir(tempfile.mkdtemp(prefix='history-', dir=to.chunk_dir))
    parts = shuffled.to_delayed()
    files = [str(Path(folder.path)/f'part.{j}.arrow') for j in range(len(parts))]
    proc, pre = ship(self, to), None if prefix is None else ship(prefix, to)
    got = compute(*[delayed(_features_part)(p, proc, pre, learn, fn, starts) for p,fn in zip(parts, files)])
    if learn: self.last = sort_state(pd.concat([r['last'] for r in got], ignore_index=True), self.keys)
    lists = list(getattr(self, 'list_names', []))
    floats = [c for c in self.made_names if c not in lists]
    feats = Features(folder, files, starts, floats, lists)
    key = to.items[cols[:1]]   # a column a partition, for its index
    out = key.map_partitions(_read_part, ship(feats, to), meta=feats.empty(key._meta))
    to.items = replace_columns(to.items, out, self.made_names)
    # the facts the next procs read, with no pass: the lags' missing values, the lists' elements and lengths
    scan = to.scan.rewritten(self.made_names)
    conts = {c: ContFacts(sum(r['nan'][c][0] for r in got), sum(r['nan'][c][1] for r in got)) for c in floats}
    values = {c: _elements([(r['elems'][c], r['hist'][c]) for r in got], c) for c in lists}
    train = scan.train
    if train is not None and floats: train = train.assign(**feats.training(floats, len(lens)))
    to.scan = dataclasses.replace(scan, conts={**scan.conts, **conts}, values={**scan.values, **values}, train=train)
    for c in lists:
        to.multi_hot[c] = None
        if c not in to.cat_names: to.cat_names.append(c)
    for c in floats:
        if c not in to.cont_names: to.cont_names.append(c)
    return to

def register_dask_history(cls:type) -> None:
    "Make DifferenceLag and History encode `cls` frames (Dask): a shuffle on their keys, a pass each."
    for proc in (DifferenceLag, History): register_proc(proc, 'encodes', _history_encodes, cls)
