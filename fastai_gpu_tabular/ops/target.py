"""`TargetEncode`: categories replaced by their target's mean, smoothed toward the global mean, out-of-fold on the
training rows (scikit-learn's `TargetEncoder`, computed on the frame's device): new continuous columns for the model."""
from __future__ import annotations

import numbers
import numpy as np
import pandas as pd
from fastai.tabular.core import TabularProc

from ..backend import array_module, column_values, encode_codes, frame_like, series_like, sorted_uniques, to_host
from ..checks import guard_setups

__all__ = ['TargetEncode']

_TYPES = ('auto', 'continuous', 'binary', 'multiclass')

def category_sums(codes, w, n_cats:int, start=None):
    """Sums (float64) of the weights `w` by category `codes` (ints in `[0, n_cats)`), added in row order onto `start`
    (the running sums of earlier rows; default zeros): NumPy's `bincount` adds in that order, as scikit-learn's loop
    does, so summing a frame a part at a time, each part onto the last one's sums, gives the same bits."""
    xp = array_module(w)
    # weights as float64, as NumPy's bincount takes them (CuPy adds its weights' own type)
    if start is None: return xp.bincount(codes, weights=w.astype('f8'), minlength=n_cats)
    return xp.bincount(xp.concatenate([xp.arange(n_cats), codes]), weights=xp.concatenate([start, w.astype('f8')]),
                       minlength=n_cats)

def m_smoothed(sums, counts, mean:float):
    "Encodings from sums and counts started at `m * mean` and `m`: `sums / counts`, `mean` for a category with neither."
    xp = array_module(sums)
    with np.errstate(divide='ignore', invalid='ignore'): return xp.where(counts == 0, mean, sums / counts)

def auto_smoothed(means, counts, ssd, var:float, mean:float):
    """scikit-learn's empirical Bayes encodings from each category's mean, row count and sum of squared deviations
    from its mean (`ssd`), and the target's variance and mean: `lam * means + (1 - lam) * mean`, `lam` = `var * n /
    (var * n + ssd / n)`; `mean` where `lam` is NaN (no rows, or no variance at all)."""
    xp = array_module(means)
    with np.errstate(divide='ignore', invalid='ignore'):
        lam = var * counts / (var * counts + ssd / counts)
        return xp.where(xp.isnan(lam), mean, lam * means + (1 - lam) * mean)

def category_means(sums, counts):
    with np.errstate(divide='ignore', invalid='ignore'): return sums / counts

def target_encodings(codes, y, n_cats:int, smooth, mean=None):
    """Encodings (float64, `n_cats` of them) of the categories `codes` (ints in `[0, n_cats)`) of target `y` (1-d),
    as scikit-learn's `TargetEncoder` computes them: `smooth` 'auto' (empirical Bayes, from `y`'s variance) or m >= 0
    (`(sum + m*mean) / (count + m)`), each category's sums added in row order (NumPy's `bincount`, so equal to
    scikit-learn's loop bit for bit; CuPy adds in another order). A category with no rows gets `mean` (default:
    `y`'s)."""
    xp = array_module(y)
    mean = float(xp.mean(y) if mean is None else mean)
    if smooth == 'auto':
        cnt = xp.bincount(codes, minlength=n_cats)
        means = category_means(category_sums(codes, y, n_cats), cnt)
        d = y.astype('f8') - means[codes]
        return auto_smoothed(means, cnt, category_sums(codes, d * d, n_cats), float(xp.var(y)), mean)
    # the smoothing terms first, then each row: scikit-learn's order of additions
    sums = category_sums(codes, y, n_cats, xp.full(n_cats, smooth * mean))
    counts = category_sums(codes, xp.ones(len(codes)), n_cats, xp.full(n_cats, float(smooth)))
    return m_smoothed(sums, counts, mean)

