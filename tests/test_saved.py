"""`TabularGPU.save`/`load`: the processed rows and procs' state as plain data. A loaded Tabular against the one saved
and fastai's TabularPandas on Adult, MovieLens (a multi-hot genres column, NaN filled) and flights (a Timestamp
vocabulary); loaded in a fresh process where unpickling fails; damaged files, versions and bad state named."""
import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
import numpy as np
import pandas as pd
import pytest
import torch
from fastai.tabular import core as fatc
from fastai.tabular.all import (
    CategoryBlock,
    FillMissing,
    Normalize,
    RandomSplitter,
    TabularPandas,
    TabularProc,
    range_of,
    set_seed,
    tabular_learner,
)
from helpers.fake_device import CHILD_PRELUDE
from helpers.faults import SmallDisk, run_child
from helpers.parity import assert_same_batches, assert_same_processing, build_both, fastai_valid_batches
import fastai_gpu_tabular.core as fgc
from fastai_gpu_tabular.all import Categorify, SavedFormatError, TabularGPU
from fastai_gpu_tabular.backend import backend_of, to_pandas
from fastai_gpu_tabular.datasets import load_flights, load_movielens_100k
from fastai_gpu_tabular.ops.proc_state import decode_values, encode_values

SAVED_OPS = Path(__file__).parent/'data'/'saved-ops-v1'
ADULT = dict(cat_names=['workclass', 'education', 'marital-status', 'occupation', 'gender', 'native-country'],
             cont_names=['age', 'fnlwgt', 'educational-num', 'hours-per-week'], y_names='income',
             y_block=CategoryBlock())

def _ml_kw(df, procs=None):
    "MovieLens ratings: user and movie IDs, genres as a multi-hot column, year (NaN: FillMissing), a regression."
    return dict(procs=procs or [Categorify, FillMissing, Normalize], cat_names=['userId', 'movieId', 'genres'],
                cont_names=['year', 'timestamp'], y_names='rating', multi_hot={'genres': '|'},
                splits=RandomSplitter(seed=0)(range_of(df)))

def _batches(dl): return [[t.cpu().clone() for t in b] for b in dl]

def assert_same_loaders(a, b):
    "Unshuffled train and valid batches of two Tabulars' loaders: identical tensors."
    for dl_a, dl_b in zip(a.dataloaders(bs=4096, shuffle=False, keep_frame=True).loaders,
                          b.dataloaders(bs=4096, shuffle=False, keep_frame=True).loaders):
        ba, bb = _batches(dl_a), _batches(dl_b)
        assert len(ba) == len(bb)
        for x,y in zip(ba, bb):
            assert len(x) == len(y) and all(torch.equal(s, t) for s,t in zip(x, y))

def assert_same_frame(saved, loaded):
    "The processed frame, as the packed rows hold it: codes and targets exact, conts as their float32."
    a, b = to_pandas(saved.items), to_pandas(loaded.items)
    assert list(b.columns) == [c for c in a.columns] and (b.index == a.index).all()
    assert dict(b.dtypes) == dict(a.dtypes)
    for c in a.columns:
        if c in saved.multi_hot: assert list(b[c]) == list(a[c]), c
        elif c in saved.cont_names: np.testing.assert_array_equal(b[c], a[c].astype(np.float32).astype(a[c].dtype), c)
        else: np.testing.assert_array_equal(b[c], a[c], c)

@pytest.mark.parametrize('procs', [[Categorify, FillMissing, Normalize], [Categorify, FillMissing]],
                         ids=['normalized', 'int_conts'])
def test_adult_as_saved_and_as_fastai(adult, tmp_path, procs, backend):
    """Conts normalized (the frame left to the packed rows, as `release_frame` leaves it) or integers (rebuilt at once).
    Built on cuDF too, and loaded back onto it (the frame rebuilt on the device at once)."""
    before = adult.copy()
    ref, ours = build_both(adult, backend, procs=procs, splits=RandomSplitter(seed=0)(range_of(adult)), **ADULT)
    ours.save(tmp_path/'adult')
    loaded = TabularGPU.load(tmp_path/'adult', backend=backend)
    assert type(loaded) is TabularGPU and loaded.split == ours.split == len(ref.train)
    assert (loaded.released is not None) == (Normalize in procs and backend == 'pandas')
    assert backend_of(loaded.items) == backend
    for a,b in [(loaded.classes[n], ref.classes[n]) for n in ref.cat_names] + [(loaded.vocab, ref.vocab)]:
        assert type(a.o2i) is type(b.o2i) and a.o2i == b.o2i   # built on first use
    assert_same_processing(ref, loaded, exact=backend == 'pandas')   # cuDF's sums round in another order
    assert_same_frame(ours, loaded)
    assert_same_loaders(ours, loaded)
    assert_same_batches(fastai_valid_batches(ref, 4096), loaded.dataloaders(bs=4096, shuffle=False).valid)
    # saved again after `dataloaders()` released its frame, or from the loaded one: the same bytes
    ours.dataloaders(bs=64)
    ours.save(tmp_path/'again', progress=False)
    loaded.save(tmp_path/'resaved', progress=False)
    files = lambda d: json.loads((tmp_path/d/'tabular.json').read_text())['files']
    assert files('adult') == files('again') == files('resaved')
    pd.testing.assert_frame_equal(adult, before)

