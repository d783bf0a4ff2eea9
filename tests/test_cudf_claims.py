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

def _line(cudf) -> str: return '.'.join(cudf.__version__.split('.')[:2])
def on(version):
    "A case of one cuDF line's behaviour: skipped on the other, which the case beside it holds"
    return pytest.mark.skipif(f"_line_now() != '{version}'", reason=f"cuDF {version}'s behaviour: another line runs")
def _line_now() -> str:
    "The cuDF line here, or '' where there is no cuDF (the `cudf` marker then skips the case)"
    try: return _line(require_cudf())
    except Exception: return ''

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

def test_read_csv_exponent_multiplies(cudf):
    """cpp/src/io/utilities/parsing_utils.cuh:169-177 @6a22d1d: the digits as above, then `value *= exp10(exponent)`:
    3e-1 is 3 times exp10(-1), a float within 2 ulp of 0.3 but not 0.3 whichever way CUDA's exp10 rounds"""
    v = cudf.read_csv(io.StringIO('a\n1.5e3\n3e-1\n-2.5E+2\n'))['a'].to_pandas().tolist()
    assert v[0] == 1500.0 and v[2] == -250.0
    assert v[1] != 0.3 and abs(v[1] - 0.3) <= 2 * np.spacing(0.3)

def test_read_csv_all_empty_column_is_int8(cudf):
    "cpp/src/io/csv/reader_impl.cu:614-616 @6a22d1d: a column of no value is INT8, all null"
    df = cudf.read_csv(io.StringIO('a,b\n1,\n2,\n'))
    assert df['b'].dtype == np.int8 and df['b'].null_count == 2

def test_read_csv_keeps_header_spaces(cudf):
    "cpp/src/io/csv/reader_impl.cu:141-180 @6a22d1d: the header is not trimmed, whatever `skipinitialspace`"
    assert list(cudf.read_csv(io.StringIO('a, b\n1,2\n'), skipinitialspace=True).columns) == ['a', ' b']

def test_float32_fillna_refuses_pi(cudf):
    """core/column/numerical.py:1261-1270 @6a22d1d (:941-950 @v26.06.01): `can_cast_safely` of a float64 value to a
    narrower float is False where it is exactly π, so fillna raises; another float64 value is cast"""
    s = cudf.Series(np.array([1.0, np.nan], dtype=np.float32))
    with pytest.raises(TypeError, match='Cannot safely cast'): s.fillna(np.pi)
    assert s.fillna(0.5).to_pandas().tolist() == [1.0, 0.5]

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

# --- dtypes -----------------------------------------------------------------------------------------------------------
@on('26.06')
def test_string_result_dtype_is_object_on_26_06(cudf):
    "utils/dtypes.py:636 @v26.06.01: a string column an operation makes shows NumPy's object"
    assert cudf.Series([1, 2]).astype('str').dtype == np.dtype(object)

@on('26.10')
def test_string_result_dtype_is_pandas_str_on_26_10(cudf):
    "utils/dtypes.py:24,642 @6a22d1d: `DEFAULT_STRING_DTYPE`, pandas' `StringDtype(na_value=nan)`"
    assert cudf.Series([1, 2]).astype('str').dtype == pd.StringDtype(na_value=np.nan)

def test_categorical_dtype_is_cudf_own(cudf):
    "dtypes.py:160-166 @v26.06.01: `_BaseDtype(ExtensionDtype, Serializable)`, its categories a cuDF Index"
    dt = cudf.Series(['b', 'a']).astype('category').dtype
    assert not isinstance(dt, pd.CategoricalDtype) and isinstance(dt.categories, cudf.Index) and dt == 'category'

@on('26.06')
def test_categorical_codes_unsigned_on_26_06(cudf):
    "dtypes.py:248-250 @v26.06.01: the smallest unsigned int that holds the categories"
    assert cudf.Series(['b', 'a']).astype('category').cat.codes.dtype == np.uint8

@on('26.10')
def test_categorical_codes_signed_on_26_10(cudf):
    "dtypes.py:254-270, accessors/categorical.py:88-98 @6a22d1d: pandas' codes dtype, signed"
    assert cudf.Series(['b', 'a']).astype('category').cat.codes.dtype == np.int8

