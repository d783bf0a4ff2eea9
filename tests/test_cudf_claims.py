"""The cuDF stand-in's claims, one case each: a small snippet and the result cuDF gives, as the stand-in
(tests/helpers/fake_cudf) reproduces it, with the cuDF or CuPy source line that says so. Under FGT_FAKE_CUDF it checks
the stand-in; on a GPU machine with cuDF (FGT_REQUIRE_GPU=1) it checks the stand-in's claims against cuDF itself, claim
by claim: a case red there is a claim of the stand-in to fix (and cite) before any package fix."""
import io
import numpy as np
import pandas as pd
import pytest
from fastai_gpu_tabular.backend import require_cudf

pytestmark = pytest.mark.cudf

@pytest.fixture
def cudf(): return require_cudf()

def test_all_missing_object_array_is_refused(cudf):
    "column.py:3680-3687 @6a22d1d: `cudf.Series` of an object array of missing values only"
    with pytest.raises(TypeError, match='Cannot have all NaN values with object dtype'):
        cudf.Series(np.array([None, None], dtype=object))

def test_object_array_with_some_missing_goes_through_arrow(cudf):
    "column.py:3688-3690 @6a22d1d: `pa.array` of it, so ints with None are an int column with a null"
    s = cudf.Series(np.array([1, None], dtype=object))
    assert s.dtype == np.int64 and s.null_count == 1

def test_read_csv_none_is_a_string(cudf):
    "cpp/src/io/csv/reader_impl.cu:1108-1130 @6a22d1d: libcudf's default NA tokens lack 'None'"
    df = cudf.read_csv(io.StringIO('a,b\nNone,1\nx,2\n'))
    assert df['a'].null_count == 0 and df['a'].to_pandas().tolist() == ['None', 'x']

def test_read_csv_floats_digit_by_digit(cudf):
    "cpp/src/io/utilities/parsing_utils.cuh:122-185 @6a22d1d: 0.3 is 3 * 0.1 in double, 0.30000000000000004"
    v = cudf.read_csv(io.StringIO('a\n0.3\n1.5\n'))['a'].to_pandas().tolist()
    assert v == [3 * 0.1, 1.5] and v[0] != 0.3

def test_read_csv_all_empty_column_is_int8(cudf):
    "cpp/src/io/csv/reader_impl.cu:614-616 @6a22d1d: a column of no value is INT8, all null"
    df = cudf.read_csv(io.StringIO('a,b\n1,\n2,\n'))
    assert df['b'].dtype == np.int8 and df['b'].null_count == 2

def test_read_csv_keeps_header_spaces(cudf):
    "cpp/src/io/csv/reader_impl.cu:141-180 @6a22d1d: the header is not trimmed, whatever `skipinitialspace`"
    assert list(cudf.read_csv(io.StringIO('a, b\n1,2\n'), skipinitialspace=True).columns) == ['a', ' b']

def test_string_astype_bool_is_non_empty(cudf):
    "core/column/string.py:265-273 @6a22d1d: `count_characters() > 0`, a null False"
    s = cudf.from_pandas(pd.Series(['a', None, ''], dtype=object))
    assert s.astype(bool).to_pandas().tolist() == [True, False, False]

def test_datetime_astype_int64_is_its_integers(cudf):
    "core/column/temporal_base.py:315-335 @6a22d1d: the int64 under the column, in its unit, a null kept"
    t = pd.Series(pd.to_datetime(['2020-01-01', None])).astype('datetime64[ns]')
    got = cudf.from_pandas(t).astype('int64')
    assert got.dtype == np.int64 and got.null_count == 1 and got.to_pandas()[0] == pd.Timestamp('2020-01-01').value

def test_no_implicit_host_copy(cudf):
    "core/frame.py:602-609, single_column_frame.py:225-243, mixins/notiterable.py:6-18 @6a22d1d"
    s = cudf.Series([1, 2])
    for f in (np.asarray, list, lambda s: s.tolist()):
        with pytest.raises(TypeError): f(s)

def test_factorize_first_appearance(cudf):
    "core/single_column_frame.py:352-362 @6a22d1d: int64 codes, uniques in order of first appearance"
    codes, uniq = cudf.Series([3, 1, 3, 2]).factorize()
    assert codes.tolist() == [0, 1, 0, 2] and uniq.to_pandas().tolist() == [3, 1, 2]

def test_astype_category_sorts(cudf):
    "core/column/column.py:2330-2348 @v26.06.01: the categories are the distinct values sorted, nulls left out"
    s = cudf.from_pandas(pd.Series(['b', None, 'a'], dtype=object)).astype('category')
    assert s.cat.categories.to_pandas().tolist() == ['a', 'b']

def test_int_fillna_refuses_what_it_cannot_hold(cudf):
    "core/column/numerical.py:1183-1209 @6a22d1d: an int column (with a null, as read_csv makes one) filled with 0.5"
    col = cudf.read_csv(io.StringIO('a,b\n1,x\n,y\n'))['a']   # reader_impl.cu:614-628: ints with a null
    assert col.dtype == np.int64 and col.null_count == 1
    with pytest.raises(TypeError): col.fillna(0.5)

def test_cupy_argsort_kinds(cudf):
    "cupy/_core/core.pyx:1144-1146 @v14.2.0: `argsort` takes no kind but 'stable'"
    a = cudf.Series([2, 1]).values
    assert a.argsort(kind='stable').tolist() == [1, 0]
    with pytest.raises(NotImplementedError): a.argsort(kind='quicksort')

def test_cupy_log1p_within_one_ulp(cudf):
    "cupy/_math/explog.py:64-70 @v14.2.0: CUDA's log1p, within 1 ulp of the exact value (not libm's bits)"
    x = np.linspace(0.01, 100, 1001)
    got = np.log1p(cudf.Series(x).values).get()
    exact = np.log1p(x.astype(np.longdouble))
    assert (np.abs(got - exact) <= np.spacing(np.abs(got))).all()