def test_movielens_multi_hot_as_saved_and_as_fastai(ml, tmp_path):
    "The genres block, the IDs' vocabularies (numpy ints), year's fill value and `year_na`, a regression target."
    before = ml.copy()
    ours = TabularGPU(ml, **_ml_kw(ml))
    ours.save(tmp_path/'ml')
    loaded = TabularGPU.load(tmp_path/'ml')
    assert loaded.multi_hot == {'genres': '|'} and loaded.bag_widths == ours.bag_widths
    assert loaded.cat_names == ['userId', 'movieId', 'genres', 'year_na']
    for n in loaded.cat_names:
        assert list(loaded.classes[n].items) == list(ours.classes[n].items), n
        assert [type(o) for o in loaded.classes[n].items] == [type(o) for o in ours.classes[n].items], n
    assert_same_frame(ours, loaded)
    assert_same_loaders(ours, loaded)
    # fastai's TabularPandas (which has no multi-hot columns) on the other columns
    kw = _ml_kw(ml)
    ref = TabularPandas(ml.copy(), procs=[fatc.Categorify, FillMissing, Normalize], cat_names=['userId', 'movieId'],
                        cont_names=kw['cont_names'], y_names='rating', splits=kw['splits'])
    items = loaded.items
    for n in ref.cat_names:
        assert list(loaded.classes[n].items) == list(ref.classes[n].items), n
        assert [type(o) for o in loaded.classes[n].items] == [type(o) for o in ref.classes[n].items], n
        np.testing.assert_array_equal(items[n], ref.items[n], n)
    for d_ours, d_ref in ((loaded.na_dict, ref.na_dict), (loaded.means, ref.means), (loaded.stds, ref.stds)):
        assert list(d_ours) == list(d_ref) and all(d_ours[k] == d_ref[k] and type(d_ours[k]) == type(d_ref[k])
                                                   for k in d_ref)
    for n in ref.cont_names:
        np.testing.assert_array_equal(items[n], ref.items[n].astype(np.float32).astype(items[n].dtype))
    np.testing.assert_array_equal(items['rating'], ref.items['rating'])
    pd.testing.assert_frame_equal(ml, before)

def test_fastai_categorify_and_timestamp_vocab(tmp_path):
    """fastai's own Categorify class, a vocabulary of tz-aware Timestamps (flights' `time_hour`), NaN filled in two
    conts, a classification target: as fastai's TabularPandas gives them."""
    df = load_flights(nrows=20_000)
    df['time_hour'] = pd.to_datetime(df['time_hour'])
    kw = dict(procs=lambda: [fatc.Categorify, FillMissing, Normalize], cat_names=['time_hour', 'carrier', 'month'],
              cont_names=['dep_delay', 'dep_time', 'distance'], y_names='origin', y_block=CategoryBlock(),
              splits=RandomSplitter(seed=1)(range_of(df)))
    ref, ours = build_both(df, **kw)
    ours.save(tmp_path/'f')
    loaded = TabularGPU.load(tmp_path/'f')
    assert any(type(p) is fatc.Categorify for p in loaded.procs.fs)
    assert isinstance(loaded.classes['time_hour'][1], pd.Timestamp)
    assert_same_processing(ref, loaded)
    assert_same_loaders(ours, loaded)
    # new rows (later flights: times the vocabulary has and has not) encoded alike through the Timestamps read back
    raw = load_flights(nrows=25_000).iloc[15_000:]
    raw['time_hour'] = pd.to_datetime(raw['time_hour'])
    a, b = (_batches(to.dataloaders(bs=1024, shuffle=False).test_dl(raw)) for to in (ours, loaded))
    assert len(a) == len(b) and all(torch.equal(s.cpu(), t.cpu()) for x,y in zip(a, b) for s,t in zip(x, y))
    assert (a[0][0][:, 0] > 0).any() and (a[-1][0][:, 0] == 0).any()

def test_new_rows_encode_as_in_memory(adult, ml, tmp_path, monkeypatch):
    "test_dl on raw rows (unseen values, NaN, genres as strings) and show_batch: as from the Tabular saved."
    for name,(df,kw) in {'adult': (adult, dict(procs=[Categorify, FillMissing, Normalize], **ADULT,
                                               splits=RandomSplitter(seed=2)(range_of(adult)))),
                         'ml': (ml, _ml_kw(ml))}.items():
        ours = TabularGPU(df, **kw)
        ours.save(tmp_path/name)
        loaded = TabularGPU.load(tmp_path/name)
        raw = df.sample(3000, random_state=0)
        dls_a, dls_b = ours.dataloaders(bs=512, shuffle=False), loaded.dataloaders(bs=512, shuffle=False)
        for x,y in zip(_batches(dls_a.test_dl(raw)), _batches(dls_b.test_dl(raw))):
            assert all(torch.equal(s, t) for s,t in zip(x, y))
        shown = []
        monkeypatch.setattr(fgc, 'display_df', shown.append)
        dls_a.valid.show_batch(max_n=20)
        dls_b.valid.show_batch(max_n=20)
        pd.testing.assert_frame_equal(shown[0], shown[1])

def test_training_from_loaded_is_the_same(adult, tmp_path):
    "One epoch from the loaded Tabular and from the one saved, same seed: the same weights, bit for bit."
    df = adult.iloc[:6000]
    ours = TabularGPU(df, procs=[Categorify, FillMissing, Normalize], splits=RandomSplitter(seed=0)(range_of(df)),
                      **ADULT)
    ours.save(tmp_path/'a')
    loaded = TabularGPU.load(tmp_path/'a')
    weights = []
    for to in (ours, loaded):
        set_seed(0)
        learn = tabular_learner(to.dataloaders(bs=256), layers=[32])
        with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-2)
        weights.append([p.detach().clone() for p in learn.model.parameters()])
    assert all(torch.equal(a, b) for a,b in zip(*weights))

_FRESH = r"""
import sys, os, numpy as np
path, out = sys.argv[1], sys.argv[2]
from fastai_gpu_tabular.all import TabularGPU
opened = []
def hook(event, args):
    if event == 'pickle.find_class': raise RuntimeError(f'unpickling {args}')
    if event == 'open' and isinstance(args[0], str) and args[0].startswith(path): opened.append(args[0])
sys.addaudithook(hook)
to = TabularGPU.load(path, progress=False)
dls = to.dataloaders(bs=4096, shuffle=False)
for i,b in enumerate(dls.valid):
    np.save(f'{out}/b{i}.npy', np.concatenate([t.cpu().numpy().view(np.int32).reshape(len(t), -1) for t in b], 1))
import pickle, pathlib
try: pickle.loads(pickle.dumps(pathlib.Path('x'))); print('the hook missed an unpickling')
except RuntimeError: pass
print('\n'.join(sorted(set(opened))))
"""

