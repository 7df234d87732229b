"""ab.TextClassifier keeps Keras' contract: `fit` takes what `Model.fit` takes and returns a
History whose epochs callbacks see, `tf.data` datasets of raw strings, metric objects in
`compile`, and `.keras` files and SavedModels that load back in a fresh process."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from scipy import stats
from sklearn.metrics import f1_score, roc_auc_score

import adapter_bert as ab
from adapter_bert.metrics.keras_metrics import OnPositiveClass, PearsonCorrelation, for_logits
from adapter_bert.tasks.text_classifier import TextClassifier
from tests.conftest import REPO
from tests.test_text_classifier import MOODS, mood_rows

TWO = ("negative", "positive")


def two_class_rows(count, offset=0):
    return [(text, "negative" if label == "negative" else "positive")
            for text, label in mood_rows(count, offset) if label != "neutral"]


def build(backbone, labels=MOODS, **kwargs):
    return TextClassifier.from_pretrained(list(labels), str(backbone / "bert_model.ckpt"),
                                          adapter=ab.AdapterConfig(size=8), max_seq_length=32,
                                          quiet=True, **kwargs)


@pytest.fixture(scope="module")
def model(backbone):
    return build(backbone)


# ------------------------------------------------------------------ without training

def test_arguments_fit_does_not_take_are_refused_in_one_line(model):
    with pytest.raises(ValueError, match=r"^fit\(\) got epoch=, which it does not take"):
        model.fit(["a"], ["negative"], epoch=1)
    with pytest.raises(ValueError, match=r"steps_per_epoch=, which it does not take \(an epoch"):
        model.fit(["a"], ["negative"], steps_per_epoch=3)
    with pytest.raises(ValueError, match=r"epochs=1.5: Keras epochs are whole passes"):
        model.fit(["a"], ["negative"], epochs=1.5)
    with pytest.raises(ValueError, match=r"initial_epoch=2: expected 0 <= initial_epoch < "):
        model.fit(["a"], ["negative"], epochs=2, initial_epoch=2)
    with pytest.raises(ValueError, match=r"sample_weight: 1 weights for 2 texts"):
        model.fit(["a", "b"], ["negative"] * 2, sample_weight=[1.0])
    with pytest.raises(ValueError, match=r"validation_split=0.5 of 1 texts leaves no"):
        model.fit(["a"], ["negative"], validation_split=0.5)


def test_keras_3_objects_are_refused_naming_the_tf_keras_class(model):
    keras3 = pytest.importorskip("keras")
    if not keras3.__version__.startswith("3"):
        pytest.skip("Keras 3 is not installed")
    with pytest.raises(TypeError, match=r"use tf_keras.callbacks.EarlyStopping, not "
                                        r"keras.callbacks.EarlyStopping \(Keras 3\)"):
        model.fit(["a"], ["negative"], callbacks=[keras3.callbacks.EarlyStopping()])
    with pytest.raises(TypeError, match=r"use tf_keras.metrics.AUC"):
        model.compile(metrics=[keras3.metrics.AUC()])


def test_summary_and_an_empty_predict_need_no_training(model, capsys):
    model.summary()
    assert "Trainable params" in capsys.readouterr().out
    assert model.predict([]).shape == (0, 3)
    assert model.predict([], return_labels=True) == []


def test_from_adapter_is_quiet_and_keeps_the_pair_flag(backbone, tmp_path, capsys, caplog):
    pairs = build(backbone, TWO)
    pairs.pair = True
    pairs.save_adapter(tmp_path / "adapter")
    capsys.readouterr()
    loaded = TextClassifier.from_adapter(tmp_path / "adapter", str(backbone / "bert_model.ckpt"),
                                         max_seq_length=32)
    assert loaded.pair is True and loaded.labels == TWO
    assert "trainable params" not in capsys.readouterr().out
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_ab_save_adapter_writes_its_directory(model, tmp_path):
    ab.save_adapter(model, str(tmp_path / "adapter"), task="moods")
    written = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert written["labels"] == list(MOODS) and written["task"] == "moods"
    with pytest.raises(ValueError, match=r"labels \['a', 'b'\] are not the model's"):
        ab.save_adapter(model, str(tmp_path / "other"), labels=["a", "b"])


def test_one_probability_metrics_read_the_second_labels_probability():
    logits = np.array([[2.0, -1.0], [0.0, 1.0], [-1.0, 3.0], [1.0, 0.0], [0.2, 0.1]])
    labels = np.array([0, 1, 1, 0, 1])
    metric = for_logits(keras.metrics.AUC(num_thresholds=1000), 2)
    assert isinstance(metric, OnPositiveClass) and metric.name == "auc"
    metric.update_state(labels, logits)
    positive = tf.nn.softmax(logits).numpy()[:, 1]
    assert float(metric.result()) == pytest.approx(roc_auc_score(labels, positive), abs=1e-3)
    # Three labels, or a metric of class ids: as it is.
    assert not isinstance(for_logits(keras.metrics.AUC(), 3), OnPositiveClass)
    assert not isinstance(for_logits(ab.PositiveClassF1(), 2), OnPositiveClass)


def test_the_regression_metric_is_pearsons_r():
    rng = np.random.default_rng(0)
    truth = rng.normal(size=50)
    predicted = truth + rng.normal(scale=0.5, size=50)
    metric = PearsonCorrelation()
    for rows in np.array_split(np.arange(50), 4):  # over batches, as in an epoch
        metric.update_state(truth[rows], predicted[rows, None])
    assert float(metric.result()) == pytest.approx(stats.pearsonr(truth, predicted)[0], 1e-5)


# ------------------------------------------------------------------ training

@pytest.mark.slow
def test_validation_data_early_stopping_and_a_history_per_epoch(backbone):
    train, dev = mood_rows(48), mood_rows(24, offset=300)
    model = build(backbone)
    stop = keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=100.0, patience=1,
                                         restore_best_weights=True)
    epochs_seen = []
    seen = keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: epochs_seen.append(e))
    history = model.fit(*zip(*train), batch_size=16, epochs=6, verbose=0, callbacks=[stop, seen],
                        validation_data=tuple(list(v) for v in zip(*dev)))
    assert isinstance(history, keras.callbacks.History)
    # No epoch gains 100 in val_loss: it stops after the second epoch.
    assert history.epoch == epochs_seen == [0, 1] and stop.stopped_epoch == 1
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    # The best epoch's weights are restored: their val_loss is the model's now.
    texts, labels = (list(v) for v in zip(*dev))
    assert model.evaluate(texts, labels)["loss"] == pytest.approx(
        min(history.history["val_loss"]), abs=1e-5)
    # validation_split holds out the last rows as validation_data does.
    again = build(backbone)
    split = again.fit(*(list(v) for v in zip(*(train + dev))), batch_size=16, epochs=1,
                      verbose=0, validation_split=1 / 3)
    assert split.history["val_loss"][0] == pytest.approx(again.evaluate(texts, labels)["loss"],
                                                         abs=1e-5)


@pytest.mark.slow
def test_a_dataset_of_raw_strings_trains_as_the_lists_do(backbone):
    texts, labels = (list(v) for v in zip(*mood_rows(40)))
    ids = [MOODS.index(label) for label in labels]
    by_lists = build(backbone)
    by_lists.fit(texts, labels, batch_size=16, epochs=1, verbose=0)
    expected = by_lists.predict(texts)
    for dataset in (tf.data.Dataset.from_tensor_slices((texts, ids)),
                    tf.data.Dataset.from_tensor_slices((texts, labels)).batch(7)):
        model = build(backbone)
        model.fit(dataset, batch_size=16, epochs=1, verbose=0)
        # 40 rows at 16: ceil(40 / 16) = 3 steps, every row trained.
        assert int(model.optimizer.iterations) == 3
        np.testing.assert_allclose(model.predict(tf.data.Dataset.from_tensor_slices(texts)),
                                   expected, atol=1e-6)
    scores = by_lists.evaluate(tf.data.Dataset.from_tensor_slices((texts, labels)).batch(8))
    assert scores["accuracy"] == by_lists.evaluate(texts, labels)["accuracy"]


@pytest.mark.slow
def test_sample_and_class_weights_and_a_set_smaller_than_a_batch(backbone):
    firsts = [f"the crew was {w}" for w in ("kind", "rude", "late")] * 4
    seconds = [f"answer {i}" for i in range(12)]
    labels = ["positive", "negative", "negative"] * 4

    def trained(**kwargs):
        model = build(backbone, TWO)
        model.fit((firsts, seconds), labels, epochs=2, verbose=0, **kwargs)
        return model

    plain = trained()
    # 12 pairs at the default batch of 32: one batch of the 12 per epoch.
    assert int(plain.optimizer.iterations) == 2 and plain.pair is True
    reference = plain.predict((firsts, seconds))
    np.testing.assert_array_equal(trained(sample_weight=np.ones(12)).predict((firsts, seconds)),
                                  reference)
    weighted = trained(sample_weight=[0.0] * 6 + [1.0] * 6).predict((firsts, seconds))
    assert not np.allclose(weighted, reference)
    by_name = trained(class_weight={"positive": 3.0}).predict((firsts, seconds))
    by_id = trained(class_weight={1: 3.0}).predict((firsts, seconds))
    np.testing.assert_array_equal(by_name, by_id)
    assert not np.allclose(by_name, reference)


@pytest.mark.slow
def test_initial_epoch_and_shuffle(backbone):
    texts, labels = (list(v) for v in zip(*mood_rows(32)))
    model = build(backbone)
    history = model.fit(texts, labels, batch_size=16, epochs=3, initial_epoch=2, verbose=0)
    assert history.epoch == [2] and int(model.optimizer.iterations) == 6
    in_order = build(backbone)
    assert len(in_order.fit(texts, labels, batch_size=16, epochs=1, shuffle=False,
                            verbose=0).history["loss"]) == 1


_LOAD = textwrap.dedent("""
    import json, sys
    import tf_keras
    import adapter_bert  # registers the package's Keras classes; nothing else is passed
    texts = json.loads(sys.argv[2])
    model = tf_keras.models.load_model(sys.argv[1])
    print(json.dumps({"class": type(model).__name__, "pair": model.pair,
                      "labels": model.predict(texts, return_labels=True),
                      "logits": model.predict(texts).tolist()}))
