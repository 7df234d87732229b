"""Adapter layers: one class per family, one interface for the blocks' adapter slots.

An output block calls `adapter(hidden, residual, layer_norm)` and then computes
`layer_norm(result + residual)`:

    Houlsby   h + B(h)                              (Houlsby et al., 2019)
    Pfeiffer  h + B(layer_norm(h + r))              (Pfeiffer et al., 2021)
    Parallel  h + s * B(r)                          (He et al., 2022)

with `B(x) = up(act(down(x)))`. LoRA (Hu et al., 2022) is a `ProjectionAdapter`: low-rank
updates to frozen projections, mergeable into their kernels. Weight names follow
google-research/adapter-bert (`adapters/weights1`, ...; LoRA `<projection>_lora_A/B`).
`BUILT_IN_FAMILIES` registers the four families as a user's own family would.
"""

import math
from typing import Dict, Optional, Sequence

import tensorflow as tf
import tf_keras as keras

from adapter_bert.model.activations import canonical_activation, get_activation
from adapter_bert.model.families import (ADAPTER_INIT_SCALE, ADAPTER_POSITIONS, PROJECTIONS,
                                         AdapterFamily, AdapterOption, Bounds)
from adapter_bert.model.fast_layers import Dropout, float32_sum
from adapter_bert.errors import UserError


def skip_sum(inputs, delta):
    """`inputs + delta`, in float32 when the layer computes in a 16-bit type.

    A new adapter's output is about 0.6% of its input: below bfloat16's resolution
    (8 bits of mantissa, 0.4% relative), so a bfloat16 sum drops about a fifth of it and
    trained adapters lose up to 7% of their smallest contributions (measured on MiniLM:
    `python -m bench.studies.adapter_precision`). Summing in float32 keeps the adapter's output
    as computed; the block's LayerNorm (float32 inside) reads the float32 sum.
    """
    if inputs.dtype == tf.float32 and delta.dtype == tf.float32:
        return inputs + delta
    return float32_sum(inputs, delta)


class AdapterLayer(keras.layers.Layer):
    """Base class of every adapter layer: tuning and reports recognise adapters by it.

    Output-block adapters subclass it directly and are called as
    `layer(hidden, residual, layer_norm)` (see the module docstring).
    """

    @classmethod
    def from_adapter_config(cls, adapter_config):
        """A fresh layer for one slot of `adapter_config`'s adapters.

        By default `cls(size=, activation=, init_scale=, **adapter_config.options)`: the
        common fields and the family's options as constructor keywords.
        """
        return cls(size=adapter_config.size, activation=adapter_config.activation,
                   init_scale=adapter_config.init_scale, **adapter_config.options)


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
    """Bottleneck adapter: `x + up(act(down(x)))`, projections from a truncated normal of
    stddev `init_scale` with zero biases, so a new adapter is almost the identity.

        >>> HoulsbyAdapter(size=4)(tf.zeros([2, 3, 8])).shape
        TensorShape([2, 3, 8])
    """

    def call(self, inputs, residual=None, layer_norm=None):
        """Returns `inputs + B(inputs)` (float32 under mixed precision, see `skip_sum`);
        `residual` and `layer_norm` are not used."""
        return skip_sum(inputs, self.bottleneck(inputs))


