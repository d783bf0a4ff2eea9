"""`JoinGroupby` against pandas' own groupby of the training rows, on Adult: per category the count, mean and std
(ddof 0) of a cont, joined back; missing categories are one, unseen ones get the statistic of all training rows."""
import numpy as np
import pandas as pd
import pytest
from fastai.data.transforms import Normalize, RandomSplitter
from fastai.tabular.all import Categorify, FillMissing
from fastai_gpu_tabular.all import JoinGroupby, TabularGPU
from fastai_gpu_tabular.datasets import load_adult, load_flights

def _want(train, rows, n, x):
    "pandas: the training rows' groupby, looked up for `rows` (unseen: the statistic of all training rows)."
    by = train.groupby(train[n].astype(object).fillna('<missing>'))[x]
    g = pd.DataFrame({'count': by.count(), 'mean': by.mean(), 'std': by.std(ddof=0)})
    keys = rows[n].astype(object).fillna('<missing>')
    res = g.reindex(keys).set_axis(rows.index)
    whole = {'count': 0., 'mean': train[x].mean(), 'std': train[x].std(ddof=0)}
    return {s: res[s].fillna(whole[s]).to_numpy('f8') for s in ('count', 'mean', 'std')}

def test_adult_is_pandas_groupby():
    df = load_adult().assign(age=lambda d: d['age'].astype('float64'))
    splits = RandomSplitter(seed=0)(range(len(df)))
    test = df.iloc[splits[1]].copy()
    test.loc[test.index[::9], 'occupation'] = 'Not-an-occupation'
    jg = JoinGroupby(['occupation', 'education'], ['age', 'hours-per-week'])
    to = TabularGPU(df, procs=[jg, Categorify], cat_names=['occupation', 'education'],
                    cont_names=['age', 'hours-per-week'], y_names='income', splits=splits)
    assert list(to.cont_names) == ['age', 'hours-per-week', *jg.made_names] and len(jg.made_names) == 12
    new = to.new(test)
    new.process()
    train = df.iloc[splits[0]]
    for n in ('occupation', 'education'):
        for x in ('age', 'hours-per-week'):
            for rows,got in ((train, to.items.iloc[:len(train)]), (test, new.items)):
                want = _want(train, rows, n, x)
                for s in ('count', 'mean', 'std'):
                    # the same groupby of the same rows: pandas' own arithmetic
                    np.testing.assert_array_equal(got[f'{n}_{x}_{s}'].to_numpy(), want[s], err_msg=f'{n} {x} {s}')

def test_missing_values_and_normalize():
    "NaN in the cont is skipped (FillMissing runs after it), the new columns are normalised; errors name columns."
    df = load_flights(nrows=20000)
    jg = JoinGroupby('carrier', 'dep_delay', stats=('mean',))
    to = TabularGPU(df, procs=[FillMissing, Normalize, Categorify, jg], cat_names=['carrier'],
                    cont_names=['dep_delay'], y_names='distance')
    want = df['carrier'].map(df.groupby('carrier')['dep_delay'].mean())
    c = 'carrier_dep_delay_mean'
    # Normalize there and back: four roundings, each within u of a value no larger than |x| + |mean|
    np.testing.assert_allclose(to.items[c] * to.stds[c] + to.means[c], want, rtol=0,
                               atol=4 * np.finfo('f8').eps * (want.abs().max() + abs(to.means[c])))
    with pytest.raises(KeyError, match='nope'):
        TabularGPU(df, procs=[JoinGroupby('carrier', 'nope')], cat_names=['carrier'], y_names='distance')
    with pytest.raises(ValueError, match='median'): JoinGroupby('carrier', 'dep_delay', stats=('median',))

def test_not_on_dask_nor_onnx():
    "Both say so, naming the proc."
    dd = pytest.importorskip('dask.dataframe')
    df = load_adult().iloc[:2000]
    with pytest.raises(TypeError, match='JoinGroupby'):
        TabularGPU(dd.from_pandas(df, npartitions=2), procs=[JoinGroupby('education', 'age')], cat_names=['education'],
                   cont_names=['age'], y_names='income')
