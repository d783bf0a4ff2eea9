"backend.py: lazy cuDF, the frame ops that differ between backends, zero-copy columns to tensors."
import subprocess
import sys
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from fastai_gpu_tabular import backend as B

def test_import_is_lazy():
    "Importing the package (all of it) neither imports cuDF/CuPy nor initialises CUDA."
    code = ("import sys, torch; import fastai_gpu_tabular.all, fastai_gpu_tabular.datasets, "
            "fastai_gpu_tabular.__main__\n"
            "print(sorted(m for m in ('cudf', 'cupy', 'rmm') if m in sys.modules), torch.cuda.is_initialized())")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ['[]', 'False']

def test_frame_type_is_read_without_importing_cudf():
    assert B.backend_of(pd.DataFrame({'a': [1]})) == 'pandas'
    assert not B.is_cudf(pd.Series([1.]))
    with pytest.raises(TypeError, match='Expected a pandas, cuDF, Polars or Dask DataFrame, got dict'):
        B.backend_of({'a': [1]})
    with pytest.raises(ValueError, match="backend must be 'pandas', 'cudf' or None"):
        B.to_backend(pd.DataFrame(), 'polars')

def test_require_cudf_says_how(monkeypatch):
    monkeypatch.setattr(B, '_probe', lambda: (None, None, 'no CUDA device is visible'))
    assert not B.cudf_available() and B.cudf_reason() == 'no CUDA device is visible'
    with pytest.raises(ImportError, match=r'no CUDA device is visible.*fastai_gpu_tabular\[cuda12\] or \[cuda13\]'):
        B.require_cudf()
    with pytest.raises(ImportError): B.to_backend(pd.DataFrame({'a': [1]}), 'cudf')

def test_a_frame_cudf_refuses_is_named(monkeypatch):
    """cuDF's `from_pandas` refuses an object column of mixed types with a MixedTypeError (a TypeError) that names no
    column: `to_backend` names it, as the pandas path does (test_errors runs it on cuDF itself)."""
    def refuse(df): raise TypeError('Cannot create column with mixed types')   # cuDF's message (column.py)
    monkeypatch.setattr(B, 'require_cudf', lambda: type('cudf', (), {'from_pandas': staticmethod(refuse)}))
    df = pd.DataFrame({'a': ['x', None, 'y'], 'b': pd.Series(['u', 3, np.nan], dtype=object)})
    with pytest.raises(TypeError, match=r"column 'b' mixes value types \['int', 'str'\]"): B.to_backend(df, 'cudf')
    with pytest.raises(TypeError, match='Cannot create column'): B.to_backend(df[['a']], 'cudf')   # none mixed: cuDF's

def test_col_to_tensor_is_zero_copy_on_cpu():
    s = pd.Series(np.arange(10, dtype=np.float32))
    t = B.col_to_tensor(s)
    assert t.data_ptr() == s.to_numpy().__array_interface__['data'][0]
    with pytest.raises(TypeError, match="column 'o' holds Python objects"): B.col_to_tensor(pd.Series(['a'], name='o'))

def test_encode_codes_matches_pandas_categorical():
    """Codes against a vocabulary are where pandas finds each value in it (`Index.get_indexer`: -1 for missing and
    unseen values), plus `add`, in pandas' smallest code dtype, on the column's index; from object and category
    columns (whose categories may be the vocabulary itself), against the vocabulary or its Index."""
    from fastai_gpu_tabular.datasets import load_adult
    s = load_adult()['occupation'].iloc[:3000].astype(object)
    s.iloc[::50], s.iloc[3::77] = None, 'Astronaut'
    s.index = s.index * 3 + 7
    vocab = sorted(set(s.dropna()) - {'Astronaut'})
    ref = pd.Index(vocab).get_indexer(s)
    assert (ref == -1).sum() > 100 and (ref == len(vocab) - 1).any()
    index = pd.CategoricalDtype(vocab).categories   # the vocabulary as its Index, as `LazyCategoryMap.index` keeps it
    for col in (s, s.astype('category'), s.where(s.isin(vocab)).astype(pd.CategoricalDtype(vocab))):
        for add,voc in ((0, vocab), (1, vocab), (1, index)):
            codes = B.encode_codes(col, voc, add=add)
            np.testing.assert_array_equal(codes.to_numpy(), ref + add)
            assert codes.dtype == np.int8 and codes.index.equals(s.index)
    decoded = B.take_values(['#na#'] + vocab, B.encode_codes(s, vocab).astype(float))   # floats, as a decoded batch
    assert decoded.tolist() == [v if v in vocab else '#na#' for v in s] and decoded.index.equals(s.index)

def test_sorted_uniques_order_and_mixed_types():
    assert B.sorted_uniques(pd.Series(['b', 'B', 'é', None, 'a', 'b'])) == sorted(['b', 'B', 'é', 'a'])
    assert B.sorted_uniques(pd.Series([3., np.nan, 1., 3.])) == [1., 3.]
    with pytest.raises(TypeError, match=r"column 'm' mixes value types \['int', 'str'\]"):
        B.sorted_uniques(pd.Series(['a', 1, 'b'], name='m'))

