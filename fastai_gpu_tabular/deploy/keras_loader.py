"""Keras 3 and TensorFlow on the packed rows: a `keras.utils.PyDataset` for `fit` (one gather a batch, a new
permutation an epoch), batches as TF tensors through DLPack, and the inputs and bag layer a Keras model needs."""
from __future__ import annotations

import functools

from ..extras import import_extra
from ..rows.loader import BatchDataLoader
from ..rows.pack import cat_spans, cat_widths

__all__ = ['as_keras_dataset', 'to_tf', 'keras_inputs', 'bag_embedding']

def to_tf(batch):
    """Torch tensors (a tensor, or a tuple/list/dict of them) as TensorFlow tensors through DLPack: no copy through
    the host, on the tensors' own device. Loader batches are strided views of the packed rows, which TF rejects:
    each is made `.contiguous()` first (a copy on the device only when it is a view)."""
    tf = import_extra('tensorflow', 'tf', 'to_tf')
    def _one(t): return tf.experimental.dlpack.from_dlpack(t.contiguous().__dlpack__())
    if isinstance(batch, dict): return {k: _one(v) for k,v in batch.items()}
    if isinstance(batch, (tuple, list)): return type(batch)(_one(t) for t in batch)
    return _one(batch)

def _column_spans(to) -> list:
    "`(name, start, stop, kind)` of each column in the packed `(cats, conts)`: 'cat' (multi-hot blocks too) or 'cont'."
    cats = [(n, a, b, 'cat') for n,(a,b) in zip(to.cat_names, cat_spans(cat_widths(to)))]
    return cats + [(n, j, j+1, 'cont') for j,n in enumerate(to.cont_names)]

def _to_numpy(d):
    "A batch's tensors (a dict of them, or one) as NumPy arrays on the host."
    if isinstance(d, dict): return {k: v.cpu().numpy() for k,v in d.items()}
    return d.cpu().numpy()

def _batch_converter(keras_backend:str):
    "How a batch's torch tensors reach Keras' `keras_backend`: as they are (torch), by DLPack (tensorflow), else NumPy."
    if keras_backend == 'torch': return lambda d: d
    if keras_backend == 'tensorflow': return to_tf
    return _to_numpy

@functools.cache
def _dataset_cls():
    keras = import_extra('keras', 'keras', 'as_keras_dataset')
    class TabularPyDataset(keras.utils.PyDataset):
        """A `BatchDataLoader`'s rows as a Keras `PyDataset`: batch `i` is one gather of the packed rows (a slice when
        not shuffled), split into a dict of column views; `on_epoch_end` draws the next permutation."""
        def __init__(self, dl):
            super().__init__()
            self.dl,self.cols,self.convert = dl,_column_spans(dl.dataset),_batch_converter(keras.backend.backend())
            self.order = dl.draw_order()   # the loader's own: a permutation, a weighted draw, or None (in order)

        @property
        def num_batches(self): return len(self.dl)
        def __len__(self): return len(self.dl)

        def __getitem__(self, i):
            if not 0 <= i < self.num_batches: raise IndexError(f"batch {i} of {self.num_batches}")
            a,b = i * self.dl.bs, min((i + 1) * self.dl.bs, self.dl.n)
            cats,conts,*ys = self.dl.create_batch(slice(a, b) if self.order is None else self.order[a:b])
            x = self.convert({n: (cats if kind == 'cat' else conts)[:, s:e] for n,s,e,kind in self.cols})
            return (x, self.convert(ys[0])) if ys else (x,)

        def on_epoch_end(self): self.order = self.dl.draw_order()
    return TabularPyDataset

def as_keras_dataset(dl:BatchDataLoader):
    """A `keras.utils.PyDataset` over a `BatchDataLoader`'s packed rows, for `model.fit(as_keras_dataset(dls.train),
    validation_data=as_keras_dataset(dls.valid))`. Each batch is `(x, y)`: `x` a dict of one tensor per column ([bs, 1]
    codes for a cat, [bs, slots] codes padded with -1 for a multi-hot column, [bs, 1] float32 for a cont), `y` the
    targets [bs, n_y]. On Keras' torch backend the tensors are views of the batch's one gather (zero-copy); on the
    TensorFlow backend they go to TF through DLPack (`to_tf`); on others through NumPy. Keras' TensorFlow trainer
    feeds any PyDataset through `tf.data.Dataset.from_generator`, which copies through NumPy: for batches that stay on
    the device there, write the loop (`for x,y in ds: ...`, then `ds.on_epoch_end()`), or use `to_tf` on `dl`'s own
    batches."""
    return _dataset_cls()(dl)

def keras_inputs(dl:BatchDataLoader) -> dict:
    "`keras.Input`s matching `as_keras_dataset(dl)`'s batches, by column name: int32 codes and float32 values."
    keras = import_extra('keras', 'keras', 'keras_inputs')
    return {n: keras.Input(shape=(e - s,), dtype='float32' if kind == 'cont' else 'int32', name=n)
            for n,s,e,kind in _column_spans(dl.dataset)}

@functools.cache
def _bag_cls():
    keras = import_extra('keras', 'keras', 'bag_embedding')
    from keras import ops
    class BagEmbedding(keras.layers.Layer):
        "Embeddings of a multi-hot column's slots (codes padded with -1), summed or averaged over the codes present."
        def __init__(self, input_dim, output_dim, mode='mean', **kwargs):
            super().__init__(**kwargs)
            if mode not in ('mean', 'sum'): raise ValueError(f"mode must be 'mean' or 'sum', not {mode!r}")
            self.input_dim,self.output_dim,self.mode = input_dim,output_dim,mode
            init = keras.initializers.TruncatedNormal(stddev=0.01)   # fastai's Embedding init
            self.embedding = keras.layers.Embedding(input_dim, output_dim, embeddings_initializer=init)
        def call(self, codes):
            mask = ops.expand_dims(ops.cast(codes >= 0, self.compute_dtype), -1)
            out = ops.sum(self.embedding(ops.maximum(codes, 0)) * mask, axis=1)
            return out / ops.maximum(ops.sum(mask, axis=1), 1.) if self.mode == 'mean' else out
        def get_config(self):
            return {**super().get_config(), 'input_dim': self.input_dim, 'output_dim': self.output_dim,
                    'mode': self.mode}
    return BagEmbedding

def bag_embedding(input_dim:int, output_dim:int, mode:str='mean', **kwargs):
    """A Keras layer embedding a multi-hot column's [bs, slots] codes (-1 = padding) as the mean or sum of the codes'
    embeddings: what `TabularModelGPU` does with `bag_mode`."""
    return _bag_cls()(input_dim, output_dim, mode, **kwargs)
