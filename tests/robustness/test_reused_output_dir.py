"""A reused --output_dir: a training run records its training flags in
run_flags.json; a rerun with other training flags stops before loading anything, naming
them; the same flags resume; --overwrite_output_dir deletes what a run wrote there (never
the user's files) and trains anew; eval-only runs take any eval flags; a
folder without a record keeps resuming.
"""

import json
import re
from pathlib import Path

import pytest

from tests.robustness.helpers import (assert_one_error_line, classifier_flags, fill_output_dir,
                                      snapshot, squad_flags, write_mrpc_dir)
from tests.runner_utils import run_in_process, run_subprocess

RESTORE_FLOOD = "Value in checkpoint could not be found"


@pytest.fixture(scope="module")
def trained(tmp_path_factory, backbone, mrpc_lines):
    """A finished MRPC training run (6 steps, adapter size 8, rate 1e-3) with eval results."""
    root = tmp_path_factory.mktemp("reused")
    data = write_mrpc_dir(root / "glue", mrpc_lines)
    out = root / "out"
    code, _ = run_in_process("run_classifier", ["--do_train", "--do_eval",
                                                *classifier_flags(backbone, out, data)])
    assert code == 0
    return out, data


def _copy(source: Path, target: Path) -> Path:
    import shutil
    shutil.copytree(source, target)
    return target


def _refuse_loading(monkeypatch):
    """Makes any backbone load fail loudly: a refused run must stop before it."""
    from adapter_bert.runners import base

    def boom(*args, **kwargs):
        raise AssertionError("the backbone was loaded")
    monkeypatch.setattr(base, "prepare_backbone", boom)


@pytest.mark.slow
def test_training_records_its_flags(trained, backbone):
    out, data = trained
    record = json.loads((out / "run_flags.json").read_text())["flags"]
    assert record["runner"] == "classifier" and record["task_name"] == "MRPC"
    assert record["learning_rate"] == 0.001 and record["adapter_size"] == 8
    assert record["init_checkpoint"] == str(backbone / "bert_model.ckpt")
    assert record["data_dir"] == str(data)
    # Speed and eval-only flags are not part of it.
    for name in ("eval_batch_size", "predict_batch_size", "do_eval", "save_checkpoints_steps",
                 "jit_compile", "export_dir", "output_dir"):
        assert name not in record


@pytest.mark.slow
@pytest.mark.parametrize("changes, named", [
    ({"learning_rate": 2e-3}, "--learning_rate 0.001 -> 0.002"),
    ({"adapter_size": 4, "seed": 7}, "--adapter_size 8 -> 4; --seed 42 -> 7"),  # table order
])
def test_other_training_flags_stop_before_loading(changes, named, trained, backbone, tmp_path,
                                                  capfd, monkeypatch):
    out = _copy(trained[0], tmp_path / "out")
    before = snapshot(out)
    _refuse_loading(monkeypatch)
    code, _ = run_in_process("run_classifier", ["--do_train", "--do_eval", *classifier_flags(
        backbone, out, trained[1], **changes)])
    assert code == 1
    line = assert_one_error_line(capfd.readouterr().err, "run_classifier.py", "")
    assert line == (f"run_classifier.py: error: --output_dir={out} holds a run trained with "
                    f"other flags ({named}): use a new --output_dir, or --overwrite_output_dir "
                    f"to delete its outputs and train anew")
    assert snapshot(out) == before  # eval_results.txt, checkpoints, record: untouched


def test_same_flags_resume_without_a_restore_flood(trained, backbone, tmp_path, capfd, caplog):
    out = _copy(trained[0], tmp_path / "out")
    results = (out / "eval_results.txt").read_text()
    capfd.readouterr()
    code, _ = run_in_process("run_classifier", ["--do_train", "--do_eval", "--verbosity=0",
                                                *classifier_flags(backbone, out, trained[1])])
    import gc
    gc.collect()  # TensorFlow warns of unmatched values when the restore status is deleted
    err = capfd.readouterr().err + caplog.text  # absl and TensorFlow log lines: caplog
    assert code == 0, err[-3000:]
    assert "Training already complete (6 of 6 steps)" in err
    assert RESTORE_FLOOD not in err
    assert (out / "eval_results.txt").read_text() == results


def test_eval_only_run_takes_any_eval_and_training_flags(trained, backbone, tmp_path, capfd,
                                                         caplog):
    out = _copy(trained[0], tmp_path / "out")
    record = (out / "run_flags.json").read_bytes()
    capfd.readouterr()
    code, _ = run_in_process("run_classifier", ["--do_eval", "--verbosity=0", *classifier_flags(
        backbone, out, trained[1], eval_batch_size=5, learning_rate=3e-3)])
    err = capfd.readouterr().err + caplog.text  # absl and TensorFlow log lines: caplog
    assert code == 0, err[-3000:]
    assert RESTORE_FLOOD not in err
    assert (out / "run_flags.json").read_bytes() == record
    assert "global_step = 6" in (out / "eval_results.txt").read_text()