def fold_ids(y_codes, folds:int, seed:int, stratify:bool):
    """Each training row's fold (0..folds-1, host int64): scikit-learn's `StratifiedKFold` (classes, `y_codes` their
    codes) or `KFold` (a continuous target), shuffled with `seed`, the splitters `TargetEncoder(cv=folds)` uses."""
    from sklearn.model_selection import KFold, StratifiedKFold
    y = to_host(y_codes)
    cv = (StratifiedKFold if stratify else KFold)(folds, shuffle=True, random_state=seed)
    res = np.empty(len(y), np.int64)
    for i,(_,te) in enumerate(cv.split(np.zeros((len(y), 1)), y)): res[te] = i
    return res

def _is_number(dtype) -> bool:
    return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)

class TargetEncode(TabularProc):
    """Each of the cat columns `names` (default: all single-hot ones) gets a continuous column `<name>_te` (one per
    class for a multi-class target: `<name>_te_<class>`) holding its category's target mean, smoothed toward the global
    mean as scikit-learn's `TargetEncoder(smooth)` does. The training rows of the object it is set up on get out-of-fold
    values (`folds` seeded folds: scikit-learn's `StratifiedKFold` for classes, `KFold` for a continuous target), so a
    row never sees its own target; every later frame (validation, `new`, `test_dl`, `predict`) gets the statistic of
    all training rows. Missing values are a category; a category unseen in training gets the global mean. The source
    column stays a cat (Categorify still encodes it for an embedding). Runs before Categorify (on the raw values), and
    before Normalize, which scales the new columns with the others.
    `targets` encodes other columns than the Tabular's one target, each its own statistic: `<name>_te_<target>` (and
    `_<class>`). A group of names (`[['a', 'b']]`, NVTabular's) encodes the columns' values together, a category per
    combination seen in training (`a_b_te`); a combination with a value unseen in training gets the global mean."""
    order = 0
    def __init__(self,
        names:list|None=None, # cat columns to encode (default: every single-hot cat column)
        smooth:str|float='auto', # 'auto' (empirical Bayes) or m >= 0: `(sum + m*mean) / (count + m)`
        folds:int=5, # cross-fitting folds on the training rows; 0: none (the training rows see their own target)
        seed:int=0, # the folds' shuffle
        target_type:str='auto', # 'continuous', 'binary', 'multiclass'; 'auto': fastai's rule (numbers regress)
        targets:list|None=None # target columns to encode each name with (default: the Tabular's one target)
    ):
        number = isinstance(smooth, numbers.Real) and not isinstance(smooth, bool)
        if not (smooth == 'auto' or (number and smooth >= 0)):
            raise ValueError(f"TargetEncode(smooth=...) must be 'auto' or a number >= 0, got {smooth!r}")
        if isinstance(folds, bool) or not isinstance(folds, numbers.Integral) or folds < 0 or folds == 1:
            raise ValueError(f"TargetEncode(folds=...) must be 0 (no cross-fitting) or an integer >= 2, got {folds!r}")
        if target_type not in _TYPES: raise ValueError(f"TargetEncode(target_type=...) must be one of {_TYPES}, got "
                                                       f"{target_type!r}")
        self.names = None if names is None else ([names] if isinstance(names, str) else
                                                 [n if isinstance(n, str) else list(n) for n in names])
        self.groups = {}   # {key: its columns} of the names that are groups
        for n in self.names or []:
            if isinstance(n, str): continue
            if len(n) < 2 or not all(isinstance(c, str) for c in n) or len(set(n)) < len(n):
                raise ValueError(f"TargetEncode(names) takes column names or groups of two or more, got {n!r}")
            self.groups['_'.join(n)] = n
        if targets is not None:
            targets = [targets] if isinstance(targets, str) else list(targets)
            if not targets or len(set(targets)) < len(targets) or not all(isinstance(t, str) for t in targets):
                raise ValueError(f"TargetEncode(targets) takes distinct column names, got {targets!r}")
        self.smooth,self.folds,self.seed,self.target_type,self.targets = smooth,int(folds),seed,target_type,targets
        self.target = None   # the target of one of `parts`
        self.parts = [self.part(t) for t in targets or []]   # a proc a target: each its own statistic
        self._fitting,self._oof = None,None

    def part(self, target:str):
        "The proc encoding the names with `target` alone."
        p = TargetEncode(self.names, self.smooth, self.folds, self.seed, self.target_type)
        p.target = target
        return p

    @property
    def key_names(self) -> list|None:
        "The names as the encodings hold them: a column, or a group's key (its columns joined by '_')."
        return None if self.names is None else [n if isinstance(n, str) else '_'.join(n) for n in self.names]

    def sources(self, n:str) -> list:
        "The frame's columns key `n` reads."
        return self.groups.get(n, [n])

    def column(self, df, n:str):
        "The values of key `n` in `df`: its column, or a group's combination codes (`group_codes`)."
        return group_codes(df, self.groups[n], self.group_vocabs[n], n) if n in self.groups else df[n]

    def setup(self, items=None, train_setup=False):
        "fastai's set-up (`setups` on the training rows, then encodes on `items`), remembering which object it fits."
        self._fitting = items   # its training rows get the out-of-fold values
        for p in self.parts: p._fitting = items
        try: return super().setup(items, train_setup)
        finally:
            for p in [self, *self.parts]: p._fitting,p._oof = None,None

    def raw_names(self, cat_names, cont_names, y_names) -> list:
        """The cat columns it encodes and the target: fastai's shrink leaves their values as they are (see
        `checks.raw_columns`), so the encodings are those of the values given (scikit-learn's on a float64 target)."""
        flags = {f'{c}_na' for c in cont_names}
        names = ([c for n in self.key_names for c in self.sources(n)] if self.names is not None else
                 [n for n in cat_names if n not in flags])
        return [*names, *(self.targets or y_names)]

    def check_names(self, to) -> tuple:
        "`(names, target)`: the columns to encode and the target's name, or an error naming what is wrong."
        if self.target is None and len(to.y_names) != 1:
            raise ValueError(f"TargetEncode needs one target column, got y_names={list(to.y_names)}: give targets=")
        y = self.target if self.target is not None else to.y_names[0]
        if y not in to.items.columns: raise KeyError(f"TargetEncode: the target column {y!r} is not in the frame")
        mh = getattr(to, 'multi_hot', {})
        # by default the single-hot cats of the frame, not FillMissing's `_na` flags (there if it ran first)
        flags = {f'{c}_na' for c in to.cont_names}
        names = self.key_names if self.names is not None else [n for n in to.cat_names
                                                          if n not in mh and n not in flags and n in to.items.columns]
        bad = [c for n in names for c in self.sources(n) if c not in to.items.columns]
        if bad: raise KeyError(f"TargetEncode: column(s) {bad} are not in the frame (it has "
                               f"{list(to.items.columns)[:20]})")
        bad = [c for n in names for c in self.sources(n) if c in mh or c == y]
        if bad: raise ValueError(f"TargetEncode encodes single-hot columns, not the target or multi-hot ones: {bad}")
        return names, y

    def has_classes(self, y:str, dtype) -> bool:
        "Whether the target `y` of `dtype` is classes (fastai's rule for 'auto': numbers regress), or an error."
        kind = self.target_type
        if kind == 'auto': return not _is_number(dtype)
        if kind == 'continuous' and not _is_number(dtype):
            raise TypeError(f"target column {y!r} has dtype {dtype}: a continuous target needs numbers")
        return kind != 'continuous'

    def kind_of(self, y:str) -> str:
        "'continuous', 'binary' or 'multiclass', from `target_classes` (None for a continuous target)."
        c = self.target_classes
        if c is None: return 'continuous'
        if self.target_type == 'binary' and len(c) > 2:
            raise ValueError(f"target column {y!r} has {len(c)} classes, not 2: use target_type='multiclass' or 'auto'")
        return 'binary' if self.target_type == 'binary' or len(c) <= 2 else 'multiclass'

    def set_encodings(self, n:str, vocab:list, nan:bool, enc) -> None:
        "Keep column `n`'s encodings (categories, outputs) on the host, by category (a missing one last, if seen)."
        index = pd.Index([*vocab, np.nan], dtype=object) if nan else pd.Index(vocab)
        self.encodings[n] = pd.DataFrame(to_host(enc), index=index, columns=self.out_names(n))

    def _check(self, to):
        "The errors, before any work: the names, one target, no NaN in it."
        names, y = self.check_names(to)
        if bool(to.items[y].isna().any()):
            raise ValueError(f"target column {y!r} contains NaN/null in the training rows: TargetEncode needs every "
                             "training row's target; drop or fill those rows")
        return names, to.items[y]

    @guard_setups
    def setups(self, to):
        if self.parts: return setup_parts(self, to)
        names, ycol = self._check(to)
        self.group_vocabs = {n: [sorted_uniques(to.items[c]) for c in self.groups[n]] for n in names
                             if n in self.groups}
        check_group_sizes(self)
        if not self.has_classes(ycol.name, ycol.dtype): self.target_classes,y = None,column_values(ycol).astype('f8')
        else:
            self.target_classes = sorted_uniques(ycol)
            codes = column_values(encode_codes(ycol, self.target_classes, add=0)).astype('int64')
        kind = self.target_type_ = self.kind_of(ycol.name)
        # scikit-learn's labels: 0/1 (LabelEncoder), an int64 column per class (LabelBinarizer)
        if kind != 'continuous': y = codes if kind == 'binary' else class_indicators(codes, len(self.target_classes))
        self.target_mean = _target_mean(y)
        folds = None
        if self._fitting is not None and self.folds:
            folds = fold_ids(codes if kind != 'continuous' else y, self.folds, self.seed, kind != 'continuous')
            if array_module(y) is not np: folds = array_module(y).asarray(folds)
        self.encodings,self._oof = {},{}
        for n in names:
            col = self.column(to.items, n)
            vocab = sorted_uniques(col)
            codes_n = column_values(encode_codes(col, vocab, add=0)).astype('int64')
            nan = bool((codes_n < 0).any())   # missing values: a category of their own, the last one
            k = len(vocab) + nan
            if nan: codes_n = array_module(codes_n).where(codes_n < 0, len(vocab), codes_n)
            self.set_encodings(n, vocab, nan, _encode(codes_n, y, k, self.smooth))
            if folds is not None: self._oof[n] = _out_of_fold(codes_n, y, k, self.smooth, folds, self.folds)

    @property
    def made_names(self) -> list:
        "The columns this proc adds (checked as present by `check_columns` only after it ran)."
        if self.parts: return [c for p in self.parts for c in p.made_names]
        return [c for n in getattr(self, 'encodings', {}) for c in self.out_names(n)]

    def out_names(self, n) -> list:
        "The columns made from cat column `n`: `<n>_te`, or `<n>_te_<class>` for each class of a multi-class target."
        base = f'{n}_te' if self.target is None else f'{n}_te_{self.target}'
        if self.target_type_ != 'multiclass': return [base]
        return [f'{base}_{c}' for c in self.target_classes]

    def _lookup(self, col, n):
        "Encoded values of `col` (rows, outputs) on its device: unseen values get the global mean."
        e = self.encodings[n]
        nan = len(e) and pd.isna(e.index[-1])
        vocab = list(e.index[:len(e) - nan])
        codes = column_values(encode_codes(col, vocab, add=0)).astype('int64')
        xp = array_module(codes)
        # rows of the table: the categories, then missing values (their own, or the mean), then unseen (code -1)
        mean = np.atleast_1d(np.asarray(self.target_mean, dtype='f8'))
        vals = e.to_numpy('f8')
        table = np.concatenate([vals[:len(vocab)], vals[-1:] if nan else mean[None], mean[None]])
        codes = xp.where(column_values(col.isna()), len(vocab), codes)
        return xp.asarray(table)[codes]

    def encoded(self, df):
        "The columns this proc makes for the rows of `df` (pandas or cuDF), from the statistic of all training rows."
        if self.parts:
            parts = [p.encoded(df) for p in self.parts]
            return frame_like(df, {c: f[c] for f in parts for c in f.columns})
        vals = {c: _column(v, i) for n in self.encodings for v in [self._lookup(self.column(df, n), n)]
                for i,c in enumerate(self.out_names(n))}
        return frame_like(df, vals)

    def encodes(self, to):
        if self.parts:
            for p in self.parts: p.encodes(to)
            return to
        fitting = to is self._fitting and bool(self._oof)
        for n in self.encodings:
            vals = self._lookup(self.column(to.items, n), n)
            if fitting:   # the training rows (first in the frame) get their out-of-fold values
                oof = self._oof[n]
                vals[:len(oof)] = oof
            for i,c in enumerate(self.out_names(n)):
                to[c] = series_like(to.items, _column(vals, i), name=c)
                if c not in to.cont_names: to.cont_names.append(c)
        return to

