"RecSys model pieces on MovieLens: embedding bags, sparse tables with the combined optimizer, the fused lookup."
import warnings
import numpy as np
import pytest
import torch
from fastai.tabular.all import (
    Callback,
    CancelFitException,
    FillMissing,
    MixedPrecision,
    Normalize,
    RandomSplitter,
    ShortEpochCallback,
    TabularModel,
    load_learner,
    range_of,
    set_seed,
)
from fastai_gpu_tabular.all import Categorify, Lamb, TabularGPU, TabularModelGPU, tabular_learner
from fastai_gpu_tabular.datasets import load_movielens
from fastai_gpu_tabular.rows.pack import cat_widths
from fastai_gpu_tabular.train.learner import sparse_columns
from fastai_gpu_tabular.train.model import bag_lookup
from fastai_gpu_tabular.train.optimizer import sparse_adam_step

@pytest.fixture(scope='module')
def dls():
    "MovieLens latest-small: userId and movieId single-hot, genres multi-hot, the target is rating > 3."
    n = torch.get_num_threads()
    torch.set_num_threads(1)   # a shared 2-core machine: threads fight more than they help here (restored after)
    df = load_movielens()
    df['liked'] = np.where(df.rating > 3, 'yes', 'no')
    to = TabularGPU(df, procs=[Categorify, FillMissing, Normalize], cat_names=['userId', 'movieId', 'genres'],
                    cont_names=['year'], y_names='liked', multi_hot={'genres': '|'},
                    splits=RandomSplitter(seed=0)(range_of(df)))
    yield to.dataloaders(bs=2048)
    torch.set_num_threads(n)

@pytest.fixture(scope='module')
def prior(dls):
    "The validation log loss of predicting the training rows' share of 'yes' for every row: what a model must beat."
    y_train, y_valid = (ds.packed('cpu')[2].double().view(-1) for ds in (dls.train_ds, dls.valid_ds))
    p = y_train.mean()
    return -(y_valid * p.log() + (1 - y_valid) * (1 - p).log()).mean().item()

# The models here beat the prior by 0.06 (1 epoch) to 0.2 (3 epochs), seeds (and so machines, whose rounding sends
# training down other paths alike) moving that by about 0.005; one that learned nothing does not beat it at all.
MARGIN = 0.03

def fit(dls, epochs=3, lr=1e-2, seed=0, **kwargs):
    set_seed(seed)
    learn = tabular_learner(dls, layers=[64, 32], **kwargs)
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(epochs, lr)
    return learn

def adam_drift(hypers, w) -> float:
    """How far two implementations of Adam may end apart in float32, stepped on the same grads from the same weights
    (`w`: them before and after) with `hypers` (lr, mom, sqr_mom) at each step. The grads being the same, rounding does
    not feed back: each step adds its own, a few float32 ops in each one's order (16 roundings of eps32 at most)
    relative to Adam's normalized step lr*m/(sqrt(v)+eps), itself at most
    lr*(1-mom)/sqrt(1-sqr_mom)/(1-mom/sqrt(sqr_mom)) in size, and the weight's own rounding, eps32*|w|. (Stepping
    on its own grads, each would feed its rounding back, amplified by up to lr/eps a step where grads are tiny: a bound
    would then hold only on the CPU it was seen on.)"""
    eps32, big = torch.finfo(torch.float32).eps, w.abs().max().item()
    return sum(eps32 * (16 * lr * (1 - mom) / (1 - sqr) ** 0.5 / (1 - mom / sqr ** 0.5) + big)
               for lr, mom, sqr in hypers)

