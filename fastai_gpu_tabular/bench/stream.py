"""The `stream` suite: the streaming loader against the resident one on the same packed rows (rows/s and ns a row of
shuffled epochs at each batch size, in alternating rounds), and the row order the stream's block shuffle makes."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from .report import fmt, ratio, table
from .scale import shuffle_stats
from .timing import loader_epoch, time_loader

__all__ = ['stream_suite', 'write_chunks', 'stream_vs_resident', 'order_stats', 'add_args', 'run', 'format_table']

def write_chunks(rows, path, part_rows:int, layout):
    "Packed `rows` as `PackedChunks` in `path`, a file of `part_rows` rows each, as a Dask build writes a partition's."
    from ..rows.chunks import PackedChunks, part_name
    Path(path).mkdir(parents=True, exist_ok=True)
    files = [(part_name(i), PackedChunks.write_rows(path, part_name(i), rows[a:a + part_rows]))
             for i,a in enumerate(range(0, len(rows), part_rows))]
    return PackedChunks.write(path, files, layout, rows.shape[1])

def _timed(dl, epochs, max_s, device, stat) -> dict:
    """`time_loader` after one untimed epoch, with the process's CPU time over the timed epochs (every thread: the
    stream's reads are on its own), both per row."""
    loader_epoch(dl, float('inf'), device)
    c0 = time.process_time()
    d = time_loader(dl, epochs, 0, max_s, device, stat)
    d['ns_per_row'] = round(1e9 / d['rows_per_s'], 1)
    d['cpu_ns_per_row'] = round((time.process_time() - c0) / d['rows'] * 1e9, 1)
    return d

def stream_vs_resident(chunks, bs:list, window:int, piece_rows:int, device='cpu', rounds:int=2, epochs:int=2,
                       max_s:float|None=None, stat='best') -> dict:
    """Shuffled epochs of a `StreamDataLoader` over `chunks` and of a `BatchDataLoader` over the same rows loaded
    (the resident loader), per batch size: `rounds` alternating rounds, the best of each loader kept (other jobs on
    the machine slow whichever runs at the time). `ratio` is the stream's rows/s over the resident's."""
    from ..rows.loader import BatchDataLoader
    from ..rows.stream import StreamDataLoader
    res = {}
    for b in bs:
        if b > len(chunks): continue
        dls = {'stream': StreamDataLoader(chunks, bs=b, shuffle=True, window=window, piece_rows=piece_rows,
                                          device=device),
               'resident': BatchDataLoader(chunks, bs=b, shuffle=True, after_batch=[], indexed=True, device=device)}
        best = {}
        for _ in range(rounds):
            for k,dl in dls.items():
                d = _timed(dl, epochs, max_s, device, stat)
                if k not in best or d['rows_per_s'] > best[k]['rows_per_s']: best[k] = d
        res[str(b)] = {**best, 'ratio': round(ratio(best['stream']['rows_per_s'], best['resident']['rows_per_s']), 3),
                       'block_rows': window * piece_rows}
    return res

