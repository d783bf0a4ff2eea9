"""Which columns matter: permutation importance of every input column of a learner, on its validation rows, computed on
the loaders' device from the packed rows (one gather a column and repeat: no frame is rebuilt, no column decoded), for
any fastai metric or the loss; and fastbook's feature importance chart of it."""
from __future__ import annotations

from types import SimpleNamespace
import numpy as np
import pandas as pd
import torch
from fastai.learner import Learner
from fastai.torch_core import to_detach

from ..rows.pack import cat_spans, cat_widths, unpack_rows

__all__ = ['permutation_importance', 'plot_importance']

def permutation_orders(n:int, n_repeats:int, seed:int) -> np.ndarray:
    """The row order each repeat gives a permuted column, `[n_repeats, n]`: scikit-learn's `permutation_importance`'s
    with `random_state=seed`, the same for every column (it seeds each column's shuffles alike): a seed drawn from
    `RandomState(seed)`, then each repeat shuffles the order the last one left (its index shuffled in place)."""
    seed = np.random.RandomState(seed).randint(np.iinfo(np.int32).max + 1)
    rs, idx, at, res = np.random.RandomState(seed), np.arange(n), np.arange(n), []
    for _ in range(n_repeats):
        rs.shuffle(idx)
        at = at[idx]   # scikit-learn permutes the column as the last repeat left it
        res.append(at)
    return np.stack(res) if res else np.zeros((0, n), np.int64)

def _lower_is_better(metric) -> bool:
    "fastai's rule (its trackers'): a metric whose name holds 'loss' or 'error' is better lower; so are its errors."
    name = getattr(metric, 'name', getattr(metric, '__name__', '')).lower().lstrip('_')   # AccumMetric's: '_rmse'
    return 'loss' in name or 'error' in name or name in ('mse', 'rmse', 'mae', 'msle', 'exp_rmspe')

def _score(learn, metric, preds, ys):
    "`metric` (a fastai Metric, a function of `(preds, targs)`, or None: the loss) of all rows at once, a float."
    if metric is None: return float(learn.loss_func(preds, *ys))
    if not hasattr(metric, 'accumulate'): return float(metric(preds, *ys))
    metric.reset()   # one "batch" of every row, as fastai's validation loop hands a batch to a metric
    metric.accumulate(SimpleNamespace(pred=preds, yb=ys, y=ys[0], loss=None, to_detach=to_detach, learn=learn))
    return float(metric.value)

def _predictions(model, rows, layout, bs:int) -> tuple:
    """The model's outputs for every packed row, a batch (of `bs` rows, as the loader yields them) at a time, and the
    targets as the loader yields them, on their device."""
    outs = [model(*unpack_rows(rows[i:i + bs], layout)[:2]) for i in range(0, len(rows), bs)]
    return torch.cat(outs), unpack_rows(rows, layout)[2:]

def permutation_importance(learn:Learner, metric=None, n_repeats:int=5, seed:int=0, dl=None, bs:int|None=None,
                           greater_is_better:bool|None=None) -> pd.DataFrame:
    """How much `metric` (a fastai metric object or function of `(preds, targs)`; None: the learner's loss) worsens
    when one input column of the validation rows (`dl`, default `learn.dls.valid`) is shuffled, for each column, as
    scikit-learn's `permutation_importance(random_state=seed)` measures it: the baseline score less each repeat's,
    higher for a column that matters (a score that is better lower, the loss and fastai's errors, counted the other
    way: `greater_is_better` says it for another). The same permutations as scikit-learn's, so the same numbers given
    the same predictions; each is one gather of the column's slots (a multi-hot column's together) in a copy of the
    packed rows on the loaders' device, the model run over them a batch (`bs`, default the loader's) at a time.
    Returns a frame by column, most important first: `importance` (the repeats' mean), `std`; its `attrs` hold the
    `baseline` score and every repeat's `importances` (columns in the Tabular's order)."""
    dl = learn.dls.valid if dl is None else dl
    to = learn.dls.train_ds   # the names and slots (a loader's rows, even a stream's chunks, have the same layout)
    rows, layout = dl.dataset.packed_rows(dl.device)
    if not len(rows): raise ValueError("permutation_importance needs validation rows: the loader has none")
    if layout.ys is None: raise ValueError("permutation_importance needs the rows' targets: the loader has none")
    rows = rows.clone()   # permuted a column at a time, then restored: the loader's own rows are left alone
    bs = bs or dl.bs
    if greater_is_better is None: greater_is_better = metric is not None and not _lower_is_better(metric)
    sign = 1. if greater_is_better else -1.
    orders = torch.as_tensor(permutation_orders(len(rows), n_repeats, seed), device=rows.device)
    a0 = layout.cats.start
    spans = [(a0 + a, a0 + b) for a,b in cat_spans(cat_widths(to))] + \
            [(layout.conts.start + j, layout.conts.start + j + 1) for j in range(len(to.cont_names))]
    names = list(to.cat_names) + list(to.cont_names)
    model = learn.model
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            score = lambda: _score(learn, metric, *_predictions(model, rows, layout, bs))
            base, res = score(), np.zeros((len(names), n_repeats))
            for k,(a,b) in enumerate(spans):
                block = rows[:, a:b].clone()
                for r in range(n_repeats):
                    rows[:, a:b] = block[orders[r]]   # the column's gather
                    res[k, r] = sign * (base - score())
                rows[:, a:b] = block
    finally: model.train(was)
    out = pd.DataFrame({'column': names, 'importance': res.mean(1), 'std': res.std(1)})
    out = out.sort_values('importance', ascending=False, kind='stable').reset_index(drop=True)
    out.attrs.update(baseline=base, importances=res, columns=names)
    return out

def plot_importance(imp:pd.DataFrame, top:int|None=30, ax=None, **kwargs):
    """fastbook's feature importance chart of `permutation_importance`'s frame: a horizontal bar a column (the `top`
    most important, the most at the top), with the repeats' std as error bars. Returns the axes."""
    import matplotlib.pyplot as plt
    d = imp if top is None else imp.iloc[:top]
    if ax is None: _, ax = plt.subplots(figsize=kwargs.pop('figsize', (12, max(2, 0.35 * len(d)))))
    ax.barh(d['column'][::-1], d['importance'][::-1], xerr=d['std'][::-1], **kwargs)
    ax.set_xlabel('importance (the score\'s loss when the column is shuffled)')
    return ax
