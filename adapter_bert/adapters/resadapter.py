"""ResAdapters: a residual network of adapter cells beside a frozen BERT (Hsu & Wu).

BERT (inference mode, behind `tf.stop_gradient`) gives hidden states h_k; cell k reads
x_k = h_k + c_{k-1} and computes c_k = LayerNorm(Up(Dropout(Mid(BatchNorm(Down(x_k)))))),
`Mid` a non-linearity ("feedforward") or self-attention over the bottleneck ("attention").
Variants: `pipeline` (one chain; output c_{L-1}), `resnet` (stages of `stage_size` cells,
a residual path around each) and `resnext` (up to `max_groups` groups of layers, each its
own chain; output h_0 + every group's last cell).

BatchNorm counts real tokens only (the padding mask), so padding does not change the
statistics; `synchronized=True` uses the global batch under a distribution strategy.
The down-projection and the attention projections have no bias (BatchNorm's beta and the
up-projection's bias absorb them), so every weight gets a gradient. Cells are named after
their layer (`resadapter/cell_3/down/kernel`) in every variant.
"""

import dataclasses
import math
from typing import List, Optional, Sequence

import tensorflow as tf
import tf_keras as keras

from adapter_bert.adapters import files
from adapter_bert.model.activations import canonical_activation, get_activation
from adapter_bert.model.config import BertConfig, ConfigError, check_positive
from adapter_bert.model.fast_layers import Dropout, LayerNorm
from adapter_bert.model.heads import ClassifierHead, SpanHead
from adapter_bert.model.encoder import BertNetwork
from adapter_bert.model.inputs import FeatureInputs, model_features
from adapter_bert.errors import UserError

VARIANTS = ("pipeline", "resnet", "resnext")
CELLS = ("feedforward", "attention")
POOLINGS = ("cls", "mean")
SCOPE = "resadapter"