def test_fresh_process_reads_no_pickle(ml, tmp_path):
    "Loaded in a new Python process whose unpickling raises: the batches of the Tabular saved, from .npy and .json."
    ours = TabularGPU(ml, **_ml_kw(ml))
    ours.save(tmp_path/'ml')
    (tmp_path/'out').mkdir()
    root = str(Path(__file__).parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get('PYTHONPATH', '')]))
    res = subprocess.run([sys.executable, '-c', CHILD_PRELUDE + _FRESH, str(tmp_path/'ml'), str(tmp_path/'out')],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    opened = res.stdout.split()
    assert opened and all(f.endswith(('.npy', '.json')) for f in opened)
    want = [np.concatenate([t.cpu().numpy().view(np.int32).reshape(len(t), -1) for t in b], 1)
            for b in ours.dataloaders(bs=4096, shuffle=False).valid]
    got = [np.load(tmp_path/'out'/f'b{i}.npy') for i in range(len(want))]
    assert len(list((tmp_path/'out').iterdir())) == len(want)
    for a,b in zip(want, got): np.testing.assert_array_equal(a, b)

@pytest.fixture
def saved(adult, tmp_path):
    df = adult.iloc[:5000]
    to = TabularGPU(df, procs=[Categorify, FillMissing, Normalize], splits=RandomSplitter(seed=0)(range_of(df)),
                    **ADULT)
    to.save(tmp_path/'s', chunk_rows=1500)
    return tmp_path/'s'

def test_truncated_file_is_named(saved):
    f = saved/'train'/'part.00001.npy'
    f.write_bytes(f.read_bytes()[:-5])
    with pytest.raises(SavedFormatError, match=r"part\.00001\.npy.*truncated"): TabularGPU.load(saved)

def _flip(f:Path, at:int=-3):
    b = bytearray(f.read_bytes())
    b[at] ^= 1
    f.write_bytes(bytes(b))

@pytest.mark.parametrize('name', ['train/part.00001.npy', 'valid/part.00000.npy', 'train/chunks.json', 'index.npy'])
def test_altered_file_is_named(saved, name):
    "One bit changed in a rows file, a chunk list or the row index: that file named; not read with verify=False."
    _flip(saved/name, -3 if name.endswith('.npy') else 3)
    with pytest.raises(SavedFormatError, match=name.replace('.', r'\.') + " does not match the sha256"):
        TabularGPU.load(saved)
    if name.startswith('train/part'): TabularGPU.load(saved, verify=False)   # sizes and headers are still checked

@pytest.mark.parametrize('name', ['train/part.00001.npy', 'index.npy'])
def test_a_fast_load_checks_the_headers(saved, name):
    """`verify=False`, the documented fast load, hashes nothing: a header altered in place (the dtype, the file's size
    as saved) is refused by the header's own check, naming the file (tests/test_chunks.py: each of its checks)."""
    f, (old, new, dt) = saved/name, (("'<i4'", "'<u4'", 'int32') if 'part' in name else ("'<i8'", "'<u8'", 'int64'))
    f.write_bytes(f.read_bytes().replace(old.encode(), new.encode()))
    with pytest.raises(SavedFormatError, match=name.replace('.', r'\.') + rf" holds u{dt} \(.*\) values, not the {dt}"):
        TabularGPU.load(saved, verify=False, progress=False)

def test_missing_file_and_manifest(saved):
    (saved/'train'/'part.00000.npy').unlink()
    with pytest.raises(SavedFormatError, match=r"part\.00000\.npy is missing"): TabularGPU.load(saved)
    m = saved/'tabular.json'
    m.write_text(m.read_text()[:-20])
    with pytest.raises(SavedFormatError, match=r"tabular\.json is not valid JSON"): TabularGPU.load(saved)
    m.unlink()
    with pytest.raises(SavedFormatError, match=r"tabular\.json is missing"): TabularGPU.load(saved)

def test_rows_file_that_is_a_link_is_named(saved, tmp_path):
    """A rows file replaced by a symbolic link is refused by name, even to a file of the very bytes saved (which the
    size and sha256 checks pass): what a link points at can change under the rows a load maps."""
    f = saved/'train'/'part.00001.npy'
    f.rename(tmp_path/'elsewhere.npy')
    f.symlink_to(tmp_path/'elsewhere.npy')
    with pytest.raises(SavedFormatError, match=r"part\.00001\.npy is a symbolic link"): TabularGPU.load(saved)

def test_unknown_version_and_proc_type(saved):
    m = saved/'tabular.json'
    meta = json.loads(m.read_text())
    m.write_text(json.dumps({**meta, 'version': 99}))
    with pytest.raises(SavedFormatError, match=r"tabular\.json is in format version 99"): TabularGPU.load(saved)
    for k,v,msg in (('procs', 'os.system', r"'os\.system'"), ('splits', '../../x.npy', r"\.\./\.\./x\.npy"),
                    ('layout', 'load', 'layout dtype')):
        bad = json.loads(json.dumps(meta))
        if k == 'procs': bad['procs'][0]['type'] = v
        elif k == 'splits': bad['splits']['train'][0][0] = v
        else: bad['layout'][0][2] = v
        m.write_text(json.dumps(bad))
        with pytest.raises(SavedFormatError, match=r"tabular\.json does not describe.*" + msg): TabularGPU.load(saved)

def test_unsupported_state_named_at_save(adult, tmp_path):
    "A vocabulary of values JSON cannot type (Python dates), a proc with no saved form: named, nothing written."
    df = adult.iloc[:3000].copy()
    df['day'] = pd.to_datetime('2020-01-01') + pd.to_timedelta(df['age'] % 7, unit='D')
    df['day'] = df['day'].dt.date   # object column of datetime.date
    before = df.copy()
    to = TabularGPU(df, procs=[Categorify, FillMissing, Normalize], **{**ADULT, 'cat_names': ['day', 'workclass']})
    with pytest.raises(TypeError, match=r"Categorify\.classes\['day'\] holds datetime\.date"): to.save(tmp_path/'x')
    assert not (tmp_path/'x').exists()
    pd.testing.assert_frame_equal(df, before)
    class Clip(TabularProc):
        def encodes(self, to): return to
    to = TabularGPU(df, procs=[Categorify, Clip], **{**ADULT, 'cat_names': ['workclass']})
    with pytest.raises(TypeError, match=r"proc Clip .* has no saved form"): to.save(tmp_path/'x')
    (tmp_path/'y').mkdir()
    (tmp_path/'y'/'notes.txt').write_text('mine')
    to = TabularGPU(df, procs=[Categorify], **{**ADULT, 'cat_names': ['workclass']})
    with pytest.raises(FileExistsError, match="no tabular.json"): to.save(tmp_path/'y')
    assert to.save(tmp_path/'z') == tmp_path/'z' and to.save(tmp_path/'z') == tmp_path/'z'   # a save replaces a save

@pytest.mark.parametrize('v', [np.float32('nan'), np.float64('-inf'), float('nan'), np.int16(-7), np.uint64(2**63),
                               np.bool_(True), True, 3, 'x', pd.Timestamp('2013-01-01 05:00', tz='America/New_York')])
def test_typed_values_round_trip(v):
    "Each value type a saved Tabular holds comes back as that type and value (NaN as NaN), through strict JSON."
    back = decode_values(json.loads(json.dumps(encode_values([v, v], 'x'), allow_nan=False)))
    assert [type(o) for o in back] == [type(v)] * 2
    same = (lambda a: np.isnan(a)) if isinstance(v, (float, np.floating)) and np.isnan(v) else (lambda a: a == v)
    assert all(same(o) for o in back)
    if isinstance(v, pd.Timestamp): assert str(back[0].tz) == str(v.tz)

def test_str_lists_checked():
    "A str vocabulary holding another type, or written as one string, is an error, not a list of its characters."
    assert decode_values({'type': 'str', 'values': ['a', 'b']}) == ['a', 'b']
    for bad in (['a', 3], ['a', None], 'ab', {'a': 1}):
        with pytest.raises(ValueError, match='non-strings|not a list'): decode_values({'type': 'str', 'values': bad})

def test_progress_lines_and_silence(saved, capsys):
    "Not a terminal: a plain line for the load with its rows and rows/s; nothing with progress=False."
    TabularGPU.load(saved)
    out = capsys.readouterr().out
    assert 'loading' in out and '5,000 rows' in out and 'rows/s' in out
    TabularGPU.load(saved, progress=False)
    assert capsys.readouterr().out == ''

@pytest.mark.cuda
def test_load_onto_the_gpu(adult, tmp_path):
    ours = TabularGPU(adult, procs=[Categorify, FillMissing, Normalize], **ADULT)
    ours.save(tmp_path/'g')
    loaded = TabularGPU.load(tmp_path/'g', device='cuda')
    a, b = ours.dataloaders(bs=4096, shuffle=False, device='cpu'), loaded.dataloaders(bs=4096, shuffle=False)
    for x,y in zip(a.valid, b.valid):
        assert y[0].is_cuda and all(torch.equal(s, t.cpu()) for s,t in zip(x, y))

def test_bench_suite_small(tmp_path):
    "`--suite saved` at a tiny N: the table, and sizes that add up (no timing asserted)."
    out = tmp_path/'saved.json'
    res = subprocess.run([sys.executable, '-m', 'fastai_gpu_tabular.bench', '--suite', 'saved', '--saved-rows', '3000',
                          '--out', str(out)], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent)))
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(out.read_text())['saved']
    assert 'load (sha256 checked)' in res.stdout and r['rows'] == 3000
    assert r['packed_bytes'] == 3000 * r['width'] * 4 < r['rows_file_bytes'] < r['disk_bytes']
    assert r['disk_bytes'] == r['rows_file_bytes'] + r['state_bytes']

