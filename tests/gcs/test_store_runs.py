"""Every command a Colab user runs, with every path on a store: `gs://` (TensorFlow's own
GCS client against the emulator, `make test-gcs`) and `file://` (the same `tf.io.gfile`
code paths on a local disk). Data, backbone, outputs, exports, sweeps and adapters all live
in the store; the runners run as subprocesses, as a user starts them.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from adapter_bert import io_utils
from adapter_bert.io_utils import folders
from tests.conftest import REPO
from tests.remote_utils import copy_to_remote
from tests.runner_utils import run_killable, run_subprocess
from tests.test_epoch_selection import write_moods
from tests.test_remote_paths import mrpc_subset
from tests.test_run_squad import write_slice

# Tiny runs: a 2-layer hidden-16 backbone, 40 MRPC training rows, checkpoints every 2 steps.
TINY = ["--max_seq_length=32", "--train_batch_size=8", "--eval_batch_size=32",
        "--predict_batch_size=32", "--learning_rate=1e-3", "--adapter_size=8",
        "--num_train_epochs=1", "--save_checkpoints_steps=2", "--seed=3"]


@pytest.fixture(scope="module")
def staged(store, backbone, mrpc_dir, squad_dir, tmp_path_factory):
    """The inputs, copied into the store: bert/, MRPC/, own/{train,dev,test}.csv, squad/."""
    local = tmp_path_factory.mktemp("inputs")
    mrpc_subset(mrpc_dir, local / "MRPC")
    (local / "own").mkdir()
    write_moods(local / "own" / "train.csv", 48)
    write_moods(local / "own" / "dev.csv", 18, 500)
    (local / "own" / "test.csv").write_text("text\nhappy sunny day\nsad rainy night\n")
    (local / "squad").mkdir()
    write_slice(squad_dir / "train-v1.1-subset.json", local / "squad" / "train.json", paragraphs=2)
    write_slice(squad_dir / "dev-v1.1.json", local / "squad" / "dev.json", paragraphs=1)
    for name in ("MRPC", "own", "squad"):
        copy_to_remote(local / name, f"{store}/{name}")
    copy_to_remote(backbone, f"{store}/bert")
    return store


def bert(root):
    return f"--init_checkpoint={root}/bert/bert_model.ckpt"


def run(module, argv, **hooks):
    """`python -m adapter_bert.<module> argv` (under tests/killer.py with `hooks`)."""
    if hooks:
        return run_killable(module, argv, **hooks)
    return run_subprocess(f"-m adapter_bert.{module}", argv)


def ok(done):
    assert done.returncode == 0, done.stderr[-4000:]
    return done




def serve_two_strings(export_dir, pair):
    import tensorflow_text  # noqa: F401 - registers the tokenizer's ops
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    texts = tf.constant(["the cat sat", "a dog ran fast"])
    outputs = serve(text_a=texts, text_b=texts) if pair else serve(text_a=texts)
    return [label.decode() for label in outputs["label"].numpy()]


# ---------------------------------------------------------------- a. run_classifier

def test_mrpc_trains_killed_and_resumed_then_evaluates_predicts_and_exports(staged):
    root = staged
    argv = ["--task_name=MRPC", f"--data_dir={root}/MRPC", bert(root),
            f"--output_dir={root}/mrpc", *TINY]
    killed = run("run_classifier", ["--do_train", *argv], KILL_AFTER_CHECKPOINT=2)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert io_utils.isfile(f"{root}/mrpc/checkpoints/ckpt-2.index")
    done = ok(run("run_classifier", ["--do_train", "--do_eval", "--do_predict",
                                     f"--export_dir={root}/mrpc_export", *argv]))
    assert "Restored" in done.stderr or "resum" in done.stderr.lower()
    assert set(io_utils.read_key_values(f"{root}/mrpc/eval_results.txt")) >= {"eval_accuracy", "eval_f1"}
    rows = io_utils.read_text(f"{root}/mrpc/test_results.tsv").splitlines()
    assert len(rows) == 12
    assert set(serve_two_strings(f"{root}/mrpc_export", pair=True)) <= {"0", "1"}
    # What the runs wrote is listed in the run folder's manifest, file by file.
    assert folders.foreign_files(f"{root}/mrpc") == []


def test_own_csv_trains_evaluates_predicts_and_exports(staged):
    root = staged
    ok(run("run_classifier", ["--do_train", "--do_eval", "--do_predict",
                              f"--train_file={root}/own/train.csv",
                              f"--dev_file={root}/own/dev.csv",
                              f"--test_file={root}/own/test.csv", bert(root),
                              f"--output_dir={root}/own_out",
                              f"--export_dir={root}/own_export", *TINY]))
    assert "eval_accuracy" in io_utils.read_key_values(f"{root}/own_out/eval_results.txt")
    assert len(io_utils.read_text(f"{root}/own_out/test_results.tsv").splitlines()) == 3
    labels = {line.rsplit(",", 1)[1]
              for line in io_utils.read_text(f"{root}/own/train.csv").splitlines()[1:]}
    assert set(serve_two_strings(f"{root}/own_export", pair=False)) <= labels


# ---------------------------------------------------------------- b. run_squad

def test_squad_trains_and_predicts(staged):
    root = staged
    ok(run("run_squad", ["--do_train", "--do_predict", f"--train_file={root}/squad/train.json",
                         f"--predict_file={root}/squad/dev.json", bert(root),
                         f"--output_dir={root}/squad_out", "--max_seq_length=64",
                         "--doc_stride=16", "--max_query_length=16", "--train_batch_size=8",
                         "--predict_batch_size=32", "--learning_rate=1e-3", "--adapter_size=8",
                         "--num_train_epochs=1", "--save_checkpoints_steps=4"]))
    predictions = json.loads(io_utils.read_text(f"{root}/squad_out/predictions.json"))
    assert predictions and all(isinstance(v, str) for v in predictions.values())
    assert "f1" in io_utils.read_key_values(f"{root}/squad_out/eval_results.txt")


# ---------------------------------------------------------------- c. the sweep

def test_a_sweep_stopped_half_way_continues_to_best(staged):
    root = staged
    out = f"{root}/sweep"
    argv = [f"--train_file={root}/own/train.csv", f"--dev_file={root}/own/dev.csv", bert(root),
            f"--output_dir={out}", "--grid=learning_rate=1e-3,3e-3", "--select_metric=loss",
            *(flag for flag in TINY if not flag.startswith("--learning_rate"))]
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    sweep = subprocess.Popen([sys.executable, "-m", "adapter_bert.sweep", *argv], cwd=REPO,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
    first = f"{out}/learning_rate_1e-3/eval_results.txt"
    deadline = time.monotonic() + 240
    while not io_utils.isfile(first) and sweep.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(sweep.pid, signal.SIGKILL)  # the sweep and the point it runs
    sweep.wait()
    assert io_utils.isfile(first), sweep.stderr.read().decode()[-3000:]
    assert not io_utils.exists(f"{out}/best")
    ok(run("sweep", argv))
    best = json.loads(io_utils.read_text(f"{out}/best/best_point.json"))
    assert best["point"]["learning_rate"] in ("1e-3", "3e-3")
    assert io_utils.isfile(f"{out}/best/adapter/adapter_model.safetensors")
    assert len(io_utils.read_text(f"{out}/sweep_results.tsv").splitlines()) == 3


# ---------------------------------------------------------------- d. the run lock

def test_a_second_run_is_refused_by_the_lock_and_a_stale_lock_is_taken_over(staged):
    from adapter_bert.runs import run_lock
    root = staged
    out = f"{root}/locked"
    io_utils.makedirs(out)
    lock = run_lock.acquire(out)
    try:
        done = run("run_classifier", ["--do_train", "--task_name=MRPC",
                                      f"--data_dir={root}/MRPC", bert(root),
                                      f"--output_dir={out}", *TINY])
        assert done.returncode == 1
        assert f"--output_dir={out} is in use by another run" in done.stderr
    finally:
        lock.release()
    # A lock whose holder died (a pid that does not run on this host) is taken over.
    stale = run_lock.Holder.this_process()
    stale.pid, stale.process_start, stale.token = 2 ** 22 + 7, None, "dead-run"
    io_utils.atomic_write_text(f"{out}/{run_lock.LOCK_NAME}", stale.text())
    lock = run_lock.acquire(out)
    try:
        assert run_lock.Holder.parse(io_utils.read_text(lock.path)).token == lock.holder.token
    finally:
        lock.release()
    assert not io_utils.exists(f"{out}/{run_lock.LOCK_NAME}")


# ---------------------------------------------------------------- e. a corrupted checkpoint

def test_a_corrupted_newest_checkpoint_falls_back_to_the_one_before(staged):
    root = staged
    argv = ["--task_name=MRPC", f"--data_dir={root}/MRPC", bert(root),
            f"--output_dir={root}/corrupt", *TINY]
    ok(run("run_classifier", ["--do_train", *argv]))
    steps = sorted(int(name[5:-6]) for name in io_utils.listdir(f"{root}/corrupt/checkpoints")
                   if name.startswith("ckpt-") and name.endswith(".index"))
    assert len(steps) >= 2, steps
    newest = f"{root}/corrupt/checkpoints/ckpt-{steps[-1]}.data-00000-of-00001"
    data = io_utils.read_bytes(newest)
    io_utils.atomic_write_bytes(newest, data[:len(data) // 2])
    done = ok(run("run_classifier", ["--do_train", "--do_eval", *argv]))
    assert f"ckpt-{steps[-1]}" in done.stderr and f"ckpt-{steps[-2]}" in done.stderr
    assert "eval_accuracy" in io_utils.read_key_values(f"{root}/corrupt/eval_results.txt")


# ---------------------------------------------------------------- f. the library

def test_the_library_saves_and_loads_adapters_in_the_store(staged):
    import adapter_bert as ab
    root = staged
    model = ab.TextClassifier.from_pretrained(labels=["neg", "pos"], backbone=f"{root}/bert",
                                              task="toy", adapter={"size": 8},
                                              max_seq_length=32)
    model.fit(["good fun", "bad day", "great joy", "awful pain"] * 4,
              ["pos", "neg", "pos", "neg"] * 4, batch_size=8, epochs=1, verbose=0)
    before = model.predict(["good fun", "bad day"])
    model.save_adapter(f"{root}/library/toy")
    again = ab.TextClassifier.from_adapter(f"{root}/library/toy", backbone=f"{root}/bert")
    np.testing.assert_allclose(again.predict(["good fun", "bad day"]), before, atol=1e-6)
    whole = ab.load_adapter(f"{root}/library/toy", backbone=f"{root}/bert")
    assert whole.active_adapter == "toy" and whole.labels == {"toy": ["neg", "pos"]}


# ---------------------------------------------------------------- g. exports replaced

class _Doubler(tf.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = tf.Variable(float(factor))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def serve(self, x):
        return {"y": self.factor * x}


def _export(target, factor):
    from adapter_bert.serving.export import write_saved_model
    module = _Doubler(factor)
    return write_saved_model(target, module, {"serving_default": module.serve},
                             {"kind": "test", "factor": factor})


def _served(target):
    return float(tf.saved_model.load(target).signatures["serving_default"](
        tf.constant([1.0]))["y"].numpy()[0])


def test_an_export_replaces_an_earlier_one_and_stops_at_a_users_file(staged):
    target = f"{staged}/exports/model"
    _export(target, 2)
    _export(target, 3)
    assert _served(target) == 3.0
    io_utils.atomic_write_bytes(f"{target}/assets.extra/tf_serving_warmup_requests", b"warm")
    with pytest.raises(folders.ForeignFileError, match="assets.extra/tf_serving_warmup_requests"):
        _export(target, 4)
    assert _served(target) == 3.0
    assert io_utils.read_bytes(f"{target}/assets.extra/tf_serving_warmup_requests") == b"warm"
    assert [n for n in io_utils.listdir(f"{staged}/exports") if n != "model"] == []


SWAP_SCRIPT = """
import sys
import tensorflow as tf
from tests.gcs.test_store_runs import _export
_export(sys.argv[1], float(sys.argv[2]))
"""


def test_an_export_killed_while_swapping_leaves_a_whole_copy_and_the_next_completes(
        staged, tmp_path):
    target = f"{staged}/swapped/model"
    _export(target, 2)
    script = tmp_path / "export.py"
    script.write_text(SWAP_SCRIPT)
    killed = subprocess.run(
        [sys.executable, str(REPO / "tests" / "killer.py"), str(script), target, "5"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO), KILL_SWAPPING="2"))
    beside = io_utils.listdir(f"{staged}/swapped")
    if io_utils.renames_folders_atomically(target):
        # A local disk renames folders in one step: there was nothing to copy, no kill.
        assert killed.returncode == 0, killed.stderr[-3000:]
        assert _served(target) == 5.0 and beside == ["model"]
        return
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    journal = [n for n in beside if n.endswith(".replacing.json")]
    staged_copy = [n for n in beside if ".adapter_bert.staging." in n]
    assert journal and staged_copy, beside
    # The staged copy is whole (its manifest lists every file it holds) and serves.
    copy = f"{staged}/swapped/{staged_copy[0]}"
    assert sorted(folders.read_manifest(copy)) == sorted(
        n for n in io_utils.files_under(copy) if n != folders.MANIFEST)
    assert _served(copy) == 5.0
    assert not io_utils.exists(f"{target}/{folders.MANIFEST}")  # the target: half-written
    _export(target, 6)  # completes the interrupted swap, then replaces it
    assert _served(target) == 6.0
    assert io_utils.listdir(f"{staged}/swapped") == ["model"]
