"""`DifferenceLag`, `History` and `ListSlice` against independent references on real timestamps: pandas'
`groupby(...).diff()` / `shift()` after a sort by key, time and the frame's order, and a plain Python loop over each
key's events; on MovieLens 100K (each user's previous movies and the time since their last rating, the ratings given in
a shuffled order) and on the flights (each plane's previous flight by `tailnum`, missing for some). Then the state a
later frame follows, the errors, and the caller's frame left alone."""
import numpy as np
import pandas as pd
import pytest
import torch
from fastai.tabular.all import Categorify, FillMissing, Normalize, RandomSplitter
from fastai_gpu_tabular.all import DifferenceLag, History, ListSlice, TabularGPU
from fastai_gpu_tabular.backend import to_host, to_pandas
from fastai_gpu_tabular.datasets import load_flights, load_movielens_100k
from fastai_gpu_tabular.ops.history import event_values, lag_name

@pytest.fixture(scope='module')
def ratings():
    "MovieLens 100K's ratings in a shuffled order (the caller sorts nothing), 40,000 of them, and a random split."
    df = load_movielens_100k().sample(frac=1, random_state=1).iloc[:40000].reset_index(drop=True)
    return df, RandomSplitter(seed=0)(range(len(df)))

@pytest.fixture(scope='module')
def flights():
    "60,000 of the 2013 NYC flights, shuffled; their time: the scheduled departure, in minutes since 2013."
    df = load_flights().sample(n=60000, random_state=2).reset_index(drop=True).fillna({'air_time': 0})
    dep = pd.to_datetime(df[['year', 'month', 'day', 'hour', 'minute']])
    df['dep'] = ((dep - pd.Timestamp('2013-01-01')) // pd.Timedelta(minutes=1)).astype('int64')
    return df, RandomSplitter(seed=1)(range(len(df)))

def framed(df, splits):
    "The rows in the Tabular's order (training rows, then validation rows), positions as the last sort key."
    return df.iloc[np.concatenate(splits)].reset_index(drop=True).assign(_pos=lambda d: np.arange(len(d)))

def pandas_lags(frame, keys, time, name):
    "pandas: sorted by key, time and position, each key's `diff()` (a missing key: NaN), back in the frame's order."
    s = frame.sort_values([*keys, time, '_pos'])
    return s.groupby(keys)[name].diff().sort_index().to_numpy('f8')

def loop_history(frame, keys, time, name, n):
    "A plain loop over each key's events in time order: each event's last `n` earlier values, the latest first."
    events = {}
    for pos,(k,t) in enumerate(zip(frame[keys].itertuples(index=False, name=None), frame[time])):
        if not any(pd.isna(v) for v in k): events.setdefault(k, []).append((t, pos))
    vals, res = frame[name].tolist(), [[] for _ in range(len(frame))]
    for ev in events.values():
        ev.sort()   # by time, then position
        for i,(_,pos) in enumerate(ev): res[pos] = [vals[p] for _,p in reversed(ev[max(0, i - n):i])]
    return res

def loop_lags(frame, keys, time, n):
    "The same loop: the time since each of the `n` earlier events (NaN past the first event)."
    events = {}
    for pos,(k,t) in enumerate(zip(frame[keys].itertuples(index=False, name=None), frame[time])):
        if not any(pd.isna(v) for v in k): events.setdefault(k, []).append((t, pos))
    res = np.full((len(frame), n), np.nan)
    for ev in events.values():
        ev.sort()
        for i,(t,pos) in enumerate(ev):
            for k,(s,_) in enumerate(reversed(ev[max(0, i - n):i])): res[pos, k] = t - s
    return res

def lists(col): return [list(v) for v in to_pandas(col)]

def test_movielens_lags_are_pandas_diff(ratings, as_backend):
    "The time since the user's last rating (and since the last of their occupation and gender), as pandas' `diff()`."
    df, splits = ratings
    made = ['timestamp_lag_user_id', 'timestamp_lag_occupation_gender']
    to = TabularGPU(as_backend(df), procs=[DifferenceLag('user_id', 'timestamp'),
                                           DifferenceLag(['occupation', 'gender'], 'timestamp'), Categorify],
                    cat_names=['user_id', 'occupation', 'gender'], cont_names=['timestamp'], y_names='rating',
                    splits=splits)
    assert [n for n in to.cont_names if 'lag' in n] == made
    frame, got = framed(df, splits), to_pandas(to.items)
    for c,keys in zip(made, (['user_id'], ['occupation', 'gender'])):
        want = pandas_lags(frame, keys, 'timestamp', 'timestamp')
        np.testing.assert_array_equal(got[c].to_numpy(), want, err_msg=c)
    assert got[made[0]].isna().sum() == frame.user_id.nunique()   # one first rating a user

def test_movielens_history_is_the_loop(ratings, as_backend):
    """Each rating's last 5 earlier movies of its user, the latest first (never its own), and the time since each:
    the plain loop's, exactly; Categorify encodes the lists' elements, the packed bag holds them."""
    df, splits = ratings
    h = History('item_id', 'user_id', 'timestamp', n=5, lags=True)
    to = TabularGPU(as_backend(df), procs=[h, Categorify, FillMissing], cat_names=['user_id', 'item_id'],
                    cont_names=['timestamp'], y_names='rating', splits=splits)
    frame, got = framed(df, splits), to_pandas(to.items)
    assert lists(got['item_id_last5_user_id']) == loop_history(frame, ['user_id'], 'timestamp', 'item_id', 5)
    assert to.multi_hot['item_id_last5_user_id'] is None and to.bag_widths['item_id_last5_user_id'] == 5
    want = loop_lags(frame, ['user_id'], 'timestamp', 5)   # NaN where fewer events: FillMissing fills those
    for k,c in enumerate(h.lag_names):
        np.testing.assert_array_equal(got[c].to_numpy(), np.where(np.isnan(want[:, k]), to.na_dict[c], want[:, k]))
    # the packed bag: the elements' codes in the vocabulary of the training rows' lists, padded with -1
    cats = to.packed()[0].cpu().numpy()
    a = list(to.cat_names).index('item_id_last5_user_id')
    vocab = to.classes['item_id_last5_user_id']
    assert [[vocab[c] for c in row if c >= 0] for row in cats[:50, a:a + 5]] == \
           [[v if v in vocab.o2i else '#na#' for v in row] for row in lists(got['item_id_last5_user_id'])[:50]]

def test_flights_previous_flight_of_each_plane(flights, as_backend):
    """Each plane's previous flight (by `tailnum`, missing for 2% of flights, which have none): its destination and
    departure delay, as pandas' `shift()`; the minutes since it and the change in distance, as its `diff()`."""
    df, splits = flights
    h = History(['dest', 'dep_delay'], 'tailnum', 'dep', n=1)
    dl = DifferenceLag('tailnum', 'dep', names=['dep', 'distance'])
    to = TabularGPU(as_backend(df), procs=[dl, h, Categorify, FillMissing], cat_names=['tailnum', 'dest', 'origin'],
                    cont_names=['dep', 'distance', 'dep_delay'], y_names='air_time', splits=splits)
    frame, got = framed(df, splits), to_pandas(to.items)
    s = frame.sort_values(['tailnum', 'dep', '_pos'])
    earlier = frame.tailnum.notna() & (s.groupby('tailnum').cumcount().sort_index() > 0)
    assert frame.tailnum.isna().sum() > 100 and earlier.mean() > 0.9
    for n in ('dest', 'dep_delay'):
        prev = s.groupby('tailnum')[n].shift().sort_index()
        have = got[f'{n}_last1_tailnum'].map(len).to_numpy() == 1
        np.testing.assert_array_equal(have, earlier.to_numpy())
        mine = got[f'{n}_last1_tailnum'][have].map(lambda v: v[0])
        pd.testing.assert_series_equal(mine.reset_index(drop=True), prev[have].reset_index(drop=True),
                                       check_names=False, check_dtype=False)
    for n in ('dep', 'distance'):   # a plane's first flight, or one with no tailnum: NaN, which FillMissing fills
        c, want = f'{n}_lag_tailnum', pandas_lags(frame, ['tailnum'], 'dep', n)
        np.testing.assert_array_equal(got[c].to_numpy(), np.where(np.isnan(want), to.na_dict[c], want))

def test_ties_keep_the_frames_order(ratings):
    "Ratings of a user at the same second come in the Tabular's order: its training rows first, each in split order."
    df, splits = ratings
    frame = framed(df, splits)
    ties = frame.duplicated(['user_id', 'timestamp'], keep=False)
    assert ties.sum() > 1000   # MovieLens users rate many movies in one second
    to = TabularGPU(df, procs=[History('item_id', 'user_id', 'timestamp', n=3), Categorify],
                    cat_names=['user_id', 'item_id'], cont_names=['timestamp'], y_names='rating', splits=splits)
    got = lists(to.items['item_id_last3_user_id'])
    want = loop_history(frame, ['user_id'], 'timestamp', 'item_id', 3)
    assert [g for g,t in zip(got, ties) if t] == [w for w,t in zip(want, ties) if t]

def test_list_slice_is_python_slicing(ratings, as_backend):
    "ListSlice cuts each list as Python slices it: a multi-hot column's first 2, last 2, and all but its ends."
    df, splits = ratings
    genres = df['genres'].tolist()
    for start,stop in ((0, 2), (-2, None), (1, -1)):
        to = TabularGPU(as_backend(df), procs=[ListSlice('genres', start, stop), Categorify], cat_names=['genres'],
                        y_names='rating', splits=splits)
        want = [list(genres[i][start:stop]) for i in np.concatenate(splits)]
        assert lists(to.items['genres']) == want, (start, stop)
    # after History: the latest 2 of the last 5
    to = TabularGPU(df, procs=[ListSlice('item_id_last5_user_id', 0, 2), History('item_id', 'user_id', 'timestamp'),
                               Categorify], cat_names=['user_id', 'item_id'], cont_names=['timestamp'],
                    y_names='rating', splits=splits)
    assert lists(to.items['item_id_last5_user_id']) == [h[:2] for h in loop_history(framed(df, splits), ['user_id'],
                                                                                     'timestamp', 'item_id', 5)]

def test_later_frame_follows_the_training_frame(ratings, as_backend):
    """A later frame's rows get the history they would have had had they followed the training frame: a Tabular over
    the ratings before a time learns each user's last events, and `new` of the later ratings (users seen and unseen)
    equals the loop over all of them; the state is each user's last events, sorted by user."""
    df, _ = ratings
    cut = df.timestamp.quantile(0.7)
    old, later = df[df.timestamp < cut], df[df.timestamp >= cut]
    assert later.user_id.isin(old.user_id).any() and not later.user_id.isin(old.user_id).all()
    h, dl = History('item_id', 'user_id', 'timestamp', n=4, lags=True), DifferenceLag('user_id', 'timestamp')
    kw = dict(procs=[h, dl, Categorify], cat_names=['user_id', 'item_id'], cont_names=['timestamp'], y_names='rating')
    to = TabularGPU(as_backend(old), **kw)
    new = to.new(as_backend(later))
    new.process()
    both = pd.concat([old, later]).reset_index(drop=True).assign(_pos=lambda d: np.arange(len(d)))
    rows = slice(len(old), None)
    got = to_pandas(new.items)
    assert lists(got['item_id_last4_user_id']) == loop_history(both, ['user_id'], 'timestamp', 'item_id', 4)[rows]
    np.testing.assert_array_equal(got['timestamp_lag_user_id'].to_numpy(),
                                  pandas_lags(both, ['user_id'], 'timestamp', 'timestamp')[rows])
    np.testing.assert_array_equal(got[h.lag_names].to_numpy(), loop_lags(both, ['user_id'], 'timestamp', 4)[rows])
    # the state: each user's last 4 ratings of the training frame, oldest first, users in order
    s = old.assign(_pos=np.arange(len(old))).sort_values(['user_id', 'timestamp', '_pos'])
    want = s.groupby('user_id').tail(4)[['user_id', 'item_id', 'timestamp']].reset_index(drop=True)
    pd.testing.assert_frame_equal(h.last, want, check_dtype=False)
    assert len(dl.last) == old.user_id.nunique()

def test_datetimes_are_nanoseconds(flights):
    "A datetime time is read as its nanoseconds whatever its unit or time zone (UTC): the same as the integers'."
    df, _ = flights
    t = pd.to_datetime(df[['year', 'month', 'day', 'hour', 'minute']]).iloc[:1000]
    ns = np.array([ts.value for ts in t])   # pandas' own nanoseconds of each Timestamp
    for u in ('s', 'ms', 'us', 'ns'):
        np.testing.assert_array_equal(event_values(t.astype(f'datetime64[{u}]'), 't', 'History')[0], ns)
    zoned = t.dt.tz_localize('America/New_York')
    np.testing.assert_array_equal(event_values(zoned, 't', 'History')[0], np.array([ts.value for ts in zoned]))

def test_datetimes_on_the_backend(flights, as_backend):
    """A datetime time on the frame's backend (cuDF: `astype('int64')` of a datetime is the int64 under it), with a
    missing one: its nanoseconds, whatever its unit, the same on the device as pandas' Timestamps'."""
    df, _ = flights
    t = pd.to_datetime(df[['year', 'month', 'day', 'hour', 'minute']]).iloc[:1000]
    ns = np.array([ts.value for ts in t])
    for u in ('s', 'ms', 'ns'):
        col = as_backend(pd.DataFrame({'t': t.astype(f'datetime64[{u}]').where(t.index != 3)}))['t']
        v, miss = map(to_host, event_values(col, 't', 'History'))   # device arrays on cuDF
        assert miss.tolist() == (t.index == 3).tolist()
        np.testing.assert_array_equal(v[~miss], ns[~miss], err_msg=u)

def test_datetime_cont_with_nat_is_an_error(ratings):
    """A datetime time in `cont_names` with a NaT (pandas' `to_numeric` would make it -2**63, and the lags run from
    -8.3e18): an error naming the column, before any work; the frame intact."""
    df, _ = ratings
    df = df.iloc[:500].assign(when=pd.to_datetime(df.timestamp.iloc[:500], unit='s'))
    df.loc[7, 'when'] = pd.NaT
    before = df.copy()
    with pytest.raises(ValueError, match=r"continuous column 'when' holds 1 missing datetime\(s\) \(NaT\)"):
        TabularGPU(df, procs=[DifferenceLag('user_id', 'when'), Categorify, FillMissing], cat_names=['user_id'],
                   cont_names=['when'], y_names='rating')
    pd.testing.assert_frame_equal(df, before)

def test_bad_input_names_the_column(ratings):
    "A key that is no column, a time that is not a number or a datetime, one with missing times, n < 1: errors first."
    df, _ = ratings
    df = df.iloc[:2000].copy()
    before = df.copy()
    kw = dict(cat_names=['user_id', 'item_id', 'zip_code'], cont_names=['timestamp'], y_names='rating')
    with pytest.raises(KeyError, match=r"History: column\(s\) \['session'\] are not in the frame"):
        TabularGPU(df, procs=[History('item_id', 'session', 'timestamp'), Categorify], **kw)
    with pytest.raises(TypeError, match=r"DifferenceLag: the time column 'zip_code' holds"):
        TabularGPU(df, procs=[DifferenceLag('user_id', 'zip_code'), Categorify], **kw)
    with pytest.raises(TypeError, match=r"DifferenceLag: column 'zip_code' holds .* not numbers or datetimes"):
        TabularGPU(df, procs=[DifferenceLag('user_id', 'timestamp', names='zip_code'), Categorify], **kw)
    with pytest.raises(ValueError, match=r"History would make column\(s\) \['item_id_last5_user_id'\], which the "
                                         r"frame already has"):
        TabularGPU(df.assign(item_id_last5_user_id=1), procs=[History('item_id', 'user_id', 'timestamp'), Categorify],
                   **{**kw, 'cat_names': kw['cat_names'] + ['item_id_last5_user_id']})
    for n in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match=r"History\(n=...\) must be an integer >= 1"):
            History('item_id', 'user_id', 'timestamp', n=n)
    gaps = df.assign(timestamp=df.timestamp.astype('float64').where(df.index % 7 > 0))
    with pytest.raises(ValueError, match=r"time column 'timestamp' holds 286 missing value\(s\)"):
        TabularGPU(gaps, procs=[History('item_id', 'user_id', 'timestamp'), Categorify, FillMissing], **kw)
    pd.testing.assert_frame_equal(df, before)
    t = TabularGPU(df, procs=[History('item_id', 'user_id', 'timestamp'), Categorify, FillMissing, Normalize], **kw)
    with pytest.raises(ValueError, match=r"time column 'timestamp' holds 1 missing value"):
        t.new(df.iloc[:5].assign(timestamp=[1., np.nan, 3., 4., 5.])).process()

