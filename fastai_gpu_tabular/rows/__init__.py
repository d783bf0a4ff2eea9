"""The packed rows and what serves them: the layout and gathers (pack.py), the one-gather loader (loader.py), the rows
on disk (chunks.py) and their shuffled stream (stream.py). No op and no model: rows/ imports only the package's top
modules. `from fastai_gpu_tabular.all import *` brings them."""