@dataclasses.dataclass
class ResAdapterConfig:
    """Shape and wiring of a ResAdapter side network.

    `size` is every cell's bottleneck (`--adapter_size`); `variant` "pipeline", "resnet" or
    "resnext" (`stage_size` cells per resnet stage, at most `max_groups` resnext groups);
    `cell` "feedforward" or "attention" (`num_heads` must divide `size`); `pooling` what a
    classifier head reads: the first ([CLS]) vector or the mean over real tokens.

        >>> ResAdapterConfig(size=8, variant="resnext").variant
        'resnext'
    """

    size: int = 64
    variant: str = "pipeline"
    cell: str = "feedforward"
    activation: str = "gelu"
    dropout_rate: float = 0.1
    num_heads: int = 4
    stage_size: int = 3
    max_groups: int = 4
    batch_norm_momentum: float = 0.9
    pooling: str = "cls"

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ConfigError(f"resadapter variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.cell not in CELLS:
            raise ConfigError(f"resadapter cell must be one of {CELLS}, got {self.cell!r}")
        if self.pooling not in POOLINGS:
            raise ConfigError(f"resadapter pooling must be one of {POOLINGS}, "
                              f"got {self.pooling!r}")
        check_positive(self, ("size", "num_heads", "stage_size", "max_groups"), "resadapter ")
        if self.cell == "attention" and self.size % self.num_heads:
            raise ConfigError(f"the attention cell splits the bottleneck ({self.size}) into "
                              f"{self.num_heads} heads: the size must be a multiple of it")
        if not 0.0 <= float(self.dropout_rate) < 1.0:
            raise ConfigError(f"resadapter dropout_rate must be in [0, 1), got {self.dropout_rate}")
        if not 0.0 < float(self.batch_norm_momentum) < 1.0:
            raise ConfigError("resadapter batch_norm_momentum must be in (0, 1), "
                              f"got {self.batch_norm_momentum}")
        self.activation = canonical_activation(self.activation)

    def to_dict(self) -> dict:
        """Returns the fields as a JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "ResAdapterConfig":
        """Builds a config from `to_dict()` output; unknown keys are an error."""
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"unknown resadapter config field(s): {unknown}")
        return cls(**values)


def resnext_groups(num_layers: int, max_groups: int = 4) -> List[List[int]]:
    """Layers 0..num_layers-1 in at most `max_groups` groups of consecutive layers, as few
    layers per group as that allows, sizes differing by at most one, larger first: 12 -> 4
    groups of 3; 6 -> 3 of 2; 4 -> 4 of 1. ValueError for a non-positive argument.
    """
    if num_layers <= 0 or max_groups <= 0:
        raise UserError(f"need positive num_layers and max_groups, got {num_layers}, {max_groups}")
    per_group = math.ceil(num_layers / max_groups)
    count = math.ceil(num_layers / per_group)
    base, extra = divmod(num_layers, count)
    groups, start = [], 0
    for index in range(count):
        size = base + (1 if index < extra else 0)
        groups.append(list(range(start, start + size)))
        start += size
    return groups


@keras.utils.register_keras_serializable(package="adapter_bert")
class ResAdapterCell(keras.layers.Layer):
    """One cell: Down -> masked BatchNorm -> non-linearity or self-attention -> Dropout ->
    Up -> LayerNorm (the backbone's epsilon), from and to the backbone's `width`.

        >>> ResAdapterCell(width=16, size=4)(tf.ones([2, 3, 16]), tf.ones([2, 3])).shape
        TensorShape([2, 3, 16])
    """

    def __init__(self, width, size, cell="feedforward", activation="gelu", dropout_rate=0.1,
                 num_heads=4, batch_norm_momentum=0.9, layer_norm_eps=1e-12, **kwargs):
        super().__init__(**kwargs)
        self.width, self.size, self.cell = int(width), int(size), cell
        self.activation = canonical_activation(activation)
        self.dropout_rate, self.num_heads = float(dropout_rate), int(num_heads)
        self.batch_norm_momentum = float(batch_norm_momentum)
        self.layer_norm_eps = float(layer_norm_eps)
        # No bias where it would be redundant (and get no gradient): BatchNorm's beta
        # replaces the down-projection's; in attention a key bias cancels in the softmax
        # and value/output biases are constants the up-projection's bias absorbs (Keras
        # has one use_bias switch, so the query bias goes too; BatchNorm's beta still
        # shifts the queries).
        self.down = keras.layers.Dense(self.size, use_bias=False, name="down")
        # fused=False: the fused kernel ignores the mask; synchronized: global-batch moments.
        self.batch_norm = keras.layers.BatchNormalization(
            momentum=self.batch_norm_momentum, epsilon=1e-5, synchronized=True, fused=False,
            name="batch_norm")
        if cell == "attention":
            self.attention = keras.layers.MultiHeadAttention(
                self.num_heads, self.size // self.num_heads, use_bias=False, name="attention")
        else:
            self.attention = None
        self._act = get_activation(self.activation)
        self.dropout = Dropout(self.dropout_rate)
        self.up = keras.layers.Dense(self.width, name="up")
        self.layer_norm = LayerNorm(epsilon=self.layer_norm_eps,
                                                          name="LayerNorm")

    def call(self, hidden, input_mask, training=None):
        """Args: hidden [B, T, width]; input_mask [B, T] (1 real token, 0 padding).

        Returns: [B, T, width].
        """
        mask = tf.cast(input_mask, tf.bool)
        bottleneck = self.batch_norm(self.down(hidden), training=training, mask=mask)
        if self.attention is not None:
            # Real tokens attend to real tokens only ([B, T, T]); padding rows are unused.
            pairs = tf.logical_and(mask[:, :, tf.newaxis], mask[:, tf.newaxis, :])
            bottleneck = self.attention(bottleneck, bottleneck, attention_mask=pairs,
                                        training=training)
        else:
            bottleneck = self._act(bottleneck)
        bottleneck = self.dropout(bottleneck, training=training)
        return self.layer_norm(self.up(bottleneck))

    def get_config(self):
        config = super().get_config()
        config.update(width=self.width, size=self.size, cell=self.cell,
                      activation=self.activation, dropout_rate=self.dropout_rate,
                      num_heads=self.num_heads, batch_norm_momentum=self.batch_norm_momentum,
                      layer_norm_eps=self.layer_norm_eps)
        return config


@keras.utils.register_keras_serializable(package="adapter_bert")
class ResAdapterNetwork(keras.layers.Layer):
    """The cells of one ResAdapter, wired as its variant says (scope `resadapter`).

        >>> cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
        ...                  num_attention_heads=2, intermediate_size=32)
        >>> net = ResAdapterNetwork(cfg, ResAdapterConfig(size=4, variant="resnet"))
        >>> net([tf.ones([2, 3, 16])] * 2, tf.ones([2, 3])).shape
        TensorShape([2, 3, 16])
    """

    def __init__(self, bert_config, resadapter_config, name=SCOPE, **kwargs):
        super().__init__(name=name, **kwargs)
        self.bert_config = (bert_config if isinstance(bert_config, BertConfig)
                            else BertConfig.from_dict(bert_config))
        self.resadapter_config = (resadapter_config
                                  if isinstance(resadapter_config, ResAdapterConfig)
                                  else ResAdapterConfig.from_dict(resadapter_config))
        cfg, bert = self.resadapter_config, self.bert_config
        self.cells = [ResAdapterCell(bert.hidden_size, cfg.size, cfg.cell, cfg.activation,
                                     cfg.dropout_rate, cfg.num_heads, cfg.batch_norm_momentum,
                                     bert.layer_norm_eps, name=f"cell_{k}")
                      for k in range(bert.num_hidden_layers)]
        if cfg.variant == "resnext":
            self.branches = resnext_groups(bert.num_hidden_layers, cfg.max_groups)
        else:
            self.branches = [list(range(bert.num_hidden_layers))]

    def _run_branch(self, layers, layer_outputs, input_mask, training):
        stage = self.resadapter_config.stage_size
        residual = self.resadapter_config.variant == "resnet"
        state, stage_input = None, None
        for position, k in enumerate(layers):
            hidden = layer_outputs[k] if state is None else layer_outputs[k] + state
            if residual and position % stage == 0:
                stage_input = hidden
            state = self.cells[k](hidden, input_mask, training=training)
            if residual and (position % stage == stage - 1 or position == len(layers) - 1):
                state = state + stage_input
        return state

    def call(self, layer_outputs, input_mask, training=None):
        """Args: layer_outputs, one [B, T, H] per transformer layer; input_mask [B, T].

        Returns: the side network's output [B, T, H].
        """
        if len(layer_outputs) != len(self.cells):
            raise UserError(f"expected {len(self.cells)} layer outputs, got {len(layer_outputs)}")
        outputs = [self._run_branch(layers, layer_outputs, input_mask, training)
                   for layers in self.branches]
        if self.resadapter_config.variant == "resnext":
            return tf.add_n([layer_outputs[0]] + outputs)
        return outputs[0]

    def get_config(self):
        config = super().get_config()
        config.update(bert_config=self.bert_config.to_dict(),
                      resadapter_config=self.resadapter_config.to_dict())
        return config


def _input_mask(inputs):
    """The input dict's input_mask, or all ones when it has none (no padding)."""
    inputs = model_features(inputs)
    mask = inputs.get("input_mask")
    return tf.ones_like(inputs["input_ids"]) if mask is None else mask


class _ResAdapterTaskModel(FeatureInputs, keras.Model):
    """A frozen `BertNetwork` (`bert`), a `ResAdapterNetwork` (`resadapter`) and a `head`.

    `frozen_backbone` tells `tuning.apply_tuning` that no backbone weight ever trains
    here (LayerNorms and pooler included): the backbone is a fixed feature extractor.
    """

    frozen_backbone = True

    def __init__(self, config, resadapter_config, **kwargs):
        super().__init__(**kwargs)
        self.bert = config if isinstance(config, BertNetwork) else BertNetwork(config)
        if isinstance(resadapter_config, dict):
            resadapter_config = ResAdapterConfig.from_dict(resadapter_config)
        self.resadapter_config = resadapter_config
        self.resadapter = ResAdapterNetwork(self.bert.config, resadapter_config)

    def side_output(self, inputs, training=None):
        """The side network's output [B, T, H] for an input dict (Google's feature names)."""
        layers = self.bert(inputs, training=False, return_all_layers=True)["all_layer_outputs"]
        layers = [tf.stop_gradient(layer) for layer in layers]
        return self.resadapter(layers, _input_mask(inputs), training=training)

    def _base_config(self):
        return {"name": self.name, "config": self.bert.config.to_dict(),
                "resadapter_config": self.resadapter_config.to_dict()}

    def save_adapter(self, directory: str, name: Optional[str] = None,
                     task: Optional[str] = None, labels: Optional[Sequence[str]] = None) -> str:
        """Writes the trained side network and head as an adapter directory (what a
        run with `--adapter_type=resadapter` writes); returns the weights file's path. It
        holds no named adapters: `name` must be None."""
        return files.save_trained_weights(self, directory, task, labels, name=name)

    def load_adapter(self, directory: str) -> dict:
        """Loads an adapter directory `save_adapter` (or a ResAdapter run) wrote into this
        built model of the same shape; returns the file's description."""
        return files.load_trained_weights(self, directory)


@keras.utils.register_keras_serializable(package="adapter_bert")
class ResAdapterClassifier(_ResAdapterTaskModel):
    """ResAdapter + `ClassifierHead` on the side output's [CLS] vector or token mean
    (`resadapter_config.pooling`); called as `BertClassifier`, float32 logits
    [B, num_labels]. `config` may be an existing `BertNetwork` to share.

        >>> cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
        ...                  num_attention_heads=2, intermediate_size=32)
        >>> ResAdapterClassifier(cfg, 3, ResAdapterConfig(size=4))(
        ...     {"input_ids": tf.ones([2, 5], tf.int32)}).shape
        TensorShape([2, 3])
    """

    def __init__(self, config, num_labels, resadapter_config: Optional[ResAdapterConfig] = None,
                 name="resadapter_classifier", **kwargs):
        super().__init__(config, resadapter_config or ResAdapterConfig(), name=name, **kwargs)
        self.num_labels = int(num_labels)
        self.head = ClassifierHead(num_labels, dropout_rate=self.bert.config.hidden_dropout_prob,
                                   initializer_range=self.bert.config.initializer_range)

    def call(self, inputs, training=None):
        side = self.side_output(inputs, training)
        if self.resadapter_config.pooling == "cls":
            return self.head(side[:, 0], training=training)
        mask = tf.cast(_input_mask(inputs), side.dtype)[:, :, None]
        pooled = tf.reduce_sum(side * mask, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
        return self.head(pooled, training=training)

    def get_config(self):
        return dict(self._base_config(), num_labels=self.num_labels)

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        return cls(BertConfig.from_dict(config.pop("config")), config.pop("num_labels"),
                   ResAdapterConfig.from_dict(config.pop("resadapter_config")), **config)


@keras.utils.register_keras_serializable(package="adapter_bert")
class ResAdapterSpanModel(_ResAdapterTaskModel):
    """ResAdapter + `SpanHead` over the side output, for SQuAD.

    Same inputs and outputs as `BertSpanModel`: {"start_logits", "end_logits"} [B, T].

    Args:
        config: a `BertConfig`, or an existing `BertNetwork` to share.
        resadapter_config: the `ResAdapterConfig`.
    """

    def __init__(self, config, resadapter_config: Optional[ResAdapterConfig] = None,
                 name="resadapter_span", **kwargs):
        super().__init__(config, resadapter_config or ResAdapterConfig(), name=name, **kwargs)
        self.head = SpanHead(initializer_range=self.bert.config.initializer_range)

    def call(self, inputs, training=None):
        start_logits, end_logits = self.head(self.side_output(inputs, training), training=training)
        return {"start_logits": start_logits, "end_logits": end_logits}

    def get_config(self):
        return self._base_config()

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        return cls(BertConfig.from_dict(config.pop("config")),
                   ResAdapterConfig.from_dict(config.pop("resadapter_config")), **config)


# The classes `model.factory.task_model` builds for a ResAdapter run, by head.
MODELS = {"classifier": ResAdapterClassifier, "span": ResAdapterSpanModel}
