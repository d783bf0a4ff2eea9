"RecSys model pieces on MovieLens: embedding bags, sparse tables with the combined optimizer, the fused lookup."
import numpy as np, pandas as pd, pytest, torch
from fastai.tabular.all import (Adam, FillMissing, Normalize, RandomSplitter, TabularModel, load_learner, range_of,
                                set_seed)
from fastai_gpu_tabular.all import (Categorify, Lamb, TabularGPU, TabularModelGPU, sparse_adam_step, sparse_columns,
                                    sparse_opt, tabular_learner)
from fastai_gpu_tabular.data import load_movielens

@pytest.fixture(scope='module')
def dls():
    "MovieLens latest-small: userId and movieId single-hot, genres multi-hot, the target is rating > 3."
    torch.set_num_threads(1)   # a shared 2-core machine: threads fight more than they help here
    df = load_movielens()
    df['liked'] = np.where(df.rating > 3, 'yes', 'no')
    to = TabularGPU(df, procs=[Categorify, FillMissing, Normalize], cat_names=['userId', 'movieId', 'genres'],
                    cont_names=['year'], y_names='liked', multi_hot={'genres': '|'},
                    splits=RandomSplitter(seed=0)(range_of(df)))
    return to.dataloaders(bs=2048)

def fit(dls, epochs=3, lr=1e-2, seed=0, **kwargs):
    set_seed(seed)
    learn = tabular_learner(dls, layers=[64, 32], **kwargs)
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(epochs, lr)
    return learn

def test_sparse_adam_step_is_torch_sparse_adam():
    torch.manual_seed(0)
    w = torch.randn(500, 8)
    ref = torch.nn.Embedding.from_pretrained(w.clone(), freeze=False, sparse=True)
    ours = torch.nn.Embedding.from_pretrained(w.clone(), freeze=False, sparse=True)
    opt, state = torch.optim.SparseAdam(ref.parameters(), lr=0.02, betas=(0.8, 0.95), eps=1e-6), {}
    for i in range(40):
        idx = torch.randint(0, 50 + 5 * i, (64,))
        for e in (ref, ours): e.weight.grad = None; (e(idx) ** 3).sum().backward()
        opt.step()
        sparse_adam_step(ours.weight, ours.weight.grad, state, 0.02, 0.8, 0.95, 1e-6)
    torch.testing.assert_close(ours.weight, ref.weight, atol=1e-6, rtol=1e-5)
    # moments are kept for the rows touched so far, not the table (storage at most doubles that)
    touched = (state['slot'] >= 0).sum().item()
    assert touched == state['n'] < 500 and state['n'] <= len(state['exp_avg']) <= 1.5 * state['n'] + 1
    assert sorted(state['slot'][state['slot'] >= 0].tolist()) == list(range(state['n']))

def test_sparse_columns():
    class To: cat_names, classes = ['a', 'b', 'c'], {'a': list(range(5)), 'b': list(range(5000)), 'c': list(range(50))}
    assert sparse_columns(To, 100) == [1] and sparse_columns(To, ['c', 'a']) == [0, 2] and sparse_columns(To, True) == [0, 1, 2]
    assert sparse_columns(To, None) == []
    with pytest.raises(ValueError, match=r"sparse names \['zz'\]"): sparse_columns(To, ['zz'])

def test_sparse_and_dense_reach_comparable_loss(dls):
    "Sparse tables (lazy Adam rows) train as well as dense ones on MovieLens: validation loss within 3%."
    dense = fit(dls)
    sparse = fit(dls, sparse=['userId', 'movieId'])
    emb = sparse.model.embeds
    assert emb[0].sparse and emb[1].sparse and not emb[2].sparse
    assert type(sparse.opt).__name__ == 'SparseOptimizer'
    d, s = dense.recorder.values[-1][0], sparse.recorder.values[-1][0]
    assert s < 0.69 and d < 0.69          # both learned something (chance is ln 2)
    assert abs(s - d) / d < 0.03, (s, d)
    # the sparse state is the touched rows only, far smaller than Adam's two dense moments
    st = sparse.opt.state[emb[1].weight]
    assert st['n'] == (st['slot'] >= 0).sum() and len(st['exp_avg']) <= min(1.5 * st['n'] + 1, emb[1].weight.shape[0])

