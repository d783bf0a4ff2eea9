"GPU tabular deep learning for fastai: cuDF preprocessing, device-resident batch loading, LAMB at 200k-row batches."
__version__ = "0.1.0"
