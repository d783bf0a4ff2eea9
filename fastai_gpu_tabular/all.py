"""Everything a notebook needs: `from fastai_gpu_tabular.all import *`, after `from fastai.tabular.all import *` so that
ours win where they extend fastai's: `Categorify` (plus min_freq/max_vocab), `tabular_learner` (plus multi-hot, sparse
and fused embeddings) and `Lamb` (the same math and state, with no host sync in `step`)."""
from .extras import *
from .backend import *
from .checks import *
from .prepare import *
from .procs import *
from .hashing import *
from .target import *
from .groupby import *
from .history import *
from .joins import *
from .numeric import *
from .pack import *
from .loader import *
from .core import *
from .data import *
from .model import *
from .learner import *
from .optimizer import *
from .collectives import *
from .metrics import *
from .datasets import *
from .export import *
from .importance import *
from .keras_loader import *
from .distributed import *
from .chunks import *
from .stream import *
from .dask import *
from .progress import *
from .proc_state import *
from .saved import *
