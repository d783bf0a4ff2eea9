"""rows/pack.py: the packed rows of a processed Tabular hold fastai's own values (`TabularPandas` on Adult) where
`Layout` says, are read back as views, rebuild the frame; `pad_bags` pads as a row-by-row loop does; bad frames get
clear errors. Multi-hot blocks and their over-long lists are tested with the rest of multi-hot, in test_multi_hot.py."""
import pickle
import numpy as np
import pandas as pd
import pytest
import torch
from fastai.tabular.all import (
    Categorify,
    FillMissing,
    Normalize,
    RandomSplitter,
    RegressionBlock,
    TabularPandas,
    range_of,
)
from fastai_gpu_tabular.all import BatchDataLoader, TabularGPU
from fastai_gpu_tabular.backend import pad_bags, to_pandas
from fastai_gpu_tabular.datasets import load_adult
from fastai_gpu_tabular.rows.pack import (
    Layout,
    ReleasedFrame,
    gather_rows,
    pack_rows,
    packs_whole,
    unpack_frame,
    unpack_rows,
    y_dtype,
)

PROCS = [Categorify, FillMissing, Normalize]
CATS = ['workclass', 'education', 'occupation', 'native-country']
CONTS = ['age', 'fnlwgt', 'hours-per-week']

@pytest.fixture(scope='module')
def adult():
    "5,000 rows of Adult, with NaN put in `age` every 7th row so that FillMissing adds `age_na`."
    df = load_adult().iloc[:5000].reset_index(drop=True)
    df['age'] = df['age'].astype('float64')
    df.loc[::7, 'age'] = np.nan
    return df

def both(df, as_backend, **kw):
    "fastai's TabularPandas and our TabularGPU of `df`, with the same procs, names and splits."
    kw = {'procs': PROCS, 'cat_names': CATS, 'cont_names': CONTS, 'y_names': 'income',
          'splits': RandomSplitter(seed=0)(range_of(df))} | kw
    fresh = lambda: {k: list(v) if isinstance(v, list) else v for k,v in kw.items()}   # fastai appends to cat_names
    return TabularPandas(df.copy(), **fresh()), TabularGPU(as_backend(df), **fresh())

def n_cols(t:torch.Tensor) -> int: return t.shape[1]

def assert_holds(ref, sub):
    "The packed rows of `sub` hold `ref`'s cat codes, its conts as float32 and its targets, row by row."
    cats,conts,*ys = unpack_rows(*pack_rows(sub))
    assert torch.equal(cats.cpu().long(), torch.as_tensor(ref.cats.to_numpy(np.int64)))
    assert torch.equal(conts.cpu(), torch.as_tensor(ref.conts.to_numpy(np.float32)))
    assert torch.equal(ys[0].cpu(), torch.as_tensor(ref.ys.to_numpy()).to(ys[0].dtype))

def test_rows_hold_fastais_values_where_the_layout_says(adult, as_backend):
    """Class targets first, as int64 in two int32 columns; then the cat codes; then the conts' float32 bits; an odd
    row padded to an even width so that the int64 stays 8-byte aligned. Train and valid rows equal fastai's."""
    ref, to = both(adult, as_backend)
    assert to.cat_names == ref.cat_names == [*CATS, 'age_na']
    nc, nf = len(to.cat_names), len(CONTS)
    rows, layout = pack_rows(to)
    assert isinstance(layout, Layout) and y_dtype(to) == torch.int64
    assert layout.ys == (0, 2, torch.int64) and layout.cats == (2, 2 + nc, torch.int32)
    assert layout.conts == (2 + nc, 2 + nc + nf, torch.float32)
    assert rows.dtype == torch.int32 and rows.is_contiguous() and rows.shape == (len(adult), 2 + nc + nf)   # even
    for r, s in ((ref.train, to.train), (ref.valid, to.valid)): assert_holds(r, s)
    odd, _ = pack_rows(both(adult, as_backend, cont_names=CONTS[:2])[1])             # 2 + 5 + 2 columns: one pad
    assert odd.shape == (len(adult), 2 + nc + 2 + 1) and (odd[:, -1] == 0).all()

def test_float_targets_take_one_column_and_no_pad(adult, as_backend):
    "A regression target packs as float32 in one column, fastai's value; no pad column is needed."
    ref, to = both(adult, as_backend, cont_names=['age', 'fnlwgt'], y_names='hours-per-week',
                   y_block=RegressionBlock())
    nc = len(to.cat_names)
    rows, layout = pack_rows(to)
    assert y_dtype(to) == torch.float32 and layout.ys == (0, 1, torch.float32) and n_cols(rows) == 1 + nc + 2
    for r, s in ((ref.train, to.train), (ref.valid, to.valid)): assert_holds(r, s)

