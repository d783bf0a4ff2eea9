"The fastai workflow a user runs, line by line, with TabularGPU in place of TabularPandas."
import ast
import os
import subprocess
import sys
import textwrap
import numpy as np
import pandas as pd
import pytest
import torch
from fastai.tabular import core as fatc
from fastai.tabular.all import (
    Categorify,
    ClassificationInterpretation,
    FillMissing,
    Lamb,
    Normalize,
    RandomSplitter,
    TabDataLoader,
    TabularDataLoaders,
    TabularPandas,
    accuracy,
    load_learner,
    range_of,
    rmse,
    set_seed,
    tabular_learner,
)
from helpers.parity import assert_same_batches, assert_same_processing
import fastai_gpu_tabular.core as fgc
from fastai_gpu_tabular.all import BatchDataLoader, BatchDataLoaders, TabularGPU
from fastai_gpu_tabular.backend import to_backend
from fastai_gpu_tabular.datasets import load_flights

CATS = ['carrier', 'tailnum', 'origin', 'dest', 'month', 'hour']
CONTS = ['dep_time', 'sched_dep_time', 'dep_delay', 'arr_time', 'sched_arr_time', 'distance', 'day']

@pytest.fixture(scope='module')
def flights():
    "40k real flights, labelled late/on_time (rows that arrived), with NaN in dep/arr times, and unseen carriers later."
    df = load_flights(nrows=40_000)
    df = df[df.arr_delay.notna()].reset_index(drop=True)
    df['late'] = np.where(df.arr_delay > 15, 'late', 'on_time')
    df.loc[df.sample(frac=0.05, random_state=0).index, 'arr_time'] = np.nan   # some NaN left in a cont
    return df

def _tabular(cls, flights, seed=0):
    "The snippet's TabularGPU, or fastai's TabularPandas built with the same arguments (the reference)."
    return cls(flights.copy() if cls is TabularPandas else flights, procs=[Categorify, FillMissing, Normalize],
               cat_names=list(CATS), cont_names=CONTS, y_names='late',
               splits=RandomSplitter(seed=seed)(range_of(flights)))

@pytest.fixture(scope='module')
def trained(flights, tmp_path_factory):
    "The workflow snippet, on pandas (module-scoped: training once keeps the file fast)."
    set_seed(0)
    to = _tabular(TabularGPU, flights)
    dls = to.dataloaders(bs=1024)
    learn = tabular_learner(dls, layers=[200, 100], metrics=accuracy, opt_func=Lamb,
                            path=tmp_path_factory.mktemp('learn'))
    with learn.no_bar(), learn.no_logging():
        learn.lr_find(show_plot=False)
        learn.fit_one_cycle(3, 3e-2)
    return learn

def _capture(monkeypatch, module):
    shown = []
    monkeypatch.setattr(module, 'display_df', lambda df: shown.append(df))
    return shown

def test_types_and_learner_inputs(trained):
    dls = trained.dls
    assert isinstance(dls, BatchDataLoaders) and isinstance(dls.train, BatchDataLoader)
    assert isinstance(dls.train, TabDataLoader)
    assert isinstance(dls.device, torch.device)
    assert dls.train.drop_last and dls.train.shuffle and not dls.valid.shuffle
    assert dls.n_inp == 2 and dls.c == 2 and list(dls.cont_names) == CONTS
    assert [e.num_embeddings for e in trained.model.embeds] == [len(dls.classes[n]) for n in dls.cat_names]
    x_cat, x_cont, y = dls.one_batch()
    assert x_cat.dtype in (torch.int32, torch.int64) and x_cont.dtype == torch.float32 and y.dtype == torch.int64
    assert x_cat.shape == (1024, len(dls.cat_names)) and x_cont.shape == (1024, len(CONTS)) and y.shape == (1024, 1)