def test_folders_are_packed_chunks(saved):
    "train/ and valid/ are `PackedChunks` folders: the streaming loader reads the rows a load gives."
    from fastai_gpu_tabular.all import PackedChunks, StreamDataLoader
    loaded = TabularGPU.load(saved, progress=False)
    rows, layout = loaded.packed_rows('cpu')
    train, valid = PackedChunks(saved/'train'), PackedChunks(saved/'valid')
    assert len(train.files) == 3 and train.layout == layout and valid.layout == layout
    assert torch.equal(torch.cat([train.load(), valid.load()]), rows) and len(train) == loaded.split
    a, b = _batches(StreamDataLoader(valid, bs=256, shuffle=False)), _batches(loaded.dataloaders(bs=256).valid)
    assert len(a) == len(b) and all(torch.equal(s, t) for x,y in zip(a, b) for s,t in zip(x, y))

def test_dask_tabular_saved_as_in_memory(adult, tmp_path):
    """A TabularDask of Adult in 4 partitions, saved (from its chunks, `chunk_rows` at a time) and loaded, against the
    in-memory TabularGPU of the same rows saved and loaded: the same packed rows, procs' state, dtypes and batches (on
    a range index: a Dask frame's row labels are its partitions')."""
    dask = pytest.importorskip('dask', reason='the `dask` extra')
    import dask.dataframe as dd
    df = adult.copy()
    df['is_valid'] = False
    df.loc[RandomSplitter(seed=0)(range_of(df))[1], 'is_valid'] = True
    ddf = dd.from_pandas(df, npartitions=4)
    mem = ddf.compute()   # the rows the partitions hold, with the dtypes Dask gave them
    kw = lambda: dict(procs=[Categorify, FillMissing, Normalize], **ADULT)
    with dask.config.set(scheduler='sync'):
        to = TabularGPU(ddf, splits='is_valid', chunk_dir=tmp_path/'c', progress=False, **kw())
        idle = TabularGPU(ddf, splits='is_valid', chunk_dir=tmp_path/'c2', progress=False, do_setup=False, **kw())
        with pytest.raises(RuntimeError, match='not processed yet'): idle.save(tmp_path/'idle')
        to.save(tmp_path/'d', chunk_rows=3000, progress=False)
    tg = TabularGPU(mem, splits=fatc.ColSplitter('is_valid')(mem), **kw())
    tg.save(tmp_path/'m', progress=False)
    a, b = TabularGPU.load(tmp_path/'d', progress=False), TabularGPU.load(tmp_path/'m', progress=False)
    assert type(a) is TabularGPU and a.split == b.split == tg.split and len(a) == len(tg)
    assert torch.equal(a.packed_rows('cpu')[0], tg.packed_rows('cpu')[0]) and a.packed_rows()[1] == b.packed_rows()[1]
    da, dm = (json.loads((tmp_path/d/'tabular.json').read_text()) for d in ('d', 'm'))
    for k in ('procs', 'cat_names', 'cont_names', 'y_names', 'dtypes', 'layout', 'width'): assert da[k] == dm[k], k
    assert sorted(da['columns']) == sorted(dm['columns'])   # the Dask frame's are named ones first
    assert da['index'] == {'start': 0, 'stop': len(tg), 'step': 1}
    assert all(n <= 3000 for k in ('train', 'valid') for _,n in da['splits'][k]) and len(da['splits']['train']) > 4
    pd.testing.assert_frame_equal(a.items, b.items[da['columns']].reset_index(drop=True))
    assert_same_loaders(a, b)

