"""What a practitioner reads after an evaluation, checked against scikit-learn: the per-class
report, the confusion matrix and each dev row's prediction; and class weights for an
imbalanced set (balanced as scikit-learn computes them, or given), in the loss and in the
adapter."""

import csv
import json

import numpy as np
import pytest
from sklearn.metrics import classification_report, confusion_matrix
from sklearn.utils.class_weight import compute_class_weight

from adapter_bert.training.objectives import ClassWeightedCrossEntropy, class_weights_for
from adapter_bert.errors import UserError
from adapter_bert.io_utils.reads import read_key_values
from adapter_bert.data.glue import InputExample
from tests.runner_utils import flag_list, run_in_process
from tests.test_text_classifier import write_csv

LABELS = ["calm", "happy", "sad"]


@pytest.fixture(scope="module")
def run(backbone, tmp_path_factory):
    """An imbalanced 3-class set (70% calm, 20% happy, 10% sad) trained with balanced
    class weights; its dev file has no sad row."""
    folder = tmp_path_factory.mktemp("imbalanced")
    words = {"calm": "quiet still evening", "happy": "great joy fun", "sad": "tears grey loss"}
    train = [(f"{words[label]} {i}", label) for i in range(60)
             for label in ["calm"] * 7 + ["happy"] * 2 + ["sad"]][:300]
    dev = [(f"{words[label]} {i}", label) for i in range(20) for label in ("calm", "happy")]
    out = folder / "out"
    code, _ = run_in_process("run_classifier", [
        f"--train_file={write_csv(folder / 'train.csv', train)}",
        f"--dev_file={write_csv(folder / 'dev.csv', dev)}", "--do_train", "--do_eval",
        "--class_weights=balanced", *flag_list(
            {"init_checkpoint": f"{backbone}/bert_model.ckpt", "output_dir": out,
             "max_seq_length": 16, "train_batch_size": 32, "eval_batch_size": 64,
             "learning_rate": 1e-3, "adapter_size": 8, "num_train_epochs": 1}, {})])
    assert code == 0
    return out, [label for _, label in train]


def read_tsv(path):
    lines = path.read_text().splitlines()
    header = lines[0].split("\t")
    return header, [line.split("\t") for line in lines[1:]]


def test_the_per_class_report_and_confusion_matrix_are_scikit_learns(run):
    out, _ = run
    header, rows = read_tsv(out / "eval_predictions.tsv")
    assert header == ["id", "label", "predicted_label", *LABELS]
    assert len(rows) == 40 and rows[0][0] == "dev-2"  # the line of dev.csv, after its header
    truth, predicted = [r[1] for r in rows], [r[2] for r in rows]
    for row in rows:
        probabilities = np.array(row[3:], float)
        assert abs(probabilities.sum() - 1) < 1e-4 and LABELS[probabilities.argmax()] == row[2]
    expected = classification_report(truth, predicted, labels=LABELS, output_dict=True,
                                     zero_division=0)
    header, report = read_tsv(out / "eval_per_class.tsv")
    assert header == ["label", "precision", "recall", "f1", "support"]
    assert [r[0] for r in report] == [*LABELS, "macro avg", "weighted avg"]
    for name, precision, recall, f1, support in report:
        row = expected[name]
        assert np.allclose([float(precision), float(recall), float(f1)],
                           [row["precision"], row["recall"], row["f1-score"]], atol=1e-5)
        assert int(support) == row["support"]
    header, matrix = read_tsv(out / "eval_confusion.tsv")
    assert header == ["true \\ predicted", *LABELS] and [r[0] for r in matrix] == LABELS
    assert (np.array([r[1:] for r in matrix], int)
            == confusion_matrix(truth, predicted, labels=LABELS)).all()
    eval_results = read_key_values(str(out / "eval_results.txt"))
    assert float(eval_results["eval_accuracy"]) == pytest.approx(expected["accuracy"])


def test_balanced_class_weights_are_scikit_learns_and_recorded_in_the_adapter(run):
    out, train_labels = run
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    expected = compute_class_weight("balanced", classes=np.array(LABELS),
                                    y=np.array(train_labels))
    assert list(config["training"]["class_weights"]) == LABELS
    assert np.allclose(list(config["training"]["class_weights"].values()), expected)
    flags = json.loads((out / "run_flags.json").read_text())["flags"]
    assert flags["class_weights"] == "balanced"


