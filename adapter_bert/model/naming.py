"""TF1 checkpoint names for the layers and weights of a model, from its layer structure.

Keras names variables after the name scope in force when a layer was first built,
which depends on call order. Checkpoint mapping and freezing must not, so scopes here
are built by walking the layer tree: each layer contributes its own name (or its
absolute `tf1_scope`) and each weight its short name (`kernel`, `gamma`, `weights1`).
"""

from typing import Dict, Iterator, Tuple
from adapter_bert.errors import UserError

import tensorflow as tf
import tf_keras as keras


def _short_name(variable: tf.Variable) -> str:
    return variable.name.split("/")[-1].split(":")[0]


def direct_weights(layer: keras.layers.Layer):
    """The weights a layer created itself (its sub-layers' weights excluded)."""
    return list(layer._trainable_weights) + list(layer._non_trainable_weights)  # noqa: SLF001


# Where a layer that owns weights and has children keeps the own weights freezing moved
# to its non-trainable list (`adapters.tuning.train_only`): parameters, not state.
FROZEN_OWN_WEIGHTS = "_adapter_bert_frozen_weights"


def state_weights(layer: keras.layers.Layer):
    """The weights a layer created as non-trainable state (BatchNorm moving statistics)."""
    frozen = {id(v) for v in getattr(layer, FROZEN_OWN_WEIGHTS, ())}
    return [v for v in layer._non_trainable_weights if id(v) not in frozen]  # noqa: SLF001


def _children(layer: keras.layers.Layer):
    # Keras' own traversal of directly tracked sub-layers (lists included).
    return list(layer._flatten_layers(include_self=False, recursive=False))  # noqa: SLF001


def _join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix and name else (prefix or name)


def walk_layers(model: keras.layers.Layer, scope: str = "") -> Iterator[Tuple[str, keras.layers.Layer]]:
    """Yields (TF1 scope, layer) for `model` and every sub-layer, parents first.

    The backbone is always under `bert`; heads use their `tf1_scope` ("" for Google's
    top-level `output_weights`, `cls/squad` for the SQuAD head).
    """
    if not scope and getattr(model, "name", None) == "bert":
        scope = "bert"
    yield scope, model
    for child in _children(model):
        child_scope = getattr(child, "tf1_scope", None)
        if child_scope is None:
            child_scope = _join(scope, child.name)
        yield from walk_layers(child, child_scope)


def tf1_variables(model: keras.layers.Layer) -> Dict[str, tf.Variable]:
    """TF1 checkpoint name (no `:0`) -> variable of a built model, in layer order:
    `bert/...` plus a head's (`output_weights`, `cls/squad/...`). Raises ValueError when two
    variables would share a name.
    """
    names: Dict[str, tf.Variable] = {}
    for scope, layer in walk_layers(model):
        for variable in direct_weights(layer):
            if getattr(layer, "tf1_weight_is_scope", False):
                name = scope
            else:
                name = _join(scope, _short_name(variable))
            if name in names and names[name] is not variable:
                raise UserError(f"two variables map to the TF1 name {name!r}")
            names[name] = variable
    return names
