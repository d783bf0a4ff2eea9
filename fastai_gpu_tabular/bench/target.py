"""The `target` suite: TargetEncode against scikit-learn's TargetEncoder (out-of-fold on the training rows, the full
statistic for the validation rows), on the same Criteo-like columns, folds and smoothing."""
from __future__ import annotations

from .report import fmt, table
from .timing import fastest

__all__ = ['target_suite', 'run', 'add_args', 'format_table']

def target_suite(rows:int=1_000_000, names=('C4', 'C10', 'C16', 'C22'), smooth='auto', folds:int=5, repeat:int=2,
                 seed:int=0) -> dict:
    """Seconds to encode `names` of `rows` synthetic Criteo-like rows (`make_criteo`, 20% validation, the click label)
    by scikit-learn's `fit_transform` + `transform` and by a `TabularGPU` whose only proc is `TargetEncode` (which also
    copies and shrinks the named columns, as every `TabularGPU` does), fastest of `repeat`; the largest difference
    between their values (0: equal bit for bit)."""
    import numpy as np
    from sklearn.model_selection import StratifiedKFold
    from sklearn.preprocessing import TargetEncoder

    from ..core import TabularGPU
    from ..datasets import make_criteo
    from ..ops.target import TargetEncode
    names = list(names)
    df = make_criteo(rows, seed=seed)[['label', *names]]
    df['label'] = df['label'].map({0: 'no', 1: 'yes'})   # a class target, as fastai's CategoryBlock has it
    rng = np.random.default_rng(seed)
    valid = rng.random(rows) < 0.2
    splits = (np.flatnonzero(~valid), np.flatnonzero(valid))
    tr,va = df.iloc[splits[0]], df.iloc[splits[1]]
    def sk():
        enc = TargetEncoder(smooth=smooth, cv=StratifiedKFold(folds, shuffle=True, random_state=seed))
        return np.concatenate([enc.fit_transform(tr[names], tr['label']), enc.transform(va[names])])
    def ours():
        te = TargetEncode(names, smooth=smooth, folds=folds, seed=seed)
        to = TabularGPU(df, procs=[te], cat_names=names, y_names='label', splits=splits)
        return to.items[te.made_names].to_numpy()
    res = {k: dict(zip(('seconds', 'values'), fastest(f, repeat))) for k,f in (('sklearn TargetEncoder', sk),
                                                                                ('TargetEncode', ours))}
    diff = float(np.abs(res['TargetEncode'].pop('values') - res['sklearn TargetEncoder'].pop('values')).max())
    res['TargetEncode']['speedup_vs_sklearn'] = res['sklearn TargetEncoder']['seconds'] / res['TargetEncode']['seconds']
    return {'rows': rows, 'names': names, 'smooth': smooth, 'folds': folds, 'repeat': repeat, 'max_abs_diff': diff,
            'results': res}

def add_args(group):
    a = group.add_argument
    a('--te-rows', type=lambda s: int(float(s)), default=1_000_000, help='rows of Criteo-like data')
    a('--te-smooth', default='auto', help="'auto' or a number")
    a('--te-repeat', type=int, default=2, help='runs of each; the fastest counts')

def run(opts) -> dict:
    smooth = opts.te_smooth if opts.te_smooth == 'auto' else float(opts.te_smooth)
    return target_suite(opts.te_rows, smooth=smooth, repeat=opts.te_repeat, seed=opts.seed)

def format_table(res) -> str:
    "The suite's results as a table."
    base = res['results']['sklearn TargetEncoder']['seconds']
    out = [[k, fmt(v['seconds']), fmt(base / v['seconds'], 'x')] for k,v in res['results'].items()]
    return (f"target encoding of {len(res['names'])} columns, {res['rows']:,} rows (80% out-of-fold, {res['folds']} "
            f"folds, smooth {res['smooth']}), fastest of {res['repeat']}; largest difference {res['max_abs_diff']:g}\n"
            + table(['encoder', 'seconds', 'vs sklearn'], out))
