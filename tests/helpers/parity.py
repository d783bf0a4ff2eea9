"Shared checks: `TabularGPU` against fastai's own `TabularPandas` built with the same arguments."
import numpy as np
import pandas as pd
import torch
from fastai.tabular.all import TabularPandas, get_emb_sz
from fastai_gpu_tabular.all import TabularGPU
from fastai_gpu_tabular.backend import to_pandas

def build_both(df, backend='pandas', **kwargs):
    """The same frame and arguments through fastai's TabularPandas and our TabularGPU (on `backend`).
    `procs` may be a function returning the list, for proc instances (each side needs its own: they hold state)."""
    copy = lambda: {k: (v() if k == 'procs' and callable(v) else list(v) if isinstance(v, list) else v)
                    for k,v in kwargs.items()}   # fresh lists: fastai appends to the caller's cat_names
    ref = TabularPandas(df.copy(), **copy())
    ours = TabularGPU(df, backend=backend, **copy())
    return ref, ours

def _vals(s): return to_pandas(s).to_numpy()

def assert_same_processing(ref, ours, exact=True):
    """Identical vocabularies, codes, fill values, `_na` columns and y; equal stats; conts within 1e-6.
    `exact=False` (cuDF) allows float rounding differences in the stats (its reductions accumulate differently)."""
    items = to_pandas(ours.items)
    assert list(ours.cat_names) == list(ref.cat_names)   # includes the `_na` columns FillMissing appends
    assert list(ours.cont_names) == list(ref.cont_names)
    assert list(items.index) == list(ref.items.index)    # same row order: train rows first
    for n in ref.cat_names:
        assert list(ours.classes[n].items) == list(ref.classes[n].items), n
        assert [type(o) for o in ours.classes[n].items] == [type(o) for o in ref.classes[n].items], n
        np.testing.assert_array_equal(_vals(items[n]), ref.items[n].to_numpy(), err_msg=n)
    assert get_emb_sz(ours) == get_emb_sz(ref)
    if 'na_dict' in dir(ref.procs):
        assert list(ours.na_dict) == list(ref.na_dict)
        for k,v in ref.na_dict.items():
            assert (ours.na_dict[k] == v) if exact else np.isclose(ours.na_dict[k], v, rtol=1e-6), k
            assert type(ours.na_dict[k]) == type(v), k
        assert ours.fill_strategy == ref.fill_strategy
    if 'means' in dir(ref.procs):
        for j,(d_ours, d_ref) in enumerate(((ours.means, ref.means), (ours.stds, ref.stds))):
            assert list(d_ours) == list(d_ref)
            for k in d_ref:
                assert type(d_ours[k]) == type(d_ref[k]), k
                if exact: assert d_ours[k] == d_ref[k], k
                else: assert abs(float(d_ours[k]) - float(d_ref[k])) <= _stat_bounds(ref, k)[j], k
    for n in ref.cont_names:
        got, want = _vals(items[n]).astype(np.float32), ref.items[n].to_numpy().astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=_cont_atol(ref, n, want, exact), err_msg=n)
    for n in ref.y_names:
        np.testing.assert_array_equal(_vals(items[n]), ref.items[n].to_numpy(), err_msg=n)
    assert ours.c == ref.c and type(ours.loss_func) == type(ref.loss_func)
    if hasattr(ref.procs, 'vocab'): assert list(ours.vocab.items) == list(ref.vocab.items)

def _stat_bounds(ref, n) -> tuple:
    """`(d_mean, d_std)`: how far cuDF's mean and std of fastai's cont `n` may be from pandas'. pandas sums a column in
    its dtype (float32 for fastai's shrunk floats, whatever the stats' type: NumPy's pairwise sum, within
    (log2(rows) + 1) eps32 of the sum of |x|) and rounds the mean, and its std is float64 inside, then rounded; cuDF
    reduces in float64, then rounds as pandas does. So mean within (log2(rows) + 1) eps32 mean|x| plus a rounding,
    eps |mean|; std within a rounding and a float64 reduction's error. `x`: the training rows' values, rebuilt from
    fastai's normalized ones."""
    m, s = float(ref.means[n]), float(ref.stds[n])
    eps = float(np.finfo(np.float32).eps)   # the column's dtype is gone once normalized: float32's bounds both
    z = ref.train.items[n].to_numpy(dtype='f8')
    steps = np.log2(max(len(z), 2)) + 1
    mean_abs = float(np.abs(z * s + m).mean()) if len(z) else abs(m)
    return steps * eps * mean_abs + eps * abs(m), (eps + steps * np.finfo('f8').eps) * s

