"""adapter_bert.metrics.classification against hand computations, scikit-learn and SciPy;
GLUE tasks through the metric kind each processor names."""

import math

import numpy as np
import pytest

from adapter_bert.data.glue import get_processor
from adapter_bert.metrics.classification import compute_metrics, main_metric


def glue_metrics(task, predictions, labels, **kwargs):
    """The metrics of a GLUE task: its processor's kind."""
    return compute_metrics(get_processor(task).metrics, predictions, labels, **kwargs)

# A binary case with TP=6, TN=3, FP=1, FN=2 (12 examples).
BINARY_LABELS = np.array([1] * 6 + [0] * 3 + [0] * 1 + [1] * 2)
BINARY_PREDS = np.array([1] * 6 + [0] * 3 + [1] * 1 + [0] * 2)


def test_cola_mcc_hand_computed():
    tp, tn, fp, fn = 6, 3, 1, 2
    expected = (tp * tn - fp * fn) / math.sqrt(
        (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert expected == pytest.approx(16 / math.sqrt(1120), abs=0)
    result = glue_metrics("CoLA", BINARY_PREDS, BINARY_LABELS)
    assert list(result) == ["mcc"]
    assert type(result["mcc"]) is float
    assert result["mcc"] == pytest.approx(0.47809144373375745, rel=1e-12)
    assert result["mcc"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("task", ["MRPC", "qqp"])
def test_mrpc_qqp_accuracy_and_f1(task):
    result = glue_metrics(task, BINARY_PREDS, BINARY_LABELS)
    assert list(result) == ["accuracy", "f1"]
    assert result["accuracy"] == pytest.approx(9 / 12, rel=1e-12)
    precision, recall = 6 / 7, 6 / 8
    f1 = 2 * precision * recall / (precision + recall)
    assert f1 == pytest.approx(0.8, rel=1e-12)
    assert result["f1"] == pytest.approx(0.8, rel=1e-12)
    assert all(type(v) is float for v in result.values())


def test_f1_positive_class_is_one():
    # Swapping the classes changes F1 (the positive class is id 1), not accuracy.
    result = glue_metrics("mrpc", 1 - BINARY_PREDS, 1 - BINARY_LABELS)
    assert result["accuracy"] == pytest.approx(0.75, rel=1e-12)
    # Now TP=3, FP=2, FN=1: F1 = 2*3 / (2*3 + 2 + 1) = 6/9.
    assert result["f1"] == pytest.approx(6 / 9, rel=1e-12)


def test_stsb_correlations():
    result = glue_metrics("STS-B", [1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 10.0])
    assert list(result) == ["pearson", "spearmanr", "corr"]
    # Deviations x: -1.5 -.5 .5 1.5, y: -3 -2 -1 6 -> r = 14 / sqrt(5 * 50).
    pearson = 14 / math.sqrt(250)
    assert result["pearson"] == pytest.approx(pearson, rel=1e-12)
    assert result["pearson"] == pytest.approx(0.8854377448471462, rel=1e-12)
    assert result["spearmanr"] == pytest.approx(1.0, rel=1e-12)
    assert result["corr"] == pytest.approx((pearson + 1.0) / 2, rel=1e-12)
    assert all(type(v) is float for v in result.values())
    # [N, 1] predictions (a regression head's output) are accepted.
    column = glue_metrics("stsb", [[3.0], [1.0], [2.0]], [1.0, 3.0, 2.0])
    assert column["pearson"] == pytest.approx(-1.0, rel=1e-12)
    assert column["spearmanr"] == pytest.approx(-1.0, rel=1e-12)


def test_spearman_with_ties():
    # x ranks 1, 2.5, 2.5, 4; y ranks 1, 2, 3, 4.
    result = glue_metrics("stsb", [0.0, 1.0, 1.0, 2.0], [0.0, 1.0, 2.0, 3.0])
    rx, ry = np.array([1, 2.5, 2.5, 4]), np.array([1, 2, 3, 4.0])
    dx, dy = rx - rx.mean(), ry - ry.mean()
    expected = (dx * dy).sum() / math.sqrt((dx ** 2).sum() * (dy ** 2).sum())
    assert expected == pytest.approx(4.5 / math.sqrt(4.5 * 5), rel=1e-12)
    assert result["spearmanr"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("task", ["mnli", "sst-2", "SST2", "qnli",
                                  "rte", "wnli", "XNLI"])
def test_accuracy_tasks(task):
    result = glue_metrics(task, [0, 1, 2, 1, 0], [0, 1, 1, 1, 2])
    assert list(result) == ["accuracy"]
    assert result["accuracy"] == pytest.approx(0.6, rel=1e-12)


def test_ax_multiclass_mcc():
    labels = np.array([0, 0, 1, 1, 2, 2])
    preds = np.array([0, 1, 1, 1, 2, 0])
    # Multi-class MCC: (c*s - sum_k p_k t_k) / sqrt((s^2 - sum p_k^2)(s^2 - sum t_k^2))
    # c = 4 correct, s = 6, t = (2, 2, 2), p = (2, 3, 1).
    expected = (4 * 6 - (2 * 2 + 3 * 2 + 1 * 2)) / math.sqrt(
        (36 - (4 + 9 + 1)) * (36 - 12))
    result = glue_metrics("AX", preds, labels)
    assert list(result) == ["mcc"]
    assert result["mcc"] == pytest.approx(expected, rel=1e-12)
    assert result["mcc"] == pytest.approx(12 / math.sqrt(528), rel=1e-12)


def test_logits_are_argmaxed():
    logits = np.array([[2.0, -1.0], [0.1, 0.3], [0.0, 5.0], [3.0, 2.9]])
    result = glue_metrics("sst-2", logits, [0, 1, 0, 1])
    assert result["accuracy"] == pytest.approx(0.5, rel=1e-12)


def test_weights_mask_padding_examples():
    # Four padding examples that are all wrong would change every metric.
    preds = np.concatenate([BINARY_PREDS, [1, 1, 0, 0]])
    labels = np.concatenate([BINARY_LABELS, [0, 0, 1, 1]])
    weights = np.array([1] * 12 + [0] * 4)
    for task in ("cola", "mrpc"):
        masked = glue_metrics(task, preds, labels, weights=weights)
        unpadded = glue_metrics(task, BINARY_PREDS, BINARY_LABELS)
        assert masked == unpadded
    assert glue_metrics("mrpc", preds, labels)["accuracy"] == pytest.approx(
        9 / 16, rel=1e-12)
    masked = glue_metrics("mrpc", preds, labels, weights=weights)
    assert masked["accuracy"] == pytest.approx(0.75, rel=1e-12)
    stsb = glue_metrics("stsb", [1.0, 2.0, 3.0, 4.0, 9.0, -9.0],
                           [1.0, 2.0, 3.0, 10.0, 0.0, 0.0],
                           weights=[1, 1, 1, 1, 0, 0])
    assert stsb["pearson"] == pytest.approx(14 / math.sqrt(250), rel=1e-12)


def test_errors():
    with pytest.raises(ValueError, match=r"Unknown metric kind 'squad'; known kinds: mcc, "):
        compute_metrics("squad", [0], [0])
    with pytest.raises(ValueError, match="same length"):
        glue_metrics("cola", [0, 1], [0, 1, 1])
    with pytest.raises(ValueError, match="0/1 mask"):
        glue_metrics("cola", [0, 1], [0, 1], weights=[0.5, 1])
    with pytest.raises(ValueError, match="no examples"):
        glue_metrics("cola", [0, 1], [0, 1], weights=[0, 0])
    with pytest.raises(ValueError, match="class ids"):
        glue_metrics("rte", [0.2, 0.9], [0, 1])


def test_the_main_metric_is_the_first_of_each_kind():
    assert [main_metric(get_processor(t).metrics) for t in ("cola", "mrpc", "sts-b", "rte")] \
        == ["mcc", "accuracy", "pearson", "accuracy"]


@pytest.mark.parametrize("seed, classes", [(0, 2), (1, 3), (2, 13)])
def test_classification_equals_scikit_learn(seed, classes):
    from sklearn import metrics as sk
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, 300)
    predictions = np.where(rng.random(300) < 0.6, labels, rng.integers(0, classes, 300))
    result = compute_metrics("classification", predictions, labels, num_labels=classes)
    expected = {"accuracy": sk.accuracy_score(labels, predictions),
                "macro_f1": sk.f1_score(labels, predictions, average="macro"),
                "mcc": sk.matthews_corrcoef(labels, predictions)}
    if classes == 2:
        expected.update(precision=sk.precision_score(labels, predictions),
                        recall=sk.recall_score(labels, predictions),
                        f1=sk.f1_score(labels, predictions))
    assert list(result) == list(expected)
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, rel=1e-12), key


def test_macro_f1_counts_a_class_never_predicted_nor_seen():
    """Over the task's classes: a class absent from a small dev set still counts (as 0),
    as Hugging Face's evaluate and scikit-learn with `labels=` count it."""
    result = compute_metrics("classification", [0, 1, 1], [0, 1, 1], num_labels=3)
    assert result["macro_f1"] == pytest.approx(2 / 3, rel=1e-12)
    assert "f1" not in result  # three classes: no positive class


def test_regression_equals_scipy():
    import scipy.stats
    rng = np.random.default_rng(3)
    labels = rng.normal(size=200)
    predictions = labels + rng.normal(scale=0.5, size=200)
    result = compute_metrics("regression", predictions[:, None], labels)
    assert list(result) == ["pearson", "spearmanr", "mse"]
    assert result["pearson"] == pytest.approx(scipy.stats.pearsonr(predictions, labels)[0],
                                              rel=1e-12)
    assert result["spearmanr"] == pytest.approx(
        scipy.stats.spearmanr(predictions, labels)[0], rel=1e-12)
    assert result["mse"] == pytest.approx(np.mean((predictions - labels) ** 2), rel=1e-12)
