"Packaging: pyproject.toml is the source of truth; settings.ini mirrors it for nbdev 2; every module has `__all__`."
import configparser
import importlib
import pkgutil
import re
import tomllib
from pathlib import Path
import fastai_gpu_tabular

ROOT = Path(__file__).parent.parent
pyproject = tomllib.loads((ROOT/'pyproject.toml').read_text())
ini = configparser.ConfigParser(); ini.read(ROOT/'settings.ini'); ini = ini['DEFAULT']

def test_settings_ini_mirrors_pyproject():
    proj, nbdev = pyproject['project'], pyproject['tool']['nbdev']
    assert ini['lib_name'] == proj['name'] == nbdev['lib_name']
    assert ini['version'] == fastai_gpu_tabular.__version__          # pyproject reads it from the package
    assert pyproject['tool']['setuptools']['dynamic']['version']['attr'] == 'fastai_gpu_tabular.__version__'
    assert ini['description'] == proj['description']
    assert ini['keywords'].split() == ' '.join(proj['keywords']).split()
    assert proj['requires-python'] == f">={ini['min_python']}"
    for k in ('lib_path', 'nbs_path', 'doc_path'): assert ini[k] == nbdev[k], k
    assert ini['tst_flags'].split() == nbdev['tst_flags']
    assert ini['requirements'].split() == proj['dependencies']
    extras = proj['optional-dependencies']
    assert set(extras) == {'cuda12', 'cuda13', 'lamb', 'onnx', 'keras', 'tf', 'dask', 'polars', 'test', 'dev'}
    for name, reqs in extras.items(): assert ini[f'{name}_requirements'].split() == reqs, name

def test_cuda_stack_is_never_a_base_dependency():
    deps = ' '.join(pyproject['project']['dependencies'])
    assert not re.search(r'cudf|cupy|torch-optimizer', deps)
    assert any(d.startswith('cudf-cu12') for d in pyproject['project']['optional-dependencies']['cuda12'])
    assert any(d.startswith('cudf-cu13') for d in pyproject['project']['optional-dependencies']['cuda13'])

FOLDERS = ('ops', 'rows', 'train', 'deploy')   # folders of modules, each exported by all.py

def test_every_module_has_all_and_all_py_exports_them():
    """The top modules and those of the folders declare `__all__`, and the star import brings every name they list (but
    the bench's, a tool)."""
    import fastai_gpu_tabular.all as A
    names = [m.name for m in pkgutil.iter_modules(fastai_gpu_tabular.__path__) if m.name not in ('all', '__main__',
                                                                                               *FOLDERS)]
    for f in FOLDERS:
        names += [f'{f}.{m.name}' for m in pkgutil.iter_modules([str(ROOT/'fastai_gpu_tabular'/f)])]
    assert len(names) > 30 and 'ops.procs' in names and 'rows.pack' in names
    for name in names:
        mod = importlib.import_module(f'fastai_gpu_tabular.{name}')
        assert hasattr(mod, '__all__'), name
        for n in mod.__all__: assert hasattr(mod, n) and (name == 'bench' or hasattr(A, n)), f'{name}.{n}'

def test_no_removed_fastcore_modules():
    "fastcore.transform / fastcore.dispatch are gone in fastai 2.8: nothing may import them."
    for p in (ROOT/'fastai_gpu_tabular').rglob('*.py'):
        assert not re.search(r'fastcore\.(transform|dispatch)', p.read_text()), p.name

def test_shipped_datasets_are_package_data():
    data = pyproject['tool']['setuptools']['package-data']['fastai_gpu_tabular']
    assert 'datasets/*.parquet' in data and 'datasets/*.md' in data
    for f in ('flights.parquet', 'adult.parquet', 'README.md'): assert (ROOT/'fastai_gpu_tabular'/'datasets'/f).exists()

def test_license_is_the_apache_text_the_metadata_declares():
    proj = pyproject['project']
    assert proj['license'] == 'Apache-2.0' and proj['license-files'] == ['LICENSE']
    text = (ROOT/'LICENSE').read_text()
    assert text.split()[:5] == ['Apache', 'License', 'Version', '2.0,', 'January'], text[:200]
    assert 'END OF TERMS AND CONDITIONS' in text and 'http://www.apache.org/licenses/LICENSE-2.0' in text

def test_ruff_pinned_once_for_ci_and_pre_commit():
    "CI runs the `test` extra's ruff from the venv scripts/test.sh makes; pre-commit's ruff is that same version."
    pin, = [r.split('==')[1] for r in pyproject['project']['optional-dependencies']['test'] if r.startswith('ruff==')]
    hooks = (ROOT/'.pre-commit-config.yaml').read_text()
    assert re.search(r'astral-sh/ruff-pre-commit\n\s+rev: (\S+)', hooks).group(1) == f'v{pin}'
    assert re.findall(r'- id: (ruff\S*)', hooks) == ['ruff-check'] and '--fix' not in hooks   # no formatter, no fixes
    ci = (ROOT/'.ci'/'run').read_text()
    assert re.search(r'^"\$\{VENV:-\.venv\}/bin/python" -m ruff check \. \|\| status=1$', ci, re.M), ci

def test_every_switch_is_in_contributing():
    "Each `FGT_*` environment switch that the package, the tests, the notebooks or the scripts read is documented."
    files = [*ROOT.glob('fastai_gpu_tabular/**/*.py'), *ROOT.glob('tests/**/*.py'), *ROOT.glob('nbs/*.ipynb'),
             *ROOT.glob('scripts/*.sh'), ROOT/'.ci'/'run']
    used = {m for p in files for m in re.findall(r'FGT_[A-Z]\w*', p.read_text())}
    assert 'FGT_REQUIRE_GPU' in used, used
    doc = set(re.findall(r'`(FGT_[A-Z]\w*)=', (ROOT/'CONTRIBUTING.md').read_text()))
    assert used <= doc, used - doc

def test_step_a_runs_every_cuda_test():
    """CONTRIBUTING's step-A command (a device session's first call) selects every `cuda`-marked test and names only
    tests that exist, so that a new one reaches the GPU."""
    text = (ROOT/'CONTRIBUTING.md').read_text()
    step_a = text[text.index('**Step A'):text.index('**Step B')]
    selected = set(re.findall(r'tests/\S+\.py(?:::\w+)?', re.search(r'```bash\n(.*?)```', step_a, re.S).group(1)))
    for s in selected:
        f, _, name = s.partition('::')
        assert (ROOT/f).exists() and (not name or f'def {name}(' in (ROOT/f).read_text()), s
    marked = [(f.relative_to(ROOT).as_posix(), name) for f in sorted((ROOT/'tests').rglob('test_*.py'))
              for name in re.findall(r'^@pytest\.mark\.cuda\n(?:@.*\n)*def (\w+)', f.read_text(), re.M)]
    assert marked and [m for m in marked if m[0] not in selected and '::'.join(m) not in selected] == []
