"""Preemption: SIGTERM and SIGINT stop a run cleanly, and the same command resumes it.

The signals are real: `tests/killer.py` makes the run send one to itself at a chosen point
(right after a training step, or after the first batch of a prediction pass), and the
run's own handler (`adapter_bert.training.preemption`) takes it from there. Training
finishes the step in flight, saves a checkpoint at that step and exits with 128 + the
signal number and one line "...; preempted, run again ..."; an evaluation or prediction
stops without writing its results. With `--deterministic`, the run completed afterwards
ends with the same bytes as an uninterrupted one (dropout on). Two workers that agree on
the step: tests/test_multiworker.py.
"""

import json
import os
import signal
from pathlib import Path

import pytest

from tests.robustness.helpers import (DETERMINISTIC, TRACEBACK, classifier_argv,
                                      squad_flags, write_mrpc_dir)
from tests.runner_utils import run_killable, run_subprocess

CLASSIFIER_OUTPUTS = ("adapter/adapter_model.safetensors", "adapter/adapter_config.json",
                      "eval_results.txt", "test_results.tsv")
SQUAD_OUTPUTS = ("adapter/adapter_model.safetensors", "predictions.json",
                 "nbest_predictions.json")
RESUME = "preempted, run again with the same command to resume"


def read_bytes(directory: Path, names):
    return {name: (directory / name).read_bytes() for name in names
            if (directory / name).exists()}


def checkpoint_steps(out: Path):
    return sorted(int(p.name[len("ckpt-"):-len(".index")])
                  for p in (out / "checkpoints").glob("ckpt-*.index"))


def preempted(script: str, argv, signum: int, **hooks) -> str:
    """Runs `script` under the hooks, sending `signum`; it must exit with 128 + signum,
    print exactly one "preempted" line and no traceback. Returns that line without the
    program name."""
    result = run_killable(script, argv, SIGNAL=signal.Signals(signum).name, **hooks)
    assert result.returncode == 128 + signum, (hooks, result.stderr[-3000:])
    lines = [line for line in result.stderr.splitlines() if RESUME in line]
    assert len(lines) == 1, result.stderr[-3000:]
    assert TRACEBACK not in result.stderr, result.stderr[-3000:]
    assert lines[0].startswith(f"{script}: "), lines[0]
    return lines[0][len(f"{script}: "):]


# ----------------------------------------------------------------------- the mechanism

def test_a_signal_outside_a_loop_stops_at_once_and_the_handlers_come_back():
    from adapter_bert.training import preemption
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(preemption.Preempted) as stopped:
        with preemption.handle_signals():
            os.kill(os.getpid(), signal.SIGTERM)
    assert stopped.value.exit_code == 143
    assert str(stopped.value) == ("SIGTERM: stopped; nothing was in progress that could be "
                                  f"saved; {RESUME}")
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_signal_in_a_loop_waits_for_the_check_and_a_second_one_stops_at_once():
    from adapter_bert.training import preemption
    with preemption.handle_signals():
        assert preemption.stop_requested() == (None, False)
        with pytest.raises(preemption.Preempted) as second:
            with preemption.deferred("training"):
                os.kill(os.getpid(), signal.SIGINT)   # noted, not raised
                assert preemption.stop_requested() == (signal.SIGINT, True)
                os.kill(os.getpid(), signal.SIGTERM)  # the second: raised at once
        assert second.value.exit_code == 143
        assert "a second signal: stopped at once" in str(second.value)


def test_a_signal_too_late_for_the_loops_last_check_stops_when_the_loop_ends():
    from adapter_bert.training import preemption
    with preemption.handle_signals():
        with pytest.raises(preemption.Preempted) as stopped:
            with preemption.deferred("predicting test", "stopped after predicting test"):
                os.kill(os.getpid(), signal.SIGINT)
        assert stopped.value.exit_code == 130
        assert str(stopped.value) == f"SIGINT: stopped after predicting test; {RESUME}"
    # Without handle_signals (a library caller, a notebook) nothing is handled.
    assert preemption.stop_requested() == (None, False)


# -------------------------------------------------------------------------- classifier

@pytest.fixture(scope="module")
def mrpc(mrpc_lines, tmp_path_factory):
    return write_mrpc_dir(tmp_path_factory.mktemp("preempt_mrpc"), mrpc_lines)


@pytest.fixture(scope="module")
def classifier_reference(backbone, mrpc, tmp_path_factory):
    out = tmp_path_factory.mktemp("preempt_reference") / "out"
    result = run_subprocess("run_classifier.py", classifier_argv(backbone, out, mrpc))
    assert result.returncode == 0, result.stderr[-3000:]
    return read_bytes(out, CLASSIFIER_OUTPUTS)