@pytest.mark.slow
def test_the_chapters_blocks(tmp_path, monkeypatch):
    """docs/history.md's blocks run as written, in one namespace: the names their comments give, a model that learns
    (its valid RMSE below the spread of the ratings), an importance for every column; the side table joined as pandas'
    merge joins it, and the year's buckets."""
    import matplotlib
    from helpers.recipes import recipe
    matplotlib.use('Agg')
    monkeypatch.chdir(tmp_path)
    ns, threads = {}, torch.get_num_threads()   # the block sets one thread: given back for the worker's next tests
    exec('from fastai.tabular.all import *\nfrom fastai_gpu_tabular.all import *\n', ns)
    try: exec(compile(recipe('history'), '<recipe history>', 'exec'), ns)
    finally: torch.set_num_threads(threads)
    to, learn, imp = ns['to'], ns['learn'], ns['imp']
    assert (to.cat_names[5], to.cont_names[2]) == ('item_id_last10_user_id', 'timestamp_lag_user_id')
    assert learn.recorder.values[-1][2] < ns['df'].rating[~ns['df'].is_valid].std()
    assert set(imp.column) == set(to.cat_names) | set(to.cont_names)
    exec(compile(recipe('side-table'), '<recipe side-table>', 'exec'), ns)
    to, df, movies = ns['to'], ns['df'], ns['movies']
    assert (list(to.cont_names[2:]), to.cat_names[2]) == (['year', 'timestamp_lag_user_id'], 'year_bucket')
    years = df.iloc[np.concatenate([np.flatnonzero(~df.is_valid), np.flatnonzero(df.is_valid)])][['item_id']].merge(
        movies, on='item_id', how='left')['year'].to_numpy('f8')
    got = to.items['year'] * to.stds['year'] + to.means['year']   # Normalize undone: within 4 u of the year's 2000
    np.testing.assert_allclose(got[~np.isnan(years)], np.clip(years[~np.isnan(years)], 1950, None), rtol=0,
                               atol=4 * np.finfo('f8').eps * 2000)

