"""The `saved` suite: a processed Tabular loaded from `TabularGPU.save` against re-running its procs on the raw frame,
and its bytes on disk against the packed rows."""
from __future__ import annotations

import tempfile
from pathlib import Path

from .report import fmt, ratio, table
from .timing import fastest

__all__ = ['saved_suite', 'add_args', 'run', 'format_table']

def saved_suite(n=1_000_000, seed=0, repeat=1, path=None) -> dict:
    """Synthetic Criteo-like rows (26 string cats, 13 counts with NaN, a click label) through Categorify, FillMissing
    and Normalize: seconds to build the TabularGPU (the procs), to save it, to load it (checking every sha256, and
    not), and its bytes on disk (rows files, state) against the packed rows. The raw frame is in memory, the saved
    files in the page cache (a warm read): loading is timed from disk, the procs without reading the raw data."""
    from fastai.data.block import CategoryBlock
    from fastai.data.transforms import Normalize, RandomSplitter
    from fastai.tabular.core import FillMissing

    from ..core import TabularGPU
    from ..datasets import criteo_names, make_criteo
    from ..ops.procs import Categorify
    df = make_criteo(n, seed)
    cats,conts,y = criteo_names()
    splits = RandomSplitter(valid_pct=0.2, seed=seed)(range(len(df)))
    build = lambda: TabularGPU(df, procs=[Categorify, FillMissing, Normalize], cat_names=cats, cont_names=conts,
                               y_names=y, y_block=CategoryBlock(), splits=splits)
    procs_s,to = fastest(build, repeat)
    rows,_ = to.packed_rows('cpu')
    with tempfile.TemporaryDirectory(prefix='fgt-saved-', dir=path) as d:
        d = Path(d)/'tabular'
        save_s,_ = fastest(lambda: to.save(d, progress=False), repeat)
        files = [p for p in d.rglob('*') if p.is_file()]
        on_disk = sum(p.stat().st_size for p in files)
        row_bytes = sum(p.stat().st_size for p in files if p.parent.name in ('train', 'valid') and p.suffix == '.npy')
        load_s,back = fastest(lambda: TabularGPU.load(d, progress=False), repeat)
        fast_s,_ = fastest(lambda: TabularGPU.load(d, progress=False, verify=False), repeat)
        assert len(back) == len(to) and back.split == to.split
        released = back.released is not None   # the frame left to the packed rows (`packs_whole`), not rebuilt
    return {'rows': n, 'width': int(rows.shape[1]), 'procs_s': round(procs_s, 3), 'save_s': round(save_s, 3),
            'load_s': round(load_s, 3), 'load_unverified_s': round(fast_s, 3),
            'load_speedup': round(ratio(procs_s, load_s), 2), 'loaded_released': released,
            'packed_bytes': rows.numel() * 4,
            'disk_bytes': on_disk, 'rows_file_bytes': row_bytes, 'state_bytes': on_disk - row_bytes,
            'disk_over_packed': round(on_disk / (rows.numel() * 4), 4)}

def add_args(group):
    a = group.add_argument
    a('--saved-rows', type=lambda s: int(float(s)), default=1_000_000,
      help='rows of synthetic data (the README quotes 1e7)')
    a('--saved-repeat', type=int, default=1, help='time each step this many times; the fastest counts')
    a('--saved-dir', default=None, help='where the saved Tabular goes (a temporary folder inside it)')

def run(opts) -> dict:
    return saved_suite(n=opts.saved_rows, seed=opts.seed, repeat=opts.saved_repeat, path=opts.saved_dir)

def format_table(res) -> str:
    "The suite's results as a table."
    mb = lambda b: fmt(b / 2**20)
    rows = [['re-run the procs (TabularGPU(df, procs))', fmt(res['procs_s']), '-'],
            ['save', fmt(res['save_s']), '-'],
            ['load (sha256 checked)', fmt(res['load_s']), fmt(res['load_speedup'], 'x')],
            ['load (verify=False)', fmt(res['load_unverified_s']),
             fmt(ratio(res['procs_s'], res['load_unverified_s']), 'x')]]
    sizes = [['packed rows', mb(res['packed_bytes'])], ['on disk: rows files', mb(res['rows_file_bytes'])],
             ['on disk: state and lists', mb(res['state_bytes'])],
             ['on disk / packed', fmt(res['disk_over_packed'], 'x')]]
    frame = 'left to the packed rows' if res.get('loaded_released') else 'rebuilt from the packed rows'
    return (f"{res['rows']:,} rows, {res['width']} int32 columns a row; a load's frame is {frame}\n"
            + table(['step', 's', 'procs / load'], rows) + '\n\n' + table(['bytes', 'MB'], sizes))
