"""The cuDF path: each fix of the source review against what pandas or fastai give on the same data, the
no-sync hot path, and the processed frame released once packed. `backend` tests run on pandas here and on cuDF too
where CUDA and cuDF are; `gpu` tests need both; the rest check, on pandas, the logic the cuDF path shares."""
import json
import pickle
import subprocess
import sys
import warnings
from pathlib import Path
import numpy as np
import pandas as pd
import pytest
import torch
from fastai.tabular.all import (
    Categorify,
    ClassificationInterpretation,
    ColSplitter,
    CrossEntropyLossFlat,
    FillMissing,
    FillStrategy,
    Normalize,
    RandomSplitter,
    TabularDataLoaders,
    TabularModel,
    TabularPandas,
    default_device,
    get_emb_sz,
    load_learner,
    range_of,
    set_seed,
    tabular_learner,
)
from helpers.fake_cudf import parse_float
from helpers.parity import assert_same_processing, build_both, cont_atol
import fastai_gpu_tabular.core as fgc
import fastai_gpu_tabular.ops.procs as fgp
from fastai_gpu_tabular.all import BatchDataLoader, BatchDataLoaders, Lamb, TabularGPU
from fastai_gpu_tabular.backend import (
    backend_of,
    codes_dtype,
    col_to_tensor,
    encode_codes,
    frame_device,
    is_cudf,
    mode_value,
    read_csv,
    require_cudf,
    sorted_uniques,
    split_lists,
    to_backend,
    to_pandas,
)
from fastai_gpu_tabular.bench.contender import held_memory
from fastai_gpu_tabular.datasets import load_adult, load_flights, load_movielens

PROCS = [Categorify, FillMissing, Normalize]
CATS, CONTS = ['carrier', 'origin', 'dest', 'tailnum'], ['dep_time', 'sched_dep_time', 'dep_delay', 'distance', 'hour']

def flights(n=30_000):
    "Real flights with NaN in the times and delays, and a bool label."
    df = load_flights(nrows=n)
    df['jfk'] = df.origin == 'JFK'
    return df

def rows_of_split(n, seed=0): return RandomSplitter(seed=seed)(range_of(n))

# --- FillMissing(mode): cuDF has no Series.idxmax; ties as pandas breaks them -----------------------------------------
def test_mode_value_is_fastais_mode():
    "The counting `mode_value` does on cuDF, run on pandas: fastai's `value_counts().idxmax()`, ties included."
    rng = np.random.default_rng(0)
    ties = not_first = 0
    for _ in range(300):
        n, k = int(rng.integers(5, 300)), int(rng.integers(1, 30))
        vals = rng.choice((rng.normal(size=k) * 100).round(1), size=n)
        vals[rng.random(n) < 0.2] = np.nan
        col = pd.Series(vals.astype(rng.choice(['float64', 'float32'])))
        ref = FillStrategy.mode(col, 0)
        got = mode_value(col)
        assert got == ref and type(got) == type(ref)
        vc = col.value_counts(sort=False)   # in order of first appearance
        if (vc == vc.max()).sum() > 1:
            ties += 1
            not_first += ref != vc[vc == vc.max()].index[0]
    assert ties > 30   # the sample does exercise ties
    # before pandas 3, value_counts sorts with NumPy's quicksort: some ties do not go to the first value to appear
    if int(pd.__version__.split('.')[0]) < 3: assert not_first > 0
    else: assert not_first == 0
    assert mode_value(pd.Series([np.nan, np.nan])) is None

def test_fillmissing_mode_with_ties(backend):
    "Real delays where the two most frequent values tie in the training rows: fastai's fill value, on each backend."
    df = flights()
    splits = rows_of_split(len(df))
    train = np.asarray(splits[0])
    for c in ['dep_delay', 'dep_time']:
        vc = df[c].iloc[train].value_counts()
        extra = vc.iloc[0] - vc.iloc[1]   # the excess of the top value: made missing, so the top two tie
        rows = train[(df[c].iloc[train] == vc.index[0]).to_numpy()][:extra]
        df.loc[rows, c] = np.nan
        vc = df[c].iloc[train].value_counts()
        assert vc.iloc[0] == vc.iloc[1]
    procs = lambda: [Categorify, FillMissing(fill_strategy=FillStrategy.mode), Normalize]
    ref, ours = build_both(df, backend, procs=procs, cat_names=CATS, cont_names=CONTS, y_names='jfk', splits=splits)
    assert ours.fill_strategy == 'mode'
    assert_same_processing(ref, ours, exact=backend == 'pandas')

# --- encode_codes: pandas' signed codes on every cuDF; categorical columns remapped -----------------------------------
def test_codes_dtype_is_pandas():
    for n in (0, 1, 126, 127, 128, 32766, 32767, 40000):
        assert codes_dtype(n) == pd.Categorical.from_codes([], categories=range(n)).codes.dtype, n

@pytest.mark.parametrize('k', [100, 200, 300])
@pytest.mark.parametrize('categorical', [False, True])
@pytest.mark.parametrize('add', [0, 1])
def test_encode_codes_is_pandas_categorical(k, categorical, add, backend):
    """Codes of real tail numbers (NaN, and values outside the vocab) against `pd.Categorical(col, vocab).codes + add`:
    vocabs of 100, 200 and 300 values (int8 and int16 codes in pandas; uint8 and uint16 in cuDF before 26.10, where
    an unseen value got the largest code and `fillna(-1)` failed). As a category column, the 3,000-odd categories shrink
    to the vocab (cuDF's `astype` sized those codes for the old categories, and failed)."""
    col = load_flights(nrows=20_000).tailnum
    vocab = sorted(col.iloc[:5000].dropna().unique())[:k]
    if categorical: col = col.astype('category')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')   # pandas 3 deprecates values outside the categories: it is our reference here
        ref = pd.Categorical(col, categories=vocab).codes + np.int8(add)
    with warnings.catch_warnings():
        warnings.simplefilter('error', DeprecationWarning)   # ours takes no deprecated path (pandas 3's Pandas4Warning)
        warnings.simplefilter('error', FutureWarning)
        got = encode_codes(to_backend(col.to_frame(), backend)['tailnum'], vocab, add=add)
    got = to_pandas(got)
    assert got.dtype == ref.dtype == codes_dtype(k)
    np.testing.assert_array_equal(got.to_numpy(), ref)
    assert (got.to_numpy() == add - 1).sum() > 0 and got.index.equals(col.index)