def test_folder_without_a_record_resumes_with_one_line(trained, backbone, tmp_path, capfd,
                                                       caplog):
    out = _copy(trained[0], tmp_path / "out")
    (out / "run_flags.json").unlink()
    capfd.readouterr()
    code, _ = run_in_process("run_classifier", ["--do_train", "--verbosity=0", *classifier_flags(
        backbone, out, trained[1], learning_rate=2e-3)])
    err = capfd.readouterr().err + caplog.text  # absl and TensorFlow log lines: caplog
    assert code == 0, err[-3000:]
    assert len(re.findall(r"holds checkpoints but no run_flags\.json \(written by an earlier "
                          r"version\): the training flags could not be compared; resuming",
                          err)) == 1
    assert "Training already complete (6 of 6 steps)" in err
    # The folder now records the flags it resumed with.
    assert json.loads((out / "run_flags.json").read_text())["flags"]["learning_rate"] == 0.002


@pytest.mark.slow
def test_overwrite_output_dir_trains_anew(trained, backbone, tmp_path, capfd):
    out = _copy(trained[0], tmp_path / "out")
    (out / "feature_cache").mkdir(exist_ok=True)
    (out / "feature_cache" / "kept.txt").write_text("cache")
    # A file of the user's anywhere inside stops it, naming the file; nothing is deleted.
    (out / "adapter" / "notes.txt").write_text("the user's, not the run's")
    before = snapshot(out)
    argv = ["--do_train", "--do_eval", "--overwrite_output_dir",
            *classifier_flags(backbone, out, trained[1], adapter_size=4, num_train_epochs=0.5)]
    capfd.readouterr()
    code, _ = run_in_process("run_classifier", argv)
    assert code == 1
    assert_one_error_line(capfd.readouterr().err, "run_classifier.py",
                          r"error: --overwrite_output_dir: --output_dir=.* holds "
                          r"adapter/notes\.txt that adapter_bert did not write; nothing was "
                          r"deleted")
    assert snapshot(out) == before
    (out / "adapter" / "notes.txt").unlink()
    old_results = (out / "eval_results.txt").read_text()
    code, _ = run_in_process("run_classifier", argv)
    assert code == 0, capfd.readouterr().err[-3000:]
    assert json.loads((out / "run_flags.json").read_text())["flags"]["adapter_size"] == 4
    assert "global_step = 3" in (out / "eval_results.txt").read_text() != old_results
    assert (out / "feature_cache" / "kept.txt").read_text() == "cache"
    assert sorted(p.name for p in (out / "checkpoints").glob("ckpt-*.index")) == [
        "ckpt-2.index", "ckpt-3.index"]


def test_overwrite_refuses_a_folder_that_is_not_a_run(backbone, mrpc_lines, tmp_path, capfd,
                                                      monkeypatch):
    data = write_mrpc_dir(tmp_path / "glue", mrpc_lines)
    home = tmp_path / "home"
    before = fill_output_dir(home)
    _refuse_loading(monkeypatch)
    code, _ = run_in_process("run_classifier", ["--do_train", "--overwrite_output_dir",
                                                *classifier_flags(backbone, home, data)])
    assert code == 1
    line = assert_one_error_line(capfd.readouterr().err, "run_classifier.py", "")
    assert line.startswith(f"run_classifier.py: error: --overwrite_output_dir: "
                           f"--output_dir={home} holds ")
    assert line.endswith("that adapter_bert did not write; nothing was deleted: move them "
                         "away or name a new folder")
    assert snapshot(home) == before


def test_overwrite_needs_do_train(trained, backbone, tmp_path, capfd):
    out = _copy(trained[0], tmp_path / "out")
    before = snapshot(out)
    code, _ = run_in_process("run_classifier", ["--do_eval", "--overwrite_output_dir",
                                                *classifier_flags(backbone, out, trained[1])])
    assert code == 1
    assert_one_error_line(capfd.readouterr().err, "run_classifier.py",
                          r"error: --overwrite_output_dir only applies with --do_train")
    assert snapshot(out) == before


