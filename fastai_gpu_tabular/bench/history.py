"""The `history` suite: a key's lag and its last N items (DifferenceLag, History) against the same features written
with pandas' groupby, on Criteo-like rows in memory and on Dask, a process each way: CPU seconds and peak RSS."""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

from .cli import name_list
from .fastai_suite import run_child
from .machine import RSSMeter
from .report import fmt, table

__all__ = ['WAYS', 'history_parts', 'history_worker', 'history_suite', 'run', 'add_args', 'format_table']

WAYS = ('pandas', 'memory', 'dask', 'dask_base')
KEY, ITEM, TIME = 'C20', 'item', 'time'   # the key (63k users at any size), an int64 item, a second in a month

def add_args(g):
    a = g.add_argument
    a('--hist-rows', type=lambda s: int(float(s)), default=1_000_000, help='rows of Criteo-like data')
    a('--hist-n', type=int, default=5, help="items of each row's history")
    a('--hist-part-rows', type=int, default=500_000, help='rows per parquet part (a Dask partition each)')
    a('--hist-ways', type=name_list, default=list(WAYS), help=f'a subset of {",".join(WAYS)}')

def history_parts(path, rows:int, seed:int=0, part_rows:int=500_000) -> Path:
    """Criteo-like parquet parts (`datasets.criteo_parts`) with two more columns: `item`, an int64 ID (MurmurHash3 of
    `C22`, 160k values at 10M rows), and `time`, a random second in a month: rows in no order of time or key."""
    import numpy as np
    import pandas as pd

    from ..datasets import criteo_parts
    from ..ops.hashing import hash_column
    base = criteo_parts(Path(path)/'criteo', rows, seed, part_rows=part_rows)
    out = Path(path)/'history'
    spec = {'rows': rows, 'seed': seed, 'part_rows': part_rows}
    if (out/'_spec.json').exists() and json.loads((out/'_spec.json').read_text()) == spec: return out
    out.mkdir(parents=True, exist_ok=True)
    for i,f in enumerate(sorted(base.glob('part.*.parquet'))):
        df = pd.read_parquet(f, columns=['label', 'I1', KEY, 'C22', 'is_valid'])
        h, miss = hash_column(df.pop('C22'))
        df[ITEM] = np.where(miss, -1, h.astype(np.int64))   # a missing item: -1, an ID of its own
        df[TIME] = np.random.default_rng([seed, i]).integers(0, 30 * 86400, len(df))
        df.to_parquet(out/f.name, row_group_size=part_rows)
    (out/'_spec.json').write_text(json.dumps(spec))
    return out

def _digest(lags, values, lens) -> str:
    "A hash of the features, exact to the bit: the lags (float64), the lists' values and lengths (int64)."
    import numpy as np
    h = hashlib.sha1()
    for a in (np.asarray(lags, 'f8'), np.asarray(values, 'i8'), np.asarray(lens, 'i8')): h.update(a.tobytes())
    return h.hexdigest()[:12]

def _by_pandas(df, n:int) -> str:
    """The features as a pandas user writes them: a stable sort by key and time, the groupby's `diff` and `shift(k)`
    for k = 1..n, lists of those present (the latest first), back in the frame's order. Their digest."""
    import numpy as np
    s = df[[KEY, TIME, ITEM]].sort_values([KEY, TIME], kind='stable')
    g = s.groupby(KEY, sort=False)
    lag = g[TIME].diff().sort_index()
    prev = np.stack([g[ITEM].shift(k).sort_index().to_numpy('f8') for k in range(1, n + 1)], axis=1)
    lists = [[int(v) for v in row if v == v] for row in prev]
    return _digest(lag.to_numpy(), [v for r in lists for v in r], [len(r) for r in lists])

def _procs(n):
    from ..ops.history import DifferenceLag, History
    return [DifferenceLag(KEY, TIME), History(ITEM, KEY, TIME, n=n)]

def _by_procs(df, n:int) -> str:
    "The features by a `TabularGPU` with DifferenceLag and History (which also copies the named columns). Their digest."
    import numpy as np

    from ..core import TabularGPU
    to = TabularGPU(df, procs=_procs(n), cat_names=[KEY, ITEM], cont_names=[TIME], y_names='label')
    lists = to.items[f'{ITEM}_last{n}_{KEY}']
    return _digest(to.items[f'{TIME}_lag_{KEY}'].to_numpy(), np.concatenate(list(lists)), lists.map(len).to_numpy())

