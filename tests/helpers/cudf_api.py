"""cuDF's public API surface, read mechanically from cuDF's source at a git ref: for each class the cuDF stand-in
(tests/helpers/fake_cudf) serves, every public name it has there (methods with their parameters, properties,
attributes, and the operations cuDF's delegating mixins add), and the module functions `cudf.<name>`. The stand-in
raises AttributeError for any other name, and TypeError for a keyword cuDF's signature lacks, as cuDF would.

Regenerate a data file from a clone of rapidsai/cudf (no cuDF install, no GPU: the source is parsed, not imported):

    python tests/helpers/cudf_api.py /path/to/cudf.git v26.06.01 tests/data/cudf_api/26.06.json
"""
import ast
import json
import subprocess
import sys

__all__ = ['load_api', 'extract']

ROOT = 'python/cudf/cudf'
# the classes the stand-in serves: {public name: (module, class)}
CLASSES = {
    'DataFrame': ('core.dataframe', 'DataFrame'), 'Series': ('core.series', 'Series'),
    'Index': ('core.index', 'Index'), 'RangeIndex': ('core.index', 'RangeIndex'),
    'CategoricalIndex': ('core.index', 'CategoricalIndex'), 'MultiIndex': ('core.multiindex', 'MultiIndex'),
    'DatetimeIndex': ('core.index', 'DatetimeIndex'), 'TimedeltaIndex': ('core.index', 'TimedeltaIndex'),
    'IntervalIndex': ('core.index', 'IntervalIndex'),
    'CategoricalDtype': ('core.dtypes', 'CategoricalDtype'), 'ListDtype': ('core.dtypes', 'ListDtype'),
    'StringMethods': ('core.accessors.string', 'StringMethods'),
    'CategoricalAccessor': ('core.accessors.categorical', 'CategoricalAccessor'),
    'ListMethods': ('core.accessors.lists', 'ListMethods'),
    'DatetimeProperties': ('core.series', 'DatetimeProperties'),
    'DataFrameGroupBy': ('core.groupby.groupby', 'DataFrameGroupBy'),
    'SeriesGroupBy': ('core.groupby.groupby', 'SeriesGroupBy'),
    '_SeriesIlocIndexer': ('core.series', '_SeriesIlocIndexer'),
    '_SeriesLocIndexer': ('core.series', '_SeriesLocIndexer'),
    '_DataFrameIlocIndexer': ('core.dataframe', '_DataFrameIlocIndexer'),
    '_DataFrameLocIndexer': ('core.dataframe', '_DataFrameLocIndexer'),
}

def _git(repo, *args) -> str: return subprocess.run(['git', '-C', repo, *args], check=True, capture_output=True,
                                                    text=True).stdout

class _Source:
    "The parsed modules of cuDF at one ref: {'core.series': ast.Module}, read with `git show`, never imported."
    def __init__(self, repo, ref):
        self.repo, self.ref, self.trees = repo, ref, {}
        self.files = set(_git(repo, 'ls-tree', '-r', '--name-only', ref, ROOT).split())

    def module(self, name):
        if name not in self.trees:
            base = '/'.join([ROOT, *name.split('.')]) if name else ROOT
            path = next((p for p in (f'{base}.py', f'{base}/__init__.py') if p in self.files), None)
            self.trees[name] = ast.parse(_git(self.repo, 'show', f'{self.ref}:{path}')) if path else None
        return self.trees[name]

    def resolve(self, mod, name, _seen=None):
        "Where `name`, as used in module `mod`, is defined: `(module, node)`, following `from x import y`; or None."
        seen = _seen or set()
        tree = self.module(mod)
        if tree is None or (mod, name) in seen: return None
        seen.add((mod, name))
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name: return mod, node
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return mod, node
        for node in ast.walk(tree):   # imports, top level or under `if TYPE_CHECKING` / `try`
            if not isinstance(node, ast.ImportFrom): continue
            for a in node.names:
                if (a.asname or a.name) != name: continue
                src = self._absolute(mod, node)
                if src is not None: return self.resolve(src, a.name, seen)
        return None

    def _absolute(self, mod, node):
        "The cuDF module an ImportFrom names, relative to `mod` (a package's own module counts), or None if not cuDF."
        if node.level:
            pkg = mod.split('.') if mod else []
            if mod and '/'.join([ROOT, *pkg, '__init__.py']) not in self.files: pkg = pkg[:-1]
            pkg = pkg[:len(pkg) - node.level + 1]
            return '.'.join(pkg + ([node.module] if node.module else []))
        if node.module == 'cudf': return ''
        return node.module[5:] if node.module and node.module.startswith('cudf.') else None

def _params(fn:ast.FunctionDef) -> dict:
    "A function's parameters: the positional ones' names (self dropped), keyword-only names, and whether */** exist."
    a = fn.args
    pos = [p.arg for p in a.posonlyargs + a.args]
    decos = {_deco_name(d) for d in fn.decorator_list}
    if pos and 'staticmethod' not in decos: pos = pos[1:]
    return {'args': pos, 'kwonly': [p.arg for p in a.kwonlyargs], 'varargs': a.vararg is not None,
            'varkw': a.kwarg is not None}

