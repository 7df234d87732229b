"""run_squad.py end to end on a tiny backbone and written SQuAD slices: files, scores, errors.

The entry point runs as a subprocess: absl flags can be defined once per process, and
run_classifier.py's tests define theirs in this one.
"""

import json

import numpy as np
import pytest

from tests.robustness.helpers import squad_flags as robustness_squad_flags
from tests.runner_utils import read_results, run_subprocess


def write_slice(source, target, articles=1, paragraphs=None, edit=None):
    """Writes the first `articles` articles (first `paragraphs` of each) of a SQuAD file."""
    data = json.loads(source.read_text(encoding="utf-8"))
    kept = [dict(a, paragraphs=a["paragraphs"][:paragraphs]) for a in data["data"][:articles]]
    sliced = {"version": data.get("version"), "data": kept}
    if edit:
        edit(sliced)
    target.write_text(json.dumps(sliced), encoding="utf-8")
    return target


def question_ids(path):
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    return [q["id"] for a in data for p in a["paragraphs"] for q in p["qas"]]


def squad_flags(backbone, output_dir, **overrides):
    """The shared tiny-backbone SQuAD flags, with larger batches and no mid-run checkpoint."""
    return robustness_squad_flags(backbone, output_dir, **{
        "train_batch_size": 32, "predict_batch_size": 64, "save_checkpoints_steps": 1000,
        **overrides})


def run_squad(argv):
    """Runs run_squad.py in a subprocess; returns the CompletedProcess."""
    return run_subprocess("run_squad.py", [str(a) for a in argv])


def break_one_answer_start(data):
    """Points the first question's answer_start one character off (counted, skipped)."""
    answer = data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]
    answer["answer_start"] += 1


@pytest.fixture(scope="module")
def v1_files(squad_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("squad_v1")
    squad = squad_dir
    train = write_slice(squad / "train-v1.1-subset.json", root / "train.json",
                        edit=break_one_answer_start)
    dev = write_slice(squad / "dev-v1.1.json", root / "dev.json", paragraphs=3)
    return train, dev


@pytest.fixture(scope="module")
def v1_run(backbone, v1_files, tmp_path_factory):
    """Adapter tuning on one real training article, then predict 3 dev paragraphs."""
    out = tmp_path_factory.mktemp("v1_out")
    train, dev = v1_files
    result = run_squad(["--do_train", "--do_predict", f"--train_file={train}",
                        f"--predict_file={dev}", *squad_flags(backbone, out)])
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result


@pytest.mark.slow
def test_v1_writes_the_original_files_and_scores(v1_run, v1_files):
    out, result = v1_run
    ids = question_ids(v1_files[1])
    predictions = json.loads((out / "predictions.json").read_text())
    assert list(predictions) == ids and all(isinstance(t, str) for t in predictions.values())
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    assert list(nbest) == ids
    for qid, entries in nbest.items():
        assert 1 <= len(entries) <= 20
        assert set(entries[0]) == {"text", "probability", "start_logit", "end_logit"}
        assert sum(e["probability"] for e in entries) == pytest.approx(1.0, abs=1e-6)
        assert entries[0]["text"] == predictions[qid]
    assert not (out / "null_odds.json").exists()
    assert (out / "adapter" / "adapter_config.json").is_file()
    assert "exact_match = " in result.stdout and "f1 = " in result.stdout


def test_v1_eval_results_hold_scores_counts_and_parameters(v1_run, v1_files):
    out, _ = v1_run
    results = read_results(out / "eval_results.txt")
    assert list(results) == sorted(results)
    for key in ("exact_match", "f1", "global_step", "train_loss", "trainable_params",
                "all_params", "trainable_percent", "predict_questions", "predict_windows",
                "train_questions", "train_windows"):
        assert key in results, key
    assert 0.0 <= float(results["exact_match"]) <= 100.0 and 0.0 <= float(results["f1"]) <= 100.0
    assert int(results["predict_questions"]) == len(question_ids(v1_files[1]))
    # The answer_start broken on purpose is counted and skipped, not trained on.
    assert results["train_skipped_answer_start_mismatch"] == "1"
    assert int(results["train_questions"]) == len(question_ids(v1_files[0])) - 1
    as_json = json.loads((out / "eval_results.json").read_text())
    assert set(as_json) == set(results)
    assert as_json["f1"] == pytest.approx(float(results["f1"]))
    assert isinstance(as_json["trainable_params"], int)


@pytest.mark.slow
def test_predict_from_load_adapter_reproduces_predictions(v1_run, v1_files, backbone, tmp_path):
    out, _ = v1_run
    result = run_squad(["--do_predict", f"--predict_file={v1_files[1]}",
                        f"--load_adapter={out / 'adapter'}",
                        *squad_flags(backbone, tmp_path / "again", predict_batch_size=16)])
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "again/predictions.json").read_text() == \
        (out / "predictions.json").read_text()
    again = read_results(tmp_path / "again/eval_results.txt")
    original = read_results(out / "eval_results.txt")
    assert again["exact_match"] == original["exact_match"] and again["f1"] == original["f1"]


