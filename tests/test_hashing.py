"""Hashed buckets and crosses (ops/hashing.py): the hash is sklearn's MurmurHash3 on real values,
`Categorify(num_buckets)` is fastai's Categorify plus buckets for the values its vocabulary drops, `HashBucket` and
`HashedCross` give the codes their definition says, and bad input fails early, naming the column, leaving the caller's
frame alone."""
import numpy as np
import pandas as pd
import pytest
import torch
from fastai.tabular.all import Categorify as FastaiCategorify
from fastai.tabular.all import FillMissing, Normalize, TabularPandas, get_emb_sz, load_learner
from helpers.parity import assert_same_processing
from sklearn.utils import murmurhash3_32
from fastai_gpu_tabular.all import (
    Categorify,
    HashBucket,
    HashedCross,
    TabularGPU,
    hash_column,
    hash_values,
    murmur3_32,
    tabular_learner,
)
from fastai_gpu_tabular.backend import to_pandas
from fastai_gpu_tabular.ops.hashing import bucket_labels

SEEDS = [0, 12345, 2**32 - 1]

def _sk(key, seed): return murmurhash3_32(key, seed, positive=True)
def _sk_int(v, seed): return _sk(np.int64(v).tobytes(), seed)   # the documented int key: int64, little-endian
def _buckets(vals, key, seed, nb, offset=1):
    "sklearn's bucket of each value plus `offset`; 0 for a missing one."
    return [0 if pd.isna(v) else offset + key(v, seed) % nb for v in vals]

def _strings(adult, ml) -> list:
    "Every distinct string of Adult and the MovieLens titles (non-ASCII, every length mod 4), and '', sorted."
    return sorted({v for c in adult.columns if adult[c].dtype.kind not in 'iuf' for v in adult[c].dropna()}
                  | set(ml.title.dropna()) | {''})

def _ml_split(df, frac=0.8):
    n = int(len(df) * frac)
    return (list(range(n)), list(range(n, len(df))))

# --- the hash -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize('seed', SEEDS)
def test_strings_hash_as_sklearn(adult, ml, seed):
    "Every distinct string of Adult and the MovieLens titles (non-ASCII, every length mod 4) as sklearn hashes it."
    vals = _strings(adult, ml)
    assert {len(v.encode()) % 4 for v in vals} == {0, 1, 2, 3} and any(not v.isascii() for v in vals)
    got = hash_values(np.array(vals, dtype=object), seed)
    assert got.dtype == np.uint32
    np.testing.assert_array_equal(got, np.array([_sk(v, seed) for v in vals], dtype=np.uint32))

@pytest.mark.parametrize('seed', SEEDS)
def test_numbers_hash_as_int64_bytes(ml, adult, seed):
    "Ints (any width, negative too), integral floats (year with NaN) and bools hash as their int64's 8 bytes."
    ids = np.unique(np.concatenate([ml.userId.to_numpy(), ml.movieId.to_numpy(), ml.timestamp.to_numpy(),
                                    -ml.movieId.to_numpy()]))
    np.testing.assert_array_equal(hash_values(ids, seed), [_sk_int(v, seed) for v in ids])
    np.testing.assert_array_equal(hash_values(ids.astype(np.int32), seed), hash_values(ids, seed))
    years = ml.year.dropna().unique()   # float64
    np.testing.assert_array_equal(hash_values(years, seed), [_sk_int(int(v), seed) for v in years])
    flags = np.array([False, True])
    np.testing.assert_array_equal(hash_values(flags, seed), [_sk_int(0, seed), _sk_int(1, seed)])
    ratings = ml.rating.unique()   # 0.5 steps: the non-integral ones as float64 bytes
    frac = ratings[ratings != np.floor(ratings)]
    np.testing.assert_array_equal(hash_values(frac, seed), [_sk(np.float64(v).tobytes(), seed) for v in frac])
    # an object column mixing them hashes each as its own kind
    mixed = np.array(['Male', 7, 2.5, True], dtype=object)
    np.testing.assert_array_equal(hash_values(mixed, seed), [_sk('Male', seed), _sk_int(7, seed),
                                                              _sk(np.float64(2.5).tobytes(), seed), _sk_int(1, seed)])

