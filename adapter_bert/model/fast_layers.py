"""Dropout, LayerNorm, Dense and a float32 sum that make fewer passes over memory on a CPU.

Outside its matrix products a CPU training step is bound by memory traffic, so:
- `Dropout` draws 16 random bits per element (one Philox word serves two) against an
  integer threshold, scaled by the exact inverse keep probability (`quantized_rate`);
  only on CPU hosts outside XLA, where it is faster; elsewhere it is Keras' `Dropout`.
- `LayerNorm` states the normalisation's gradient in closed form (`normalize`) and keeps
  only the normalised input for the backward pass.
- `Dense` adds the bias to the 2-D product so oneDNN can fuse it into the matmul (one
  bfloat16 rounding, one pass fewer).
Each subclasses the Keras layer it replaces, with the same weights and config.
"""

import contextlib
import functools
import numbers

import tensorflow as tf
import tf_keras as keras
from tf_keras.src import backend
from tf_keras.src.utils import control_flow_util

_LEVELS = 1 << 16   # random levels per element: 16 bits


def quantized_rate(rate: float) -> float:
    """The dropout rate actually applied by `Dropout` on a CPU: `rate` rounded to k / 2^16.

    An element is dropped when its 16 random bits, read as an integer in [0, 2^16), fall
    below `round(rate * 2^16)`. For rate 0.1 that is 6554 / 65536 = 0.100006.
    """
    return round(float(rate) * _LEVELS) / _LEVELS


def keep_mask(shape, rate: float, seed) -> tf.Tensor:
    """A boolean tensor of `shape`, each element True with probability 1 -
    quantized_rate(rate).

    Args:
        shape: the mask's shape (a list or 1-D int tensor).
        rate: dropout rate in [0, 1).
        seed: shape [2] integer seed of the stateless random op.
    """
    shape = tf.convert_to_tensor(shape, tf.int32)
    count = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform([(count + 1) // 2], seed, minval=None, maxval=None,
                                        dtype=tf.uint32)
    # Each 32-bit word splits into two 16-bit numbers; the odd one left over, if any, is cut.
    halves = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:count]
    threshold = tf.constant(round(float(rate) * _LEVELS), tf.uint16)
    return tf.reshape(halves >= threshold, shape)


@functools.lru_cache(maxsize=None)
def _host_is_cpu() -> bool:
    # Asked once: devices do not come and go within a process once TensorFlow has started.
    return not (tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))


def lean_cpu_kernels() -> bool:
    """Whether ops built now should take the CPU-specific kernels of this package.

    True on a host without GPUs or TPUs, outside an XLA-compiled function: there, each
    element-wise TensorFlow op is a pass over memory, and the kernels here (16-bit
    dropout masks, the XLA-fused GELU of activations.py) make fewer of them. Inside XLA
    the compiler fuses element-wise work itself, and accelerators have other costs.
    Inside `portable_kernels()` it is False.
    """
    return not _PORTABLE and _host_is_cpu() and \
        not control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


# Depth of nested `portable_kernels()` blocks (non-empty: plain TensorFlow ops only).
_PORTABLE = []


@tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
def _fused_float32_sum(a, b):
    return tf.cast(a, tf.float32) + tf.cast(b, tf.float32)


@tf.custom_gradient
def float32_sum(a, b):
    """`a + b` in float32, for 16-bit inputs that must not be rounded before they meet.

    Used under mixed precision where a small addend joins a large one (an adapter's output
    and its input, see model/adapter_layers.py `skip_sum`; the block's residual). Op by op
    that is two casts and an add, three passes over the activation forward; on a CPU outside
    XLA (`lean_cpu_kernels`) it is one XLA-fused pass. The gradient is cast to each input's
    dtype once, shared when the dtypes agree.
    """
    if lean_cpu_kernels():
        total = _fused_float32_sum(a, b)
    else:
        total = tf.cast(a, tf.float32) + tf.cast(b, tf.float32)

    def grad(upstream):
        grad_a = tf.cast(upstream, a.dtype)
        return grad_a, grad_a if b.dtype == a.dtype else tf.cast(upstream, b.dtype)

    return total, grad


