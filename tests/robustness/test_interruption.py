"""Interruption, end to end through the entry points: outputs are written atomically and a
kill mid-write never leaves half a file (resuming to bit-identical results, which also
shows that `--deterministic` runs repeat exactly, is tests/robustness/test_resume_anywhere.py).

Interruptions are real `kill -9`s, placed deterministically: `tests/killer.py` runs an
entry point with a hook that sends SIGKILL to its own process right after a given
checkpoint, or in the middle of writing a given output file.
"""

import json
import shutil
import signal
from pathlib import Path

import pytest

from tests.robustness.helpers import (classifier_flags, fill_output_dir, snapshot, squad_flags,
                                      write_mrpc_dir)
from tests.runner_utils import run_killable, run_subprocess


# ------------------------------------------------------------------------ interruption

def temporaries(directory: Path):
    return sorted(p.name for p in directory.rglob(".*.tmp"))


def outputs_of(directory: Path):
    """Result files of a run (not its checkpoints, logs or feature cache)."""
    return {str(p.relative_to(directory)) for p in directory.rglob("*")
            if p.is_file() and p.relative_to(directory).parts[0] not in
            ("checkpoints", "logs", "feature_cache") and not p.name.startswith(".")}


@pytest.fixture(scope="module")
def uninterrupted(backbone, mrpc_lines, tmp_path_factory):
    """One complete train + eval + predict run (6 steps), logging every atomic rename."""
    root = tmp_path_factory.mktemp("uninterrupted")
    data = write_mrpc_dir(root, mrpc_lines)
    out = root / "out"
    argv = ["--do_train", "--do_eval", "--do_predict",
            *classifier_flags(backbone, out, data)]
    log = root / "replaced.txt"
    result = run_killable("run_classifier.py", argv, REPLACED_LOG=log)
    assert result.returncode == 0, result.stderr[-3000:]
    return data, out, log


@pytest.mark.slow
def test_every_classifier_output_is_written_atomically(uninterrupted):
    _, out, log = uninterrupted
    replaced = {str(Path(p).relative_to(out)) for p in log.read_text().split()}
    written = outputs_of(out)
    assert {"eval_results.txt", "test_results.tsv", "adapter/adapter_config.json",
            "adapter/adapter_model.safetensors"} <= written
    assert written <= replaced, f"written without io_utils' atomic writers: {written - replaced}"
    assert not temporaries(out)


@pytest.mark.slow
def test_kill_while_writing_an_output_never_leaves_half_a_file(
        uninterrupted, backbone, tmp_path):
    """Killed mid-write, the previous file stays whole; the next run cleans up and completes."""
    data, reference, _ = uninterrupted
    out = tmp_path / "out"
    shutil.copytree(reference / "checkpoints", out / "checkpoints")  # training is complete
    before = fill_output_dir(out)
    argv = ["--do_eval", "--do_predict", *classifier_flags(backbone, out, data)]
    for target in ("eval_results.txt", "test_results.tsv"):
        killed = run_killable("run_classifier.py", argv, KILL_WRITING=target)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        assert (out / target).read_bytes() == before[target], target  # the old file, whole
        assert any(name.startswith(f".{target}.") for name in temporaries(out)), \
            "the kill did not land inside the write"
    again = run_subprocess("run_classifier.py", argv)
    assert again.returncode == 0, again.stderr[-3000:]
    assert not temporaries(out)  # the next run removed what the killed writes left
    for target in ("eval_results.txt", "test_results.tsv"):
        assert (out / target).read_text() == (reference / target).read_text(), target


@pytest.mark.slow
def test_squad_outputs_are_atomic_and_survive_a_kill(backbone, squad_slice, tmp_path):
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(squad_slice))
    out = tmp_path / "out"
    log = tmp_path / "replaced.txt"
    argv = ["--do_predict", f"--predict_file={path}", *squad_flags(backbone, out)]
    first = run_killable("run_squad.py", argv, REPLACED_LOG=log)
    assert first.returncode == 0, first.stderr[-3000:]
    written = outputs_of(out)
    assert {"predictions.json", "nbest_predictions.json", "eval_results.txt",
            "eval_results.json"} <= written
    replaced = {str(Path(p).relative_to(out)) for p in log.read_text().split()}
    assert written <= replaced, f"written without io_utils' atomic writers: {written - replaced}"
    complete = snapshot(out)
    killed = run_killable("run_squad.py", argv, KILL_WRITING="nbest_predictions.json")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert temporaries(out)
    after = snapshot(out)
    for name in ("predictions.json", "nbest_predictions.json", "eval_results.json"):
        json.loads(after[name])  # whole JSON, never half
        assert after[name] == complete[name]


# ------------------------------------------------------------------------- determinism


def test_stale_temporaries_are_the_only_files_removed(tmp_path):
    """Only the `.name.adapter_bert.XXXXXXXX.tmp` files of killed atomic writes go;
    everything else stays, a file merely shaped like one included."""
    from adapter_bert.io_utils import atomic_write_text, remove_stale_temporaries
    atomic_write_text(str(tmp_path / "adapter" / "adapter_config.json"), "{}\n")
    stale = [tmp_path / ".eval_results.txt.adapter_bert.k3_9zq0a.tmp",
             tmp_path / "adapter" / ".adapter_model.safetensors.adapter_bert.ab12cd34.tmp"]
    kept = [tmp_path / ".gitignore", tmp_path / "notes.tmp", tmp_path / ".x.tmp",
            tmp_path / "eval_results.txt", tmp_path / ".draft.txt.k3_9zq0a.tmp"]
    for path in stale + kept:
        path.write_text("x")
    assert remove_stale_temporaries(str(tmp_path)) == sorted(map(str, stale))
    assert all(p.exists() for p in kept) and not any(p.exists() for p in stale)
    assert (tmp_path / "adapter" / "adapter_config.json").read_text() == "{}\n"
    assert remove_stale_temporaries(str(tmp_path / "missing")) == []
