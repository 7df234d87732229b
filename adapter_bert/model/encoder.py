"""BERT encoder as tf-keras layers, named by Google's TF1 variable scopes.

    a = LayerNorm(x + Adapter(Dropout(Dense(SelfAttention(x)))))
    y = LayerNorm(a + Adapter(Dropout(Dense(act(Dense(a))))))

Layer names follow the TF1 scopes, so `naming.tf1_variables` maps every weight to its
checkpoint name whatever the build order. Blocks are `ModifiableBlock`s (blocks.py): one
`TaskBranch` per named adapter (added by adapters/named.py), chosen by `adapter_name`.
ResAdapters (a side network) and hf_bridge (transformers' blocks) do not enter these blocks.
"""

import math

from typing import Optional

import tensorflow as tf
import tf_keras as keras

from adapter_bert.model.activations import get_activation
from adapter_bert.model.adapter_layers import ProjectionAdapter
from adapter_bert.model.attention_kernel import attention_context
from adapter_bert.model.blocks import ConfiguredLayer, ModifiableBlock, add_projection_updates
from adapter_bert.model.config import BertConfig
from adapter_bert.model.fast_layers import Dense, Dropout, LayerNorm, float32_sum
from adapter_bert.model.inputs import FeatureInputs, model_features
from adapter_bert.errors import UserError

# Added to attention scores of padding positions, as Google's BERT does.
_MASK_ADDER = -10000.0