@pytest.mark.slow
def test_classifier_stops_on_signals_in_training_evaluation_and_prediction_and_resumes(
        classifier_reference, backbone, mrpc, tmp_path):
    out = tmp_path / "out"
    argv = classifier_argv(backbone, out, mrpc)
    saved = out / "checkpoints" / "ckpt-3"

    # SIGTERM right after step 3, between checkpoints 2 and 4: checkpoint 3 is saved.
    line = preempted("run_classifier.py", argv, signal.SIGTERM, SIGNAL_AT_STEP=3)
    assert line == f"SIGTERM: stopped at training step 3 of 6; checkpoint {saved} saved; {RESUME}"
    assert checkpoint_steps(out) == [2, 3]
    assert read_bytes(out, CLASSIFIER_OUTPUTS) == {}

    # The same command resumes at step 4; SIGINT (Ctrl-C) during the dev evaluation.
    line = preempted("run_classifier.py", argv, signal.SIGINT, SIGNAL_PREDICTING=1)
    assert line == f"SIGINT: stopped while evaluating dev, before writing its results; {RESUME}"
    assert checkpoint_steps(out) == [2, 3, 4, 6]
    assert not (out / "eval_results.txt").exists()

    # SIGTERM during the test prediction (one batch: the signal comes after the loop's
    # last check, so the run stops when the pass ends, before writing).
    line = preempted("run_classifier.py", argv, signal.SIGTERM, SIGNAL_PREDICTING=2)
    assert line == (f"SIGTERM: stopped after predicting test, before writing its results; "
                    f"{RESUME}")
    assert (out / "eval_results.txt").read_bytes() == classifier_reference["eval_results.txt"]
    assert not (out / "test_results.tsv").exists()

    finished = run_subprocess("run_classifier.py", argv)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "Training already complete (6 of 6 steps)" in finished.stderr
    assert read_bytes(out, CLASSIFIER_OUTPUTS) == classifier_reference


@pytest.mark.slow
def test_training_logs_one_line_when_it_saves_on_a_signal(backbone, mrpc, tmp_path):
    """A signal right after a periodic checkpoint: no second save of that step."""
    out = tmp_path / "out"
    result = run_killable("run_classifier.py", classifier_argv(backbone, out, mrpc),
                          SIGNAL_AT_STEP=2)
    assert result.returncode == 143, result.stderr[-3000:]
    saved = out / "checkpoints" / "ckpt-2"
    logged = [line for line in result.stderr.splitlines() if "SIGTERM" in line]
    assert len(logged) == 2, logged
    assert logged[0].endswith(f"SIGTERM: saved checkpoint {saved} at training step 2 of 6")
    assert logged[1] == (f"run_classifier.py: SIGTERM: stopped at training step 2 of 6; "
                         f"checkpoint {saved} saved; {RESUME}")
    assert checkpoint_steps(out) == [2]
    state = (out / "checkpoints" / "checkpoint").read_text()
    assert state.count("all_model_checkpoint_paths") == 1


# ------------------------------------------------------------------------------- SQuAD

@pytest.fixture(scope="module")
def squad_files(squad_slice, tmp_path_factory):
    root = tmp_path_factory.mktemp("preempt_squad")
    path = root / "squad.json"
    path.write_text(json.dumps(squad_slice))
    return path


def squad_argv(backbone, out, path):
    return ["--do_train", "--do_predict", f"--train_file={path}", f"--predict_file={path}",
            *DETERMINISTIC, *squad_flags(backbone, out, save_checkpoints_steps=3,
                                         num_train_epochs=2)]


@pytest.fixture(scope="module")
def squad_reference(backbone, squad_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("preempt_squad_reference") / "out"
    result = run_subprocess("run_squad.py", squad_argv(backbone, out, squad_files))
    assert result.returncode == 0, result.stderr[-3000:]
    steps = json.loads((out / "eval_results.json").read_text())["global_step"]
    assert steps >= 5, steps   # room for a signal between checkpoints 3 and 6
    return read_bytes(out, SQUAD_OUTPUTS), steps


@pytest.mark.slow
def test_squad_stops_on_signals_in_training_and_prediction_and_resumes(
        squad_reference, backbone, squad_files, tmp_path):
    reference, steps = squad_reference
    out = tmp_path / "out"
    argv = squad_argv(backbone, out, squad_files)
    saved = out / "checkpoints" / "ckpt-4"
    line = preempted("run_squad.py", argv, signal.SIGTERM, SIGNAL_AT_STEP=4)
    assert line == (f"SIGTERM: stopped at training step 4 of {steps}; checkpoint {saved} "
                    f"saved; {RESUME}")
    assert checkpoint_steps(out) == [3, 4]

    # 112 windows at batch 32: the pass stops after its second batch of four.
    line = preempted("run_squad.py", argv, signal.SIGTERM, SIGNAL_PREDICTING=1)
    assert line == f"SIGTERM: stopped while predicting, before writing its results; {RESUME}"
    assert read_bytes(out, SQUAD_OUTPUTS).keys() == {"adapter/adapter_model.safetensors"}

    finished = run_subprocess("run_squad.py", argv)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert read_bytes(out, SQUAD_OUTPUTS) == reference