def test_hashing_procs_saved(adult, tmp_path):
    """HashedCross, HashBucket and Categorify(num_buckets) round trip: the loaded Tabular's rows, and its codes of raw
    rows whose values the vocabularies lack (the out-of-vocabulary buckets), are the saved one's."""
    from fastai_gpu_tabular.all import HashBucket, HashedCross
    df = adult.iloc[:8000]
    procs = [HashedCross([('workclass', 'gender')]), HashBucket('native-country', 16, seed=3),
             Categorify(min_freq=200, num_buckets=8, seed=1), FillMissing, Normalize]
    ours = TabularGPU(df, procs=procs, **{**ADULT, 'cat_names': list(ADULT['cat_names'])},
                      splits=RandomSplitter(seed=0)(range_of(df)))
    ours.save(tmp_path/'h')
    loaded = TabularGPU.load(tmp_path/'h')
    assert loaded.procs.categorify.bucket_counts == ours.procs.categorify.bucket_counts
    assert_same_loaders(ours, loaded)
    raw = adult.iloc[8000:12000]   # rows the vocabularies never saw
    a, b = (_batches(to.dataloaders(bs=1024, shuffle=False).test_dl(raw)) for to in (ours, loaded))
    assert all(torch.equal(s, t) for x,y in zip(a, b) for s,t in zip(x, y))
    occ = ours.cat_names.index('occupation')
    assert (torch.cat([x[0][:, occ] for x in a]) > len(ours.classes['occupation']) - 9).any()   # a bucket is used

@pytest.mark.parametrize('case', ['adult', 'ml'])
def test_target_and_groupby_procs_saved(case, adult, ml, tmp_path):
    """TargetEncode (binary and regression) and JoinGroupby round trip: the loaded Tabular's rows (out-of-fold values
    as saved) and its encodings of raw rows (the full-training statistic, unseen categories the mean) are the saved
    one's."""
    from fastai_gpu_tabular.all import JoinGroupby, TargetEncode
    if case == 'adult':
        df, raw = adult.iloc[:8000], adult.iloc[8000:11000]
        kw = dict(procs=[TargetEncode(['education', 'occupation']), JoinGroupby('occupation', ['age', 'fnlwgt']),
                         Categorify, FillMissing, Normalize], **{**ADULT, 'cat_names': list(ADULT['cat_names']),
                                                                 'cont_names': list(ADULT['cont_names'])},
                  splits=RandomSplitter(seed=0)(range_of(df)))
    else:
        df, raw = ml.iloc[:8000], ml.iloc[8000:11000]
        kw = _ml_kw(df, procs=[TargetEncode(['userId', 'movieId'], smooth=5.), Categorify, FillMissing, Normalize])
    ours = TabularGPU(df, **kw)
    ours.save(tmp_path/case)
    loaded = TabularGPU.load(tmp_path/case)
    assert loaded.cont_names == ours.cont_names
    te = [p for p in loaded.procs.fs if type(p).__name__ == 'TargetEncode'][0]
    te0 = [p for p in ours.procs.fs if type(p).__name__ == 'TargetEncode'][0]
    for n,e in te0.encodings.items(): pd.testing.assert_frame_equal(te.encodings[n], e)
    assert te.target_mean == te0.target_mean
    assert_same_loaders(ours, loaded)
    a, b = (_batches(to.dataloaders(bs=1024, shuffle=False).test_dl(raw)) for to in (ours, loaded))
    assert len(a) == len(b) and all(torch.equal(s, t) for x,y in zip(a, b) for s,t in zip(x, y))

