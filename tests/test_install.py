"""README.md's install commands (found by their markers: tests/helpers/recipes.py), run as written: from a checkout,
from a git URL, the CUDA extras (resolved with `--dry-run`), Kaggle's offline wheelhouse, and the quick start where
only the built wheel is installed. The fresh environment is a new venv that sees this one's packages (fastai, torch,
pandas...) but not this package: what a Kaggle image is, with fastai and torch installed."""
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
from helpers.recipes import recipe
from packaging.version import Version
from fastai_gpu_tabular.extras import REPOSITORY, install_command

ROOT = Path(__file__).parent.parent
README = (ROOT/'README.md').read_text()
URL = tomllib.loads((ROOT/'pyproject.toml').read_text())['project']['urls']['Repository']
PIP = Version(importlib.metadata.version('pip'))

def needs_pip(version, why):
    "Skip, saying why, where this venv's pip is older than `version` (scripts/env.sh upgrades it; pytest alone not)."
    why = f"needs pip >= {version} ({why}), this venv has {PIP}: `python -m pip install -U pip` (scripts/env.sh does)"
    return pytest.mark.skipif(PIP < Version(version), reason=why)

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

def ci_passes() -> dict:
    "`.ci/run`'s passes, from its `run_pass NAME VAR=value ... -- ARGS` lines: `{NAME: (settings, pytest's ARGS)}`."
    passes = {}
    for line in (ROOT/'.ci'/'run').read_text().replace('\\\n', ' ').splitlines():
        if not line.startswith('run_pass '): continue
        name, *rest = shlex.split(line)[1:]
        cut = rest.index('--')
        passes[name] = dict(a.split('=', 1) for a in rest[:cut]), rest[cut + 1:]
    return passes

def test_readme_test_command_is_what_ci_runs():
    """The one command the README gives for the tests is the one each pass of `.ci/run` runs, with the suite on each
    pandas line: 3.1, what a new install gets (fastai 2.8.12 brings it), and 2.3."""
    cmds = commands(recipe('test-command'))
    assert cmds == ['bash scripts/test.sh'], cmds
    ci = (ROOT/'.ci'/'run').read_text()
    assert re.findall(r'^\s*env "\$\{envs\[@\]\}" (.*?) "\$@" \|\| status=1$', ci, re.M) == cmds, 'run_pass runs it'
    stand_ins = {'FGT_FAKE_DEVICE', 'FGT_FAKE_CUDF'}
    lines = {env['PANDAS']: args for env,args in ci_passes().values() if not stand_ins & set(env)}
    assert sorted(lines) == ['2.3', '3.1'] and all('tests' in args for args in lines.values()), lines

def test_install_commands_in_messages_are_the_readmes():
    "What errors tell users to run (load_learner, missing extras) is the README's git-URL install, for this URL."
    git_cmd, = commands(recipe('install-git'))
    assert REPOSITORY == URL and install_command() == git_cmd, (install_command(), git_cmd)

def test_ci_runs_the_suite_on_the_stand_in_device():
    """A pass of `.ci/run` runs README's test command with the CPU stand-in for a GPU (tests/helpers/fake_device.py),
    on cuDF 26.10's pandas, without this file (it installs into fresh environments, where the stand-in is not)."""
    (env, args), = [p for p in ci_passes().values() if '${OFF_DEVICE[@]/#/--ignore=}' in p[1]
                    and 'FGT_FAKE_CUDF' not in p[0]]
    assert env['FGT_FAKE_DEVICE'] == 'lazy' and env['PANDAS'] == '3.0' and 'tests' in args, (env, args)
    lists = {k: v.split() for k,v in re.findall(r'^(\w+)=\((.*?)\)', (ROOT/'.ci'/'run').read_text(), re.M | re.S)}
    assert 'tests/test_install.py' in lists['OFF_DEVICE'], lists
    assert [f for v in lists.values() for f in v if not (ROOT/f).is_file()] == [], 'files the passes leave out exist'

