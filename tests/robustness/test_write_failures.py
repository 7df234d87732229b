"""Writes that fail mid-run: a full disk, a lost permission.

A run whose checkpoint, adapter or result file cannot be written stops with exit code 1
and one line `<script>: error: cannot write <path>: <reason>`, no traceback; the
checkpoints and outputs written before stay whole, and the same command run again (once
the disk has room) goes on from them, ending with the same bytes as an uninterrupted
`--deterministic` run.

The failures are made on demand by `tests/killer.py`: the kernel's file-size limit
(RLIMIT_FSIZE) set to 0 at a chosen moment makes every later write fail with "File too
large" (EFBIG), through TensorFlow's checkpoint writer as through Python's files; a lost
permission is `open` raising "Permission denied" for one output's temporary file (root,
which runs these tests in some places, ignores file modes). Where this machine lets an
unprivileged user mount a size-limited tmpfs in its own namespace (`unshare -rm`), a real
full file system ("No space left on device") is tested too; elsewhere that test is
skipped, saying why.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.robustness.helpers import (DETERMINISTIC, assert_one_error_line, classifier_argv,
                                      squad_flags, write_mrpc_dir)
from tests.runner_utils import run_killable, run_subprocess

CLASSIFIER_OUTPUTS = ("adapter/adapter_model.safetensors", "adapter/adapter_config.json",
                      "eval_results.txt", "test_results.tsv")
KEPT = ("the checkpoints already written are kept and the same command resumes from the "
        "last of them")


def read_bytes(directory: Path, names):
    return {name: (directory / name).read_bytes() for name in names
            if (directory / name).exists()}


def checkpoint_steps(out: Path):
    return sorted(int(p.name[len("ckpt-"):-len(".index")])
                  for p in (out / "checkpoints").glob("ckpt-*.index"))


def leftovers(out: Path):
    """Temporary files of atomic writes and partial checkpoint saves."""
    return sorted(str(p.relative_to(out)) for p in out.rglob("*")
                  if p.name.endswith(".tmp") or p.name.endswith("_temp"))


def failing(script: str, argv, expected: str, **hooks) -> str:
    """Runs `script` under the hooks: exit 1 and exactly the one error line `expected`."""
    result = run_killable(script, argv, **hooks)
    assert result.returncode == 1, (hooks, result.stderr[-3000:])
    line = assert_one_error_line(result.stderr, script, "")
    assert line == f"{script}: error: {expected}", line
    return result.stderr


@pytest.fixture(scope="module")
def mrpc(mrpc_lines, tmp_path_factory):
    return write_mrpc_dir(tmp_path_factory.mktemp("write_mrpc"), mrpc_lines)


@pytest.fixture(scope="module")
def reference(backbone, mrpc, tmp_path_factory):
    out = tmp_path_factory.mktemp("write_reference") / "out"
    result = run_subprocess("run_classifier.py", classifier_argv(backbone, out, mrpc))
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.mark.slow
def test_classifier_write_failures_keep_what_was_written_and_the_next_run_goes_on(
        reference, backbone, mrpc, tmp_path):
    expected = read_bytes(reference, CLASSIFIER_OUTPUTS)
    out = tmp_path / "out"
    argv = classifier_argv(backbone, out, mrpc)

    # The disk fills up after checkpoint 2: checkpoint 4 cannot be written.
    failing("run_classifier.py", argv,
            f"cannot write {out}/checkpoints/ckpt-4: File too large; {KEPT}",
            FULL_DISK_AFTER_CHECKPOINT=2)
    assert checkpoint_steps(out) == [2]
    assert '"ckpt-2"' in (out / "checkpoints" / "checkpoint").read_text().splitlines()[0]
    assert leftovers(out) == [] and read_bytes(out, CLASSIFIER_OUTPUTS) == {}

    # Room again: training resumes from checkpoint 2; the adapter export fails.
    stderr = failing("run_classifier.py", argv,
                     f"cannot write {out}/adapter/adapter_model.safetensors: File too large",
                     FULL_DISK_WRITING="adapter_model.safetensors")
    assert "steps 3..6 of 6" in stderr
    assert checkpoint_steps(out) == [2, 4, 6]
    assert leftovers(out) == [] and read_bytes(out, CLASSIFIER_OUTPUTS) == {}

    # The permission to write eval_results.txt is lost: the adapter is written first.
    failing("run_classifier.py", argv, f"cannot write {out}/eval_results.txt: Permission denied",
            DENY_WRITING="eval_results.txt")
    names = ("adapter/adapter_model.safetensors", "adapter/adapter_config.json")
    assert read_bytes(out, CLASSIFIER_OUTPUTS) == {name: expected[name] for name in names}

    # The disk fills up while the predictions are written: eval_results.txt stays whole.
    failing("run_classifier.py", argv, f"cannot write {out}/test_results.tsv: File too large",
            FULL_DISK_WRITING="test_results.tsv")
    names += ("eval_results.txt",)
    assert read_bytes(out, CLASSIFIER_OUTPUTS) == {name: expected[name] for name in names}
    assert leftovers(out) == []

    finished = run_subprocess("run_classifier.py", argv)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert read_bytes(out, CLASSIFIER_OUTPUTS) == expected


@pytest.mark.slow
def test_squad_prediction_write_failure_keeps_the_files_written_before(backbone, squad_slice,
                                                                       tmp_path):
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(squad_slice))
    out = tmp_path / "out"
    argv = ["--do_predict", f"--predict_file={path}", *DETERMINISTIC, *squad_flags(backbone, out)]
    failing("run_squad.py", argv, f"cannot write {out}/nbest_predictions.json: Permission denied",
            DENY_WRITING="nbest_predictions.json")
    written = (out / "predictions.json").read_bytes()
    assert json.loads(written)  # written before the failure, whole
    assert not (out / "nbest_predictions.json").exists() and leftovers(out) == []
    failing("run_squad.py", argv, f"cannot write {out}/eval_results.txt: File too large",
            FULL_DISK_WRITING="eval_results.txt")
    assert json.loads((out / "nbest_predictions.json").read_text())
    finished = run_subprocess("run_squad.py", argv)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert (out / "predictions.json").read_bytes() == written
    assert json.loads((out / "eval_results.json").read_text())["exact_match"] >= 0


# -------------------------------------------------------------- a real full file system

def _tmpfs_unavailable(probe: Path):
    """Why a size-limited tmpfs cannot be mounted here (None: it can)."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run(["unshare", "-rm", "sh", "-c",
                                 f"mount -t tmpfs -o size=64k tmpfs '{probe}'"],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare failed: {e}"
    if result.returncode != 0:
        return (f"cannot mount a tmpfs in a user namespace here: "
                f"{(result.stderr or result.stdout).strip()[:200]}")
    return None


