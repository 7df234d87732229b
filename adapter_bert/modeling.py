"""BERT encoder as tf-keras layers, with a slot for a bottleneck adapter in every block.

Layer names follow the variable scopes of Google's TF1 BERT so that `naming.tf1_variables`
can map every weight to its checkpoint name (`bert/encoder/layer_3/attention/output/
dense/kernel`, ...) whatever order the layers were built in.

Data flow of one transformer layer (post-LayerNorm BERT, adapters as in Houlsby et al.):

    a = LayerNorm(x + Adapter(Dropout(Dense(SelfAttention(x)))))
    y = LayerNorm(a + Adapter(Dropout(Dense(act(Dense(a))))))
"""

import math
from typing import Optional

import tensorflow as tf
import tf_keras as keras

from adapter_bert.activations import get_activation
from adapter_bert.adapters import HoulsbyAdapter
from adapter_bert.config import AdapterConfig, BertConfig

# Added to attention scores of padding positions, as Google's BERT does.
_MASK_ADDER = -10000.0


def _initializer(config: BertConfig):
    # A fresh instance per weight: an unseeded Keras initializer reused for several
    # weights returns the same values each time.
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def _layer_norm(config: BertConfig) -> keras.layers.LayerNormalization:
    return keras.layers.LayerNormalization(epsilon=config.layer_norm_eps, name="LayerNorm")


