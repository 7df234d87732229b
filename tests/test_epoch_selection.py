"""--eval_every_epoch: every epoch is scored once, the best one's weights are the run's,
and a run killed mid-training resumes with the best so far kept."""

import json

import numpy as np
import pytest

from adapter_bert.adapters.files import read_adapter_weights
from adapter_bert.runs.epoch_selection import epoch_boundaries, is_better
from tests.robustness.helpers import assert_one_error_line
from tests.runner_utils import flag_list, read_results, run_in_process, run_killable

WORDS = {"negative": "awful late rude", "neutral": "flight at noon",
         "positive": "great kind crew"}


def write_moods(path, count, offset=0):
    rows = ["text,label"]
    for i in range(offset, offset + count):
        mood = sorted(WORDS)[i % 3]
        rows.append(f"{WORDS[mood]} {'very ' * (i % 5)}{i},{mood}")
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("moods")
    return write_moods(folder / "train.csv", 64), write_moods(folder / "dev.csv", 30, 500)


def flags_for(backbone, files, out, **overrides):
    train, dev = files
    values = {"init_checkpoint": backbone / "bert_model.ckpt", "output_dir": out,
              "train_file": train, "dev_file": dev, "max_seq_length": 32, "adapter_size": 8,
              "learning_rate": 3e-3, "train_batch_size": 16, "eval_batch_size": 64,
              "num_train_epochs": 4, "save_checkpoints_steps": 4}
    return [*flag_list(values, overrides), "--do_train", "--do_eval", "--eval_every_epoch"]


@pytest.fixture(scope="module")
def whole_run(backbone, files, tmp_path_factory):
    out = tmp_path_factory.mktemp("whole") / "out"
    code, _ = run_in_process("run_classifier", flags_for(backbone, files, out))
    assert code == 0
    return out


# The tests reading the module's one run (`whole_run`) share a worker (make test's --dist
# loadgroup), which trains it once.
@pytest.mark.slow
@pytest.mark.xdist_group("test_epoch_selection_whole_run")
def test_every_epoch_is_scored_and_the_best_is_kept(whole_run):
    state = json.loads((whole_run / "epoch_selection.json").read_text())
    assert state["metric"] == "accuracy"
    assert [(e["epoch"], e["step"]) for e in state["epochs"]] == [(1, 4), (2, 8), (3, 12),
                                                                   (4, 16)]
    values = [e["value"] for e in state["epochs"]]
    best = int(np.argmax(values))  # the first of equal scores is kept
    assert state["kept"] == state["epochs"][best]
    results = read_results(whole_run / "eval_results.txt")
    assert int(results["kept_epoch"]) == best + 1
    assert float(results["eval_accuracy"]) == pytest.approx(values[best])
    kept = read_adapter_weights(str(whole_run / "best_epoch"))
    final = read_adapter_weights(str(whole_run / "adapter"))
    assert kept.keys() == final.keys()
    for name in kept:
        np.testing.assert_array_equal(kept[name], final[name])


@pytest.mark.slow
@pytest.mark.xdist_group("test_epoch_selection_whole_run")
def test_a_killed_run_resumes_with_the_best_so_far(whole_run, backbone, files, tmp_path):
    out = tmp_path / "out"
    argv = flags_for(backbone, files, out)
    killed = run_killable("run_classifier.py", argv, KILL_AFTER_CHECKPOINT=8)
    assert killed.returncode != 0
    assert [e["epoch"] for e in json.loads((out / "epoch_selection.json").read_text())
            ["epochs"]] == [1]
    code, _ = run_in_process("run_classifier", argv)
    assert code == 0
    # Epoch 2 ended at the checkpoint the run resumed from: scored from it, as the
    # uninterrupted run scored it; every epoch once, the same choice.
    assert json.loads((out / "epoch_selection.json").read_text()) == \
        json.loads((whole_run / "epoch_selection.json").read_text())
    assert read_results(out / "eval_results.txt")["kept_epoch"] == \
        read_results(whole_run / "eval_results.txt")["kept_epoch"]


@pytest.mark.slow
def test_select_metric_picks_another_score_and_lower_loss_wins(backbone, files, tmp_path):
    out = tmp_path / "out"
    code, _ = run_in_process("run_classifier", flags_for(
        backbone, files, out, select_metric="loss", num_train_epochs=2))
    assert code == 0
    state = json.loads((out / "epoch_selection.json").read_text())
    assert state["metric"] == "loss"
    assert state["kept"]["value"] == min(e["value"] for e in state["epochs"])


@pytest.mark.parametrize("overrides, extra, message", [
    ({"select_metric": "f2"}, [], r"--select_metric=f2: .* is scored by accuracy, macro_f1, "
                                  r"mcc, precision, recall, f1, loss"),
    ({}, ["--nodo_eval"], r"--eval_every_epoch evaluates while training: it needs "
                          r"--do_train and --do_eval"),
])
def test_bad_selection_flags_are_one_line(backbone, files, tmp_path, capfd, overrides, extra,
                                          message):
    code, _ = run_in_process("run_classifier",
                             [*flags_for(backbone, files, tmp_path / "out", **overrides),
                              *extra])
    assert code == 1
    assert_one_error_line(capfd.readouterr().err, "run_classifier.py", "error: " + message)
    assert not (tmp_path / "out").exists()


def test_epoch_ends_are_googles_step_counts():
    assert epoch_boundaries(3668, 32, 3.0, 343) == [114, 229, 343]
    assert epoch_boundaries(100, 32, 2.5, 7) == [3, 6, 7]
    assert is_better("mcc", 0.3, 0.2) and not is_better("mcc", 0.2, 0.2)
    assert is_better("loss", 0.3, 0.4) and is_better("mse", 1.0, None)
