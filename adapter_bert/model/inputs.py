"""What a model of this package is called on: the one check of its input features.

A dict of int tensors `[batch, seq]`: `input_ids`, optional `input_mask` (omitted: every
position attended) and optional `segment_ids` (omitted: 0). Hugging Face's
`attention_mask` and `token_type_ids` are accepted as aliases. Any other key, a bare
tensor or a Keras 3 tensor raises a one-line `ValueError` naming what is expected.
"""

import sys
from typing import Dict, Iterable, Mapping

import tensorflow as tf
import tf_keras as keras
from adapter_bert.errors import UserError
from adapter_bert.model.fast_layers import Dropout

# Google's names, in the order of `BertModel.call`.
FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids")

# Other names of the same features: Hugging Face tokenizers' outputs.
ALIASES = {"attention_mask": "input_mask", "token_type_ids": "segment_ids"}

# Names from libraries whose features mean the same but are not accepted silently: the
# error says what to rename them to.
_RENAMES = {"token_ids": "input_ids", "padding_mask": "input_mask", "input_masks": "input_mask",
            "segment_id": "segment_ids", "input_id": "input_ids", "mask": "input_mask"}

_KERAS3_HINT = ("adapter_bert models are tf-keras (Keras 2) models: use tf_keras.{kind}, not "
                "keras.{kind} (Keras 3)")


def dummy_features(seq_length: int = 2) -> Dict[str, tf.Tensor]:
    """A one-row batch of every feature: what building a model runs. All three keys, so that
    every call a SavedModel traces takes the same structure (Keras cannot load one whose
    calls took different keys)."""
    return {"input_ids": tf.zeros([1, seq_length], tf.int32),
            "input_mask": tf.ones([1, seq_length], tf.int32),
            "segment_ids": tf.zeros([1, seq_length], tf.int32)}


def expected_keys(extra: Iterable[str] = ()) -> str:
    """The accepted names, as error messages list them."""
    names = list(FEATURE_NAMES) + [f"{alias} (= {name})" for alias, name in ALIASES.items()]
    return ", ".join(names + list(extra))


def model_features(inputs, model_name: str = "the model",
                   extra: Iterable[str] = ()) -> Dict[str, object]:
    """Checks a model's input dict and returns a new one under Google's names (`input_ids`,
    `input_mask`, `segment_ids`), plus the `extra` keys the model takes. Raises ValueError
    for a non-dict, no `input_ids`, an unknown key, a feature under both names, non-integer
    ids or a Keras 3 tensor; `model_name` names the model in the message.
    """
    extra = tuple(extra)
    if not isinstance(inputs, Mapping):
        what = type(inputs).__name__
        raise UserError(
            f"{model_name} takes a dict of features ({expected_keys(extra)}), not a {what}: "
            f"pass {{'input_ids': ids, 'input_mask': mask}} (a bare tensor would attend "
            f"padding)")
    features: Dict[str, object] = {}
    unknown = []
    for key, value in inputs.items():
        name = ALIASES.get(key, key)
        if name not in FEATURE_NAMES and name not in extra:
            unknown.append(key)
            continue
        if name in features:
            raise UserError(f"{model_name} got both {name!r} and its alias "
                            f"{[k for k, v in ALIASES.items() if v == name][0]!r}: pass one")
        features[name] = value
    if unknown:
        hints = [f"{k!r} -> {_RENAMES[k]!r}" for k in unknown if k in _RENAMES]
        raise UserError(f"{model_name} got unknown input key(s) {unknown}; expected "
                        f"{expected_keys(extra)}" + (f" (rename {', '.join(hints)})"
                                                      if hints else ""))
    if "input_ids" not in features:
        raise UserError(f"{model_name} needs 'input_ids'; got {list(inputs)} (expected "
                        f"{expected_keys(extra)})")
    for name in FEATURE_NAMES:
        if name in features:
            _check_value(features[name], name, model_name)
    return features


def _check_value(value, name: str, model_name: str) -> None:
    if _is_keras3(value):
        raise UserError(_KERAS3_HINT.format(kind="Input") + f" ({model_name}'s {name!r})")
    dtype = getattr(value, "dtype", None)
    if name == "input_ids" and dtype is not None:
        dtype = tf.as_dtype(dtype)
        if not dtype.is_integer:
            raise UserError(f"{model_name}: input_ids must be integers, got {dtype.name}")


def _is_keras3(obj) -> bool:
    """True for an object of Keras 3 (the `keras` package, version 3 or later)."""
    module = type(obj).__module__ or ""
    if module.split(".", 1)[0] != "keras":
        return False
    keras = sys.modules.get("keras")
    version = getattr(keras, "__version__", "3")
    return not version.startswith(("1.", "2."))


