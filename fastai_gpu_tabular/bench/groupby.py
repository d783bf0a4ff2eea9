"""The `groupby` suite: JoinGroupby against the pandas a user writes instead (a groupby per cat column, merged back
onto every row, unseen categories filled), on the same Criteo-like columns."""
from __future__ import annotations

from .report import fmt, table
from .timing import fastest

__all__ = ['groupby_suite', 'run', 'add_args', 'format_table']

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

def add_args(group):
    a = group.add_argument
    a('--gb-rows', type=lambda s: int(float(s)), default=1_000_000, help='rows of Criteo-like data')
    a('--gb-repeat', type=int, default=2, help='runs of each; the fastest counts')

def run(opts) -> dict:
    return groupby_suite(opts.gb_rows, repeat=opts.gb_repeat, seed=opts.seed)

def format_table(res) -> str:
    "The suite's results as a table."
    base = res['results']['pandas groupby + merge']['seconds']
    out = [[k, fmt(v['seconds']), fmt(base / v['seconds'], 'x')] for k,v in res['results'].items()]
    return (f"{res['columns']} group statistics ({len(res['names'])} cats x {len(res['conts'])} conts x count, mean, "
            f"std) joined to {res['rows']:,} rows, fastest of {res['repeat']}; largest difference "
            f"{res['max_abs_diff']:g}\n" + table(['way', 'seconds', 'vs pandas'], out))
