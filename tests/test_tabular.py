"TabularGPU's Tabular surface: iloc, the cats/conts/ys properties and setters, show, decode; and the demo job."
import re
import pytest
import torch
from fastai.tabular.all import Categorify, FillMissing, Normalize, RandomSplitter, default_device, range_of
import fastai_gpu_tabular.__main__ as demo
import fastai_gpu_tabular.core as fgc
from fastai_gpu_tabular.all import TabularGPU, batch_size
from fastai_gpu_tabular.backend import cudf_available, cudf_reason, to_pandas
from fastai_gpu_tabular.datasets import load_adult

@pytest.fixture
def to(as_backend):
    df = load_adult().iloc[:3000].reset_index(drop=True)
    return TabularGPU(as_backend(df), procs=[Categorify, FillMissing, Normalize], cat_names=['workclass', 'education'],
                      cont_names=['age', 'hours-per-week'], y_names='income',
                      splits=RandomSplitter(seed=0)(range_of(df)))

def test_iloc_and_properties(to):
    sub = to.iloc[:7]
    assert isinstance(sub, TabularGPU) and len(sub) == 7 and list(sub.cat_names) == list(to.cat_names)
    assert list(to.cats.columns) == ['workclass', 'education'] and list(to.conts.columns) == ['age', 'hours-per-week']
    assert list(to.ys.columns) == ['income'] and len(to.xs.columns) == 4 and len(to.train) + len(to.valid) == 3000
    ix = to_pandas(to.items.index)   # a cuDF index has no `tolist`
    assert list(to_pandas(to.iloc[[5, 2, 9]].items.index)) == [ix[i] for i in (5, 2, 9)]
    # iloc[:, cols] holds just those columns, as fastai's; processing it names the columns it lacks
    part = to.iloc[:, ['age']]
    assert list(part.items.columns) == ['age']
    with pytest.raises(KeyError,
                       match="column\\(s\\) \\['workclass', 'education', 'hours-per-week'\\] are not in the frame"):
        part.process()

def test_setters_invalidate_packed_rows(to):
    before = to.packed()[1].clone()
    to.conts = to.conts * 2            # what TabularLearner.predict does (conts.astype(np.float32))
    torch.testing.assert_close(to.packed()[1].cpu(), before.cpu() * 2)
    to.cats = to.cats * 0
    assert (to.packed()[0] == 0).all()

def test_show_and_decode(to, monkeypatch):
    shown = []
    monkeypatch.setattr(fgc, 'display_df', lambda d: shown.append(d))
    to.show(max_n=4)
    df = shown[-1]
    assert len(df) == 4 and df.workclass.map(lambda v: isinstance(v, str)).all() and set(df.income) <= {'<=50K', '>50K'}
    assert df.age.between(16, 100).all()        # de-normalised
    row = to.decode_row(to_pandas(to.items).iloc[0])
    assert isinstance(row.workclass, str)

@pytest.fixture
def demo_learners(monkeypatch):
    "Runs of the demo record their learners here (the frame, loaders and model it built), with torch's threads then."
    learners, make = [], demo.tabular_learner
    def record(*a, **k):
        learners.append(make(*a, **k))
        learners[-1].threads = torch.get_num_threads()
        return learners[-1]
    monkeypatch.setattr(demo, 'tabular_learner', record)
    return learners