def test_fixed_width_keys_as_sklearn(ml):
    "`murmur3_32` of a 2-d uint8 array: each row a key (3 bytes: all body-less tails)."
    b = np.frombuffer(ml.title.str.cat().encode()[:3 * 1000], np.uint8).reshape(-1, 3)
    np.testing.assert_array_equal(murmur3_32(b, 5), [_sk(bytes(r), 5) for r in b])

def test_column_hash_is_the_same_in_every_dtype(ml):
    "A column's hash per row is its values', whatever pandas holds them as; missing rows are flagged, not hashed."
    ids = ml.userId
    ref = np.array([_sk_int(v, 3) for v in ids])
    with_nan = ids.astype('float64').where(ids != 1)   # the int column that gained NaN is float64
    for col in (ids, ids.astype('int16'), ids.astype('Int64'), ids.astype('category'), with_nan):
        h, miss = hash_column(col, 3)
        np.testing.assert_array_equal(miss, col.isna().to_numpy())
        np.testing.assert_array_equal(h[~miss], ref[~miss])
        assert (h[miss] == 0).all()
    titles = ml.title
    assert titles.isna().any()
    h, miss = hash_column(titles.astype('category'), 9)
    np.testing.assert_array_equal(miss, titles.isna().to_numpy())
    np.testing.assert_array_equal(h, [0 if m else _sk(v, 9) for v, m in zip(titles, miss)])

# --- Categorify(num_buckets) --------------------------------------------------------------------------------------
@pytest.mark.parametrize('name', ['adult', 'ml'])
def test_categorify_without_buckets_is_fastais(name, adult, ml):
    "Categorify with num_buckets unset (and a seed) processes as fastai's Categorify: vocab, codes, embedding sizes."
    if name == 'adult':
        df, kw = adult, dict(cat_names=['workclass', 'occupation', 'native-country'], cont_names=['age'],
                             y_names='income')
    else: df, kw = ml, dict(cat_names=['userId', 'movieId'], cont_names=['year'], y_names='rating')
    ref = TabularPandas(df.copy(), procs=[FastaiCategorify, FillMissing, Normalize], splits=_ml_split(df),
                        **{k: list(v) if isinstance(v, list) else v for k,v in kw.items()})
    ours = TabularGPU(df, procs=[Categorify(num_buckets=None, seed=3), FillMissing, Normalize], splits=_ml_split(df),
                      **{k: list(v) if isinstance(v, list) else v for k,v in kw.items()})
    assert_same_processing(ref, ours)

def _ml_oov(ml, nb, seed, as_backend=lambda df: df):
    "Categorify(min_freq=5, num_buckets=nb) on `as_backend(ml)`, and Categorify(min_freq=5) on pandas."
    to = TabularGPU(as_backend(ml), procs=[Categorify(min_freq=5, num_buckets=nb, seed=seed)],
                    cat_names=['movieId', 'title'], y_names='rating', splits=_ml_split(ml))
    plain = TabularGPU(ml, procs=[Categorify(min_freq=5)], cat_names=['movieId', 'title'], y_names='rating',
                       splits=_ml_split(ml))
    return to, plain