def test_unseen_label_with_many_classes(backend):
    "A validation label unseen in training, among 200 classes (uint8 codes on cuDF 26.06): our error, not a TypeError."
    df = flights()
    df['y'] = df.tailnum.fillna('none')
    top = df.y.value_counts().index[:200]
    df = df[df.y.isin(top)].reset_index(drop=True)
    df.loc[len(df) - 3:, 'y'] = 'never-seen'
    splits = (list(range(len(df) - 3)), list(range(len(df) - 3, len(df))))
    with pytest.raises(ValueError, match=r"target column 'y' has labels not seen in the training rows, e.g. \['never"):
        TabularGPU(df, procs=PROCS, cat_names=['carrier'], cont_names=['distance'], y_names='y', splits=splits,
                   backend=backend)

def test_max_vocab_on_a_category_column(backend):
    """`Categorify(max_vocab=200)` on real tail numbers cast to category over all rows (fastai's `df_shrink`): 3,000-odd
    categories (int16/uint16 codes) shrink to 200. Reference: fastai on the same frame with the others made missing."""
    df = flights()
    splits = rows_of_split(len(df))
    vc = df.tailnum.iloc[splits[0]].value_counts()
    keep = sorted(vc.index, key=lambda v: (-vc[v], v))[:200]   # the most frequent; ties go to the earlier value
    ours = TabularGPU(df, procs=[fgp.Categorify(max_vocab=200)], cat_names=['tailnum'], cont_names=['distance'],
                      y_names='jfk', splits=splits, backend=backend)
    assert isinstance(to_pandas(ours.items.tailnum).dtype, np.dtype)
    ref = TabularPandas(df.assign(tailnum=df.tailnum.where(df.tailnum.isin(keep))), procs=[Categorify],
                        cat_names=['tailnum'], cont_names=['distance'], y_names='jfk', splits=splits,
                        reduce_memory=False)
    assert list(ours.classes['tailnum']) == list(ref.classes['tailnum']) == ['#na#', *sorted(keep)]
    np.testing.assert_array_equal(to_pandas(ours.items.tailnum).to_numpy(), ref.items.tailnum.to_numpy())

# --- gather_columns: category casts over all rows, before the splits' gather ------------------------------------------
def test_category_vocab_from_rows_the_splits_leave_out(backend):
    "fastai's df_shrink casts to category before `df.iloc[splits]`: values of rows in no split are in the vocab."
    df = load_adult()
    rare = df['native-country'].value_counts().index[-1]   # a country of one row: left out of both splits
    out = set(np.flatnonzero(df['native-country'] == rare)) | set(range(0, len(df), 5))
    rest = [i for i in range(len(df)) if i not in out]
    splits = (rest[:int(len(rest) * .8)], rest[int(len(rest) * .8):])
    ref, ours = build_both(df, backend, procs=PROCS, cat_names=['workclass', 'education', 'native-country'],
                           cont_names=['age', 'hours-per-week'], y_names='income', splits=splits)
    assert rare in ref.classes['native-country']
    assert_same_processing(ref, ours, exact=backend == 'pandas')

# --- object bools with NaN: `cudf.from_pandas` makes them a bool column -----------------------------------------------
@pytest.mark.parametrize('nan_in', ['all_rows', 'valid_rows'])
@pytest.mark.parametrize('reduce_memory', [True, False])
def test_object_bools_with_missing_values(nan_in, reduce_memory, backend):
    "A cat column of Python bools and NaN (late or not; NaN where the flight has no arrival): fastai's vocab of `bool`."
    df = flights()
    df['late'] = pd.Series(list(df.arr_delay > 15), dtype=object).where(df.arr_delay.notna())
    nan_rows = np.flatnonzero(df.late.isna())
    if nan_in == 'valid_rows':   # the training rows hold no NaN: the column's type comes from all rows
        other = np.setdiff1d(np.arange(len(df)), nan_rows)
        splits = (list(other[:20_000]), list(other[20_000:]) + list(nan_rows))
    else: splits = rows_of_split(len(df))
    ref, ours = build_both(df, backend, procs=PROCS, cat_names=['carrier', 'late'], cont_names=['distance'],
                           y_names='jfk', splits=splits, reduce_memory=reduce_memory)
    assert [type(v) for v in ref.classes['late'][1:]] == [bool, bool]
    assert_same_processing(ref, ours, exact=backend == 'pandas')

# --- split_lists: a multi-character separator is a literal, not a regex -----------------------------------------------
def test_split_lists_multi_char_separator(backend):
    "MovieLens genres joined with '||' (as a regex: two empty alternatives): split as Python's str.split does."
    df = load_movielens().iloc[:5000]
    df['genres'] = df.genres.str.replace('|', '||', regex=False)
    got = to_pandas(split_lists(to_backend(df, backend)['genres'], '||'))
    assert [list(v) for v in got] == [s.split('||') for s in df.genres]
    to = TabularGPU(df, procs=[Categorify], cat_names=['genres', 'userId'], cont_names=['year'], y_names='rating',
                    multi_hot={'genres': '||'}, backend=backend)
    assert list(to.classes['genres'])[1:] == sorted({g for s in df.genres for g in s.split('||')})

