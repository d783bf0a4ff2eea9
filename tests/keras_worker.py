"""Run by tests/test_keras.py in a fresh process (KERAS_BACKEND is read once, when keras is imported): checks
`as_keras_dataset`/`to_tf`/`bag_embedding` on MovieLens and trains a Keras model on them; prints a JSON report."""
import json
import keras
import numpy as np
import torch
from fastai.tabular.all import CategoryBlock, FillMissing, Normalize, RandomSplitter
from keras import ops
from fastai_gpu_tabular.all import Categorify, TabularGPU, load_movielens
from fastai_gpu_tabular.deploy.keras_loader import as_keras_dataset, bag_embedding, keras_inputs, to_tf
from fastai_gpu_tabular.train.model import masked_bag_lookup

def np_(t): return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)

def main():
    backend,res = keras.backend.backend(),{}
    torch.manual_seed(0); keras.utils.set_random_seed(0)
    df = load_movielens().iloc[:30_000]   # NaN years, pipe-separated genres
    df['liked'] = (df.rating > 3).astype('int64')
    to = TabularGPU(df, procs=[Categorify, FillMissing, Normalize], cat_names=['userId', 'movieId', 'genres'],
                    cont_names=['year'], y_names='liked', y_block=CategoryBlock(), multi_hot={'genres': '|'},
                    splits=RandomSplitter(0.2, seed=0)(range(len(df))))
    dls = to.dataloaders(bs=1024)
    tr,va = as_keras_dataset(dls.train),as_keras_dataset(dls.valid)
    res['len'] = [len(tr), len(dls.train), len(va), len(dls.valid)]

    # a training batch is the packed rows at this epoch's permutation, split by column
    x,y = tr[1]
    cats,conts,ys = to.train.packed()
    idx = tr.order[1024:2048].cpu()
    res['shapes'] = {k: list(v.shape) for k,v in x.items()}
    res['types'] = sorted({type(v).__name__ for v in [*x.values(), y]})
    genres = slice(2, 2 + to.bag_widths['genres'])
    res['train_batch_equal'] = bool((np_(x['genres']) == cats[idx][:, genres].numpy()).all()
                                    and (np_(x['movieId'])[:, 0] == cats[idx][:, 1].numpy()).all()
                                    and np.allclose(np_(x['year'])[:, 0], conts[idx][:, 0].numpy())
                                    and (np_(y)[:, 0] == ys[idx][:, 0].numpy()).all())
    if backend == 'torch':   # one gather: every column a view of it; and Keras takes the tensors as they are
        from keras.src.backend.torch.core import convert_to_tensor
        res['one_storage'] = len({v.untyped_storage().data_ptr() for v in x.values()}) == 1
        res['zero_copy'] = all(convert_to_tensor(v).data_ptr() == v.data_ptr() for v in x.values())
    order = tr.order.clone()
    tr.on_epoch_end()
    res['new_permutation'] = bool((tr.order != order).any() and (tr.order.sort().values == torch.arange(24_000)).all())
    # validation batches: the rows in order, every row once
    ids = np.concatenate([np_(va[i][0]['movieId'])[:, 0] for i in range(len(va))])
    res['valid_in_order'] = bool(np.array_equal(ids, to.valid.packed()[0][:, 1].numpy()))
    if backend == 'tensorflow':   # to_tf on a loader batch: strided views, made contiguous, through DLPack
        import tensorflow as tf
        b = dls.valid.one_batch()
        t = to_tf(b)
        res['to_tf'] = bool(all(isinstance(o, tf.Tensor) for o in t) and not b[0].is_contiguous()
                            and all(np.array_equal(o.numpy(), p.numpy()) for o,p in zip(t, b)))

    # the bag layer is the torch model's masked bag mean
    bag = bag_embedding(len(to.classes['genres']), 4)
    out = np_(bag(x['genres']))
    w = torch.as_tensor(np_(bag.embedding.embeddings))
    ref = masked_bag_lookup(torch.as_tensor(np_(x['genres'])), w).numpy()
    res['bag_matches_torch'] = bool(np.allclose(out, ref, atol=1e-6))

    # embeddings + a masked bag mean + dense, trained with fit
    ins = keras_inputs(dls.train)
    feats = [bag_embedding(len(to.classes[n]), 8)(ins[n]) if n in to.bag_widths else
             keras.layers.Flatten()(keras.layers.Embedding(len(to.classes[n]), 8)(ins[n])) for n in to.cat_names]
    h = keras.layers.Dense(32, activation='relu')(keras.layers.Concatenate()(feats + [ins[n] for n in to.cont_names]))
    model = keras.Model(ins, keras.layers.Dense(2, activation='softmax')(h))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss='sparse_categorical_crossentropy')
    hist = model.fit(tr, validation_data=va, epochs=2, verbose=0).history
    p = ys.float().mean().item()   # the training rows' share of likes: the log loss of knowing only that
    res.update(loss=hist['loss'], val_loss=hist['val_loss'], prior_loss=-(p*np.log(p) + (1-p)*np.log(1-p)))

    if backend == 'tensorflow':   # a custom TF loop: the dataset's batches are TF tensors (through DLPack)
        import tensorflow as tf
        opt,losses = keras.optimizers.Adam(1e-3),[]
        for _epoch in range(2):
            tot = 0.
            for x,yb in tr:
                with tf.GradientTape() as tape:
                    loss = ops.mean(keras.losses.sparse_categorical_crossentropy(yb, model(x, training=True)))
                opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
                tot += float(loss)
            tr.on_epoch_end()
            losses.append(tot / len(tr))
        res['tf_loop_loss'] = losses
    print('RESULT ' + json.dumps(res))

if __name__ == '__main__': main()