def test_sparse_adam_step_is_torch_sparse_adam():
    torch.manual_seed(0)
    w = torch.randn(500, 8)
    ref = torch.nn.Embedding.from_pretrained(w.clone(), freeze=False, sparse=True)
    ours = torch.nn.Embedding.from_pretrained(w.clone(), freeze=False, sparse=True)
    opt, state = torch.optim.SparseAdam(ref.parameters(), lr=0.02, betas=(0.8, 0.95), eps=1e-6), {}
    for i in range(40):
        idx, c = torch.randint(0, 50 + 5 * i, (64,)), torch.randn(64, 8)   # rows repeat in a batch and across batches
        for e in (ref, ours): e.weight.grad = None; (e(idx) * c).sum().backward()   # the same grads for both
        opt.step()
        sparse_adam_step(ours.weight, ours.weight.grad, state, 0.02, 0.8, 0.95, 1e-6)
    tol = adam_drift([(0.02, 0.8, 0.95)] * 40, torch.cat([w, ref.weight.detach()]))
    torch.testing.assert_close(ours.weight, ref.weight, atol=tol, rtol=0)
    # moments are kept for the rows touched so far, not the table (storage at most doubles that)
    touched = (state['slot'] >= 0).sum().item()
    assert touched == state['n'] < 500 and state['n'] <= len(state['exp_avg']) <= 1.5 * state['n'] + 1
    assert sorted(state['slot'][state['slot'] >= 0].tolist()) == list(range(state['n']))

def test_sparse_columns():
    class To: cat_names, classes = ['a', 'b', 'c'], {'a': list(range(5)), 'b': list(range(5000)), 'c': list(range(50))}
    assert sparse_columns(To, 100) == [1] and sparse_columns(To, ['c', 'a']) == [0, 2]
    assert sparse_columns(To, True) == [0, 1, 2]
    assert sparse_columns(To, None) == []
    with pytest.raises(ValueError, match=r"sparse names \['zz'\]"): sparse_columns(To, ['zz'])

def test_sparse_and_dense_reach_comparable_loss(dls, prior):
    "Sparse tables (lazy Adam rows) train as well as dense ones on MovieLens: validation loss within 3%."
    dense = fit(dls)
    sparse = fit(dls, sparse=['userId', 'movieId'])
    emb = sparse.model.embeds
    assert emb[0].sparse and emb[1].sparse and not emb[2].sparse
    assert type(sparse.opt).__name__ == 'SparseOptimizer'
    d, s = dense.recorder.values[-1][0], sparse.recorder.values[-1][0]
    assert s < prior - MARGIN and d < prior - MARGIN, (s, d, prior)   # both learned more than the class prior
    # and sparse learns most of what dense learns beyond it: 95-97% over seeds (machines move it as seeds do, by about
    # 1%); with its two tables never stepped (sparse_lr_mult=0) the model learns 49% of it
    assert prior - s > 0.8 * (prior - d), (s, d, prior)
    # the sparse state is the touched rows only, far smaller than Adam's two dense moments
    st = sparse.opt.state[emb[1].weight]
    assert st['n'] == (st['slot'] >= 0).sum() and len(st['exp_avg']) <= min(1.5 * st['n'] + 1, emb[1].weight.shape[0])

def test_sparse_with_lamb_and_lr_mult(dls):
    "Dense params step with our LAMB; `sparse_lr_mult=0` freezes the sparse tables while the rest trains."
    learn = tabular_learner(dls, layers=[32], sparse=['movieId'], opt_func=Lamb, sparse_lr_mult=0.)
    movies, users = (learn.model.embeds[i].weight.detach().cpu().clone() for i in (1, 0))
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(1, 1e-2)
    assert type(learn.opt).__name__ == 'SparseLambOptimizer'
    assert torch.equal(learn.model.embeds[1].weight.cpu(), movies)          # sparse, lr x 0
    assert not torch.equal(learn.model.embeds[0].weight.cpu(), users)       # dense, stepped by LAMB
    assert learn.opt.state[learn.model.embeds[1].weight]['step'] == len(dls.train)

@pytest.mark.parametrize('tables', ['dense', 'sparse'])
def test_save_load_keeps_optimizer_state(dls, tmp_path, tables):
    """`learn.save(with_opt=True)` and `load` into a new learner: the weights and every optimizer state (the combined
    optimizer's too, with sparse tables) as fitted. The fitted learner sits on the loaders' device, the new one's model
    on the CPU until it fits: compared on the host."""
    sparse = ['userId', 'movieId'] if tables == 'sparse' else None
    learn = fit(dls, epochs=1, sparse=sparse, path=tmp_path)
    learn.save('m', with_opt=True)
    learn2 = tabular_learner(dls, layers=[64, 32], sparse=sparse, path=tmp_path)
    learn2.create_opt()
    learn2.load('m', with_opt=True)
    for p1, p2 in zip(learn.model.parameters(), learn2.model.parameters()):
        assert torch.equal(p1.cpu(), p2.cpu())
        s1, s2 = learn.opt.state[p1], learn2.opt.state[p2]
        assert s1.keys() == s2.keys()
        for k in s1:
            if isinstance(s1[k], torch.Tensor): assert torch.equal(s1[k].cpu(), s2[k].cpu()), k
            else: assert s1[k] == s2[k], k
    with learn2.no_bar(), learn2.no_logging(): learn2.fit_one_cycle(1, 1e-3)   # and training goes on from there