def test_list_dtype_and_len(cudf):
    "dtypes.py:368,401 @v26.06.01: ListDtype named 'list'; accessors/lists.py:223-245: `len` int32, null for null"
    s = cudf.Series([[1], None, [2, 3]])
    n = s.list.len()
    assert s.dtype.name == 'list' and n.dtype == np.int32 and n.null_count == 1

def test_mixed_type_error_is_a_type_error(cudf):
    "errors.py:9 @6a22d1d: `class MixedTypeError(TypeError)`"
    assert issubclass(cudf.errors.MixedTypeError, TypeError)

# --- NumPy's protocols ------------------------------------------------------------------------------------------------
def test_ufunc_runs_on_the_device_keeping_the_index(cudf):
    "indexed_frame.py:5155-5190, utils/utils.py:65-90 @6a22d1d: CuPy's ufunc of that name, on the same index"
    r = np.sqrt(cudf.Series([4.0, 9.0], index=[5, 6]))
    assert isinstance(r, cudf.Series) and r.index.to_pandas().tolist() == [5, 6]
    assert r.to_pandas().tolist() == [2.0, 3.0]

def test_numpy_unique_of_a_series_is_sorted(cudf):
    "series.py:1192-1250 @6a22d1d: a NumPy function is the Series method of that name, `unique` then sorted"
    r = np.unique(cudf.Series([3, 1, 3]))
    assert isinstance(r, cudf.Series) and r.to_pandas().tolist() == [1, 3]

def test_in_looks_at_a_series_index(cudf):
    "series.py:690-692 @6a22d1d: `item in self.index`"
    s = cudf.Series([10, 20])
    assert 1 in s and 10 not in s

def test_bool_with_nulls_has_no_device_array(cudf):
    "column/numerical.py:149-172 @6a22d1d: 'Column must have no nulls.'"
    s = cudf.Series([True, None])
    with pytest.raises(ValueError, match='must have no nulls'): s.to_cupy()

def test_to_numpy_with_nulls_needs_na_value(cudf):
    "core/frame.py:636-651 @6a22d1d (`_to_array`): nulls with a dtype asked for and no `na_value` are an error"
    s = cudf.Series([1, None])
    with pytest.raises(ValueError): s.to_numpy(dtype='int64')
    assert s.to_numpy(dtype='int64', na_value=0).tolist() == [1, 0]

def test_to_pandas_keeps_a_pyarrow_string_dtype(cudf):
    """core/column/string.py:486-520 @6a22d1d (:367-394 @77ced62): a column from pandas' pyarrow strings comes back in
    that dtype, its null as pandas' NA"""
    s = cudf.from_pandas(pd.Series(['a', None], dtype='string[pyarrow]')).to_pandas()
    assert s.dtype == pd.StringDtype('pyarrow') and s.isna().tolist() == [False, True]

def test_to_pandas_of_nulls(cudf):
    "column.py:1132-1166 @v26.06.01: through Arrow, ints with nulls float64 and NaN, bools with nulls objects and None"
    i, b = cudf.Series([1, None]).to_pandas(), cudf.Series([True, None]).to_pandas()
    assert i.dtype == np.float64 and np.isnan(i[1]) and b.dtype == object and b[1] is None

# --- missing values, reductions ---------------------------------------------------------------------------------------
def test_nan_is_null_to_isna(cudf):
    "core/column/numerical.py:219-234 @6a22d1d: `isnull` of a float column is its nulls or its NaN"
    s = cudf.Series([0.0, 1.0]) / 0.0
    assert s.isna().to_pandas().tolist() == [True, False] and s.notna().to_pandas().tolist() == [False, True]

def test_nan_made_by_arithmetic_is_not_a_null(cudf):
    """cpp/src/binaryop/binaryop.cpp:264-330 @6a22d1d: a binary op's nulls are its operands' (their masks ANDed), so
    0/0 is a NaN, not a null: `isna` sees it, `has_nulls` and `null_count` do not (series.py:1684-1710)"""
    s = cudf.Series([0.0, 1.0, None])
    r = s / s
    assert r.isna().to_pandas().tolist() == [True, False, True]
    assert r.has_nulls and r.null_count == 1
    q = cudf.Series([0.0, 1.0]) / 0.0
    assert not q.has_nulls and q.null_count == 0 and np.isnan(q.to_pandas()[0])