def test_ci_runs_the_cudf_tests_on_the_cudf_stand_in():
    """`.ci/run` runs the `cudf` tests on the cuDF stand-in (tests/helpers/fake_cudf) for each cuDF line, with its
    pandas (26.06: pandas 2.3; 26.10: 3.0), the 26.10 line with the GPU stand-in too, every test file in one pass or
    the other."""
    from helpers.fake_cudf import VERSIONS
    passes = [(env, args) for env,args in ci_passes().values() if 'FGT_FAKE_CUDF' in env]
    assert all(args[:2] == ['-m', 'cudf'] for _,args in passes), passes
    assert {env['FGT_FAKE_CUDF'] for env,_ in passes} == set(VERSIONS)
    assert all(env['PANDAS'] == {'26.06': '2.3', '26.10': '3.0'}[env['FGT_FAKE_CUDF']] for env,_ in passes)
    lazy = [args for env,args in passes if env.get('FGT_FAKE_DEVICE') == 'lazy' and env['FGT_FAKE_CUDF'] == '26.10']
    rest = [args for env,args in passes if 'FGT_FAKE_DEVICE' not in env and env['FGT_FAKE_CUDF'] == '26.10']
    assert lazy == [['-m', 'cudf', 'tests', '${OFF_DEVICE[@]/#/--ignore=}', '${ON_DEVICE_TOO_BIG[@]/#/--ignore=}']]
    assert rest == [['-m', 'cudf', '${OFF_DEVICE[@]}', '${ON_DEVICE_TOO_BIG[@]}']]

@needs_pip('24.1', "older ones refuse the 'name @ git+file:///...' requirement as invalid")
def test_readme_install_commands_resolve(checkout, fresh_env, tmp_path):
    """The README's install block from a clone, and its git-URL form (the URL pointed at a clone of this repository):
    each resolves in a fresh environment, which has fastai, and needs only this package from it."""
    clone, *cmds = commands(recipe('install'))
    assert clone == f'git clone {URL} && cd {URL.rsplit("/", 1)[1]}', clone
    assert cmds[0] == 'pip install .', cmds
    assert [c for c in cmds if 'cuda' in c] == ['pip install ".[cuda12]"', 'pip install ".[cuda13]"'], cmds
    git_cmd, = commands(recipe('install-git'))
    run(['git', 'clone', '-q', ROOT, tmp_path/'repo'])
    git_cmd = git_cmd.replace(f'git+{URL}', f'git+file://{tmp_path}/repo')
    run_together([pip_cmd(c, fresh_env) + ['--dry-run', '--quiet', '--report', tmp_path/f'{i}.json']
                  for i, c in enumerate((cmds[0], git_cmd))], cwd=checkout)
    want = {'fastai-gpu-tabular': importlib.metadata.version('fastai_gpu_tabular')}
    for i, c in enumerate((cmds[0], git_cmd)): assert picked(tmp_path/f'{i}.json') == want, c

def test_torch_cpu_command_is_what_the_scripts_run():
    """The README's CPU torch install takes the index that `TORCH_INDEX_URL` gives scripts/env.sh in the README's laptop
    commands, for the demo and for the tests; it downloads 200 MB from PyTorch's index, which the tests do not read."""
    cmd, = commands(recipe('install-torch-cpu'))
    url = re.fullmatch(r'pip install torch --index-url (\S+)', cmd).group(1)
    assert all(f'TORCH_INDEX_URL={url} bash scripts/{script}.sh' in README for script in ('demo', 'test'))
    assert '--index-url "$TORCH_INDEX_URL"' in (ROOT/'scripts'/'env.sh').read_text()
    pytest.skip(f'installing torch from {url} downloads about 200 MB from outside the package index the tests read')