@pytest.mark.cudf
def test_cudf_columns_to_tensors_share_memory():
    cudf = B.require_cudf()
    s = cudf.Series(np.arange(1000, dtype=np.float32))
    t = B.col_to_tensor(s)
    assert t.device.type == 'cuda' and t.data_ptr() == s.values.data.ptr
    assert B.frame_device(cudf.DataFrame({'a': s})).type == 'cuda'
    codes = B.encode_codes(cudf.Series(['b', None, 'z', 'a']), ['a', 'b'], add=1)
    assert codes.to_arrow().to_pylist() == [2, 0, 0, 1]

@pytest.mark.parametrize('other', [None, 'ab\x00', 'nine bytes'], ids=['short', 'nul', 'long'])
def test_arrow_strings_to_category_is_astype_category(other):
    """Arrow strings (pandas 3's `str`, `string[pyarrow]`, an `ArrowDtype`; in several chunks, sliced, on any index)
    become pandas' own categories (the same Index, dtype and all) and codes, by Arrow's kernels: short strings sorted
    as integer keys, and with a string that holds NUL or is longer than 8 bytes, by Arrow's sort."""
    import pyarrow as pa
    rng = np.random.default_rng(0)
    vals = ['b', 'a', 'é', 'B', 'zz', '10', '9', ' x', 'a b', '', '\U0001F600', 'ß', 'ab', 'abcdefgh', 'ÿ', '\x7f']
    vals = np.array(vals + ([other] if other else []), dtype=object)
    s = pd.Series(rng.choice(vals, 600), name='s', index=rng.permutation(600) * 3, dtype=object)
    s[::7] = None
    dtypes = [pd.StringDtype('pyarrow'), pd.ArrowDtype(pa.string()), pd.ArrowDtype(pa.large_string())]
    if pd.__version__ >= '3': dtypes.append('str')   # pandas 3's default strings: Arrow's, NaN for missing
    for dt in dtypes:
        col = s.astype(dt)
        assert B.arrow_strings(col) is not None
        chunked = pd.concat([col.iloc[:250], col.iloc[250:]])   # a column of two Arrow chunks
        for c in (col, chunked, col.iloc[::-3], col.iloc[:0]):
            ours, ref = B.to_category(c), c.astype('category')
            assert ours.cat.categories.equals(ref.cat.categories)
            assert ours.cat.categories.dtype == ref.cat.categories.dtype
            assert (ours.cat.codes == ref.cat.codes).all() and ours.cat.codes.dtype == ref.cat.codes.dtype
            assert ours.index.equals(c.index) and ours.name == c.name
    assert B.arrow_strings(s) is None and B.arrow_strings(pd.Series([1.5])) is None   # object strings, numbers

@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=9), max_size=40) |   # some longer than 8 bytes, or holding NUL
       st.lists(st.text(st.characters(max_codepoint=0x7ff, exclude_characters='\x00'), max_size=4), max_size=40))
def test_short_string_keys_sort_as_python(strings):
    """Strings of at most 8 UTF-8 bytes without NUL become uint64 keys that compare as Python compares the strings (code
    points), equal only where the strings are, and decode back to them; any other string makes it decline (None)."""
    import pyarrow as pa
    arr = pa.array(strings, type=pa.large_string())
    keys = B.short_string_keys(arr)
    if any(len(s.encode()) > 8 or '\x00' in s for s in strings):
        assert keys is None
        return
    # read from the buffers: the same keys from 32-bit offsets, and from a slice of a longer array
    for other in (pa.array(strings, type=pa.string()), pa.array(['x', *strings, 'y'], type=pa.string())[1:-1]):
        assert np.array_equal(B.short_string_keys(other), keys)
    assert keys.dtype == np.uint64 and len(keys) == len(strings)
    for i,(k,s) in enumerate(zip(keys, strings)):
        for j,(k2,s2) in enumerate(zip(keys, strings)):
            assert (k < k2) == (s < s2) and (k == k2) == (s == s2), (i, j)
    assert B.strings_of_keys(keys).to_pylist() == strings

def test_to_category_is_astype_category():
    "Sorting the distinct strings in C gives pandas' own categories and codes (and falls back for non-strings)."
    rng = np.random.default_rng(0)
    s = pd.Series(rng.choice(np.array(['b', 'a', 'é', 'B', 'zz', '10', '9', ' x', 'a b'], dtype=object), 500), name='s')
    s[::7] = None; s[3] = np.nan
    for col in (s, s.where(s != 'a', 1), pd.Series([None, np.nan], dtype=object)):
        ours, ref = B.to_category(col), col.astype('category')
        assert ours.cat.categories.equals(ref.cat.categories) and (ours.cat.codes == ref.cat.codes).all()
        assert ours.index.equals(col.index) and ours.name == col.name
