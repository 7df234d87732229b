"""The runner's classification metrics as tf-keras metrics, for `compile(metrics=...)`.

Each accumulates a confusion matrix over the batches of an epoch (or an `evaluate`), so
that its value at the end is the one `metrics.classification.compute_metrics(
"classification", ...)` gives on the same predictions, which is what run_classifier.py
writes to eval_results.txt: macro-F1 over all the task's classes, Matthews correlation
(multi-class), and precision, recall and F1 of the second label for two classes.
Targets are class ids [B] (or [B, 1]); predictions are logits or probabilities [B, C].

Examples:
    >>> import adapter_bert as ab
    >>> model.compile(optimizer=..., loss=...,                           # doctest: +SKIP
    ...               metrics=["accuracy", ab.MacroF1(num_classes=3), ab.MatthewsCorrelation(3)])
"""

import tensorflow as tf
import tf_keras as keras
from adapter_bert.errors import UserError


class _ConfusionMetric(keras.metrics.Metric):
    """A metric computed from the confusion matrix of its batches (rows: true class)."""

    def __init__(self, num_classes: int, name: str, **kwargs):
        super().__init__(name=name, **kwargs)
        if int(num_classes) < 2:
            raise UserError(f"num_classes must be 2 or more, got {num_classes}")
        self.num_classes = int(num_classes)
        self.matrix = self.add_weight("confusion", shape=(self.num_classes, self.num_classes),
                                      initializer="zeros", dtype=tf.float64)

    def update_state(self, y_true, y_pred, sample_weight=None):
        true = tf.reshape(tf.cast(y_true, tf.int32), [-1])
        predicted = tf.argmax(tf.reshape(y_pred, [tf.shape(true)[0], -1]), axis=-1,
                              output_type=tf.int32)
        weights = None if sample_weight is None else tf.reshape(sample_weight, [-1])
        self.matrix.assign_add(tf.math.confusion_matrix(
            true, predicted, num_classes=self.num_classes, weights=weights, dtype=tf.float64))

    def reset_state(self):
        self.matrix.assign(tf.zeros_like(self.matrix))

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}

    def _counts(self):
        true_positive = tf.linalg.diag_part(self.matrix)
        return (true_positive, tf.reduce_sum(self.matrix, 0) - true_positive,
                tf.reduce_sum(self.matrix, 1) - true_positive)


def _f1(tp, fp, fn):
    denominator = 2 * tp + fp + fn
    return tf.math.divide_no_nan(2 * tp, denominator)


@keras.utils.register_keras_serializable(package="adapter_bert")
class MacroF1(_ConfusionMetric):
    """The mean over all `num_classes` classes of each class's F1 (0 for a class never
    predicted nor seen), as scikit-learn's `f1_score(average="macro")`."""

    def __init__(self, num_classes: int, name: str = "macro_f1", **kwargs):
        super().__init__(num_classes, name, **kwargs)

    def result(self):
        return tf.cast(tf.reduce_mean(_f1(*self._counts())), tf.float32)


@keras.utils.register_keras_serializable(package="adapter_bert")
class MatthewsCorrelation(_ConfusionMetric):
    """Matthews correlation of all classes (GLUE's CoLA metric; multi-class for more)."""

    def __init__(self, num_classes: int, name: str = "mcc", **kwargs):
        super().__init__(num_classes, name, **kwargs)

    def result(self):
        total = tf.reduce_sum(self.matrix)
        correct = tf.reduce_sum(tf.linalg.diag_part(self.matrix))
        predicted = tf.reduce_sum(self.matrix, 0)
        true = tf.reduce_sum(self.matrix, 1)
        numerator = correct * total - tf.reduce_sum(predicted * true)
        denominator = tf.sqrt((total ** 2 - tf.reduce_sum(predicted ** 2))
                              * (total ** 2 - tf.reduce_sum(true ** 2)))
        return tf.cast(tf.math.divide_no_nan(numerator, denominator), tf.float32)