def test_kaggle_wheelhouse_install_and_quick_start(checkout, fresh_env, tmp_path):
    """The README's Kaggle path: build the wheelhouse, install from it with no index into an environment that has
    fastai and torch (as Kaggle's), then run the README's quick start there, on the installed wheel. pip installs
    this package alone: it changes nothing the image has (its pandas, 3.1 or 2.3, included)."""
    kaggle = commands(recipe('kaggle'))
    build = [c for c in kaggle if c.startswith('pip wheel')]
    install, = [c for c in kaggle if '--no-index' in c]
    wheels = re.search(r'-w (\S+)', build[0]).group(1)
    for c in build: run(pip_cmd(c, sys.executable), cwd=checkout)
    found = re.search(r'--find-links (\S+)', install).group(1)
    r = run(pip_cmd(install.replace(found, str(checkout/wheels)), fresh_env), cwd=tmp_path)
    assert re.search(r'Successfully installed fastai[_-]gpu[_-]tabular-\S+\s*$', r.stdout), r.stdout[-500:]

    script = f'''
import fastai_gpu_tabular
from fastai_gpu_tabular.__main__ import flights_task
df, names = flights_task(nrows=90_000)   # 72,000 training rows: batch_size gives 1,024, 70 steps an epoch
df = df.rename(columns={{'disrupted': 'label'}})
cats, conts, new_df = names['cat_names'], names['cont_names'], df.iloc[:1000]
{recipe('quick-start')}
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
    """The README's `pip install ".[cuda12]"` / `".[cuda13]"`, resolved (`--dry-run`) in this environment as the README
    says: on pandas 3 as they are, giving cuDF >= 26.8 (26.8 and later need pandas 3.0; 26.10 caps it below 3.1, so
    pandas 3.1 moves to 3.0); on pandas 2 held with a constraints file, giving cuDF <= 26.6 and the same pandas;
    dask-cudf at cuDF's version."""
    cmds = [c for c in commands(recipe('install')) if 'cuda' in c]
    pd_version = Version(importlib.metadata.version('pandas'))
    hold = [] if pd_version.major >= 3 else ['-c', tmp_path/'pandas.txt']
    (tmp_path/'pandas.txt').write_text(f'pandas=={pd_version.major}.{pd_version.minor}.*\n')
    run_together([pip_cmd(c, sys.executable) + ['--dry-run', '--quiet', '--report', tmp_path/f'{i}.json', *hold]
                  for i, c in enumerate(cmds)], cwd=checkout)
    for i, c in enumerate(cmds):
        got = picked(tmp_path/f'{i}.json')
        (name, v), = [(n, v) for n, v in got.items() if n.startswith('cudf-cu')]
        cudf = Version(v)
        assert got[f'dask-{name}'] == v, (c, got)   # dask-cudf, at cuDF's own version
        pandas = Version(got.get('pandas', str(pd_version)))   # what pandas the environment would then have
        pins = sorted(f"{n}=={v}" for n, v in got.items() if n.startswith(("cudf", "cupy", "dask", "pandas")))
        print(f'pandas {pd_version}: {c} -> {pins}')
        if pd_version.major >= 3: assert cudf >= Version('26.8') and Version('3.0') <= pandas < Version('3.1'), (c, got)
        else: assert Version('25.10') <= cudf <= Version('26.6') and pandas == pd_version, (c, got)

def test_star_import_rebinds_what_readme_says():
    "The names `fastai_gpu_tabular.all` rebinds after `fastai.tabular.all` are the ones the README lists, no more."
    import fastai.tabular.all as fa
    import fastai_gpu_tabular.all as ours
    rebound = {n for n in ours.__dict__
               if not n.startswith('_') and n in fa.__dict__ and fa.__dict__[n] is not ours.__dict__[n]}
    text = README[README.index('**What the star import replaces.**'):]
    text = text[:text.index('\n\n')]
    assert rebound == {'Categorify', 'tabular_learner', 'Lamb'} and all(f'`{n}`' in text for n in rebound), rebound