@pytest.mark.slow
def test_v2_writes_null_odds_and_the_threshold_search(backbone, squad_dir, tmp_path):
    dev = write_slice(squad_dir / "dev-v2.0.json", tmp_path / "dev2.json",
                      paragraphs=3)
    out = tmp_path / "out"
    result = run_squad(["--do_train", "--do_predict", "--version_2_with_negative",
                        f"--train_file={dev}", f"--predict_file={dev}",
                        *squad_flags(backbone, out, num_train_epochs=2)])
    assert result.returncode == 0, result.stderr[-3000:]
    ids = question_ids(dev)
    null_odds = json.loads((out / "null_odds.json").read_text())
    assert list(null_odds) == ids and all(isinstance(v, float) for v in null_odds.values())
    predictions = json.loads((out / "predictions.json").read_text())
    for qid in ids:  # "" exactly when the null score wins by more than the threshold 0.0
        assert (predictions[qid] == "") == (null_odds[qid] > 0.0)
    results = read_results(out / "eval_results.txt")
    for key in ("exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
                "NoAns_exact", "NoAns_f1", "NoAns_total", "best_exact", "best_exact_thresh",
                "best_f1", "best_f1_thresh"):
        assert key in results, key
    assert int(results["total"]) == len(ids)
    assert float(results["best_f1"]) >= float(results["f1"]) - 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("doc_stride", [48, 64])
def test_strides_google_accepts_run(backbone, v1_files, tmp_path, doc_stride):
    """A stride longer than the context window (45 tokens here) or than the whole sequence
    is accepted, as by Google's run_squad.py: windows follow each other, none is skipped."""
    _, dev = v1_files
    out = tmp_path / "out"
    result = run_squad(["--do_predict", f"--predict_file={dev}",
                        *squad_flags(backbone, out, doc_stride=doc_stride)])
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(json.loads((out / "predictions.json").read_text())) == question_ids(dev)
    results = read_results(out / "eval_results.txt")
    assert int(results["predict_windows"]) > int(results["predict_questions"])


def test_span_loss_is_the_mean_of_start_and_end_cross_entropy(tiny_config):
    import tf_keras as keras

    from adapter_bert.model.heads import BertSpanNetwork
    from adapter_bert.runners.squad import compile_span_model
    from tests.conftest import tiny_inputs
    model = BertSpanNetwork(tiny_config)
    inputs = tiny_inputs(batch=3, seq=8)
    outputs = model(inputs, training=False)
    compile_span_model(model, keras.optimizers.SGD(0.0), 1)
    starts, ends = np.array([1, 0, 5], "int32"), np.array([2, 0, 7], "int32")
    loss = model.evaluate(inputs, {"start_logits": starts, "end_logits": ends}, verbose=0,
                          return_dict=True)["loss"]

    def cross_entropy(logits, labels):
        logits = np.asarray(logits, np.float64)
        log_z = np.log(np.exp(logits).sum(-1))
        return float(np.mean(log_z - logits[np.arange(len(labels)), labels]))

    expected = (cross_entropy(outputs["start_logits"], starts)
                + cross_entropy(outputs["end_logits"], ends)) / 2
    assert loss == pytest.approx(expected, rel=1e-5)