@pytest.mark.parametrize('seed', [0, 77])
def test_categorify_oov_buckets(ml, seed, as_backend):
    """Categorify(min_freq=5, num_buckets=50): the vocabulary of Categorify(min_freq=5), then 50 bucket labels; a value
    the vocabulary drops gets vocab size + 1 + its hash % 50 (sklearn's), the others their codes; on new rows too.
    On cuDF frames too, against the same pandas Categorify and sklearn's hash."""
    nb = 50
    to, plain = _ml_oov(ml, nb, seed, as_backend)
    new = ml.iloc[:3000].copy()
    new['movieId'] = new.movieId + 10**7   # ids no training row has
    for n, key in (('movieId', _sk_int), ('title', _sk)):
        vocab = list(plain.classes[n].items)
        assert list(to.classes[n].items) == vocab + bucket_labels(nb)
        assert get_emb_sz(to)[to.cat_names.index(n)][0] == len(vocab) + nb
        for t, p, raw in ((to, plain, ml), (to.new(as_backend(new)), plain.new(new), new)):
            if t is not to: t.process(); p.process()
            ours, ref = to_pandas(t.items[n]).to_numpy(), to_pandas(p.items[n]).to_numpy()
            miss = raw[n].isna().to_numpy()
            dropped = (ref == 0) & ~miss
            assert dropped.sum() > 100
            np.testing.assert_array_equal(ours[~dropped], ref[~dropped])   # missing ones included: 0
            want = [len(vocab) + key(v, seed) % nb for v in raw[n].to_numpy()[dropped]]
            np.testing.assert_array_equal(ours[dropped], want)
    # decoded: a dropped value shows its bucket's label
    dec = to_pandas(to.new(to.items.iloc[:2000]).decode().items)
    n_dropped = (plain.items.movieId[:2000] == 0).sum()
    assert n_dropped and dec.movieId.astype(str).str.match(r'#bucket\d+#').sum() == n_dropped

def test_categorify_bucket_dict_and_missing(adult):
    "{name: buckets} buckets those columns only; a missing value stays #na# (0), never hashed."
    df = adult
    kw = dict(cat_names=['occupation', 'native-country'], y_names='income', splits=_ml_split(df))
    to = TabularGPU(df, procs=[Categorify(max_vocab=5, num_buckets={'native-country': 7})], **kw)
    plain = TabularGPU(df, procs=[Categorify(max_vocab=5)], **kw)
    assert list(to.classes['occupation']) == list(plain.classes['occupation'])
    np.testing.assert_array_equal(to.items.occupation, plain.items.occupation)
    codes, raw = to.items['native-country'].to_numpy(), df['native-country'].to_numpy()
    miss = pd.isna(raw)
    assert miss.any() and (codes[miss] == 0).all()
    dropped = (plain.items['native-country'].to_numpy() == 0) & ~miss
    np.testing.assert_array_equal(codes[dropped], [6 + _sk(v, 0) % 7 for v in raw[dropped]])

# --- HashBucket ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize('seed', [0, 31])
def test_hash_bucket_codes(ml, adult, seed, as_backend):
    """HashBucket: code = sklearn's hash % N + 1 on every row (0 where missing), N+1 embedding rows, decoded labels; on
    cuDF frames too."""
    procs = [HashBucket(['userId', 'title'], {'userId': 64, 'title': 1000}, seed=seed), Categorify, FillMissing,
             Normalize]
    to = TabularGPU(as_backend(ml), procs=procs,
                    cat_names=['userId', 'movieId', 'title'], cont_names=['year'], y_names='rating',
                    splits=_ml_split(ml))
    for n, nb, key in (('userId', 64, _sk_int), ('title', 1000, _sk)):
        np.testing.assert_array_equal(to_pandas(to.items[n]), _buckets(ml[n], key, seed, nb))
        assert list(to.classes[n]) == ['#na#'] + bucket_labels(nb)
    sizes = dict(zip(to.cat_names, get_emb_sz(to)))
    assert sizes['userId'][0] == 65 and sizes['title'][0] == 1001
    dec = to_pandas(to.new(to.items.iloc[:50]).decode().items)
    assert list(dec.userId) == [f'#bucket{b}#' for b in _buckets(ml.userId[:50], _sk_int, seed, 64, 0)]
    # missing values (Adult's occupation) are code 0 (#na#)
    a = TabularGPU(as_backend(adult), procs=[HashBucket('occupation', 9, seed=seed), Categorify],
                   cat_names=['occupation'], y_names='income')
    raw = adult.occupation.to_numpy()
    assert pd.isna(raw).any()
    np.testing.assert_array_equal(to_pandas(a.items.occupation), _buckets(raw, _sk, seed, 9))

