"""README.md's install commands, run as written: from a checkout, from a git URL, the CUDA extras (resolved with
`--dry-run`), Kaggle's offline wheelhouse, and the quick start where only the built wheel is installed. The fresh
environment is a new venv that sees this one's packages (fastai, torch, pandas...) but not this package: what a Kaggle
image is, with fastai and torch installed."""
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path
import pytest
from packaging.version import Version

ROOT = Path(__file__).parent.parent
README = (ROOT/'README.md').read_text()
URL = tomllib.loads((ROOT/'pyproject.toml').read_text())['project']['urls']['Repository']
PIP = Version(importlib.metadata.version('pip'))

def needs_pip(version, why):
    "Skip, saying why, where this venv's pip is older than `version` (scripts/env.sh upgrades it; pytest alone not)."
    why = f"needs pip >= {version} ({why}), this venv has {PIP}: `python -m pip install -U pip` (scripts/env.sh does)"
    return pytest.mark.skipif(PIP < Version(version), reason=why)

def section(title) -> str:
    "The text under README's heading `title`, up to the next heading of the same or a higher level (fences skipped)."
    level, out, fenced = None, [], False
    for line in README.splitlines(keepends=True):
        if line.startswith('```'): fenced = not fenced
        m = None if fenced else re.match(r'(#+) (.*)', line)
        if level is None:
            if m and m.group(2).strip() == title: level = len(m.group(1))
        elif m and len(m.group(1)) <= level: break
        else: out.append(line)
    assert level is not None, f'README.md has no section {title!r}'
    return ''.join(out)

def blocks(text, lang='bash') -> list:
    "The fenced code blocks of `lang` in `text`."
    return re.findall(rf'^```{lang}\n(.*?)^```', text, re.M | re.S)

def commands(block) -> list:
    "The commands of a shell block: one a line, comments dropped."
    return [l for l in (re.sub(r'\s+#.*$', '', l).strip() for l in block.splitlines()) if l and not l.startswith('#')]

def pip_cmd(cmd, python) -> list:
    "A README `pip ...` command run by `python -m pip`, so that it lands in that environment whatever PATH says."
    args = shlex.split(cmd)
    assert args[0] == 'pip', cmd
    return [str(python), '-m', 'pip', *args[1:]]

def _env(): return {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}

def run(args, **kwargs):
    r = subprocess.run(args, capture_output=True, text=True, env=_env(), **kwargs)
    assert r.returncode == 0, f'{args}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}'
    return r