def test_shifts_are_pandas_diff(ratings, as_backend):
    """`shift` k (a list: a column each): pandas' `groupby(...).diff(k)` after the sort, back (k > 0) and ahead (k < 0);
    a later frame follows the training frame by each key's last max(k) events, and its rows' next events are its own."""
    df, splits = ratings
    shifts = [1, 3, -1, -2]
    dl = DifferenceLag('user_id', 'timestamp', names=['timestamp', 'age'], shift=shifts)
    tags = ('lag', 'lag3', 'lead1', 'lead2')
    assert dl.made_names == [f'{n}_{t}_user_id' for n in ('timestamp', 'age') for t in tags]
    kw = dict(cat_names=['user_id'], cont_names=['timestamp', 'age'], y_names='rating')
    to = TabularGPU(as_backend(df), procs=[dl, Categorify], splits=splits, **kw)
    frame, got = framed(df, splits), to_pandas(to.items)
    s = frame.sort_values(['user_id', 'timestamp', '_pos'])
    for n in ('timestamp', 'age'):
        for k in shifts:
            want = s.groupby('user_id')[n].diff(k).sort_index().to_numpy('f8')
            assert np.isnan(want).any() and (want != 0).any()
            np.testing.assert_array_equal(got[lag_name(n, k, ['user_id'])].to_numpy(), want, err_msg=f'{n} {k}')
    # a later frame: back, as if it followed the training rows; ahead, within its own rows
    cut = df.timestamp.quantile(0.7)
    old, later = df[df.timestamp < cut], df[df.timestamp >= cut]
    dl = DifferenceLag('user_id', 'timestamp', shift=shifts)
    to = TabularGPU(as_backend(old), procs=[dl, Categorify], **kw)
    assert dl.last.groupby('user_id').size().max() == 3   # the largest shift back
    new = to.new(as_backend(later))
    new.process()
    got = to_pandas(new.items)
    both = pd.concat([old, later]).reset_index(drop=True).assign(_pos=lambda d: np.arange(len(d)))
    own = later.reset_index(drop=True).assign(_pos=lambda d: np.arange(len(d)))
    for k in shifts:
        f = both if k > 0 else own
        s = f.sort_values(['user_id', 'timestamp', '_pos'])
        want = s.groupby('user_id')['timestamp'].diff(k).sort_index().to_numpy('f8')[-len(later):]
        np.testing.assert_array_equal(got[lag_name('timestamp', k, ['user_id'])].to_numpy(), want, err_msg=str(k))