def _deco_name(d) -> str:
    if isinstance(d, ast.Call): d = d.func
    if isinstance(d, ast.Attribute): return d.attr if d.attr in ('setter', 'getter', 'deleter') else ast.unparse(d)
    return getattr(d, 'id', '')

def _set_literal(node) -> set|None:
    if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant)}
    return None

class _Surface:
    "Collects one class's names over its cuDF bases, with the operations cuDF's delegating mixins define."
    def __init__(self, src:_Source):
        self.src, self.mixins = src, {}
        for mod in ('core.mixins.binops', 'core.mixins.reductions', 'core.mixins.scans'):
            for node in src.module(mod).body:   # X = _create_delegating_mixin("X", doc, "CATEGORY", base, {ops})
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                   getattr(node.value.func, 'id', '') == '_create_delegating_mixin':
                    args = node.value.args
                    self.mixins[node.targets[0].id] = (args[2].value, _set_literal(args[4]))

    def of(self, mod, name) -> dict:
        names, valid, externals = {}, {}, []
        self._collect(mod, name, names, valid, externals, set())
        for cat,ops in valid.items():
            for op in ops: names.setdefault(op, {'kind': 'operation', 'category': cat})
        return {'names': dict(sorted(names.items())), 'external_bases': sorted(set(externals))}

    def _collect(self, mod, name, names, valid, externals, seen):
        found = self.src.resolve(mod, name)
        if found is None or not isinstance(found[1], ast.ClassDef): return externals.append(name)
        mod, cls = found
        if (mod, name) in seen: return
        seen.add((mod, name))
        for node in cls.body: self._member(node, names, valid)
        for b in cls.bases:   # the bases after the class's own names: a subclass's definition wins
            if isinstance(b, ast.Name):
                if b.id in self.mixins: continue   # its operations come from `_VALID_<CATEGORY>S`
                self._collect(mod, b.id, names, valid, externals, seen)
            else: externals.append(ast.unparse(b))

    def _member(self, node, names, valid):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decos = {_deco_name(d) for d in node.decorator_list}
            if 'setter' in decos:
                if node.name in names and names[node.name]['kind'] == 'property': names[node.name]['settable'] = True
                return
            if 'overload' in decos or 'typing.overload' in decos: return
            kind = 'property' if decos & {'property', 'cached_property', 'functools.cached_property'} else \
                'classmethod' if 'classmethod' in decos else 'staticmethod' if 'staticmethod' in decos else 'method'
            info = {'kind': kind, **({} if kind == 'property' else _params(node))}
            names.setdefault(node.name, info)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if not isinstance(t, ast.Name): continue
                if t.id.startswith('_VALID_') and t.id.endswith('S'):
                    ops = self._ops(node.value)
                    if ops is not None: valid.setdefault(t.id[7:-1], set()).update(ops)
                names.setdefault(t.id, {'kind': 'attribute'})

    def _ops(self, value) -> set|None:
        "The operations a `_VALID_<CATEGORY>S` value names: a literal, a mixin's `_SUPPORTED_...S`, or a union."
        lit = _set_literal(value)
        if lit is not None: return lit
        if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id in self.mixins:
            return self.mixins[value.value.id][1]
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.BitOr):
            a,b = self._ops(value.left), self._ops(value.right)
            return None if a is None or b is None else a | b
        return None

def _functions(src:_Source) -> dict:
    """The public names of the module, `cudf.<name>` (cuDF's `__all__`): functions with their parameters, classes
    with their constructor's; submodules and other names as such."""
    tree = src.module('')
    public = next(_set_literal(n.value) for n in tree.body if isinstance(n, ast.Assign)
                  and any(getattr(t, 'id', '') == '__all__' for t in n.targets))
    res = {}
    for name in sorted(public):
        found = src.resolve('', name)
        node = found[1] if found else None
        if isinstance(node, ast.FunctionDef): res[name] = {'kind': 'function', **_params(node)}
        elif isinstance(node, ast.ClassDef):
            init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == '__init__'), None)
            res[name] = {'kind': 'class', **(_params(init) if init else {})}
        else: res[name] = {'kind': 'module' if src.module(name) is not None else 'other'}
    return res

def extract(repo, ref) -> dict:
    "The API surface of cuDF at `ref` of the git repository `repo` (see the module's docstring)."
    src = _Source(repo, ref)
    surface = _Surface(src)
    return {'cudf_ref': ref, 'commit': _git(repo, 'rev-parse', f'{ref}^{{commit}}').strip(),
            'version': _git(repo, 'show', f'{ref}:VERSION').strip(),
            'made_by': 'tests/helpers/cudf_api.py (parsed from the source; nothing imported)',
            'classes': {k: surface.of(f'{m}', c) for k,(m,c) in CLASSES.items()},
            'functions': _functions(src)}

def load_api(path) -> dict:
    with open(path) as f: return json.load(f)

if __name__ == '__main__':
    repo, ref, out = sys.argv[1:4]
    api = extract(repo, ref)
    with open(out, 'w') as f: json.dump(api, f, indent=1, sort_keys=True)
    print(f"wrote {out}")
