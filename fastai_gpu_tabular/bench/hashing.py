"""The `hashing` suite: a column's hashed buckets (hashing.py: MurmurHash3 of its distinct values, gathered by their
codes) against what a pandas user would reach for: `pd.factorize` (a vocabulary, no hash) and
`pd.util.hash_pandas_object` (pandas' own hash of every row)."""
from __future__ import annotations

import time

from .report import table
from .timing import median_ms

__all__ = ['hashing_suite', 'add_args', 'run', 'format_table']

def _column(kind, n, distinct, rng):
    "Power-law ids (a few hot, a long tail), as int64 or as strings 'u<id>'."
    import numpy as np
    import pandas as pd
    ids = (rng.zipf(1.3, n) % distinct).astype(np.int64)
    return pd.Series(ids) if kind == 'int' else pd.Series(np.char.add('u', ids.astype(str)).astype(object))

def hashing_suite(rows=(1_000_000, 10_000_000), distinct_frac=0.1, num_buckets=100_000, reps=3, kinds=('int', 'str'),
                  seed=0) -> dict:
    """ms per column of `rows` rows (`distinct_frac` of them distinct at most) for each kind: our buckets
    (`hash_column(col) % num_buckets`), `pd.factorize(col)` and `pd.util.hash_pandas_object(col) % num_buckets`."""
    import numpy as np
    import pandas as pd

    from ..ops.hashing import hash_column
    rng = np.random.default_rng(seed)
    ways = {'murmur3_distinct': lambda c: hash_column(c)[0] % np.uint32(num_buckets),
            'pd_factorize': lambda c: pd.factorize(c),
            'pd_hash_pandas_object': lambda c: pd.util.hash_pandas_object(c, index=False).to_numpy() % num_buckets}
    res = {}
    for kind in kinds:
        for n in rows:
            col = _column(kind, n, max(int(n * distinct_frac), 1), rng)
            r = {'distinct': int(col.nunique())}
            for name,f in ways.items():
                ts = []
                for _ in range(reps):
                    t0 = time.perf_counter(); f(col); ts.append(time.perf_counter() - t0)
                r[name] = median_ms(ts)
            res[f'{kind}_{n}'] = r
    return res

def add_args(group):
    group.add_argument('--hash-rows', default='1000000,10000000', help='row counts, comma separated')
    group.add_argument('--hash-reps', type=int, default=3, help='timed repetitions')

def run(opts) -> dict:
    return hashing_suite(rows=[int(float(x)) for x in opts.hash_rows.split(',') if x], reps=opts.hash_reps,
                         seed=opts.seed)

def format_table(res) -> str:
    "The suite's results as a table: ms, and our buckets' time as a multiple of each pandas way's."
    rows = [[k, r['distinct'], r['murmur3_distinct'], r['pd_factorize'], r['pd_hash_pandas_object'],
             f"{r['murmur3_distinct'] / r['pd_hash_pandas_object']:.2f}x"] for k,r in res.items()]
    return table(['column', 'distinct', 'ours ms', 'pd.factorize ms', 'hash_pandas_object ms', 'ours / hpo'], rows)
