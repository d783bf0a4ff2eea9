"""`permutation_importance` against scikit-learn's `permutation_importance` given the same permutations (its
`random_state`), on Adult and on MovieLens with multi-hot genres and a history: an estimator whose every column holds
row positions, so that scikit-learn's shuffle of a column moves that column's values (a multi-hot column's slots
together) and nothing else; the accuracy, the loss, and a metric object; fastbook's chart."""
import numpy as np
import pytest
import torch
from fastai.metrics import accuracy, rmse
from fastai.tabular.all import FillMissing, Normalize, RandomSplitter, range_of
from sklearn.inspection import permutation_importance as sk_permutation_importance
from fastai_gpu_tabular.all import (
    Categorify,
    History,
    TabularGPU,
    permutation_importance,
    plot_importance,
    tabular_learner,
)
from fastai_gpu_tabular.datasets import load_adult, load_movielens_100k
from fastai_gpu_tabular.rows.pack import cat_spans, cat_widths, unpack_rows

class _Positions:
    """A scikit-learn estimator over `X`, whose column k holds row positions: its prediction takes input k's slots of
    the packed rows at those positions, then runs the model `bs` rows at a time, as the loaders batch them."""
    def __init__(self, learn, rows, layout, bs):
        to = learn.dls.train_ds
        a0, c0 = layout.cats.start, layout.conts.start
        self.spans = [(a0 + a, a0 + b) for a,b in cat_spans(cat_widths(to))] + \
                     [(c0 + j, c0 + j + 1) for j in range(len(to.cont_names))]
        self.learn, self.rows, self.layout, self.bs = learn, rows, layout, bs
    def fit(self, X, y): return self
    def predict(self, X):
        at = torch.as_tensor(X, device=self.rows.device)
        rows = self.rows.clone()
        for k,(a,b) in enumerate(self.spans): rows[:, a:b] = self.rows[at[:, k], a:b]
        self.learn.model.eval()
        with torch.no_grad():
            return torch.cat([self.learn.model(*unpack_rows(rows[i:i + self.bs], self.layout)[:2])
                              for i in range(0, len(rows), self.bs)])

def _sklearn(learn, score, n_repeats, seed):
    "scikit-learn's importances (columns, repeats) of the validation rows by `score(preds, targs)`, greater better."
    dl = learn.dls.valid
    rows, layout = dl.dataset.packed_rows(dl.device)
    est = _Positions(learn, rows, layout, dl.bs)
    ys = unpack_rows(rows, layout)[2]
    X = np.tile(np.arange(len(rows)), (len(est.spans), 1)).T
    res = sk_permutation_importance(est, X, np.zeros(len(rows)), scoring=lambda e, X, y: score(e.predict(X), ys),
                                    n_repeats=n_repeats, random_state=seed)
    return res.importances

@pytest.fixture(scope='module')
def adult():
    "A classifier of Adult's income, trained one epoch."
    df = load_adult().iloc[:8000]
    to = TabularGPU(df, procs=[Categorify, FillMissing, Normalize], cat_names=['workclass', 'education', 'occupation'],
                    cont_names=['age', 'fnlwgt', 'hours-per-week'], y_names='income',
                    splits=RandomSplitter(seed=0)(range_of(df)))
    torch.manual_seed(0)
    learn = tabular_learner(to.dataloaders(bs=256), layers=[32], metrics=accuracy)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-2)
    return learn

def test_adult_is_sklearns(adult):
    """Accuracy (better higher) and the loss (better lower: counted as scikit-learn counts its negative) of each
    column: scikit-learn's importances given the same permutations, exactly."""
    imp = permutation_importance(adult, accuracy, n_repeats=3, seed=7)
    want = _sklearn(adult, lambda p, y: float(accuracy(p, y)), 3, 7)
    np.testing.assert_array_equal(imp.attrs['importances'], want)
    assert list(imp.column) == [imp.attrs['columns'][i] for i in np.argsort(-want.mean(1), kind='stable')]
    np.testing.assert_array_equal(imp.importance.to_numpy(), np.sort(want.mean(1))[::-1])
    loss = permutation_importance(adult, n_repeats=2, seed=1)
    np.testing.assert_array_equal(loss.attrs['importances'],
                                  _sklearn(adult, lambda p, y: -float(adult.loss_func(p, y)), 2, 1))
    assert loss.attrs['baseline'] == float(adult.loss_func(*_preds(adult)))
    assert imp.importance.max() > 0   # some column matters to the model

def _preds(learn):
    dl = learn.dls.valid
    rows, layout = dl.dataset.packed_rows(dl.device)
    est = _Positions(learn, rows, layout, dl.bs)
    return est.predict(np.tile(np.arange(len(rows)), (len(est.spans), 1)).T), unpack_rows(rows, layout)[2]

def test_multi_hot_and_metric_objects():
    """MovieLens ratings regressed on users, movies, their genres (multi-hot) and each user's last 3 movies: each
    column's slots shuffled together, fastai's `rmse` metric object (better lower), as scikit-learn's."""
    df = load_movielens_100k().sample(n=8000, random_state=0).reset_index(drop=True)
    to = TabularGPU(df, procs=[History('item_id', 'user_id', 'timestamp', n=3), Categorify, FillMissing, Normalize],
                    cat_names=['user_id', 'item_id', 'genres'], cont_names=['age', 'timestamp'], y_names='rating',
                    splits=RandomSplitter(seed=0)(range_of(df)))
    torch.manual_seed(0)
    learn = tabular_learner(to.dataloaders(bs=256), layers=[16], y_range=(0.5, 5.5))
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-2)
    assert to.bag_widths == {'genres': 6, 'item_id_last3_user_id': 3}
    imp = permutation_importance(learn, rmse, n_repeats=2, seed=3)
    want = _sklearn(learn, lambda p, y: -_rmse(p, y), 2, 3)   # scikit-learn's of -rmse: how much rmse grows
    np.testing.assert_array_equal(imp.attrs['importances'], want)
    assert set(imp.column) == set(to.cat_names) | set(to.cont_names)

def _rmse(p, y):
    "fastai's `rmse` of all rows at once (a metric object: reset, one batch, value)."
    from types import SimpleNamespace
    from fastai.torch_core import to_detach
    rmse.reset()
    rmse.accumulate(SimpleNamespace(pred=p, y=y, yb=(y,), to_detach=to_detach))
    return float(rmse.value)

def test_chart(adult):
    "fastbook's chart: a bar a column, the most important at the top, the repeats' spread as error bars."
    import matplotlib
    matplotlib.use('Agg')
    imp = permutation_importance(adult, accuracy, n_repeats=2)
    ax = plot_importance(imp, top=4)
    assert [t.get_text() for t in ax.get_yticklabels()] == list(imp.column[:4][::-1])
    assert len(ax.patches) == 4

def test_errors(adult):
    "A loader with no rows, or none of its targets, is an error naming what is missing."
    with pytest.raises(ValueError, match="needs the rows' targets: the loader has none"):
        permutation_importance(adult, dl=adult.dls.test_dl(load_adult().iloc[:50].drop(columns='income')))