def test_the_weighted_loss_is_the_weighted_mean_of_the_cross_entropy():
    logits = np.array([[2.0, 0.0, -1.0], [0.0, 1.0, 0.0], [0.5, 0.5, 3.0]], np.float32)
    labels = np.array([0, 2, 2])
    weights = [1.0, 2.0, 5.0]
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    expected = np.mean([-log_p[i, y] * weights[y] for i, y in enumerate(labels)])
    loss = ClassWeightedCrossEntropy(weights)(labels.reshape(-1, 1), logits)
    assert float(loss) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("text, message", [
    ("calm:2,angry:3", "'angry' is not a label of the task"),
    ("calm:0", "the weight of calm must be a finite number > 0, got '0'"),
    ("calm:x", "the weight of calm must be a finite number > 0, got 'x'"),
    ("calm", "'calm' has no weight; expected balanced or label:weight"),
    ("calm:2,calm:3", "'calm' is weighted twice"),
])
def test_bad_class_weights_are_one_line_naming_the_flag(text, message):
    train = {"calm": 1, "sad": 1, "happy": 1}
    with pytest.raises(UserError, match=f"^--class_weights={text}: .*{message}"):
        class_weights_for(text, LABELS, False, train)


def test_class_weights_name_what_they_cannot_weigh():
    train = {"calm": 1, "sad": 1}  # rows per label of the training data
    with pytest.raises(UserError, match="a regression task has none"):
        class_weights_for("balanced", [], True, train)
    with pytest.raises(UserError, match="it needs --do_train"):
        class_weights_for("balanced", LABELS, False, None)
    with pytest.raises(UserError, match="the training data has no row of happy"):
        class_weights_for("balanced", LABELS, False, train)
    assert class_weights_for("sad:4", LABELS, False, train) == {"calm": 1.0, "happy": 1.0,
                                                               "sad": 4.0}
    # Spaces around a name or weight, and a trailing comma, change nothing.
    assert class_weights_for(" sad : 4 , calm:2,", LABELS, False, train) == {
        "calm": 2.0, "happy": 1.0, "sad": 4.0}


def test_a_split_lacking_a_class_is_named_in_one_warning(tmp_path, caplog):
    from adapter_bert.runners.classifier import write_split_report
    examples = [InputExample(f"dev-{i}", "t", label=label) for i, label in
                enumerate(["calm", "happy", "calm"], 2)]
    logits = np.array([[3.0, 0, 0], [0, 3.0, 0], [0, 0, 3.0]], np.float32)
    with caplog.at_level("WARNING"):
        write_split_report(str(tmp_path), "eval_", examples, logits, np.array([0, 1, 0]),
                           LABELS, False)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["The eval set has no row of sad: their recall and F1 are 0 in "
                        "eval_per_class.tsv and pull macro-averaged figures down"]
    _, matrix = read_tsv(tmp_path / "eval_confusion.tsv")
    assert matrix == [["calm", "1", "0", "1"], ["happy", "0", "1", "0"], ["sad", "0", "0", "0"]]


def test_a_regression_adapter_predicts_and_exports_without_task_type_in_float32(
        backbone, tmp_path, capfd):
    """Trained under mixed_bfloat16, a regression adapter records its task type and target:
    evaluating, predicting and exporting with it need no --task_type, and its scores are
    float32 numbers, not bfloat16's (multiples of 1/256 near 1)."""
    rows = [(f"{'good ' * (i % 5)}day {i}", f"{(i % 5) / 4:.3f}") for i in range(80)]
    with open(tmp_path / "scores.csv", "w", newline="") as f:
        csv.writer(f).writerows([("text", "score"), *rows])
    common = {"init_checkpoint": f"{backbone}/bert_model.ckpt", "max_seq_length": 16,
              "train_batch_size": 16, "eval_batch_size": 64, "predict_batch_size": 64,
              "learning_rate": 1e-3, "adapter_size": 8, "num_train_epochs": 1,
              "dtype": "mixed_bfloat16"}
    code, _ = run_in_process("run_classifier", [
        f"--train_file={tmp_path / 'scores.csv'}", "--task_type=regression", "--do_train",
        *flag_list(common, {"output_dir": tmp_path / "train"})])
    assert code == 0
    config = json.loads((tmp_path / "train" / "adapter" / "adapter_config.json").read_text())
    assert config["training"] == {"task_type": "regression", "target": "score",
                                  "max_seq_length": 16}
    code, _ = run_in_process("run_classifier", [
        f"--dev_file={tmp_path / 'scores.csv'}", f"--test_file={tmp_path / 'scores.csv'}",
        f"--load_adapter={tmp_path / 'train' / 'adapter'}", "--do_eval", "--do_predict",
        *flag_list(common, {"output_dir": tmp_path / "predict"})])
    assert code == 0
    lines = (tmp_path / "predict" / "test_results.tsv").read_text().splitlines()
    assert lines[0] == "score" and len(lines) == 81
    scores = np.array(lines[1:], np.float64)
    assert len(set(scores)) > 40  # bfloat16 outputs took a handful of values
    assert not np.all(np.round(scores * 256) == scores * 256)
    assert "eval_pearson" in (tmp_path / "predict" / "eval_results.txt").read_text()
    header, rows = read_tsv(tmp_path / "predict" / "eval_predictions.tsv")
    assert header == ["id", "label", "score"] and len(rows) == 80
    code, _ = run_in_process("run_classifier", [
        f"--load_adapter={tmp_path / 'train' / 'adapter'}", "--task_type=classification",
        f"--test_file={tmp_path / 'scores.csv'}", "--do_predict",
        *flag_list(common, {"output_dir": tmp_path / "wrong"})])
    assert code == 1  # the adapter says regression: a contradicting flag is refused
    capfd.readouterr()
    code, _ = run_in_process("run_classifier", [
        f"--load_adapter={tmp_path / 'train' / 'adapter'}", "--labels=low,high",
        f"--test_file={tmp_path / 'scores.csv'}", "--do_predict",
        *flag_list(common, {"output_dir": tmp_path / "labelled"})])
    assert code == 1
    assert "--labels=low,high: the adapter this run loads is a regression (one score, no " \
           "label names); leave --labels out" in capfd.readouterr().err


