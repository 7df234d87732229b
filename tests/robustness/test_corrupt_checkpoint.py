"""Training checkpoints that do not read: a truncated data file, a missing or damaged
index, a damaged state file. (A truncated TF1 --init_checkpoint: test_bad_input.py.)

A training checkpoint that does not read is named in one warning and the newest one that
reads is restored instead; with `--deterministic` the run then ends with the same bytes as
an uninterrupted one. When none reads, the run stops with one line naming them and the
way out. The mechanism is tested on `TrainingCheckpoints` directly (on local disk and on
TensorFlow's in-memory `ram://` file system, the stand-in for object stores), the outcome
through both runners.
"""

import json
import logging
from pathlib import Path

import pytest

from tests.robustness.helpers import (TRACEBACK, assert_one_error_line, classifier_flags,
                                      snapshot, squad_flags, write_mrpc_dir)
from tests.runner_utils import run_subprocess

DETERMINISTIC = ["--deterministic", "--seed=7"]
DATA = ".data-00000-of-00001"


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


# ---------------------------------------------------------------- TrainingCheckpoints

class Saved:
    """A tiny task model with checkpoints 1, 2 and 3 in `root`/checkpoints; the first
    trainable weight holds the step number, so a restore shows which one it read."""

    def __init__(self, tiny_config, root: str):
        import tf_keras as keras

        from adapter_bert.adapters.tuning import trained_weights
        from adapter_bert.model.checkpoints import build_model
        from adapter_bert.model.config import AdapterConfig
        from adapter_bert.adapters.task_models import ModelRecipe
        from adapter_bert.training.loop import TrainingCheckpoints
        self.root = root
        self.model = ModelRecipe("classifier", 2, AdapterConfig(size=4)).new_model(tiny_config)
        build_model(self.model)
        self.optimizer = keras.optimizers.Adam()
        self.marker = trained_weights(self.model)[0]
        checkpoints = TrainingCheckpoints(self.model, self.optimizer, root)
        for step in (1, 2, 3):
            self.marker.assign(self.marker * 0 + step)
            checkpoints.save(step)

    def restore(self, training: bool = True):
        """Restores into the model (marker reset first); returns (path, marker value)."""
        from adapter_bert.training.loop import TrainingCheckpoints
        self.marker.assign(self.marker * 0)
        checkpoints = TrainingCheckpoints(self.model, self.optimizer if training else None,
                                          self.root)
        path = checkpoints.restore_latest(expect_partial=not training)
        return path, float(self.marker.numpy().flat[0])


@pytest.fixture
def saved(tiny_config, tmp_path):
    return Saved(tiny_config, str(tmp_path / "out"))


def prefix(saved: Saved, step: int) -> Path:
    return Path(saved.root) / "checkpoints" / f"ckpt-{step}"


def listed(saved: Saved):
    state = (Path(saved.root) / "checkpoints" / "checkpoint").read_text()
    return [line.split('"')[1] for line in state.splitlines()
            if line.startswith(("model_checkpoint_path", "all_model_checkpoint_paths"))]


