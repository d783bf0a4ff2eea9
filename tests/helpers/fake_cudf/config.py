"The version the cuDF stand-in serves, its API (tests/data/cudf_api/<version>.json) and cuDF's options."
import types
from pathlib import Path

__all__ = ['CONF', 'API_DIR', 'VERSIONS']

API_DIR = Path(__file__).parents[2]/'data'/'cudf_api'
VERSIONS = ('26.06', '26.10')
# `mode.pandas_compatible` is what cudf.pandas sets (options.py)
CONF = types.SimpleNamespace(version=None, api=None, options={'mode.pandas_compatible': False})
