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


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * tf.pow(x, 3))))


def _gelu_erf(x):
    return 0.5 * x * (1.0 + tf.math.erf(x / tf.cast(math.sqrt(2.0), x.dtype)))


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