# --- from_csv: skipinitialspace on cuDF too ---------------------------------------------------------------------------
def test_from_csv_skips_initial_spaces(backend, tmp_path):
    "Adult written as UCI ships it (', ' between fields): the vocab fastai's `from_csv` reads, without leading spaces."
    df = load_adult().iloc[:3000]
    path = tmp_path/'adult.csv'
    head, body = df.to_csv(index=False).split('\n', 1)
    path.write_text(head + '\n' + body.replace(',', ', '))
    kw = dict(procs=PROCS, cat_names=['workclass', 'education', 'occupation'], cont_names=['age', 'hours-per-week'],
              y_names='income', valid_idx=list(range(2400, 3000)), bs=256)
    ref = TabularDataLoaders.from_csv(path, **kw)
    ours = BatchDataLoaders.from_csv(path, backend=backend, **kw)
    for n in ref.cat_names:
        assert list(ours.classes[n]) == list(ref.classes[n]), n
        assert [type(v) for v in ours.classes[n]] == [type(v) for v in ref.classes[n]], n
    assert 'Private' in ours.classes['workclass']
    assert list(ours.train_ds.vocab) == list(ref.train_ds.vocab) == ['<=50K', '>50K']

def test_from_csv_reads_what_fastai_reads(backend, tmp_path):
    """A header written with ', ' (the names stripped, as pandas' `skipinitialspace` strips them), `None` in a number
    and a cat column (missing for pandas, a string to libcudf's default NA tokens), prices with two decimals as a cat
    (libcudf's float parser is not correctly rounded: 0.3 would read 0.30000000000000004): fastai's vocabularies and
    fill values, bit for bit."""
    rng = np.random.default_rng(0)
    n = 400
    price = [f'{v / 100:.2f}' for v in rng.integers(0, 2000, n)]
    qty = [str(v) if v % 7 else 'None' for v in rng.integers(0, 50, n)]
    color = [c if i % 9 else 'None' for i,c in enumerate(rng.choice(['red', 'green', 'blue'], n))]
    y = rng.choice(['a', 'b'], n)
    path = tmp_path/'shop.csv'
    path.write_text('price, qty, color, y\n' + '\n'.join(','.join(r) for r in zip(price, qty, color, y)) + '\n')
    kw = dict(procs=PROCS, cat_names=['price', 'color'], cont_names=['qty'], y_names='y', valid_idx=list(range(300, n)),
              bs=64)
    # the frame read: pandas', every float bit for bit (fastai's shrink then rounds them to float32)
    pd.testing.assert_frame_equal(to_pandas(read_csv(path, backend, skipinitialspace=True)).astype({'color': object}),
                                  pd.read_csv(path, skipinitialspace=True).astype({'color': object}), check_dtype=False,
                                  check_exact=True)
    ref = TabularDataLoaders.from_csv(path, **kw)
    ours = BatchDataLoaders.from_csv(path, backend=backend, **kw)
    assert sum(parse_float(p) != float(p) for p in price) > n // 10   # libcudf's parser would miss these
    for c in ('price', 'color'):
        assert [(type(v), v) for v in ours.classes[c]] == [(type(v), v) for v in ref.classes[c]], c
    assert 'None' not in list(ours.classes['color']) and ours.na_dict == ref.na_dict
    assert ours.means == ref.means and ours.stds == ref.stds

# --- Normalize: float64 reductions, bool conts ----------------------------------------------------------------------
def test_normalize_float32_and_bool_conts(backend):
    """float32 conts (fastai's df_shrink) and a bool cont: fastai's means/stds; on cuDF each is the float64 reduction
    rounded to float32 (within an ulp of pandas', whose mean sums in float32 and std in float64)."""
    df = flights().dropna(subset=['arr_delay']).reset_index(drop=True)
    df['late'] = df.arr_delay > 15
    floats = ['dep_time', 'dep_delay', 'arr_time', 'air_time']
    conts = floats + ['sched_dep_time', 'distance', 'late']   # with ints and a bool
    splits = rows_of_split(len(df))
    kw = dict(procs=PROCS, cat_names=['carrier'], y_names='jfk', splits=splits)
    ref, ours = build_both(df, backend, cont_names=conts, **kw)
    assert_same_processing(ref, ours, exact=backend == 'pandas')
    for n in conts:
        for d_ours, d_ref in ((ours.means, ref.means), (ours.stds, ref.stds)):
            assert type(d_ours[n]) == type(d_ref[n]) == np.float64   # ints and a bool next to float32: float64 for all
            assert abs(d_ours[n] - d_ref[n]) <= 2 * np.spacing(np.float32(d_ref[n])), n
    # the float32 columns themselves, when every cont is one: float32 stats, within an ulp of the exact float64 ones
    ref, ours = build_both(df, backend, cont_names=floats, **kw)
    assert_same_processing(ref, ours, exact=backend == 'pandas')
    raw = df.iloc[splits[0]]
    for n in floats:
        assert type(ours.means[n]) == type(ref.means[n]) == np.float32
        filled = raw[n].fillna(ours.na_dict[n]) if n in ours.na_dict else raw[n]
        exact = filled.astype(np.float32).astype(np.float64)
        for got, want in ((ours.means[n], exact.mean()), (ours.stds[n], exact.std(ddof=0))):
            assert abs(np.float64(got) - want) <= np.spacing(np.float32(want)) + 1e-7, n

