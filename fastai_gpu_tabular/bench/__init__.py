"""`python -m fastai_gpu_tabular.bench`: this package against stock fastai, measured in the same run on the same
machine.

One module per suite: `fastai_suite` (the default `fastai` suite: preprocessing, loader, training and memory of stock
fastai and this package, each `contender` in its own process; its JSON schema is in its docstring), `embeddings`,
`multi_hot`...; `machine`, `timing` and `report` hold what they share, `cli` the command line. Importing it starts
nothing (no torch, fastai or cuDF): each suite imports what it measures when it runs."""
from .cli import *
from .contender import *
from .embeddings import embedding_suite
from .fastai_suite import *
from .machine import *
from .metrics import metric_suite
from .multi_hot import multi_hot_suite
from .report import *
from .timing import *

__all__ = ['CONTENDERS', 'SCHEMA_VERSION', 'SUITES', 'hardware', 'versions', 'git_state', 'RSSMeter', 'time_loader',
           'bare_epoch', 'gather_bandwidth', 'run_contender', 'compute_ratios', 'performance_targets', 'format_table',
           'plot_ratios', 'run_bench', 'run_suite', 'format_suite', 'embedding_suite', 'multi_hot_suite',
           'metric_suite', 'main']