def test_gather_rows_slices_are_views_and_indices_gather(adult, as_backend):
    _, to = both(adult, as_backend)
    rows, layout = pack_rows(to)
    cats, conts, ys = gather_rows(rows, layout, slice(10, 20))
    assert cats.untyped_storage().data_ptr() == rows.untyped_storage().data_ptr() == ys.untyped_storage().data_ptr()
    idx = torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))[:64].to(rows.device)
    for got, whole in zip(gather_rows(rows, layout, idx), unpack_rows(rows, layout)):
        assert torch.equal(got, whole[idx])
    assert len(gather_rows(rows, layout.without_ys(), idx)) == 2

def test_layout_round_trips(adult):
    "A Layout survives JSON (saved Tabulars) and pickle (exported learners) as a Layout; a plain tuple reads as one."
    _, to = both(adult, lambda d: d)
    layout = pack_rows(to)[1]
    for back in (Layout.from_json(layout.to_json()), pickle.loads(pickle.dumps(layout)), Layout(tuple(layout))):
        assert isinstance(back, Layout) and back == layout and back.ys == layout.ys

def test_unpack_frame_rebuilds_the_processed_frame(adult, as_backend):
    "`packs_whole` frames come back from their rows with their dtypes and index, the conts as the float32 batches hold."
    _, to = both(adult, as_backend)
    assert packs_whole(to)
    rows, layout = pack_rows(to)
    want = to_pandas(to.items)
    got = to_pandas(unpack_frame(rows, layout, (to.cat_names, to.cont_names, to.y_names), ReleasedFrame.of(to.items)))
    want[CONTS] = want[CONTS].astype(np.float32).astype(want[CONTS].dtypes)
    pd.testing.assert_frame_equal(got, want)

def test_what_packs_whole(adult):
    "Not whole: an integer cont or an integer regression target (float32 would round them), a column not named."
    assert not packs_whole(both(adult, lambda d: d, procs=[Categorify, FillMissing])[1])       # fnlwgt stays int64
    assert not packs_whole(both(adult, lambda d: d, cont_names=['age', 'fnlwgt'], y_names='hours-per-week',
                                y_block=RegressionBlock())[1])
    to = both(adult, lambda d: d)[1]
    to.items['extra'] = 0
    assert not packs_whole(to)

def test_pad_bags_matches_a_loop():
    "Rows of 0 to 9 elements, padded (or cut) to widths below, at and above the longest, against a Python loop."
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(0, 10, (200,), generator=g)
    codes = torch.randint(1, 1000, (int(lens.sum()),), generator=g, dtype=torch.int32)
    starts = (torch.cumsum(lens, 0) - lens).tolist()
    for width in (1, 4, int(lens.max()), 12):
        for pad in (-1, 0):
            want = [(codes[s:s + n].tolist() + [pad] * width)[:width] for s, n in zip(starts, lens.tolist())]
            got = pad_bags(codes, lens, width, pad=pad)
            assert got.dtype == codes.dtype and got.tolist() == want
    assert pad_bags(codes[:0], lens[:0], 3).shape == (0, 3)

def test_unprocessed_data_cannot_be_packed(adult, as_backend):
    "A Tabular whose procs did not run holds strings where codes go: the error names the column and what to call."
    _, to = both(adult, as_backend)
    raw = to.new(as_backend(adult.iloc[:50]))
    with pytest.raises(TypeError, match=r"cat column 'workclass' holds .* not codes: call `process\(\)`"):
        BatchDataLoader(raw, bs=8)

def test_nan_set_after_process_is_named(adult, as_backend):
    "A cont set to NaN or inf after `process()` (the model cannot take it): an error naming the columns, at packing."
    _, to = both(adult, as_backend)
    sub = to.valid
    conts = to_pandas(sub.conts).copy()
    conts.iloc[3, 1] = np.nan
    conts.iloc[5, 2] = np.inf
    sub.conts = as_backend(conts)
    with pytest.raises(ValueError, match=r"\['fnlwgt', 'hours-per-week'\] hold NaN or \+-inf.*call `process\(\)`"):
        pack_rows(sub)
    _, bare = both(adult.dropna(), as_backend, procs=[Categorify, Normalize])
    conts = to_pandas(bare.conts).copy()
    conts.iloc[0, 0] = np.nan
    bare.conts = as_backend(conts)
    with pytest.raises(ValueError, match=r"\['age'\] hold NaN or \+-inf.*add FillMissing to procs"): pack_rows(bare)

def test_multi_hot_needs_categorify(adult):
    "A multi-hot column packs as codes of Categorify's vocabulary: without Categorify, an error naming it."
    df = adult.assign(tags=adult.occupation.fillna('').str.split('-'))
    to = TabularGPU(df, procs=[FillMissing, Normalize], cat_names=['tags'], cont_names=CONTS, y_names='income',
                    multi_hot=['tags'])
    with pytest.raises(ValueError, match=r"multi-hot column 'tags' needs Categorify in procs"): pack_rows(to)