def test_training_learns(trained):
    "Three epochs of LAMB beat the majority class on the validation rows (real data: stock fastai gets ~0.92 vs 0.80)."
    preds, targs = trained.get_preds()
    majority = max(targs.float().mean().item(), 1 - targs.float().mean().item())
    assert accuracy(preds, targs).item() > majority + 0.05
    assert trained.recorder.values[-1][0] < trained.recorder.values[0][0] + 0.05   # valid loss did not blow up

def test_get_preds_matches_per_row_forward(trained):
    "get_preds is in row order: each prediction equals a forward pass on that row alone."
    learn = trained
    preds, targs = learn.get_preds()
    valid = learn.dls.valid_ds
    cats, conts, ys = valid.packed(learn.dls.device)    # where the model is (cuda on a GPU machine)
    learn.model.eval()
    rows = np.random.default_rng(0).choice(len(valid), 25, replace=False)
    with torch.no_grad():
        for i in rows:
            out = torch.softmax(learn.model(cats[i:i+1].long(), conts[i:i+1]), dim=-1).cpu()   # get_preds: on the CPU
            torch.testing.assert_close(out[0], preds[i], atol=1e-5, rtol=1e-4)
            assert targs[i].item() == ys[i].item()
    # reorder=True puts a shuffled loader's predictions back in row order too
    shuffled = learn.dls.valid.new(shuffle=True)
    p2, t2 = learn.get_preds(dl=shuffled)
    torch.testing.assert_close(p2, preds)
    assert torch.equal(t2, targs)

def test_show_batch_decodes(trained, flights, monkeypatch):
    shown = _capture(monkeypatch, fgc)
    trained.dls.show_batch(max_n=20)
    df = shown[-1]
    assert len(df) == 10 or len(df) == 20
    # category names, not codes; de-normalised values in the raw range; the label decoded
    assert set(df.carrier) <= set(flights.carrier) and df.carrier.map(type).eq(str).all()
    assert set(df.late) <= {'late', 'on_time'}
    assert df.distance.between(flights.distance.min() - 1, flights.distance.max() + 1).all()
    assert (df.distance.sub(df.distance.round()).abs() < 1e-2).all()   # integers again, up to float32 rounding
    assert set(df.arr_time_na) <= {True, False}

def test_show_results_decodes(trained, monkeypatch):
    shown = _capture(monkeypatch, fgc)
    trained.show_results(max_n=5)
    df = shown[-1]
    assert {'late', 'late_pred'} <= set(df.columns) and set(df.late_pred) <= {'late', 'on_time'}
    assert df.origin.isin(['EWR', 'JFK', 'LGA']).all()

def test_predict_row(trained, flights):
    row, clas, probs = trained.predict(flights.iloc[3])
    assert isinstance(row, TabularGPU) and clas.item() in (0, 1) and probs.shape == (2,)
    assert abs(probs.sum().item() - 1) < 1e-5
    # the same row through test_dl + get_preds gives the same probabilities
    p, _ = trained.get_preds(dl=trained.dls.test_dl(flights.iloc[3:4]))
    torch.testing.assert_close(p[0], probs, atol=1e-5, rtol=1e-4)
    decoded = row.decode().items
    assert decoded.carrier.iloc[0] == flights.carrier.iloc[3]

def test_test_dl_unseen_and_unlabelled(trained, flights):
    new_df = flights.iloc[:500].copy()
    new_df.loc[:49, 'carrier'] = 'ZZ'          # never seen in training
    new_df.loc[50:99, 'tailnum'] = None
    dl = trained.dls.test_dl(new_df)
    assert (dl.dataset.items.carrier.iloc[:50] == 0).all()     # #na#
    preds, targs = trained.get_preds(dl=dl)
    assert preds.shape == (500, 2) and torch.isfinite(preds).all() and targs.shape == (500, 1)
    # without the label column the loader yields (cats, conts) only
    dl2 = trained.dls.test_dl(new_df.drop(columns=['late']))
    b = dl2.one_batch()
    assert len(b) == 2
    p2, t2 = trained.get_preds(dl=dl2)
    assert t2 is None
    torch.testing.assert_close(p2, preds)
    assert new_df.carrier.iloc[0] == 'ZZ'        # the caller's frame is untouched

