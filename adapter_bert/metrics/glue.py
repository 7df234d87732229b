"""GLUE metrics, as the GLUE leaderboard reports them.

| task              | metrics (keys, in order)                      |
|-------------------|-----------------------------------------------|
| CoLA              | mcc (Matthews correlation)                    |
| MRPC, QQP         | accuracy, f1 (positive class = label id 1)    |
| STS-B             | pearson, spearmanr, corr (their mean)         |
| AX (diagnostic)   | mcc (3-class Matthews correlation, "R3")      |
| MNLI, others      | accuracy                                      |

MNLI: the leaderboard reports matched and mismatched accuracy separately.
Call `compute_metrics("mnli", ...)` once on the matched dev/test set and once
on the mismatched one.

Label ids are positions in the task processor's `get_labels()` list (see
`adapter_bert.data.glue`); for MRPC and QQP id 1 is the positive class
("equivalent" / "duplicate").
"""

import collections
from typing import Optional

import numpy as np
import scipy.stats
from sklearn import metrics as sk_metrics

_TASK_METRICS = {
    "cola": "mcc",
    "ax": "mcc",
    "mrpc": "accuracy_f1",
    "qqp": "accuracy_f1",
    "sts-b": "correlation",
    "mnli": "accuracy",
    "sst-2": "accuracy",
    "qnli": "accuracy",
    "rte": "accuracy",
    "wnli": "accuracy",
    "xnli": "accuracy",
}

_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "sts_b": "sts-b",
            "sst_2": "sst-2", "mnli-m": "mnli", "mnli-mm": "mnli",
            "mnli_matched": "mnli", "mnli_mismatched": "mnli"}


def _canonical(task_name: str) -> str:
    name = task_name.strip().lower()
    name = _ALIASES.get(name, name)
    if name not in _TASK_METRICS:
        raise ValueError(
            f"Unknown GLUE task {task_name!r}; valid tasks: "
            f"{', '.join(sorted(_TASK_METRICS))}")
    return name


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
            raise ValueError(
                "classification predictions must be class ids (or 2-D "
                "logits); got non-integer values")
        predictions = predictions.astype(np.int64)
        labels = labels.astype(np.int64)
    if predictions.ndim != 1 or predictions.shape != labels.shape:
        raise ValueError(
            f"predictions {predictions.shape} and labels {labels.shape} must "
            "be 1-D with the same length")
    if weights is not None:
        weights = np.asarray(weights)
        if weights.shape != labels.shape:
            raise ValueError(
                f"weights {weights.shape} must have the shape of labels "
                f"{labels.shape}")
        if not np.all((weights == 0) | (weights == 1)):
            raise ValueError("weights must be a 0/1 mask (is_real_example)")
        keep = weights.astype(bool)
        predictions, labels = predictions[keep], labels[keep]
    if labels.size == 0:
        raise ValueError("no examples to score (after applying weights)")
    return predictions, labels


def compute_metrics(task_name: str, predictions, labels,
                    weights: Optional[np.ndarray] = None
                    ) -> "collections.OrderedDict[str, float]":
    """Computes the GLUE leaderboard metrics of one task.

    Args:
      task_name: GLUE task, case-insensitive ("CoLA", "sst-2"/"sst2",
        "sts-b"/"stsb", "mnli", "mnli-mm", ...).
      predictions: Class ids [N] (or logits/probabilities [N, C], argmaxed);
        for STS-B, float scores [N] (or [N, 1]).
      labels: Gold class ids [N]; gold float scores for STS-B.
      weights: Optional 0/1 mask [N]; examples with 0 (padding examples,
        `is_real_example == 0`) are left out.

    Returns:
      An `OrderedDict` of metric name -> Python float, in the order of the
      table in this module's docstring.

    Raises:
      ValueError: On an unknown task, mismatched shapes, non-0/1 weights, or
        no examples left to score.
    """
    kind = _TASK_METRICS[_canonical(task_name)]
    predictions, labels = _prepare(predictions, labels, weights,
                                   regression=kind == "correlation")
    result = collections.OrderedDict()
    if kind == "mcc":
        result["mcc"] = float(sk_metrics.matthews_corrcoef(labels, predictions))
    elif kind == "accuracy_f1":
        result["accuracy"] = float(sk_metrics.accuracy_score(labels, predictions))
        result["f1"] = float(sk_metrics.f1_score(
            labels, predictions, pos_label=1, average="binary",
            zero_division=0.0))
    elif kind == "correlation":
        pearson = float(scipy.stats.pearsonr(predictions, labels)[0])
        spearman = float(scipy.stats.spearmanr(predictions, labels)[0])
        result["pearson"] = pearson
        result["spearmanr"] = spearman
        result["corr"] = (pearson + spearman) / 2.0
    else:
        result["accuracy"] = float(sk_metrics.accuracy_score(labels, predictions))
    return result