def history_worker(way:str, data:str, out:str, opts:dict):
    """One way on the parquet parts `data`: the pandas groupby, the procs in memory (both on the whole frame read
    first), or the procs on Dask (with Categorify and FillMissing, which its write into packed chunks needs; `dask_base`
    is that ETL without them, so the difference is theirs); CPU seconds (all the process's threads), wall seconds,
    peak RSS, and the features' digest (Dask's are tested equal)."""
    import warnings
    warnings.filterwarnings('ignore')
    import pandas as pd
    import pyarrow.parquet  # noqa: F401   (imported before the clock, as each way's)
    from fastai.tabular.core import Categorify, FillMissing

    from ..core import TabularGPU
    if way.startswith('dask'):
        import dask
        import dask.dataframe as dd

        from ..dask import tabular  # noqa: F401   (what `TabularGPU` imports for a Dask frame)
    rss, n = RSSMeter(), int(opts['n'])
    res = {'status': 'ok', 'way': way}
    rss.reset()
    start = rss.now()
    t0, c0 = time.perf_counter(), time.process_time()
    if way.startswith('dask'):
        passes = [0]
        from dask.callbacks import Callback
        with dask.config.set({'scheduler': 'threads'}), Callback(start=lambda d: passes.__setitem__(0, passes[0] + 1)):
            ddf = dd.read_parquet(data)
            res['partitions'] = ddf.npartitions
            procs = [*(_procs(n) if way == 'dask' else []), Categorify, FillMissing]
            to = TabularGPU(ddf, procs=procs, cat_names=[KEY, ITEM], cont_names=[TIME], y_names='label',
                            splits='is_valid', chunk_dir=opts['chunk_dir'], progress=False)
        res.update(passes=passes[0], rows=len(to))
    else:
        df = pd.read_parquet(data, columns=['label', KEY, ITEM, TIME])
        res['read_s'] = round(time.perf_counter() - t0, 2)
        rss.reset()   # the frame read is both ways' alike: the peak counts from here
        t0, c0, start = time.perf_counter(), time.process_time(), rss.now()
        res['digest'] = _by_pandas(df, n) if way == 'pandas' else _by_procs(df, n)
        res['rows'] = len(df)
    res.update(cpu_s=round(time.process_time() - c0, 2), wall_s=round(time.perf_counter() - t0, 2),
               peak_rss_mb=round(rss.peak(), 1), start_rss_mb=round(start, 1))
    res['growth_mb'] = round(res['peak_rss_mb'] - start, 1)   # what the way itself took, above what it started with
    Path(out).write_text(json.dumps(res))

def _spawn(way, data, opts, chunk_dir) -> dict:
    with tempfile.TemporaryDirectory() as d:
        code = ('import json, sys; from fastai_gpu_tabular.bench.history import history_worker; '
                'history_worker(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))')
        o = json.dumps({'n': opts.hist_n, 'chunk_dir': str(chunk_dir)})
        return run_child([sys.executable, '-c', code, way, str(data), f'{d}/r.json', o], opts.timeout,
                         Path(d, 'r.json'))

def history_suite(opts) -> dict:
    """Each way in its own process (so that its peak RSS is its own) on the same parquet parts: its CPU seconds, peak
    RSS and growth (the peak less the RSS it started from: the imports, and in memory the frame read), and their ratios
    to pandas' (pandas' CPU seconds over the way's: above 1 is faster; the way's memory over pandas': below 1 is less).
    In memory both read the whole frame first (not counted); Dask reads, learns and packs a partition at a time, with
    the procs and without (`dask_base`)."""
    work = Path(opts.out).resolve().parent/'history_work'
    t0 = time.perf_counter()
    data = history_parts(work, opts.hist_rows, opts.seed, opts.hist_part_rows)
    res = {'rows': opts.hist_rows, 'n': opts.hist_n, 'key': KEY, 'part_rows': opts.hist_part_rows,
           'make_s': round(time.perf_counter() - t0, 1), 'ways': {}}
    for way in opts.hist_ways:
        print(f'[history] {opts.hist_rows:,} rows: {way}', file=sys.stderr, flush=True)
        res['ways'][way] = _spawn(way, data, opts, work/'chunks')
    ok = {k: v for k,v in res['ways'].items() if v.get('status') == 'ok'}
    digests = {v['digest'] for v in ok.values() if 'digest' in v}
    res['same_features'] = len(digests) == 1 if len(digests) else None
    if 'pandas' in ok:
        p = ok['pandas']
        res['ratios'] = {k: {'cpu_speedup': p['cpu_s'] / v['cpu_s'], 'peak_rss_ratio': v['peak_rss_mb'] /
                             p['peak_rss_mb'], 'growth_ratio': v['growth_mb'] / p['growth_mb']}
                         for k,v in ok.items() if k != 'pandas'}
    return res

def run(opts) -> dict:
    bad = [w for w in opts.hist_ways if w not in WAYS]
    if bad: raise SystemExit(f'unknown way(s) {bad}: pick from {",".join(WAYS)}')
    return history_suite(opts)

def format_table(res) -> str:
    "The suite's results as a table."
    rows = []
    for k,v in res['ways'].items():
        if v.get('status') != 'ok': rows.append([k, v.get('status'), *['-'] * 7, v.get('reason', '')[:60]])
        else:
            r = res.get('ratios', {}).get(k, {'cpu_speedup': 1., 'peak_rss_ratio': 1., 'growth_ratio': 1.})
            rows.append([k, 'ok', fmt(v['cpu_s']), fmt(v['wall_s']), f"{v['peak_rss_mb']:,.0f}",
                         f"{v['growth_mb']:,.0f}", fmt(r['cpu_speedup'], 'x'), fmt(r['peak_rss_ratio'], 'x'),
                         fmt(r['growth_ratio'], 'x'), str(v.get('passes', '')) or v.get('digest', '')])
    head = (f"{res['rows']:,} rows: the lag and the last {res['n']} items by {res['key']}; pandas' and the procs' "
            f"features the same: {res['same_features']}\n")
    return head + table(['way', 'status', 'CPU s', 'wall s', 'peak RSS MB', 'growth MB', 'CPU vs pandas',
                         'peak vs pandas', 'growth vs pandas', 'passes / digest'], rows)
