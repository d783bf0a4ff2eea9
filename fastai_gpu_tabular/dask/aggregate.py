"""`Groupby` (ops/aggregate.py) of a Dask frame: Dask's shuffle on the key columns brings each key's rows into one
partition, which then sorts them back into the frame's order (each row carries its partition's number and its position
there) and runs the in-memory `Groupby`. A key's statistics are pandas' over its rows in that order, and its list is
those rows sorted as in memory, so every value is the in-memory one bit for bit. The result is lazy, with no pass to
make it; computing it is one pass (the shuffle inside). Its rows come by shuffled partition, each sorted by key:
`.compute().sort_values(keys, ignore_index=True)` is the in-memory frame."""
from __future__ import annotations

import numpy as np

from ..ops.aggregate import Groupby, register_distributed

__all__ = []

_PART, _POS = '__fgt_part__', '__fgt_pos__'   # each row's partition and position in it: the frame's order

def _tagged(part, keys:list, partition_info=None):
    "A partition's rows with a key (no key column missing: those make no group), tagged with where they came from."
    i = partition_info['number'] if partition_info else 0   # Dask's meta: an empty partition, no number
    part = part.assign(**{_PART: np.int64(i), _POS: np.arange(len(part), dtype=np.int64)})
    return part.dropna(subset=keys)

def _grouped(part, gb:Groupby, plan:dict):
    "A shuffled partition's groups: its rows in the frame's order again, then the in-memory `Groupby`."
    part = part.sort_values([_PART, _POS]).drop(columns=[_PART, _POS]).reset_index(drop=True)
    return gb.aggregate(part, plan)

def dask_groupby(gb:Groupby, ddf):
    "The grouped frame of `ddf`, lazily: checked on its meta (no pass), one pass when computed."
    plan = gb.check(ddf)
    cols = list(dict.fromkeys(gb.groupby_cols + gb.sort_cols + list(plan)))
    src = ddf[cols]
    tagged = src.map_partitions(_tagged, gb.groupby_cols, meta=_tagged(src._meta, gb.groupby_cols))
    # 'tasks': Dask's shuffle in memory; its 'disk' one (partd) encodes pandas partitions only, not cuDF ones
    shuffled = tagged.shuffle(on=gb.groupby_cols, shuffle_method='tasks')
    return shuffled.map_partitions(_grouped, gb, plan, meta=_grouped(tagged._meta, gb, plan))

register_distributed('dask', dask_groupby)
