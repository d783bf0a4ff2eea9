"""Every notebook in nbs/ executes top to bottom. Cells flagged `#| cuda` run only with CUDA and cuDF, `#| slow` only
with FGT_SLOW=1, and `#| eval: false` and `#| kaggle` (Kaggle-only set-up) never (nbdev's flags)."""
import os
import re
from pathlib import Path
import pytest

nbformat = pytest.importorskip('nbformat', reason='the notebooks run with nbformat and nbclient: the `test` extra')
nbclient = pytest.importorskip('nbclient', reason='the notebooks run with nbformat and nbclient: the `test` extra')
NBS = sorted((Path(__file__).parent.parent/'nbs').glob('*.ipynb'))

def _flags(cell):
    "nbdev's `#| flag` lines at the top of a cell."
    return {m.group(1).strip() for m in re.finditer(r'^#\|\s*(.+)$', cell.source, re.M)}

def skipped_flags():
    from fastai_gpu_tabular.backend import cudf_available
    skip = {'eval: false', 'kaggle'}
    if not cudf_available(): skip.add('cuda')
    if os.environ.get('FGT_SLOW') != '1': skip.add('slow')
    return skip

@pytest.mark.notebook
@pytest.mark.parametrize('path', NBS, ids=[p.stem for p in NBS])
def test_notebook_runs(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    for c in nb.cells:   # committed without outputs (keeps diffs readable)
        if c.cell_type == 'code': assert not c.outputs and c.execution_count is None, f'{path.name} has outputs'
    if 'load_movielens_100k' in path.read_text():   # the same policy as the ml100k tests: the data comes with recbole
        pytest.importorskip('recbole', reason='MovieLens 100K is read from the recbole package: '
                                              'pip install --no-deps recbole==1.2.1')
    skip = skipped_flags()
    nb.cells = [c for c in nb.cells if c.cell_type != 'code' or not (_flags(c) & skip)]
    timeout = None if 'slow' not in skip else 1200   # a full-scale cell trains for tens of minutes
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name='python3',
                                     resources={'metadata': {'path': str(tmp_path)}})
    # the kernel's torch on one thread unless OMP_NUM_THREADS says otherwise: beside pytest's other workers its
    # threads spin on cores another process holds (on the 2-core machine beside other jobs, nbs/02's LAMB study took
    # 4.3 minutes so, 10 to over 22 on torch's default threads; index.ipynb 22 s, 61 s)
    client.execute(env={**os.environ, 'OMP_NUM_THREADS': os.environ.get('OMP_NUM_THREADS', '1')})