def test_fused_equals_unfused_and_exports(dls, prior, tmp_path):
    "The fused lookup computes what per-column tables compute; its weights export per column."
    set_seed(0)
    fused = tabular_learner(dls, layers=[32], emb_szs=16, fused=True)
    plain = tabular_learner(dls, layers=[32], emb_szs=16)
    assert len(fused.model.fused.weights) == 1            # one width: one table, one lookup kernel
    plain.model.load_state_dict(fused.model.unfused_state_dict())
    b = dls.valid.one_batch()
    fused.model.eval().to(dls.device); plain.model.eval().to(dls.device)   # where the batch is (cuda on a GPU machine)
    torch.testing.assert_close(fused.model(*b[:2]), plain.model(*b[:2]))
    with fused.no_bar(), fused.no_logging(): fused.fit_one_cycle(1, 1e-2)
    assert fused.recorder.values[-1][0] < prior - MARGIN
    # mixed widths: one table per width, outputs still in column order
    mixed = tabular_learner(dls, layers=[32], fused=True)
    plain2 = tabular_learner(dls, layers=[32])
    plain2.model.load_state_dict(mixed.model.unfused_state_dict())
    mixed.model.eval().to(dls.device); plain2.model.eval().to(dls.device)
    torch.testing.assert_close(mixed.model(*b[:2]), plain2.model(*b[:2]))
    empty = [t[:0] for t in b[:2]]   # a 0-row batch (an empty test_dl): bags too
    assert mixed.model(*empty).shape == plain2.model(*empty).shape == (0, dls.c)

class Float64Steps(Callback):
    "Train in float64 (the model, and the conts cast) for `n` steps, keeping each batch's cats."
    def __init__(self, n=1): self.n = n
    def before_fit(self): self.model.double(); self.cats = []
    def before_batch(self):
        self.cats.append(self.xb[0].cpu())
        self.learn.xb = (self.xb[0], self.xb[1].double())
    def after_step(self):
        if self.iter + 1 >= self.n: raise CancelFitException

