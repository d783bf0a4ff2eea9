"""The `groupby` suite: JoinGroupby against the pandas a user writes instead (a groupby per cat column, merged back
onto every row, unseen categories filled), on the same Criteo-like columns; and Groupby (events to one row per user,
their items in time order as a list) against pandas' sort_values then groupby(...).agg, CPU seconds and peak RSS."""
from __future__ import annotations

from .report import fmt, table
from .timing import fastest

__all__ = ['groupby_suite', 'aggregate_suite', 'run', 'add_args', 'format_table']

def groupby_suite(rows:int=1_000_000, names=('C4', 'C10', 'C16', 'C22'), conts=('I1', 'I2', 'I5'), repeat:int=2,
                  seed:int=0) -> dict:
    """Seconds to add the count, mean and std (ddof 0) of `conts` per category of each of `names` over the training
    rows (80%) to all `rows` synthetic Criteo-like rows (`make_criteo`): by pandas (`groupby(dropna=False)`, then a
    left `merge` per cat column, unseen categories given count 0 and the cont's mean and std over the training rows)
    and by a `TabularGPU` with `JoinGroupby` (and FillMissing, which the conts' NaN need; it also copies and shrinks the
    named columns, as every `TabularGPU` does: both count against it), fastest of `repeat`; the largest difference
    between their values (0: equal bit for bit)."""
    import numpy as np
    import pandas as pd
    from fastai.tabular.core import FillMissing

    from ..core import TabularGPU
    from ..datasets import make_criteo
    from ..ops.groupby import JoinGroupby
    names,conts = list(names), list(conts)
    df = make_criteo(rows, seed=seed)[['label', *names, *conts]]
    valid = np.random.default_rng(seed).random(rows) < 0.2
    splits = (np.flatnonzero(~valid), np.flatnonzero(valid))
    order = np.concatenate(splits)   # the Tabular's rows: training rows, then validation rows
    def by_pandas():
        tr = df.iloc[splits[0]]
        vals = tr[conts].astype('float64')
        out = []
        for n in names:
            g = vals.groupby(tr[n], dropna=False)
            stats = pd.concat({'count': g.count(), 'mean': g.mean(), 'std': g.std(ddof=0)}, axis=1)
            stats.columns = [f'{n}_{x}_{s}' for s,x in stats.columns]
            joined = df[[n]].iloc[order].merge(stats, left_on=n, right_index=True, how='left')
            for s,x in ((s, x) for s in ('count', 'mean', 'std') for x in conts):
                fill = {'count': 0., 'mean': vals[x].mean(), 'std': vals[x].std(ddof=0)}[s]
                out.append(joined[f'{n}_{x}_{s}'].fillna(fill).rename(f'{n}_{x}_{s}'))
        return pd.concat(out, axis=1)
    def by_proc():
        jg = JoinGroupby(names, conts)
        to = TabularGPU(df, procs=[jg, FillMissing], cat_names=names, cont_names=conts, y_names='label', splits=splits)
        return to.items[jg.made_names]
    res = {k: dict(zip(('seconds', 'values'), fastest(f, repeat))) for k,f in (('pandas groupby + merge', by_pandas),
                                                                                ('JoinGroupby', by_proc))}
    ours = res['JoinGroupby'].pop('values')
    theirs = res['pandas groupby + merge'].pop('values')[list(ours.columns)]
    diff = float(np.abs(ours.to_numpy('f8') - theirs.to_numpy('f8')).max())
    res['JoinGroupby']['speedup_vs_pandas'] = res['pandas groupby + merge']['seconds'] / res['JoinGroupby']['seconds']
    return {'rows': rows, 'names': names, 'conts': conts, 'columns': len(ours.columns), 'repeat': repeat,
            'max_abs_diff': diff, 'results': res}

