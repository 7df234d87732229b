"""Texts to the `tf.data` pipeline Keras' methods get: the thin step before `keras.Model`'s
own `fit`, `evaluate` and `predict`, as keras-hub's `PipelineModel` has it.

Texts in memory are tokenised at once (one call of the traced tokenizer) and each batch
is cut to its longest row; a `tf.data.Dataset` of strings keeps its batches (unbatched
ones are batched) and the preprocessing is mapped over it.
"""

from typing import Optional

import numpy as np
import tensorflow as tf
import tf_keras as keras

from adapter_bert.errors import UserError
from adapter_bert.library.inputs import label_array, sample_weights, text_columns
from adapter_bert.library.preprocessing import TextPreprocessor
from adapter_bert.serving.export import trim_to_longest


def text_batches(x: tf.data.Dataset, batch: int) -> tf.data.Dataset:
    """A dataset of texts (with labels and weights) as batches, checked: its own batches,
    or batches of `batch` rows when its elements are single rows."""
    spec = x.element_spec
    text = spec[0] if isinstance(spec, tuple) else spec
    if not is_text(text):
        raise UserError(f"a dataset's elements must be texts, (text, label) or (text, "
                        f"label, weight), a text being a string or a (first, second) "
                        f"pair of strings; got {spec}")
    first = text[0] if isinstance(text, tuple) else text
    return x if first.shape.rank else x.batch(batch)


def mapped(batches: tf.data.Dataset, preprocessor: TextPreprocessor,
           labelled: bool) -> tf.data.Dataset:
    """`text_batches` with the preprocessing mapped over them: features, label ids and
    weights (features alone unless `labelled`)."""

    @tf.autograph.experimental.do_not_convert
    def preprocess(*element):
        x, y, weight = keras.utils.unpack_x_y_sample_weight(element)
        features = preprocessor(x)
        if not labelled or y is None:
            return features
        y = preprocessor.label_ids(y)
        return (features, y) if weight is None else (features, y, weight)
    return batches.map(preprocess, tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def in_memory(preprocessor: TextPreprocessor, x, y, sample_weight, batch: int,
              shuffle_seed: Optional[int]) -> tf.data.Dataset:
    """Batches of texts held in memory (and labels, weights), tokenised at once;
    shuffled each epoch when `shuffle_seed` is not None."""
    texts, second = text_columns(x)
    columns = [features_of(preprocessor, texts, second)]
    if y is not None:
        columns.append(label_array(y, len(texts), preprocessor.labels))
        if sample_weight is not None:
            columns.append(sample_weights(sample_weight, len(texts)))
    data = tf.data.Dataset.from_tensor_slices(tuple(columns) if len(columns) > 1
                                              else columns[0])
    if shuffle_seed is not None:
        data = data.shuffle(len(texts), seed=shuffle_seed, reshuffle_each_iteration=True)
    return batched(data, batch, preprocessor.static_shapes)


def batched(data: tf.data.Dataset, batch: int, static_shapes: bool) -> tf.data.Dataset:
    """Batches of `data`'s rows of features (and labels, weights), each cut to its
    longest row unless the shapes must stay static."""

    @tf.autograph.experimental.do_not_convert
    def trimmed(features, *rest):
        features = features if static_shapes else trim_to_longest(features)
        return (features, *rest) if rest else features
    return data.batch(batch).map(trimmed).prefetch(tf.data.AUTOTUNE)


def features_of(preprocessor: TextPreprocessor, texts, second=None) -> dict:
    """The features of checked texts (and second texts)."""
    return preprocessor(tf.constant(texts) if second is None
                        else (tf.constant(texts), tf.constant(second)))


def dataset_labels(batches: tf.data.Dataset) -> Optional[np.ndarray]:
    """The labels of a dataset of text batches, read without tokenising (None: none)."""
    spec = batches.element_spec
    if not isinstance(spec, tuple) or len(spec) < 2:
        return None
    return np.concatenate([np.reshape(element[1].numpy(), [-1]) for element in batches])


def holds_features(x) -> bool:
    """Whether `x` is a dataset whose inputs are the features dict (Keras' fit validates
    through evaluate with the dataset already mapped)."""
    if not isinstance(x, tf.data.Dataset):
        return False
    spec = x.element_spec
    first = spec[0] if isinstance(spec, tuple) else spec
    return isinstance(first, dict) and "input_ids" in first


def holds_pairs(x) -> bool:
    """Whether a dataset's texts are sentence pairs."""
    spec = x.element_spec
    return isinstance(spec, tuple) and isinstance(spec[0], tuple)


def is_text(spec) -> bool:
    """Whether a dataset element part is a text: a string, or a pair of strings."""
    if isinstance(spec, tuple):
        return len(spec) == 2 and all(is_text(part) for part in spec) and \
            not any(isinstance(part, tuple) for part in spec)
    return isinstance(spec, tf.TensorSpec) and spec.dtype == tf.string


def count_batches(data: tf.data.Dataset) -> Optional[int]:
    """Batches per pass of `data`, counted when TensorFlow cannot tell; None if endless."""
    count = int(data.cardinality())
    if count == tf.data.INFINITE_CARDINALITY:
        return None
    if count == tf.data.UNKNOWN_CARDINALITY:
        count = int(data.reduce(0, lambda total, _: total + 1))
    return count


def is_empty(x) -> bool:
    if isinstance(x, tuple):
        return all(len(part) == 0 for part in x)
    return not isinstance(x, (str, bytes)) and x is not None and len(x) == 0