def test_fused_sparse_step_equals_unfused_sparse(dls):
    """A fused table can be sparse as a whole: from the same weights and batch, a training step in float64 gives what
    the per-column sparse tables give: the lazy Adam update on the rows in the batch, no other row moved, and the
    layers stepped by the dense optimizer, all in one optimizer of the same type."""
    set_seed(0)
    fused = tabular_learner(dls, layers=[32], emb_szs=16, fused=True, sparse=True)
    plain = tabular_learner(dls, layers=[32], emb_szs=16, sparse=True)
    plain.model.load_state_dict(fused.model.unfused_state_dict())
    w0 = [w.detach().cpu().double() for w in fused.model.fused.column_weights()]
    cbs, lr = [Float64Steps(1), Float64Steps(1)], 1e-2
    for learn, cb in zip((fused, plain), cbs):
        set_seed(1)   # the same first batch
        with learn.no_bar(), learn.no_logging(): learn.fit(1, lr, cbs=cb)
    assert torch.equal(cbs[0].cats[0], cbs[1].cats[0])
    assert fused.model.fused.sparse and all(e.sparse for e in plain.model.embeds)
    assert type(fused.opt).__name__ == type(plain.opt).__name__ == 'SparseOptimizer'
    # the rows in the batch get moments (and only those); no other row moves: exact
    x_cat, widths = cbs[0].cats[0], cat_widths(dls.train_ds)
    st = fused.opt.state[fused.model.fused.weights[0]]
    tables = [w.detach().cpu() for w in fused.model.fused.column_weights()]
    n_in_batch = 0
    for w, w_0, j, k in zip(tables, w0, np.cumsum([0] + widths[:-1]), widths, strict=True):
        codes = x_cat[:, j:j + k]
        in_batch = torch.zeros(len(w), dtype=torch.bool)
        in_batch[codes[codes >= 0].long()] = True
        assert torch.equal(w[~in_batch], w_0[~in_batch])
        n_in_batch += in_batch.sum().item()
    assert st['step'] == 1 and st['n'] == n_in_batch
    # Both compute the same sums in float64, in their own orders (a bag's rows, a row's grads over the batch): each
    # within n*eps64 of the size of its terms, n <= bs, per-row grads below 10 in size (the log loss's grad in the
    # logits is below 1; weights and normalized activations are small). Adam's first step, lr*g/(|g|+eps), is
    # lr/eps-Lipschitz in g: the weights agree within lr/eps * bs*eps64*10 (5e-9; in float32, 0.2), plus their
    # update's rounding (eps64*|w|). A wrong row or lr moves elements by about lr; weight decay on the table by
    # lr*wd*|w| (1e-6): far beyond.
    eps64, eps = torch.finfo(torch.float64).eps, fused.opt.hypers[0]['eps']
    tol = lr / eps * dls.bs * eps64 * 10
    pairs = list(zip(tables, [e.weight for e in plain.model.embeds], strict=True))
    for a, b in pairs + list(zip(fused.model.layers.parameters(), plain.model.layers.parameters(), strict=True)):
        assert a.dtype == b.dtype == torch.float64
        torch.testing.assert_close(a.detach().cpu(), b.detach().cpu(), atol=tol, rtol=4 * eps64)

def test_fused_sparse_trains_as_sparse_adam(dls, prior):
    """Over an epoch of `fit_one_cycle` the fused sparse table steps as torch's SparseAdam replayed from its recorded
    grads and scheduled hypers, keeps moments for the rows it has seen only, and the model beats the class prior.
    (Fused and per-column training are not compared after an epoch: float32 rounding, which Adam's normalized steps
    amplify by up to lr/eps a step, grows with every step, to 1e-2 in 20 steps on some CPUs. One step is, above.)"""
    set_seed(0)
    rec = RecordSparseSteps(lambda m: m.fused.weights[0])
    learn = tabular_learner(dls, layers=[32], emb_szs=16, fused=True, sparse=True, cbs=rec)
    w = learn.model.fused.weights[0]
    w0 = w.detach().cpu().clone()
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(1, 1e-2)
    st = learn.opt.state[w]
    assert 0 < st['n'] < w.shape[0] and st['step'] == len(dls.train) == len(rec.grads)
    ref, tol = replay_sparse_adam(w0, rec)
    torch.testing.assert_close(w.detach().cpu(), ref, atol=tol, rtol=0)
    assert learn.recorder.values[-1][0] < prior - MARGIN

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

class RecordSparseSteps(Callback):
    "The sparse grad of table `weight(model)` and its group's hypers at each training step (what the optimizer uses)."
    def __init__(self, weight): self.weight = weight
    def before_fit(self): self.grads, self.hypers = [], []
    def before_step(self):
        self.grads.append(self.weight(self.model).grad.detach().cpu().clone())
        self.hypers.append({k: self.opt.hypers[0][k] for k in ('lr', 'mom', 'sqr_mom', 'eps')})

def replay_sparse_adam(w0, rec, lr_mult=1.):
    "torch's SparseAdam from `w0` on the grads and hypers `rec` recorded, and how far from it the table may be."
    ref = torch.nn.Parameter(w0.clone())
    opt = torch.optim.SparseAdam([ref])
    for g, h in zip(rec.grads, rec.hypers, strict=True):
        opt.param_groups[0].update(lr=h['lr'] * lr_mult, betas=(h['mom'], h['sqr_mom']), eps=h['eps'])
        ref.grad = g
        opt.step()
    hypers = [(h['lr'] * lr_mult, h['mom'], h['sqr_mom']) for h in rec.hypers]
    return ref.detach(), adam_drift(hypers, torch.cat([w0, ref.detach()]))