def _initializer(config: BertConfig):
    # A fresh instance per weight: an unseeded Keras initializer reused for several
    # weights returns the same values each time.
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def _layer_norm(config: BertConfig) -> LayerNorm:
    return LayerNorm(epsilon=config.layer_norm_eps, name="LayerNorm")


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
class BertEmbeddings(ModifiableBlock):
    """Word + position + token-type embeddings, then LayerNorm and dropout.

    A named adapter runs its own LayerNorm copy here.
    """

    BRANCH_PER_TASK = True

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
        self.dropout = Dropout(cfg.hidden_dropout_prob)
        self._init_modifications()

    def build(self, input_shape):
        # The position table is sliced, never called, so it is built explicitly.
        self.position_embeddings.build(None)
        super().build(input_shape)

    def call(self, input_ids, segment_ids, training=None, adapter_name=None):
        seq_length = tf.shape(input_ids)[1]
        embeddings = (self.word_embeddings(input_ids)
                      + self.token_type_embeddings(segment_ids)
                      + self.position_embeddings.table[tf.newaxis, :seq_length])
        embeddings = self.modification(adapter_name).layer_norm(embeddings)
        return tf.cast(self.dropout(embeddings, training=training), self.compute_dtype)


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertSelfAttention(ModifiableBlock):
    """Multi-head scaled dot-product self-attention (the query/key/value projections).

    A named LoRA adapter has a branch here: its low-rank updates are added to the
    frozen query, key and value projections it targets.
    """

    def __init__(self, config, name="self", **kwargs):
        super().__init__(config, name=name, **kwargs)
        cfg = self.config
        self.query = Dense(cfg.hidden_size, kernel_initializer=_initializer(cfg),
                                        name="query")
        self.key = Dense(cfg.hidden_size, kernel_initializer=_initializer(cfg),
                                      name="key")
        self.value = Dense(cfg.hidden_size, kernel_initializer=_initializer(cfg),
                                        name="value")
        self.dropout = Dropout(cfg.attention_probs_dropout_prob)
        self._init_modifications()

    def build(self, input_shape):
        # The dropout is applied through `keep_mask`, never called: without this it
        # would stay unbuilt and SavedModel would skip it with a warning.
        self.dropout.mark_built(input_shape)
        super().build(input_shape)

    def _split_heads(self, x):
        """[B, T, H] -> [B, N, T, D]: heads first, so both products are plain batched
        matmuls.

        (On CPU, oneDNN's batched matmul runs the attention products about a third faster
        than the equivalent `tf.einsum`, forward and backward, with identical results.)
        """
        batch, length = tf.shape(x)[0], tf.shape(x)[1]
        x = tf.reshape(x, [batch, length, self.config.num_attention_heads, self.config.head_size])
        return tf.transpose(x, [0, 2, 1, 3])

    def call(self, hidden, attention_adder, training=None, adapter_name=None):
        """Args: hidden [B, T, H]; attention_adder [B, 1, 1, T] float32 (0 or -10000)."""
        projected = {"query": self.query(hidden), "key": self.key(hidden),
                     "value": self.value(hidden)}
        adapter = self.modification(adapter_name).adapter
        if adapter is not None:  # only projection adapters sit here
            projected = add_projection_updates(adapter, hidden, projected)
        query, key, value = (self._split_heads(projected[name])
                             for name in ("query", "key", "value"))
        batch, length = tf.shape(hidden)[0], tf.shape(hidden)[1]
        keep, keep_scale = self.dropout.keep_mask(
            [batch, self.config.num_attention_heads, length, length], training=training)
        # The softmax accumulates in float32 in every dtype (float16's is float32 end to
        # end); the probabilities are recomputed for the gradient rather than kept (see
        # model/attention_kernel.py).
        context = attention_context(query, key, value, attention_adder,
                                    1.0 / math.sqrt(self.config.head_size), keep, keep_scale)
        context = tf.transpose(context, [0, 2, 1, 3])                    # [B, T, N, D]
        return tf.reshape(context, [batch, length, self.config.hidden_size])


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertResidualOutput(ModifiableBlock):
    """Output block of a sub-layer: Dense -> Dropout -> [Adapter] -> LayerNorm(x +
    residual).

    After self-attention (`attention/output`) and after the feed-forward network (`output`,
    `input_width` = `intermediate_size`). A named adapter runs its LayerNorm copy and
    adapter (or fusion) here, called as `adapter(hidden, residual, layer_norm)`; LoRA on
    `dense` adds its update to the projection instead.
    """

    BRANCH_PER_TASK = True

    def __init__(self, config, name="output", input_width=None, **kwargs):
        super().__init__(config, name=name, **kwargs)
        self.input_width = int(input_width or self.config.hidden_size)
        self.dense = Dense(
            self.config.hidden_size, kernel_initializer=_initializer(self.config), name="dense")
        self.dropout = Dropout(self.config.hidden_dropout_prob)
        self.layer_norm = _layer_norm(self.config)
        self._init_modifications()

    @property
    def projection_input_width(self) -> int:
        return self.input_width

    def call(self, hidden, residual, training=None, adapter_name=None):
        mod = self.modification(adapter_name)
        projected = self.dense(hidden)
        if isinstance(mod.adapter, ProjectionAdapter):
            projected = add_projection_updates(mod.adapter, hidden, {"dense": projected})["dense"]
        hidden = self.dropout(projected, training=training)
        residual = tf.cast(residual, hidden.dtype)
        if mod.fusion is not None:
            hidden = mod.fusion(hidden, [adapter(hidden, residual, mod.layer_norm)
                                         for adapter in mod.fused])
        elif mod.adapter is not None and not isinstance(mod.adapter, ProjectionAdapter):
            hidden = mod.adapter(hidden, residual, mod.layer_norm)
        # An adapter returns float32 under mixed precision (model/adapter_layers.py skip_sum):
        # the residual joins it there, and the LayerNorm reads that sum unrounded.
        if hidden.dtype == tf.float32 and residual.dtype != tf.float32:
            return mod.layer_norm(float32_sum(hidden, residual))
        return mod.layer_norm(hidden + tf.cast(residual, hidden.dtype))

    def get_config(self):
        config = super().get_config()
        config["input_width"] = self.input_width
        return config


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertAttention(ConfiguredLayer):
    """Self-attention followed by its output block (scope `attention`)."""

    def __init__(self, config, name="attention", **kwargs):
        super().__init__(config, name=name, **kwargs)
        self.self_attention = BertSelfAttention(self.config, name="self")
        self.output_block = BertResidualOutput(self.config, name="output")

    def call(self, hidden, attention_adder, training=None, adapter_name=None):
        context = self.self_attention(hidden, attention_adder, training=training,
                                      adapter_name=adapter_name)
        return self.output_block(context, hidden, training=training, adapter_name=adapter_name)


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertIntermediate(ModifiableBlock):
    """First feed-forward projection with the hidden activation (scope `intermediate`).

    A named LoRA adapter with the "intermediate" target has a branch here.
    """

    def __init__(self, config, name="intermediate", **kwargs):
        super().__init__(config, name=name, **kwargs)
        self.dense = Dense(
            self.config.intermediate_size, kernel_initializer=_initializer(self.config),
            name="dense")
        self._act = get_activation(self.config.hidden_act)
        self._init_modifications()

    def call(self, hidden, training=None, adapter_name=None):
        projected = self.dense(hidden)
        adapter = self.modification(adapter_name).adapter
        if adapter is not None:  # only projection adapters sit here
            projected = add_projection_updates(adapter, hidden, {"dense": projected})["dense"]
        return self._act(projected)


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertTransformerLayer(ConfiguredLayer):
    """One transformer block (scope `layer_N`).

    `attention_output_block` and `ffn_output_block` are the two `BertResidualOutput`s
    that hold the paper's two adapters.
    """

    def __init__(self, config, name="layer_0", **kwargs):
        super().__init__(config, name=name, **kwargs)
        self.attention = BertAttention(self.config, name="attention")
        self.intermediate = BertIntermediate(self.config, name="intermediate")
        self.output_block = BertResidualOutput(self.config, name="output",
                                               input_width=self.config.intermediate_size)

    @property
    def attention_output_block(self) -> BertResidualOutput:
        return self.attention.output_block

    @property
    def ffn_output_block(self) -> BertResidualOutput:
        return self.output_block

    def call(self, hidden, attention_adder, training=None, adapter_name=None):
        attention_output = self.attention(hidden, attention_adder, training=training,
                                          adapter_name=adapter_name)
        intermediate = self.intermediate(attention_output, training=training,
                                         adapter_name=adapter_name)
        return self.output_block(intermediate, attention_output, training=training,
                                 adapter_name=adapter_name)


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertEncoder(ConfiguredLayer):
    """The stack of transformer layers (scope `encoder`)."""

    def __init__(self, config, name="encoder", **kwargs):
        super().__init__(config, name=name, **kwargs)
        self.transformer_layers = [BertTransformerLayer(self.config, name=f"layer_{i}")
                       for i in range(self.config.num_hidden_layers)]

    def call(self, hidden, attention_adder, training=None, return_all_layers=False,
             adapter_name=None):
        outputs = []
        for layer in self.transformer_layers:
            hidden = layer(hidden, attention_adder, training=training, adapter_name=adapter_name)
            outputs.append(hidden)
        return outputs if return_all_layers else hidden


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertPooler(ModifiableBlock):
    """Dense + tanh on the first ([CLS]) token (scope `pooler`).

    A named adapter that trains the pooler has its own `dense` in its `TaskBranch`;
    the others use the shared one.
    """

    def __init__(self, config, name="pooler", **kwargs):
        super().__init__(config, name=name, **kwargs)
        self.dense = Dense(self.config.hidden_size, activation="tanh",
                                        kernel_initializer=_initializer(self.config), name="dense")
        self._init_modifications()

    def build(self, input_shape):
        # Built before any call, where the call would build it: a named adapter with its
        # own pooler copy never calls this one, and checkpoints read it.
        if not self.dense.built:
            with tf.name_scope(self.dense.name):  # the weight names a call would give
                self.dense.build(tf.TensorShape([None, self.config.hidden_size]))
        super().build(input_shape)

    def call(self, sequence_output, adapter_name=None):
        return self.modification(adapter_name).dense(sequence_output[:, 0])


