"""Batches of features: which examples share a batch, and how wide each batch is.

Fixed shapes (TPU, `--padding=max_seq_length`): batches padded to `max_seq_length` from a
seeded shuffle, as Google's scripts. Dynamic padding (CPU/GPU default): batches cut to
their longest example, rounded up to `PAD_MULTIPLE`; training draws pools of
`POOL_BATCHES` shuffled batches, sorts each pool by length and shuffles its batches;
inference sorts by length and restores the order. A training run is a fixed plan of
batches drawn from the seed alone, so a resumed run skips exactly what it trained on.
"""

import math
from typing import Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

from adapter_bert.data.features import pad_to_multiple_of_batch
from adapter_bert.errors import UserError

# Batch widths are rounded up to a multiple of this, which bounds the number of distinct
# shapes (and so retracing / XLA compilations) and keeps matmul sizes friendly.
PAD_MULTIPLE = 8
# Training batches are bucketed by length within pools of this many batches.
POOL_BATCHES = 50
# Fill value of positions of variable-width outputs (e.g. span logits) that lie
# beyond a batch's width: far below any real logit, so post-processing never picks it.
OUTPUT_FILL = -1e4


def example_lengths(features: Dict[str, np.ndarray]) -> np.ndarray:
    """Number of real tokens (input_mask ones) of every example."""
    return features["input_mask"].sum(axis=1).astype(np.int32)


