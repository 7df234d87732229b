"""One writer per run folder: a run locks its --output_dir; a second run refuses in one
line naming the holder; a lock whose holder is gone is taken over with a warning, so a
killed run resumes with the same command.
"""

import json
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest

from adapter_bert import io_utils
from adapter_bert.io_utils import folders
from adapter_bert.runs import run_lock
from adapter_bert.command_line.flag_checks import FlagError
from tests.robustness.helpers import assert_one_error_line, classifier_flags, write_mrpc_dir
from tests.runner_utils import REPO, run_in_process


def _write_lock(folder, pid, host=None, process_start=None, heartbeat_age=0.0):
    now = time.time()
    holder = run_lock.Holder(host or socket.gethostname(), pid, process_start,
                             now - heartbeat_age, now - heartbeat_age, uuid.uuid4().hex)
    (folder / run_lock.LOCK_NAME).write_text(holder.text())
    return holder


@pytest.fixture
def sleeper():
    """A live process on this host that is not this one."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield process
    process.kill()
    process.wait()


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_run_holds_the_lock_and_releases_it(tmp_path):
    lock = run_lock.acquire(str(tmp_path))
    data = json.loads((tmp_path / run_lock.LOCK_NAME).read_text())
    assert (data["host"], data["pid"]) == (socket.gethostname(), os.getpid())
    assert data["process_start"] == run_lock._process_start(os.getpid()) is not None
    with pytest.raises(FlagError, match=rf"^--output_dir={tmp_path} is in use by another run "
                                        rf"\(host .*, process {os.getpid()}, started "):
        run_lock.acquire(str(tmp_path))
    lock.release()
    assert not (tmp_path / run_lock.LOCK_NAME).exists()
    run_lock.acquire(str(tmp_path)).release()


def test_a_killed_runs_lock_is_listed_as_the_packages(tmp_path):
    """A run killed before its first heartbeat leaves its lock behind: the folder's
    manifest lists it from the run's first write, so a later clear of the folder (a
    benchmark restarting the run) finds nothing foreign in it and deletes the lock with
    the rest."""
    out = tmp_path / "run"
    out.mkdir()
    lock = run_lock.acquire(str(out))
    assert not (out / folders.MANIFEST).exists()  # a run that writes nothing adds nothing
    io_utils.atomic_write_text(str(out / "run_flags.json"), "{}")
    lock._stop.set()  # killed: no heartbeat, no release
    folders.stop_tracking(str(out))
    assert (out / run_lock.LOCK_NAME).exists()
    assert folders.foreign_files(str(out)) == []
    assert folders.clear(str(out), "--work_dir") == [run_lock.LOCK_NAME, "run_flags.json"]
    assert not out.exists()


def test_a_live_holder_on_this_host_is_refused(tmp_path, sleeper):
    holder = _write_lock(tmp_path, sleeper.pid, process_start=run_lock._process_start(sleeper.pid),
                         heartbeat_age=3600)  # alive: its age does not matter on its host
    with pytest.raises(FlagError) as error:
        run_lock.acquire(str(tmp_path))
    message = str(error.value)
    assert message.startswith(f"--output_dir={tmp_path} is in use by another run "
                               f"({holder.describe()}); wait for it to finish or use another "
                               f"--output_dir")
    assert json.loads((tmp_path / run_lock.LOCK_NAME).read_text())["token"] == holder.token


@pytest.mark.parametrize("case", ["dead process", "reused pid", "old heartbeat elsewhere",
                                  "unreadable and old", "earlier run in this process"])
def test_a_lock_whose_holder_is_gone_is_taken_over(case, tmp_path, sleeper, caplog):
    if case == "dead process":
        _write_lock(tmp_path, _dead_pid())
    elif case == "reused pid":
        _write_lock(tmp_path, sleeper.pid, process_start="1")
    elif case == "old heartbeat elsewhere":
        _write_lock(tmp_path, 1, host="another-host", heartbeat_age=run_lock.STALE_S + 5)
    elif case == "unreadable and old":
        (tmp_path / run_lock.LOCK_NAME).write_text("{")
        os.utime(tmp_path / run_lock.LOCK_NAME, (1, 1))
    else:
        _write_lock(tmp_path, os.getpid())
    lock = run_lock.acquire(str(tmp_path))
    try:
        assert json.loads((tmp_path / run_lock.LOCK_NAME).read_text())["token"] == \
            lock.holder.token
        assert "Taking over the lock on" in caplog.text
    finally:
        lock.release()


def test_a_fresh_lock_of_another_host_is_refused_until_it_is_stale(tmp_path):
    holder = _write_lock(tmp_path, 1, host="another-host", heartbeat_age=10)
    with pytest.raises(FlagError, match=r"is in use by another run \(host another-host, "
                                        r"process 1, .*taken over from "):
        run_lock.acquire(str(tmp_path))
    assert json.loads((tmp_path / run_lock.LOCK_NAME).read_text())["token"] == holder.token


def test_a_lock_being_written_is_refused(tmp_path):
    (tmp_path / run_lock.LOCK_NAME).write_text("")
    with pytest.raises(FlagError, match="is being locked by another run that is starting"):
        run_lock.acquire(str(tmp_path))


def test_an_object_store_lock_is_checked_again_after_writing(monkeypatch):
    """ram:// stands for gs://: no create-if-absent, so the lock is read back."""
    monkeypatch.setattr(run_lock, "SETTLE_S", 0.0)
    folder = f"ram://lock_{uuid.uuid4().hex}"
    from adapter_bert import io_utils
    io_utils.makedirs(folder)
    lock = run_lock.acquire(folder)
    with pytest.raises(FlagError, match="is in use by another run"):
        run_lock.acquire(folder)
    lock.release()
    assert not io_utils.exists(f"{folder}/{run_lock.LOCK_NAME}")