class _ConfiguredLayer(keras.layers.Layer):
    """Base for layers built from a `BertConfig`; serialises the config in `get_config`."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config if isinstance(config, BertConfig) else BertConfig.from_dict(config)

    def get_config(self):
        base = super().get_config()
        base["config"] = self.config.to_dict()
        return base


@keras.utils.register_keras_serializable(package="adapter_bert")
class EmbeddingTable(keras.layers.Layer):
    """One embedding matrix as its own layer, so it can be frozen on its own.

    Its single weight carries the layer's TF1 scope as its name
    (`bert/embeddings/word_embeddings`), as in Google's checkpoints.
    """

    tf1_weight_is_scope = True

    def __init__(self, rows, width, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.rows, self.width = int(rows), int(width)
        self.initializer_range = float(initializer_range)

    def build(self, input_shape=None):
        self.table = self.add_weight(
            self.name, [self.rows, self.width],
            initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range))
        super().build(input_shape)

    def call(self, ids):
        return tf.gather(self.table, ids)

    def get_config(self):
        config = super().get_config()
        config.update(rows=self.rows, width=self.width, initializer_range=self.initializer_range)
        return config


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertEmbeddings(_ConfiguredLayer):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config, name="embeddings", **kwargs):
        super().__init__(config, name=name, **kwargs)
        cfg = self.config
        self.word_embeddings = EmbeddingTable(
            cfg.vocab_size, cfg.hidden_size, cfg.initializer_range, name="word_embeddings")
        self.token_type_embeddings = EmbeddingTable(
            cfg.type_vocab_size, cfg.hidden_size, cfg.initializer_range,
            name="token_type_embeddings")
        self.position_embeddings = EmbeddingTable(
            cfg.max_position_embeddings, cfg.hidden_size, cfg.initializer_range,
            name="position_embeddings")
        self.layer_norm = _layer_norm(cfg)
        self.dropout = keras.layers.Dropout(cfg.hidden_dropout_prob)

    def build(self, input_shape):
        # The position table is sliced, never called, so it is built explicitly.
        self.position_embeddings.build(None)
        super().build(input_shape)

    def call(self, input_ids, segment_ids, training=None):
        seq_length = tf.shape(input_ids)[1]
        embeddings = (self.word_embeddings(input_ids)
                      + self.token_type_embeddings(segment_ids)
                      + self.position_embeddings.table[tf.newaxis, :seq_length])
        embeddings = self.layer_norm(embeddings)
        return tf.cast(self.dropout(embeddings, training=training), self.compute_dtype)


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertSelfAttention(_ConfiguredLayer):
    """Multi-head scaled dot-product self-attention (the query/key/value projections)."""

    def __init__(self, config, name="self", **kwargs):
        super().__init__(config, name=name, **kwargs)
        cfg = self.config
        self.query = keras.layers.Dense(cfg.hidden_size, kernel_initializer=_initializer(cfg),
                                        name="query")
        self.key = keras.layers.Dense(cfg.hidden_size, kernel_initializer=_initializer(cfg),
                                      name="key")
        self.value = keras.layers.Dense(cfg.hidden_size, kernel_initializer=_initializer(cfg),
                                        name="value")
        self.dropout = keras.layers.Dropout(cfg.attention_probs_dropout_prob)

    def _split_heads(self, x):
        batch, length = tf.shape(x)[0], tf.shape(x)[1]
        return tf.reshape(x, [batch, length, self.config.num_attention_heads, self.config.head_size])

    def call(self, hidden, attention_adder, training=None):
        """Args: hidden [B, T, H]; attention_adder [B, 1, 1, T] float32 (0 or -10000)."""
        query = self._split_heads(self.query(hidden))
        key = self._split_heads(self.key(hidden))
        value = self._split_heads(self.value(hidden))
        scores = tf.einsum("btnd,bsnd->bnts", query, key)
        # Softmax in float32 whatever the compute dtype: mixed precision safety.
        scores = tf.cast(scores, tf.float32) * (1.0 / math.sqrt(self.config.head_size))
        probs = tf.nn.softmax(scores + attention_adder, axis=-1)
        probs = self.dropout(tf.cast(probs, value.dtype), training=training)
        context = tf.einsum("bnts,bsnd->btnd", probs, value)
        batch, length = tf.shape(hidden)[0], tf.shape(hidden)[1]
        return tf.reshape(context, [batch, length, self.config.hidden_size])


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertResidualOutput(_ConfiguredLayer):
    """Output block of a sub-layer: Dense -> Dropout -> [Adapter] -> LayerNorm(x + residual).

    Used twice per transformer layer: after self-attention (scope `attention/output`)
    and after the feed-forward network (scope `output`). `adapter` is the adapter
    slot; it is empty (None) for a plain BERT.
    """

    def __init__(self, config, name="output", **kwargs):
        super().__init__(config, name=name, **kwargs)
        self.dense = keras.layers.Dense(
            self.config.hidden_size, kernel_initializer=_initializer(self.config), name="dense")
        self.dropout = keras.layers.Dropout(self.config.hidden_dropout_prob)
        self.layer_norm = _layer_norm(self.config)
        self.adapter = None
        self.adapter_enabled = True

    def set_adapter(self, adapter: Optional[keras.layers.Layer]) -> None:
        """Fills (or, with None, empties) the adapter slot; builds it if this block is built."""
        self.adapter = adapter
        if adapter is not None and self.built and not adapter.built:
            adapter.build(tf.TensorShape([None, None, self.config.hidden_size]))

    def call(self, hidden, residual, training=None):
        hidden = self.dropout(self.dense(hidden), training=training)
        if self.adapter is not None and self.adapter_enabled:
            hidden = self.adapter(hidden)
        return self.layer_norm(hidden + tf.cast(residual, hidden.dtype))


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertAttention(_ConfiguredLayer):
    """Self-attention followed by its output block (scope `attention`)."""

    def __init__(self, config, name="attention", **kwargs):
        super().__init__(config, name=name, **kwargs)
        self.self_attention = BertSelfAttention(self.config, name="self")
        self.output_block = BertResidualOutput(self.config, name="output")

    def call(self, hidden, attention_adder, training=None):
        context = self.self_attention(hidden, attention_adder, training=training)
        return self.output_block(context, hidden, training=training)


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertIntermediate(_ConfiguredLayer):
    """First feed-forward projection with the hidden activation (scope `intermediate`)."""

    def __init__(self, config, name="intermediate", **kwargs):
        super().__init__(config, name=name, **kwargs)
        self.dense = keras.layers.Dense(
            self.config.intermediate_size, kernel_initializer=_initializer(self.config),
            name="dense")
        self._act = get_activation(self.config.hidden_act)

    def call(self, hidden):
        return self._act(self.dense(hidden))


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertTransformerLayer(_ConfiguredLayer):
    """One transformer block (scope `layer_N`) with two adapter slots.

    `attention_output_block` and `ffn_output_block` are the two `BertResidualOutput`s
    whose `adapter` slots hold the paper's two adapters.
    """

    def __init__(self, config, name="layer_0", **kwargs):
        super().__init__(config, name=name, **kwargs)
        self.attention = BertAttention(self.config, name="attention")
        self.intermediate = BertIntermediate(self.config, name="intermediate")
        self.output_block = BertResidualOutput(self.config, name="output")

    @property
    def attention_output_block(self) -> BertResidualOutput:
        return self.attention.output_block

    @property
    def ffn_output_block(self) -> BertResidualOutput:
        return self.output_block

    def call(self, hidden, attention_adder, training=None):
        attention_output = self.attention(hidden, attention_adder, training=training)
        return self.output_block(self.intermediate(attention_output), attention_output,
                                 training=training)


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertEncoder(_ConfiguredLayer):
    """The stack of transformer layers (scope `encoder`)."""

    def __init__(self, config, name="encoder", **kwargs):
        super().__init__(config, name=name, **kwargs)
        self.transformer_layers = [BertTransformerLayer(self.config, name=f"layer_{i}")
                       for i in range(self.config.num_hidden_layers)]

    def call(self, hidden, attention_adder, training=None, return_all_layers=False):
        outputs = []
        for layer in self.transformer_layers:
            hidden = layer(hidden, attention_adder, training=training)
            outputs.append(hidden)
        return outputs if return_all_layers else hidden


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertPooler(_ConfiguredLayer):
    """Dense + tanh on the first ([CLS]) token (scope `pooler`)."""

    def __init__(self, config, name="pooler", **kwargs):
        super().__init__(config, name=name, **kwargs)
        self.dense = keras.layers.Dense(self.config.hidden_size, activation="tanh",
                                        kernel_initializer=_initializer(self.config), name="dense")

    def call(self, sequence_output):
        return self.dense(sequence_output[:, 0])


def attention_adder_from_mask(input_mask) -> tf.Tensor:
    """[B, T] 1/0 mask -> [B, 1, 1, T] float32 adder: 0 where attended, -10000 on padding."""
    mask = tf.cast(input_mask, tf.float32)[:, tf.newaxis, tf.newaxis, :]
    return (1.0 - mask) * _MASK_ADDER


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertModel(keras.Model):
    """The BERT backbone (scope `bert`): embeddings, encoder and pooler.

    Call it on a dict with Google's feature names, `input_ids`, `input_mask` and
    `segment_ids` (int [batch, seq]); the two last default to all-ones and all-zeros.
    It returns a dict with `sequence_output` [B, T, H] and `pooled_output` [B, H]
    (plus `all_layer_outputs` when called with `return_all_layers=True`).

    Args:
        config: the `BertConfig`.
        adapter_config: an `AdapterConfig` to insert Houlsby adapters, or None.

    Examples:
        >>> cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
        ...                  num_attention_heads=2, intermediate_size=32)
        >>> bert = BertModel(cfg, AdapterConfig(size=4))
        >>> out = bert({"input_ids": tf.ones([2, 5], tf.int32)})
        >>> out["pooled_output"].shape
        TensorShape([2, 16])
    """

    def __init__(self, config, adapter_config=None, name="bert", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = config if isinstance(config, BertConfig) else BertConfig.from_dict(config)
        self.embeddings = BertEmbeddings(self.config, name="embeddings")
        self.encoder = BertEncoder(self.config, name="encoder")
        self.pooler = BertPooler(self.config, name="pooler")
        self.adapter_config = None
        if adapter_config is not None:
            self.add_adapters(adapter_config)

    def add_adapters(self, adapter_config) -> None:
        """Puts a fresh Houlsby adapter in every slot the `AdapterConfig` selects.

        Works before or after the model is built; existing adapters are replaced.
        """
        if isinstance(adapter_config, dict):
            adapter_config = AdapterConfig.from_dict(adapter_config)
        adapter_config.validate_for(self.config)
        self.remove_adapters()
        for index, layer in enumerate(self.encoder.transformer_layers):
            for position in adapter_config.layer_positions(index):
                block = (layer.attention_output_block if position == "attention"
                         else layer.ffn_output_block)
                block.set_adapter(HoulsbyAdapter(
                    adapter_config.size, adapter_config.activation, adapter_config.init_scale))
        self.adapter_config = adapter_config

    def remove_adapters(self) -> None:
        """Empties every adapter slot: the model becomes a plain BERT again."""
        for block in self.output_blocks():
            block.set_adapter(None)
        self.adapter_config = None

    def output_blocks(self):
        """All adapter-bearing blocks, in order: (layer 0 attention, layer 0 ffn, ...)."""
        for layer in self.encoder.transformer_layers:
            yield layer.attention_output_block
            yield layer.ffn_output_block

    def call(self, inputs, training=None, return_all_layers=False):
        input_ids = inputs["input_ids"]
        input_mask = inputs.get("input_mask")
        if input_mask is None:
            input_mask = tf.ones_like(input_ids)
        segment_ids = inputs.get("segment_ids")
        if segment_ids is None:
            segment_ids = tf.zeros_like(input_ids)
        hidden = self.embeddings(input_ids, segment_ids, training=training)
        layers = self.encoder(hidden, attention_adder_from_mask(input_mask), training=training,
                              return_all_layers=True)
        outputs = {"sequence_output": layers[-1], "pooled_output": self.pooler(layers[-1])}
        if return_all_layers:
            outputs["all_layer_outputs"] = layers
        return outputs

    def get_config(self):
        return {"name": self.name, "config": self.config.to_dict(),
                "adapter_config": self.adapter_config and self.adapter_config.to_dict()}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        return cls(**config)

    def build_with_dummy_inputs(self, seq_length: int = 2) -> None:
        """Creates every weight by running a tiny batch (weights must exist to load them)."""
        self({"input_ids": tf.zeros([1, seq_length], tf.int32)}, training=False)