def check_tf_keras(obj, kind: str, where: str) -> None:
    """Raises a one-line `TypeError` when `obj` (or an item of a list/dict) is Keras 3's.

    Args:
        obj: what the user passed (an optimizer, a loss, a list of callbacks, ...).
        kind: what to name in the hint ("optimizers.Adam", "callbacks", ...).
        where: the argument, for the message ("compile(optimizer=...)").
    """
    items = obj.values() if isinstance(obj, Mapping) else (
        obj if isinstance(obj, (list, tuple)) else [obj])
    for item in items:
        if _is_keras3(item):
            name = type(item).__name__
            raise TypeError(_KERAS3_HINT.format(kind=f"{kind}.{name}" if kind else name)
                            + f" (in {where})")


class FeatureInputs:
    """Mixin for the package's Keras models: checks the features before Keras sees them,
    so a wrong key fails with a one-line message (not wrapped in Keras' call context),
    refuses Keras 3 objects in `compile` and `fit` / `evaluate` / `predict`, and refuses
    `save` while an adapter is merged into the kernels (adapters/merging.py).

    `EXTRA_INPUTS`: keys a model takes beside the features.
    """

    EXTRA_INPUTS: tuple = ()

    # The network has no data-dependent Python control flow, so autograph has nothing to
    # convert in it: running it unconverted (and every layer it calls) saves the
    # conversion of each layer's source when Keras traces its train/eval/predict functions.
    @tf.autograph.experimental.do_not_convert
    def __call__(self, inputs, *args, **kwargs):
        inputs = model_features(inputs, type(self).__name__, self.EXTRA_INPUTS)
        return super().__call__(inputs, *args, **kwargs)

    def compile(self, optimizer="rmsprop", loss=None, metrics=None, *args, **kwargs):
        check_tf_keras(optimizer, "optimizers", "compile(optimizer=...)")
        check_tf_keras(loss, "losses", "compile(loss=...)")
        for metric in metrics.values() if isinstance(metrics, Mapping) else (metrics or []):
            check_tf_keras(metric, "metrics", "compile(metrics=...)")
        for key in ("weighted_metrics",):
            check_tf_keras(kwargs.get(key) or [], "metrics", f"compile({key}=...)")
        return super().compile(optimizer, loss, metrics, *args, **kwargs)

    def compile_from_config(self, config):
        # What Keras does when a .keras file holds a compiled model; Keras skips it (with
        # a warning) for any model whose `compile` is overridden, as ours is for the check.
        import tf_keras
        self.compile(**tf_keras.saving.deserialize_keras_object(config))
        if isinstance(getattr(self, "optimizer", None), tf_keras.optimizers.Optimizer) \
                and self.built:
            self.optimizer.build(self.trainable_variables)

    def fit(self, *args, **kwargs):
        check_tf_keras(kwargs.get("callbacks") or [], "callbacks", "fit(callbacks=...)")
        # The optimizer's slots are created before Keras traces its train function:
        # creating them inside makes tf.function trace it twice. (A checkpoint restored
        # before this reaches them as it would inside.)
        optimizer = getattr(self, "optimizer", None)
        if isinstance(optimizer, keras.optimizers.Optimizer) and self.built:
            with self.distribute_strategy.scope():
                optimizer.build(self.trainable_variables)
        # So are the dropout layers' random generators, made at their first draw: a traced,
        # never run, forward pass in training mode makes them in the order the train step
        # would, drawing nothing, so a seed gives the same run. (Left to the step under a
        # distribution strategy.)
        if self.built and self.distribute_strategy is tf.distribute.get_strategy() \
                and not tf.distribute.has_strategy() and Dropout.generators_pending(self):
            tf.function(lambda: self(dummy_features(), training=True),
                        autograph=False).get_concrete_function()
        return super().fit(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        check_tf_keras(kwargs.get("callbacks") or [], "callbacks", "evaluate(callbacks=...)")
        return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        check_tf_keras(kwargs.get("callbacks") or [], "callbacks", "predict(callbacks=...)")
        return super().predict(*args, **kwargs)

    def save(self, filepath, *args, **kwargs):
        # A model rebuilt from the file gets its adapters unmerged over the merged
        # kernels: a SavedModel would apply the update twice, a .keras file is refused by
        # the adapter half-way. Checked before Keras writes anything.
        bert = self if hasattr(self, "refuse_while_merged") else getattr(self, "bert", None)
        if hasattr(bert, "refuse_while_merged"):
            bert.refuse_while_merged("saving the model with Keras")
        return super().save(filepath, *args, **kwargs)

    def build_with_dummy_inputs(self, seq_length: int = 2) -> None:
        """Creates every weight by running a tiny batch (weights must exist to load them)."""
        self(dummy_features(seq_length), training=False)

    def build_from_config(self, config):
        # Keras' default builds from input shapes with float placeholders, which the
        # embedding lookups refuse: build with int ids instead (loading a .keras file).
        if not self.built:
            self.build_with_dummy_inputs()