def test_a_run_whose_lock_was_taken_stops_before_saving(tmp_path, monkeypatch):
    monkeypatch.setattr(run_lock, "HEARTBEAT_S", 0.05)
    lock = run_lock.acquire(str(tmp_path))
    try:
        _write_lock(tmp_path, 1, host="another-host")
        deadline = time.time() + 10
        while not lock.lost and time.time() < deadline:
            time.sleep(0.05)
        with pytest.raises(run_lock.LockLost, match=r"another run \(host another-host, "
                                                    r"process 1, .*\) took over this run's lock"):
            lock.check()
    finally:
        lock.release()
    assert (tmp_path / run_lock.LOCK_NAME).exists()  # the other run's: not deleted


@pytest.mark.slow
def test_a_second_run_is_refused_and_a_killed_runs_folder_is_taken_over(
        backbone, mrpc_lines, tmp_path, capfd, caplog):
    """A real training run holds the folder; a second command on it stops in one line
    without touching it; after a kill -9 the next command on the folder (here an
    evaluation of the checkpoint the killed run left) takes the lock over."""
    data = write_mrpc_dir(tmp_path / "glue", mrpc_lines)
    out = tmp_path / "out"
    first = subprocess.Popen(
        [sys.executable, "-m", "adapter_bert.run_classifier", "--do_train",
         *classifier_flags(backbone, out, data, num_train_epochs=400)],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while not list(out.glob("checkpoints/ckpt-*.index")) and time.time() < deadline:
            assert first.poll() is None, "the first run ended early"
            time.sleep(0.5)
        assert (out / run_lock.LOCK_NAME).exists()
        code, _ = run_in_process("run_classifier", ["--do_eval", *classifier_flags(
            backbone, out, data)])
        assert code == 1
        assert_one_error_line(capfd.readouterr().err, "run_classifier.py",
                              rf"error: --output_dir={out} is in use by another run \(host "
                              rf".*, process {first.pid}, started ")
        assert not (out / "eval_results.txt").exists()
    finally:
        first.kill()
        first.wait()
    assert (out / run_lock.LOCK_NAME).exists()  # kill -9: nothing released it
    code, _ = run_in_process("run_classifier", ["--do_eval", *classifier_flags(
        backbone, out, data)])
    assert code == 0, capfd.readouterr().err[-3000:]
    assert f"process {first.pid} no longer exists" in caplog.text
    assert (out / "eval_results.txt").exists()
    assert not (out / run_lock.LOCK_NAME).exists()
