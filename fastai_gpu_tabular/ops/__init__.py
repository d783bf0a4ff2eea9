"""The ops: fastai's procs on either backend (procs.py) and the package's own, one family a module (hashing, target,
groupby, history, joins, numeric), with their learned state as JSON (proc_state.py). They read the frame through
backend.py and import nothing of rows/, train/ or deploy/. `from fastai_gpu_tabular.all import *` brings them."""