def test_a_save_of_every_op_from_before_the_folders_loads(tmp_path):
    """tests/data/saved-ops-v1, saved when each op's type was `fastai_gpu_tabular.<module>.<op>` (helpers/saved_ops.py
    says how), loads under the ops' names of today: the same procs, rows and encodings of later rows as the recipe's."""
    from helpers.saved_ops import ops_frame, ops_tabular
    old_names = [p['type'] for p in json.loads((SAVED_OPS/'tabular.json').read_text())['procs']]
    assert 'fastai_gpu_tabular.history.History' in old_names   # written before the move, not by today's save
    df = ops_frame()
    ours, loaded = ops_tabular(df), TabularGPU.load(SAVED_OPS, progress=False)
    assert [type(p) for p in loaded.procs.fs] == [type(p) for p in ours.procs.fs]
    assert_same_loaders(ours, loaded)
    later = load_movielens_100k().iloc[600:900].drop(columns='rating')   # the saved state's history goes on
    later = later.assign(age_log=later.age.astype('f8'), age_clip=later.age.astype('f8'))
    a, b = (_batches(to.dataloaders(bs=128, shuffle=False).test_dl(later)) for to in (ours, loaded))
    assert len(a) == len(b) and all(torch.equal(s, t) for x,y in zip(a, b) for s,t in zip(x, y))
    ours.save(tmp_path/'now', progress=False)   # and today's save writes today's names
    now = [p['type'] for p in json.loads((tmp_path/'now'/'tabular.json').read_text())['procs']]
    assert len(now) == len(old_names) and all(n.split('.')[-1] == o.split('.')[-1] for n,o in zip(now, old_names))

def _header_len(f:Path) -> int:
    with open(f, 'rb') as fh:
        major,_ = np.lib.format.read_magic(fh)
        (np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0)(fh)
        return fh.tell()

@pytest.mark.skipif(sys.platform != 'linux', reason='rows files are mapped on Linux only')
def test_rows_files_mapped_not_copied(adult, tmp_path):
    """Each rows file's header is as long as where its rows go in the whole, modulo a 4096-byte page, and numpy reads
    it; a load maps the files' pages (they show in /proc/self/maps) and still checks them (a bit flipped inside a
    mapped page is named); saving it or another into the folder, or removing it, leaves the loaded rows as they were."""
    ours = TabularGPU(adult, procs=[Categorify, FillMissing, Normalize], splits=RandomSplitter(seed=0)(range_of(adult)),
                      **ADULT)
    d = tmp_path/'s'
    ours.save(d, chunk_rows=5000, progress=False)
    rows, _ = ours.packed_rows('cpu')
    meta, at = json.loads((d/'tabular.json').read_text()), 0
    names = [f'{k}/{f}' for k in ('train', 'valid') for f,_ in meta['splits'][k]]
    for name in names:
        part = np.load(d/name)
        np.testing.assert_array_equal(part, rows[at:at + len(part)].numpy())
        assert _header_len(d/name) % 4096 == at * rows.shape[1] * 4 % 4096, name
        at += len(part)
    assert at == len(rows) and len(names) > 4
    loaded = TabularGPU.load(d, progress=False)
    got, _ = loaded.packed_rows('cpu')
    assert torch.equal(got, rows)
    maps = Path('/proc/self/maps').read_text()
    assert all(str((d/n).resolve()) in maps for n in names)
    shutil.copytree(d, tmp_path/'copy')
    _flip(tmp_path/'copy'/'train'/'part.00001.npy', 8192)
    with pytest.raises(SavedFormatError, match=r"train/part\.00001\.npy does not match the sha256"):
        TabularGPU.load(tmp_path/'copy')
    loaded.save(d, chunk_rows=5000, progress=False)   # into the folder its rows are mapped from: the same files
    assert json.loads((d/'tabular.json').read_text())['files'] == meta['files'] and torch.equal(got, rows)
    other = TabularGPU(adult.iloc[::-1].reset_index(drop=True), procs=[Categorify, FillMissing, Normalize], **ADULT)
    other.save(d, chunk_rows=5000, progress=False)
    assert not torch.equal(other.packed_rows('cpu')[0], rows) and torch.equal(got, rows)
    shutil.rmtree(d)
    assert torch.equal(got, rows)
    assert_same_frame(ours, loaded)   # the frame left to the packed rows, rebuilt from them now

def test_files_saved_with_plain_headers_load(saved):
    "Rows files whose headers are as `np.save` writes them (as saves before padded headers): read, checked, the same."
    want = TabularGPU.load(saved, progress=False).packed_rows('cpu')[0].clone()
    m = saved/'tabular.json'
    meta = json.loads(m.read_text())
    for name in meta['files']:
        if name.endswith('.npy') and '/' in name:
            np.save(saved/name, np.load(saved/name))
            b = (saved/name).read_bytes()
            meta['files'][name] = {'bytes': len(b), 'sha256': hashlib.sha256(b).hexdigest()}
            assert _header_len(saved/name) == 128
    m.write_text(json.dumps(meta))
    assert torch.equal(TabularGPU.load(saved, progress=False).packed_rows('cpu')[0], want)
    _flip(saved/'valid'/'part.00000.npy', 200)
    with pytest.raises(SavedFormatError, match=r"valid/part\.00000\.npy does not match the sha256"):
        TabularGPU.load(saved)