def test_hash_bucket_on_fastais_tabular(ml):
    "fastai's own TabularPandas and Categorify take a HashBucket column: its bucket categories are its vocabulary."
    kw = dict(cat_names=['userId'], y_names='rating', splits=_ml_split(ml))
    ref = TabularPandas(ml.copy(), procs=[HashBucket('userId', 32), FastaiCategorify], **kw)
    ours = TabularGPU(ml, procs=[HashBucket('userId', 32), Categorify], **kw)
    assert list(ref.classes['userId']) == list(ours.classes['userId'])
    np.testing.assert_array_equal(ref.items.userId.to_numpy(), to_pandas(ours.items.userId).to_numpy())

def test_hash_bucket_ignores_categorify_frequency_options(ml):
    "min_freq, max_vocab and num_buckets leave a hashed column's buckets alone: its codes stay bucket + 1."
    to = TabularGPU(ml, procs=[HashBucket('userId', 500), Categorify(min_freq=10**6, max_vocab=2, num_buckets=3)],
                    cat_names=['userId', 'movieId'], y_names='rating')
    np.testing.assert_array_equal(to.items.userId, [_sk_int(v, 0) % 500 + 1 for v in ml.userId])
    assert len(to.classes['userId']) == 501 and list(to.classes['movieId']) == ['#na#'] + bucket_labels(3)

# --- HashedCross --------------------------------------------------------------------------------------------------
def _cross_text(df, parts):
    "The cross as pandas builds it: each part's text joined by '_X_', missing if any part is."
    txt = [df[p].map(lambda v: str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)) for p in parts]
    out = txt[0]
    for t in txt[1:]: out = out + '_X_' + t
    return out.astype(object).where(df[list(parts)].notna().all(axis=1), np.nan)   # NaN: fastai's missing

def test_exact_cross_is_fastais_categorify_of_the_joined_column(adult):
    """An exact cross: Categorify's vocabulary and codes are fastai's on the column pandas joins (missing if a part is).
    The cross is made after fastai's category cast (`reduce_memory`), so its vocabulary comes from the training rows, as
    fastai's does for a column it does not cast: compared without the cast."""
    parts = ('workclass', 'education', 'race')
    df = adult.copy()
    df['workclass_X_education_X_race'] = _cross_text(df, parts)
    kw = lambda: dict(y_names='income', splits=_ml_split(df), cont_names=['age'], reduce_memory=False)
    ref = TabularPandas(df, procs=[FastaiCategorify, Normalize], cat_names=list(parts) + [
        'workclass_X_education_X_race'], **kw())
    ours = TabularGPU(adult, procs=[HashedCross([parts]), Categorify, Normalize], cat_names=list(parts), **kw())
    assert list(ours.cat_names) == list(parts) + ['workclass_X_education_X_race']
    assert_same_processing(ref, ours)

@pytest.mark.parametrize('seed', [0, 5])
def test_hashed_cross_codes(ml, seed, as_backend):
    """A hashed cross of an int and a float-with-NaN column: code = sklearn's hash of the joined text % N + 1, of the
    raw values though a HashBucket listed first hashes one of them; on cuDF frames too."""
    procs = [HashBucket('userId', 10), HashedCross([('userId', 'year')], num_buckets=700, seed=seed), Categorify,
             FillMissing]
    to = TabularGPU(as_backend(ml), procs=procs,
                    cat_names=['userId'], cont_names=['year'], y_names='rating')
    text = _cross_text(ml, ('userId', 'year'))
    assert text.isna().any() and text.dropna().str.match(r'^\d+_X_\d{4}$').all()
    want = _buckets(text, _sk, seed, 700)
    np.testing.assert_array_equal(to_pandas(to.items.userId_X_year), want)
    assert len(to.classes['userId_X_year']) == 701

