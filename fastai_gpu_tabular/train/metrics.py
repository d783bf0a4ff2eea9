"""RecSys evaluation as fastai metrics, computed with torch on the predictions' device: binary ROC AUC (sklearn's, to
the last bit) and log loss, and per-group (user, session) MRR, NDCG@k and HitRate@k.

fastai's `RocAucBinary` copies every validation batch to the host and runs sklearn at the end. These keep each batch's
scores on the device (no copy, no host sync: `accumulate` only queues device work) and compute once, when `value` is
read, over the rows of every process (one `torch.distributed` all-gather when it is initialised). AUC's last step, the
sum of its ROC curve's trapezoids, is numpy's on the host: sklearn's sum, so that the float is sklearn's.

Conventions (those of fastai's `RocAucBinary` and sklearn, unless said):
* **Predictions.** `(n, 2)`: the model's two logits for a 2-class target (CrossEntropy); the positive class is the last
  (index 1: 'yes' of ['no', 'yes'], True of [False, True]). `(n,)` or `(n, 1)`: one output, a logit (BCEWithLogits) or a
  probability/score (a sigmoid output, a regression). Half and bfloat16 outputs (`to_fp16`) are upcast to float32.
* **Scores** (AUC, ranking), `score='preds'` (the default): what fastai's `get_preds` returns, the positive (last)
  column of the loss's `activation` applied to the outputs (softmax for CrossEntropy's two logits, sigmoid for
  BCEWithLogits' one; the same for torch's own `nn.CrossEntropyLoss`/`nn.BCEWithLogitsLoss`, which have none), or the
  output itself where the loss has no activation (MSE). It is the float32 op `RocAucBinary` applies to each batch on
  the device, and the one `get_preds` applies on the host to the gathered batches (a row's value does not depend on
  its batch), so that AUC equals `RocAucBinary` and, on a CPU, sklearn's `roc_auc_score` on `get_preds` to the last
  bit, ties included: float32 probabilities saturate (margins above ~17 all round to 1.0) and round distinct margins
  alike. On a GPU the activation runs there, as `RocAucBinary` runs it: `get_preds`' host probabilities may round a
  row apart by an ulp, and sklearn's AUC on them then differs by at most the pairs that rounding reorders.
  `score='margin'` ranks the raw output instead, the logit margin `x[:, 1] - x[:, 0]` of two columns (a strictly
  increasing function of the probability, without its rounding) or the one column.
* **Positives.** A 0/1 target (a 2-class category index, or a float 0/1); anything else is an error, unless `thresh`
  is given: then a row is positive when its target is `>= thresh` (a rating >= 4).
* **Ties** count as the expectation over a uniformly random order of the tied rows: AUC gives a tied
  positive/negative pair 1/2 (sklearn's `roc_auc_score`), NDCG averages the tied rows' gains (sklearn's `ndcg_score`,
  `ignore_ties=False`), MRR and HitRate@k take the expected reciprocal rank and hit. A model that scores every row
  alike gets what a random ranking gets on average, never a lucky or an unlucky order.
* **Groups** (the ranking metrics) are the codes of a cat column (`group='user_id'`) in the batch's `x_cat`. Rows
  whose group is `#na#` (code 0: a user unseen in training, or rarer than `Categorify(min_freq)`) are not one user and
  are left out. Groups with no positive row are left out (their rank metrics are undefined), as RecBole and most
  RecSys protocols do; `n_groups` and `n_skipped` say how many of each. Relevance is binary (gain 1 for a positive).
"""
from __future__ import annotations

import math
import warnings
from functools import partial
import numpy as np
import torch
import torch.nn.functional as F
from fastai.learner import Metric
from fastcore.basics import noop
from torch import nn

from ..collectives import all_gather
from ..rows.pack import cat_spans, cat_widths

__all__ = ['AUC', 'LogLoss', 'MRR', 'NDCG', 'HitRate', 'rank_metrics']

