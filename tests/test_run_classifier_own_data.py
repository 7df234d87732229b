"""run_classifier.py on your own files: a binary set stored `label<TAB>text` without a
header and a 13-class CSV with extra columns train, evaluate, predict and export with
their label names kept; loaded adapters keep their task; bad input is one line."""

import csv
import json

import numpy as np
import pytest

from tests.robustness.helpers import assert_one_error_line
from tests.runner_utils import flag_list, read_results, run_in_process

EMOTIONS = ("anger", "boredom", "empty", "enthusiasm", "fun", "happiness", "hate", "love",
            "neutral", "relief", "sadness", "surprise", "worry")


def common_flags(backbone, output_dir, **overrides):
    values = {"init_checkpoint": backbone / "bert_model.ckpt", "output_dir": output_dir,
              "max_seq_length": 32, "train_batch_size": 16, "eval_batch_size": 64,
              "predict_batch_size": 64, "learning_rate": 1e-3, "adapter_size": 8,
              "save_checkpoints_steps": 100, "num_train_epochs": 1}
    return flag_list(values, overrides)


@pytest.fixture(scope="module")
def spam_file(tmp_path_factory):
    """A binary set as `label<TAB>text`, no header: 60 rows, every fifth one spam."""
    path = tmp_path_factory.mktemp("spam") / "SMSSpamCollection.tsv"
    rows = [("spam", f"WIN a free prize {i}, call now") if i % 5 == 0
            else ("ham", f'see you at "{i}" o\'clock') for i in range(60)]
    path.write_text("".join(f"{label}\t{text}\n" for label, text in rows))
    return path


@pytest.fixture(scope="module")
def emotion_file(tmp_path_factory):
    """A 13-class CSV with a header and extra columns, texts with commas, quotes and
    newlines."""
    path = tmp_path_factory.mktemp("emotion") / "text_emotion.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["tweet_id", "sentiment", "author", "content"])
        for i in range(78):
            emotion = EMOTIONS[i % 13]
            writer.writerow([1000 + i, emotion, f"user{i}", f'so "{emotion}",\ntoday {i}'])
    return path