def _cont_atol(ref, n, z, exact) -> float:
    """How far a normalized cont `z = (x-mean)/std` may be from fastai's when the stats are not computed alike
    (`_stat_bounds`): d_mean/std + |z| d_std/std, and 1e-6 for the float32 casts of the comparison. Exact (pandas
    against pandas): 1e-6."""
    if exact or n not in (getattr(ref, 'means', None) or {}): return 1e-6
    d_mean, d_std = _stat_bounds(ref, n)
    s = float(ref.stds[n])
    return 1e-6 + d_mean / s + float(np.abs(z).max()) * d_std / s

def cont_atol(ref, exact=True, items=None, names=None) -> float:
    """The largest `_cont_atol` of `ref`'s conts `names` (all) over the normalized rows of `items` (`ref.items`): what
    batches' conts may differ by (1e-6 where `exact`)."""
    items = ref.items if items is None else items
    return max([_cont_atol(ref, n, items[n].to_numpy(), exact) for n in names or ref.cont_names], default=1e-6)

def assert_same_batches(ref_dl, ours_dl, atol=1e-6):
    """fastai's ReadTabBatch tuple and ours, over a whole unshuffled loader: same cats, conts within 1e-6 relative and
    `atol` (see `cont_atol`), same y."""
    ref_b = [b for b in ref_dl]
    ours_b = [b for b in ours_dl]
    assert len(ref_b) == len(ours_b)
    for rb, ob in zip(ref_b, ours_b):
        assert len(rb) == len(ob)
        assert ob[0].dtype in (np.int32, np.int64) or str(ob[0].dtype) in ('torch.int32', 'torch.int64')
        np.testing.assert_array_equal(ob[0].cpu().numpy(), rb[0].cpu().numpy())
        np.testing.assert_allclose(ob[1].cpu().numpy(), rb[1].cpu().numpy(), rtol=1e-6, atol=atol)
        if len(rb) > 2:
            np.testing.assert_array_equal(ob[2].cpu().numpy(), rb[2].cpu().numpy().astype(ob[2].cpu().numpy().dtype))

# fastai 2.8's TabDataLoader fails on pandas 3: its ReadTabBatch does `tensor(df[cols].values)`, and pandas 3 returns a
# view of a block there, with negative strides where the columns sit in reverse order ("tensors with negative strides
# are not currently supported"). Its processed frame is right, so on pandas 3 the reference batches come from that.
FASTAI_LOADER_WORKS = int(pd.__version__.split('.')[0]) < 3

def fastai_valid_batches(ref, bs):
    "fastai's unshuffled validation batches of `ref`; on pandas 3, ReadTabBatch's tuples made from its processed frame."
    if FASTAI_LOADER_WORKS: return list(ref.dataloaders(bs=bs, shuffle=False).valid)
    v, ys = ref.valid, [n for n in ref.y_names if n in ref.items.columns]
    t = lambda df: torch.from_numpy(np.ascontiguousarray(df.to_numpy()))   # fastai's `tensor(df.values)`, copied
    def batch(rows):   # ReadTabBatch.encodes: (tensor(to.cats).long(), tensor(to.conts).float()[, tensor(to.targ)])
        b = t(rows[list(v.cat_names)]).long(), t(rows[list(v.cont_names)]).float()
        return b + ((t(rows[ys]),) if ys else ())
    return [batch(v.items.iloc[i:i+bs]) for i in range(0, len(v.items), bs)]
