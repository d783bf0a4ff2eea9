"""The exact statistics over partitions against numpy and pandas on the same values in memory, bit for bit."""
import numpy as np
import pandas as pd
import pytest

dask = pytest.importorskip('dask', reason='the Dask path needs dask[dataframe] (the `dask` extra)')
import dask.dataframe as dd
import fastai_gpu_tabular.dask.stats as S
from fastai_gpu_tabular.dask.stats import SumPlan, exact_median, exact_mode, exact_moments, pairwise_sum
from fastai_gpu_tabular.ops.procs import quantile_from_counts  # the bag width's percentile: in-memory and Dask

@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set(scheduler='sync'): yield

def _wide(rng, n, dt):
    "Values over 1e-8..1e8 of both signs: their float sums change with the order of the additions."
    return (np.exp(rng.standard_normal(n) * 6) * rng.choice([-1, 1], n)).astype(dt)

def test_pairwise_sum_is_numpys():
    "The replica that CuPy runs (here on NumPy arrays) adds in numpy's order: every length from 1 to 300, and longer."
    rng = np.random.default_rng(0)
    for n in [*range(1, 300), 1000, 8191, 8192, 8193, 70001]:
        for dt in (np.float32, np.float64):
            a = _wide(rng, n, dt)
            assert pairwise_sum(a) == a.sum(), (n, dt)
            m = np.stack([a, a[::-1].copy()])
            assert (pairwise_sum(m) == m.sum(axis=1)).all()

def test_sum_plan_over_any_cut():
    "Sums of a float32 column (in float32, and cast to float64 through numpy's buffers), cut anywhere into partitions."
    rng = np.random.default_rng(1)
    for _ in range(30):
        n = int(rng.integers(1, 30000))
        a = _wide(rng, n, np.float32)
        cuts = np.unique(np.r_[0, np.sort(rng.integers(0, n, rng.integers(0, 6))), n])
        for cast, dt, want in ((False, np.dtype('f4'), a.sum()), (True, np.dtype('f8'), a.sum(dtype='f8'))):
            plan, whole, shared = SumPlan(n, cast=cast), {}, {}
            for s, e in zip(cuts[:-1], cuts[1:]):
                w, sh = plan.pieces(int(s), int(e))
                whole.update({k: a[k[1]:k[1] + k[2]].astype(dt).sum() for k in w})
                for k in sh: shared.setdefault(k, []).append(a[max(k[1], s):min(k[1] + k[2], e)])
            assert plan.total(whole, shared, dt) == want

def test_moments_median_mode_against_pandas():
    rng = np.random.default_rng(2)
    n = 50_003
    df = pd.DataFrame({'f32': _wide(rng, n, np.float32), 'f64': _wide(rng, n, np.float64),
                       'i8': rng.integers(-100, 100, n).astype(np.int8),
                       'few': rng.integers(0, 6, n).astype(np.float32)})
    df.loc[rng.random(n) < 0.2, ['f32', 'few']] = np.nan
    ddf = dd.from_pandas(df, npartitions=7)
    means, stds = exact_moments(ddf.to_delayed(), list(df.columns), dict(df.dtypes))
    for c in df.columns:
        assert means[c] == df.mean()[c] and type(means[c]) is type(df.mean()[c]), c
        assert stds[c] == df.std(ddof=0)[c], c
    med = exact_median(ddf.to_delayed(), ['f32', 'f64', 'i8'], dict(df.dtypes))
    for c in med: assert med[c] == df[c].median() and type(med[c]) is type(df[c].median()), c
    modes = {c: df[c].dropna().value_counts().idxmax() for c in ('few', 'i8')}
    assert exact_mode(ddf.to_delayed(), ['few', 'i8']) == modes

def test_quantile_from_counts():
    rng = np.random.default_rng(3)
    for _ in range(50):
        a = rng.zipf(1.7, rng.integers(1, 5000)).clip(max=200)
        v, c = np.unique(a, return_counts=True)
        for q in (0.0, 0.5, 0.99, 1.0): assert quantile_from_counts(v, c, q) == np.quantile(a, q)

