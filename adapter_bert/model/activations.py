"""Activation functions by name, with the GELU ambiguity resolved explicitly.

"gelu" means different functions in different code bases: Google's BERT and adapter-bert
use the tanh approximation, transformers' "gelu" is the exact erf form. Configs store a
canonical name so a checkpoint is always run with the function it was trained with.
"""

import math

import tensorflow as tf

from adapter_bert.model.fast_layers import lean_cpu_kernels
from adapter_bert.errors import UserError

_ALIASES = {
    "gelu": "gelu_tanh",          # adapter-bert / Google BERT meaning
    "gelu_new": "gelu_tanh",      # transformers' name for the tanh form
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_exact": "gelu_erf",
    "identity": "linear",
    "silu": "swish",
}


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


# Both GELUs state their derivative rather than leave it to autodiff, which would keep
# three intermediates of the [batch, length, intermediate_size] activation per layer and
# take more passes over it. Each is written once, as a function returning the value and
# the derivative, and run one of two ways:
#
# - Plain TensorFlow ops (GPU, TPU, inside XLA): the derivative is computed in the
#   forward pass, sharing its intermediates, and only it is kept for the backward pass.
#   It is computed only when a gradient is taken (graph pruning drops it at inference).
# - On a CPU outside XLA (fast_layers.lean_cpu_kernels), where each TensorFlow op is a
#   pass over the activation, as two XLA-compiled kernels: the forward computes the
#   value in one pass (XLA drops the unused derivative), the backward recomputes the
#   derivative from the kept input, fused with its product with the upstream gradient.
#   GELU forward and backward together then cost about what ReLU does. XLA compiles
#   once per shape; dynamic padding rounds batch widths to multiples of 8, so there are
#   few shapes.
#   16-bit inputs are computed in float32 inside the kernel at no extra memory traffic.

def _tanh_parts(x):
    """gelu_tanh(x) and its derivative."""
    inner = _SQRT_2_OVER_PI * (x + 0.044715 * tf.pow(x, 3))
    one_plus_tanh = 1.0 + tf.tanh(inner)
    # d/dx 0.5 x (1 + tanh(inner)) = 0.5 (1 + tanh) + 0.5 x (1 - tanh^2) inner'
    derivative = 0.5 * one_plus_tanh + 0.5 * x * one_plus_tanh * (2.0 - one_plus_tanh) \
        * (_SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * tf.square(x)))
    return 0.5 * x * one_plus_tanh, derivative


def _erf_parts(x):
    """gelu_erf(x) and its derivative."""
    one_plus_erf = 1.0 + tf.math.erf(x / math.sqrt(2.0))
    # d/dx x Phi(x) = Phi(x) + x phi(x), phi the standard normal density.
    derivative = 0.5 * one_plus_erf + x * tf.exp(-0.5 * tf.square(x)) * _INV_SQRT_2PI
    return 0.5 * x * one_plus_erf, derivative


def _in_kernel_dtype(x):
    """16-bit inputs are computed in float32 (free inside a fused kernel)."""
    return tf.cast(x, tf.float32) if x.dtype.size < 4 else x


def _gelu(parts):
    """A GELU activation with the stated derivative of `parts` (see above)."""

    @tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
    def fused_value(x):
        return tf.cast(parts(_in_kernel_dtype(x))[0], x.dtype)

    @tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
    def fused_gradient(x, upstream):
        derivative = parts(_in_kernel_dtype(x))[1]
        return tf.cast(_in_kernel_dtype(upstream) * derivative, upstream.dtype)

    @tf.custom_gradient
    def gelu(x):
        if lean_cpu_kernels():
            return fused_value(x), lambda upstream: fused_gradient(x, upstream)
        value, derivative = parts(x)
        return value, lambda upstream: upstream * derivative

    return gelu


_gelu_tanh = _gelu(_tanh_parts)
_gelu_erf = _gelu(_erf_parts)


_FUNCTIONS = {
    "gelu_tanh": _gelu_tanh,
    "gelu_erf": _gelu_erf,
    "relu": tf.nn.relu,
    "tanh": tf.tanh,
    "swish": tf.nn.swish,
    "linear": tf.identity,
}

ACTIVATION_NAMES = tuple(sorted(set(_FUNCTIONS) | set(_ALIASES)))


def canonical_activation(name: str) -> str:
    """The canonical name of an activation or alias ("gelu" is the tanh approximation,
    "gelu_erf", "relu", ...); ValueError for an unknown one.
    """
    key = str(name).lower()
    key = _ALIASES.get(key, key)
    if key not in _FUNCTIONS:
        raise UserError(f"unknown activation {name!r}; expected one of {', '.join(ACTIVATION_NAMES)}")
    return key


def get_activation(name: str):
    """Returns the activation function for `name` (see `canonical_activation`)."""
    return _FUNCTIONS[canonical_activation(name)]