def projection_blocks(layer: BertTransformerLayer):
    """{name in `families.PROJECTIONS`: (the block holding it, its Dense's name there)}."""
    attention = layer.attention.self_attention
    return {"query": (attention, "query"), "key": (attention, "key"),
            "value": (attention, "value"),
            "attention_output": (layer.attention_output_block, "dense"),
            "intermediate": (layer.intermediate, "dense"),
            "output": (layer.ffn_output_block, "dense")}


def holders(layer: BertTransformerLayer):
    """The blocks of a transformer layer that can hold adapters, in call order."""
    return [layer.attention.self_attention, layer.attention_output_block, layer.intermediate,
            layer.ffn_output_block]


def backbone_of(model) -> "BertNetwork":
    """The `BertNetwork` of a task model (its `.bert`), or the model itself."""
    return model if hasattr(model, "encoder") else model.bert


def reset_compiled_functions(model) -> None:
    """Drops Keras' traced predict/test/train functions so that the next call re-traces.

    The active adapter, the branches' `adapter_enabled` and the layer structure are Python
    state read while tracing: a function traced before a change would keep running the old
    model.
    """
    for name in ("predict_function", "test_function", "train_function"):
        if getattr(model, name, None) is not None:
            setattr(model, name, None)


def attention_adder_from_mask(input_mask) -> tf.Tensor:
    """[B, T] 1/0 mask -> [B, 1, 1, T] float32 adder: 0 where attended, -10000 on padding."""
    # expand_dims, not `[:, tf.newaxis, tf.newaxis, :]`: TFLite's builtin StridedSlice has
    # no new-axis form, so with a dynamic width that slice would keep the network from
    # converting without TensorFlow ops.
    mask = tf.expand_dims(tf.expand_dims(tf.cast(input_mask, tf.float32), 1), 1)
    return (1.0 - mask) * _MASK_ADDER