@pytest.mark.parametrize("damage, reason", [
    (lambda p: truncate(Path(str(p) + DATA)), "data file truncated, shorter than its index says"),
    (lambda p: Path(str(p) + ".index").unlink(), "index file missing"),
    (lambda p: truncate(Path(str(p) + ".index"), 0.3), "index file damaged"),
    (lambda p: Path(str(p) + DATA).unlink(), "data file missing"),
], ids=["truncated-data", "missing-index", "damaged-index", "missing-data"])
def test_an_unreadable_newest_checkpoint_is_named_and_the_one_before_restored(
        saved, damage, reason, caplog):
    damage(prefix(saved, 3))
    with caplog.at_level(logging.WARNING):
        path, marker = saved.restore()
    assert (path, marker) == (str(prefix(saved, 2)), 2.0)
    assert warnings_of(caplog) == [f"Checkpoint {prefix(saved, 3)} ({reason}) cannot be read: "
                                   f"restored {prefix(saved, 2)} instead"]
    # The state file now lists the restored checkpoint as the latest.
    assert listed(saved) == ["ckpt-2", "ckpt-1", "ckpt-2"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert saved.restore() == (str(prefix(saved, 2)), 2.0)
    assert warnings_of(caplog) == []  # named once, not at every later restore


def test_two_unreadable_checkpoints_are_named_in_one_warning(saved, caplog):
    truncate(Path(str(prefix(saved, 3)) + DATA))
    Path(str(prefix(saved, 2)) + ".index").unlink()
    with caplog.at_level(logging.WARNING):
        assert saved.restore() == (str(prefix(saved, 1)), 1.0)
    assert warnings_of(caplog) == [
        f"Checkpoint {prefix(saved, 3)} (data file truncated, shorter than its index says), "
        f"{prefix(saved, 2)} (index file missing) cannot be read: restored {prefix(saved, 1)} "
        f"instead"]


def test_an_evaluation_restores_the_older_checkpoint_and_leaves_the_state_file(saved, caplog):
    truncate(Path(str(prefix(saved, 3)) + DATA))
    state = (Path(saved.root) / "checkpoints" / "checkpoint").read_bytes()
    with caplog.at_level(logging.WARNING):
        assert saved.restore(training=False) == (str(prefix(saved, 2)), 2.0)
    assert len(warnings_of(caplog)) == 1
    assert (Path(saved.root) / "checkpoints" / "checkpoint").read_bytes() == state


@pytest.mark.parametrize("state", ["garbage {{", None], ids=["damaged", "missing"])
def test_a_damaged_or_missing_state_file_falls_back_to_the_checkpoint_files(
        saved, state, caplog):
    path = Path(saved.root) / "checkpoints" / "checkpoint"
    if state is None:
        path.unlink()
    else:
        path.write_text(state)
    with caplog.at_level(logging.WARNING):
        assert saved.restore() == (str(prefix(saved, 3)), 3.0)
    what = "is missing" if state is None else "cannot be read"
    assert warnings_of(caplog) == [f"{path} {what}: using the checkpoint files beside it"]
    assert listed(saved) == ["ckpt-3", "ckpt-1", "ckpt-2", "ckpt-3"]


def test_no_readable_checkpoint_is_one_error_naming_them_and_the_way_out(saved):
    from adapter_bert.errors import CheckpointError
    for step in (1, 2, 3):
        truncate(Path(str(prefix(saved, step)) + DATA))
    with pytest.raises(CheckpointError) as error:
        saved.restore()
    truncated = "data file truncated, shorter than its index says"
    assert str(error.value) == (
        f"no checkpoint in {Path(saved.root) / 'checkpoints'} can be read (ckpt-3: {truncated}; "
        f"ckpt-2: {truncated}; ckpt-1: {truncated}): pass --overwrite_output_dir (with "
        f"--do_train) to delete them and train anew, or use a new --output_dir")


def test_checkpoints_on_a_remote_file_system_fall_back_and_a_partial_save_is_never_latest(
        tiny_config, caplog):
    """ram:// (TensorFlow's in-memory file system) stands in for gs://. A save cut off
    before TensorFlow listed it (its files in ckpt-4_temp/, a data file without an index)
    is never restored; a truncated listed checkpoint falls back to the one before."""
    import tensorflow as tf
    root = "ram://corrupt_remote/out"
    saved = Saved(tiny_config, root)
    directory = f"{root}/checkpoints"
    with tf.io.gfile.GFile(f"{directory}/ckpt-4_temp/part-00000-of-00001{DATA}", "wb") as f:
        f.write(b"half a checkpoint")
    with tf.io.gfile.GFile(f"{directory}/ckpt-4{DATA}", "wb") as f:
        f.write(b"half a checkpoint")
    with tf.io.gfile.GFile(f"{directory}/ckpt-3{DATA}", "rb") as f:
        data = f.read()
    tf.io.gfile.remove(f"{directory}/ckpt-3{DATA}")  # ram:// appends to an existing file
    with tf.io.gfile.GFile(f"{directory}/ckpt-3{DATA}", "wb") as f:
        f.write(data[:len(data) // 2])
    from adapter_bert.training.loop import TrainingCheckpoints
    with caplog.at_level(logging.WARNING):
        assert saved.restore() == (f"{directory}/ckpt-2", 2.0)
    assert warnings_of(caplog) == [
        f"Checkpoint {directory}/ckpt-3 (data file truncated, shorter than its index says) "
        f"cannot be read: restored {directory}/ckpt-2 instead"]
    checkpoints = TrainingCheckpoints(saved.model, saved.optimizer, root)
    assert checkpoints.latest_step() == 2
    checkpoints.save(4)   # the next save of step 4 replaces the stray data file
    assert saved.restore() == (f"{directory}/ckpt-4", 2.0)


def test_what_a_save_cut_off_left_is_removed_before_training(saved):
    partial = prefix(saved, 4).parent / "ckpt-4_temp"
    partial.mkdir()
    (partial / f"part-00000-of-00001{DATA}").write_bytes(b"half a checkpoint")
    from adapter_bert.training.loop import TrainingCheckpoints
    checkpoints = TrainingCheckpoints(saved.model, saved.optimizer, saved.root)
    assert checkpoints.remove_partial_saves() == [str(partial)]
    assert not partial.exists()
    assert sorted(p.name for p in partial.parent.iterdir()) == [
        "checkpoint", *(f"ckpt-{n}{ext}" for n in (1, 2, 3) for ext in (DATA, ".index"))]


# -------------------------------------------------------------------- through the runners

def newest_checkpoint(out: Path) -> str:
    return max((p.name[:-len(".index")] for p in (out / "checkpoints").glob("ckpt-*.index")),
               key=lambda name: int(name[len("ckpt-"):]))


def run_twice_truncating_the_newest(script: str, argv, out: Path, outputs):
    """Runs `argv` to the end, truncates the newest checkpoint's data file and runs the
    same command again: one warning naming it, then the same output bytes."""
    first = run_subprocess(script, argv)
    assert first.returncode == 0, first.stderr[-3000:]
    reference = {name: (out / name).read_bytes() for name in outputs}
    newest = newest_checkpoint(out)
    truncate(out / "checkpoints" / f"{newest}{DATA}")
    again = run_subprocess(script, argv)
    assert again.returncode == 0, again.stderr[-3000:]
    warned = [line for line in again.stderr.splitlines() if "cannot be read" in line]
    assert len(warned) == 1, again.stderr[-3000:]
    assert f"checkpoints/{newest} (data file truncated, shorter than its index says) cannot " \
           f"be read: restored" in warned[0]
    assert TRACEBACK not in again.stderr
    assert {name: (out / name).read_bytes() for name in outputs} == reference
    return again


@pytest.mark.slow
def test_classifier_resumes_past_a_truncated_newest_checkpoint(backbone, mrpc_lines, tmp_path):
    data = write_mrpc_dir(tmp_path, mrpc_lines)
    out = tmp_path / "out"
    argv = ["--do_train", "--do_eval", "--do_predict", *DETERMINISTIC,
            *classifier_flags(backbone, out, data)]
    again = run_twice_truncating_the_newest(
        "run_classifier.py", argv, out, ("adapter/adapter_model.safetensors", "eval_results.txt",
                                         "test_results.tsv"))
    assert "steps 5..6 of 6" in again.stderr   # checkpoint 4 restored, steps 5 and 6 again

    # Every checkpoint truncated: one line naming them and the way out; nothing changes.
    for path in (out / "checkpoints").glob(f"ckpt-*{DATA}"):
        truncate(path)
    before = snapshot(out)
    failed = run_subprocess("run_classifier.py", argv)
    assert failed.returncode == 1
    assert_one_error_line(
        failed.stderr, "run_classifier.py",
        r"no checkpoint in .*/checkpoints can be read \(ckpt-6: data file truncated, "
        r"shorter than its index says; ckpt-4: .*; ckpt-2: .*\): pass --overwrite_output_dir "
        r"\(with --do_train\) to delete them and train anew, or use a new --output_dir$")
    assert snapshot(out) == before


@pytest.mark.slow
def test_squad_resumes_past_a_truncated_newest_checkpoint(backbone, squad_slice, tmp_path):
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(squad_slice))
    out = tmp_path / "out"
    argv = ["--do_train", "--do_predict", f"--train_file={path}", f"--predict_file={path}",
            *DETERMINISTIC, *squad_flags(backbone, out)]
    again = run_twice_truncating_the_newest(
        "run_squad.py", argv, out, ("adapter/adapter_model.safetensors", "predictions.json",
                                    "nbest_predictions.json"))
    assert "Restored" in again.stderr and "Training already complete" not in again.stderr