def test_sparse_table_steps_as_sparse_adam_through_the_learner(dls):
    """Through `fit_one_cycle`, a sparse table steps as torch's SparseAdam given the scheduled lr x `sparse_lr_mult`,
    betas (mom, sqr_mom) and eps at every step, with no weight decay (fit's wd=0.1 reaches the dense params only):
    replayed from the recorded grads, SparseAdam ends at the same table, and rows never in a batch have not moved."""
    rec = RecordSparseSteps(lambda m: m.embeds[1].weight)
    set_seed(0)   # a third of the epoch (the warmup), so that many movies are in no batch
    learn = tabular_learner(dls, layers=[32], sparse=['movieId'], sparse_lr_mult=0.5,
                            cbs=[rec, ShortEpochCallback(0.3)])
    w0 = learn.model.embeds[1].weight.detach().cpu().clone()
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(1, 1e-2, wd=0.1)
    lrs, moms = [h['lr'] for h in rec.hypers], [h['mom'] for h in rec.hypers]
    assert len(rec.grads) > 10 and len(set(lrs)) == len(set(moms)) == len(rec.grads)   # the schedule moved both
    ref, tol = replay_sparse_adam(w0, rec, 0.5)
    w = learn.model.embeds[1].weight.detach().cpu()
    torch.testing.assert_close(w, ref, atol=tol, rtol=0)
    seen = torch.zeros(len(w), dtype=torch.bool)
    for g in rec.grads: seen[g.coalesce().indices()[0]] = True
    assert (~seen).sum() > 1000 and torch.equal(w[~seen], w0[~seen])     # a decay would have shrunk them
    assert not torch.equal(w[seen], w0[seen])

@pytest.mark.parametrize('mode', ['mean', 'sum'])
def test_bag_is_mean_or_sum_of_its_rows(dls, mode):
    """A multi-hot column embeds as the mean (`bag_mode='mean'`) or sum (`'sum'`) of its elements' rows,
    `weight[codes]`; an empty bag as zeros; the fused lookup gives the same."""
    learn = tabular_learner(dls, layers=[8], bag_mode=mode)
    fused = tabular_learner(dls, layers=[8], bag_mode=mode, fused=True)
    learn.model.load_state_dict(fused.model.unfused_state_dict())
    i = list(dls.cat_names).index('genres')
    j, k = sum(cat_widths(dls.train_ds)[:i]), dls.train_ds.bag_widths['genres']
    x_cat = dls.valid.one_batch()[0][:200].cpu()
    x_cat[0, j:j + k] = -1                                         # an empty bag
    block, w = x_cat[:, j:j + k], learn.model.embeds[i].weight.detach()
    assert (block >= 0).sum(1).max() > 1                          # bags of several elements are among them
    reduce = torch.mean if mode == 'mean' else torch.sum
    ref = torch.stack([reduce(w[r[r >= 0]], 0) if (r >= 0).any() else torch.zeros(w.shape[1]) for r in block])
    with torch.no_grad():
        torch.testing.assert_close(learn.model.embeds[i](block), ref)
        torch.testing.assert_close(fused.model.embed(x_cat), learn.model.embed(x_cat))

class AutocastOnDevice(MixedPrecision):
    "fastai's MixedPrecision (bf16) with autocast on the loaders' device type (fastai's is cuda-only): runs on a CPU."
    def before_fit(self):
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')   # fastai's cuda autocast, made first, warns on a CPU: replaced below
            super().before_fit()
        self.autocast, self.dtypes = torch.autocast(self.dls.device.type, dtype=torch.bfloat16), []
    def after_pred(self):
        self.dtypes.append(self.pred.dtype)
        super().after_pred()

@pytest.mark.parametrize('fused', [False, True])
def test_bf16_autocast_trains(dls, prior, fused):
    """Mixed precision with a TabularGPU learner, bags and fused tables included: under bf16 autocast the layers run
    in bf16, training beats the class prior, and predictions stay within bf16 precision of the same model in fp32."""
    cb = AutocastOnDevice(amp_mode='bf16')
    learn = fit(dls, epochs=1, emb_szs=16, fused=fused, cbs=cb)
    assert cb.dtypes and all(dt == torch.bfloat16 for dt in cb.dtypes)
    assert learn.recorder.values[-1][0] < prior - MARGIN
    p_amp = learn.get_preds()[0]
    learn.remove_cb(cb)
    p32 = learn.get_preds()[0]
    # bf16 keeps 8 significant bits: the layers' inputs and weights round by up to 2^-9 relative, so the logits move by
    # a few 2^-9 times the size of their terms (about 1 here), the probabilities (slope at most 1/4) by less than 0.03
    assert (p_amp - p32).abs().max() < 0.03 and not torch.equal(p_amp, p32)