def _column(a, i):
    "Column `i` of a 2-d array, contiguous (cuDF takes no strided CuPy array)."
    return array_module(a).ascontiguousarray(a[:, i])

def class_indicators(codes, n:int):
    "An int64 column per class (scikit-learn's `LabelBinarizer` of more than two classes), on the codes' device."
    return (codes[:, None] == array_module(codes).arange(n)).astype('int64')

def _target_mean(y):
    "scikit-learn's `np.mean(y, axis=0)`: a float (binary, continuous) or one per class."
    m = array_module(y).mean(y, axis=0)
    return float(m) if y.ndim == 1 else to_host(m)

def _encode(codes, y, k, smooth, mean=None):
    "Encodings (k, outputs): one column, or one per class of a one-hot `y` (each with its class's mean and variance)."
    xp = array_module(y)
    if y.ndim == 1: return target_encodings(codes, y, k, smooth, mean)[:, None]
    means = xp.mean(y, axis=0) if mean is None else mean
    return xp.stack([target_encodings(codes, y[:, i], k, smooth, means[i]) for i in range(y.shape[1])], axis=1)

def _out_of_fold(codes, y, k, smooth, folds, n_folds):
    "Each row's encodings from the other folds' rows (scikit-learn's `fit_transform`): rows, outputs."
    xp = array_module(y)
    res = xp.empty((len(codes), 1 if y.ndim == 1 else y.shape[1]), 'f8')
    for f in range(n_folds):
        te = folds == f
        tr = ~te
        enc = _encode(codes[tr], y[tr], k, smooth, xp.mean(y[tr], axis=0))
        res[te] = enc[codes[te]]
    return res