@contextlib.contextmanager
def portable_kernels():
    """Ops built inside use plain TensorFlow kernels only, whatever the host.

    For graphs that are saved and served elsewhere (SavedModels, TFLite): the GELU of
    `lean_cpu_kernels` is an XLA-compiled function, compiled anew for every input width
    a server meets, and one a TFLite converter cannot take.
    """
    _PORTABLE.append(True)
    try:
        yield
    finally:
        _PORTABLE.pop()


@keras.utils.register_keras_serializable(package="adapter_bert")
class Dropout(keras.layers.Dropout):
    """Keras `Dropout` that draws 16 random bits per element on CPU hosts.

    Same arguments, seeding and config as `keras.layers.Dropout`; with a `noise_shape`, on
    a GPU or TPU host, inside an XLA-compiled function (`jit_compile=True`), or with a
    rate that is not a plain number, it is that layer.

    Examples:
        >>> layer = Dropout(0.1, seed=1)
        >>> layer(tf.ones([2, 3]), training=False).numpy().tolist()
        [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """

    def mark_built(self, input_shape) -> None:
        """Marks the layer built (so SavedModel serialises it) without Keras' `build`.

        `build` creates the layer's random generator at once; created earlier than at the
        first draw, it would take another place in the order of the model's generators,
        and the same seed would drop other units (a different training run).
        """
        keras.layers.Layer.build(self, input_shape)

    def call(self, inputs, training=None):
        if not self._uses_bits():
            return super().call(inputs, training=training)
        if training is None:
            training = backend.learning_phase()
        return control_flow_util.smart_cond(
            training, lambda: self._drop(inputs), lambda: tf.identity(inputs))

    def keep_mask(self, shape, training=None):
        """The elements this layer keeps of an input of `shape`, and their scale, for
        callers that apply the dropout themselves (attention_kernel.py).

        Drawn as `call` draws; returns `(keep, 1 / keep probability)`, or `(None, 1.0)` when
        the layer would return its input unchanged (inference, rate 0).
        """
        if isinstance(self.rate, numbers.Real) and self.rate == 0:
            return None, 1.0
        if training is None:
            training = backend.learning_phase()
        static = control_flow_util.constant_value(training)
        if static is not None and not static:
            return None, 1.0
        if self._uses_bits():
            keep = keep_mask(shape, self.rate, self._stateless_seed())
            scale = 1.0 / (1.0 - quantized_rate(self.rate))
        else:
            uniform = self._random_generator.random_uniform(shape, dtype=tf.float32)
            keep = uniform >= tf.cast(self.rate, tf.float32)
            scale = 1.0 / (1.0 - self.rate)
        if static is None:      # a training flag known only when the step runs
            keep = tf.cond(tf.cast(training, tf.bool), lambda: keep,
                           lambda: tf.ones_like(keep))
            scale = tf.where(tf.cast(training, tf.bool), tf.cast(scale, tf.float32), 1.0)
        return keep, scale

    @staticmethod
    def generators_pending(model) -> bool:
        """Whether a layer of `model` of this class has yet to make its random generator
        (which it makes at its first draw)."""
        return any(isinstance(layer, Dropout) and not layer._random_generator._built
                   for layer in model.submodules)

    def _uses_bits(self) -> bool:
        return (self.noise_shape is None and isinstance(self.rate, numbers.Real)
                and 0 < self.rate < 1 and lean_cpu_kernels())

    def _drop(self, inputs):
        keep, scale = self.keep_mask(tf.shape(inputs), training=True)
        return tf.where(keep, inputs * tf.cast(scale, inputs.dtype), tf.zeros([], inputs.dtype))

    def _stateless_seed(self):
        """A fresh seed per call, drawn the way the layer's Keras generator draws its
        numbers.

        So `seed=`, `keras.utils.set_random_seed` and Keras' stateless and stateful
        generator modes give reproducible runs as they do with Keras' `Dropout`.
        """
        generator = self._random_generator
        generator._maybe_init()
        if generator._rng_type == generator.RNG_STATELESS:
            return generator.make_seed_for_stateless_op()
        if generator._rng_type == generator.RNG_STATEFUL:
            return generator._generator.make_seeds(1)[:, 0]
        return tf.random.uniform([2], minval=tf.int32.min, maxval=tf.int32.max,
                                 dtype=tf.int32, seed=generator.make_legacy_seed())