# --- a save is all or nothing -----------------------------------------------------------------------------------------
# A child Python saves `new` over `old` once to record the steps the save takes under the folder's parent, then, for
# each step k, saves it again in a forked child killed before step k (tests/helpers/faults.py), loads the folder,
# and saves `old` over whatever the kill left, as a user would save again.
_KILLS = """
import json, shutil, sys
from pathlib import Path
import torch
torch.set_num_threads(1)   # no OpenMP team: the save forks
sys.path.insert(0, sys.argv[2])
from helpers.faults import install, killed_at, steps
from fastai.tabular.all import Categorify, CategoryBlock, FillMissing, Normalize, RandomSplitter, range_of
from fastai_gpu_tabular.all import TabularGPU
from fastai_gpu_tabular.datasets import load_adult
install()
df = load_adult()
def build(rows, seed):
    d = df.sample(rows, random_state=seed)   # row labels in no range: an index.npy too
    return TabularGPU(d, procs=[Categorify, FillMissing, Normalize], cat_names=['workclass', 'education'],
                      cont_names=['age', 'fnlwgt'], y_names='income', y_block=CategoryBlock(),
                      splits=RandomSplitter(seed=0)(range_of(d)))
old, new = build(600, 1), build(1000, 2)
root = Path(sys.argv[1])
path = root/'saved'
save = lambda to: to.save(path, chunk_rows=256, progress=False)
def which():
    "Which Tabular the folder holds: 'old', 'new', 'mix' (parts of both) or why it holds neither."
    try: t = TabularGPU.load(path, progress=False)
    except Exception as e: return f'neither: {type(e).__name__}: {e}'
    got = t.packed_rows('cpu')[0], list(t.row_index), {n: list(t.classes[n]) for n in t.cat_names}, t.split
    for name,to in (('old', old), ('new', new)):
        want = to.packed_rows('cpu')[0], list(to.row_index), {n: list(to.classes[n]) for n in to.cat_names}, to.split
        if torch.equal(got[0], want[0]) and got[1:] == want[1:]: return name
    return 'mix'
others = lambda: sorted(p.name for p in root.iterdir() if p.name != 'saved')
def again():
    "Save `old` over what the kill left, as a user would: None, or its error (and the folder then made anew)."
    try: save(old)
    except Exception as e:
        shutil.rmtree(path)
        save(old)
        return f'{type(e).__name__}: {e}'
save(old)
taken = steps(lambda: save(new), root)
save(old)
res = []
for k,step in enumerate(taken):
    killed = killed_at(lambda: save(new), root, k)
    got, left = which(), others()
    res.append(dict(step=step, killed=killed, got=got, left=left, again=again(), after=which(), cleared=others()))
print(json.dumps(res))
"""

def test_a_save_killed_at_any_step_leaves_the_earlier_or_the_new(tmp_path):
    """SIGKILLed before each step a save over an earlier one takes (opening a file, a rename, a removal, a new folder):
    the folder loads as the earlier save or the new one, never neither and never a mix, earlier until one step and new
    from it on; the next save replaces what the kill left and clears its debris."""
    tests = str(Path(__file__).parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(tests).parent), os.environ.get('PYTHONPATH', '')]))
    res = run_child([sys.executable, '-c', CHILD_PRELUDE + _KILLS, str(tmp_path), tests], timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    kills = json.loads(res.stdout.splitlines()[-1])
    assert len(kills) >= 20 and all(k['killed'] for k in kills), kills   # rows files, manifest, renames, removals
    got = [k['got'] for k in kills]
    assert set(got) <= {'old', 'new'}, [k for k in kills if k['got'] not in ('old', 'new')][:3]
    first = got.index('new')   # the one step that commits
    assert got[:first] == ['old'] * first and got[first:] == ['new'] * (len(got) - first) and first > 5, got
    assert all(k['again'] is None and k['after'] == 'old' and k['cleared'] == [] for k in kills), kills
    assert any(k['left'] for k in kills)   # the debris the next save cleared

@pytest.mark.parametrize('share', [0., 0.3, 0.7, 0.99])
def test_a_save_that_fills_the_disk_keeps_the_earlier(adult, tmp_path, monkeypatch, share):
    """A save over an earlier one runs out of disk after `share` of its bytes (writes raise ENOSPC, as a full disk's
    do): the error is the disk's, naming it; the earlier save loads as it was, and nothing of the new one is left."""
    old, new = (TabularGPU(adult.iloc[a:b], procs=[Categorify, FillMissing, Normalize], **ADULT) for a,b in
                ((0, 3000), (3000, 8000)))
    d = tmp_path/'disk'
    old.save(d/'s', chunk_rows=1000, progress=False)
    new.save(tmp_path/'size', chunk_rows=1000, progress=False)
    size = sum(f.stat().st_size for f in (tmp_path/'size').rglob('*') if f.is_file())
    with SmallDisk(d, share * size, monkeypatch), pytest.raises(OSError, match='No space left on device') as e:
        new.save(d/'s', chunk_rows=1000, progress=False)
    assert e.value.errno == errno.ENOSPC and str(d) in str(e.value)
    assert e.value.__notes__ == [f"{d/'s'} is as it was: this write left nothing there"]
    assert [p.name for p in d.iterdir()] == ['s']   # the new save's files are gone
    loaded = TabularGPU.load(d/'s', progress=False)
    assert torch.equal(loaded.packed_rows('cpu')[0], old.packed_rows('cpu')[0])
    assert list(loaded.row_index) == list(old.row_index)

_FULL_TMPFS = """
import errno, json, sys
from pathlib import Path
import torch
from fastai_gpu_tabular.all import TabularGPU
disk, old, new = (Path(a) for a in sys.argv[1:])
old, new = (TabularGPU.load(p, progress=False) for p in (old, new))
old.save(disk/'s', progress=False)
try:
    new.save(disk/'s', progress=False)
    err = None
except OSError as e: err = [e.errno, str(e)]
loaded = TabularGPU.load(disk/'s', progress=False).packed_rows('cpu')[0]
print(json.dumps(dict(err=err, old=torch.equal(loaded, old.packed_rows('cpu')[0]),
                      left=sorted(p.name for p in disk.iterdir()))))
"""

def test_a_save_into_a_full_tmpfs_keeps_the_earlier(adult, tmp_path):
    """A real full disk: a tmpfs that holds the earlier save and half the new one (mounted in a mount namespace of a
    child process, so nothing outside it sees the mount). The save fails with the disk's ENOSPC, naming it; the
    earlier save loads as it was, and nothing of the new one is left."""
    unshare = shutil.which('unshare')
    probe = unshare and subprocess.run([unshare, '-rm', 'true'], capture_output=True)
    if not probe or probe.returncode:
        pytest.skip('no user and mount namespaces here (`unshare -rm`): the patched ENOSPC test covers the logic')
    for name,(a,b) in (('old', (0, 10000)), ('new', (10000, len(adult)))):
        TabularGPU(adult.iloc[a:b], procs=[Categorify, FillMissing, Normalize], **ADULT).save(tmp_path/name,
                                                                                            progress=False)
    # a tmpfs gives each file whole pages: room for the earlier save's and for half the new one's, which is less than
    # the whole of the new one (4x the rows): a save that removed the earlier first would not fit either
    pages = lambda d: sum(-(-f.stat().st_size // 4096) for f in (tmp_path/d).rglob('*') if f.is_file())
    disk, size = tmp_path/'disk', (pages('old') + pages('new') // 2) * 4096
    assert size < pages('new') * 4096
    disk.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent.parent),
                                                      os.environ.get('PYTHONPATH', '')]))
    script = f'mount -t tmpfs -o size={size} tmpfs "$1" && exec "$4" -c "$5" "$1" "$2" "$3"'
    res = run_child([unshare, '-rm', 'sh', '-c', script, 'sh', str(disk), str(tmp_path/'old'), str(tmp_path/'new'),
                     sys.executable, CHILD_PRELUDE + _FULL_TMPFS], timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.splitlines()[-1])
    assert got['err'] is not None and got['err'][0] == errno.ENOSPC and 'No space left on device' in got['err'][1]
    assert got['old'] and got['left'] == ['s']