def setup_parts(proc, to):
    "Set up each target's proc (`targets`) on `to`, each as its own TargetEncode (on Dask too)."
    for t in proc.targets:
        if t not in to.items.columns:
            raise KeyError(f"TargetEncode: the target column {t!r} is not in the frame: a Tabular keeps its named "
                           "columns, name it in y_names or cont_names")
    for p in proc.parts: p.setups(to)

def check_group_sizes(proc) -> None:
    "A group's combinations are codes in an int64: its columns' vocabularies must multiply to fewer than 2**62."
    for n,vs in proc.group_vocabs.items():
        if np.prod([float(len(v) + 1) for v in vs]) >= 2.0**62:
            raise ValueError(f"TargetEncode group {proc.groups[n]}: its columns have too many values to combine")

def group_codes(df, cols:list, vocabs:list, name:str):
    """The combination of `df`'s columns `cols` as one int64 code a row (on `df`'s device): each column's code in its
    training values `vocabs` (a missing value after them), mixed-radix; -1 where a value is unseen in training."""
    total = unseen = None
    for c,v in zip(cols, vocabs):
        codes = column_values(encode_codes(df[c], v, add=0)).astype('int64')
        xp = array_module(codes)
        codes = xp.where(column_values(df[c].isna()), len(v), codes)
        total = codes if total is None else total * (len(v) + 1) + codes
        unseen = codes < 0 if unseen is None else unseen | (codes < 0)
    return series_like(df[cols[0]], xp.where(unseen, -1, total), name=name)