def test_reductions_skip_nulls(cudf):
    "column.py:2945-2990 @6a22d1d: nulls dropped, nothing left is NaN (sum 0, product 1)"
    assert cudf.Series([1.0, None, 2.0]).sum() == 3.0
    e = cudf.Series([None, None], dtype='float64')
    assert e.sum() == 0 and e.product() == 1 and np.isnan(e.mean())

def test_any_all_of_empty(cudf):
    "series.py:2039-2076 @6a22d1d: nulls skipped; an empty column is all, and not any"
    e = cudf.Series([], dtype='bool')
    assert bool(e.all()) and not bool(e.any())

def test_sort_values_of_a_categorical_by_codes(cudf):
    "column.py:2234-2251 @v26.06.01, categorical.py:111-122: a categorical sorts by its codes, not its values"
    s = cudf.Series(['a', 'b', 'a']).astype(cudf.CategoricalDtype(['b', 'a']))
    assert s.sort_values().to_pandas().tolist() == ['b', 'a', 'a']

@on('26.06')
def test_value_counts_unsorted_counts_on_26_06(cudf):
    """series.py:3205, indexed_frame.py:5646 @v26.06.01: groups with sort=False, in the hash table's order (not
    asserted: not first appearance, not stable), the counts right"""
    vc = cudf.Series([3, 1, 3, 2]).value_counts(sort=False).to_pandas()
    assert dict(vc) == {3: 2, 1: 1, 2: 1}

@on('26.10')
def test_value_counts_unsorted_by_first_position_on_26_10(cudf):
    "series.py:3341-3364 @6a22d1d: with sort=False the counts come by each value's first position"
    vc = cudf.Series([3, 1, 3, 2]).value_counts(sort=False).to_pandas()
    assert vc.index.tolist() == [3, 1, 2] and vc.tolist() == [2, 1, 1]

def test_groupby_sorts_only_when_asked(cudf):
    """indexed_frame.py:5752-5753 @6a22d1d, :5645-5646 @v26.06.01: `sort` defaults to False, the groups in a hash
    table's order (no order to assert: the same groups and sums); groupby.py:1391-1392 @6a22d1d: `sort=True` sorts"""
    keys = [(7 * i) % 1000 for i in range(3000)]
    df = cudf.DataFrame({'k': keys, 'v': list(range(3000))})
    want = pd.DataFrame({'k': keys, 'v': range(3000)}).groupby('k').v.sum()
    got = df.groupby('k')['v'].sum().to_pandas()
    assert sorted(got.index) == list(want.index) and (got.sort_index() == want).all()
    assert df.groupby('k', sort=True)['v'].sum().to_pandas().index.tolist() == list(want.index)

# --- strings ----------------------------------------------------------------------------------------------------------
def test_string_astype_number_refuses_non_numbers(cudf):
    "core/column/string.py:248-253 @v26.06.01: a value that is not a number is a ValueError"
    with pytest.raises(ValueError): cudf.Series(['1', 'x']).astype('int64')

def test_split_regex_none_long_pat_is_a_regex(cudf):
    "accessors/string.py:2612-2616 @v26.06.01, :2628-2632 @6a22d1d: `regex=None` and a pattern of 2+ characters"
    assert cudf.Series(['a1b2c']).str.split(r'\d').list.len().to_pandas().tolist() == [3]
    assert cudf.Series(['a.b']).str.split('.').list.len().to_pandas().tolist() == [2]

def test_read_csv_keeps_field_spaces(cudf):
    "cpp/include/cudf/io/csv.hpp:93,344 @6a22d1d: `skipinitialspace` stored, read by nothing under cpp/src/io/csv/"
    df = cudf.read_csv(io.StringIO('a,b\n1, x\n'), skipinitialspace=True)
    assert df['b'].to_pandas().tolist() == [' x']

# --- frames -----------------------------------------------------------------------------------------------------------
def test_frame_iterates_its_column_names(cudf):
    "dataframe.py:3205-3206 @6a22d1d: `iter(self._column_names)`"
    assert list(cudf.from_pandas(pd.DataFrame({'a': [1], 'b': [2]}))) == ['a', 'b']

