"""The package's import graph, read from the source: each part imports only the parts docs/design.md's folder rule lets
it (the rule's table is this file's `MAY_IMPORT`, word for word), no module (bench/ included) imports another's private
names, module-level imports form no cycle, and the only imports inside functions that reach back into the package
(bench/ aside) are core's two commented ones; backend.py alone imports cuDF/CuPy/RMM and branches on cuDF versus pandas,
but for the allowlisted performance paths."""
import ast
import re
from pathlib import Path

PKG = Path(__file__).parent.parent/'fastai_gpu_tabular'

def _modules() -> dict:
    "{dotted name: path} of every module of the package (a package by its `__init__.py`)."
    res = {}
    for p in PKG.rglob('*.py'):
        parts = p.relative_to(PKG.parent).with_suffix('').parts
        res['.'.join(parts[:-1] if parts[-1] == '__init__' else parts)] = p
    return res

MODULES = _modules()

def _imports(name:str):
    "`(module imported, names, at module level)` of each relative import in module `name`."
    path = MODULES[name]
    here = name.split('.') if path.name == '__init__.py' else name.split('.')[:-1]
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    for n in ast.walk(tree):
        if not (isinstance(n, ast.ImportFrom) and n.level): continue
        base = '.'.join(here[:len(here) - n.level + 1] + ([n.module] if n.module else []))
        for a in n.names:
            sub = f'{base}.{a.name}'
            yield (sub, [], id(n) in top) if sub in MODULES else (base, [a.name], id(n) in top)

# --- the folder rule: which part may import which (docs/design.md, "Where code goes") ---------------------------------
BASE = {'extras', 'atomic', 'backend', 'progress', 'checks', 'prepare', 'splits', 'collectives'}
FRONT = {'core', 'saved', 'data'}
MAY_IMPORT = {   # part: the parts it may import besides its own
    'base': [], 'ops/': ['base'], 'rows/': ['base'], 'train/': ['rows/', 'base'],
    'deploy/': ['ops/', 'rows/', 'base'], 'front': ['ops/', 'rows/', 'base'], 'datasets/': ['base'],
    'dask/': ['front', 'ops/', 'rows/', 'base']}
TOOLS = {'bench/', 'all', '__main__', '__init__'}   # they may import any part; any part may read `__init__`'s version

def _part(name:str) -> str:
    "The part a module is in: its folder (`ops/`, ...), `base` or `front` for the top modules, or the top one's name."
    rest = name.split('.')[1:]
    if not rest: return '__init__'
    if len(rest) > 1 or (MODULES[name].name == '__init__.py'): return rest[0] + '/'
    return 'base' if rest[0] in BASE else 'front' if rest[0] in FRONT else rest[0]

def test_every_module_is_in_a_part_of_the_rule():
    assert {_part(m) for m in MODULES} <= set(MAY_IMPORT) | TOOLS

def test_parts_import_as_the_folder_rule_says():
    """ops/ and rows/ build on the top modules alone, train/ on rows/, deploy/ on ops/ and rows/, the front (core,
    saved, data) on both, dask/ on the front; core's lazy import of dask/ is the one circle (core's of data is within
    the front)."""
    lazy = {('fastai_gpu_tabular.core', 'fastai_gpu_tabular.dask.tabular')}
    may = lambda m: (_part(m), '__init__', *MAY_IMPORT[_part(m)])
    bad = sorted((m, d) for m in MODULES if _part(m) not in TOOLS for d,_,_ in _imports(m)
                 if d in MODULES and (m, d) not in lazy and _part(d) not in may(m))
    assert bad == []

def test_design_states_the_rule():
    "docs/design.md's table of the rule is `MAY_IMPORT`, row for row."
    text = (PKG.parent/'docs'/'design.md').read_text()
    for part, may in MAY_IMPORT.items():
        row = f"| `{part}` | {', '.join(f'`{p}`' for p in may) or 'nothing else'} |"
        assert row in text, row

def test_no_private_name_crosses_a_module():
    bad = [(m, d, n) for m in MODULES for d,names,_ in _imports(m) for n in names
           if n.startswith('_') and not n.endswith('__')]   # a dunder (`__version__`) is public
    assert bad == []

def test_module_level_imports_form_no_cycle():
    graph = {m: {d for d,_,top in _imports(m) if top and d in MODULES} for m in MODULES}
    state, path = {}, []
    def visit(u):
        state[u] = 'open'
        path.append(u)
        for v in sorted(graph[u]):
            assert state.get(v) != 'open', f"import cycle: {' -> '.join(path[path.index(v):] + [v])}"
            if v not in state: visit(v)
        path.pop()
        state[u] = 'done'
    for m in sorted(MODULES):
        if m not in state: visit(m)

