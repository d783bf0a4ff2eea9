"""What `from fastai_gpu_tabular.all import *` puts into a notebook: the names a user of the docs calls or subclasses,
no helper. The list below is the whole surface, so a new public name is a conscious edit here; every package name the
docs' python blocks (README.md, docs/) and the notebooks (nbs/) use is in it, or imported there from its module."""
import ast
import importlib
import json
import pkgutil
from helpers.recipes import ROOT, recipes
import fastai_gpu_tabular

STAR = ['AUC', 'BatchDataLoader', 'BatchDataLoaders', 'Categorify', 'DistributedBatchDL', 'ExcludeFromAdaptation',
        'HashBucket', 'HashedCross', 'HitRate', 'JoinGroupby', 'Lamb', 'LogLoss', 'MRR', 'NDCG', 'PackedChunks',
        'SavedFormatError', 'StreamDataLoader', 'TabularDask', 'TabularGPU', 'TabularModelGPU', 'TargetEncode',
        'as_keras_dataset', 'bag_embedding', 'batch_size', 'criteo_parquet', 'cudf_available', 'export_model',
        'export_onnx', 'export_triton', 'hash_column', 'hash_values', 'keras_inputs', 'lamb', 'lamb_param_groups',
        'load_adult', 'load_flights', 'load_flights_3m', 'load_movielens', 'load_movielens_100k', 'make_criteo',
        'murmur3_32', 'no_wd_params', 'onnx_inputs', 'rank_metrics', 'register_saved_proc', 'require_cudf', 'scale_lr',
        'scale_wd', 'tabular_learner', 'to_pandas', 'to_tf', 'torch_optimizer_lamb', 'use_rmm_for_torch', 'warmup_pct']
# a key's history, side tables and numbers' procs (history.py, joins.py, numeric.py), importance.py's, aggregate.py's
# Groupby (rows to one row per key), and the learner `tabular_learner` gives (its `predict` takes a Polars row)
STAR = sorted(STAR + ['Bucketize', 'Clip', 'DifferenceLag', 'Groupby', 'History', 'JoinExternal', 'ListSlice', 'LogOp',
                      'NormalizeMinMax', 'TabularLearnerGPU', 'permutation_importance', 'plot_importance'])

def star_names() -> set:
    ns = {}
    exec('from fastai_gpu_tabular.all import *', ns)
    return set(ns) - {'__builtins__'}

def package_names() -> set:
    "The functions and classes the package defines (bench/ and the demo aside: a user runs them, never imports them)."
    res = set()
    for m in pkgutil.walk_packages(fastai_gpu_tabular.__path__, 'fastai_gpu_tabular.'):
        if m.name.startswith(('fastai_gpu_tabular.bench', 'fastai_gpu_tabular.__main__')): continue
        mod = importlib.import_module(m.name)
        res |= {n for n,o in vars(mod).items() if not n.startswith('_')
                and getattr(o, '__module__', '').startswith('fastai_gpu_tabular')}
    return res

def doc_code() -> dict:
    "`{file: [code]}`: the python blocks of README.md and docs/, the code cells of the notebooks."
    res = {}
    for page,lang,code in recipes().values():
        if lang == 'python': res.setdefault(page.name, []).append(code)
    for nb in sorted((ROOT/'nbs').glob('*.ipynb')):
        cells = json.loads(nb.read_text())['cells']
        res[nb.name] = [''.join(c['source']) for c in cells if c['cell_type'] == 'code']
    return res

def used_names(codes:list) -> set:
    "Names `codes` reads without binding them or importing them from a package module (a notebook is one namespace)."
    read,bound = set(),set()
    for code in codes:
        tree = ast.parse('\n'.join(l for l in code.splitlines() if not l.lstrip().startswith(('%', '!'))))
        for n in ast.walk(tree):
            if isinstance(n, ast.Name): (read if isinstance(n.ctx, ast.Load) else bound).add(n.id)
            elif isinstance(n, (ast.FunctionDef, ast.ClassDef)): bound.add(n.name)
            elif isinstance(n, ast.arg): bound.add(n.arg)
            elif isinstance(n, ast.ImportFrom) and n.module != 'fastai_gpu_tabular.all':
                bound |= {a.asname or a.name for a in n.names}
    return read - bound

def test_star_import_is_the_user_surface():
    assert STAR == sorted(STAR)
    assert sorted(star_names()) == STAR

def test_docs_use_only_star_names():
    "A package name a doc block or notebook cell uses after the star imports is one the star import gives."
    pkg = package_names()
    used = {f: sorted(used_names(codes) & pkg) for f,codes in doc_code().items()}
    assert any('TabularGPU' in u for u in used.values()), used   # the reading found the docs' calls
    missing = {f: [n for n in u if n not in STAR] for f,u in used.items()}
    assert {f: m for f,m in missing.items() if m} == {}
