"""The code blocks of the user docs (README.md and docs/**/*.md), each found by the marker on the line above its fence,
`<!-- recipe: NAME -->`, wherever it sits: a block moved to another page keeps its name and so its test. Tests take a
block with `recipe(NAME)`; tests/test_recipes.py checks that every python and shell block has a name and a test."""
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