def _pages(path: Path) -> int:
    return -(-path.stat().st_size // 4096) * 4096


@pytest.mark.slow
def test_a_full_file_system_under_the_checkpoints_keeps_the_last_checkpoint(
        reference, backbone, mrpc, tmp_path):
    """<output_dir>/checkpoints is a tmpfs with room for one and a half checkpoints:
    checkpoint 2 is written, checkpoint 4 is not ("No space left on device"). Copied to a
    disk with room, the folder resumes from checkpoint 2 to the uninterrupted run's bytes."""
    why = _tmpfs_unavailable(tmp_path / "probe")
    if why:
        pytest.skip(why)
    one = sum(_pages(p) for p in (reference / "checkpoints").glob("ckpt-2.*")) + 4096
    size_k = (one + one // 2) // 1024
    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    saved = tmp_path / "saved_checkpoints"
    script = ('mount -t tmpfs -o size="$SIZE" tmpfs "$OUT/checkpoints" || exit 99; '
              '"$@"; code=$?; cp -a "$OUT/checkpoints" "$SAVED"; exit $code')
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO), OUT=str(out),
               SAVED=str(saved), SIZE=f"{size_k}k")
    argv = classifier_argv(backbone, out, mrpc)
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", sys.executable,
                             str(REPO / "run_classifier.py"), *argv],
                            capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    line = assert_one_error_line(result.stderr, "run_classifier.py", "")
    assert line == (f"run_classifier.py: error: cannot write {out}/checkpoints/ckpt-4: No space "
                    f"left on device; {KEPT}")
    shutil.rmtree(out / "checkpoints")
    shutil.copytree(saved, out / "checkpoints")
    assert checkpoint_steps(out) == [2] and leftovers(out) == []
    finished = run_subprocess("run_classifier.py", argv)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "steps 3..6 of 6" in finished.stderr
    assert read_bytes(out, CLASSIFIER_OUTPUTS) == read_bytes(reference, CLASSIFIER_OUTPUTS)


def test_a_serving_export_that_cannot_be_written_names_it_and_keeps_the_earlier_one(
        tmp_path, monkeypatch):
    """TensorFlow's SavedModel writer failing part-way (as on a full disk): one WriteError
    naming --export_dir and the reason; the earlier export and no staging folder remain."""
    import tensorflow as tf

    from adapter_bert.io_utils import WriteError, folders
    from adapter_bert.serving.export import write_saved_model
    export_dir = tmp_path / "export"
    export_dir.mkdir()
    (export_dir / "saved_model.pb").write_bytes(b"the earlier export")
    (export_dir / "export_info.json").write_text('{"kind": "classifier"}')
    folders.write_manifest(str(export_dir), ["saved_model.pb", "export_info.json"])

    def save_part_then_fail(module, directory, signatures=None):
        Path(directory, "variables").mkdir()
        Path(directory, "variables", "variables.data-00000-of-00001").write_bytes(b"part")
        raise tf.errors.ResourceExhaustedError(
            None, None, f"{directory}/variables/variables_temp/part-00000-of-00001.data-00000-"
                        f"of-00001.tempstate1; No space left on device")
    monkeypatch.setattr(tf.saved_model, "save", save_part_then_fail)
    with pytest.raises(WriteError) as error:
        write_saved_model(str(export_dir), tf.Module(), {}, {})
    assert str(error.value) == f"cannot write {export_dir}: No space left on device"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]
    assert sorted(p.name for p in export_dir.iterdir()) == [
        folders.MANIFEST, "export_info.json", "saved_model.pb"]
    assert (export_dir / "saved_model.pb").read_bytes() == b"the earlier export"