@pytest.mark.parametrize('end', [0, -1])
def test_median_bracket_that_misses(monkeypatch, end):
    "A sample that brackets the wrong values (each partition's smallest or largest): the bracket widens to the middle."
    rng = np.random.default_rng(4)
    df = pd.DataFrame({'x': _wide(rng, 9_999, np.float32)})
    ddf = dd.from_pandas(df, npartitions=5)
    monkeypatch.setattr(S, '_sample', lambda part, cols, k, seed: {c: (len(part[c]), np.sort(part[c].to_numpy())[[end]]
                                                                       .astype('f8')) for c in cols})
    passes = []
    orig = S._bracket
    monkeypatch.setattr(S, '_bracket', lambda *a: passes.append(1) or orig(*a))
    assert exact_median(ddf.to_delayed(), ['x'], dict(df.dtypes))['x'] == df['x'].median()
    assert len(passes) == 2 * ddf.npartitions   # the bracket missed once, then held

def test_replace_columns_keeps_order_and_projection():
    """A proc's output in place of the columns it read, the new ones last (as pandas' `assign` places them); a pass that
    selects other columns does not run the proc, and a frame whose columns are all replaced keeps its rows."""
    df = pd.DataFrame({'a': list('xyzw') * 5, 'b': np.arange(20.), 'c': np.arange(20)})
    ddf = dd.from_pandas(df, npartitions=3).clear_divisions()   # unknown divisions, as the scan's cache has
    calls = []
    def upper(p):
        calls.append(len(p))
        return p[['a']].assign(a=p.a.str.upper(), new=len(p))
    got = S.replace_columns(ddf, ddf[['a']].map_partitions(upper, meta=upper(ddf._meta)))
    calls.clear()
    pd.testing.assert_frame_equal(got[['b', 'c']].compute(), df[['b', 'c']])
    assert calls == []   # the selection went through to the source
    parts = [ddf.get_partition(i).compute() for i in range(ddf.npartitions)]
    pd.testing.assert_frame_equal(got.compute(), pd.concat([p.assign(**upper(p)) for p in parts]))
    only = ddf[['a']]
    got = S.replace_columns(only, only.map_partitions(upper, meta=upper(only._meta)), ['a'])
    pd.testing.assert_frame_equal(got.compute(), pd.concat([upper(p)[['a']] for p in parts]))

@pytest.mark.parametrize('sample', [1, 3, 10_000])
def test_median_from_the_scans_row_samples(sample):
    """The scan samples a column at random training rows and drops the missing values: a column nearly all missing
    gives some partitions' samples no value, or all of them (the bracket is then every value). pandas' median still."""
    from fastai_gpu_tabular.dask.scan import _cont_facts
    rng = np.random.default_rng(5)
    n = 20_000
    df = pd.DataFrame({'x': _wide(rng, n, np.float32), 'y': rng.standard_normal(n)})
    df.loc[rng.random(n) < 0.999, 'x'] = np.nan
    df.loc[rng.random(n) < 0.3, 'y'] = np.nan
    parts = [p.compute() for p in dd.from_pandas(df, npartitions=4).partitions]
    facts = {c: [_cont_facts(p[c].to_numpy(), np.ones(len(p), bool), np.arange(len(p)), sample, i)
                 for i,p in enumerate(parts)] for c in df.columns}
    for c,fs in facts.items():   # the counts are of all non-missing values, whatever the sample holds
        assert [f['sample'][0] for f in fs] == [int(p[c].notna().sum()) for p in parts]
        assert sum(f['nan_all'] for f in fs) == df[c].isna().sum()
    if sample == 1: assert not any(len(f['sample'][1]) for f in facts['x'])   # the bracket of every value
    samples = {c: tuple(f['sample'] for f in fs) for c,fs in facts.items()}
    med = exact_median(parts, list(df.columns), dict(df.dtypes), samples=samples)
    for c in df.columns: assert med[c] == df[c].median() and type(med[c]) is type(df[c].median()), c
