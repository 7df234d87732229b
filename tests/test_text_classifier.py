"""ab.TextClassifier beside `run_classifier.py`: one adapter directory format both ways,
the same figures from the same weights, the same network and recipe, and agreement on
real tweets. (Its Keras behaviour: tests/test_text_classifier_keras.py.)"""

import collections
import csv
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import adapter_bert as ab
from adapter_bert.library.text_classifier import TextClassifier
from tests.conftest import REPO
from tests.runner_utils import flag_list, read_results, run_in_process

# The tests that read the trained library model and runner run share a worker (make test's
# --dist loadgroup), which trains them once.
SHARES_THE_RUNS = pytest.mark.xdist_group("test_text_classifier_runs")
MOODS = ("negative", "neutral", "positive")


def mood_rows(count: int, offset: int = 0):
    """Three-class texts whose words give their class away, in mixed lengths."""
    words = {"negative": "awful late rude", "neutral": "flight at noon",
             "positive": "great kind crew"}
    rows = []
    for i in range(offset, offset + count):
        mood = MOODS[i % 3]
        rows.append((f"@air {words[mood]} " + "really " * (i % 7) + str(i), mood))
    return rows


def write_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def mood_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("moods")
    train, dev = mood_rows(96), mood_rows(30, offset=500)
    return {"train": train, "dev": dev, "train_file": write_csv(folder / "train.csv", train),
            "dev_file": write_csv(folder / "dev.csv", dev)}


