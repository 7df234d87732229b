"""Adapter layers: one class per family, one interface for the encoder's adapter slots.

Every bottleneck family is called by an output block as
`adapter(hidden, residual, layer_norm)`: `hidden` is the sub-layer's projected output
(after its dropout), `residual` the sub-layer's input and `layer_norm` the block's
LayerNorm. It returns the adapted sub-layer output; the block then computes
`layer_norm(result + residual)`. So the families differ only in what they read and
where their skip goes:

    Houlsby   h + B(h)                              (Houlsby et al., 2019)
    Pfeiffer  h + B(layer_norm(h + r))              (Pfeiffer et al., 2021; AdapterHub)
    Parallel  h + s * B(r)                          (He et al., 2022)

with `B(x) = up(act(down(x)))`. LoRA (Hu et al., 2022) adds low-rank updates to the
query and value projections of self-attention instead.

Weight names and shapes follow google-research/adapter-bert: `weights1 [d, m]`,
`biases1 [1, m]`, `weights2 [m, d]`, `biases2 [1, d]`, under the scope `adapters`;
LoRA's are `query_lora_A [d, r]`, `query_lora_B [r, d]` (and `value_...`) under the
`adapters` scope of `attention/self`.
"""

import math

import tensorflow as tf
import tf_keras as keras

from adapter_bert.model.activations import canonical_activation, get_activation
from adapter_bert.model.config import ADAPTER_INIT_SCALE


def skip_sum(inputs, delta):
    """`inputs + delta`, in float32 when the layer computes in a 16-bit type.

    A new adapter's output is about 0.6% of its input: below bfloat16's resolution
    (8 bits of mantissa, 0.4% relative), so a bfloat16 sum drops about a fifth of it and
    trained adapters lose up to 7% of their smallest contributions (measured on MiniLM:
    `python -m bench.adapter_precision`). Summing in float32 keeps the adapter's output
    as computed; the block's LayerNorm (float32 inside) reads the float32 sum.
    """
    if inputs.dtype == tf.float32 and delta.dtype == tf.float32:
        return inputs + delta
    return tf.cast(inputs, tf.float32) + tf.cast(delta, tf.float32)


class AdapterLayer(keras.layers.Layer):
    """Base class of every adapter layer: tuning and reports recognise adapters by it."""


def _fan_in_uniform(width: int) -> keras.initializers.Initializer:
    # PyTorch's default Linear init, kaiming_uniform(a=sqrt(5)), as LoRA's A and the
    # parallel adapter's down projection use: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    bound = 1.0 / math.sqrt(width)
    return keras.initializers.RandomUniform(-bound, bound)


class _Bottleneck(AdapterLayer):
    """The projections shared by the bottleneck families: `up(act(down(x)))`.

    Subclasses define `call` and may override `_initializer`.
    """

    def __init__(self, size=64, activation="gelu", init_scale=ADAPTER_INIT_SCALE, name="adapters", **kwargs):
        super().__init__(name=name, **kwargs)
        self.size = int(size)
        self.activation = canonical_activation(activation)
        self.init_scale = float(init_scale)
        self._act = get_activation(self.activation)

    def _initializer(self, projection: str, width: int) -> keras.initializers.Initializer:
        """A fresh initialiser for the "down" or "up" projection (truncated normal)."""
        return keras.initializers.TruncatedNormal(stddev=self.init_scale)

    def build(self, input_shape):
        width = int(input_shape[-1])
        # One fresh initialiser per weight, created right before it is used: an unseeded
        # Keras initialiser reused for several weights repeats its values.
        self.weights1 = self.add_weight("weights1", [width, self.size],
                                        initializer=self._initializer("down", width))
        self.biases1 = self.add_weight("biases1", [1, self.size], initializer="zeros")
        self.weights2 = self.add_weight("weights2", [self.size, width],
                                        initializer=self._initializer("up", width))
        self.biases2 = self.add_weight("biases2", [1, width], initializer="zeros")
        super().build(input_shape)

    def bottleneck(self, inputs):
        """`up(act(down(inputs)))`, without any skip."""
        dtype = self.compute_dtype
        hidden = tf.tensordot(inputs, tf.cast(self.weights1, dtype), 1) + tf.cast(self.biases1, dtype)
        hidden = self._act(hidden)
        return tf.tensordot(hidden, tf.cast(self.weights2, dtype), 1) + tf.cast(self.biases2, dtype)

    def get_config(self):
        config = super().get_config()
        config.update(size=self.size, activation=self.activation, init_scale=self.init_scale)
        return config

    @staticmethod
    def param_count(width: int, size: int) -> int:
        """Number of weights of one adapter on a hidden state of `width` units."""
        return 2 * width * size + size + width


