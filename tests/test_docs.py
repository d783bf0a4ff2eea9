"""The user docs hold together: README.md stays a front page that links every chapter in docs/, and every relative link
of README.md, docs/**/*.md and CONTRIBUTING.md reaches a file that exists and, with an `#anchor`, a heading of that page
(GitHub's anchors). Code blocks and code spans are not links."""
import re
from urllib.parse import unquote
from helpers.recipes import ROOT, doc_files

LINK = re.compile(r'!?\[[^\]]*\]\(([^()\s]+)(?:\s+"[^"]*")?\)')
FENCE = re.compile(r'^```.*?^```', re.M | re.S)
SPAN = re.compile(r'(`+).+?\1', re.S)

def prose(text) -> str:
    "`text` without its fenced blocks and code spans."
    return SPAN.sub('', FENCE.sub('', text))

def links(page) -> list:
    "The targets of the markdown links and images of `page`."
    return LINK.findall(prose(page.read_text()))

def anchor(heading) -> str:
    "GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces as '-'."
    return re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')

def anchors(page) -> set:
    "The anchors of `page`'s headings (a repeated heading's gets -1, -2, ... as on GitHub)."
    res = set()
    for line in FENCE.sub('', page.read_text()).splitlines():
        m = re.match(r'#{1,6}\s+(.*)', line)
        if not m: continue
        a,k = anchor(m.group(1)),1
        while a in res: a,k = f'{anchor(m.group(1))}-{k}',k + 1
        res.add(a)
    return res

def test_anchor_rule():
    "Headings of these docs with punctuation, and the anchors GitHub gives them (its rule is the reference)."
    assert anchor("Multi-GPU: fastai's `distrib_ctx`") == 'multi-gpu-fastais-distrib_ctx'
    assert anchor('The study: bs 204,800 against 4,096') == 'the-study-bs-204800-against-4096'
    assert anchor('Keras / TensorFlow') == 'keras--tensorflow'

def test_relative_links_resolve():
    "Each relative link of the user docs names a file or folder that exists, and each `#anchor` a heading there."
    bad = []
    for page in [*doc_files(), ROOT/'CONTRIBUTING.md']:
        for target in links(page):
            if re.match(r'[a-z][a-z+.-]*:', target): continue   # https:, mailto:: not files of the repository
            path,_,frag = unquote(target).partition('#')
            dest = (page.parent/path).resolve() if path else page
            if not dest.exists(): bad.append(f'{page.relative_to(ROOT)}: {target} (no such file)')
            elif frag and dest.suffix == '.md' and frag not in anchors(dest):
                bad.append(f'{page.relative_to(ROOT)}: {target} (no such heading)')
    assert bad == []

def test_readme_is_a_front_page():
    """README.md fits on a few screens (under 350 lines) and links every chapter in docs/. It opens with what the
    package is, then the two commands, the quick start and the table of results, in that order, before the rest."""
    readme = ROOT/'README.md'
    text = readme.read_text()
    assert len(text.splitlines()) < 350
    sections = re.findall(r'^## (.*)$', FENCE.sub('', text), re.M)
    assert sections[:3] == ['The two commands', 'Quick start', 'Performance'], sections
    first = text[:text.index(f'\n## {sections[3]}\n')]
    assert all(f'<!-- recipe: {n} -->' in first for n in ('demo-command', 'test-command', 'quick-start'))
    assert re.search(r'^\| 1,000,000 rows, CPU \|', first.split('## Performance')[1], re.M), 'the table of results'
    linked = {(ROOT/unquote(t).partition('#')[0]).resolve() for t in links(readme)}
    assert [p.name for p in sorted((ROOT/'docs').rglob('*.md')) if p.resolve() not in linked] == []

def test_chapters_name_every_proc_export_and_save_know():
    """The deploy chapter's table names each proc `export_onnx` takes, and the saved-Tabulars chapter each proc a saved
    Tabular holds, as their registrations say (`export.ONNX_PROCS`, `TARGET_PROCS`, `proc_state.saved_proc_types`)."""
    from fastai_gpu_tabular.deploy.export import ONNX_PROCS, TARGET_PROCS
    from fastai_gpu_tabular.ops.proc_state import saved_proc_types
    table = '\n'.join(l for l in (ROOT/'docs'/'deploy.md').read_text().splitlines() if l.startswith('|'))
    assert [c.__name__ for c in (*ONNX_PROCS, *TARGET_PROCS) if f'`{c.__name__}`' not in table] == []
    saved = (ROOT/'docs'/'saved-tabulars.md').read_text()
    assert [c.__name__ for c in saved_proc_types() if c.__name__ not in saved] == []
