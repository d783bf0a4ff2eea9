"""Everything a notebook needs: `from fastai_gpu_tabular.all import *`, after `from fastai.tabular.all import *` so that
ours win where they extend fastai's: `Categorify` (plus min_freq/max_vocab), `tabular_learner` (plus multi-hot, sparse
and fused embeddings) and `Lamb` (the same math and state, with no host sync in `step`)."""
from .extras import *
from .backend import *
from .checks import *
from .prepare import *
from .ops.procs import *
from .ops.hashing import *
from .ops.target import *
from .ops.groupby import *
from .ops.aggregate import *
from .ops.history import *
from .ops.joins import *
from .ops.numeric import *
from .rows.pack import *
from .rows.loader import *
from .core import *
from .data import *
from .train.model import *
from .train.learner import *
from .train.optimizer import *
from .collectives import *
from .train.metrics import *
from .datasets import *
from .deploy.export import *
from .train.importance import *
from .deploy.keras_loader import *
from .train.distributed import *
from .rows.chunks import *
from .rows.stream import *
from .dask import *
from .progress import *
from .ops.proc_state import *
from .saved import *