def test_demo_runs(demo_learners, capsys):
    """The main job, small: it says what it predicts, trains (accuracy well above always answering the majority class,
    which is 0.76 here and which it prints beside its own, and a ranking AUC an untrained model does not reach), reports
    rows/s, on fastai's default device when none is given, with one torch thread (set back after)."""
    threads = torch.get_num_threads()
    args = ['--rows', '30000', '--epochs', '2', '--bs', '2048', '--backend', 'pandas']
    res = demo.main(args)
    df, _ = demo.flights_task('pandas', 30_000)
    on_time = (df.disrupted.iloc[RandomSplitter(seed=42)(range(len(df)))[1]] == 'on time').mean()   # the demo's split
    assert res['majority_accuracy'] == max(on_time, 1 - on_time)
    assert res['accuracy'] > max(on_time, 1 - on_time) + 0.05 and res['roc_auc'] > 0.8, (res, on_time)
    assert len(res['rows_per_s']) == 2 and min(res['rows_per_s']) > 0
    out = capsys.readouterr().out
    assert out.startswith('Predicting whether a flight arrives more than 15 minutes late or is cancelled')
    assert f"accuracy {res['accuracy']:.4f} (always 'on time': {on_time:.4f})" in out
    learn, = demo_learners
    assert learn.dls.device == default_device() and next(learn.model.parameters()).device == default_device()
    assert learn.threads == 1 and torch.get_num_threads() == threads

def test_demo_backend_auto_and_device(demo_learners, capsys):
    "--backend auto takes cuDF where it is usable, pandas otherwise; --device puts the loaders and the model there."
    demo.main(['--rows', '5000', '--epochs', '1', '--bs', '1024', '--backend', 'auto', '--device', 'cpu'])
    backend = 'cudf' if cudf_available() else 'pandas'
    learn, = demo_learners
    out = capsys.readouterr().out
    assert f'backend={backend}' in out
    if (cudf_reason() or '').startswith('ModuleNotFoundError'):   # a machine without cuDF: normal, not an error
        assert 'Error' not in out and 'cuDF is not installed' in out, out
    assert type(learn.dls.train_ds.items).__module__.startswith(backend)
    assert learn.dls.device == torch.device('cpu') and next(learn.model.parameters()).device.type == 'cpu'

@pytest.mark.cudf
def test_demo_on_cuda(demo_learners):
    "The demo on cuDF, trained on the GPU (under the cuDF stand-in, which has no CUDA, on the CPU)."
    dev = 'cuda' if torch.cuda.is_available() else 'cpu'
    demo.main(['--rows', '5000', '--epochs', '1', '--bs', '1024', '--backend', 'cudf', '--device', dev])
    learn, = demo_learners
    assert learn.dls.device.type == dev and next(learn.model.parameters()).device.type == dev
    assert type(learn.dls.train_ds.items).__module__.startswith('cudf')

@pytest.mark.parametrize('n', [1, 49, 50, 16_000, 269_420, 10_000_000])
def test_batch_size_rule(n):
    "The batch-size rule (the demo's default): a power of two, 50+ steps an epoch where the rows allow, at most 16,384."
    bs = batch_size(n)
    assert bs & (bs - 1) == 0 and 1 <= bs <= 16384
    assert bs == 16384 or n // bs >= 50 or bs == 1
    assert bs == 16384 or n // (2 * bs) < 50   # the largest such power of two

def test_demo_small_frame_in_a_log():
    """The main job as a log or a pipe sees it, on a small frame: the default batch size fits the rows (16,384 did not:
    no batch of 16,000 training rows), and fastai's per-epoch table is printed as plain lines, without the progress
    bar's carriage returns."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, '-m', 'fastai_gpu_tabular', '--rows', '20000', '--epochs', '2',
                        '--backend', 'pandas', '--device', 'cpu'], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert '\r' not in r.stdout and 'bs 256;' in r.stdout
    lines = r.stdout.splitlines()
    head = next(i for i,l in enumerate(lines) if l.startswith('epoch'))
    assert lines[head].split() == ['epoch', 'train_loss', 'valid_loss', 'accuracy', 'roc_auc_score', 'time']
    assert [l.split()[0] for l in lines[head+1:head+3]] == ['0', '1']
    assert all(len(l.split()) == 6 for l in lines[head+1:head+3])
    assert re.search(r'^training speed: [\d,]+ rows an epoch; epoch 1: [\d,]+ rows/s, epoch 2: [\d,]+ rows/s$',
                     r.stdout, re.M), r.stdout