def aggregate_suite(rows:int=10_000_000, users:int|None=None, items:int=100_000, seed:int=0) -> dict:
    """`rows` events (a user, a time with ties, an item, a rating) to one row per user (`rows // 10` users by default):
    the items in time order as a list and their count, the mean and last rating, by `Groupby` and by pandas'
    `sort_values(kind='stable')` then `groupby(...).agg` (`list` for the lists), in this process one after the other:
    each way's CPU seconds and peak RSS above the RSS it started from (the events are made before either), and whether
    the two frames are equal (lists element for element, the rest bit for bit)."""
    import gc
    import time
    import numpy as np
    import pandas as pd

    from ..ops.aggregate import Groupby
    from .machine import RSSMeter
    rng = np.random.default_rng(seed)
    users = users or max(rows // 10, 1)
    df = pd.DataFrame({'user': rng.integers(0, users, rows), 'ts': rng.integers(0, rows // 4 + 1, rows),
                       'item': rng.integers(0, items, rows), 'rating': rng.integers(1, 11, rows) / 2})
    aggs = {'item': ['list', 'count'], 'rating': ['mean', 'last']}
    def by_pandas():
        named = {f'{c}_{a}': (c, list if a == 'list' else a) for c,aa in aggs.items() for a in aa}
        return df.sort_values('ts', kind='stable').groupby('user', sort=True).agg(**named).reset_index()
    def by_groupby(): return Groupby('user', 'ts', aggs)(df)
    rss, res, out = RSSMeter(), {}, {}
    for k,f in (('Groupby', by_groupby), ('pandas sort_values + groupby.agg', by_pandas)):
        gc.collect()
        rss.reset()
        start, c0, t0 = rss.now(), time.process_time(), time.perf_counter()
        out[k] = f()
        res[k] = {'cpu_s': round(time.process_time() - c0, 2), 'wall_s': round(time.perf_counter() - t0, 2),
                  'peak_growth_mb': round(rss.peak() - start, 1)}
    a, b = out['Groupby'], out['pandas sort_values + groupby.agg']
    lists = lambda d: (np.concatenate(list(d['item_list'])), d['item_list'].map(len).to_numpy())
    equal = bool(all(np.array_equal(x, y) for x,y in zip(lists(a), lists(b))) and
                 a.drop(columns='item_list').equals(b.drop(columns='item_list')))
    p = res['pandas sort_values + groupby.agg']
    res['Groupby'].update(cpu_speedup=round(p['cpu_s'] / res['Groupby']['cpu_s'], 2),
                          peak_ratio=round(res['Groupby']['peak_growth_mb'] / p['peak_growth_mb'], 3))
    return {'rows': rows, 'users': users, 'groups': len(a), 'items': items, 'aggs': aggs, 'equal': equal,
            'rss_method': rss.method, 'results': res}

def add_args(group):
    a = group.add_argument
    a('--gb-rows', type=lambda s: int(float(s)), default=1_000_000, help='rows of Criteo-like data')
    a('--gb-repeat', type=int, default=2, help='runs of each; the fastest counts')
    a('--gb-events', type=lambda s: int(float(s)), default=10_000_000, help="Groupby's events (0: skip it)")

def run(opts) -> dict:
    res = groupby_suite(opts.gb_rows, repeat=opts.gb_repeat, seed=opts.seed)
    if opts.gb_events: res['aggregate'] = aggregate_suite(opts.gb_events, seed=opts.seed)
    return res

def format_table(res) -> str:
    "The suite's results as a table."
    base = res['results']['pandas groupby + merge']['seconds']
    out = [[k, fmt(v['seconds']), fmt(base / v['seconds'], 'x')] for k,v in res['results'].items()]
    head = (f"{res['columns']} group statistics ({len(res['names'])} cats x {len(res['conts'])} conts x count, mean, "
            f"std) joined to {res['rows']:,} rows, fastest of {res['repeat']}; largest difference "
            f"{res['max_abs_diff']:g}\n" + table(['way', 'seconds', 'vs pandas'], out))
    ag = res.get('aggregate')
    if ag is None: return head
    rows = [[k, fmt(v['cpu_s']), fmt(v['wall_s']), f"{v['peak_growth_mb']:,.0f}"] for k,v in ag['results'].items()]
    return (head + f"\n\n{ag['rows']:,} events to {ag['groups']:,} users (items as a time-ordered list, count, mean, "
            f"last); equal: {ag['equal']}\n" + table(['way', 'CPU s', 'wall s', 'peak growth MB'], rows))