@pytest.fixture(scope="module")
def runner_run(backbone, mood_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("runner") / "out"
    values = {"init_checkpoint": backbone / "bert_model.ckpt", "output_dir": out,
              "train_file": mood_data["train_file"], "dev_file": mood_data["dev_file"],
              "test_file": mood_data["dev_file"], "adapter_size": 8, "max_seq_length": 32,
              "learning_rate": 1e-3, "num_train_epochs": 2, "train_batch_size": 16,
              "eval_batch_size": 64, "predict_batch_size": 64}
    code, _ = run_in_process("run_classifier", [*flag_list(values, {}), "--do_train",
                                                 "--do_eval", "--do_predict"])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def library_model(backbone, mood_data):
    pytest.importorskip("tensorflow_text")
    texts, labels = zip(*mood_data["train"])
    model = TextClassifier.from_pretrained(sorted(set(labels)), str(backbone / "bert_model.ckpt"),
                                           adapter=ab.AdapterConfig(size=8), max_seq_length=32,
                                           learning_rate=1e-3)
    history = model.fit(list(texts), list(labels), batch_size=16, epochs=2)
    # 12 steps, int(96 / 16 * 2) as the runner's: two Keras epochs of 6.
    assert int(model.optimizer.iterations) == 12 and history.epoch == [0, 1]
    return model


@SHARES_THE_RUNS
def test_the_runner_and_the_library_read_each_others_adapters(library_model, runner_run,
                                                             backbone, mood_data, tmp_path):
    library_model.save_adapter(tmp_path / "adapter")
    ours = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    theirs = json.loads((runner_run / "adapter" / "adapter_config.json").read_text())
    assert ours["labels"] == theirs["labels"] == list(MOODS)
    # One network and recipe: the same description but for the weights and the task.
    same = ("adapter_config", "backbone", "tuning_mode", "head", "format")
    assert {k: ours.get(k) for k in same} == {k: theirs.get(k) for k in same}
    assert ours["training"]["max_seq_length"] == theirs["training"]["max_seq_length"] == 32
    # The runner evaluates the library's adapter: the figures the library reports.
    out = tmp_path / "eval"
    values = {"init_checkpoint": backbone / "bert_model.ckpt", "output_dir": out,
              "dev_file": mood_data["dev_file"], "max_seq_length": 32, "eval_batch_size": 64,
              "load_adapter": tmp_path / "adapter"}
    code, _ = run_in_process("run_classifier", [*flag_list(values, {}), "--do_eval"])
    assert code == 0
    texts, labels = (list(v) for v in zip(*mood_data["dev"]))
    expected = library_model.report(texts, labels)
    runner = read_results(out / "eval_results.txt")
    for key in ("accuracy", "macro_f1", "mcc", "loss"):
        assert float(runner["eval_" + key]) == pytest.approx(expected[key], abs=1e-5), key
    assert set(expected) == {"loss", "accuracy", "macro_f1", "mcc", "per_class"}
    with open(out / "eval_per_class.tsv") as f:
        per_class = {r["label"]: r for r in csv.DictReader(f, delimiter="\t")}
    for name, figures in expected["per_class"].items():
        assert figures["f1"] == pytest.approx(float(per_class[name]["f1"]), abs=1e-5)
        assert figures["support"] == int(per_class[name]["support"])
    # ab.load_adapter reads it as it reads a run's directory.
    whole = ab.load_adapter(str(tmp_path / "adapter"), backbone=str(backbone / "bert_model.ckpt"))
    assert whole.labels[whole.active_adapter] == list(MOODS)
    # The library reads the runner's adapter (its length too) and predicts what the runner
    # wrote to test_results.tsv.
    loaded = TextClassifier.from_adapter(runner_run / "adapter", str(backbone / "bert_model.ckpt"))
    assert loaded.labels == MOODS and loaded.task == theirs["task"]
    assert loaded.max_seq_length == 32
    with open(runner_run / "test_results.tsv") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    assert rows[0] == [*MOODS, "predicted_label"]
    assert loaded.predict(texts, return_labels=True, verbose=0) == [r[-1] for r in rows[1:]]
    probabilities = tf.nn.softmax(loaded.predict(texts, verbose=0)).numpy()
    np.testing.assert_allclose(probabilities, np.array([r[:3] for r in rows[1:]], float),
                               atol=1e-5)


@pytest.mark.slow
def test_regression_takes_floats_and_reports_the_runners_figures(backbone):
    pytest.importorskip("tensorflow_text")
    model = TextClassifier.from_pretrained(None, str(backbone / "bert_model.ckpt"),
                                           regression=True, max_seq_length=16)
    texts = [f"score {i}" for i in range(16)]
    model.fit(texts, [i / 4 for i in range(16)], batch_size=8, epochs=1, verbose=0)
    scores = model.report(texts, [i / 4 for i in range(16)])
    assert set(scores) == {"loss", "pearson", "spearmanr", "mse"}
    predicted = model.predict(texts[:3], return_labels=True, verbose=0)
    assert len(predicted) == 3 and all(isinstance(v, float) for v in predicted)
    assert scores["mse"] == pytest.approx(np.mean((model.predict(texts, verbose=0)[:, 0]
                                                   - np.arange(16) / 4) ** 2), rel=1e-5)


@pytest.mark.parametrize("labels, regression, message", [
    (None, False, "need a list of two or more label names"),
    (["a"], False, "need a list of two or more label names"),
    (["a", "b", "a"], False, "a given more than once"),
    (["a", "b"], True, "takes no labels"),
])
def test_bad_label_lists_are_refused_before_loading(labels, regression, message):
    with pytest.raises(ValueError, match=message):
        TextClassifier.from_pretrained(labels, "/nonexistent/checkpoint", regression=regression)


@pytest.mark.slow
@SHARES_THE_RUNS
def test_the_export_of_its_adapter_answers_strings_with_label_names(library_model, backbone,
                                                                     mood_data, tmp_path):
    pytest.importorskip("tensorflow_text")
    library_model.save_adapter(tmp_path / "adapter")
    export = tmp_path / "export"
    values = {"init_checkpoint": backbone / "bert_model.ckpt", "output_dir": tmp_path / "out",
              "test_file": mood_data["dev_file"], "max_seq_length": 32,
              "load_adapter": tmp_path / "adapter", "export_dir": export}
    code, _ = run_in_process("run_classifier", [*flag_list(values, {}), "--do_predict"])
    assert code == 0
    serve = tf.saved_model.load(str(export)).signatures["serving_default"]
    texts = [text for text, _ in mood_data["dev"]]
    answered = [label.decode() for label in serve(text_a=tf.constant(texts))["label"].numpy()]
    assert answered == library_model.predict(texts, return_labels=True)


_MIRRORED = textwrap.dedent("""
    import json, sys
    from adapter_bert.training.distribute import get_strategy, split_cpu
    split_cpu(2)  # before anything initialises TensorFlow's devices
    import adapter_bert as ab
    from tests.test_text_classifier import MOODS, mood_rows
    strategy = get_strategy("mirrored")
    model = ab.TextClassifier.from_pretrained(list(MOODS), sys.argv[1], max_seq_length=32,
                                              strategy=strategy)
    texts, labels = (list(v) for v in zip(*mood_rows(64)))
    history = model.fit(texts, labels, batch_size=16, epochs=1, verbose=0)
    print(json.dumps({"replicas": model.distribute_strategy.num_replicas_in_sync,
                      "step": int(model.optimizer.iterations.numpy()),
                      "loss": history.history["loss"][-1],
                      "predicted": model.predict(texts[:5], return_labels=True),
                      "accuracy": model.evaluate(texts, labels, return_dict=True,
                                                 verbose=0)["accuracy"]}))
""")


@pytest.mark.slow
def test_a_mirrored_strategy_trains_it_on_two_replicas(backbone):
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", _MIRRORED, str(backbone / "bert_model.ckpt")],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["replicas"] == 2 and result["step"] == 4  # 64 texts, batch 16
    assert np.isfinite(result["loss"]) and 0 <= result["accuracy"] <= 1
    assert set(result["predicted"]) <= set(MOODS) and len(result["predicted"]) == 5


@pytest.mark.realdata
@pytest.mark.realweights
def test_library_and_runner_agree_on_real_tweets(real_data, tmp_path):
    """Twitter US Airline Sentiment (the paper's "Crowdflower airline"), 480 tweets to train
    and 160 to evaluate, on the embedded MiniLM at the defaults: both well above the
    majority class and within a few points of each other (their batches differ)."""
    from tests.conftest import real_file
    with open(real_file(real_data, "classification/airline/Tweets.csv"), encoding="utf-8",
              newline="") as f:
        rows = [(r["text"], r["airline_sentiment"]) for r in csv.DictReader(f)][:640]
    train, dev = rows[:480], rows[480:]
    write_csv(tmp_path / "train.csv", train)
    write_csv(tmp_path / "dev.csv", dev)
    values = {"output_dir": tmp_path / "out", "train_file": tmp_path / "train.csv",
              "dev_file": tmp_path / "dev.csv", "max_seq_length": 64}
    code, _ = run_in_process("run_classifier", [*flag_list(values, {}), "--do_train",
                                                 "--do_eval"])
    assert code == 0
    runner = read_results(tmp_path / "out" / "eval_results.txt")
    texts, labels = (list(v) for v in zip(*train))
    model = TextClassifier.from_pretrained(sorted(set(labels)), max_seq_length=64)
    model.fit(texts, labels, verbose=0)   # 3 epochs, as the runner's default
    scores = model.report(*(list(v) for v in zip(*dev)))
    majority = max(collections.Counter(label for _, label in dev).values()) / len(dev)
    assert scores["accuracy"] > majority + 0.05
    assert abs(scores["accuracy"] - float(runner["eval_accuracy"])) < 0.05