def test_a_row_is_a_series_only_of_a_common_dtype(cudf):
    "dataframe.py:1557-1587 @6a22d1d: no mixed-type Series, so a row of numbers and strings is a one-row frame"
    nums = cudf.from_pandas(pd.DataFrame({'a': [1, 2], 'b': [0.5, 1.5]}))
    mixed = cudf.from_pandas(pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']}))
    row = nums.iloc[0, :]
    assert isinstance(row, cudf.Series) and row.dtype == np.float64
    assert isinstance(mixed.iloc[0, :], cudf.DataFrame)

def test_series_memory_usage(cudf):
    """column.py:1541-1557 @6a22d1d (`_plc_memory_usage`): data, a null mask padded to 64 bytes where there are nulls,
    a string's int32 offsets and characters"""
    assert cudf.Series([1, 2, 3]).memory_usage(index=False) == 24
    assert cudf.Series([1, None, 3]).memory_usage(index=False) == 24 + 64
    assert cudf.Series(['ab', None, 'c']).memory_usage(index=False) == 3 + 4 * 4 + 64

def test_categorical_memory_usage(cudf):
    """categorical.py:702-703 @v26.06.01, :726-727 @6a22d1d: the codes, stored unsigned (dtypes.py:248-250
    @v26.06.01, :248-251 @6a22d1d: one byte a row for 200 categories, where pandas' signed codes take two), plus the
    categories"""
    s = cudf.Series([f'{i:03d}' for i in range(200)] * 2).astype('category')
    assert s.memory_usage(index=False) == 400 * 1 + (200 * 3 + 4 * 201)

def test_frame_memory_usage_index_first(cudf):
    "dataframe.py:1855-1900 @6a22d1d: the index's bytes first (a RangeIndex none), then each column's"
    m = cudf.from_pandas(pd.DataFrame({'a': [1, 2], 'b': [1.0, 2.0]})).memory_usage().to_pandas()
    assert m.index.tolist() == ['Index', 'a', 'b'] and m.tolist() == [0, 16, 16]

# --- joins ------------------------------------------------------------------------------------------------------------
def test_get_indexer_casts_strings_to_float_against_numbers(cudf):
    "index.py:1885-1972, join/_join_helpers.py:72-153 @6a22d1d: keys to a common dtype, float64 here, so '5' finds 5"
    assert cudf.Index([5, 6]).get_indexer(cudf.Series(['6', '5', '7'])).get().tolist() == [1, 0, -1]

def test_get_indexer_refusals(cudf):
    "index.py:1885-1972 @6a22d1d: a scalar target, a non-unique index"
    with pytest.raises(TypeError): cudf.Index([1, 2]).get_indexer(1)
    with pytest.raises(ValueError): cudf.Index([1, 1]).get_indexer([1])

@on('26.06')
def test_get_indexer_pandas_string_vs_object_misses_on_26_06(cudf):
    "_join_helpers.py:96 @v26.06.01: StringDtype is not object, both go to float64, the cast fails: all -1"
    ix = cudf.Index(np.array(['a', 'b'], dtype=object))
    target = cudf.from_pandas(pd.Series(['b', 'a'], dtype='string'))
    assert ix.get_indexer(target).get().tolist() == [-1, -1]

@on('26.10')
def test_get_indexer_pandas_string_vs_object_finds_on_26_10(cudf):
    "join/_join_helpers.py:72-153 @6a22d1d: two string dtypes match as strings"
    ix = cudf.Index(np.array(['a', 'b'], dtype=object))
    target = cudf.from_pandas(pd.Series(['b', 'a'], dtype='string'))
    assert ix.get_indexer(target).get().tolist() == [1, 0]

def test_index_isin_is_a_device_array(cudf):
    "index.py:2447-2455 @v26.06.01: a CuPy bool array"
    r = cudf.Index([1, 2, 3]).isin([2])
    assert type(r).__module__ == 'cupy' and r.get().tolist() == [False, True, False]

# --- from pandas ------------------------------------------------------------------------------------------------------
def test_from_pandas_refuses_numbers_of_object_dtype(cudf):
    "column.py:3509-3518 @6a22d1d: ints in an object column, or ints and strings"
    with pytest.raises(TypeError, match='integer of object type'): cudf.from_pandas(pd.Series([1, 2], dtype=object))
    with pytest.raises(TypeError, match='mixed types'): cudf.from_pandas(pd.Series([1, 'a'], dtype=object))

def test_from_pandas_refuses_float16(cudf):
    "column.py:3330-3600 @6a22d1d: no float16 column"
    with pytest.raises(TypeError, match='float16'): cudf.from_pandas(pd.Series([1.0], dtype='float16'))

def test_from_pandas_keeps_nullable_dtypes(cudf):
    "column.py:3350-3368 @v26.06.01: `dtype = arbitrary.dtype`"
    assert cudf.from_pandas(pd.Series([1, None], dtype='Int64')).dtype == pd.Int64Dtype()

def test_from_pandas_object_bools_with_none(cudf):
    "column.py:3520-3526 @6a22d1d: a bool column with a null"
    s = cudf.from_pandas(pd.Series([True, None], dtype=object))
    assert s.dtype == np.bool_ and s.null_count == 1

def test_from_pandas_object_bools_pandas_compatible(cudf):
    """column.py:3520-3526 @6a22d1d: under `mode.pandas_compatible` the check reads `dtype.kind` of None; :3553-3563:
    missing values counted, bools with one are mixed"""
    with cudf.option_context('mode.pandas_compatible', True):
        with pytest.raises(AttributeError): cudf.from_pandas(pd.Series([True, False], dtype=object))
        with pytest.raises(TypeError, match='mixed types'): cudf.from_pandas(pd.Series([True, None], dtype=object))

# --- CuPy -------------------------------------------------------------------------------------------------------------
def test_cupy_refuses_numpy_operands(cudf):
    "cupy/_core/core.pyx:1803-1809, _scalar.pyx:344 @v14.2.0: no implicit host copy, no NumPy array in a kernel"
    a = cudf.Series([1, 2]).values
    with pytest.raises(TypeError): np.asarray(a)
    with pytest.raises(TypeError): a + np.array([1, 1])

def test_cupy_iterates_zero_d_arrays(cudf):
    "cupy/_core/core.pyx:1821-1824 @v14.2.0: elements are 0-d device arrays; core.pyx:694: `tolist` copies"
    a = cudf.Series([1, 2]).values
    first = next(iter(a))
    assert type(first).__module__ == 'cupy' and first.ndim == 0 and a.tolist() == [1, 2]

def test_cupy_asarray_of_a_column(cudf):
    """cupy/_core/core.pyx:3129, 3299-3314 @v14.2.0, through cuDF's `__cuda_array_interface__`
    (single_column_frame.py:304-315, column.py:2443-2480 @6a22d1d): a numeric column's values; with nulls a masked
    interface, refused; a categorical raises (column/categorical.py:288-293); strings and frames have no interface, and
    their `__array__` refuses the host copy CuPy then asks for"""
    import cupy
    a = cupy.asarray(cudf.Series([1.5, 2.5]))
    assert type(a).__module__ == 'cupy' and a.get().tolist() == [1.5, 2.5]
    with pytest.raises(ValueError, match='masked arrays'): cupy.asarray(cudf.Series([1.0, None]))
    with pytest.raises(TypeError, match='Categorical'): cupy.asarray(cudf.Series(['a', 'b']).astype('category'))
    for host_only in (cudf.Series(['a', 'b']), cudf.DataFrame({'a': [1]})):
        with pytest.raises(TypeError): cupy.asarray(host_only)

def test_cupy_sum_is_not_numpys_order(cudf):
    """cupy/_core/_routines_math.pyx:115-116, _routines_statistics.pyx:148-153, _accelerator.pyx:50-52 @v14.2.0:
    `sum`/`mean` of a whole array are CUB's device reduction, whose order is not NumPy's pairwise one: within the
    order-free bound of the exact sum, and not NumPy's bits on every one of these arrays. `var` multiplies by
    1/(n-ddof) (_routines_statistics.pyx:585-605, 632-636)"""
    import math
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(100_003) * 10.0 ** rng.integers(-3, 4, 100_003) for _ in range(4)]
    same = []
    for x in xs:
        d = cudf.Series(x).values
        got, exact = float(d.sum()), math.fsum(x)
        # any order of n additions: |error| <= (n-1) eps sum|x| (to first order; the factor 2 covers the rest)
        assert abs(got - exact) <= 2 * (len(x) - 1) * np.finfo(np.float64).eps * np.abs(x).sum()
        same.append(got == np.sum(x))
        m = float(d.mean())
        v = float(d.var(ddof=1))
        assert abs(m - exact / len(x)) <= 2 * len(x) * np.finfo(np.float64).eps * np.abs(x).mean()
        assert abs(v - np.var(x, ddof=1)) <= 8 * len(x) * np.finfo(np.float64).eps * np.var(x, ddof=1)
    assert not all(same)

