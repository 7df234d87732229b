"""Task heads and the task models that put a head on the BERT backbone.

Head weights keep the names and layouts of Google's scripts so their fine-tuned
checkpoints load: run_classifier.py's `output_weights [num_labels, H]` and
`output_bias [num_labels]` at the top level, run_squad.py's `cls/squad/output_weights
[2, H]` and `cls/squad/output_bias [2]`.
"""

import tensorflow as tf
import tf_keras as keras

from adapter_bert.model.config import BertConfig
from adapter_bert.model.fast_layers import Dropout
from adapter_bert.model.encoder import BertNetwork
from adapter_bert.model.inputs import FeatureInputs


class _LinearHead(keras.layers.Layer):
    """Dropout then `x @ output_weights^T + output_bias` (Google's head layout)."""

    # TF1 scope of the head's variables: "" puts them at the top level.
    tf1_scope = ""

    def __init__(self, num_outputs, dropout_rate=0.1, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_outputs = int(num_outputs)
        self.dropout_rate = float(dropout_rate)
        self.initializer_range = float(initializer_range)
        self.dropout = Dropout(self.dropout_rate)

    def build(self, input_shape):
        width = int(input_shape[-1])
        self.output_weights = self.add_weight(
            "output_weights", [self.num_outputs, width],
            initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range))
        self.output_bias = self.add_weight("output_bias", [self.num_outputs], initializer="zeros")
        super().build(input_shape)

    def call(self, hidden, training=None):
        hidden = self.dropout(hidden, training=training)
        if self.num_outputs == 1:
            # A regression head's output is the prediction itself: computed in float32, as
            # Keras' mixed-precision guide has the last layer, not rounded to bfloat16.
            hidden = tf.cast(hidden, tf.float32)
        logits = tf.matmul(hidden, tf.cast(self.output_weights, hidden.dtype), transpose_b=True)
        # Logits in float32: losses and softmax stay stable under mixed precision.
        return tf.cast(logits + tf.cast(self.output_bias, hidden.dtype), tf.float32)

    def get_config(self):
        config = super().get_config()
        config.update(num_outputs=self.num_outputs, dropout_rate=self.dropout_rate,
                      initializer_range=self.initializer_range)
        return config


@keras.utils.register_keras_serializable(package="adapter_bert")
class ClassifierHead(_LinearHead):
    """Classification (num_labels > 1) or regression (num_labels == 1) on the pooled output."""

    tf1_scope = ""

    def __init__(self, num_outputs, name="classifier", **kwargs):
        super().__init__(num_outputs, name=name, **kwargs)


@keras.utils.register_keras_serializable(package="adapter_bert")
class SpanHead(_LinearHead):
    """Start/end logits over the sequence output, for SQuAD (2 outputs per token)."""

    tf1_scope = "cls/squad"

    def __init__(self, num_outputs=2, name="span_head", **kwargs):
        super().__init__(num_outputs, name=name, **kwargs)

    def call(self, hidden, training=None):
        # The original applies no dropout before the span projection.
        logits = super().call(hidden, training=False)
        return logits[..., 0], logits[..., 1]


def _backbone(config):
    return config if isinstance(config, BertNetwork) else BertNetwork(config)


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertClassifierNetwork(FeatureInputs, keras.Model):
    """BERT + `ClassifierHead` on the pooled output: returns float32 logits [B, num_labels].

    Inputs as `BertNetwork`'s (`input_ids`, `input_mask`, `segment_ids`, or Hugging Face's
    `attention_mask` / `token_type_ids`).

    Args:
        config: a `BertConfig`, or an existing `BertNetwork` to share.
        num_labels: number of classes; 1 for regression (STS-B).
    """

    def __init__(self, config, num_labels, name="bert_classifier", **kwargs):
        super().__init__(name=name, **kwargs)
        self.bert = _backbone(config)
        self.num_labels = int(num_labels)
        self.head = ClassifierHead(num_labels, dropout_rate=self.bert.config.hidden_dropout_prob,
                                   initializer_range=self.bert.config.initializer_range)

    def call(self, inputs, training=None):
        pooled = self.bert(inputs, training=training)["pooled_output"]
        return self.head(pooled, training=training)

    def get_config(self):
        return {"name": self.name, "config": self.bert.config.to_dict(),
                "num_labels": self.num_labels}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        return cls(BertConfig.from_dict(config.pop("config")), config.pop("num_labels"), **config)


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertSpanNetwork(FeatureInputs, keras.Model):
    """BERT + `SpanHead`: returns {"start_logits", "end_logits"} [B, T] float32 (SQuAD)."""

    def __init__(self, config, name="bert_span", **kwargs):
        super().__init__(name=name, **kwargs)
        self.bert = _backbone(config)
        self.head = SpanHead(initializer_range=self.bert.config.initializer_range)

    def call(self, inputs, training=None):
        sequence = self.bert(inputs, training=training)["sequence_output"]
        start_logits, end_logits = self.head(sequence, training=training)
        return {"start_logits": start_logits, "end_logits": end_logits}

    def get_config(self):
        return {"name": self.name, "config": self.bert.config.to_dict()}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        return cls(BertConfig.from_dict(config.pop("config")), **config)
