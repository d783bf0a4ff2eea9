"""Dask frames (pandas or cuDF partitions): `TabularGPU(ddf, ...)` gives a `TabularDask` (tabular.py), whose procs
learn fastai's state over the partitions (ops/procs.py) with pandas' statistics bit for bit (stats.py), and whose
processed rows are packed a partition at a time into chunks on disk. Each module here says which op it distributes.
Importing it does not import Dask."""
from . import aggregate, stats, tabular  # noqa: F401 (aggregate: imported to register Groupby of a Dask frame)
from .stats import *
from .tabular import *

__all__ = [*tabular.__all__, *stats.__all__]
