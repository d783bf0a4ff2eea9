"""What leaves the package: ONNX, torch.export and Triton (export.py), Keras and TensorFlow (keras_loader.py). Imports
ops/ (the procs become graph nodes) and rows/. `from fastai_gpu_tabular.all import *` brings them."""