@keras.utils.register_keras_serializable(package="adapter_bert")
class BertNetwork(FeatureInputs, keras.Model):
    """The BERT backbone (scope `bert`): embeddings, encoder and pooler.

    Called on `input_ids`, `input_mask` and `segment_ids` (see model/inputs.py), it returns
    `sequence_output` [B, T, H] and `pooled_output` [B, H] (and `all_layer_outputs` with
    `return_all_layers=True`); `adapter_name="mrpc"` runs with that named adapter's
    adapters, LayerNorms and pooler (adapters/named.py).

        >>> cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
        ...                  num_attention_heads=2, intermediate_size=32)
        >>> out = BertNetwork(cfg)({"input_ids": tf.ones([2, 5], tf.int32)})
        >>> out["pooled_output"].shape
        TensorShape([2, 16])
    """

    def __init__(self, config, name="bert", **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = config if isinstance(config, BertConfig) else BertConfig.from_dict(config)
        self.embeddings = BertEmbeddings(self.config, name="embeddings")
        self.encoder = BertEncoder(self.config, name="encoder")
        self.pooler = BertPooler(self.config, name="pooler")

    def projection_adapters(self, adapter_name: str):
        """[(ProjectionAdapter, {target: its Dense})] of the named adapter `adapter_name`,
        in every block."""
        found = []
        for layer in self.encoder.transformer_layers:
            for block in holders(layer):
                branch = block.task_branches.get(adapter_name)
                adapter = branch.adapter if branch is not None else None
                if isinstance(adapter, ProjectionAdapter):
                    found.append((adapter, {t: getattr(block, t) for t in adapter.targets}))
        return found

    def merged_adapters(self):
        """Names of the named adapters whose updates are merged into the kernels (at most
        one, since they share the kernels)."""
        merged = []
        for layer in self.encoder.transformer_layers:
            for block in holders(layer):
                for name, branch in block.task_branches.items():
                    if getattr(branch.adapter, "merged", False) and name not in merged:
                        merged.append(name)
        return merged

    def refuse_while_merged(self, action: str, error=UserError,
                            running: Optional[str] = None) -> None:
        """Raises `error` naming the adapter merged into the kernels before `action` (the
        adapter `running` may run merged); nothing when none is merged."""
        merged = [name for name in self.merged_adapters() if name != running]
        if merged:
            raise error(f"adapter {merged[0]!r} is merged into the backbone's kernels: "
                        f"unmerge it (unmerge_adapter) before {action}")

    @property
    def named_adapters(self):
        """Names of the named adapters this backbone holds, in the order they were added."""
        return list(self.embeddings.task_branches)

    def output_blocks(self):
        """The output blocks (where "output" families go), in order: (layer 0 attention,
        layer 0 ffn, ...)."""
        for layer in self.encoder.transformer_layers:
            yield layer.attention_output_block
            yield layer.ffn_output_block

    def call(self, inputs, training=None, return_all_layers=False, adapter_name=None):
        self.refuse_while_merged("running " + ("the model without it" if adapter_name is None
                                               else f"adapter {adapter_name!r}"),
                                 running=adapter_name)
        inputs = model_features(inputs, type(self).__name__)
        input_ids = inputs["input_ids"]
        input_mask = inputs.get("input_mask")
        if input_mask is None:
            input_mask = tf.ones_like(input_ids)
        segment_ids = inputs.get("segment_ids")
        if segment_ids is None:
            segment_ids = tf.zeros_like(input_ids)
        hidden = self.embeddings(input_ids, segment_ids, training=training,
                                 adapter_name=adapter_name)
        layers = self.encoder(hidden, attention_adder_from_mask(input_mask), training=training,
                              return_all_layers=True, adapter_name=adapter_name)
        outputs = {"sequence_output": layers[-1],
                   "pooled_output": self.pooler(layers[-1], adapter_name=adapter_name)}
        if return_all_layers:
            outputs["all_layer_outputs"] = layers
        return outputs

    def get_config(self):
        return {"name": self.name, "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        return cls(**config)
