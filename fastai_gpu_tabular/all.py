"""Everything a notebook needs: `from fastai_gpu_tabular.all import *`, after `from fastai.tabular.all import *` so that
our `Categorify` (fastai's, plus min_freq/max_vocab) and `tabular_learner` (fastai's, plus multi-hot/sparse/fused) win."""
from .backend import *
from .procs import *
from .loader import *
from .core import *
from .model import *
from .learner import *
from .data import *