@keras.utils.register_keras_serializable(package="adapter_bert")
class HoulsbyAdapter(_Bottleneck):
    """Bottleneck adapter: `x + up(act(down(x)))`.

    Down-projects the hidden state to `size` units, applies the non-linearity,
    projects back up and adds the input (the identity skip). Both projections start
    from a truncated normal with stddev `init_scale` and zero biases, so a new
    adapter is almost the identity and a pretrained network is undisturbed at the
    start of training.

    Args:
        size: bottleneck width m.
        activation: non-linearity name; "gelu" is the tanh approximation.
        init_scale: stddev of the initial projection weights.

    Examples:
        >>> layer = HoulsbyAdapter(size=4)
        >>> layer(tf.zeros([2, 3, 8])).shape
        TensorShape([2, 3, 8])
    """

    def call(self, inputs, residual=None, layer_norm=None):
        """Returns `inputs + B(inputs)` (float32 under mixed precision, see `skip_sum`);
        `residual` and `layer_norm` are not used."""
        return skip_sum(inputs, self.bottleneck(inputs))


@keras.utils.register_keras_serializable(package="adapter_bert")
class PfeifferAdapter(_Bottleneck):
    """Pfeiffer adapter: reads the post-LayerNorm state, adds to the sub-layer output.

    Placement of AdapterHub's `PfeifferConfig` (original_ln_before, original_ln_after,
    residual_before_ln): with `h` the sub-layer output and `r` its input, the block
    computes `LN(h + B(LN(h + r)) + r)` with the block's own LayerNorm used twice.
    Projections start as in `HoulsbyAdapter` (near identity).

    Args:
        size: bottleneck width m.
        activation: non-linearity name (AdapterHub's default is "relu").
        init_scale: stddev of the initial projection weights.

    Examples:
        >>> adapter = PfeifferAdapter(size=4)
        >>> norm = keras.layers.LayerNormalization()
        >>> adapter(tf.zeros([2, 3, 8]), tf.ones([2, 3, 8]), norm).shape
        TensorShape([2, 3, 8])
    """

    def call(self, inputs, residual=None, layer_norm=None):
        """Returns `inputs + B(layer_norm(inputs + residual))`.

        Raises:
            ValueError: `residual` or `layer_norm` is missing.
        """
        if residual is None or layer_norm is None:
            raise ValueError("PfeifferAdapter needs the sub-layer input (residual) and the "
                             "block's LayerNorm")
        normed = layer_norm(inputs + tf.cast(residual, inputs.dtype))
        return skip_sum(inputs, self.bottleneck(tf.cast(normed, inputs.dtype)))


@keras.utils.register_keras_serializable(package="adapter_bert")
class ParallelAdapter(_Bottleneck):
    """Parallel adapter: a scaled bottleneck beside the sub-layer (He et al., 2022).

    Reads the sub-layer's input `r` and adds `scaling * B(r)` to its output `h`, so the
    block computes `LN(h + s * B(r) + r)`. As in the reference code, the down projection
    starts from PyTorch's default uniform initialisation and the up projection at zero:
    a new parallel adapter leaves the network exactly unchanged.

    Args:
        size: bottleneck width m.
        activation: non-linearity name.
        init_scale: kept for a uniform interface; the initialisation above does not use it.
        scaling: the fixed scale s (He et al. use 4).

    Examples:
        >>> adapter = ParallelAdapter(size=4)
        >>> x = tf.ones([2, 3, 8])
        >>> bool(tf.reduce_all(adapter(x, 2 * x) == x))
        True
    """

    def __init__(self, size=64, activation="gelu", init_scale=ADAPTER_INIT_SCALE, scaling=4.0,
                 name="adapters", **kwargs):
        super().__init__(size, activation, init_scale, name=name, **kwargs)
        self.scaling = float(scaling)

    def _initializer(self, projection, width):
        return _fan_in_uniform(width) if projection == "down" else keras.initializers.Zeros()

    def call(self, inputs, residual=None, layer_norm=None):
        """Returns `inputs + scaling * B(residual)`.

        Raises:
            ValueError: `residual` is missing.
        """
        if residual is None:
            raise ValueError("ParallelAdapter needs the sub-layer input (residual)")
        return skip_sum(inputs, self.scaling * self.bottleneck(tf.cast(residual, inputs.dtype)))

    def get_config(self):
        config = super().get_config()
        config.update(scaling=self.scaling)
        return config