def test_bad_shifts_name_the_option():
    for shift in (0, 1.5, True, [], [1, 1], [2, 0], '1'):
        with pytest.raises(ValueError, match=r"DifferenceLag\(shift=...\) must be a nonzero integer"):
            DifferenceLag('user_id', 'timestamp', shift=shift)

def test_a_late_event_gets_nan_not_an_error(ratings):
    """A later row earlier than its user's last learned rating (a late event) gets a NaN lag, which FillMissing fills
    and flags, so that LogOp of the lag (the chapter's recipe) does not refuse the batch; it is in no one's history,
    and the other rows get what they get without it, through `new`, `test_dl` and `predict`."""
    from fastai_gpu_tabular.all import LogOp, tabular_learner
    df, _ = ratings
    cut = df.timestamp.quantile(0.7)
    old, later = df[df.timestamp < cut], df[df.timestamp >= cut].iloc[:500].reset_index(drop=True)
    seen = later.user_id.isin(old.user_id)
    user = later.user_id[seen].iloc[0]
    assert (later.user_id == user).sum() > 1   # the user's later rows follow it
    late = later[later.user_id == user].iloc[[0]].assign(timestamp=old.timestamp[old.user_id == user].max() - 1)
    rows = pd.concat([later.iloc[:250], late, later.iloc[250:]], ignore_index=True)   # the late row at 250
    lag = 'timestamp_lag_user_id'
    to = TabularGPU(old, procs=[DifferenceLag('user_id', 'timestamp'), LogOp(lag), Categorify, FillMissing],
                    cat_names=['user_id'], cont_names=['timestamp'], y_names='rating')
    learn = tabular_learner(to.dataloaders(bs=256), layers=[4])
    def processed(frame):
        t = to.new(frame)
        t.process()
        return to_pandas(t.items)
    got, ref = processed(rows), processed(later)
    assert got[f'{lag}_na'].iloc[250] and got[lag].iloc[250] == to.na_dict[lag]
    pd.testing.assert_frame_equal(got.drop(index=250).reset_index(drop=True), ref)
    x_cat, x_cont = learn.dls.test_dl(rows.drop(columns='rating'), bs=len(rows)).one_batch()[:2]
    assert x_cont.shape[0] == len(rows)
    np.testing.assert_array_equal(x_cont[250].cpu().numpy(), np.float32([late.timestamp.iloc[0], to.na_dict[lag]]))
    learn.predict(late.iloc[0].drop('rating'))   # a row alone: no error