def padded_widths(lengths: np.ndarray, max_seq_length: int) -> np.ndarray:
    """Lengths rounded up to a multiple of PAD_MULTIPLE, capped at max_seq_length."""
    widths = -(-np.maximum(lengths, 1) // PAD_MULTIPLE) * PAD_MULTIPLE
    return np.minimum(widths, max_seq_length).astype(np.int32)


def training_batch_plan(num_examples: int, batch_size: int, num_steps: int, seed: int,
                        lengths: Optional[np.ndarray] = None,
                        pool_batches: int = POOL_BATCHES, shuffle: bool = True) -> np.ndarray:
    """Example indices of every training batch, `[num_steps, batch_size]`, from the seed
    alone.

    Epochs are seeded permutations; without `lengths` they are cut in order (Google's
    shuffle-and-repeat), with them each pool of `pool_batches` batches is sorted by length,
    cut, and its batches shuffled. `shuffle=False`: the examples in their order, epoch
    after epoch (Keras' `fit(shuffle=False)`).
    """
    if num_examples < 1 or batch_size < 1 or num_steps < 1:
        raise UserError(f"cannot plan {num_steps} batches of {batch_size} from "
                        f"{num_examples} examples")
    rng = np.random.default_rng(seed)
    needed = num_steps * batch_size
    pool = batch_size * max(1, pool_batches)
    # One extra epoch so the last (possibly partial) pool still yields full batches.
    epochs = math.ceil(needed / num_examples) + 1
    if not shuffle:
        return np.tile(np.arange(num_examples), epochs)[:needed].reshape(num_steps, batch_size)
    stream = np.concatenate([rng.permutation(num_examples) for _ in range(epochs)])
    if lengths is None:
        return stream[:needed].reshape(num_steps, batch_size)
    batches = []
    for start in range(0, len(stream), pool):
        chunk = stream[start:start + pool]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        full = len(chunk) // batch_size * batch_size
        pool_batches_ = chunk[:full].reshape(-1, batch_size)
        batches.extend(pool_batches_[rng.permutation(len(pool_batches_))])
        if len(batches) >= num_steps:
            break
    return np.stack(batches[:num_steps])


def _sequence_keys(features: Dict[str, np.ndarray], input_keys: Sequence[str]):
    return [k for k in input_keys if features[k].ndim == 2]


def _split_element(columns, input_keys, label_keys, weight_key=None):
    """(inputs, labels) of a dict of columns, or (inputs, labels, weights) with `weight_key`;
    the inputs alone without `label_keys`."""
    inputs = {k: columns[k] for k in input_keys}
    if not label_keys:
        return inputs
    labels = ({k: columns[k] for k in label_keys} if len(label_keys) > 1
              else columns[label_keys[0]])
    return (inputs, labels, columns[weight_key]) if weight_key else (inputs, labels)


def training_dataset(features: Dict[str, np.ndarray], plan: np.ndarray,
                     input_keys: Sequence[str], label_keys: Sequence[str],
                     dynamic: bool, weight_key: Optional[str] = None) -> tf.data.Dataset:
    """The batches of a training plan as `(inputs, labels)`: exactly `len(plan)` of them (so
    `.skip(n)` resumes after n steps), each cut to its widest example when `dynamic`.
    Several `label_keys` give labels as a dict; `weight_key` adds each example's weight
    (`(inputs, labels, weights)`, Keras' `sample_weight`).

    Each batch is gathered from the NumPy arrays where they lie: a `tf.constant` of them
    would hold a second copy of every feature for the whole run (gigabytes for a file of
    a few hundred thousand rows).
    """
    keys = list(dict.fromkeys([*input_keys, *label_keys, *([weight_key] if weight_key else [])]))
    sequence_keys = _sequence_keys(features, input_keys)
    batch = plan.shape[1]
    widths = padded_widths(example_lengths(features), features[input_keys[0]].shape[1]) \
        if dynamic else None

    def batches():
        for rows in plan:
            width = int(widths[rows].max()) if dynamic else None
            yield _split_element(
                {k: features[k][rows, :width] if k in sequence_keys else features[k][rows]
                 for k in keys}, input_keys, label_keys, weight_key)

    def spec(key):
        shape = (batch,) + features[key].shape[1:]
        if dynamic and key in sequence_keys:
            shape = (batch, None)
        return tf.TensorSpec(shape, tf.as_dtype(features[key].dtype))

    signature = _split_element({k: spec(k) for k in keys}, input_keys, label_keys, weight_key)
    return tf.data.Dataset.from_generator(batches, output_signature=signature).prefetch(
        tf.data.AUTOTUNE)


def inference_order(features: Dict[str, np.ndarray], dynamic: bool) -> np.ndarray:
    """The order examples are run in: by length when padding is dynamic, else as given."""
    count = len(features["input_mask"])
    if not dynamic:
        return np.arange(count)
    return np.argsort(example_lengths(features), kind="stable")


def inference_dataset(features: Dict[str, np.ndarray], input_keys: Sequence[str],
                      batch_size: int, order: np.ndarray, dynamic: bool,
                      drop_remainder: bool = False, label_keys: Sequence[str] = (),
                      weight_key: Optional[str] = None) -> tf.data.Dataset:
    """Batches of model inputs in `order`, each cut to its widest example if dynamic; with
    `label_keys` (and `weight_key`) as `(inputs, labels[, weights])`, for Keras' evaluate."""
    keys = list(dict.fromkeys([*input_keys, *label_keys, *([weight_key] if weight_key else [])]))
    columns = {k: features[k][order] for k in keys}
    max_len = columns[input_keys[0]].shape[1]
    widths = padded_widths(example_lengths({"input_mask": features["input_mask"][order]}),
                           max_len)
    dataset = tf.data.Dataset.from_tensor_slices((columns, widths))
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    sequence_keys = _sequence_keys(features, input_keys)

    def element(batch, width):
        width = tf.reduce_max(width) if dynamic else max_len
        return _split_element({k: v[:, :width] if k in sequence_keys else v
                               for k, v in batch.items()}, input_keys, label_keys, weight_key)

    return dataset.map(element).prefetch(tf.data.AUTOTUNE)


def _to_numpy(output, width: int, per_token: bool) -> np.ndarray:
    """Keras predict output -> array; per-token outputs padded back to `width`."""
    if isinstance(output, tf.RaggedTensor):
        # Batches of different widths: pad every row back to the full width.
        shape = [None, width] + output.shape[2:].as_list()
        return output.to_tensor(default_value=OUTPUT_FILL, shape=shape).numpy()
    output = np.asarray(output)
    if per_token and output.shape[1] < width:
        pad = [(0, 0), (0, width - output.shape[1])] + [(0, 0)] * (output.ndim - 2)
        output = np.pad(output, pad, constant_values=OUTPUT_FILL)
    return output


def predict_features(model, features: Dict[str, np.ndarray], input_keys: Sequence[str],
                     batch_size: int, dynamic: bool, static_shapes: bool,
                     per_token_outputs: Sequence[str] = (), verbose: int = 0,
                     callbacks: Sequence = ()):
    """Model outputs for every example of `features`, in the features' order.

    `dynamic`: sorted by length and cut to each batch's widest example, `per_token_outputs`
    padded back with `OUTPUT_FILL`. `static_shapes` (TPU): fake examples fill the last batch
    and are dropped from the outputs. Returns an array (or dict) with one row per example.
    """
    count = len(features["input_mask"])
    dynamic = dynamic and not static_shapes
    if static_shapes:
        # TPUs need full batches: fake examples (is_real_example=0) fill the last one
        # and are dropped from the outputs, as Google's PaddingInputExample.
        features = pad_to_multiple_of_batch(features, batch_size)
    order = inference_order(features, dynamic)
    dataset = inference_dataset(features, input_keys, batch_size, order, dynamic,
                                drop_remainder=static_shapes)
    outputs = model.predict(dataset, verbose=verbose, callbacks=list(callbacks))
    width = features["input_mask"].shape[1]
    inverse = np.argsort(order, kind="stable")[:count]

    def restore(output, per_token=False):
        return _to_numpy(output, width, per_token)[inverse]

    if isinstance(outputs, dict):
        return {k: restore(v, k in per_token_outputs) for k, v in outputs.items()}
    return restore(outputs)
