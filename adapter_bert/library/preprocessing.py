"""Raw strings and labels to the runner's features and label ids, as TensorFlow ops.

`TextPreprocessor` is the step `TextClassifier` maps over its data before Keras' own
`fit`, `evaluate` and `predict` see it: the tokenisation the export uses
(`serving.tokenizer.BertInputEncoder`, equal to the runner's Python tokenizer), the
runner's packing and truncation, and each batch cut to its longest row. Its config holds
the vocabulary, casing and sequence length, so every file Keras writes of the model
carries them.
"""

import functools
from typing import Sequence

import tensorflow as tf
import tf_keras as keras

from adapter_bert.data.tokenization import read_vocab
from adapter_bert.errors import UserError
from adapter_bert.serving.export import require_serving_extra, trim_to_longest
from adapter_bert.serving.tokenizer import BertInputEncoder, VocabularyError


@keras.utils.register_keras_serializable(package="adapter_bert")
class TextPreprocessor(keras.layers.Layer):
    """Texts (`[B]` strings, or a pair `(first, second)` of them) -> the runner's int32
    features, each batch cut to its longest row unless `static_shapes` (TPUs, XLA).

    `vocabulary`: the vocabulary file's lines (id = line number); `labels`: the label
    names in logit order (empty for regression). `label_ids` maps labels: names (strings)
    to their position, integers are ids already, floats are regression targets.
    """

    def __init__(self, vocabulary: Sequence[str], do_lower_case: bool, max_seq_length: int,
                 labels: Sequence[str] = (), static_shapes: bool = False, **kwargs):
        kwargs.setdefault("trainable", False)
        kwargs["dtype"] = "float32"  # nothing here computes in another precision
        super().__init__(**kwargs)
        require_serving_extra("TextClassifier (its tokenizer runs in the graph)")
        self.vocabulary = list(vocabulary)
        self.do_lower_case = bool(do_lower_case)
        self.max_seq_length = int(max_seq_length)
        self.labels = tuple(str(label) for label in labels)
        self.static_shapes = bool(static_shapes)
        # Not tracked by Keras: constants, not weights, rebuilt from the config.
        object.__setattr__(self, "_traced", _traced_encoder(
            tuple(self.vocabulary), self.do_lower_case, self.max_seq_length,
            self.static_shapes))

    def call(self, texts):
        single, pair = self._traced
        if isinstance(texts, (tuple, list)):
            return pair(*(tf.reshape(t, [-1]) for t in texts))
        return single(tf.reshape(texts, [-1]))

    def label_ids(self, labels: tf.Tensor) -> tf.Tensor:
        """`[B]` label ids (int32) of names or ids, or `[B, 1]` float32 regression targets;
        an unknown name or an id out of range stops the step with a message naming it."""
        labels = tf.convert_to_tensor(labels)
        if not self.labels:
            return tf.reshape(tf.cast(labels, tf.float32), [-1, 1])
        labels = tf.reshape(labels, [-1])
        if labels.dtype == tf.string:
            names = tf.constant(self.labels)
            matches = tf.equal(labels[:, tf.newaxis], names[tf.newaxis, :])
            tf.debugging.Assert(tf.reduce_all(tf.reduce_any(matches, 1)), [
                "a label is not one of", names, "labels:", labels], summarize=20)
            return tf.cast(tf.argmax(tf.cast(matches, tf.int32), 1), tf.int32)
        if not labels.dtype.is_integer:
            raise UserError(f"labels: expected label names (strings) or ids (integers), got "
                            f"{labels.dtype.name} values")
        ids = tf.cast(labels, tf.int32)
        tf.debugging.Assert(tf.reduce_all((ids >= 0) & (ids < len(self.labels))), [
            f"a label id is not in 0..{len(self.labels) - 1}:", ids], summarize=20)
        return ids

    def get_config(self):
        return {**super().get_config(), "vocabulary": self.vocabulary,
                "do_lower_case": self.do_lower_case, "max_seq_length": self.max_seq_length,
                "labels": list(self.labels), "static_shapes": self.static_shapes}



@functools.lru_cache(maxsize=4)
def _traced_encoder(vocabulary: tuple, do_lower_case: bool, max_seq_length: int,
                    static_shapes: bool):
    """The tokenisation of single texts and of pairs as two `tf.function`s, made once per
    vocabulary and settings: the models of one backbone (a loaded file, a second task)
    share them instead of building and tracing the tokenizer again."""
    try:
        encoder = BertInputEncoder(read_vocab(vocabulary), do_lower_case, max_seq_length,
                                   in_variables=False)
    except VocabularyError as e:
        raise UserError(f"vocabulary: {e}") from None

    def features(first, second):
        encoded = encoder.encode(first, second)
        return encoded if static_shapes else trim_to_longest(encoded)

    # Plain TensorFlow ops throughout: without AutoGraph's rewriting they trace faster.
    text = tf.TensorSpec([None], tf.string)
    return (tf.function(lambda first: features(first, None), input_signature=[text],
                        autograph=False),
            tf.function(features, input_signature=[text, text], autograph=False))