@keras.utils.register_keras_serializable(package="adapter_bert")
class PositiveClassF1(_ConfusionMetric):
    """F1 of the second label (id 1) of a two-class task: GLUE's MRPC/QQP F1, and the
    `f1` of eval_results.txt for your own two-label data."""

    def __init__(self, name: str = "f1", **kwargs):
        kwargs.pop("num_classes", None)
        super().__init__(2, name, **kwargs)

    def result(self):
        tp, fp, fn = (count[1] for count in self._counts())
        return tf.cast(_f1(tp, fp, fn), tf.float32)


# tf_keras metrics that score one probability per example (the shape of the targets).
_BINARY_METRICS = tuple(getattr(keras.metrics, name) for name in (
    "AUC", "Precision", "Recall", "TruePositives", "TrueNegatives", "FalsePositives",
    "FalseNegatives", "PrecisionAtRecall", "RecallAtPrecision", "SensitivityAtSpecificity",
    "SpecificityAtSensitivity", "BinaryAccuracy"))


@keras.utils.register_keras_serializable(package="adapter_bert")
class OnPositiveClass(keras.metrics.Metric):
    """A tf_keras metric of one probability per example (`AUC`, `Precision`, `Recall`, ...)
    read on a two-class model's logits: it scores the second label's softmax probability,
    as `tf_keras.metrics.AUC()` on a sigmoid output would."""

    def __init__(self, metric: keras.metrics.Metric, **kwargs):
        super().__init__(name=metric.name, **kwargs)
        self.metric = metric

    def update_state(self, y_true, y_pred, sample_weight=None):
        probability = tf.nn.softmax(tf.cast(y_pred, tf.float32), axis=-1)[:, 1]
        return self.metric.update_state(tf.reshape(y_true, [-1]), probability, sample_weight)

    def result(self):
        return self.metric.result()

    def reset_state(self):
        self.metric.reset_state()

    def get_config(self):
        return {**super().get_config(), "metric": keras.metrics.serialize(self.metric)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config.pop("name", None)
        return cls(keras.metrics.deserialize(config.pop("metric")), **config)


def for_logits(metric, num_labels: int):
    """`metric` as a `compile` of a model of `num_labels` logits can use it: a one-probability
    metric of a two-class model wrapped in `OnPositiveClass`, anything else as it is."""
    if num_labels == 2 and scores_one_probability(metric):
        return OnPositiveClass(metric)
    return metric


def scores_one_probability(metric) -> bool:
    """Whether `metric` reads one probability per example (`AUC`, `Precision`, ...)."""
    return isinstance(metric, _BINARY_METRICS)


@keras.utils.register_keras_serializable(package="adapter_bert")
class PearsonCorrelation(keras.metrics.Metric):
    """Pearson's r of a one-output regression over the batches of an epoch (the `pearson`
    of eval_results.txt for a regression), from running sums in float64."""

    def __init__(self, name: str = "pearson", **kwargs):
        super().__init__(name=name, **kwargs)
        self.sums = self.add_weight("sums", shape=(6,), initializer="zeros", dtype=tf.float64)

    def update_state(self, y_true, y_pred, sample_weight=None):
        x = tf.reshape(tf.cast(y_pred, tf.float64), [-1])
        y = tf.reshape(tf.cast(y_true, tf.float64), [-1])
        w = tf.ones_like(x) if sample_weight is None else \
            tf.reshape(tf.cast(sample_weight, tf.float64), [-1])
        self.sums.assign_add(tf.stack([tf.reduce_sum(w), tf.reduce_sum(w * x),
                                       tf.reduce_sum(w * y), tf.reduce_sum(w * x * x),
                                       tf.reduce_sum(w * y * y), tf.reduce_sum(w * x * y)]))

    def result(self):
        n, sx, sy, sxx, syy, sxy = tf.unstack(self.sums)
        covariance = sxy - sx * sy / n
        spread = tf.sqrt((sxx - sx * sx / n) * (syy - sy * sy / n))
        return tf.cast(tf.math.divide_no_nan(covariance, spread), tf.float32)

    def reset_state(self):
        self.sums.assign(tf.zeros_like(self.sums))
