"""Divergence, end to end through both runners (real subprocesses, a tiny backbone).

Two ways a run diverges, each forced with a learning rate no run would use:

- the loss becomes NaN (1e36: step 1's update leaves huge but finite weights, step 2's
  loss overflows): the run stops on that step and names the last checkpoint, whose
  weights are those of step 1, finite;
- the weights become NaN or infinite while the loss that step was computed with is still
  finite (1e39, beyond float32: step 1's update writes Inf). A checkpoint due at that step
  would hold them and be named "good"; instead none is written.

Either way: one error line, exit 1, no traceback, no checkpoint with a non-finite weight,
no adapter files, no results, no predictions and no export from the diverged weights, and
the outputs of an earlier run are left as they were. A second run of the same command
resumes from the last good checkpoint, diverges again and leaves that checkpoint's bytes
as they were.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from tests.robustness.helpers import (assert_one_error_line, classifier_flags, fill_output_dir,
                                      snapshot, squad_flags, write_mrpc_dir)
from tests.runner_utils import run_subprocess

STOPPED = r"; stopped\. Last good checkpoint: {}\. Lower --learning_rate or check the data\.$"


def runner_argv(runner: str, backbone: Path, out: Path, tmp: Path, mrpc_lines, squad_slice,
                learning_rate: str):
    """Train, then evaluate, predict (and, for the classifier, export): every later phase
    would write something, so a test sees whether any ran."""
    rates = dict(learning_rate=learning_rate, warmup_proportion=0, save_checkpoints_steps=1)
    if runner == "run_classifier":
        data = write_mrpc_dir(tmp, mrpc_lines)
        return ["--do_train", "--do_eval", "--do_predict", f"--export_dir={tmp / 'export'}",
                *classifier_flags(backbone, out, data, **rates)]
    squad = tmp / "squad.json"
    squad.write_text(json.dumps(squad_slice))
    return ["--do_train", "--do_predict", *squad_flags(backbone, out, train_file=squad,
                                                         predict_file=squad, **rates)]


def checkpoint_steps(out: Path):
    return sorted(int(p.name[len("ckpt-"):-len(".index")])
                  for p in (out / "checkpoints").glob("ckpt-*.index"))


def non_finite_weights(out: Path):
    """Names of the float tensors holding NaN or Inf, over every checkpoint in `out`."""
    import tensorflow as tf
    bad = []
    for step in checkpoint_steps(out):
        reader = tf.train.load_checkpoint(str(out / "checkpoints" / f"ckpt-{step}"))
        dtypes = reader.get_variable_to_dtype_map()
        bad += [f"ckpt-{step}:{name}" for name, dtype in dtypes.items()
                if dtype.is_floating and not np.all(np.isfinite(reader.get_tensor(name)))]
    return bad


def assert_nothing_from_diverged_weights(out: Path, tmp: Path, before: dict):
    assert not (out / "adapter").exists()
    assert not (out / "predictions.json").exists()
    assert not (tmp / "export").exists()
    # The earlier run's eval_results.txt, test_results.tsv, ... are unchanged.
    assert {k: v for k, v in snapshot(out).items() if k in before} == before


def run(runner, argv):
    result = run_subprocess(f"{runner}.py", argv)
    assert result.returncode == 1, result.stderr[-3000:]
    return result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["run_classifier", "run_squad"])
def test_weights_that_overflow_are_never_checkpointed(runner, backbone, mrpc_lines,
                                                      squad_slice, tmp_path):
    out = tmp_path / "out"
    before = fill_output_dir(out)
    argv = runner_argv(runner, backbone, out, tmp_path, mrpc_lines, squad_slice, "1e39")
    assert_one_error_line(run(runner, argv), f"{runner}.py",
                          r"error: the trained weights became NaN or infinite at step 1"
                          + STOPPED.format("none"))
    assert checkpoint_steps(out) == []  # step 1's checkpoint was due, and not written
    assert_nothing_from_diverged_weights(out, tmp_path, before)


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["run_classifier", "run_squad"])
def test_a_nan_loss_keeps_the_last_good_checkpoint_as_it_was(runner, backbone, mrpc_lines,
                                                             squad_slice, tmp_path):
    out = tmp_path / "out"
    before = fill_output_dir(out)
    argv = runner_argv(runner, backbone, out, tmp_path, mrpc_lines, squad_slice, "1e36")
    pattern = (r"error: the training loss became NaN near step 2"
               + STOPPED.format(r"\S*/out/checkpoints/ckpt-1"))
    assert_one_error_line(run(runner, argv), f"{runner}.py", pattern)
    assert checkpoint_steps(out) == [1]
    assert non_finite_weights(out) == []
    checkpoints = snapshot(out / "checkpoints")
    assert_nothing_from_diverged_weights(out, tmp_path, before)

    # The same command again: it restores step 1, diverges at step 2 again, and writes
    # nothing over the good checkpoint.
    assert_one_error_line(run(runner, argv), f"{runner}.py", pattern)
    assert snapshot(out / "checkpoints") == checkpoints
    assert_nothing_from_diverged_weights(out, tmp_path, before)