def test_a_failed_save_over_an_earlier_leaves_it(adult, tmp_path, monkeypatch):
    """A TypeError inside the save (row labels that are strings: found only as the index is written) leaves the earlier
    save and no debris; a folder's other files stay through a save; where folders cannot be swapped in one step
    (`exchange` unavailable: not Linux, or a file system without it), two renames replace the save as well, and a load
    between them names the whole save left beside the folder."""
    from fastai_gpu_tabular import atomic
    old = TabularGPU(adult.iloc[:2000], procs=[Categorify, FillMissing, Normalize], **ADULT)
    old.save(tmp_path/'s', progress=False)
    (tmp_path/'s'/'notes.txt').write_text('mine')
    labelled = adult.iloc[2000:4000].set_index(adult.iloc[2000:4000].index.astype(str))
    bad = TabularGPU(labelled, procs=[Categorify, FillMissing, Normalize], **ADULT)
    with pytest.raises(TypeError, match="row index holds"): bad.save(tmp_path/'s', progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ['s']
    assert torch.equal(TabularGPU.load(tmp_path/'s', progress=False).packed_rows('cpu')[0], old.packed_rows('cpu')[0])
    monkeypatch.setattr(atomic, 'exchange', lambda a, b: False)
    new = TabularGPU(adult.iloc[2000:4000], procs=[Categorify, FillMissing, Normalize], **ADULT)
    new.save(tmp_path/'s', progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ['s'] and (tmp_path/'s'/'notes.txt').read_text() == 'mine'
    (tmp_path/'plain').mkdir()   # the folder's permissions are a plain mkdir's (tempfile's would be the owner's alone)
    assert (tmp_path/'s').stat().st_mode == (tmp_path/'plain').stat().st_mode
    (tmp_path/'plain').rmdir()
    assert torch.equal(TabularGPU.load(tmp_path/'s', progress=False).packed_rows('cpu')[0], new.packed_rows('cpu')[0])
    (tmp_path/'s').rename(tmp_path/'.s.fgt-tmp-x')   # as a kill between those two renames leaves it: named
    with pytest.raises(SavedFormatError, match=r"fgt-tmp-x holds a whole one that a save cut short left: rename it"):
        TabularGPU.load(tmp_path/'s')

def test_a_load_while_saved_over_is_refused(adult, tmp_path, monkeypatch):
    """A save that replaces the folder while a load reads it (here: between the manifest and the rows files, with
    `verify=False`, whose size and header checks the new files of the same shape pass) makes the load fail, naming
    the folder, rather than mix the earlier manifest with the new rows."""
    import fastai_gpu_tabular.saved as saved
    a, b = (TabularGPU(adult.iloc[r], procs=[Categorify, FillMissing, Normalize],
                       splits=(range(1500), range(1500, 2000)), **ADULT) for r in (slice(0, 2000), slice(2000, 4000)))
    a.save(tmp_path/'s', progress=False)
    load_rows = saved.load_rows
    def saved_over(*args, **kwargs):
        b.save(tmp_path/'s', progress=False)
        return load_rows(*args, **kwargs)
    monkeypatch.setattr(saved, 'load_rows', saved_over)
    with pytest.raises(SavedFormatError, match=r"/s was saved over while it loaded: load it again"):
        TabularGPU.load(tmp_path/'s', verify=False, progress=False)

@pytest.mark.parametrize('folder', [True, False], ids=['folder', 'file'])
def test_replacing_makes_each_step_durable(tmp_path, monkeypatch, folder):
    """All or nothing, and durable: every file and folder of the new version is fsynced before the swap (a crash after
    it must find their bytes), and the parent folder after it (else the rename itself may be lost)."""
    import fastai_gpu_tabular.atomic as atomic
    events = []
    monkeypatch.setattr(atomic, 'fsync_path', lambda p, f=atomic.fsync_path: (events.append(('fsync', Path(p))), f(p)))
    def logged(f): return lambda *a: (events.append(('swap', None)), f(*a))[1]
    monkeypatch.setattr(atomic, 'swap_in', logged(atomic.swap_in))
    monkeypatch.setattr(atomic.os, 'replace', logged(atomic.os.replace))
    target = tmp_path/'out'/('saved' if folder else 'saved.json')
    for _ in range(2):   # a first write, then one over it
        events.clear()
        with atomic.replacing(target, folder=folder) as tmp:
            if folder:
                Path(tmp).mkdir(exist_ok=True)
                (Path(tmp)/'a.npy').write_bytes(b'1')
            else: Path(tmp).write_text('{}')
        swap = events.index(('swap', None))
        synced = {p for _,p in events[:swap]}
        assert all(p in synced for p in ([Path(tmp), Path(tmp)/'a.npy'] if folder else [Path(tmp)])), events
        assert ('fsync', target.parent) in events[swap + 1:], events