# --- the computations, on whatever device the tensors are ----------------------------------------------------------
def _segsum(x, ids, n):
    "Sums of `x` per id in `ids` (0..n-1): a fixed-size `index_add`, no host round-trip."
    return torch.zeros(n, dtype=x.dtype, device=x.device).index_add_(0, ids, x)

def _starts(*keys):
    "True where a sorted run of `keys` begins (any key differs from the row before)."
    new = torch.zeros(len(keys[0]), dtype=torch.bool, device=keys[0].device)
    new[:1] = True
    for k in keys: new[1:] |= k[1:] != k[:-1]
    return new

def _check_scores(scores, targets, what):
    if scores.shape != targets.shape:
        raise ValueError(f"{what}: {scores.numel()} scores for {targets.numel()} targets")
    if scores.is_floating_point() and bool(scores.isnan().any()):
        raise ValueError(f"{what}: the predictions hold NaN (a diverged model?)")

def _not_binary(what):
    return ValueError(f"{what} needs 0/1 targets (a 2-class target), got other values: pass thresh= to make a numeric "
                      "target (a rating) binary")

def _check_binary(targets, what):
    if targets.dtype != torch.bool and bool(((targets != 0) & (targets != 1)).any()): raise _not_binary(what)
    return targets.bool()

def roc_auc(scores, targets) -> float:
    """Binary ROC AUC of `scores` for 0/1 `targets`, computed as sklearn's `roc_auc_score` is, so that the float is
    sklearn's to the last bit: its ROC curve (a point per distinct score, so that a tied positive/negative pair counts
    1/2, collinear points dropped) in integer counts on the device, its trapezoids in float64 there, and their sum by
    numpy's `sum` on the host (sklearn's; a sum in another order can differ in the last bits). One class only: a
    warning and NaN, as sklearn."""
    s,y = scores.reshape(-1),targets.reshape(-1)
    _check_scores(s, y, 'roc_auc')
    y = _check_binary(y, 'roc_auc')
    o = torch.sort(s, descending=True).indices       # sklearn's order: thresholds from the highest score down
    s,y = s[o],y[o].long()
    end = torch.ones_like(y, dtype=torch.bool)
    end[:-1] = s[1:] != s[:-1]                       # a tie block's last row: one threshold
    idx = end.nonzero().squeeze(1)
    tps = y.cumsum(0)[idx]                           # positives, then negatives, scored at or above each threshold
    fps = idx + 1 - tps
    npos,nneg = torch.cat([tps[-1:], fps[-1:]]).tolist() if len(y) else (0, 0)
    if npos == 0 or nneg == 0:
        warnings.warn("only one class is present in the targets: ROC AUC is not defined (NaN)", stacklevel=2)
        return float('nan')
    if len(tps) > 2:                                 # sklearn's drop_intermediate: keep the curve's corners only
        bend = (fps[2:] - 2 * fps[1:-1] + fps[:-2] != 0) | (tps[2:] - 2 * tps[1:-1] + tps[:-2] != 0)
        keep = torch.cat([bend.new_ones(1), bend, bend.new_ones(1)])
        fps,tps = fps[keep],tps[keep]
    fps,tps = (torch.cat([v.new_zeros(1), v]).double() for v in (fps, tps))
    fpr,tpr = fps / fps[-1:],tps / tps[-1:]          # by a tensor: CUDA divides by a host scalar's reciprocal
    return float(np.sum(((fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2.0).cpu().numpy()))

def _low(x): return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x

def _cols(pred, what):
    "`pred` as `(x, two)`: the 2-column logits/probabilities, or one column flattened."
    if pred.ndim == 2 and pred.shape[1] == 2: return _low(pred),True
    if pred.ndim == 1 or (pred.ndim == 2 and pred.shape[1] == 1): return _low(pred).reshape(-1),False
    raise ValueError(f"{what} is a binary metric: it takes predictions of shape (n, 2) (a 2-class target's logits) or "
                     f"(n,)/(n, 1) (one logit or probability), got {tuple(pred.shape)}")

def binary_scores(pred, what='the metric', act=None):
    """Ranking scores of binary predictions. With `act` (a loss's activation, `noop` for none, see `loss_activation`):
    the positive (last) column of `act(pred)`, what `get_preds` returns. `act=None`: the raw output, the logit margin
    of 2 columns (monotone in the softmax, without its float saturation) or the one column."""
    if act is not None: pred = act(_low(pred))
    x,two = _cols(pred, what)
    if not two: return x
    return x[:, 1] - x[:, 0] if act is None else x[:, 1]

def _row_log_loss(pred, pos, logits, what='log loss'):
    """Per-row log loss of boolean `pos`, as sklearn's `log_loss` on the probabilities (clipped to [eps, 1-eps], eps of
    the dtype computed in): from `logits` with log-softmax/log-sigmoid, or from probabilities."""
    x,two = _cols(pred, what)
    eps = torch.finfo(x.dtype).eps
    if logits:
        if two: ls = x.log_softmax(1); lp = torch.where(pos, ls[:, 1], ls[:, 0])
        else: lp = F.logsigmoid(torch.where(pos, x, -x))
        return (-lp).clamp(-math.log(1 - eps), -math.log(eps))
    q = torch.where(pos, x[:, 1], x[:, 0]) if two else torch.where(pos, x, 1 - x)
    return -q.clamp(eps, 1 - eps).log()

def binary_log_loss(preds, targets, logits=False) -> float:
    """Mean binary log loss, as sklearn's `log_loss(targets, preds)`: `preds` are probabilities of the positive class
    (`(n,)`) or of both (`(n, 2)`), or logits with `logits=True`."""
    y = targets.reshape(-1)
    if len(y) != len(preds): raise ValueError(f"binary_log_loss: {len(preds)} predictions for {len(y)} targets")
    y = _check_binary(y, 'binary_log_loss')
    if not logits and (bool((preds < 0).any()) or bool((preds > 1).any())):
        raise ValueError("binary_log_loss: probabilities outside [0, 1]: pass logits=True for logits")
    return float(_row_log_loss(preds, y, logits).sum(dtype=torch.float64)) / len(y)

def _log_comb(x, t):
    "log C(x, t) of float tensors; -inf where x < t (no way to choose)."
    ok = x >= t
    v = torch.lgamma(x + 1) - torch.lgamma(t + 1) - torch.lgamma(torch.where(ok, x - t, 0) + 1)
    return torch.where(ok, v, -math.inf)

RANK_METRICS = ('mrr', 'ndcg', 'hit_rate')

def _where_tied(mask, f, default):
    "`f(rows)` on the rows where `mask` holds (tied rows: few, for real scores), `default` elsewhere."
    rows = mask.nonzero().squeeze(1)
    return default.index_put((rows,), f(rows))

def rank_metrics(scores, relevant, groups, k:int|None=None, metrics=RANK_METRICS) -> dict:
    """MRR@k, NDCG@k and HitRate@k (those in `metrics`) per group, averaged over the groups with a relevant row (rows
    with group 0, `#na#`, left out), with segment operations after a sort by (group, score descending). Ties: the
    expectation over a random order of the tied rows (see the module's docstring). `k=None`: no cut-off. Returns
    floats, and `n_groups` (averaged over) and `n_skipped` (groups with no relevant row)."""
    s,r,g = scores.reshape(-1),relevant.reshape(-1),groups.reshape(-1)
    _check_scores(s, r, 'rank_metrics')
    if len(g) != len(s): raise ValueError(f"rank_metrics: {len(g)} groups for {len(s)} scores")
    if set(metrics) - set(RANK_METRICS): raise ValueError(f"rank_metrics: metrics among {RANK_METRICS}, got {metrics}")
    r = _check_binary(r, 'rank_metrics')
    keep = g != 0
    s,r,g = s[keep],r[keep],g[keep]
    o = torch.sort(s, descending=True, stable=True).indices
    o = o[torch.sort(g[o], stable=True).indices]     # by group, then by score descending
    s,r,g = s[o],r[o].long(),g[o]
    n,dev,f64 = len(s),s.device,torch.float64
    i = torch.arange(n, device=dev)
    new_g,new_b = _starts(g),_starts(g, s)           # a group's first row; a tie block's first row
    gid,bid = new_g.cumsum(0) - 1,new_b.cumsum(0) - 1
    g0 = torch.where(new_g, i, 0).cummax(0).values   # first row of each row's group
    b0 = torch.where(new_b, i, 0).cummax(0).values   # first row of its tie block
    pos,a = (i - g0).to(f64),(b0 - g0).to(f64)       # 0-based rank in the group of the row, and of its block's start
    m = _segsum(torch.ones_like(r), bid, n)[bid].to(f64)   # rows in the row's tie block
    rb = _segsum(r, bid, n)[bid].to(f64)             # relevant rows in it
    nrel = _segsum(r, gid, n)                        # relevant rows per group
    kk,tied,res = n if k is None else k,m > 1,{}
    if 'ndcg' in metrics:   # in a tie block every rank gets the block's mean gain; the ideal puts relevant rows first
        disc = 1 / torch.log2(pos + 2)
        ideal = _segsum(disc * (pos < nrel[gid].clamp(max=kk)), gid, n)
        res['ndcg'] = _segsum(rb / m * disc * (pos < kk), gid, n) / ideal
    if 'hit_rate' in metrics:
        # P(no relevant row in the top k): a product over blocks of C(m - rb, t) / C(m, t), t = the block's rows in it
        t = (kk - a).clamp(0, None).minimum(m)
        log_miss = torch.zeros_like(m).masked_fill((t > 0) & (rb > 0), -math.inf)   # one row: out or irrelevant
        log_miss = _where_tied(new_b & tied, lambda x: _log_comb(m[x] - rb[x], t[x]) - _log_comb(m[x], t[x]), log_miss)
        res['hit_rate'] = -torch.expm1(_segsum(torch.where(new_b, log_miss, 0.), gid, n))
    if 'mrr' in metrics:
        # in the first block holding a relevant row (none before it in the group), the first relevant row lands at
        # place j of the block with probability C(m - j, rb - 1) / C(m, rb): 1 for a single row
        c = r.cumsum(0) - r                          # relevant rows before each row (all groups)
        j = (i - b0 + 1).to(f64)
        first = (rb > 0) & (c[b0] == c[g0]) & (a + j <= kk)
        p_j = _where_tied(first & tied, lambda x: torch.exp(_log_comb(m[x] - j[x], rb[x] - 1) - _log_comb(m[x], rb[x])),
                          torch.ones_like(m))
        res['mrr'] = _segsum(torch.where(first, p_j / (a + j), 0.), gid, n)
    ng = int(new_g.sum())
    has = nrel[:ng] > 0                              # the groups that count
    out = dict(n_groups=int(has.sum()), n_skipped=int((~has).sum()))
    if not out['n_groups']:
        warnings.warn("no group has a relevant row: the ranking metrics are not defined (NaN)", stacklevel=2)
    return dict(out, **{key: float(v[:ng][has].mean()) if out['n_groups'] else float('nan') for key,v in res.items()})

# --- across processes ----------------------------------------------------------------------------------------------
def _unpadded(dl, bs) -> int:
    """Rows of this batch that are real: fastai's `DistributedDL` pads the last shards with repeated rows so that every
    process has as many; its `n`, `n_padded`, `i` (rows read so far, this batch included) say which (host ints)."""
    if not all(hasattr(dl, a) for a in ('n', 'n_padded', 'i', 'rank', 'world_size')): return bs
    start = dl.rank * dl.n_padded // dl.world_size + dl.i - bs   # this batch's first row in the padded order
    return max(0, min(bs, dl.n - start))

# --- fastai metrics ------------------------------------------------------------------------------------------------
def _positives(y, thresh):
    "Boolean positives of targets `y` (`>= thresh`, or 0/1) and, on the device, how many targets were not 0/1."
    y = y.reshape(-1)
    if thresh is not None: return y >= thresh, y.new_zeros(1, dtype=torch.long)
    return y == 1, ((y != 0) & (y != 1)).sum().view(1)

def loss_activation(loss_func):
    """What fastai's `get_preds` applies to the outputs of a model trained with `loss_func`: its `activation` (fastai's
    losses), for torch's logit losses (no `activation`) the softmax/sigmoid fastai's would apply, else `noop`."""
    act = getattr(loss_func, 'activation', None)
    if callable(act) and getattr(act, '__name__', '') != 'noops': return act   # fastai's BaseLoss: noops, no activation
    f = getattr(loss_func, 'func', loss_func)
    if isinstance(f, nn.CrossEntropyLoss) or f is F.cross_entropy: return partial(F.softmax, dim=-1)
    if isinstance(f, nn.BCEWithLogitsLoss) or f is F.binary_cross_entropy_with_logits: return torch.sigmoid
    return noop

def _is_logits(loss_func) -> bool:
    "Whether the model outputs logits, as the loss says: it has an activation (softmax, sigmoid)."
    return loss_activation(loss_func) is not noop

_SCORES = ('preds', 'margin')

def _check_score(score, name):
    if score not in _SCORES: raise ValueError(f"{name}: score must be one of {_SCORES}, got {score!r}")
    return score

class DeviceMetric(Metric):
    """A fastai `Metric` whose `accumulate` keeps a few tensors per batch on the device (`_batch`) and whose `value`
    concatenates them, gathers them from every process, and computes once (`_compute`), cached until the next batch."""
    def reset(self): self.parts,self._value = [],None

    def accumulate(self, learn):
        pred,y = learn.pred.detach(),learn.yb[0].detach()
        keep = _unpadded(getattr(learn, 'dl', None), len(y))
        if keep < len(y): pred,y = pred[:keep],y[:keep]
        self.parts.append(self._batch(learn, pred, y, keep))
        self._value = None

    @property
    def value(self):
        if self._value is None and self.parts:
            cols = all_gather(*(torch.cat(c) for c in zip(*self.parts)))
            if int(cols[-1].sum()): raise _not_binary(self.name)
            self._value = self._compute(*cols[:-1])
        return self._value

    @property
    def name(self): return self._name

    def _scores(self, learn, pred):
        "Each row's ranking score (`binary_scores`): of what `get_preds` returns (`score='preds'`), or the raw margin."
        return binary_scores(pred, self._name, loss_activation(learn.loss_func) if self.score == 'preds' else None)

class AUC(DeviceMetric):
    """Binary ROC AUC (sklearn's `roc_auc_score`, to the last bit) of `score`: `'preds'`, the probabilities fastai's
    `RocAucBinary` and `get_preds` give, or `'margin'`, the logits (see the module's docstring)."""
    def __init__(self, thresh=None, name='auc', score='preds'):
        self.thresh,self._name,self.score = thresh,name,_check_score(score, name)
    def _batch(self, learn, pred, y, bs):
        pos,bad = _positives(y, self.thresh)
        return self._scores(learn, pred), pos, bad
    def _compute(self, scores, pos): return roc_auc(scores, pos)

class LogLoss(DeviceMetric):
    """Mean binary log loss on the device (sklearn's `log_loss` on the probabilities). `logits=None`: the outputs are
    logits when the loss says so (CrossEntropy, BCEWithLogits), else probabilities (a sigmoid output)."""
    def __init__(self, logits:bool|None=None, name='log_loss'): self.logits,self._name = logits,name
    def _batch(self, learn, pred, y, bs):
        pos,bad = _positives(y, None)
        logits = _is_logits(learn.loss_func) if self.logits is None else self.logits
        loss = _row_log_loss(pred, pos, logits, self._name)
        return loss.sum(dtype=torch.float64).view(1), loss.new_full((1,), bs, dtype=torch.float64), bad
    def _compute(self, total, count): return float(total.sum() / count.sum())

def group_position(to, name) -> int:
    "The column of cat `name` in a batch's `x_cat` of `to` (a TabularGPU's multi-hot columns take several)."
    names = list(getattr(to, 'cat_names', []))
    if name not in names: raise ValueError(f"group column {name!r} is not one of the cat columns {names}")
    start,stop = cat_spans(cat_widths(to))[names.index(name)]
    if stop - start != 1: raise ValueError(f"group column {name!r} is multi-hot: a group is one value per row")
    return start

class RankMetric(DeviceMetric):
    """A per-group ranking metric (see `rank_metrics`): keeps each batch's scores, positives and group codes. `score`:
    `'preds'` ranks what `get_preds` returns, `'margin'` the logits (see the module's docstring)."""
    def __init__(self, group:str, k:int|None, thresh, name, score):
        if not isinstance(group, str): raise ValueError(f"{name} needs group=, the name of a cat column (user/session)")
        if k is not None and (not isinstance(k, int) or k < 1):
            raise ValueError(f"{name}: k must be a positive int, got {k!r}")
        self.group,self.k,self.thresh = group,k,thresh
        self._name,self._pos = name,{}
        self.score = _check_score(score, name)
        self.n_groups,self.n_skipped = None,None   # how many groups the last value averaged over, and left out

    def check_dls(self, dls):
        "Fail now, not after an epoch, if the group column is not a single cat column of `dls`."
        group_position(dls.train_ds, self.group)

    def _batch(self, learn, pred, y, bs):
        to = getattr(getattr(learn, 'dl', None), 'dataset', None)
        if not hasattr(to, 'cat_names'): to = learn.dls.train_ds
        key = tuple(to.cat_names)
        if key not in self._pos: self._pos[key] = group_position(to, self.group)
        pos,bad = _positives(y, self.thresh)
        g = learn.xb[0][:bs, self._pos[key]].clone()   # a copy: a view would keep the batch's whole x_cat alive
        return self._scores(learn, pred), pos, g, bad

    def _compute(self, scores, pos, groups):
        res = rank_metrics(scores, pos, groups, self.k, (self._key,))
        self.n_groups,self.n_skipped = res['n_groups'],res['n_skipped']
        return res[self._key]

class MRR(RankMetric):
    "Mean reciprocal rank of the first relevant row per group (`k`: 0 past the first k)."
    _key = 'mrr'
    def __init__(self, group:str=None, k:int|None=None, thresh=None, name=None, score='preds'):
        super().__init__(group, k, thresh, name or ('mrr' if k is None else f'mrr@{k}'), score)

class NDCG(RankMetric):
    "Mean NDCG@k per group, binary relevance, gain 1 and discount 1/log2(rank + 1)."
    _key = 'ndcg'
    def __init__(self, k:int|None=10, group:str=None, thresh=None, name=None, score='preds'):
        super().__init__(group, k, thresh, name or ('ndcg' if k is None else f'ndcg@{k}'), score)

class HitRate(RankMetric):
    "Share of groups with a relevant row in their top k."
    _key = 'hit_rate'
    def __init__(self, k:int=10, group:str=None, thresh=None, name=None, score='preds'):
        if k is None: raise ValueError("HitRate needs k (a cut-off)")
        super().__init__(group, k, thresh, name or f'hit_rate@{k}', score)