def test_cupy_bincount_sums(cudf):
    "cupy/_statistics/histogram.py:508-519 @v14.2.0: counts, or sums of weights by atomicAdd (in no fixed order)"
    import cupy
    x = cupy.asarray(np.array([0, 1, 1, 3]))
    assert cupy.bincount(x).get().tolist() == [1, 2, 0, 1]
    w = cupy.asarray(np.array([0.5, 0.25, 0.25, 1.0]))
    assert np.allclose(cupy.bincount(x, weights=w).get(), [0.5, 0.5, 0.0, 1.0])

def test_cupy_bincount_of_nothing_is_intp_zeros(cudf):
    "cupy/_statistics/histogram.py:555-558 @v14.2.0: an empty `x` gives intp zeros, weights or not"
    import cupy
    empty = cupy.asarray(np.array([], dtype=np.int64))
    r = cupy.bincount(empty, weights=cupy.asarray(np.array([], dtype=np.float64)), minlength=3)
    assert r.dtype == np.intp and r.get().tolist() == [0, 0, 0]

def test_cupy_array_function_is_cupys(cudf):
    "cupy/_core/core.pyx:2028-2044 @v14.2.0: a NumPy function over device arrays is CuPy's of that name"
    a = cudf.Series([1, 2]).values
    r = np.concatenate([a, a])
    assert type(r).__module__ == 'cupy' and r.get().tolist() == [1, 2, 1, 2]