@pytest.mark.slow
def test_squad_rerun_with_another_rate_is_refused(backbone, squad_slice, tmp_path):
    train = tmp_path / "train.json"
    train.write_text(json.dumps(squad_slice))
    out = tmp_path / "out"
    first = run_subprocess("run_squad.py", ["--do_train", *squad_flags(backbone, out,
                                                                        train_file=train)])
    assert first.returncode == 0, first.stderr[-3000:]
    assert json.loads((out / "run_flags.json").read_text())["flags"]["runner"] == "span"
    before = snapshot(out)
    again = run_subprocess("run_squad.py", ["--do_train", *squad_flags(
        backbone, out, train_file=train, learning_rate=5e-4, doc_stride=8)])
    assert again.returncode == 1
    line = assert_one_error_line(again.stderr, "run_squad.py", "")
    assert line == (f"run_squad.py: error: --output_dir={out} holds a run trained with other "
                    f"flags (--doc_stride 16 -> 8; --learning_rate 0.001 -> 0.0005): use a new "
                    f"--output_dir, or --overwrite_output_dir to delete its outputs and train "
                    f"anew")
    assert "Backbone:" not in again.stderr
    assert snapshot(out) == before
    same = run_subprocess("run_squad.py", ["--do_train", *squad_flags(backbone, out,
                                                                       train_file=train)])
    assert same.returncode == 0, same.stderr[-3000:]
    assert RESTORE_FLOOD not in same.stderr


def test_differing_flags_lists_only_flags_both_records_hold():
    from adapter_bert.runs.run_record import differing_flags
    old = {"runner": "classifier", "learning_rate": None, "adapter_leave_out": []}
    new = {"runner": "span", "learning_rate": 1e-3, "adapter_leave_out": ["0", "1"],
           "lora_alpha": 4.0}
    assert differing_flags(old, new) == ["the runner classifier -> span",
                                         "--learning_rate unset -> 0.001",
                                         "--adapter_leave_out '' -> 0,1"]
    assert differing_flags(old, dict(old)) == []


def test_a_resume_after_the_training_file_gained_a_label_stops_before_restoring(
        backbone, tmp_path, capfd, monkeypatch):
    """The record holds the labels the data implied: a rerun of the same command on a
    training file with a new label stops in one line, before any checkpoint is read."""
    from tests.runner_utils import flag_list
    from tests.test_text_classifier import write_csv
    rows = [(f"{word} {i}", word) for i in range(8) for word in ("calm", "happy", "sad")]
    data = write_csv(tmp_path / "train.csv", rows)
    argv = [f"--train_file={data}", "--do_train", *flag_list(
        {"init_checkpoint": f"{backbone}/bert_model.ckpt", "output_dir": tmp_path / "out",
         "max_seq_length": 16, "train_batch_size": 8, "learning_rate": 1e-3,
         "adapter_size": 8, "num_train_epochs": 1}, {})]
    assert run_in_process("run_classifier", argv)[0] == 0
    record = json.loads((tmp_path / "out" / "run_flags.json").read_text())
    assert record["data"] == {"labels": ["calm", "happy", "sad"],
                              "task_type": "classification", "target": "label"}
    before = snapshot(tmp_path / "out")
    write_csv(data, rows + [("cross words", "angry")] * 3)
    from adapter_bert.runners import base
    # The lock, the model and every checkpoint read come after prepare_run.
    monkeypatch.setattr(base, "prepare_run", lambda *a, **k: pytest.fail("went on to the run"))
    capfd.readouterr()
    assert run_in_process("run_classifier", argv)[0] == 1
    assert_one_error_line(capfd.readouterr().err, "run_classifier.py", re.escape(
        f"--output_dir={tmp_path / 'out'} holds a run trained on data with other labels "
        f"calm,happy,sad -> angry,calm,happy,sad: use a new --output_dir, or "
        f"--overwrite_output_dir"))
    assert snapshot(tmp_path / "out") == before


def test_the_data_record_is_compared_only_where_both_hold_a_value(tmp_path):
    from types import SimpleNamespace
    from adapter_bert.runs import run_record
    from adapter_bert.command_line.flag_checks import FlagError
    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "checkpoint").write_text("x")
    values = SimpleNamespace(output_dir=str(out), do_train=True, overwrite_output_dir=False)
    (out / "run_flags.json").write_text(json.dumps(
        {"flags": {}, "data": {"labels": ["a", "b"], "task_type": "classification"}}))
    run_record.check_same_data(values, {"labels": ["a", "b"], "task_type": "classification",
                                        "target": "y"})
    with pytest.raises(FlagError, match=r"other task type classification -> regression"):
        run_record.check_same_data(values, {"labels": [], "task_type": "regression"})
    values.overwrite_output_dir = True  # starts anew: nothing to compare
    run_record.check_same_data(values, {"labels": [], "task_type": "regression"})
    (out / "run_flags.json").write_text(json.dumps({"flags": {}}))  # an earlier record
    values.overwrite_output_dir = False
    run_record.check_same_data(values, {"labels": ["z"]})