@tf.custom_gradient
def normalize(x, epsilon):
    """`(x - mean) / sqrt(var + epsilon)` over the last axis, with a closed-form gradient.

    Args:
        x: float32 tensor.
        epsilon: float32 scalar (no gradient flows to it).
    """
    centered = x - tf.reduce_mean(x, axis=-1, keepdims=True)
    inverse_std = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
                                + epsilon)
    normalized = centered * inverse_std

    def grad(upstream):
        # d/dx of x_hat: (g - mean(g) - x_hat * mean(g * x_hat)) / std, per row.
        mean_upstream = tf.reduce_mean(upstream, axis=-1, keepdims=True)
        mean_projection = tf.reduce_mean(upstream * normalized, axis=-1, keepdims=True)
        return (inverse_std * (upstream - mean_upstream - normalized * mean_projection),
                tf.zeros_like(epsilon))

    return normalized, grad


@keras.utils.register_keras_serializable(package="adapter_bert")
class LayerNorm(keras.layers.LayerNormalization):
    """Keras `LayerNormalization` over the last axis with a closed-form gradient.

    Same weights (`gamma`, `beta`), arguments and config; normalising over other axes
    falls back to the Keras computation. Under mixed precision it normalises in float32,
    as Keras does, reads a float32 input without rounding it and returns the compute
    dtype.

    Examples:
        >>> layer = LayerNorm(epsilon=1e-12)
        >>> [round(v, 3) for v in layer(tf.constant([[1.0, 3.0]])).numpy()[0]]
        [-1.0, 1.0]
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A float32 input (an adapter's sum under mixed precision) is normalised as it
        # is, not rounded to the compute dtype first; the output is in the compute dtype.
        self._autocast = False

    def call(self, inputs):
        if isinstance(inputs, tf.RaggedTensor) or self.axis != [inputs.shape.rank - 1]:
            return super().call(tf.cast(inputs, self.compute_dtype))
        outputs = normalize(tf.cast(inputs, tf.float32), tf.constant(self.epsilon, tf.float32))
        if self.scale:
            outputs = outputs * tf.cast(self.gamma, tf.float32)
        if self.center:
            outputs = outputs + tf.cast(self.beta, tf.float32)
        return tf.cast(outputs, self.compute_dtype)


@keras.utils.register_keras_serializable(package="adapter_bert")
class Dense(keras.layers.Dense):
    """Keras `Dense` whose bias add fuses with the matmul on inputs of rank above 2.

    Same arguments, weights and config as `keras.layers.Dense`; the input's leading axes
    are flattened around one 2-D matmul (see the module docstring).

    Examples:
        >>> layer = Dense(2, kernel_initializer="ones", bias_initializer="ones")
        >>> layer(tf.ones([1, 3, 4])).numpy().tolist()
        [[[5.0, 5.0], [5.0, 5.0], [5.0, 5.0]]]
    """

    def call(self, inputs):
        rank = inputs.shape.rank
        if rank is None or rank <= 2 or isinstance(inputs, (tf.SparseTensor, tf.RaggedTensor)):
            return super().call(inputs)
        inputs = tf.cast(inputs, self.compute_dtype)
        width = inputs.shape[-1]
        outputs = tf.matmul(tf.reshape(inputs, [-1, width]), self.kernel)
        if self.use_bias:
            outputs = tf.nn.bias_add(outputs, self.bias)
        if self.activation is not None:
            outputs = self.activation(outputs)
        leading = tf.shape(inputs)[:-1]
        outputs = tf.reshape(outputs, tf.concat([leading, [self.units]], axis=0))
        outputs.set_shape(inputs.shape[:-1].concatenate([self.units]))
        return outputs