def run_together(cmds, cwd, timeout=900) -> list:
    "Run commands at once (they mostly wait on the package index) and return their outputs; each must succeed."
    procs = [subprocess.Popen(c, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for c in cmds]
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    for c, p, out in zip(cmds, procs, outs): assert p.returncode == 0, f'{c}\n{out[-3000:]}'
    return outs

def picked(report) -> dict:
    "{name: version} that a `pip install --dry-run --report` would install."
    return {p['metadata']['name'].lower().replace('_', '-'): p['metadata']['version']
            for p in json.loads(Path(report).read_text())['install']}

@pytest.fixture(scope='module')
def checkout(tmp_path_factory):
    "The files a clone of this checkout has (tracked and new, not ignored), copied, so builds leave ROOT alone."
    dst = tmp_path_factory.mktemp('checkout')/'fastai_gpu_tabular'
    files = run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'], cwd=ROOT).stdout.split('\0')
    for f in filter(None, files):
        if (ROOT/f).is_file():
            (dst/f).parent.mkdir(parents=True, exist_ok=True)
            (dst/f).write_bytes((ROOT/f).read_bytes())
    return dst

@pytest.fixture(scope='module')
def fresh_env(tmp_path_factory):
    "A new venv that sees this environment's packages, but not this package (its editable install is left out)."
    d = tmp_path_factory.mktemp('env')
    overlay = d/'overlay'
    overlay.mkdir()
    for p in Path(sysconfig.get_paths()['purelib']).iterdir():
        if 'fastai_gpu_tabular' not in p.name: (overlay/p.name).symlink_to(p)
    run([sys.executable, '-m', 'venv', '--without-pip', d/'venv'])   # pip comes from the overlay
    py = d/'venv'/'bin'/'python'
    site = Path(run([py, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])']).stdout.strip())
    (site/'_overlay.pth').write_text(f'import site; site.addsitedir({str(overlay)!r})\n')
    r = subprocess.run([py, '-c', 'import fastai_gpu_tabular'], capture_output=True, text=True, cwd=d, env=_env())
    assert r.returncode != 0, 'the fresh environment must not see this package before it is installed'
    return py

def test_readme_test_command_is_what_ci_runs():
    "The one command the README gives for the tests is the one `.ci/run` runs, once per pandas line."
    cmds = [c for b in blocks(section('The two commands')) for c in commands(b) if 'scripts/test.sh' in c]
    assert cmds == ['bash scripts/test.sh'], cmds
    ci = [c for c in commands((ROOT/'.ci'/'run').read_text()) if 'scripts/test.sh' in c and 'FGT_FAKE_DEVICE' not in c]
    assert [re.sub(r'^(\w+=\S+ )+|\s*\|\|.*$', '', c) for c in ci] == cmds * 2, ci
    assert sorted(re.search(r'PANDAS=(\S+)', c).group(1) for c in ci) == ['2.3', '3.0'], ci

def test_ci_runs_the_suite_on_the_stand_in_device():
    "A pass of `.ci/run` runs README's test command with the CPU stand-in for a GPU (tests/fake_device.py)."
    ci = [c for c in commands((ROOT/'.ci'/'run').read_text()) if 'FGT_FAKE_DEVICE' in c]
    assert ci == ['FGT_FAKE_DEVICE=lazy PANDAS=3.0 bash scripts/test.sh || status=1'], ci

@needs_pip('24.1', "older ones refuse the 'name @ git+file:///...' requirement as invalid")
def test_readme_install_commands_resolve(checkout, fresh_env, tmp_path):
    """The README's install block from a clone, and its git-URL form (the URL pointed at a clone of this repository):
    each resolves in a fresh environment, which has fastai, and needs only this package from it."""
    clone, *cmds = commands(blocks(section('Install'))[0])
    assert clone == f'git clone {URL} && cd {URL.rsplit("/", 1)[1]}', clone
    assert cmds[0] == 'pip install .', cmds
    assert [c for c in cmds if 'cuda' in c] == ['pip install ".[cuda12]"', 'pip install ".[cuda13]"'], cmds
    git_cmd, = [c for b in blocks(section('Install')) for c in commands(b) if 'git+' in c]
    run(['git', 'clone', '-q', ROOT, tmp_path/'repo'])
    git_cmd = git_cmd.replace(f'git+{URL}', f'git+file://{tmp_path}/repo')
    run_together([pip_cmd(c, fresh_env) + ['--dry-run', '--quiet', '--report', tmp_path/f'{i}.json']
                  for i, c in enumerate((cmds[0], git_cmd))], cwd=checkout)
    want = {'fastai-gpu-tabular': importlib.metadata.version('fastai_gpu_tabular')}
    for i, c in enumerate((cmds[0], git_cmd)): assert picked(tmp_path/f'{i}.json') == want, c

def test_kaggle_wheelhouse_install_and_quick_start(checkout, fresh_env, tmp_path):
    """The README's Kaggle path: build the wheelhouse, install from it with no index into an environment that has
    fastai and torch (as Kaggle's), then run the README's quick start there, on the installed wheel."""
    kaggle = commands(blocks(section('Kaggle'))[0])
    build = [c for c in kaggle if c.startswith('pip wheel')]
    install, = [c for c in kaggle if '--no-index' in c]
    wheels = re.search(r'-w (\S+)', build[0]).group(1)
    for c in build: run(pip_cmd(c, sys.executable), cwd=checkout)
    found = re.search(r'--find-links (\S+)', install).group(1)
    r = run(pip_cmd(install.replace(found, str(checkout/wheels)), fresh_env), cwd=tmp_path)
    assert re.search(r'Successfully installed fastai[_-]gpu[_-]tabular-\S+\s*$', r.stdout), r.stdout[-500:]

    quick = next(b for b in blocks(README, 'python') if 'TabularGPU(' in b)   # the first: the quick start
    script = f'''
from functools import partialmethod
import fastai_gpu_tabular
from fastai.learner import Learner
from fastai_gpu_tabular.__main__ import flights_task
# lr_find's 100 steps at bs 65,536 take minutes on a CPU: 5 here. 90k flights: one training batch of 65,536
Learner.lr_find = partialmethod(Learner.lr_find, num_it=5)
df, names = flights_task(nrows=90_000)
df = df.rename(columns={{'disrupted': 'label'}})
cats, conts, new_df = names['cat_names'], names['cont_names'], df.iloc[:1000]
{quick}
assert preds.shape == (len(to.valid), 2) and len(dl.dataset) == len(new_df)
learn = load_learner('model.pkl', cpu=True)
print(fastai_gpu_tabular.__file__)
'''
    out = run([fresh_env, '-c', script], cwd=tmp_path, timeout=300).stdout.strip().splitlines()[-1]
    assert Path(out).is_relative_to(fresh_env.parent.parent), f'imported {out}, not the installed wheel'

@pytest.mark.skipif(os.environ.get('FGT_RESOLVE') != '1',
                    reason='resolving the CUDA extras reads the package index for a minute or two: FGT_RESOLVE=1 runs '
                           'it (.ci/run does, on each pandas line)')
@needs_pip('22.2', 'install --dry-run --report')
def test_cuda_extras_resolve_to_the_newest_cudf_for_this_pandas(checkout, tmp_path):
    """The README's `pip install ".[cuda12]"` / `".[cuda13]"`, resolved (`--dry-run`) in this environment with its
    pandas held: cuDF >= 26.8 on pandas 3 (cuDF 26.8 and later need pandas 3.0), cuDF <= 26.6 on pandas 2; dask-cudf
    at cuDF's version."""
    cmds = [c for c in commands(blocks(section('Install'))[0]) if 'cuda' in c]
    pd_version = Version(importlib.metadata.version('pandas'))
    (tmp_path/'pandas.txt').write_text(f'pandas=={pd_version}\n')
    run_together([pip_cmd(c, sys.executable) + ['--dry-run', '--quiet', '--report', tmp_path/f'{i}.json',
                                                 '-c', tmp_path/'pandas.txt'] for i, c in enumerate(cmds)],
                 cwd=checkout)
    for i, c in enumerate(cmds):
        got = picked(tmp_path/f'{i}.json')
        (name, v), = [(n, v) for n, v in got.items() if n.startswith('cudf-cu')]
        cudf = Version(v)
        assert got[f'dask-{name}'] == v, (c, got)   # dask-cudf, at cuDF's own version
        pins = sorted(f"{n}=={v}" for n, v in got.items() if n.startswith(("cudf", "cupy", "dask")))
        print(f'pandas {pd_version}: {c} -> {pins}')
        if pd_version.major >= 3: assert cudf >= Version('26.8'), (c, got)
        else: assert Version('25.10') <= cudf <= Version('26.6'), (c, got)

def test_readme_small_frame_example(tmp_path, monkeypatch):
    """The README's small-frame example runs as written and learns: at least 50 steps an epoch, and a validation loss
    below the class prior's (predicting the training share of '>50K' for every row). It runs in a temporary folder:
    `lr_find` saves the model in `./models` (fastai's `learn.path`), which it leaves behind."""
    from fastai.tabular.all import set_seed
    monkeypatch.chdir(tmp_path)
    block, = [b for b in blocks(README, 'python') if 'load_adult()' in b]
    ns = {}
    set_seed(0)
    exec('from fastai.tabular.all import *\nfrom fastai_gpu_tabular.all import *\n' + block, ns)
    learn, dls = ns['learn'], ns['dls']
    assert len(dls.train) >= 50
    p = dls.train_ds.packed('cpu')[2].double().mean()
    y = dls.valid_ds.packed('cpu')[2].double()
    prior = -(y * p.log() + (1 - y) * (1 - p).log()).mean().item()
    assert learn.recorder.values[-1][1] < prior - 0.05, (learn.recorder.values[-1], prior)

def test_star_import_rebinds_what_readme_says():
    "The names `fastai_gpu_tabular.all` rebinds after `fastai.tabular.all` are the ones the README lists, no more."
    import fastai.tabular.all as fa
    import fastai_gpu_tabular.all as ours
    rebound = {n for n in ours.__dict__
               if not n.startswith('_') and n in fa.__dict__ and fa.__dict__[n] is not ours.__dict__[n]}
    text = README[README.index('**What the star import replaces.**'):]
    text = text[:text.index('\n\n')]
    assert rebound == {'Categorify', 'tabular_learner', 'Lamb'} and all(f'`{n}`' in text for n in rebound), rebound