""")


def _load_in_a_fresh_process(path, texts):
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", _LOAD, str(path), json.dumps(texts)], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_both_keras_formats_and_model_checkpoint_files_load_back(backbone, tmp_path):
    train, dev = two_class_rows(48), two_class_rows(16, offset=300)
    texts = [text for text, _ in dev]
    model = build(backbone, TWO, regression=False)
    model.compile(metrics=[keras.metrics.AUC(name="auc"), ab.PositiveClassF1()])  # no scope
    best = tmp_path / "best.keras"
    history = model.fit(tf.data.Dataset.from_tensor_slices(tuple(list(v) for v in zip(*train))),
                        batch_size=8, epochs=2, verbose=0,
                        validation_data=tuple(list(v) for v in zip(*dev)),
                        callbacks=[keras.callbacks.ModelCheckpoint(str(best),
                                                                   save_best_only=True)])
    assert {"auc", "f1", "val_auc", "val_f1"} <= set(history.history)
    # The last epoch's validation figures are those of the model now (AUC's own
    # agreement with scikit-learn is tested above: this random backbone's probabilities
    # differ by less than AUC's threshold spacing).
    predicted = [name == "positive" for name in model.predict(texts, return_labels=True)]
    truth = [label == "positive" for _, label in dev]
    assert history.history["val_f1"][-1] == pytest.approx(f1_score(truth, predicted), abs=1e-6)
    assert 0 <= history.history["val_auc"][-1] <= 1
    assert best.exists()
    model.save(tmp_path / "m.keras")
    model.save(tmp_path / "saved_model")
    expected = model.predict(texts, return_labels=True)
    for path in (tmp_path / "m.keras", tmp_path / "saved_model"):
        loaded = _load_in_a_fresh_process(path, texts)
        assert loaded["class"] == "TextClassifier" and loaded["labels"] == expected, path
        np.testing.assert_allclose(loaded["logits"], model.predict(texts), atol=1e-5)
    assert _load_in_a_fresh_process(best, texts)["class"] == "TextClassifier"
