"""Two real workers: `run_classifier.py` twice on 127.0.0.1 with TF_CONFIG and
`--distribution_strategy=multi_worker_mirrored` (one CPU device each).

Checked against a one-process run at the same global batch: the same eval metrics, only
the chief writes into --output_dir, the other worker leaves nothing in its temporary
folder, a cluster whose worker was killed resumes from the chief's last checkpoint, and a
SIGTERM to one worker stops both after the same step with a checkpoint there.
Dropout is off in the tiny backbone so that the two layouts (one replica of 16 examples,
two replicas of 8) compute the same function and their metrics can be compared closely.
Every process runs under a timeout, so a hung collective fails the test instead of
blocking the suite.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import BERT_VOCAB, REPO
from tests.robustness.helpers import classifier_flags, write_mrpc_dir
from tests.runner_utils import read_results, run_subprocess, write_tiny_backbone

# Seconds one process of a run may take (the tiny runs take one to three minutes on a
# busy 2-core machine); a hang is cut here.
PROCESS_TIMEOUT = 420
METRICS = ("eval_accuracy", "eval_f1", "eval_loss", "loss")
CHIEF_OUTPUTS = {"eval_results.txt", "test_results.tsv", "adapter", "checkpoints", "logs",
                 "feature_cache", "run_flags.json",  # the run's training flags, chief only
                 "eval_per_class.tsv", "eval_confusion.tsv", "eval_predictions.tsv",
                 ".adapter_bert_files.json"}  # the manifest of what the chief wrote


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    """The tiny random BERT with dropout off (deterministic forward pass)."""
    return write_tiny_backbone(tmp_path_factory.mktemp("mw") / "bert",
                               BERT_VOCAB, dropout=0.0)


@pytest.fixture(scope="module")
def data(tmp_path_factory, mrpc_dir):
    """96 train, 40 dev and 8 test MRPC examples: 6 steps at batch 16."""
    source = mrpc_dir

    def read(name, count):
        return (source / name).read_text(encoding="utf-8-sig").splitlines()[:count]
    return write_mrpc_dir(tmp_path_factory.mktemp("mw_data"),
                          (read("train.tsv", 97), read("dev.tsv", 41), read("test.tsv", 9)))


def argv(backbone, data, output_dir, **overrides):
    return ["--do_train", "--do_eval", "--do_predict",
            *classifier_flags(backbone, output_dir, data, **overrides)]


@pytest.fixture(scope="module")
def one_process(backbone, data, tmp_path_factory):
    """The reference: one process, global batch 16."""
    out = tmp_path_factory.mktemp("one") / "out"
    result = run_subprocess("run_classifier.py", argv(backbone, data, out),
                            timeout=PROCESS_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    (out.parent / "run.log").write_text(result.stdout + result.stderr)  # its progress lines
    return out


def free_ports(count: int):
    """Ports the OS reports free on 127.0.0.1 (bound together, so they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def start_worker(index: int, ports, args, tmpdir: Path, log: Path, script="run_classifier.py",
                 hooks=None) -> subprocess.Popen:
    """Starts worker `index` of a cluster of len(ports) workers; TMPDIR is `tmpdir` so the
    test sees every temporary folder the worker makes."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO), TMPDIR=str(tmpdir),
               TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker",
                                                                    "index": index}}),
               **(hooks or {}))
    command = [sys.executable, str(REPO / script), *args]
    if script == "tests/killer.py":
        command = [sys.executable, str(REPO / script), "adapter_bert.run_classifier", *args]
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, text=True)


def wait_all(processes, timeout=PROCESS_TIMEOUT):
    """Waits for every process; kills them all if any runs past `timeout`."""
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in processes]
    except subprocess.TimeoutExpired:
        for p in processes:
            p.kill()
        raise


def run_cluster(args, tmp: Path, name: str):
    """Runs two workers to the end; returns their logs (text)."""
    ports = free_ports(2)
    (tmp / "tmpdir").mkdir(exist_ok=True)
    logs = [tmp / f"{name}.worker{i}.log" for i in range(2)]
    workers = [start_worker(i, ports, args, tmp / "tmpdir", logs[i]) for i in range(2)]
    codes = wait_all(workers)
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0], "\n".join(text[-3000:] for text in texts)
    return texts


def tensorboard_scalars(output_dir: Path, tag: str) -> dict:
    """{step: value} of the scalar `tag` in a run's TensorBoard log (`logs/train`)."""
    import tensorflow as tf
    from tensorflow.core.util import event_pb2
    values = {}
    for path in (output_dir / "logs" / "train").glob("events.out.tfevents.*"):
        for raw in tf.data.TFRecordDataset(str(path)):
            event = event_pb2.Event.FromString(raw.numpy())
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = float(tf.make_ndarray(value.tensor))
    return values


def progress_losses(text: str) -> dict:
    """{step: loss} of the progress lines `train: N/M steps (...), loss X` in a log."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"train: (\d+)/\d+ steps .*loss ([0-9.]+)$", line)
        if match:
            found[int(match.group(1))] = float(match.group(2))
    return found


def reference_log(output_dir: Path) -> str:
    return (output_dir.parent / "run.log").read_text()


def assert_same_metrics(got: Path, expected: Path, tolerance=1e-3):
    got, expected = read_results(got / "eval_results.txt"), read_results(
        expected / "eval_results.txt")
    assert got["global_step"] == expected["global_step"] == "6"
    for key in METRICS:
        assert abs(float(got[key]) - float(expected[key])) <= tolerance, (key, got, expected)
    return {key: abs(float(got[key]) - float(expected[key])) for key in METRICS}


@pytest.mark.slow
def test_two_workers_match_one_process_and_only_the_chief_writes(
        one_process, backbone, data, tmp_path):
    out = tmp_path / "out"
    logs = run_cluster(argv(backbone, data, out, distribution_strategy="multi_worker_mirrored"),
                       tmp_path, "two")
    joined = ("Distribution strategy: multi_worker_mirrored (CollectiveAllReduceStrategy) "
              "with 2 replica(s) in sync")
    assert joined in logs[0] and joined in logs[1]  # each worker joined a two-worker cluster
    assert "not the chief" in logs[1] and "not the chief" not in logs[0]
    differences = assert_same_metrics(out, one_process)
    print("two workers vs one process, |difference|:", differences)
    # Same predictions, row by row, to 1e-3.
    rows = [[float(x) for x in line.split("\t")]
            for line in (out / "test_results.tsv").read_text().splitlines()]
    reference = [[float(x) for x in line.split("\t")]
                 for line in (one_process / "test_results.tsv").read_text().splitlines()]
    assert len(rows) == len(reference) == 8
    assert max(abs(a - b) for r, s in zip(rows, reference) for a, b in zip(r, s)) <= 1e-3
    # The losses shown while training are the one-process run's, not twice them: each
    # step's progress line (the step logs TensorBoard's batch loss reads too, every 10
    # steps), and TensorBoard's epoch loss; and so are the trained weights.
    shown = [progress_losses(text) for text in (logs[0], reference_log(one_process))]
    assert sorted(shown[0]) == sorted(shown[1]) and shown[0], shown
    for step in shown[1]:
        assert abs(shown[0][step] - shown[1][step]) <= 1e-3, (step, shown)
    epoch = [tensorboard_scalars(run, "epoch_loss") for run in (out, one_process)]
    assert epoch[0] and epoch[0].keys() == epoch[1].keys()
    assert max(abs(epoch[0][k] - epoch[1][k]) for k in epoch[0]) <= 1e-3, epoch
    from safetensors.numpy import load_file
    weights = [load_file(str(run / "adapter" / "adapter_model.safetensors"))
               for run in (out, one_process)]
    assert weights[0].keys() == weights[1].keys()
    assert max(float(abs(weights[0][k] - weights[1][k]).max()) for k in weights[0]) <= 1e-3
    # Only the chief's files are in --output_dir: one TensorBoard writer, one set of
    # checkpoints, no worker folder; worker 1 deleted its temporary folder.
    assert {p.name for p in out.iterdir()} == CHIEF_OUTPUTS
    assert len(list((out / "logs").rglob("events.out.tfevents.*"))) == 1
    assert sorted(p.name for p in (out / "checkpoints").glob("ckpt-*.index")) == [
        "ckpt-2.index", "ckpt-4.index", "ckpt-6.index"]
    assert {p.name for p in (out / "adapter").iterdir()} == {"adapter_config.json",
                                                             "adapter_model.safetensors"}
    assert list((tmp_path / "tmpdir").iterdir()) == []


@pytest.mark.slow
def test_a_signalled_then_a_killed_worker_each_resume_with_the_cluster(
        one_process, backbone, data, tmp_path):
    """One run, stopped twice, then finished:
    1. SIGTERM reaches worker 1 only, right after step 3 (between checkpoints 2 and 4):
       both workers agree to stop after step 3, the chief writes checkpoint 3, both exit
       with 143 and the one "preempted, run again" line;
    2. started again, it resumes at step 4; kill -9 of worker 1 right after checkpoint 4
       leaves the chief stuck in the next step's all-reduce, and it is killed too;
    3. started again, both resume at step 5 and end with the one-process run's metrics."""
    out = tmp_path / "out"
    args = argv(backbone, data, out, distribution_strategy="multi_worker_mirrored")
    (tmp_path / "tmpdir").mkdir()

    # 1. A signal to one worker.
    ports = free_ports(2)
    logs = [tmp_path / f"signalled.worker{i}.log" for i in range(2)]
    chief = start_worker(0, ports, args, tmp_path / "tmpdir", logs[0])
    worker = start_worker(1, ports, args, tmp_path / "tmpdir", logs[1],
                          script="tests/killer.py", hooks={"SIGNAL_AT_STEP": "3"})
    codes = wait_all([chief, worker])
    texts = [log.read_text() for log in logs]
    assert codes == [143, 143], "\n".join(text[-3000:] for text in texts)
    saved = str(out / "checkpoints" / "ckpt-3")
    lines = [[line for line in text.splitlines() if "preempted, run again" in line]
             for text in texts]
    assert lines[0] == [f"run_classifier.py: SIGTERM: stopped at training step 3 of 6 "
                        f"(received by another worker); checkpoint {saved} saved; preempted, "
                        f"run again with the same command to resume"], texts[0][-3000:]
    assert lines[1] == [f"run_classifier.py: SIGTERM: stopped at training step 3 of 6; "
                        f"checkpoint {saved} saved; preempted, run again with the same command "
                        f"to resume"], texts[1][-3000:]
    assert "Traceback" not in texts[0] + texts[1]
    assert sorted(p.name for p in (out / "checkpoints").glob("ckpt-*.index")) == [
        "ckpt-2.index", "ckpt-3.index"]
    assert not (out / "eval_results.txt").exists() and not (out / "adapter").exists()
    assert list((tmp_path / "tmpdir").iterdir()) == []  # worker 1 cleaned up on the way out

    # 2. Resumed at step 4, then a worker killed.
    ports = free_ports(2)
    logs = [tmp_path / f"killed.worker{i}.log" for i in range(2)]
    chief = start_worker(0, ports, args, tmp_path / "tmpdir", logs[0])
    worker = start_worker(1, ports, args, tmp_path / "tmpdir", logs[1],
                          script="tests/killer.py", hooks={"KILL_AFTER_CHECKPOINT": "4"})
    index = out / "checkpoints" / "checkpoint"
    try:
        assert worker.wait(timeout=PROCESS_TIMEOUT) == -signal.SIGKILL, logs[1].read_text()[-3000:]
        # The chief writes checkpoint 4 at the same step, then cannot finish step 5.
        deadline = time.monotonic() + 120
        while "ckpt-4" not in (index.read_text() if index.exists() else ""):
            assert chief.poll() is None and time.monotonic() < deadline, \
                logs[0].read_text()[-3000:]
            time.sleep(1)
        time.sleep(2)  # let the chief's write of checkpoint 4 settle before it is killed
    finally:
        chief.kill()
        worker.kill()
        chief.wait(), worker.wait()
    for log in logs:
        assert "Restored " + saved in log.read_text() and "steps 4..6 of 6" in log.read_text()
    assert not (out / "eval_results.txt").exists() and not (out / "adapter").exists()
    assert "ckpt-6" not in index.read_text()

    # 3. Resumed at step 5, to the end.
    resumed = run_cluster(args, tmp_path, "resumed")
    for text in resumed:
        assert "Restored " + str(out / "checkpoints" / "ckpt-4") in text
        assert "steps 5..6 of 6" in text
    differences = assert_same_metrics(out, one_process)
    print("signalled, killed and resumed two workers vs one process, |difference|:",
          differences)
