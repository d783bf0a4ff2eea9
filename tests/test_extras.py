"""extras.py: each function that needs an optional extra says which one, and how to install it, where the extra is
missing (as `load_movielens` names the package it reads), before any work; a module missing inside an installed extra
is reported as it is. An extra is hidden by `sys.modules[name] = None`, which makes `import name` fail as where it
is not installed."""
import re
import sys
import pytest
from fastai.tabular.all import RandomSplitter, range_of
from fastai_gpu_tabular.all import Categorify, TabularGPU, load_adult, tabular_learner
from fastai_gpu_tabular.deploy import keras_loader
from fastai_gpu_tabular.deploy.export import export_onnx, export_triton, onnx_inputs
from fastai_gpu_tabular.deploy.keras_loader import as_keras_dataset, bag_embedding, keras_inputs, to_tf
from fastai_gpu_tabular.extras import import_extra, install_command
from fastai_gpu_tabular.train.optimizer import torch_optimizer_lamb

@pytest.fixture(scope='module')
def learn():
    df = load_adult().iloc[:2000]
    to = TabularGPU(df, procs=[Categorify], cat_names=['workclass'], cont_names=['age'], y_names='income',
                    splits=RandomSplitter(seed=0)(range_of(df)))
    return tabular_learner(to.dataloaders(bs=256), layers=[8])

@pytest.fixture
def hide(monkeypatch):
    "Hide modules for one test; keras_loader's cached Keras classes are made again after it."
    def _hide(*names):
        for n in names: monkeypatch.setitem(sys.modules, n, None)
    for f in (keras_loader._dataset_cls, keras_loader._bag_cls): f.cache_clear()
    yield _hide
    for f in (keras_loader._dataset_cls, keras_loader._bag_cls): f.cache_clear()

def needs(what, module, extra) -> str:
    "The message's pattern: what needs which module, the extra, and the README's install command for it."
    cmd = re.escape(install_command(extra))
    return f"{what} needs {module}, which comes with this package's `{extra}` extra: {cmd}"

def test_install_command_of_an_extra():
    "The git install (test_install checks it is the README's) with the extra named."
    assert install_command('onnx') == install_command().replace('fastai_gpu_tabular @', 'fastai_gpu_tabular[onnx] @')

@pytest.mark.parametrize('module', ['onnx', 'onnxscript'])
def test_onnx_export_names_its_extra(learn, hide, tmp_path, module):
    hide(module)
    with pytest.raises(ModuleNotFoundError, match=needs('export_onnx', module, 'onnx')):
        export_onnx(learn, tmp_path/'m.onnx')
    assert not (tmp_path/'m.onnx').exists()
    if module == 'onnx':
        with pytest.raises(ModuleNotFoundError, match=needs('export_triton', 'onnx', 'onnx')):
            export_triton(learn, tmp_path/'repo')

def test_onnx_inputs_names_its_extra(learn, hide, tmp_path):
    hide('onnxruntime')
    with pytest.raises(ModuleNotFoundError, match=needs('onnx_inputs', 'onnxruntime', 'onnx')):
        onnx_inputs(load_adult().iloc[:5], tmp_path/'m.onnx')

def test_keras_loader_names_its_extras(learn, hide):
    hide('keras', 'tensorflow')
    dl = learn.dls.train
    for f,what in ((lambda: as_keras_dataset(dl), 'as_keras_dataset'), (lambda: keras_inputs(dl), 'keras_inputs'),
                   (lambda: bag_embedding(10, 4), 'bag_embedding')):
        with pytest.raises(ModuleNotFoundError, match=needs(what, 'keras', 'keras')): f()
    with pytest.raises(ModuleNotFoundError, match=needs('to_tf', 'tensorflow', 'tf')): to_tf(dl.one_batch())

def test_torch_optimizer_lamb_names_its_extra(hide):
    hide('torch_optimizer')
    with pytest.raises(ModuleNotFoundError, match=needs('torch_optimizer_lamb', 'torch_optimizer', 'lamb')):
        torch_optimizer_lamb(wd=0.01)

def test_a_missing_dependency_of_the_extra_is_reported_as_it_is(tmp_path, monkeypatch):
    "The extra's module is there but one it imports is not: that one is named, not the extra."
    (tmp_path/'fgt_installed_extra.py').write_text('import fgt_absent_dependency\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="No module named 'fgt_absent_dependency'") as e:
        import_extra('fgt_installed_extra', 'onnx', 'export_onnx')
    assert e.value.name == 'fgt_absent_dependency'