def test_test_dl_cudf(trained, flights, backend):
    """test_dl takes the frame of either backend, and the model's predictions on it are those on the rows fastai's own
    test_dl (TabularPandas built with the same arguments, its TabDataLoader) makes of the same frame."""
    new_df = flights.iloc[500:1500].copy()
    new_df.loc[new_df.index[:20], 'carrier'] = 'ZZ'   # unseen: #na# on both sides
    ref_dl = _tabular(TabularPandas, flights).dataloaders(bs=1024).test_dl(new_df)
    p_ref, t_ref = trained.get_preds(dl=ref_dl)
    p_b, t_b = trained.get_preds(dl=trained.dls.test_dl(to_backend(new_df, backend)))
    torch.testing.assert_close(p_b, p_ref, atol=1e-5, rtol=1e-4)
    assert torch.equal(t_b.view(-1), t_ref.view(-1).to(t_b.dtype))

def load_elsewhere(fname, df, tmp_path):
    """Load the exported learner and predict `df` in a fresh Python with CUDA hidden and cuDF/CuPy/RMM unimportable
    (as on a machine without them); returns the predictions, the loader's type and device, and every module the
    pickle imported from."""
    data = tmp_path/'test.parquet'
    df.to_parquet(data)
    script = textwrap.dedent(f"""
        import pickle, sys
        for m in ('cudf', 'cupy', 'rmm', 'dask_cudf'): sys.modules[m] = None   # `import cudf` raises ImportError
        import pandas as pd, torch
        from fastai.tabular.all import load_learner
        seen = set()
        class Unpickler(pickle.Unpickler):
            def find_class(self, module, name):
                seen.add(module.split('.')[0])
                return super().find_class(module, name)
        class recording_pickle: Unpickler, load = Unpickler, pickle.load
        learn = load_learner({str(fname)!r}, cpu=True, pickle_module=recording_pickle)
        preds, _ = learn.get_preds(dl=learn.dls.test_dl(pd.read_parquet({str(data)!r})))
        torch.save(preds, {str(tmp_path/'preds.pt')!r})
        print(type(learn.dls.train).__name__, learn.dls.device, sorted(seen))
    """)
    env = {**os.environ, 'CUDA_VISIBLE_DEVICES': '', 'FGT_DISABLE_CUDF': '1'}
    res = subprocess.run([sys.executable, '-c', script], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    loader, device, mods = res.stdout.strip().splitlines()[-1].split(' ', 2)
    return torch.load(tmp_path/'preds.pt'), loader, device, set(ast.literal_eval(mods))

def test_export_load_learner_fresh_cpu_process(trained, flights, tmp_path):
    "The exported learner loads and predicts in a fresh Python without CUDA or cuDF, matching this process."
    trained.export(tmp_path/'model.pkl')
    expected, _ = trained.get_preds(dl=trained.dls.test_dl(flights.iloc[:300]))
    preds, loader, device, mods = load_elsewhere(tmp_path/'model.pkl', flights.iloc[:300], tmp_path)
    assert (loader, device) == ('BatchDataLoader', 'cpu') and {'fastai', 'fastai_gpu_tabular'} <= mods
    assert not {'cudf', 'cupy', 'rmm'} & mods
    torch.testing.assert_close(preds, expected, atol=1e-5, rtol=1e-4)

@pytest.mark.cudf
def test_export_from_cudf_loads_without_cudf(flights, tmp_path):
    "A learner built and trained on a cuDF frame exports state that loads where cuDF and CUDA are absent."
    set_seed(0)
    learn = tabular_learner(_tabular(TabularGPU, to_backend(flights, 'cudf')).dataloaders(bs=2048), layers=[50],
                            opt_func=Lamb, path=tmp_path)
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(1, 1e-2)
    learn.export(tmp_path/'cudf_model.pkl')
    expected, _ = learn.get_preds(dl=learn.dls.test_dl(to_backend(flights.iloc[:300], 'cudf')))
    preds, loader, device, mods = load_elsewhere(tmp_path/'cudf_model.pkl', flights.iloc[:300], tmp_path)
    assert (loader, device) == ('BatchDataLoader', 'cpu') and not {'cudf', 'cupy', 'rmm'} & mods
    torch.testing.assert_close(preds, expected, atol=1e-5, rtol=1e-4)

def test_workflow_on_backend(flights, backend, tmp_path):
    "The whole snippet, short, on each backend: cuDF in, the same learned state and a working learner out."
    to = _tabular(TabularGPU, to_backend(flights, backend), seed=1)
    ref = _tabular(TabularPandas, flights, seed=1)   # fastai's: classes, codes, na_dict, means, stds, y
    assert_same_processing(ref, to, exact=backend == 'pandas')
    dls = to.dataloaders(bs=2048)
    learn = tabular_learner(dls, layers=[50], metrics=accuracy, opt_func=Lamb, path=tmp_path)
    with learn.no_bar(), learn.no_logging():
        learn.fit_one_cycle(1, 1e-2)
        preds, targs = learn.get_preds()
    assert preds.shape == (len(dls.valid_ds), 2) and torch.isfinite(preds).all()
    learn.export(tmp_path/'m.pkl')
    learn2 = load_learner(tmp_path/'m.pkl', cpu=True)
    p2, _ = learn2.get_preds(dl=learn2.dls.test_dl(flights.iloc[:100]))
    p1, _ = learn.get_preds(dl=learn.dls.test_dl(flights.iloc[:100]))
    torch.testing.assert_close(p2, p1.cpu(), atol=1e-5, rtol=1e-4)

def test_interpretation_and_summary(trained):
    interp = ClassificationInterpretation.from_learner(trained)
    cm = interp.confusion_matrix()
    assert cm.sum() == len(trained.dls.valid_ds)
    losses, idx, items = interp.top_losses(3, items=True)
    assert len(items) == 3 and set(CATS) <= set(items.columns)   # the frame's column order, as fastai's
    assert 'TabularModel' in str(trained.summary())

def test_regression_and_from_df(flights, tmp_path, monkeypatch):
    """BatchDataLoaders.from_df gives what TabularDataLoaders.from_df gives (the random split too); a float y trains.
    On every pandas line: fastai 2.8.12's TabDataLoader stops on pandas 3.1 here, as its `tensor(to.conts)` reads
    `df[cols].values`, a view with negative strides there, which torch refuses: it gets the same values, copied."""
    df = flights.drop(columns=['late'])
    kw = dict(path=tmp_path, procs=[Categorify, FillMissing, Normalize], cont_names=['distance', 'sched_dep_time'],
              y_names='arr_delay', bs=2048)
    set_seed(5); dls = BatchDataLoaders.from_df(df, cat_names=list(CATS), **kw)
    assert type(dls.train) is BatchDataLoader and dls.c == 1 and dls.one_batch()[2].dtype == torch.float32
    learn = tabular_learner(dls, layers=[50], metrics=rmse)
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(1, 1e-2)
    assert np.isfinite(learn.recorder.values[-1][0])
    tensor = fatc.tensor
    monkeypatch.setattr(fatc, 'tensor', lambda x, *a, **k: tensor(x.to_numpy(copy=True) if isinstance(x, pd.DataFrame)
                                                                   else x, *a, **k))
    set_seed(5); ref = TabularDataLoaders.from_df(df.copy(), cat_names=list(CATS), **kw)
    for ds_ref, ds in ((ref.train_ds, dls.train_ds), (ref.valid_ds, dls.valid_ds)): assert_same_processing(ds_ref, ds)
    assert_same_batches(ref.valid, dls.valid)
