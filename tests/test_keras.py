"""`as_keras_dataset` on Keras' torch backend (CI) and TensorFlow backend (with tensorflow-cpu installed, else skipped):
each runs tests/keras_worker.py in its own process, since Keras reads KERAS_BACKEND once, when it is imported."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
import pytest

ROOT = Path(__file__).parent.parent

def _run(backend) -> dict:
    if importlib.util.find_spec('keras') is None: pytest.skip('keras is not installed (the `keras` extra)')
    if backend == 'tensorflow' and importlib.util.find_spec('tensorflow') is None:
        pytest.skip('tensorflow is not installed: `pip install tensorflow-cpu` to run the TensorFlow backend test')
    env = {**os.environ, 'KERAS_BACKEND': backend, 'TF_CPP_MIN_LOG_LEVEL': '2',
           'PYTHONPATH': os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')])}
    p = subprocess.run([sys.executable, str(ROOT/'tests'/'keras_worker.py')], env=env, capture_output=True, text=True,
                       timeout=600)
    lines = [l for l in p.stdout.splitlines() if l.startswith('RESULT ')]
    assert p.returncode == 0 and lines, f'keras_worker failed ({backend}):\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}'
    return json.loads(lines[-1][len('RESULT '):])

@pytest.mark.parametrize('backend', ['torch', pytest.param('tensorflow', marks=pytest.mark.slow)])
def test_keras_model_trains_on_packed_rows(backend):
    r = _run(backend)
    assert r['len'][0] == r['len'][1] and r['len'][2] == r['len'][3]   # as many batches as the fastai loaders
    assert r['shapes'] == {'userId': [1024, 1], 'movieId': [1024, 1], 'genres': [1024, r['shapes']['genres'][1]],
                           'year_na': [1024, 1], 'year': [1024, 1]} and r['shapes']['genres'][1] > 1
    assert r['types'] == (['Tensor'] if backend == 'torch' else ['EagerTensor'])
    assert r['train_batch_equal'] and r['new_permutation'] and r['valid_in_order'] and r['bag_matches_torch']
    if backend == 'torch': assert r['one_storage'] and r['zero_copy']
    else: assert r['to_tf']
    # it learns: the training loss falls, and the validation loss beats knowing only the share of likes
    assert r['loss'][-1] < r['loss'][0] and min(r['val_loss']) < r['prior_loss']
    if backend == 'tensorflow': assert r['tf_loop_loss'][-1] < r['tf_loop_loss'][0]   # the custom TF loop trains too