def test_a_labelled_test_file_is_scored_and_an_unlabelled_one_only_predicted(backbone,
                                                                             tmp_path):
    words = {"calm": "quiet still evening", "happy": "great joy fun"}
    rows = [(f"{words[label]} {i}", label) for i in range(24) for label in words]
    train = write_csv(tmp_path / "train.csv", rows)
    test = write_csv(tmp_path / "test.csv", rows[:10])
    blank = write_csv(tmp_path / "blank.csv", [(text, "") for text, _ in rows[:10]])
    common = {"init_checkpoint": f"{backbone}/bert_model.ckpt", "max_seq_length": 16,
              "train_batch_size": 16, "predict_batch_size": 64, "learning_rate": 1e-3,
              "adapter_size": 8, "num_train_epochs": 1}
    code, _ = run_in_process("run_classifier", [
        f"--train_file={train}", f"--test_file={test}", "--do_train", "--do_predict",
        *flag_list(common, {"output_dir": tmp_path / "out"})])
    assert code == 0
    header, predicted = read_tsv(tmp_path / "out" / "test_results.tsv")
    truth = [label for _, label in rows[:10]]
    scores = read_key_values(str(tmp_path / "out" / "test_eval_results.txt"))
    assert float(scores["test_accuracy"]) == pytest.approx(
        np.mean([p[-1] == t for p, t in zip(predicted, truth)]))
    _, matrix = read_tsv(tmp_path / "out" / "test_confusion.tsv")
    assert (np.array([r[1:] for r in matrix], int) == confusion_matrix(
        truth, [p[-1] for p in predicted], labels=["calm", "happy"])).all()
    assert (tmp_path / "out" / "test_per_class.tsv").is_file()
    assert not (tmp_path / "out" / "test_predictions.tsv").exists()  # test_results.tsv is it
    code, _ = run_in_process("run_classifier", [
        f"--test_file={blank}", f"--load_adapter={tmp_path / 'out' / 'adapter'}",
        "--do_predict", *flag_list(common, {"output_dir": tmp_path / "blank_out"})])
    assert code == 0
    assert (tmp_path / "blank_out" / "test_results.tsv").is_file()
    assert not (tmp_path / "blank_out" / "test_eval_results.txt").exists()