@pytest.fixture(scope="module")
def spam_run(backbone, spam_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("spam_run") / "out"
    code, _ = run_in_process("run_classifier", [
        f"--train_file={spam_file}", f"--test_file={spam_file}", "--text_column=1",
        "--label_column=0", "--dev_fraction=0.2", "--do_train", "--do_eval", "--do_predict",
        *common_flags(backbone, out)])
    assert code == 0
    return out


@pytest.mark.slow
def test_a_headerless_binary_set_trains_evaluates_and_predicts(spam_run, spam_file):
    description = json.loads((spam_run / "adapter" / "adapter_config.json").read_text())
    assert description["task"] == "smsspamcollection"
    assert description["labels"] == ["ham", "spam"]
    results = read_results(spam_run / "eval_results.txt")
    for key in ("eval_accuracy", "eval_macro_f1", "eval_mcc", "eval_precision", "eval_recall",
                "eval_f1", "eval_loss"):
        assert 0.0 <= float(results[key]) or key == "eval_mcc"
    held = [int(line) for line in (spam_run / "dev_fraction_rows.txt").read_text().split()]
    assert len(held) == 12 and sum(1 for line in held if (line - 1) % 5 == 0) == 2
    lines = (spam_run / "test_results.tsv").read_text().splitlines()
    assert lines[0] == "ham\tspam\tpredicted_label" and len(lines) == 61
    rows = [line.split("\t") for line in lines[1:]]
    probabilities = np.array([[float(p) for p in row[:2]] for row in rows])
    np.testing.assert_allclose(probabilities.sum(1), 1.0, atol=1e-5)
    assert [row[2] for row in rows] == [("ham", "spam")[i] for i in probabilities.argmax(1)]


def test_a_13_class_csv_with_extra_columns_keeps_its_label_names(backbone, emotion_file,
                                                                 tmp_path, caplog):
    out = tmp_path / "out"
    code, _ = run_in_process("run_classifier", [
        f"--train_file={emotion_file}", f"--dev_file={emotion_file}", "--do_train", "--do_eval",
        "--task_name=emotion", "--verbosity=0", *common_flags(backbone, out)])
    assert code == 0
    description = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert description["task"] == "emotion" and description["labels"] == sorted(EMOTIONS)
    results = read_results(out / "eval_results.txt")
    assert {"eval_accuracy", "eval_macro_f1", "eval_mcc"} <= set(results)
    assert "eval_f1" not in results  # no positive class among 13
    assert f"{emotion_file}: 78 rows (text='content', label='sentiment'), labels anger: 6" \
        in caplog.text  # one log line per file read


def test_a_loaded_adapter_predicts_with_its_label_names(spam_run, spam_file, backbone, tmp_path):
    out = tmp_path / "predict"
    code, _ = run_in_process("run_classifier", [
        "--do_predict", f"--test_file={spam_file}", "--text_column=1",
        f"--load_adapter={spam_run / 'adapter'}", *common_flags(backbone, out)])
    assert code == 0
    assert (out / "test_results.tsv").read_text() == (spam_run / "test_results.tsv").read_text()


@pytest.mark.slow
def test_an_adapter_of_another_task_is_refused(spam_run, spam_file, backbone, tmp_path,
                                               capfd):
    """Same label names (ham, spam) but another task named: refused, not evaluated."""
    code, _ = run_in_process("run_classifier", [
        "--do_eval", f"--dev_file={spam_file}", "--text_column=1", "--label_column=0",
        "--task_name=phishing", f"--load_adapter={spam_run / 'adapter'}",
        *common_flags(backbone, tmp_path / "out")])
    assert code == 1
    assert_one_error_line(capfd.readouterr().err, "run_classifier.py",
                          r"error: --load_adapter=.*adapter was trained for smsspamcollection, "
                          r"not phishing: pass an adapter trained on phishing")


@pytest.mark.slow
def test_the_export_answers_strings_with_label_names(spam_run, spam_file, backbone, tmp_path):
    pytest.importorskip("tensorflow_text")
    import tensorflow as tf
    export = tmp_path / "export"
    code, _ = run_in_process("run_classifier", [
        "--do_predict", f"--test_file={spam_file}", "--text_column=1",
        f"--load_adapter={spam_run / 'adapter'}", f"--export_dir={export}",
        *common_flags(backbone, tmp_path / "out")])
    assert code == 0
    serve = tf.saved_model.load(str(export)).signatures["serving_default"]
    texts = [line.split("\t")[1] for line in spam_file.read_text().splitlines()[:8]]
    outputs = serve(text_a=tf.constant(texts))
    labels = [label.decode() for label in outputs["label"].numpy()]
    expected = [line.split("\t")[2] for line in
                (spam_run / "test_results.tsv").read_text().splitlines()[1:9]]
    assert labels == expected and set(labels) <= {"ham", "spam"}


def test_an_adapter_alone_exports_without_data_flags(spam_run, spam_file, backbone, tmp_path,
                                                      capfd):
    """docs/serving.md: --load_adapter with --export_dir needs no data: the adapter records
    its task, labels and how it was trained."""
    pytest.importorskip("tensorflow_text")
    import tensorflow as tf
    export = tmp_path / "export"
    code, _ = run_in_process("run_classifier", [
        f"--load_adapter={spam_run / 'adapter'}", f"--export_dir={export}",
        *common_flags(backbone, tmp_path / "out")])
    assert code == 0, capfd.readouterr().err[-2000:]
    serve = tf.saved_model.load(str(export)).signatures["serving_default"]
    texts = [line.split("\t")[1] for line in spam_file.read_text().splitlines()[:8]]
    labels = [label.decode() for label in serve(text_a=tf.constant(texts))["label"].numpy()]
    expected = [line.split("\t")[2] for line in
                (spam_run / "test_results.tsv").read_text().splitlines()[1:9]]
    assert labels == expected
    # Naming the task the adapter records changes nothing (it is not a GLUE task's name).
    code, _ = run_in_process("run_classifier", [
        f"--load_adapter={spam_run / 'adapter'}", f"--export_dir={tmp_path / 'named'}",
        "--task_name=smsspamcollection", *common_flags(backbone, tmp_path / "out2")])
    assert code == 0, capfd.readouterr().err[-2000:]
    serve = tf.saved_model.load(str(tmp_path / "named")).signatures["serving_default"]
    assert [v.decode() for v in serve(text_a=tf.constant(texts))["label"].numpy()] == expected


def test_regression_on_a_float_column(backbone, tmp_path):
    data = tmp_path / "scores.jsonl"
    data.write_text("".join(json.dumps({"text": f"row {i}", "score": i / 10}) + "\n"
                            for i in range(40)))
    out = tmp_path / "out"
    code, _ = run_in_process("run_classifier", [
        f"--train_file={data}", f"--dev_file={data}", f"--test_file={data}",
        "--label_column=score", "--task_type=regression", "--do_train", "--do_eval",
        "--do_predict", *common_flags(backbone, out)])
    assert code == 0
    assert {"eval_pearson", "eval_spearmanr", "eval_mse"} <= set(read_results(
        out / "eval_results.txt"))
    assert (out / "test_results.tsv").read_text().startswith("score\n")


@pytest.mark.parametrize("flags, expected", [
    (["--do_train", "--dev_fraction=0.1", "--dev_file={data}"],
     r"--dev_file and --dev_fraction=0\.1 both give a dev set: pass one of them"),
    (["--do_eval", "--train_file={data}"],
     r"--do_eval on your own data needs --dev_file \(or --dev_fraction=0\.1 to hold out part "
     r"of --train_file\)"),
    (["--do_train", "--data_dir=/tmp"],
     r"--data_dir is a GLUE task's folder; your own files are named by --train_file"),
    (["--do_train", "--label_column=lable"],
     r"--label_column=lable: .*text_emotion\.csv has no such column; the file's columns are "
     r"'tweet_id', 'sentiment', 'author', 'content'"),
    (["--do_train", "--dev_fraction=1.5"],
     r"--dev_fraction must be a finite number in \(0, 1\), got 1\.5"),
    (["--do_train", "--task_type=regression", "--labels=low,high"],
     r"--labels=low,high: --task_type=regression \(one score, no label names\); leave "
     r"--labels out"),
])
def test_bad_own_data_flags_are_one_line(flags, expected, backbone, emotion_file, tmp_path,
                                         capfd):
    argv = [flag.format(data=emotion_file) for flag in flags]
    if not any(flag.startswith(("--train_file", "--do_eval")) for flag in argv):
        argv.append(f"--train_file={emotion_file}")
    code, _ = run_in_process("run_classifier", [*argv, *common_flags(backbone, tmp_path / "o")])
    assert code == 1
    assert_one_error_line(capfd.readouterr().err, "run_classifier.py", "error: " + expected)


def test_the_library_loads_the_adapter_with_its_task_and_label_names(spam_run, backbone):
    import adapter_bert as ab
    model = ab.load_adapter(str(spam_run / "adapter"), backbone=str(backbone / "bert_model.ckpt"))
    assert model.labels == {"smsspamcollection": ["ham", "spam"]}