def test_sparse_with_lamb_and_lr_mult(dls):
    "Dense params step with our LAMB; `sparse_lr_mult=0` freezes the sparse tables while the rest trains."
    learn = tabular_learner(dls, layers=[32], sparse=['movieId'], opt_func=Lamb, sparse_lr_mult=0.)
    movies, users = (learn.model.embeds[i].weight.detach().clone() for i in (1, 0))
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(1, 1e-2)
    assert type(learn.opt).__name__ == 'SparseLambOptimizer'
    assert torch.equal(learn.model.embeds[1].weight, movies)          # sparse, lr x 0
    assert not torch.equal(learn.model.embeds[0].weight, users)       # dense, stepped by LAMB
    assert learn.opt.state[learn.model.embeds[1].weight]['step'] == len(dls.train)

def test_save_load_keeps_combined_state(dls, tmp_path):
    learn = fit(dls, epochs=1, sparse=['userId', 'movieId'], path=tmp_path)
    learn.save('m', with_opt=True)
    learn2 = tabular_learner(dls, layers=[64, 32], sparse=['userId', 'movieId'], path=tmp_path)
    learn2.create_opt()
    learn2.load('m', with_opt=True)
    for p1, p2 in zip(learn.model.parameters(), learn2.model.parameters()):
        assert torch.equal(p1, p2)
        s1, s2 = learn.opt.state[p1], learn2.opt.state[p2]
        assert s1.keys() == s2.keys()
        for k in s1:
            if isinstance(s1[k], torch.Tensor): assert torch.equal(s1[k], s2[k]), k
            else: assert s1[k] == s2[k], k
    with learn2.no_bar(), learn2.no_logging(): learn2.fit_one_cycle(1, 1e-3)   # and training goes on from there

def test_fused_equals_unfused_and_exports(dls, tmp_path):
    "The fused lookup computes what per-column tables compute; its weights export per column."
    set_seed(0)
    fused = tabular_learner(dls, layers=[32], emb_szs=16, fused=True)
    plain = tabular_learner(dls, layers=[32], emb_szs=16)
    assert len(fused.model.fused.weights) == 1            # one width: one table, one lookup kernel
    plain.model.load_state_dict(fused.model.unfused_state_dict())
    b = dls.valid.one_batch()
    fused.model.eval(); plain.model.eval()
    torch.testing.assert_close(fused.model(*b[:2]), plain.model(*b[:2]))
    with fused.no_bar(), fused.no_logging(): fused.fit_one_cycle(1, 1e-2)
    assert fused.recorder.values[-1][0] < 0.69
    # mixed widths: one table per width, outputs still in column order
    mixed = tabular_learner(dls, layers=[32], fused=True)
    plain2 = tabular_learner(dls, layers=[32])
    plain2.model.load_state_dict(mixed.model.unfused_state_dict())
    mixed.model.eval(); plain2.model.eval()
    torch.testing.assert_close(mixed.model(*b[:2]), plain2.model(*b[:2]))

def test_fused_sparse_trains(dls):
    "A fused table can be sparse as a whole: its rows get the lazy Adam update, the layers the dense optimizer."
    learn = fit(dls, epochs=1, emb_szs=16, fused=True, sparse=True)
    w = learn.model.fused.weights[0]
    st = learn.opt.state[w]
    assert learn.model.fused.sparse and 0 < st['n'] < w.shape[0] and st['step'] == len(dls.train)
    assert learn.recorder.values[-1][0] < 0.69

def test_multi_hot_predict_and_export(dls, tmp_path):
    learn = fit(dls, epochs=1, path=tmp_path)
    row = load_movielens().iloc[7]
    dec, clas, probs = learn.predict(row)
    assert dec.decode().items.genres.iloc[0] == row.genres.split('|')
    learn.export(tmp_path/'ml.pkl')
    learn2 = load_learner(tmp_path/'ml.pkl', cpu=True)
    p1, _ = learn.get_preds(dl=learn.dls.test_dl(load_movielens().iloc[:200]))
    p2, _ = learn2.get_preds(dl=learn2.dls.test_dl(load_movielens().iloc[:200]))
    torch.testing.assert_close(p1, p2)

def test_plain_model_is_fastais(dls):
    "Without bags, sparse or fused tables the model is fastai's TabularModel: same parameter names and outputs."
    emb = [(10, 4), (7, 3)]
    ours, ref = TabularModelGPU(emb, 2, 2, [8]), TabularModel(emb, 2, 2, [8])
    ref.load_state_dict(ours.state_dict())
    x = torch.tensor([[1, 2], [3, 4], [9, 6]]), torch.randn(3, 2)
    ours.eval(); ref.eval()
    torch.testing.assert_close(ours(*x), ref(*x))
