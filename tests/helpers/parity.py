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
        for d_ours, d_ref in ((ours.means, ref.means), (ours.stds, ref.stds)):
            assert list(d_ours) == list(d_ref)
            for k in d_ref:
                assert type(d_ours[k]) == type(d_ref[k]), k
                assert (d_ours[k] == d_ref[k]) if exact else np.isclose(d_ours[k], d_ref[k], rtol=1e-6), k
    for n in ref.cont_names:
        np.testing.assert_allclose(_vals(items[n]).astype(np.float32), ref.items[n].to_numpy().astype(np.float32),
                                   rtol=1e-6, atol=1e-6, err_msg=n)
    for n in ref.y_names:
        np.testing.assert_array_equal(_vals(items[n]), ref.items[n].to_numpy(), err_msg=n)
    assert ours.c == ref.c and type(ours.loss_func) == type(ref.loss_func)
    if hasattr(ref.procs, 'vocab'): assert list(ours.vocab.items) == list(ref.vocab.items)

def assert_same_batches(ref_dl, ours_dl):
    "fastai's ReadTabBatch tuple and ours, over a whole unshuffled loader: same cats, conts within 1e-6, same y."
    ref_b = [b for b in ref_dl]
    ours_b = [b for b in ours_dl]
    assert len(ref_b) == len(ours_b)
    for rb, ob in zip(ref_b, ours_b):
        assert len(rb) == len(ob)
        assert ob[0].dtype in (np.int32, np.int64) or str(ob[0].dtype) in ('torch.int32', 'torch.int64')
        np.testing.assert_array_equal(ob[0].cpu().numpy(), rb[0].cpu().numpy())
        np.testing.assert_allclose(ob[1].cpu().numpy(), rb[1].cpu().numpy(), rtol=1e-6, atol=1e-6)
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
