"`tabular_learner`: fastai's, plus multi-hot columns, sparse tables for huge IDs, and a fused embedding lookup."
from __future__ import annotations

from fastai.data.core import DataLoaders
from fastai.data.transforms import get_c
from fastai.learner import Learner
from fastai.optimizer import Adam
from fastai.tabular.learner import TabularLearner
from fastai.tabular.model import get_emb_sz, tabular_config
from fastcore.foundation import L
from fastcore.meta import delegates

from ..backend import is_polars, to_backend
from ..extras import pickled_by_lookup
from .model import TabularModelGPU
from .optimizer import sparse_opt

__all__ = ['TabularLearnerGPU', 'tabular_learner']

class TabularLearnerGPU(TabularLearner):
    "fastai's `TabularLearner`, whose `predict` also takes a Polars row: a one-row Polars DataFrame, as `pl_df[i]` is"
    def predict(self, row):
        if is_polars(row):   # fastai's predict calls `row.to_frame()`: a pandas row, read as a Polars frame is
            df = to_backend(row, 'pandas')
            if len(df) != 1: raise ValueError(f"predict takes one row, not a Polars frame of {len(df)} rows: use "
                                              "`learn.dls.test_dl(df)` and `learn.get_preds(dl=...)` for many")
            row = df.iloc[0]
        return super().predict(row)

    def __reduce_ex__(self, protocol): return pickled_by_lookup(self, super().__reduce_ex__(2))

def sparse_columns(to, sparse) -> list:
    "Indices of the cat columns to give sparse gradients: `sparse` names them, or is a table size above which all are."
    if sparse is None or sparse is False: return []
    if isinstance(sparse, bool): return list(range(len(to.cat_names)))
    if isinstance(sparse, int): return [i for i,n in enumerate(to.cat_names) if len(to.classes[n]) > sparse]
    bad = [n for n in L(sparse) if n not in to.cat_names]
    if bad: raise ValueError(f"sparse names {bad}, which are not cat columns {list(to.cat_names)}")
    return [i for i,n in enumerate(to.cat_names) if n in L(sparse)]

def shared_tables(to) -> dict:
    "{cat index: the first cat index of its group} of Categorify's `joint` groups, which share one embedding table."
    names, res = list(to.cat_names), {}
    for p in getattr(to.procs, 'fs', []):
        for g in getattr(p, 'joint', None) or []:
            for n in g[1:]: res[names.index(n)] = names.index(g[0])
    return res

@delegates(Learner.__init__)
def tabular_learner(dls:DataLoaders, layers:list=None, emb_szs:dict|int=None, config:dict=None, n_out:int=None,
                    y_range=None,
                    sparse=None, # cat names, True (all), or a table size: tables above it get sparse gradients
                    # one fused weight per embedding width: one lookup kernel instead of one per column
                    fused:bool=False,
                    bag_mode:str='mean', # how a multi-hot column's element embeddings combine: 'mean' or 'sum'
                    sparse_lr_mult:float=1., # the sparse tables' learning rate, as a multiple of the dense one
                    **kwargs) -> TabularLearnerGPU:
    """fastai's `tabular_learner` (same signature and defaults) building `TabularModelGPU`: multi-hot columns become
    embedding bags, `sparse` tables get sparse gradients (and the optimizer a sparse update for them, behind the same
    fastai optimizer), `fused` looks all tables up at once. `emb_szs` may also be an int: every table that wide."""
    if config is None: config = tabular_config()
    if layers is None: layers = [200, 100]
    to = dls.train_ds
    if isinstance(emb_szs, int): emb_szs = {n: emb_szs for n in to.cat_names}
    emb_szs = get_emb_sz(to, {} if emb_szs is None else emb_szs)
    shared = shared_tables(to)
    for i,j in shared.items(): emb_szs[i] = emb_szs[j]   # a joint group's table: its first column's size
    if n_out is None: n_out = get_c(dls)
    assert n_out, "`n_out` is not defined, and could not be inferred from data, set `dls.c` or pass `n_out`"
    if y_range is None and 'y_range' in config: y_range = config.pop('y_range')
    widths = getattr(to, 'bag_widths', {})   # the multi-hot columns (a TabularGPU's; none for TabularPandas)
    bags = {i: widths[n] for i,n in enumerate(to.cat_names) if n in widths}
    sparse = sparse_columns(to, sparse)
    if fused and sparse: sparse = list(range(len(to.cat_names)))   # one weight: all sparse
    model = TabularModelGPU(emb_szs, len(dls.cont_names), n_out, layers, y_range=y_range, bags=bags, sparse=sparse,
                            fused=fused, bag_mode=bag_mode, shared=shared, **config)
    if sparse: kwargs['opt_func'] = sparse_opt(kwargs.get('opt_func', Adam), sparse_lr_mult=sparse_lr_mult)
    learn = TabularLearnerGPU(dls, model, **kwargs)
    for m in learn.metrics:   # a ranking metric's group column: checked now, not after a training epoch
        if hasattr(m, 'check_dls'): m.check_dls(dls)
    return learn
