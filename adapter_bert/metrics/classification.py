"""Classification and regression metrics by kind, as GLUE's leaderboard and scikit-learn.

| kind           | keys, the first the task's main metric                 | tasks      |
|----------------|--------------------------------------------------------|------------|
| mcc            | mcc (multi-class for AX)                               | CoLA, AX   |
| accuracy_f1    | accuracy, f1 (positive class = label id 1)             | MRPC, QQP  |
| correlation    | pearson, spearmanr, corr (their mean)                  | STS-B      |
| accuracy       | accuracy                                               | other GLUE |
| classification | accuracy, macro_f1, mcc; two labels: precision, recall,| own data   |
|                | f1 of the second label                                 |            |
| regression     | pearson, spearmanr, mse                                | own data   |
"""

import collections
from typing import Dict, Optional

import numpy as np
import scipy.stats
from sklearn import metrics as sk_metrics
from adapter_bert.errors import UserError

METRIC_NAMES = {
    "mcc": ("mcc",),
    "accuracy_f1": ("accuracy", "f1"),
    "correlation": ("pearson", "spearmanr", "corr"),
    "accuracy": ("accuracy",),
    "classification": ("accuracy", "macro_f1", "mcc", "precision", "recall", "f1"),
    "regression": ("pearson", "spearmanr", "mse"),
}
REGRESSION_KINDS = frozenset({"correlation", "regression"})


def main_metric(kind: str) -> str:
    """The metric a task of this kind is judged by (its first key)."""
    return _names(kind)[0]


def _names(kind: str):
    if kind not in METRIC_NAMES:
        raise UserError(f"Unknown metric kind {kind!r}; known kinds: "
                        f"{', '.join(METRIC_NAMES)}")
    return METRIC_NAMES[kind]


def _prepare(predictions, labels, weights, regression):
    predictions = np.asarray(predictions)
    labels = np.asarray(labels)
    if regression:
        if predictions.ndim == 2 and predictions.shape[1] == 1:
            predictions = predictions[:, 0]
        predictions = predictions.astype(np.float64)
        labels = labels.astype(np.float64)
    else:
        if predictions.ndim == 2:  # Logits or probabilities.
            predictions = np.argmax(predictions, axis=-1)
        if (np.issubdtype(predictions.dtype, np.floating)
                and np.any(predictions != np.round(predictions))):
            raise UserError(
                "classification predictions must be class ids (or 2-D "
                "logits); got non-integer values")
        predictions = predictions.astype(np.int64)
        labels = labels.astype(np.int64)
    if predictions.ndim != 1 or predictions.shape != labels.shape:
        raise UserError(
            f"predictions {predictions.shape} and labels {labels.shape} must "
            "be 1-D with the same length")
    if weights is not None:
        weights = np.asarray(weights)
        if weights.shape != labels.shape:
            raise UserError(
                f"weights {weights.shape} must have the shape of labels "
                f"{labels.shape}")
        if not np.all((weights == 0) | (weights == 1)):
            raise UserError("weights must be a 0/1 mask (is_real_example)")
        keep = weights.astype(bool)
        predictions, labels = predictions[keep], labels[keep]
    if labels.size == 0:
        raise UserError("no examples to score (after applying weights)")
    return predictions, labels


