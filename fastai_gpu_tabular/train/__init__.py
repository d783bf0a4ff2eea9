"""Training on the packed rows: the model (model.py), tabular_learner (learner.py), LAMB (optimizer.py), the metrics,
permutation importance and fastai's distrib_ctx with the loader (distributed.py). Imports rows/ and the top modules,
never ops/ (a model sees codes and floats, not the frame). `from fastai_gpu_tabular.all import *` brings them."""
