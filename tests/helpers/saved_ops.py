"""A saved Tabular holding every op the package saves (tests/data/saved-ops-v1): the recipe that wrote it, with the
code of main before the package had folders (5512f99, when each op's saved type was `fastai_gpu_tabular.<module>.<op>`),
and that test_saved loads with today's. `cd tests && python -m helpers.saved_ops DIR` writes the folder again."""
import sys
import numpy as np
import pandas as pd
from fastai.tabular.all import Categorify, FillMissing, Normalize
from fastai_gpu_tabular.all import (
    Bucketize,
    Clip,
    DifferenceLag,
    HashBucket,
    HashedCross,
    History,
    JoinExternal,
    JoinGroupby,
    ListSlice,
    LogOp,
    TabularGPU,
    TargetEncode,
)
from fastai_gpu_tabular.datasets import load_movielens_100k

def ops_frame() -> pd.DataFrame:
    "MovieLens 100K's first 600 ratings in time, a copy of age to log and one to clip, every fifth row validation."
    df = load_movielens_100k().iloc[:600].reset_index(drop=True)
    return df.assign(age_log=df.age.astype('f8'), age_clip=df.age.astype('f8'), is_valid=np.arange(len(df)) % 5 == 0)

def ops_tabular(df:pd.DataFrame|None=None) -> TabularGPU:
    "Every saved op of the package, then fastai's, on `ops_frame()`."
    df = ops_frame() if df is None else df
    items = pd.unique(df.item_id)[::2]
    side = pd.DataFrame({'item_id': items, 'item_score': np.arange(len(items)) * 0.25,
                         'item_group': [f'g{i % 5}' for i in range(len(items))]})
    procs = [JoinExternal(side, 'item_id'), HashBucket('zip_code', 16, seed=3), HashedCross([('gender', 'occupation')]),
             TargetEncode(['occupation'], folds=0), JoinGroupby('occupation', ['age']),
             DifferenceLag('user_id', 'timestamp'), History('item_id', 'user_id', 'timestamp', n=3, lags=True),
             ListSlice('item_id_last3_user_id', 0, 2), Bucketize('release_year', q=4), LogOp('age_log'),
             Clip('age_clip', 20, 50), Categorify, FillMissing, Normalize]
    return TabularGPU(df, procs=procs, cat_names=['user_id', 'item_id', 'gender', 'occupation', 'zip_code', 'genres'],
                      cont_names=['timestamp', 'age', 'release_year', 'age_log', 'age_clip'], y_names='rating',
                      splits='is_valid', backend='pandas')

if __name__ == '__main__': ops_tabular().save(sys.argv[1], progress=False)