def test_list_slice_pads_to_a_fixed_length(ratings, as_backend):
    """`pad=True`: Python's slice, then `pad_value` (None: a missing element) at its end up to the slice's length: the
    genres' first 2 and last 3, the last 5 movies' latest 4; a pad of the wrong kind, a slice of no fixed length:
    errors."""
    df, splits = ratings
    genres = [list(g) for g in df['genres']]
    for start,stop,pad in ((0, 2, '<pad>'), (-3, None, None), (1, 3, 'x')):
        to = TabularGPU(as_backend(df), procs=[ListSlice('genres', start, stop, pad=True, pad_value=pad), Categorify],
                        cat_names=['genres'], y_names='rating', splits=splits)
        w = stop - start if stop is not None else -start
        want = []
        for i in np.concatenate(splits):
            cut = genres[i][start:stop]
            want.append(cut + [pad] * (w - len(cut)))
        got = [[None if pd.isna(v) else v for v in g] for g in lists(to.items['genres'])]
        assert got == want and any(pad in g for g in want), (start, stop)
    to = TabularGPU(df, procs=[ListSlice('item_id_last5_user_id', 0, 4, pad=True, pad_value=0),
                               History('item_id', 'user_id', 'timestamp'), Categorify],
                    cat_names=['user_id', 'item_id'], cont_names=['timestamp'], y_names='rating', splits=splits)
    loop = loop_history(framed(df, splits), ['user_id'], 'timestamp', 'item_id', 5)
    assert lists(to.items['item_id_last5_user_id']) == [h[:4] + [0] * (4 - len(h[:4])) for h in loop]
    before = df.copy()
    with pytest.raises(TypeError, match=r"ListSlice: column 'genres' holds str elements, and pad_value=0"):
        TabularGPU(df, procs=[ListSlice('genres', 0, 2, pad=True, pad_value=0), Categorify], cat_names=['genres'],
                   y_names='rating')
    for kw in (dict(start=0), dict(start=2, stop=-1), dict(start=3, stop=3)):
        with pytest.raises(ValueError, match=r"ListSlice\(pad=True\) needs a fixed length"):
            ListSlice('genres', pad=True, **kw)
    for v in (True, [0], np.nan):
        with pytest.raises(ValueError, match=r"ListSlice\(pad_value=...\) must be"):
            ListSlice('genres', 0, 2, pad=True, pad_value=v)
    with pytest.raises(ValueError, match=r"ListSlice\(pad=...\) must be True or False"): ListSlice('genres', 0, 2, 1)
    pd.testing.assert_frame_equal(df, before)
