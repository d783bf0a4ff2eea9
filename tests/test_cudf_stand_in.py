"""The cuDF stand-in (tests/helpers/fake_cudf), which the `cudf` tests run on where no GPU is (FGT_FAKE_CUDF): its
API data files, read from cuDF's source, and its refusals, each as cuDF refuses. The stand-in is installed in a child
Python (it puts `cudf` and `cupy` in `sys.modules`, which the other tests of this process must not see)."""
import json
import os
import subprocess
import sys
from pathlib import Path
import pandas as pd
import pytest
from helpers.cudf_api import CLASSES, extract
from helpers.fake_cudf.config import API_DIR, VERSIONS

REFS = {'26.06': 'v26.06.01', '26.10': '6a22d1d2f908ba046c76aa7895fc7b78e53d8023'}

@pytest.mark.parametrize('version', VERSIONS)
def test_api_files_name_their_source(version):
    "Each data file says the commit it was read from, and holds every class the stand-in serves, and cuDF's functions."
    api = json.loads((API_DIR/f'{version}.json').read_text())
    assert api['cudf_ref'] == REFS[version] and len(api['commit']) == 40 and api['version'].startswith(version)
    assert set(api['classes']) == set(CLASSES) and all(len(c['names']) > 4 for c in api['classes'].values())
    s = api['classes']['Series']['names']
    assert s['fillna']['kind'] == 'method' and 'value' in s['fillna']['args'] and s['__add__']['kind'] == 'operation'
    assert 'idxmax' not in s   # cuDF's Series has none (rapidsai/cudf#9602): what backend.mode_value works around
    assert {'from_pandas', 'read_csv', 'concat'} <= set(api['functions'])

def test_the_versions_differ_where_cudf_changed():
    "Mechanically read, not typed in: `values_host` went in 26.10, as cuDF's changelog says."
    a, b = (json.loads((API_DIR/f'{v}.json').read_text())['classes']['Series']['names'] for v in VERSIONS)
    assert 'values_host' in a and 'values_host' not in b

@pytest.mark.skipif(not os.environ.get('FGT_CUDF_SOURCE'),
                    reason='FGT_CUDF_SOURCE (a git clone of rapidsai/cudf) is not set: the files are not re-read')
@pytest.mark.parametrize('version', VERSIONS)
def test_api_files_are_what_the_source_says(version):
    "Re-reading cuDF's source at the recorded commit gives the committed data file."
    got = extract(os.environ['FGT_CUDF_SOURCE'], REFS[version])
    assert got == json.loads((API_DIR/f'{version}.json').read_text())

_REFUSALS = r'''
import sys, warnings
sys.path.insert(0, {tests!r})
from helpers.fake_cudf import install
cudf = install({version!r})
import numpy as np, pandas as pd, pytest, cupy
df = pd.DataFrame({{'f': [1.5, np.nan, 3.0], 's': ['a', None, 'c'], 'i': [1, 2, 3]}})
g = cudf.from_pandas(df)
# no implicit copy to the host, and only cuDF's names
for f in (lambda: np.asarray(g['f']), lambda: list(g['f']), lambda: g['f'].tolist(), lambda: np.asarray(g),
          lambda: list(g.index)):
    with pytest.raises(TypeError): f()
with pytest.raises(AttributeError, match='idxmax'): g['f'].idxmax()
with pytest.raises(TypeError, match='bogus'): g['f'].fillna(0, bogus=1)   # fillna has no **kwargs
v = g['i'].values
assert type(v).__module__ == 'cupy'
with pytest.raises(TypeError, match='Implicit conversion'): np.asarray(v)
with pytest.raises(TypeError, match='Unsupported type'): v + np.arange(3)
assert (v + 1).get().tolist() == [2, 3, 4] and v.sum().item() == 6
# nulls, not NaN; a cuDF dtype
assert g['f'].null_count == 1 and g['f'].isna().to_pandas().tolist() == [False, True, False]
assert not isinstance(g['s'].astype('category').dtype, pd.CategoricalDtype)
ints = cudf.Series.from_arrow(__import__('pyarrow').array([1, None, 3]))
assert ints.dtype == np.int64 and ints.has_nulls
with pytest.raises(TypeError, match='non-equivalent'): ints.fillna(37.5)
# what from_pandas refuses, and keeps
for col in ([1, 2, 3], [1, 2.5, 3], [1, None, 3]):
    with pytest.raises(TypeError): cudf.from_pandas(pd.DataFrame({{'o': pd.Series(col, dtype=object)}}))
with cudf.option_context('mode.pandas_compatible', True):
    with pytest.raises(AttributeError):
        cudf.from_pandas(pd.DataFrame({{'b': pd.Series([True, False], dtype=object)}}))
assert str(cudf.from_pandas(pd.DataFrame({{'n': pd.array([1, None], dtype='Int64')}}))['n'].dtype) == 'Int64'
# codes: unsigned on 26.06, pandas' signed ones on 26.10
codes = g['s'].astype('category').cat.codes
assert codes.dtype == (np.uint8 if {version!r} == '26.06' else np.int8) and codes.has_nulls
# the joins: a string dtype against object on 26.06, digit strings against numbers on both
obj = cudf.from_pandas(pd.Index(['a', 'c']))
strs = cudf.from_pandas(pd.Series(['a', 'c'], dtype='string'))
assert obj.get_indexer(strs).get().tolist() == ([-1, -1] if {version!r} == '26.06' else [0, 1])
assert cudf.from_pandas(pd.Index([5, 7])).get_indexer(cudf.Series(['5', '7'])).get().tolist() == [0, 1]
print('ok')
'''

@pytest.mark.parametrize('version', VERSIONS)
def test_refuses_as_cudf_does(version):
    "The stand-in, served as `cudf`, refuses what cuDF refuses and holds what cuDF holds (the lines frame.py cites)."
    if pd.__version__.split('.')[0] != ('2' if version == '26.06' else '3'):
        pytest.skip(f"cuDF {version} runs on pandas {'2' if version == '26.06' else '3'}, not {pd.__version__}")
    code = _REFUSALS.format(tests=str(Path(__file__).parent), version=version)
    res = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300,
                         env={k: v for k,v in os.environ.items() if k != 'FGT_FAKE_DEVICE'})
    assert res.returncode == 0 and res.stdout.strip().endswith('ok'), res.stderr[-3000:]
