"""What the classifier's loss weighs, shared by `run_classifier.py` and `TextClassifier`:
class weights (`--class_weights`, Keras' `class_weight`) and the class-weighted loss.
"""

import math
from typing import Dict, List, Mapping, Optional

import tensorflow as tf
import tf_keras as keras

from adapter_bert.errors import UserError


@keras.utils.register_keras_serializable(package="adapter_bert")
class ClassWeightedCrossEntropy(keras.losses.Loss):
    """Softmax cross-entropy of each row times its true class's weight, averaged over the
    batch as Keras' `class_weight` does: a rare class's errors count `weight` times."""

    def __init__(self, weights, name: str = "class_weighted_crossentropy"):
        super().__init__(name=name)
        self.weights = [float(w) for w in weights]

    def call(self, y_true, y_pred):
        ids = tf.cast(tf.reshape(y_true, [-1]), tf.int32)
        loss = keras.losses.sparse_categorical_crossentropy(ids, tf.cast(y_pred, tf.float32),
                                                            from_logits=True)
        return loss * tf.gather(tf.constant(self.weights, tf.float32), ids)

    def get_config(self):
        return {**super().get_config(), "weights": self.weights}


def class_weights_for(spec, labels: List[str], regression: bool,
                      counts: Optional[Mapping[str, int]],
                      name: str = "--class_weights") -> Optional[Dict[str, float]]:
    """Class weights as {label: weight} in logit order (None when `spec` is empty):
    `balanced` is scikit-learn's n_rows / (n_classes * rows of the class) over the
    training rows, `counts` ({label: rows}, None without training data); `label:weight,...`, or a dict keyed by label names or ids
    (`TextClassifier.fit`'s `class_weight`), sets them (the others weigh 1). Raises
    UserError naming `name` (the flag or argument) and what was expected."""
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        return None
    if regression:
        raise UserError(f"{name} weighs classes: a regression task has none")
    if counts is None:
        raise UserError(f"{name} weighs the training loss: it needs --do_train")
    if isinstance(spec, str) and spec.strip() == "balanced":
        missing = [label for label in labels if not counts.get(label)]
        if missing:
            raise UserError(f"{name}=balanced: the training data has no row of "
                            f"{', '.join(missing)}")
        total = sum(counts[label] for label in labels)
        return {label: total / (len(labels) * counts[label]) for label in labels}
    given = spec if isinstance(spec, dict) else _weight_items(spec, name)
    weights = {label: 1.0 for label in labels}
    for key, value in given.items():
        label = labels[key] if isinstance(key, int) and 0 <= key < len(labels) else key
        if label not in weights:
            raise UserError(f"{name}={spec}: {key or spec!r} is not a label of the task "
                            f"({', '.join(labels)}); expected balanced or label:weight,...")
        try:
            weight = float(value)
        except (TypeError, ValueError):
            weight = math.nan
        if not (math.isfinite(weight) and weight > 0):
            raise UserError(f"{name}={spec}: the weight of {label} must be a finite number "
                            f"> 0, got {value!r}")
        weights[label] = weight
    return weights


def _weight_items(spec: str, name: str) -> Dict[str, str]:
    """{label: weight text} of `label:weight,...`; a label without a weight, or weighted
    twice, is refused naming it."""
    given: Dict[str, str] = {}
    for item in filter(str.strip, spec.split(",")):  # a trailing comma names nothing
        label, colon, weight = (part.strip() for part in item.rpartition(":"))
        if not colon:
            raise UserError(f"{name}={spec}: {weight!r} has no weight; expected balanced or "
                            f"label:weight,...")
        if label in given:
            raise UserError(f"{name}={spec}: {label!r} is weighted twice; give each label "
                            f"one weight")
        given[label] = weight
    return given
