"""Activation functions by name, with the GELU ambiguity resolved explicitly.

"gelu" means different functions in different code bases: Google's BERT and adapter-bert
use the tanh approximation, transformers' "gelu" is the exact erf form. Configs store a
canonical name so a checkpoint is always run with the function it was trained with.
"""

import math

import tensorflow as tf

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


# Both GELUs state their derivative and keep only it for the backward pass: autodiff of
# the formulas would keep three intermediates of the [batch, length, intermediate_size]
# activation per layer and take more passes over it. The derivative is computed in the
# forward pass only when a gradient is taken (graph pruning drops it at inference).

@tf.custom_gradient
def _gelu_tanh(x):
    inner = _SQRT_2_OVER_PI * (x + 0.044715 * tf.pow(x, 3))
    one_plus_tanh = 1.0 + tf.tanh(inner)
    # d/dx 0.5 x (1 + tanh(inner)) = 0.5 (1 + tanh) + 0.5 x (1 - tanh^2) inner'
    derivative = 0.5 * one_plus_tanh + 0.5 * x * one_plus_tanh * (2.0 - one_plus_tanh) \
        * (_SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * tf.square(x)))
    return 0.5 * x * one_plus_tanh, lambda upstream: upstream * derivative


@tf.custom_gradient
def _gelu_erf(x):
    one_plus_erf = 1.0 + tf.math.erf(x / math.sqrt(2.0))
    # d/dx x Phi(x) = Phi(x) + x phi(x), phi the standard normal density.
    derivative = 0.5 * one_plus_erf + x * tf.exp(-0.5 * tf.square(x)) * _INV_SQRT_2PI
    return 0.5 * x * one_plus_erf, lambda upstream: upstream * derivative


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
    """Maps an activation name or alias to its canonical name.

    Args:
        name: e.g. "gelu" (tanh approximation), "gelu_erf", "relu", "tanh", "swish".

    Returns:
        The canonical name, a key of the function table.

    Raises:
        ValueError: the name is unknown.
    """
    key = str(name).lower()
    key = _ALIASES.get(key, key)
    if key not in _FUNCTIONS:
        raise ValueError(f"unknown activation {name!r}; expected one of {', '.join(ACTIVATION_NAMES)}")
    return key


def get_activation(name: str):
    """Returns the activation function for `name` (see `canonical_activation`)."""
    return _FUNCTIONS[canonical_activation(name)]