def test_to_fp16_trains(dls, prior):
    "`learn.to_fp16()` on a TabularGPU learner: real fp16 AMP on a GPU; on a CPU fastai turns AMP off with a warning."
    learn = tabular_learner(dls, layers=[64, 32], emb_szs=16).to_fp16()
    set_seed(0)
    on_cpu = dls.device.type != 'cuda'
    with pytest.warns(UserWarning, match='CUDA is not available') if on_cpu else warnings.catch_warnings():
        with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(1, 1e-2)
    assert learn.recorder.values[-1][0] < prior - MARGIN
    assert all(torch.isfinite(p).all() for p in learn.model.parameters())

@pytest.mark.parametrize('mode', ['mean', 'sum'])
def test_sparse_bag_grad_lists_only_rows_the_batch_holds(mode):
    """A sparse multi-hot table's grad lists the rows of the batch's bags and no other: padding (-1) must not list row 0
    (`#na#`), which the lazy Adam step would then move by its momentum though no bag held it. The values are the dense
    grad's on those rows (exact: the same sums, with weight 0 for the padding), and a batch of empty bags embeds as
    0."""
    torch.manual_seed(0)
    w0 = torch.randn(10, 4, dtype=torch.float64)
    codes = torch.tensor([[1, -1, -1], [3, 1, -1], [5, 3, 2], [-1, -1, -1]])
    grads = {}
    for sparse in (True, False):
        w = torch.nn.Parameter(w0.clone())
        bag_lookup(codes, w, mode, sparse=sparse).pow(2).sum().backward()
        grads[sparse] = w.grad
    g = grads[True].coalesce()
    assert g.indices()[0].tolist() == [1, 2, 3, 5]
    assert torch.equal(g.to_dense(), grads[False])
    # and through the optimizer: two steps with row 0 in no bag leave it where it was
    w, state = torch.nn.Parameter(w0.clone()), {}
    for _ in range(2):
        w.grad = None
        bag_lookup(codes, w, mode, sparse=True).sum().backward()
        with torch.no_grad(): sparse_adam_step(w, w.grad, state, 0.1)
    assert torch.equal(w[0], w0[0]) and not torch.equal(w[1], w0[1])
    empty = torch.full((3, 2), -1)
    assert torch.equal(bag_lookup(empty, w, mode, sparse=True), torch.zeros(3, 4, dtype=torch.float64))

@pytest.mark.parametrize('kind', ['plain', 'fused', 'sparse', 'fused_sparse'])
def test_model_takes_int64_and_int32_codes(dls, kind):
    """The loader's int64 codes (fastai's) and `cat_dtype=torch.int32`'s packed ones give the same outputs and the same
    gradients, through plain and fused tables, dense and sparse, with the genres bag: one lookup, whatever the dtype."""
    kw = dict(fused=kind.startswith('fused'), sparse=kind.endswith('sparse'))
    set_seed(0)
    learn = tabular_learner(dls, layers=[16], **kw)
    b = dls.valid.one_batch()
    b32 = dls.valid.new(cat_dtype=torch.int32).one_batch()
    assert b[0].dtype == torch.int64 and b32[0].dtype == torch.int32 and torch.equal(b[0], b32[0].long())
    model, outs = learn.model.to(b[0].device), []   # where the loaders' batches are
    for x in (b, b32):
        model.zero_grad()
        out = model(x[0], x[1])
        out.sum().backward()
        outs.append((out.detach(), [p.grad.to_dense() if p.grad.is_sparse else p.grad
                                    for p in model.parameters() if p.grad is not None]))
    assert torch.equal(outs[0][0], outs[1][0]) and all(torch.equal(g, h) for g,h in zip(outs[0][1], outs[1][1]))