def test_learner_embeds_hashed_columns(ml, tmp_path):
    """tabular_learner: one embedding per hashed column, num_buckets+1 rows; a test frame's rows predict, a row as
    `predict` makes it (all object) gets the same codes, and the exported learner loads and predicts alike."""
    procs = [HashBucket('userId', 100), HashedCross([('userId', 'movieId')], num_buckets=2000),
             Categorify(min_freq=3, num_buckets=40), FillMissing, Normalize]
    to = TabularGPU(ml, procs=procs, cat_names=['userId', 'movieId'], cont_names=['year'], y_names='rating',
                    splits=_ml_split(ml))
    dls = to.dataloaders(bs=4096)
    learn = tabular_learner(dls, layers=[8])
    rows = dict(zip(to.cat_names, (e.num_embeddings for e in learn.model.embeds)))
    assert rows['userId'] == 101 and rows['userId_X_movieId'] == 2001
    assert rows['movieId'] == len(to.classes['movieId']) and to.classes['movieId'][-40:] == bucket_labels(40)
    assert 'year_na' not in to.bucket_counts and len(to.classes['year_na']) == 3   # FillMissing's flags: no buckets
    new = ml.iloc[-500:].drop(columns='rating')
    new['movieId'] = new.movieId + 10**7
    dl = dls.test_dl(new)
    preds, _ = learn.get_preds(dl=dl)
    assert preds.shape == (500, 1) and torch.isfinite(preds).all()
    cats = dl.dataset.items[list(to.cat_names)]
    assert (cats.movieId > len(to.classes['movieId']) - 1 - 40).all()   # unseen ids: in the buckets
    row = to.new(new.iloc[3].to_frame().T)   # predict's frame: one row, every column object
    row.process()
    assert torch.equal(row.packed()[0], dl.dataset.packed()[0][3:4])
    learn.export(tmp_path/'hashed.pkl')
    back = load_learner(tmp_path/'hashed.pkl', cpu=True)
    learn.dls.cpu()   # the learner on the host too, as load_learner(cpu=True) puts its copy: cuBLAS rounds unlike it
    with back.no_bar(), learn.no_bar():
        assert torch.equal(back.get_preds(dl=back.dls.test_dl(new))[0], learn.get_preds(dl=dl)[0])

# --- errors -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize('bad', [0, -3, 2.5, True, '10', None])
def test_num_buckets_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match='num_buckets'): HashBucket('a', bad)
    if bad is not None:
        with pytest.raises(ValueError, match='num_buckets'): HashedCross([('a', 'b')], num_buckets=bad)
        with pytest.raises(ValueError, match='num_buckets'): Categorify(num_buckets=bad)

def test_bad_seed_and_crosses():
    for s in (-1, 2**32, 1.5):
        with pytest.raises(ValueError, match='seed'): HashBucket('a', 4, seed=s)
        with pytest.raises(ValueError, match='seed'): HashedCross([('a', 'b')], seed=s)
        with pytest.raises(ValueError, match='seed'): Categorify(num_buckets=4, seed=s)
    with pytest.raises(ValueError, match='two or more'): HashedCross([('a',)])

@pytest.mark.parametrize('kind', ['lists', 'dicts'])
def test_unhashable_values_fail_naming_the_column(ml, kind):
    """A hashed column of lists or dicts: a TypeError naming it at set-up; the caller's frame is left as it was. (A list
    column is multi-hot, which Categorify(num_buckets) leaves unbucketed.)"""
    df = ml.iloc[:2000].copy()
    df['tags'] = [[g] if kind == 'lists' else {'g': g} for g in df.genres]
    before = df.copy()
    for procs in ([HashBucket('tags', 8), Categorify], [HashedCross([('tags', 'userId')], 8), Categorify],
                  *([[Categorify(min_freq=10**6, num_buckets=4)]] if kind == 'dicts' else [])):
        with pytest.raises(TypeError, match="'tags'"):
            TabularGPU(df, procs=procs, cat_names=['tags', 'userId'], y_names='rating', multi_hot={})
        pd.testing.assert_frame_equal(df, before)

def test_hashing_leaves_the_callers_frame_alone(ml):
    "Set-up and a test frame's processing hash copies: the caller's frames keep their columns, values and dtypes."
    df, new = ml.iloc[:5000].copy(), ml.iloc[5000:6000].copy()
    before, new_before = df.copy(), new.copy()
    to = TabularGPU(df, procs=[HashBucket('userId', 16), HashedCross([('userId', 'title')], 32),
                               Categorify(num_buckets=4)], cat_names=['userId', 'title'], y_names='rating')
    to.new(new).process()
    pd.testing.assert_frame_equal(df, before)
    pd.testing.assert_frame_equal(new, new_before)