@keras.utils.register_keras_serializable(package="adapter_bert")
class LoraAdapter(AdapterLayer):
    """LoRA on the query and value projections of one self-attention layer.

    For each target t in ("query", "value") it owns `t_lora_A [d, r]` (PyTorch's default
    uniform initialisation, as the reference) and `t_lora_B [r, d]` (zeros), and returns
    `{t: scale * (x @ A) @ B}`, which self-attention adds to its frozen projection
    `x @ W + b`. With B at zero the model starts exactly as the backbone.

    Args:
        rank: r.
        scale: `alpha / r`.
        targets: projections that get an update.

    Examples:
        >>> lora = LoraAdapter(rank=2)
        >>> sorted(lora(tf.ones([1, 3, 8])))
        ['query', 'value']
    """

    def __init__(self, rank=8, scale=1.0, targets=("query", "value"), name="adapters", **kwargs):
        super().__init__(name=name, **kwargs)
        self.rank = int(rank)
        self.scale = float(scale)
        self.targets = tuple(targets)

    def build(self, input_shape):
        width = int(input_shape[-1])
        self.lora_a, self.lora_b = {}, {}
        for target in self.targets:
            self.lora_a[target] = self.add_weight(f"{target}_lora_A", [width, self.rank],
                                                  initializer=_fan_in_uniform(width))
            self.lora_b[target] = self.add_weight(f"{target}_lora_B", [self.rank, width],
                                                  initializer="zeros")
        super().build(input_shape)

    def call(self, inputs):
        """Returns {target: the low-rank update of that projection}, each [B, T, d]."""
        dtype = self.compute_dtype
        updates = {}
        for target in self.targets:
            low = tf.tensordot(inputs, tf.cast(self.lora_a[target], dtype), 1)
            updates[target] = self.scale * tf.tensordot(low, tf.cast(self.lora_b[target], dtype), 1)
        return updates

    def get_config(self):
        config = super().get_config()
        config.update(rank=self.rank, scale=self.scale, targets=list(self.targets))
        return config

    @staticmethod
    def param_count(width: int, rank: int, targets: int = 2) -> int:
        """Number of weights of one layer's LoRA: `targets * 2 * width * rank`."""
        return targets * 2 * width * rank


BOTTLENECK_CLASSES = {"houlsby": HoulsbyAdapter, "pfeiffer": PfeifferAdapter,
                      "parallel": ParallelAdapter}


def output_adapter(adapter_config) -> _Bottleneck:
    """A fresh bottleneck adapter of the config's family, for one output-block slot.

    Raises:
        ValueError: the family (LoRA) has no output-block adapters.
    """
    kind = adapter_config.adapter_type
    if kind not in BOTTLENECK_CLASSES:
        raise ValueError(f"adapter_type {kind!r} has no output-block adapters")
    kwargs = {"scaling": adapter_config.parallel_scaling} if kind == "parallel" else {}
    return BOTTLENECK_CLASSES[kind](adapter_config.size, adapter_config.activation,
                                    adapter_config.init_scale, **kwargs)


def attention_adapter(adapter_config) -> LoraAdapter:
    """A fresh LoRA layer for one self-attention layer.

    Raises:
        ValueError: the config is not of type "lora".
    """
    if adapter_config.adapter_type != "lora":
        raise ValueError(f"adapter_type {adapter_config.adapter_type!r} has no "
                         f"self-attention adapters")
    return LoraAdapter(adapter_config.size, adapter_config.lora_scale)
