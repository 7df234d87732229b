"""adapter_bert.metrics.keras_metrics: the tf-keras metrics equal the runner's
eval_results.txt values (metrics.classification) on the same predictions, batch by batch
as in `fit` and `evaluate`."""

import numpy as np
import pytest
import tf_keras as keras

import adapter_bert as ab
from adapter_bert.metrics.classification import compute_metrics


@pytest.mark.parametrize("seed, classes", [(0, 2), (1, 3), (2, 13)])
def test_the_keras_metrics_equal_the_runners(seed, classes):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, 500)
    logits = rng.normal(size=(500, classes)) + 2.0 * np.eye(classes)[labels] * (
        rng.random((500, 1)) < 0.6)
    expected = compute_metrics("classification", logits, labels, num_labels=classes)
    metrics = [ab.MacroF1(classes), ab.MatthewsCorrelation(classes)]
    if classes == 2:
        metrics.append(ab.PositiveClassF1())
    for first in range(0, 500, 64):  # batches, as an epoch feeds them
        for metric in metrics:
            metric.update_state(labels[first:first + 64, None], logits[first:first + 64])
    results = {metric.name: float(metric.result()) for metric in metrics}
    assert results["macro_f1"] == pytest.approx(expected["macro_f1"], abs=1e-6)
    assert results["mcc"] == pytest.approx(expected["mcc"], abs=1e-6)
    if classes == 2:
        assert results["f1"] == pytest.approx(expected["f1"], abs=1e-6)
    metrics[0].reset_state()
    assert float(metrics[0].result()) == 0.0


def test_they_work_in_compile_and_evaluate():
    rng = np.random.default_rng(3)
    features = rng.normal(size=(96, 4)).astype("float32")
    labels = (features[:, 0] > 0).astype("int32")
    model = keras.Sequential([keras.layers.Dense(2, input_shape=(4,))])
    model.compile(optimizer=keras.optimizers.Adam(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy", ab.MacroF1(2), ab.MatthewsCorrelation(2),
                           ab.PositiveClassF1()])
    model.fit(features, labels, epochs=5, batch_size=16, verbose=0)
    values = model.evaluate(features, labels, batch_size=16, verbose=0, return_dict=True)
    expected = compute_metrics("classification", model.predict(features, verbose=0), labels)
    for key in ("macro_f1", "mcc", "f1"):
        assert values[key] == pytest.approx(expected[key], abs=1e-6), key
    with pytest.raises(ValueError, match="num_classes must be 2 or more, got 1"):
        ab.MacroF1(1)