def compute_metrics(kind: str, predictions, labels, weights: Optional[np.ndarray] = None,
                    num_labels: Optional[int] = None) -> "collections.OrderedDict[str, float]":
    """The metrics of one kind (the module's table), as an `OrderedDict` of floats.

    `predictions` are class ids or logits (argmaxed), or float scores for regression kinds;
    `weights` (0/1) leaves out padding examples; `num_labels` decides the two-label extras
    of "classification" (default: the logits' width, else the largest id). ValueError for an
    unknown kind, mismatched shapes, weights other than 0/1 or nothing to score.
    """
    _names(kind)
    if num_labels is None and np.ndim(predictions) == 2 and kind not in REGRESSION_KINDS:
        num_labels = np.shape(predictions)[1]
    predictions, labels = _prepare(predictions, labels, weights,
                                   regression=kind in REGRESSION_KINDS)
    result = collections.OrderedDict()
    if kind == "mcc":
        result["mcc"] = _mcc(labels, predictions)
    elif kind in ("accuracy_f1", "accuracy"):
        result["accuracy"] = float(sk_metrics.accuracy_score(labels, predictions))
        if kind == "accuracy_f1":
            result["f1"] = _binary(labels, predictions, sk_metrics.f1_score)
    elif kind == "correlation":
        pearson, spearman = _correlations(predictions, labels)
        result.update(pearson=pearson, spearmanr=spearman, corr=(pearson + spearman) / 2.0)
    elif kind == "regression":
        pearson, spearman = _correlations(predictions, labels)
        result.update(pearson=pearson, spearmanr=spearman,
                      mse=float(np.mean((predictions - labels) ** 2)))
    else:
        classes = num_labels or int(max(labels.max(), predictions.max())) + 1
        result["accuracy"] = float(sk_metrics.accuracy_score(labels, predictions))
        result["macro_f1"] = float(sk_metrics.f1_score(
            labels, predictions, labels=list(range(classes)), average="macro",
            zero_division=0.0))
        result["mcc"] = _mcc(labels, predictions)
        if classes == 2:
            result["precision"] = _binary(labels, predictions, sk_metrics.precision_score)
            result["recall"] = _binary(labels, predictions, sk_metrics.recall_score)
            result["f1"] = _binary(labels, predictions, sk_metrics.f1_score)
    return result


def _mcc(labels, predictions) -> float:
    return float(sk_metrics.matthews_corrcoef(labels, predictions))


def _binary(labels, predictions, score) -> float:
    return float(score(labels, predictions, pos_label=1, average="binary", zero_division=0.0))


def _correlations(predictions, labels):
    return (float(scipy.stats.pearsonr(predictions, labels)[0]),
            float(scipy.stats.spearmanr(predictions, labels)[0]))


def per_class_report(predictions, labels, names) -> list:
    """scikit-learn's `classification_report` as rows: for each of `names` (label ids in
    order) then "macro avg" and "weighted avg", (name, precision, recall, f1, support);
    a class never predicted or never present scores 0, as with `zero_division=0`."""
    predictions, labels = _prepare(predictions, labels, None, regression=False)
    ids = list(range(len(names)))
    columns = sk_metrics.precision_recall_fscore_support(labels, predictions, labels=ids,
                                                         zero_division=0.0)
    rows = [(name, *(float(c[i]) for c in columns[:3]), int(columns[3][i]))
            for i, name in enumerate(names)]
    for average in ("macro", "weighted"):
        precision, recall, f1, _ = sk_metrics.precision_recall_fscore_support(
            labels, predictions, labels=ids, average=average, zero_division=0.0)
        rows.append((f"{average} avg", float(precision), float(recall), float(f1),
                     int(labels.size)))
    return rows


def confusion(predictions, labels, num_labels: int) -> np.ndarray:
    """Counts [true label id, predicted label id] (scikit-learn's `confusion_matrix`)."""
    predictions, labels = _prepare(predictions, labels, None, regression=False)
    return sk_metrics.confusion_matrix(labels, predictions, labels=list(range(num_labels)))


def score_logits(logits: np.ndarray, label_ids: np.ndarray, kind: str,
                 regression: bool) -> Dict[str, float]:
    """The loss and the metrics of `kind` (`metrics.classification`) of a set's logits, as
    eval_results.txt holds them (without the split's prefix)."""
    scores = {"loss": mean_loss(logits, label_ids, regression)}
    if regression:
        scores.update(compute_metrics(kind, logits[:, 0], label_ids[:, 0]))
    else:
        scores.update(compute_metrics(kind, logits.argmax(-1), label_ids,
                                      num_labels=logits.shape[-1]))
    return scores


def mean_loss(logits: np.ndarray, labels: np.ndarray, regression: bool) -> float:
    """The dev-set mean of `run_classifier.py`'s training loss (MSE or softmax cross-entropy), in numpy.

    Written twice on purpose: Keras' loss object on the same float32 logits agrees only to
    float32 rounding (it sums in another order), and eval_loss is printed and written to
    eval_results.txt at full precision, so reusing it would change the reported digits.
    tests/test_run_classifier.py checks that the two agree to 1e-6.
    """
    if regression:
        return float(np.mean((logits[:, 0] - labels[:, 0]) ** 2))
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return float(-np.mean(log_probs[np.arange(len(labels)), labels]))
