"""The `parquet` suite: from a Criteo-like Parquet file to packed rows, this package's `from_parquet` and Polars' reader
against stock fastai's `pd.read_parquet` + `TabularPandas`, a process each way: CPU seconds and peak RSS."""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

from .cli import int_list, name_list
from .fastai_suite import run_child
from .machine import RSSMeter
from .report import fmt, table

__all__ = ['WAYS', 'parquet_worker', 'parquet_suite', 'run', 'add_args', 'format_table']

# fastai: pd.read_parquet + TabularPandas; pandas: pd.read_parquet + TabularGPU; from_parquet: TabularGPU.from_parquet;
# polars: pl.read_parquet + TabularGPU (through Arrow to pandas)
WAYS = ('fastai', 'pandas', 'from_parquet', 'polars')

def add_args(g):
    a = g.add_argument
    a('--pq-rows', type=int_list, default=[1_000_000], help='rows of the Criteo-like file, comma separated (1e6,4e6)')
    a('--pq-ways', type=name_list, default=list(WAYS), help=f'a subset of {",".join(WAYS)}')

def _vocab_digest(classes:dict) -> str:
    "A digest of the vocabularies, {name: values}: every way's must be fastai's."
    return hashlib.sha256(json.dumps({k: [str(v) for v in vs] for k,vs in classes.items()}).encode()).hexdigest()[:16]

def parquet_worker(way:str, data:str, out:str, seed:int):
    """One way from the file `data` to the rows a loader serves (fastai: its processed `TabularPandas`, which its
    loader collates a batch at a time; this package: the packed rows): CPU seconds of all the process's threads, wall
    seconds, peak RSS, each counted from after the imports; the vocabularies' digest and the packed rows' sha256."""
    import warnings
    warnings.filterwarnings('ignore')
    import pandas as pd
    import pyarrow.parquet  # imported before the clock, for every way
    from fastai.data.block import CategoryBlock
    from fastai.data.transforms import RandomSplitter
    from fastai.tabular.core import Categorify, FillMissing, Normalize, TabularPandas

    from ..core import TabularGPU
    from ..datasets import criteo_names
    if way == 'polars':
        from ..extras import import_extra
        pl = import_extra('polars', 'polars', "the bench's polars way")
    cats, conts, y = criteo_names()
    kw = dict(procs=[Categorify, FillMissing, Normalize], cat_names=cats, cont_names=conts, y_names=y,
              y_block=CategoryBlock())
    splits = lambda n: RandomSplitter(valid_pct=0.2, seed=seed)(range(n))   # fastai's lists, on every way
    rss = RSSMeter()
    rss.reset()
    start = rss.now()
    t0, c0 = time.perf_counter(), time.process_time()
    if way == 'fastai':
        df = pd.read_parquet(data)
        to = TabularPandas(df, splits=splits(len(df)), **kw)
    elif way == 'from_parquet':
        n = pyarrow.parquet.ParquetFile(data).metadata.num_rows
        to = TabularGPU.from_parquet(data, splits=splits(n), backend='pandas', **kw)
    else:
        df = pl.read_parquet(data) if way == 'polars' else pd.read_parquet(data)
        to = TabularGPU(df, splits=splits(len(df)), backend='pandas', **kw)
    rows = None if way == 'fastai' else to.packed_rows('cpu')[0]
    res = {'status': 'ok', 'way': way, 'rows': len(to), 'cpu_s': round(time.process_time() - c0, 2),
           'wall_s': round(time.perf_counter() - t0, 2), 'peak_rss_mb': round(rss.peak(), 1),
           'start_rss_mb': round(start, 1), 'vocab': _vocab_digest(to.classes)}
    if rows is not None: res['packed_sha256'] = hashlib.sha256(rows.numpy().tobytes()).hexdigest()[:16]
    Path(out).write_text(json.dumps(res))

def _spawn(way, data, opts) -> dict:
    with tempfile.TemporaryDirectory() as d:
        code = ('import sys; from fastai_gpu_tabular.bench.parquet import parquet_worker; '
                'parquet_worker(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))')
        return run_child([sys.executable, '-c', code, way, str(data), f'{d}/r.json', str(opts.seed)], opts.timeout,
                         Path(d, 'r.json'))

def parquet_suite(opts) -> dict:
    """Each way in its own process (its peak RSS its own) on the same file (`criteo_parquet`, kept beside --out), at
    each row count: CPU seconds, wall seconds, peak RSS, and fastai's CPU seconds over the way's (above 1 is faster)
    and the way's peak over fastai's (below 1 is less); whether the vocabularies are fastai's, the packed rows alike."""
    from ..datasets import criteo_parquet
    work = Path(opts.out).resolve().parent/'parquet_work'
    res = {'sizes': {}}
    for n in opts.pq_rows:
        t0 = time.perf_counter()
        data = criteo_parquet(work/f'criteo_{n}_s{opts.seed}.parquet', n, opts.seed)
        r = res['sizes'][str(n)] = {'rows': n, 'make_s': round(time.perf_counter() - t0, 1),
                                    'file_mb': round(data.stat().st_size / 2**20, 1), 'ways': {}}
        for way in opts.pq_ways:
            print(f'[parquet] {n:,} rows: {way}', file=sys.stderr, flush=True)
            r['ways'][way] = _spawn(way, data, opts)
        ok = {k: v for k,v in r['ways'].items() if v.get('status') == 'ok'}
        r['same_vocab'] = len({v['vocab'] for v in ok.values()}) == 1 if ok else None
        r['same_rows'] = len({v['packed_sha256'] for v in ok.values() if 'packed_sha256' in v}) <= 1
        if 'fastai' in ok:
            f = ok['fastai']
            r['ratios'] = {k: {'cpu_speedup': round(f['cpu_s'] / v['cpu_s'], 2),
                               'peak_rss_ratio': round(v['peak_rss_mb'] / f['peak_rss_mb'], 2)}
                           for k,v in ok.items() if k != 'fastai'}
    return res

def run(opts) -> dict:
    bad = [w for w in opts.pq_ways if w not in WAYS]
    if bad: raise SystemExit(f'unknown way(s) {bad}: pick from {",".join(WAYS)}')
    return parquet_suite(opts)

def format_table(res) -> str:
    "The suite's results as a table per row count."
    out = []
    for r in res['sizes'].values():
        rows = []
        for k,v in r['ways'].items():
            if v.get('status') != 'ok':
                rows.append([k, v.get('status'), *['-'] * 5, v.get('reason', '')[:60]])
                continue
            x = r.get('ratios', {}).get(k, {'cpu_speedup': 1., 'peak_rss_ratio': 1.})
            rows.append([k, 'ok', fmt(v['cpu_s']), fmt(v['wall_s']), f"{v['peak_rss_mb']:,.0f}",
                         fmt(x['cpu_speedup'], 'x'), fmt(x['peak_rss_ratio'], 'x'), ''])
        out.append(f"{r['rows']:,} rows ({r['file_mb']} MB of Parquet), file to packed rows; vocabularies fastai's: "
                   f"{r['same_vocab']}, packed rows alike: {r['same_rows']}\n"
                   + table(['way', 'status', 'CPU s', 'wall s', 'peak RSS MB', 'CPU vs fastai', 'peak vs fastai',
                            ''], rows))
    return '\n\n'.join(out)
