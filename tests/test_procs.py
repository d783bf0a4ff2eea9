"""ops/procs.py's vocabularies: `LazyCategoryMap` is fastai's `CategoryMap` (the same `items`, and `o2i` when read,
against fastai's own `TabularPandas` on Adult), costs no dict until `o2i` is read, and pickles as fastai's class."""
import copy
import pickle
import subprocess
import sys
from collections import defaultdict
import pandas as pd
from fastai.data.transforms import CategoryMap
from fastai.tabular.all import Categorify, FillMissing, Normalize, RandomSplitter, range_of
from helpers.parity import build_both
from fastai_gpu_tabular.datasets import load_adult
from fastai_gpu_tabular.ops.procs import LazyCategoryMap

CATS = ['workclass', 'education', 'marital-status', 'occupation', 'relationship', 'race', 'gender', 'native-country']

def _adult():
    df = load_adult()
    return build_both(df, procs=[Categorify, FillMissing, Normalize], cat_names=list(CATS),
                      cont_names=['age', 'fnlwgt'], y_names='income', splits=RandomSplitter(seed=0)(range_of(df)))

def _same_map(ours, ref):
    "The same items in the same order and types, and an `o2i` of the same type, pairs and default."
    assert list(ours.items) == list(ref.items) and [type(v) for v in ours.items] == [type(v) for v in ref.items]
    assert type(ours.o2i) is type(ref.o2i) and ours.o2i == ref.o2i
    if isinstance(ref.o2i, defaultdict): assert ours.o2i.default_factory is ref.o2i.default_factory is int   # '#na#'

def test_o2i_is_built_when_read():
    "Setting up builds no lookup dict (a dict of every value, seconds for millions); read, `o2i` is fastai's."
    ref, ours = _adult()
    maps = {**ours.classes, 'income (vocab)': ours.procs.categorize.vocab}
    assert all(isinstance(m, LazyCategoryMap) and 'o2i' not in vars(m) for m in maps.values())
    for n in ref.classes: _same_map(ours.classes[n], ref.classes[n])
    _same_map(ours.procs.categorize.vocab, ref.procs.categorize.vocab)   # add_na=False: a plain dict

def test_pickles_as_fastais_category_map(tmp_path):
    """A pickle or copy of the vocabularies holds fastai's `CategoryMap` (its `o2i` built then) and nothing of this
    package: it loads where the package cannot be imported."""
    ref, ours = _adult()
    data = pickle.dumps(ours.classes)
    assert b'fastai_gpu_tabular' not in data and b'LazyCategoryMap' not in data
    copies = [pickle.loads(pickle.dumps(ours.classes, protocol=p)) for p in range(pickle.HIGHEST_PROTOCOL + 1)]
    for m in copies + [copy.deepcopy(ours.classes), {n: copy.copy(v) for n,v in ours.classes.items()}]:
        assert all(type(v) is CategoryMap for v in m.values())
        for n in ref.classes: _same_map(m[n], ref.classes[n])
    (tmp_path/'classes.pkl').write_bytes(data)
    code = ("import pickle, sys; sys.modules['fastai_gpu_tabular'] = None; "   # an import of it now fails
            f"m = pickle.load(open({str(tmp_path/'classes.pkl')!r}, 'rb')); "
            "print(type(m['education']).__name__, m['education'].o2i['Masters'], len(m['native-country']))")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ['CategoryMap', str(ref.classes['education'].o2i['Masters']),
                                  str(len(ref.classes['native-country']))]

def test_index_is_built_once():
    "The Index encoding looks values up in: a column's own categories where they are the vocabulary, else built once."
    ref, ours = _adult()
    cm = ours.classes['education']
    ix = cm.index(1, len(cm.items))
    assert ix is cm.index(1, len(cm.items)) and ix.tolist() == list(ref.classes['education'].items[1:])
    fresh = LazyCategoryMap(['#na#', 'b', 'a'], True)
    assert fresh.index(1, 3).equals(pd.Index(['b', 'a'])) and fresh.index(1, 3) is fresh.index(1, 3)