# --- Dask -------------------------------------------------------------------------------------------------------------
@pytest.mark.cudf(needs=['dask_cudf'])
def test_dask_to_backend_cudf(cudf):
    "python/dask_cudf/dask_cudf/backends.py:526-565 @6a22d1d: pandas partitions through `cudf.from_pandas`"
    import dask.dataframe as dd
    import dask_cudf  # noqa: F401 (registers the backend)
    ddf = dd.from_pandas(pd.DataFrame({'a': [1, 2, 3]}), npartitions=2).to_backend('cudf')
    assert isinstance(ddf._meta, cudf.DataFrame) and isinstance(ddf.compute(), cudf.DataFrame)
    assert ddf['a'].sum().compute() == 6

@pytest.mark.cudf(needs=['dask_cudf'])
def test_dask_make_meta_from_names_and_dtypes(cudf):
    """python/dask_cudf/dask_cudf/backends.py:197-265 @6a22d1d: with a cuDF parent, a dict of dtypes is an empty cuDF
    frame, a (name, dtype) tuple an empty cuDF Series, a dtype a scalar of it"""
    import dask_cudf  # noqa: F401
    from dask.dataframe.utils import make_meta
    parent = cudf.DataFrame({'x': [1]}).head(0)
    df = make_meta({'a': 'int64', 'b': 'float64'}, parent_meta=parent)
    assert isinstance(df, cudf.DataFrame) and len(df) == 0 and list(df.columns) == ['a', 'b']
    assert df['a'].dtype == np.int64 and df['b'].dtype == np.float64
    s = make_meta(('a', 'float64'), parent_meta=parent)
    assert isinstance(s, cudf.Series) and s.name == 'a' and len(s) == 0 and s.dtype == np.float64
    assert np.asarray(make_meta('i8', parent_meta=parent)).dtype == np.int64

@pytest.mark.cudf(needs=['dask_cudf'])
def test_dask_meta_nonempty(cudf):
    "python/dask_cudf/dask_cudf/backends.py:94-175 @6a22d1d: two rows of each column's dtype"
    import dask_cudf  # noqa: F401
    from dask.dataframe.utils import meta_nonempty
    meta = cudf.from_pandas(pd.DataFrame({'a': [1], 'b': ['x']})).head(0)
    ne = meta_nonempty(meta)
    assert isinstance(ne, cudf.DataFrame) and len(ne) == 2 and list(ne.dtypes) == list(meta.dtypes)
