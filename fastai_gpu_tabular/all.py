"Everything a notebook needs: `from fastai_gpu_tabular.all import *` (after `from fastai.tabular.all import *`)."
from .backend import *
from .procs import *
from .loader import *
from .core import *