def test_only_cores_lazy_imports_reach_back():
    "`TabularGPU(ddf)` (dask/ builds on core) and `to.dataloaders()`'s BatchDataLoaders (data.py builds on core)."
    # bench/ is exempt by design: importing it starts nothing, each suite imports what it measures when it runs
    lazy = {(m, d) for m in MODULES if '.bench' not in m for d,_,top in _imports(m) if not top and d in MODULES}
    assert lazy == {('fastai_gpu_tabular.core', 'fastai_gpu_tabular.dask.tabular'),
                    ('fastai_gpu_tabular.core', 'fastai_gpu_tabular.data')}

# --- the backend seam: backend.py alone imports cuDF/CuPy/RMM and decides between cuDF and pandas --------------------
GPU_MODULES = {'cudf', 'cupy', 'rmm', 'dask_cudf'}
BRANCHES = {'is_cudf', 'require_cudf'}
# the cuDF/pandas branches left outside backend.py: performance paths for pandas, each commented where it is
LIBRARY_BRANCHES = {
    'fastai_gpu_tabular.checks': (1, "count_inf: NumPy's isinf over a NumPy float column, no Series of bools"),
    'fastai_gpu_tabular.ops.procs': (1, "Categorify's setups: a pandas categorical's categories are its vocab's Index"),
    'fastai_gpu_tabular.ops.hashing': (1, "hash_column: a NumPy number column hashed row by row, no distinct values"),
    'fastai_gpu_tabular.dask.procs': (1, "a pandas partition's Categorify maps its categories, not each value"),
}
# tools, not the library: each measures or reports on the machine it runs on, with its own imports and calls
TOOL_BRANCHES = {'fastai_gpu_tabular.bench.contender': (1, "reads the benchmark's parquet with cuDF where asked")}
TOOL_IMPORTS = {'fastai_gpu_tabular.bench.machine': "RMM's statistics wrap the allocator while a bench runs",
                'fastai_gpu_tabular.bench.contender': "cudf.pandas' profiler counts stock fastai's CPU fallbacks"}

def _gpu_uses(name:str) -> tuple:
    "`(GPU modules imported, backend branches)` of module `name`: imports anywhere, is_cudf/require_cudf calls."
    imported, branches = set(), 0
    for n in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(n, ast.Import): imported |= {a.name.split('.')[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom) and not n.level and n.module: imported.add(n.module.split('.')[0])
        elif isinstance(n, ast.Call):
            f = n.func
            branches += (f.id if isinstance(f, ast.Name) else getattr(f, 'attr', None)) in BRANCHES
    return imported & GPU_MODULES, branches

def test_only_backend_imports_cudf():
    "cuDF, CuPy, RMM and dask-cudf are imported by backend.py alone (and by the bench, a tool: `TOOL_IMPORTS`)."
    bad = {m: sorted(g) for m in MODULES if m != 'fastai_gpu_tabular.backend' and m not in TOOL_IMPORTS
           for g in [_gpu_uses(m)[0]] if g}
    assert bad == {}

def test_backend_branches_stay_in_backend():
    "Outside backend.py, only the allowlisted performance paths ask `is_cudf`/`require_cudf`, and no more than six."
    allowed = {**LIBRARY_BRANCHES, **TOOL_BRANCHES}
    got = {m: b for m in MODULES if m != 'fastai_gpu_tabular.backend' for b in [_gpu_uses(m)[1]] if b}
    assert got == {m: n for m,(n,_) in allowed.items()}
    assert sum(n for n,_ in LIBRARY_BRANCHES.values()) <= 6

# --- docs/layout.md's tree is the package's ---------------------------------------------------------------------------
def _layout_tree() -> set:
    """The files and folders docs/layout.md's `fastai_gpu_tabular/` block names, as paths: an entry is a name ending in
    `.py` or `/` at an indent of 2 a level (a wrapped description is indented deeper, past the names' column)."""
    text = (PKG.parent/'docs'/'layout.md').read_text()
    block = text.split('```\nfastai_gpu_tabular/\n', 1)[1].split('```', 1)[0]
    res, folders = set(), []
    for line in block.splitlines():
        m = re.match(r'( *)(\S+?(?:\.py|/))(?: {2,}|$)', line)
        depth = (len(m.group(1)) // 2 - 1) if m else -1
        if not m or len(m.group(1)) % 2 or depth > len(folders): continue
        folders[depth:] = []
        path = '/'.join([*folders, m.group(2).rstrip('/')])
        res.add(path)
        if m.group(2).endswith('/'): folders.append(m.group(2).rstrip('/'))
    return res

def test_layout_tree_is_the_package():
    "Every module of the package is in the tree (bench/ and datasets/ as folders), and everything it names exists."
    tree = _layout_tree()
    want = {str(p.relative_to(PKG)) for p in PKG.rglob('*.py')
            if p.relative_to(PKG).parts[0] not in ('bench', 'datasets')}
    want |= {str(p.relative_to(PKG)) for p in PKG.iterdir() if p.is_dir() and p.name != '__pycache__'}
    want -= {f'{d}/__init__.py' for d in ('ops', 'rows', 'train', 'deploy', 'dask')}   # the folder's line says it
    assert tree == want