def test_unknown_columns_and_bad_bucket_dicts(ml):
    with pytest.raises(KeyError, match='genres'):
        TabularGPU(ml, procs=[HashBucket('genres', 8), Categorify], cat_names=['userId'], y_names='rating')
    with pytest.raises(ValueError, match="'title'"):
        TabularGPU(ml, procs=[Categorify(num_buckets={'title': 3})], cat_names=['userId'], y_names='rating')

# --- cuDF ---------------------------------------------------------------------------------------------------------
@pytest.mark.cudf
def test_cudf_murmur3_is_this_hash(ml, adult):
    "cuDF's own `hash_values(method='murmur3', seed=)` on string and int64 columns gives this module's hash."
    import cudf
    for vals in (np.array(_strings(adult, ml), dtype=object),
                 np.unique(ml.movieId.to_numpy().astype(np.int64))):
        for seed in SEEDS:
            got = cudf.Series(vals).hash_values(method='murmur3', seed=seed).to_numpy().astype(np.uint32)
            np.testing.assert_array_equal(got, hash_values(vals, seed))

# --- ONNX ---------------------------------------------------------------------------------------------------------
def test_onnx_hashes_on_the_host_and_matches_get_preds(ml, tmp_path):
    """export_onnx with HashBucket, exact and hashed crosses and Categorify(num_buckets): `onnx_inputs` hashes on the
    host, and onnxruntime's predictions on held-out rows (unseen movies: in the buckets) are `get_preds`' (the same
    float32 graph: export_onnx's own tolerance, tests/test_export.py)."""
    ort = pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    from fastai_gpu_tabular.deploy.export import export_onnx, onnx_inputs
    df = ml.iloc[:20000]
    procs = [HashBucket('userId', 64, seed=1), HashedCross([('userId', 'movieId')], 500, seed=2),
             HashedCross([('genres', 'year')]), Categorify(min_freq=3, num_buckets=20, seed=4), FillMissing, Normalize]
    to = TabularGPU(df, procs=procs, cat_names=['userId', 'movieId', 'genres'], cont_names=['year', 'timestamp'],
                    y_names='rating', splits=_ml_split(df, 0.9))
    torch.manual_seed(0)
    learn = tabular_learner(to.dataloaders(bs=1024), layers=[16], y_range=(0.5, 5.5))
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-2)
    path = export_onnx(learn, tmp_path/'hashed.onnx')
    rows = ml.iloc[20000:23000].drop(columns='rating').copy()
    rows.loc[rows.index[:5], 'year'] = np.nan
    rows.loc[rows.index[5:10], 'genres'] = None
    sess = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    inputs = onnx_inputs(rows, sess)
    assert {'userId', 'movieId#bucket', 'userId_X_movieId', 'genres_X_year', 'genres#bucket'} <= set(inputs)
    out = sess.run(None, inputs)[0]
    dl = learn.dls.test_dl(rows)
    with learn.no_bar(): preds, _ = learn.get_preds(dl=dl)
    np.testing.assert_allclose(out, preds.numpy(), atol=1e-5, rtol=0)
    v = len(to.classes['movieId']) - 1 - 20
    assert (dl.dataset.items.movieId > v).sum() > 100   # the held-out rows do reach the buckets
    assert (dl.dataset.items.genres_X_year == 0).sum() >= 10   # and missing parts: #na#

def test_bench_suite_small():
    "`python -m fastai_gpu_tabular.bench --suite hashing`'s function, small: each way timed, its table made."
    from fastai_gpu_tabular.bench.hashing import format_table, hashing_suite
    res = hashing_suite(rows=(3000,), reps=1)
    assert set(res) == {'int_3000', 'str_3000'} and all(r['murmur3_distinct'] > 0 for r in res.values())
    assert 'hash_pandas_object' in format_table(res)
