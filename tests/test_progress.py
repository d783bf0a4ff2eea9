"""Progress of long passes: fastprogress's bar (fit's) on a terminal, plain lines with rows and rows/s elsewhere,
nothing when off; on a save, a load and each pass of a TabularDask over Adult's partitions."""
import re
import pytest
from fastai.tabular.all import CategoryBlock, FillMissing, Normalize
import fastai_gpu_tabular.progress as fgp
from fastai_gpu_tabular.all import Categorify, TabularGPU

KW = dict(procs=[Categorify, FillMissing, Normalize], cat_names=['workclass', 'education'],
          cont_names=['age', 'fnlwgt'], y_names='income', y_block=CategoryBlock())

def test_save_load_lines(adult, tmp_path, capsys):
    "Not a terminal (pytest's capture): one plain line a pass, with the rows and rows/s; none with progress=False."
    to = TabularGPU(adult, **KW)
    to.save(tmp_path/'a')
    TabularGPU.load(tmp_path/'a')
    out = capsys.readouterr().out
    assert '\r' not in out
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0].startswith('saving to') and lines[1].startswith('loading')
    assert all(re.search(r': 48,842 rows, [\d,]+ rows/s in [\d.]+ s$', l) for l in lines)
    to.save(tmp_path/'a', progress=False)
    TabularGPU.load(tmp_path/'a', progress=False)
    assert capsys.readouterr().out == ''

def test_terminal_shows_fastprogress_bar(adult, tmp_path, capsys, monkeypatch):
    "On a terminal: fastprogress's console bar, ending at 100% with the rows/s in its comment."
    monkeypatch.setattr(fgp, '_interactive', lambda: True)
    made = []
    bar = fgp.fp.progress_bar
    monkeypatch.setattr(fgp.fp, 'progress_bar', lambda *a, **k: made.append(bar(*a, **k)) or made[-1])
    TabularGPU(adult, **KW).save(tmp_path/'t')
    out = capsys.readouterr().out
    assert len(made) == 1 and made[0].total == len(adult)
    assert '100.00% [48842/48842' in out and 'rows/s' in out

def test_dask_passes(adult, tmp_path, capsys):
    "Each pass of a TabularDask (the scan, the checks and statistics, the packing) a line; none with progress=False."
    dd = pytest.importorskip('dask.dataframe', reason='the `dask` extra')
    ddf = dd.from_pandas(adult, npartitions=4)
    to = TabularGPU(ddf, chunk_dir=tmp_path/'c', **KW)
    lines = capsys.readouterr().out.splitlines()
    assert any(re.match(r'TabularDask scan, pass 1: [\d,]+ tasks, ', l) for l in lines)
    setup = [l for l in lines if l.startswith('TabularDask setup, pass')]
    assert len(setup) >= 1 and all(re.search(r': 48,842 rows, [\d,]+ rows/s in [\d.]+ s$', l) for l in setup)
    assert len(to.train) + len(to.valid) == len(adult)
    TabularGPU(ddf, chunk_dir=tmp_path/'d', progress=False, **KW)
    assert capsys.readouterr().out == ''