def test_keep_columns_lead_the_dev_and_test_outputs(backbone, tmp_path):
    words = {"calm": "quiet still evening", "happy": "great joy fun"}
    with open(tmp_path / "tweets.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["tweet_id", "airline", "text", "label"])
        for i in range(40):
            label = ("calm", "happy")[i % 2]
            writer.writerow([9000 + i, ("Delta", "United")[i % 3 == 0], f"{words[label]} {i}",
                             label])
    common = {"init_checkpoint": f"{backbone}/bert_model.ckpt", "max_seq_length": 16,
              "train_batch_size": 16, "eval_batch_size": 64, "predict_batch_size": 64,
              "learning_rate": 1e-3, "adapter_size": 8, "num_train_epochs": 1,
              "output_dir": tmp_path / "out"}
    data = tmp_path / "tweets.csv"
    code, _ = run_in_process("run_classifier", [
        f"--train_file={data}", f"--dev_file={data}", f"--test_file={data}",
        "--keep_columns=tweet_id,airline", "--do_train", "--do_eval", "--do_predict",
        *flag_list(common, {})])
    assert code == 0
    header, rows = read_tsv(tmp_path / "out" / "eval_predictions.tsv")
    assert header[:4] == ["tweet_id", "airline", "id", "label"]
    assert rows[0][:4] == ["9000", "United", "dev-2", "calm"] and len(rows) == 40
    header, rows = read_tsv(tmp_path / "out" / "test_results.tsv")
    assert header == ["tweet_id", "airline", "calm", "happy", "predicted_label"]
    assert [r[0] for r in rows] == [str(9000 + i) for i in range(40)]
    # A dev file without a kept column is named in one line, before training.
    (tmp_path / "dev.csv").write_text("text,label\na,calm\nb,happy\n")
    code, _ = run_in_process("run_classifier", [
        f"--train_file={data}", f"--dev_file={tmp_path / 'dev.csv'}",
        "--keep_columns=tweet_id", "--do_train", "--do_eval",
        *flag_list(common, {"output_dir": tmp_path / "bad"})])
    assert code == 1


def test_kept_values_are_written_as_data_under_unique_names(backbone, tmp_path, capfd):
    """A kept value holding a newline, a tab or quotes is quoted (csv and pandas read one
    row per example); a kept column named like an output column is written as kept_<name>."""
    import pandas
    words = {"calm": "quiet still evening", "happy": "great joy fun"}
    notes = ['line one\nline two', 'a\ttab', 'say "hi"', "carriage\rreturn"]
    with open(tmp_path / "tweets.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "note", "text", "label"])
        for i in range(16):
            label = ("calm", "happy")[i % 2]
            writer.writerow([f"t{i}", notes[i % 4], f"{words[label]} {i}", label])
    data = tmp_path / "tweets.csv"
    common = {"init_checkpoint": f"{backbone}/bert_model.ckpt", "max_seq_length": 16,
              "train_batch_size": 16, "eval_batch_size": 64, "predict_batch_size": 64,
              "learning_rate": 1e-3, "adapter_size": 8, "num_train_epochs": 1}
    code, _ = run_in_process("run_classifier", [
        f"--train_file={data}", f"--dev_file={data}", f"--test_file={data}",
        "--keep_columns=id,note", "--do_train", "--do_eval", "--do_predict",
        *flag_list(common, {"output_dir": tmp_path / "out"})])
    assert code == 0
    for name, header in (("eval_predictions.tsv", ["kept_id", "note", "id", "label",
                                                   "predicted_label", "calm", "happy"]),
                         ("test_results.tsv", ["id", "note", "calm", "happy",
                                               "predicted_label"])):
        with open(tmp_path / "out" / name, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f, delimiter="\t"))
        assert rows[0] == header and len(rows) == 17
        assert [r[1] for r in rows[1:]] == [notes[i % 4] for i in range(16)]
        frame = pandas.read_csv(tmp_path / "out" / name, sep="\t", keep_default_na=False)
        assert list(frame.columns) == header and len(frame) == 16
        assert list(frame["note"]) == [notes[i % 4] for i in range(16)]
    # Dev rows held out of a training file without the kept column: one line, before training.
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(
        f"{words[label]} {i},{label}\n" for i in range(16) for label in ("calm", "happy")))
    capfd.readouterr()
    code, _ = run_in_process("run_classifier", [
        f"--train_file={tmp_path / 'train.csv'}", "--dev_fraction=0.25", "--keep_columns=note",
        "--do_train", "--do_eval", *flag_list(common, {"output_dir": tmp_path / "bad"})])
    assert code == 1
    error = capfd.readouterr().err
    assert "--keep_columns=note" in error and "--dev_fraction" in error
    assert not (tmp_path / "bad" / "adapter").exists()


def test_text_classifier_weighs_classes_and_reports_them_per_class(backbone, tmp_path):
    import adapter_bert as ab
    texts = [f"{word} {i}" for i in range(12) for word in ("calm", "calm", "calm", "happy")]
    labels = ["calm" if t.startswith("calm") else "happy" for t in texts]
    model = ab.TextClassifier.from_pretrained(labels=["calm", "happy"], backbone=str(backbone),
                                              adapter={"size": 8}, max_seq_length=16)
    model.fit(texts, labels, batch_size=16, epochs=1, verbose=0, class_weight="balanced")
    assert model.class_weights == pytest.approx({"calm": 48 / 72, "happy": 48 / 24})
    results = model.report(texts, labels)
    predicted = model.predict(texts, return_labels=True)
    expected = classification_report(labels, predicted, labels=["calm", "happy"],
                                      output_dict=True, zero_division=0)
    for name in ("calm", "happy"):
        assert results["per_class"][name]["recall"] == pytest.approx(expected[name]["recall"])
        assert results["per_class"][name]["support"] == expected[name]["support"]
    model.save_adapter(str(tmp_path / "a"))
    config = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    assert config["training"]["class_weights"] == pytest.approx({"calm": 2 / 3, "happy": 2.0})
    with pytest.raises(UserError, match=r"class_weight=\{'angry': 2\}: 'angry' is not a label"):
        model.fit(texts, labels, batch_size=16, epochs=1, verbose=0, class_weight={"angry": 2})