@keras.utils.register_keras_serializable(package="adapter_bert")
class PfeifferAdapter(_Bottleneck):
    """Pfeiffer adapter (AdapterHub's `PfeifferConfig`): the block computes
    `LN(h + B(LN(h + r)) + r)`, its own LayerNorm used twice; initialised as Houlsby's.

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
            raise UserError("PfeifferAdapter needs the sub-layer input (residual) and the "
                            "block's LayerNorm")
        normed = layer_norm(inputs + tf.cast(residual, inputs.dtype))
        return skip_sum(inputs, self.bottleneck(tf.cast(normed, inputs.dtype)))


@keras.utils.register_keras_serializable(package="adapter_bert")
class ParallelAdapter(_Bottleneck):
    """Parallel adapter (He et al., 2022): the block computes `LN(h + s * B(r) + r)`.

    As the reference code: the down projection starts uniform (PyTorch's default), the up
    projection at zero, so a new one changes nothing; `init_scale` is unused.

        >>> x = tf.ones([2, 3, 8])
        >>> bool(tf.reduce_all(ParallelAdapter(size=4)(x, 2 * x) == x))
        True
    """

    def __init__(self, size=64, activation="gelu", init_scale=ADAPTER_INIT_SCALE, scaling=4.0,
                 name="adapters", **kwargs):
        super().__init__(size, activation, init_scale, name=name, **kwargs)
        self.scaling = float(scaling)

    @classmethod
    def from_adapter_config(cls, adapter_config):
        """The config's option `parallel_scaling` is the layer's `scaling`."""
        return cls(adapter_config.size, adapter_config.activation, adapter_config.init_scale,
                   scaling=adapter_config.parallel_scaling)

    def _initializer(self, projection, width):
        return _fan_in_uniform(width) if projection == "down" else keras.initializers.Zeros()

    def call(self, inputs, residual=None, layer_norm=None):
        """Returns `inputs + scaling * B(residual)`.

        Raises:
            ValueError: `residual` is missing.
        """
        if residual is None:
            raise UserError("ParallelAdapter needs the sub-layer input (residual)")
        return skip_sum(inputs, self.scaling * self.bottleneck(tf.cast(residual, inputs.dtype)))

    def get_config(self):
        config = super().get_config()
        config.update(scaling=self.scaling)
        return config


class _KernelBackup:
    """Kernels as they were before a merge: a plain object, so Keras does not track them."""

    def __init__(self, kernels):
        self.kernels = kernels


class ProjectionAdapter(AdapterLayer):
    """Base of the "projections" families: updates added to frozen dense projections.

    One layer serves the projections of one block that read the same input (`query`/`key`/
    `value`, or a block's `dense`) and returns `{target: update}`. Subclasses define
    `update(inputs, target, training)`, `delta(target)` (the kernel change, for merging) and
    `from_adapter_config`. `merge`/`unmerge` fold the deltas into the kernels and back;
    while merged `call` returns no update. `merged=True`: the kernels already hold them.
    """

    def __init__(self, targets: Sequence[str] = ("query", "value"),
                 output_widths: Optional[Dict[str, int]] = None, merged: bool = False,
                 name="adapters", **kwargs):
        super().__init__(name=name, **kwargs)
        self.targets = tuple(targets)
        self.output_widths = ({str(k): int(v) for k, v in output_widths.items()}
                              if output_widths else None)
        self.merged = bool(merged)
        self._backup = None

    @classmethod
    def from_adapter_config(cls, adapter_config, projections):
        raise NotImplementedError(f"{cls.__name__} must define from_adapter_config(config, "
                                  f"projections)")

    def output_width(self, target: str, input_width: int) -> int:
        """Width of projection `target`'s output."""
        return self.output_widths[target] if self.output_widths else input_width

    def update(self, inputs, target: str, training=None):
        """The update of projection `target` for `inputs`."""
        raise NotImplementedError

    def delta(self, target: str) -> tf.Tensor:
        """The change of projection `target`'s kernel that equals its update."""
        raise NotImplementedError

    def call(self, inputs, training=None):
        """Returns {target: update [B, T, out]}, or {} while merged."""
        if self.merged:
            return {}
        return {target: self.update(inputs, target, training) for target in self.targets}

    def merge(self, projections: Dict[str, keras.layers.Dense]) -> None:
        """Adds `delta(target)` to the kernel of each target's Dense layer.

        Args:
            projections: {target: the block's Dense layer of that name}.

        Raises:
            ValueError: already merged.
        """
        if self.merged:
            raise UserError(f"{self.name} is merged already")
        backup = {}
        for target in self.targets:
            kernel = projections[target].kernel
            backup[target] = kernel.numpy()
            kernel.assign_add(tf.cast(self.delta(target), kernel.dtype))
        self._backup = _KernelBackup(backup)
        self.merged = True

    def unmerge(self, projections: Dict[str, keras.layers.Dense]) -> None:
        """Restores the kernels `merge` changed (subtracts the deltas if the layer was
        rebuilt merged, with no copy of the kernels from before).

        Raises:
            ValueError: not merged.
        """
        if not self.merged:
            raise UserError(f"{self.name} is not merged")
        for target in self.targets:
            kernel = projections[target].kernel
            if self._backup is not None:
                kernel.assign(self._backup.kernels[target])
            else:
                kernel.assign_sub(tf.cast(self.delta(target), kernel.dtype))
        self._backup = None
        self.merged = False

    def save_own_variables(self, store):
        # The kernels Keras saves beside this layer hold its deltas while merged; a model
        # rebuilt from the file would add them a second time.
        if self.merged:
            raise UserError("a LoRA (projection) adapter is merged into the backbone's "
                            "kernels: unmerge it (adapter_bert.unmerge_adapter) before "
                            "saving the model with Keras")
        super().save_own_variables(store)

    def get_config(self):
        config = super().get_config()
        widths = dict(self.output_widths) if self.output_widths else None
        config.update(targets=list(self.targets), output_widths=widths, merged=self.merged)
        return config


@keras.utils.register_keras_serializable(package="adapter_bert")
class LoraAdapter(ProjectionAdapter):
    """LoRA on the projections of one block (Hu et al., 2022).

    Per target `t_lora_A [in, r]` (uniform, as the reference) and `t_lora_B [r, out]`
    (zeros): `{t: scale * (dropout(x) @ A) @ B}`, added to the frozen `x @ W + b`; the
    dropout acts on the update's input only, per target, as PEFT's.

        >>> sorted(LoraAdapter(rank=2)(tf.ones([1, 3, 8])))
        ['query', 'value']
    """

    def __init__(self, rank=8, scale=1.0, targets=("query", "value"), dropout=0.0,
                 output_widths=None, merged=False, name="adapters", **kwargs):
        super().__init__(targets, output_widths, merged, name=name, **kwargs)
        self.rank = int(rank)
        self.scale = float(scale)
        self.dropout_rate = float(dropout)
        # Only with a rate: a Dropout layer that is never called stays unbuilt, which
        # SavedModel reports.
        self._dropout = Dropout(self.dropout_rate) if self.dropout_rate > 0 else None

    @classmethod
    def from_adapter_config(cls, adapter_config, projections):
        """The layer for one block: `projections` maps its targets to their output widths."""
        return cls(adapter_config.size, adapter_config.lora_scale, tuple(projections),
                   adapter_config.lora_dropout, dict(projections))

    def build(self, input_shape):
        width = int(input_shape[-1])
        self.lora_a, self.lora_b = {}, {}
        for target in self.targets:
            self.lora_a[target] = self.add_weight(f"{target}_lora_A", [width, self.rank],
                                                  initializer=_fan_in_uniform(width))
            self.lora_b[target] = self.add_weight(
                f"{target}_lora_B", [self.rank, self.output_width(target, width)],
                initializer="zeros")
        super().build(input_shape)

    def update(self, inputs, target, training=None):
        dtype = self.compute_dtype
        if self._dropout is not None:
            inputs = self._dropout(inputs, training=training)
        low = tf.tensordot(inputs, tf.cast(self.lora_a[target], dtype), 1)
        return self.scale * tf.tensordot(low, tf.cast(self.lora_b[target], dtype), 1)

    def delta(self, target):
        return self.scale * tf.matmul(self.lora_a[target], self.lora_b[target])

    def get_config(self):
        config = super().get_config()
        config.update(rank=self.rank, scale=self.scale, dropout=self.dropout_rate)
        return config

    @staticmethod
    def param_count(width: int, rank: int, targets: int = 2) -> int:
        """Weights of one layer's LoRA on square projections: `targets * 2 * width * rank`."""
        return targets * 2 * width * rank


# --------------------------------------------------------------- built-in families
def _bottleneck_params(config, in_width: int, out_width: int) -> int:
    return _Bottleneck.param_count(in_width, config.size)


def _lora_params(config, in_width: int, out_width: int) -> int:
    return config.size * (in_width + out_width)


def _lora_alpha(value):
    if value is None:
        return None
    if not float(value) > 0:
        raise UserError(f"lora_alpha must be > 0, got {value}")
    return float(value)


def _lora_targets(value):
    names = [t.strip() for t in value.split(",")] if isinstance(value, str) else list(value)
    bad = [t for t in names if t not in PROJECTIONS]
    if not names or bad or len(set(names)) != len(names):
        raise UserError(f"lora_targets must name projections of {PROJECTIONS}, each once, "
                        f"got {value!r}")
    return tuple(t for t in PROJECTIONS if t in names)


def _lora_dropout(value):
    if not 0 <= float(value) < 1:
        raise UserError(f"lora_dropout must be in [0, 1), got {value}")
    return float(value)


BUILT_IN_FAMILIES = (
    AdapterFamily(
        "houlsby", HoulsbyAdapter, _bottleneck_params, positions=ADAPTER_POSITIONS,
        default_positions="both",
        description="bottlenecks after the attention and the feed-forward output projections"),
    AdapterFamily(
        "pfeiffer", PfeifferAdapter, _bottleneck_params, positions=("ffn",),
        default_positions="ffn",
        description="one bottleneck per layer at the feed-forward output (AdapterHub's placement)"),
    AdapterFamily(
        "parallel", ParallelAdapter, _bottleneck_params, positions=ADAPTER_POSITIONS,
        default_positions="ffn", options={"parallel_scaling": AdapterOption(
            4.0, float, "Scale of the parallel adapter's output (He et al.'s s).",
            bounds=Bounds(0, 10**6, low_open=True))},
        description="a scaled bottleneck beside the feed-forward sub-layer"),
    AdapterFamily(
        "lora", LoraAdapter, _lora_params, slot="projections", positions=("attention",),
        default_positions="attention",
        options={"lora_alpha": AdapterOption(
                     None, _lora_alpha, "LoRA scaling numerator (scale = alpha / rank); "
                     "default: the rank, i.e. scale 1.", "float",
                     Bounds(0, 10**6, low_open=True)),
                 "lora_targets": AdapterOption(
                     ("query", "value"), _lora_targets,
                     "Projections LoRA updates, comma-separated, of: " + ", ".join(PROJECTIONS)
                     + " (attention_output: the attention output dense; intermediate and "
                     "output: the feed-forward up and down projections).", "list"),
                 "lora_dropout": AdapterOption(
                     0.0, _lora_dropout, "Dropout rate on the input of LoRA's updates (as "
                     "PEFT's lora_dropout).", bounds=Bounds(0, 1, high_open=True))},
        projections=lambda config: config.lora_targets,
        description="low-rank updates of the projections --lora_targets (rank --adapter_size)"),
)