def order_stats(chunks, path, bs:int, window:int, piece_rows:int) -> dict:
    """`scale.shuffle_stats` of an epoch's row order from the stream (on a store of `chunks`' file sizes whose row k
    holds k, as if the rows were sorted by label, a quarter of them 0) and from a full permutation."""
    import torch

    from ..rows.chunks import PackedChunks
    from ..rows.loader import BatchDataLoader
    from ..rows.pack import Layout
    from ..rows.stream import StreamDataLoader
    Path(path).mkdir(parents=True, exist_ok=True)
    k = lambda s, e: torch.arange(int(s), int(e), dtype=torch.int32)[:, None].repeat(1, 2)
    files = [(f, PackedChunks.write_rows(path, f, k(s, e)))
             for f,s,e in zip(chunks.files, chunks.starts[:-1], chunks.starts[1:])]
    pos = PackedChunks.write(path, files, *Layout.plan(1, 1))
    dls = {'stream': StreamDataLoader(pos, bs=bs, shuffle=True, window=window, piece_rows=piece_rows),
           'full permutation': BatchDataLoader(pos, bs=bs, shuffle=True, after_batch=[], indexed=True)}
    return {n: shuffle_stats(torch.cat([b[0][:, 0].long() for b in dl]), len(pos) // 4, bs) for n,dl in dls.items()}

def stream_suite(n=1_000_000, seed=0, bs=(4096, 32768, 204800), window=32, piece_rows=None, part_rows=250_000,
                 rounds=2, epochs=2, max_s=None, stat='best', device='cpu', path=None) -> dict:
    """Criteo-like rows (`make_criteo`) through Categorify, FillMissing and Normalize in memory; the training rows'
    packed form written as chunk files of `part_rows` rows (a Dask build's layout); then `stream_vs_resident` on them
    (pieces of `piece_rows` rows, default such that a block of `window` pieces holds 8% of the rows, as a share of
    data bigger than memory would) and the row-order statistics at the middle batch size."""
    import torch
    from fastai.data.block import CategoryBlock
    from fastai.data.transforms import Normalize, RandomSplitter
    from fastai.tabular.core import FillMissing

    from ..core import TabularGPU
    from ..datasets import criteo_names, make_criteo
    from ..ops.procs import Categorify
    df = make_criteo(n, seed)
    cats,conts,y = criteo_names()
    to = TabularGPU(df, procs=[Categorify, FillMissing, Normalize], cat_names=cats, cont_names=conts, y_names=y,
                    y_block=CategoryBlock(), splits=RandomSplitter(valid_pct=0.2, seed=seed)(range(len(df))))
    del df
    rows,layout = to.train.packed_rows('cpu')
    del to
    piece_rows = piece_rows or max(len(rows) * 8 // (100 * window), 1024)
    with tempfile.TemporaryDirectory(prefix='fgt-stream-', dir=path) as d:
        chunks = write_chunks(rows, Path(d)/'train', part_rows, layout)
        del rows
        res = {'rows': len(chunks), 'width': chunks.width, 'files': len(chunks.files), 'window': window,
               'piece_rows': piece_rows, 'device': str(device), 'torch_threads': torch.get_num_threads(),
               'by_bs': stream_vs_resident(chunks, bs, window, piece_rows, device, rounds, epochs, max_s, stat)}
        mid = sorted(int(b) for b in res['by_bs'])[len(res['by_bs']) // 2] if res['by_bs'] else None
        if mid: res['order'] = {'bs': mid, **order_stats(chunks, Path(d)/'positions', mid, window, piece_rows)}
    v = res['by_bs'].get('32768', {}).get('ratio')
    res['target'] = {'name': 'stream rows/s >= 0.8x resident at bs 32,768', 'value': v,
                     'met': None if v is None else v >= 0.8}
    return res

def add_args(g):
    a = g.add_argument
    a('--stream-rows', type=lambda s: int(float(s)), default=1_000_000,
      help='rows of synthetic data (80%% of them stream: the training rows)')
    a('--stream-window', type=int, default=32, help="pieces in the stream's block")
    a('--stream-piece-rows', type=int, default=None,
      help='rows the stream reads at a time (default: a block holds 8%% of the rows)')
    a('--stream-part-rows', type=int, default=250_000, help='rows of each chunk file')
    a('--stream-rounds', type=int, default=2, help='alternating rounds of the two loaders; the best of each counts')
    a('--stream-dir', default=None, help='where the chunks go (a temporary folder inside it)')

def run(opts) -> dict:
    return stream_suite(opts.stream_rows, opts.seed, opts.bs, opts.stream_window, opts.stream_piece_rows,
                        opts.stream_part_rows, opts.stream_rounds, opts.epochs_loader, opts.max_loader_s, opts.stat,
                        opts.device, opts.stream_dir)

def loader_table(by_bs:dict) -> str:
    "Rows/s, ns a row (wall, and CPU of every thread) of the stream and the resident loader, per batch size."
    rows = [[f'{int(b):,}', f"{d['stream']['rows_per_s']:,.0f}", f"{d['resident']['rows_per_s']:,.0f}",
             fmt(d['ratio'], 'x'), fmt(d['stream']['ns_per_row']), fmt(d['resident']['ns_per_row']),
             fmt(d['stream']['cpu_ns_per_row']), fmt(d['resident']['cpu_ns_per_row'])] for b,d in by_bs.items()]
    return table(['bs', 'stream rows/s', 'resident rows/s', 'stream/resident', 'stream ns/row', 'resident ns/row',
                  'stream CPU ns/row', 'resident CPU ns/row'], rows)

def format_table(res) -> str:
    "The suite's results as tables."
    out = [f"{res['rows']:,} training rows of {res['width']} int32 columns in {res['files']} files; blocks of "
           f"{res['window']} pieces x {res['piece_rows']:,} rows; {res['device']}, torch threads "
           f"{res['torch_threads']}", loader_table(res['by_bs'])]
    if 'order' in res:
        o = res['order']
        out.append(f"row order of an epoch, bs {o['bs']:,} (rows as if sorted by label):\n" + table(
            ['order', 'neighbour gap', 'moved', 'batch label std'],
            [[k, v['neighbour_gap'], v['moved'], v['batch_label_std']] for k,v in o.items() if k != 'bs']))
    t = res['target']
    out.append(f"{t['name']}: {fmt(t['value'], 'x')} ({'-' if t['met'] is None else 'met' if t['met'] else 'NOT met'})")
    return '\n\n'.join(out)