# --- sorted_uniques under cudf.pandas' compatible mode ----------------------------------------------------------------
@pytest.mark.cudf
def test_vocab_in_pandas_compatible_mode():
    "cuDF's `unique()` is a CuPy array in pandas-compatible mode (strings cannot be one): the vocab comes out the same."
    import cudf
    df = flights()
    gdf = to_backend(df, 'cudf')
    with cudf.option_context('mode.pandas_compatible', True):
        for c in ['tailnum', 'dep_delay', 'hour']:
            assert sorted_uniques(gdf[c]) == sorted(df[c].dropna().unique()), c
        ours = TabularGPU(gdf, procs=[Categorify], cat_names=CATS, cont_names=['distance'], y_names='jfk',
                          splits=rows_of_split(len(df)))
    ref = TabularPandas(df, procs=[Categorify], cat_names=CATS, cont_names=['distance'], y_names='jfk',
                        splits=rows_of_split(len(df)))
    for n in CATS: assert list(ours.classes[n]) == list(ref.classes[n]), n

# --- no device->host sync in the hot path -----------------------------------------------------------------------------
def _train_setup(device, backend='pandas', n=20_000, bs=1024):
    "Setup, outside what the sync tests watch: TabularGPU, dataloaders() (packing), a TabularModel, LAMB, a first step."
    set_seed(0)
    df = flights(n)
    to = TabularGPU(to_backend(df, backend), procs=PROCS, cat_names=CATS, cont_names=CONTS, y_names='jfk',
                    splits=rows_of_split(n))
    dls = to.dataloaders(bs=bs, device=device)
    model = TabularModel(get_emb_sz(to), len(to.cont_names), 2, layers=[64, 32]).to(device)
    opt, loss_func = Lamb(list(model.parameters()), lr=1e-2), CrossEntropyLossFlat()
    def step(xc, xn, y):
        loss = loss_func(model(xc, xn), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    step(*dls.train.one_batch())   # lazy state (optimizer moments, cuBLAS handles) made here, not in the loop
    return dls, model, step

def _epoch(train, valid, model, step):
    """The hot path: a shuffled training epoch (permutation, one gather a batch, forward, loss, backward, LAMB step),
    then the validation batches (slices) through the model."""
    n = 0
    model.train()
    for xc, xn, y in train:
        step(xc, xn, y)
        n += 1
    model.eval()
    with torch.no_grad():
        for xc, xn, _y in valid: model(xc, xn)
    return n

def _train_dl(dls, weighted):
    "The training loader, or one drawing rows with replacement by weight (its weights go to the device here)."
    return dls.train.new(wgts=np.linspace(0, 1, len(dls.train_ds))) if weighted else dls.train

@pytest.mark.cudf
@pytest.mark.parametrize('weighted', [False, True])
def test_training_epoch_makes_no_device_sync(weighted):
    """Inside `torch.cuda.set_sync_debug_mode('error')`: one epoch as `_epoch` runs it, with a cuDF-built TabularGPU's
    loaders (and one drawing by `wgts`, on the device). Any device->host sync there (`.item()`, `bool(tensor)`, a host
    copy, a boolean-mask index, a pageable upload) raises. Outside it: construction, packing, model, first step."""
    dls, model, step = _train_setup('cuda', 'cudf')
    train = _train_dl(dls, weighted)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode('error')
    try: n = _epoch(train, dls.valid, model, step)
    finally: torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    assert n == len(train) > 10

def test_training_epoch_reads_no_tensor_on_the_host(monkeypatch):
    """The CPU stand-in for the test above (which needs CUDA): in the same epoch no Python code reads a tensor's value
    (`item`, `bool`, `int`, `float`, `tolist`, `numpy`, `cpu`: each would be a device sync on a GPU)."""
    for weighted in (False, True):
        dls, model, step = _train_setup('cpu')
        train = _train_dl(dls, weighted)
        with monkeypatch.context() as m:
            for name in ('item', 'tolist', '__bool__', '__int__', '__float__', '__index__', 'numpy', 'cpu'):
                def read(self, *a, _name=name, **k): raise AssertionError(f'Tensor.{_name} in the hot path')
                m.setattr(torch.Tensor, name, read)
            assert _epoch(train, dls.valid, model, step) == len(train)

@pytest.mark.cudf
def test_construction_moves_only_learned_state_to_host(monkeypatch):
    """`TabularGPU(cudf frame)` + `dataloaders()`: everything cuDF brings to the host through its public API
    (`to_pandas`, `to_arrow`, `to_numpy`, `values_host` of a DataFrame, Series or Index of any kind, `cupy.asnumpy`) is
    learned state, no longer than the largest vocabulary; and the torch-side syncs (`set_sync_debug_mode('warn')`) are
    as many for 40,000 rows as for 20,000: none per row, or chunk. (cuDF's own syncs are not torch's: the first check
    is what covers them; under the cuDF stand-in, which has no CUDA, only the first check runs.)"""
    import inspect
    import cudf
    import cupy
    cuda = torch.cuda.is_available()
    moved = []
    def watch(cls, name):
        orig = inspect.getattr_static(cls, name)
        if isinstance(orig, property):
            monkeypatch.setattr(cls, name, property(lambda self: (moved.append(len(self)), orig.fget(self))[1]))
        else:
            def f(self, *a, **k):
                moved.append(len(self))
                return orig(self, *a, **k)
            monkeypatch.setattr(cls, name, f)
    # cuDF's public classes (values_host: gone in cuDF 26.10); each patched on itself, whichever class defines it
    for cls in (cudf.DataFrame, cudf.Series, cudf.Index, cudf.RangeIndex, cudf.CategoricalIndex, cudf.DatetimeIndex,
                cudf.TimedeltaIndex, cudf.IntervalIndex, cudf.MultiIndex):
        for name in ('to_pandas', 'to_arrow', 'to_numpy', 'values_host'):
            if hasattr(cls, name): watch(cls, name)
    asnumpy = cupy.asnumpy
    monkeypatch.setattr(cupy, 'asnumpy', lambda a, *args, **kw: (moved.append(a.size), asnumpy(a, *args, **kw))[1])
    df, syncs = flights(40_000), {}
    for n in (20_000, 40_000):
        gdf = to_backend(df.iloc[:n], 'cudf')
        moved.clear()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            if cuda: torch.cuda.set_sync_debug_mode('warn')
            try:
                to = TabularGPU(gdf, procs=PROCS, cat_names=CATS, cont_names=CONTS, y_names='jfk',
                                splits=rows_of_split(n))
                to.dataloaders(bs=1024, device='cuda' if cuda else default_device())
            finally:
                if cuda: torch.cuda.set_sync_debug_mode(0)
        syncs[n] = sum('synchroniz' in str(x.message) for x in w)
        assert moved and max(moved) <= max(len(v) for v in to.classes.values()) < n // 4
    assert syncs[20_000] == syncs[40_000]

def test_weighted_sampling_follows_the_weights():
    "Rows drawn with replacement in proportion to `wgts`, on the data's device (and past torch.multinomial's 2**24)."
    df = load_adult().iloc[:3000]
    to = TabularGPU(df, procs=PROCS, cat_names=['workclass'], cont_names=['age'], y_names='income')
    w = np.zeros(len(df)); w[[3, 10, 2999]] = [1, 2, 3]
    dl = BatchDataLoader(to, bs=500, shuffle=True, wgts=w)
    torch.manual_seed(0)
    drawn = torch.cat([dl.get_idxs() for _ in range(20)]).numpy()
    assert set(drawn) == {3, 10, 2999}
    freq = np.bincount(drawn, minlength=len(df))[[3, 10, 2999]] / len(drawn)
    np.testing.assert_allclose(freq, [1/6, 2/6, 3/6], atol=5 * np.sqrt(0.25 / len(drawn)))

# --- the processed frame, released once packed ------------------------------------------------------------------------
ADULT = dict(cat_names=['workclass', 'education', 'marital-status', 'occupation'],
             cont_names=['age', 'fnlwgt', 'hours-per-week'], y_names='income')

def _adult_dls(backend, keep_frame, df):
    to = TabularGPU(df, procs=PROCS, splits=rows_of_split(len(df)), backend=backend, **ADULT)
    return to, to.dataloaders(bs=256, keep_frame=keep_frame)

def _held_bytes(to) -> int:
    "Bytes `to` holds after dataloaders(): its packed rows, the frame if kept, the row index."
    rows = to.packed_rows()[0]
    frame = 0 if to.released is not None else int(to_pandas(to.items).memory_usage(index=False, deep=True).sum())
    return rows.numel() * rows.element_size() + frame + int(to_pandas(to.row_index).memory_usage(deep=True))

def test_dataloaders_release_the_frame(backend):
    """After dataloaders() only the packed rows and the row index stay (<= 1.2x the rows); the frame comes back: codes
    exact, conts (float64 here: Adult's are integers, normalized) as the float32 of the batches."""
    df = load_adult().iloc[:6000]
    kept, _ = _adult_dls(backend, True, df)
    to, dls = _adult_dls(backend, False, df)
    assert all(o.released is not None for o in (to, dls.train_ds, dls.valid_ds))
    packed = to.packed_rows()[0]
    assert _held_bytes(to) <= 1.2 * packed.numel() * packed.element_size() < _held_bytes(kept)
    # what the bench reports
    for o in (to, kept):
        held = held_memory(o)
        assert held['resident_mb'] == pytest.approx(_held_bytes(o) / 2**20, abs=2e-3)
        assert (held['resident_vs_packed'] <= 1.2) == (o is to) and (held['frame_mb'] == 0) == (o is to)
    assert len(to) == len(kept) and len(dls.train_ds) == len(kept.train) and to.has_y
    for a, b in ((to.train.xs, kept.train.xs), (to.valid.ys, kept.valid.ys), (to.items, kept.items)):
        pd.testing.assert_frame_equal(to_pandas(a), to_pandas(b), rtol=1e-6, atol=1e-6)   # ints compared exactly
    assert (to_pandas(to.items).age.to_numpy() == to_pandas(kept.items).age.to_numpy().astype(np.float32)).all()
    assert to.released is None   # what was asked for is kept, and the packed rows still serve the loaders
    assert torch.equal(dls.valid.one_batch()[0], kept.dataloaders(bs=256).valid.one_batch()[0])
    back = pickle.loads(pickle.dumps(dls.valid_ds))
    pd.testing.assert_frame_equal(to_pandas(back.items), to_pandas(kept.valid.items), rtol=1e-6, atol=1e-6)

_DEVICE_BYTES = """
import gc, json
import rmm.statistics
rmm.statistics.enable_statistics()   # before cuDF allocates anything: every RMM allocation is counted
import torch
from fastai.tabular.all import Categorify, FillMissing, Normalize, RandomSplitter, range_of
from fastai_gpu_tabular.all import TabularGPU
from fastai_gpu_tabular.backend import to_backend
from fastai_gpu_tabular.datasets import load_flights
def allocated():
    "Bytes in use on the device: torch's tensors, and RMM's (cuDF's columns; CuPy allocates from RMM under cuDF)."
    gc.collect(); torch.cuda.synchronize()
    return torch.cuda.memory_allocated() + rmm.statistics.get_statistics().current_bytes
df = load_flights(nrows=150_000)
df['jfk'] = df.origin == 'JFK'
kw = dict(procs=[Categorify, FillMissing, Normalize],
          cat_names=['carrier', 'tailnum', 'origin', 'dest', 'month', 'hour'],
          cont_names=['dep_time', 'sched_dep_time', 'dep_delay', 'arr_time', 'sched_arr_time', 'arr_delay', 'air_time',
                      'distance', 'minute', 'day'], y_names='jfk', splits=RandomSplitter(seed=0)(range_of(df)))
base, out = allocated(), {}
for keep in (False, True):
    gdf = to_backend(df, 'cudf')
    to = TabularGPU(gdf, **kw)
    dls = to.dataloaders(bs=1024, keep_frame=keep)
    del gdf   # the caller's frame is the caller's: what is left is what the Tabular and its loaders hold
    rows = to.packed_rows()[0]
    out[keep] = dict(held=allocated() - base, packed=rows.numel() * rows.element_size(), device=str(rows.device))
    del to, dls, rows
print(json.dumps(out))
"""

@pytest.mark.cudf
def test_device_memory_after_dataloaders():
    """On cuDF, what `dataloaders()` leaves on the device (torch's and RMM's allocations, in a fresh process whose RMM
    counts from the start) is the packed rows and the row index: within the bench's 1.2x of the packed rows (as the
    host count of test_dataloaders_release_the_frame), where keeping the frame holds more."""
    res = subprocess.run([sys.executable, '-c', _DEVICE_BYTES], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(res.stdout.strip().splitlines()[-1])
    released, kept = r['false'], r['true']
    assert released['device'].startswith('cuda') and released['packed'] == kept['packed'] > 10 * 2**20
    assert released['held'] <= 1.2 * released['packed'] < kept['held']

def test_release_keeps_what_packing_changes(backend):
    "Multi-hot lists (packed as codes) and integer conts (no Normalize: float32 would round large ones) keep the frame."
    df = load_movielens().iloc[:3000]
    for kw in (dict(procs=PROCS, multi_hot={'genres': '|'}), dict(procs=[Categorify])):
        to = TabularGPU(df, cat_names=['genres', 'userId'], cont_names=['timestamp'], y_names='rating', backend=backend,
                        splits=rows_of_split(len(df)), **kw)
        to.dataloaders(bs=256)
        assert to.released is None

def test_fastai_paths_after_release(backend, tmp_path, monkeypatch):
    """show_batch, test_dl, get_preds, ClassificationInterpretation (`interp[idxs]` reads `dl.items`), show_results,
    predict and export/load_learner on released loaders give what they give with the frame kept (the same model)."""
    df = load_adult().iloc[:6000]
    shown = []
    monkeypatch.setattr(fgc, 'display_df', lambda d: shown.append(d.reset_index(drop=True)))
    def run(keep_frame, model=None):
        set_seed(0)
        to, dls = _adult_dls(backend, keep_frame, df)
        learn = tabular_learner(dls, layers=[20], path=tmp_path)
        if model is not None: learn.model = model
        shown.clear()
        dls.show_batch(max_n=5)
        learn.show_results(max_n=5)
        interp = ClassificationInterpretation.from_learner(learn)
        losses, idx = interp.top_losses(5)
        inps, _, _, decoded, _ = interp[idx]
        out = dict(shown=list(shown), cm=interp.confusion_matrix(), losses=losses, idx=idx, preds=learn.get_preds()[0],
                   inps=inps, decoded=decoded,
                   test=learn.get_preds(dl=dls.test_dl(df.iloc[:300]))[0], predict=learn.predict(df.iloc[7])[2])
        learn.export(tmp_path/f'{keep_frame}.pkl')
        out['loaded'] = load_learner(tmp_path/f'{keep_frame}.pkl', cpu=True).predict(df.iloc[7])[2]
        return to, learn, out
    to, learn, got = run(False)
    # none of the above needed the whole frame back (interp[idxs] rebuilt the valid rows')
    assert to.released is not None
    _, _, ref = run(True, learn.model)
    assert len(got['shown']) == len(ref['shown']) == 2
    for a, b in zip(got['shown'], ref['shown']): pd.testing.assert_frame_equal(a, b)
    np.testing.assert_array_equal(got['cm'], ref['cm'])
    for k in ('losses', 'idx', 'preds', 'test', 'predict', 'inps', 'decoded'):
        torch.testing.assert_close(got[k], ref[k])
    torch.testing.assert_close(got['loaded'], got['predict'].cpu())

# --- the second source review: what cuDF refuses, or gives otherwise than pandas -----------------------------------
# Each test runs on pandas and on cuDF (the stand-in, FGT_FAKE_CUDF, where no GPU is): the pandas path, which the parity
# tests hold to fastai's, is the reference, or fastai itself. Each was red on cuDF before its fix.
def test_int_columns_with_nulls_read_as_pandas_reads_them(backend, tmp_path):
    """Flights' delays and times written as integers with empty fields: `cudf.read_csv` makes them int columns with
    nulls (pandas: float64 and NaN), which fastai's shrink would cast to int16 and FillMissing's fill of 37.5 then fail
    on, and whose vocabulary (as a cat) would hold ints. Reference: fastai's `from_csv` on the same file."""
    df = flights(8000)[['carrier', 'dep_time', 'dep_delay', 'arr_delay', 'distance', 'jfk']]
    assert df.dep_delay.isna().any() and df.dep_time.isna().any()
    path = tmp_path/'flights.csv'
    df.to_csv(path, index=False, float_format='%.0f')   # the floats are whole numbers: written as integers
    raw = read_csv(path, backend=backend)
    if backend == 'cudf': assert raw['dep_delay'].dtype.kind == 'i' and raw['dep_delay'].has_nulls
    fill = lambda: FillMissing(fill_strategy=FillStrategy.constant, fill_vals={'dep_delay': 37.5, 'arr_delay': 37.5})
    kw = dict(cat_names=['carrier', 'dep_time'], cont_names=['dep_delay', 'arr_delay', 'distance'], y_names='jfk',
              valid_idx=list(range(6000, 8000)), bs=256)
    ref = TabularDataLoaders.from_csv(path, procs=[Categorify, fill(), Normalize], **kw)
    ours = BatchDataLoaders.from_csv(path, backend=backend, procs=[Categorify, fill(), Normalize], **kw)
    ref, ours = ref.train_ds, ours.train_ds
    assert float(ours.na_dict['dep_delay']) == 37.5 and list(ours.na_dict) == list(ref.na_dict)
    for n in ref.cat_names:
        assert list(ours.classes[n]) == list(ref.classes[n]), n
        assert [type(v) for v in ours.classes[n]] == [type(v) for v in ref.classes[n]], n
    for n in ref.cont_names:
        assert ours.means[n] == pytest.approx(ref.means[n], rel=1e-6) and type(ours.means[n]) == type(ref.means[n]), n

@pytest.mark.parametrize('kinds', ['ints', 'ints_and_floats', 'ints_and_none'])
def test_object_columns_of_numbers(kinds, backend):
    """An object column holding only numbers (ints; ints and floats; ints and None), as a cat and as a cont: cuDF
    refuses such a column, with an error naming none; the pandas path reads the numbers. Both give the same codes,
    vocabulary values and stats."""
    df = load_adult().iloc[:4000].reset_index(drop=True)
    vals = df['educational-num'].astype(object)
    if kinds == 'ints_and_floats': vals[::7] = vals[::7] + 0.5
    if kinds == 'ints_and_none': vals[::9] = None
    df['num_cat'], df['num_cont'] = vals, vals.copy()
    kw = dict(procs=PROCS, cat_names=['workclass', 'num_cat'], cont_names=['age', 'num_cont'], y_names='income',
              splits=rows_of_split(len(df)))
    ref, ours = TabularGPU(df, **kw), TabularGPU(df, backend=backend, **kw)
    assert df['num_cat'].dtype == object   # the caller's frame is left alone
    # the vocabulary's values are numbers on both (on cuDF NumPy's: an object column is the pandas path's alone)
    for n in ref.cat_names: assert list(ours.classes[n]) == list(ref.classes[n]), n
    ia, ib = to_pandas(ours.items), to_pandas(ref.items)
    for n in ref.cat_names: np.testing.assert_array_equal(ia[n].to_numpy(), ib[n].to_numpy(), err_msg=n)
    for n in ref.cont_names:
        np.testing.assert_allclose(ia[n].to_numpy(), ib[n].to_numpy(), rtol=1e-6,
                                   atol=cont_atol(ref, exact=backend == 'pandas'), err_msg=n)
    assert ours.na_dict == ref.na_dict and ours.means == pytest.approx(ref.means, rel=1e-6)

@pytest.mark.cudf
def test_object_bools_under_cudf_pandas_compatible_mode():
    """cudf.pandas sets `mode.pandas_compatible`, where `cudf.from_pandas` of an object column of bools with missing
    values fails (it reads `dtype.kind` of a dtype it has not got: an AttributeError). The frame still moves to cuDF, as
    the pandas frame it is: fastai's vocabulary of Python bools."""
    import cudf
    df = flights(8000)
    df['late'] = pd.Series(list(df.arr_delay > 15), dtype=object).where(df.arr_delay.notna())   # with NaN
    df['long'] = pd.Series(list(df.distance > 1000), dtype=object)   # without (cuDF: the AttributeError)
    kw = dict(procs=PROCS, cat_names=['carrier', 'late', 'long'], cont_names=['distance'], y_names='jfk',
              splits=rows_of_split(len(df)))
    ref = TabularGPU(df, **kw)
    with cudf.option_context('mode.pandas_compatible', True): ours = TabularGPU(df, backend='cudf', **kw)
    assert_same_processing(ref, ours, exact=False)
    assert [type(v) for v in ours.classes['late'][1:]] == [bool, bool]

def test_pandas_nullable_dtypes(backend):
    """Conts in pandas' nullable Float64 and Int64 (with NA), a cat in its `boolean`: cuDF keeps those dtypes, and
    Normalize's NumPy promotion cannot take them. The same state and values as on pandas."""
    df = load_adult().iloc[:4000].reset_index(drop=True)
    df['age'] = df['age'].astype('Float64').mask(df.index % 11 == 0)
    df['fnlwgt'] = df['fnlwgt'].astype('Int64')
    df['long'] = (df['hours-per-week'] > 40).astype('boolean').mask(df.index % 13 == 0)
    kw = dict(procs=PROCS, cat_names=['workclass', 'long'], cont_names=['age', 'fnlwgt', 'hours-per-week'],
              y_names='income', splits=rows_of_split(len(df)))
    ref, ours = TabularGPU(df, **kw), TabularGPU(df, backend=backend, **kw)
    assert list(ours.classes['long']) == list(ref.classes['long']) == ['#na#', False, True]
    assert ours.na_dict == ref.na_dict and ours.means == pytest.approx(ref.means, rel=1e-6)
    ia, ib = to_pandas(ours.items), to_pandas(ref.items)
    for n in ref.cat_names: np.testing.assert_array_equal(ia[n].to_numpy(), ib[n].to_numpy(), err_msg=n)
    for n in ref.cont_names:
        np.testing.assert_allclose(ia[n].to_numpy(dtype='f8'), ib[n].to_numpy(dtype='f8'), rtol=1e-6,
                                   atol=cont_atol(ref, exact=backend == 'pandas'), err_msg=n)

@pytest.mark.parametrize('direct', [False, True])
def test_string_dtype_against_an_object_vocabulary(direct, backend):
    """A cat column of pandas' `string` dtype (`string[pyarrow]`), later frames as objects: cuDF 26.06 joins a pandas
    StringDtype with nothing but itself, so every value would become `#na#` without a word. `direct`: the cuDF frame
    made by `cudf.from_pandas` itself (which keeps the dtype), not by `backend=`."""
    if direct and backend != 'cudf': pytest.skip('cudf.from_pandas is the cuDF case')
    df = flights(6000)
    df['carrier'] = df['carrier'].astype('string[pyarrow]')
    kw = dict(procs=PROCS, cat_names=['carrier', 'origin'], cont_names=['distance'], y_names='jfk',
              splits=rows_of_split(len(df)))
    ref = TabularGPU(df, **kw)
    ours = TabularGPU(require_cudf().from_pandas(df) if direct else df, backend=backend, **kw)
    assert_same_processing(ref, ours, exact=backend == 'pandas')
    later = df.astype({'carrier': object}).iloc[:500]
    a, b = ref.new(later), ours.new(to_backend(later, backend))
    a.process(); b.process()
    np.testing.assert_array_equal(to_pandas(b.items)['carrier'].to_numpy(), a.items['carrier'].to_numpy())
    assert (a.items['carrier'] > 0).all()

def test_digit_strings_against_a_numeric_vocabulary(backend):
    """A later frame whose hour column holds strings ('5') where training had numbers: none is in the vocabulary, so
    each becomes `#na#` with the warning that says why (cuDF's join casts both sides to float64, so '5' found 5)."""
    df = flights(6000)
    kw = dict(procs=PROCS, cat_names=['carrier', 'hour'], cont_names=['distance'], y_names='jfk',
              splits=rows_of_split(len(df)))
    ours = TabularGPU(df, backend=backend, **kw)
    later = df.iloc[:300].astype({'hour': str})
    t = ours.new(to_backend(later, backend))
    with pytest.warns(UserWarning, match="'hour'"): t.process()
    assert (to_pandas(t.items)['hour'] == 0).all()

def test_float_split_column_with_nan(backend):
    """A float split column with NaN: fastai's `ColSplitter` casts its values to bool, NaN to True (validation). On
    cuDF NaN is null, which a cast would keep (read as training)."""
    df = load_adult().iloc[:3000].reset_index(drop=True)
    df['is_valid'] = np.where(df.index % 5 == 0, 1.0, 0.0)
    df.loc[df.index % 7 == 0, 'is_valid'] = np.nan
    kw = dict(procs=PROCS, cat_names=['workclass'], cont_names=['age'], y_names='income')
    ref = TabularPandas(df, splits=ColSplitter('is_valid')(df), **kw)
    ours = TabularGPU(df, splits='is_valid', backend=backend, **kw)
    assert len(ours.valid) == len(ref.valid) and list(to_pandas(ours.valid.items.index)) == list(ref.valid.items.index)

def test_target_encode_of_a_categorical_target_with_unsorted_categories(backend):
    """TargetEncode's classes are the target's sorted values: a user's categorical whose categories are not sorted
    (['>50K', '<=50K']) sorts by its codes on cuDF, which would swap a binary target's class 1 (every encoding the
    other class's mean)."""
    from fastai_gpu_tabular.all import TargetEncode
    df = load_adult().iloc[:5000].reset_index(drop=True)
    df['income'] = df['income'].astype(pd.CategoricalDtype(['>50K', '<=50K']))
    kw = dict(cat_names=['education'], cont_names=['age'], y_names='income', splits=rows_of_split(len(df)))
    tes = TargetEncode(['education'], smooth=0.0, folds=0), TargetEncode(['education'], smooth=0.0, folds=0)
    ref, ours = TabularGPU(df, procs=[tes[0]], **kw), TabularGPU(df, procs=[tes[1]], backend=backend, **kw)
    assert list(tes[1].target_classes) == list(tes[0].target_classes) == ['<=50K', '>50K']
    np.testing.assert_array_equal(to_pandas(ours.items)['education_te'].to_numpy(),
                                  ref.items['education_te'].to_numpy())

def test_vocabulary_value_types(backend):
    """The vocabulary's values have the types the pandas path gives (and a saved Tabular records): Python ints for a
    multi-hot column of int lists (pandas' lists hold Python objects; cuDF's typed values), Python bools for
    TargetEncode's categories of bools with missing values."""
    from fastai_gpu_tabular.all import TargetEncode
    df = load_movielens().iloc[:3000].reset_index(drop=True)
    df['tags'] = [[int(m) % 17, int(u) % 5] for m,u in zip(df.movieId, df.userId)]
    df['liked'] = pd.Series(list(df.rating > 3.5), dtype=object).where(df.index % 6 != 0)
    kw = dict(cat_names=['tags', 'liked'], cont_names=['year'], y_names='rating', splits=rows_of_split(len(df)),
              reduce_memory=False)
    procs = lambda: [TargetEncode(['liked'], smooth=0.0, folds=0), Categorify, FillMissing, Normalize]
    ref, ours = TabularGPU(df, procs=procs(), **kw), TabularGPU(df, procs=procs(), backend=backend, **kw)
    for n in ('tags', 'liked'):
        assert [type(v) for v in ours.classes[n]] == [type(v) for v in ref.classes[n]], n
    te = lambda to: next(p for p in to.procs.fs if isinstance(p, TargetEncode))
    assert [type(v) for v in te(ours).encodings['liked'].index] == [type(v) for v in te(ref).encodings['liked'].index]

def test_frame_device_is_where_its_columns_go(backend):
    "`frame_device`: the device a frame's columns reach torch on (cuDF: their buffers', not CuPy's current device)."
    gdf = to_backend(load_adult().iloc[:100], backend)
    assert frame_device(gdf) == col_to_tensor(gdf['age']).device

def test_cudf_pandas_proxies_take_the_pandas_path():
    """Under `python -m cudf.pandas` a frame is a proxy whose type carries pandas' module name (cuDF's
    `make_final_proxy_type(..., module=slow_type.__module__)`, cudf/pandas/_wrappers/pandas.py:81-90 @26.10): it is
    taken as pandas (the GPU is used only through the proxy's own fallbacks), as the README says."""
    class Proxy(pd.DataFrame): pass
    Proxy.__module__ = 'pandas.core.frame'
    df = load_adult().iloc[:500]
    assert backend_of(Proxy(df)) == 'pandas' and not is_cudf(Proxy(df))
    readme = (Path(__file__).parents[1]/'README.md').read_text()
    assert 'cudf.pandas' in readme and 'pandas path' in readme
