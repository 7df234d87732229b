"""What a run shows: the progress display, the start-up filter, and the whole console of
short run_classifier.py / run_squad.py runs written to a pipe (as into a log file)."""

import io
import json
import os
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from adapter_bert import console
from adapter_bert.progress import Progress, format_bytes, format_seconds
from tests.conftest import REPO
from tests.runner_utils import python_output

# absl's prefix ("I1125 12:39:30.298035 140473511295872 "): the rest of a log line is
# what must not repeat.
ABSL_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ ")
# A short run's console, measured at 27 lines (MiniLM, train + eval); the bound leaves
# room for a TensorFlow warning or two, not for a dump of examples or duplicates.
MAX_LINES = 40


# ------------------------------------------------------------------ progress display
def test_plain_lines_come_every_tenth_and_at_the_end():
    stream = io.StringIO()
    progress = Progress("eval dev", total=25, unit="batches", stream=stream)
    for done in range(1, 26):
        progress.update(done)
    progress.finish()
    progress.finish()  # once only
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert [line.split(":")[1].split()[0] for line in lines] == \
        ["3/25", "6/25", "9/25", "12/25", "15/25", "18/25", "21/25", "24/25", "25/25"]
    assert lines[-1].startswith("eval dev: 25/25 batches (100%), 0:00")


def test_a_few_steps_give_a_line_each_with_the_loss():
    stream = io.StringIO()
    progress = Progress("train", total=5, stream=stream, start=2)  # resumed at step 2
    for step in (3, 4, 5):
        progress.update(step, loss=0.6931)
    progress.finish()
    assert stream.getvalue().splitlines() == [
        "train: 3/5 steps (60%), 0:00, loss 0.6931",
        "train: 4/5 steps (80%), 0:00, 0:00 left, loss 0.6931",
        "train: 5/5 steps (100%), 0:00, loss 0.6931"]


def test_terminal_display_rewrites_one_line():
    stream = io.StringIO()
    progress = Progress("download", total=3 * 2 ** 20, unit="bytes", stream=stream,
                        terminal=True)
    progress.update(2 ** 20)
    progress.update(3 * 2 ** 20)
    progress.finish()
    text = stream.getvalue()
    assert text.startswith("\r") and text.endswith("\n") and text.count("\n") == 1
    assert "1.0 MiB/3.0 MiB (33%)" in text and "3.0 MiB/3.0 MiB (100%)" in text


def test_unknown_total_and_formats():
    stream = io.StringIO()
    progress = Progress("read", stream=stream, unit="records")
    for done in range(1, 251):
        progress.update(done)
    progress.finish()
    assert [line.split(",")[0] for line in stream.getvalue().splitlines()] == \
        ["read: 100 records", "read: 200 records", "read: 250 records"]
    assert format_bytes(512) == "512 B" and format_bytes(1536) == "1.5 KiB"
    assert format_seconds(65) == "1:05" and format_seconds(3725) == "1:02:05"


# -------------------------------------------------------------- TensorFlow start-up
STARTUP = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795610366.714441    5193 port.cc:153] oneDNN custom operations are on. You may see slightly different numerical results due to floating-point round-off errors from different computation orders. To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.
I0000 00:00:1795610366.714775    5193 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
I0000 00:00:1795610366.755228    5193 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use available CPU instructions in performance-critical operations.
To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with the appropriate compiler flags.
E0000 00:00:1795610369.178230    5193 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)
E0000 00:00:1795610369.178230    5193 some_op.cc:10] a real error
/usr/lib/python3/warnings.py:1: UserWarning: something Python warns about
"""


def test_startup_filter_drops_only_the_known_probe_lines():
    no_gpu = console.filter_startup_lines(STARTUP, console.dropped_patterns(False, False))
    assert no_gpu.splitlines() == [
        "E0000 00:00:1795610369.178230    5193 some_op.cc:10] a real error",
        "/usr/lib/python3/warnings.py:1: UserWarning: something Python warns about"]
    # A machine with an NVIDIA driver whose cuInit fails: that is a real error.
    with_driver = console.filter_startup_lines(STARTUP, console.dropped_patterns(False, True))
    assert "failed call to cuInit" in with_driver and "cuda drivers" not in with_driver
    # With a GPU visible, only the notices go.
    with_gpu = console.filter_startup_lines(STARTUP, console.dropped_patterns(True, True))
    assert "cuda drivers" in with_gpu and "oneDNN" not in with_gpu
    assert "InitializeLog" not in with_gpu


@pytest.mark.parametrize("given, keras3_loaded", [(None, False), ("0", True)])
def test_entry_points_load_tensorflow_with_tf_keras_as_tf_keras(given, keras3_loaded):
    """TF_USE_LEGACY_KERAS=1 unless the user set it: `tf.keras` is the package's tf-keras
    and Keras 3 is not imported (a third of TensorFlow's import time)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    if given is not None:
        env["TF_USE_LEGACY_KERAS"] = given
    script = ("import sys; from adapter_bert.console import quiet_tensorflow_startup; "
              "quiet_tensorflow_startup(); import tensorflow as tf; "
              "print('keras' in sys.modules, tf.keras.__name__.startswith('tf_keras'))")
    printed = python_output(script, env=dict(env, PYTHONPATH=str(REPO)))
    assert printed.split() == [str(keras3_loaded), str(not keras3_loaded)]


# ------------------------------------------------------------------ whole console
def write_mrpc(folder: Path, train: int = 40, dev: int = 20, test: int = 6) -> Path:
    """A tiny MRPC folder (train/dev/test.tsv in GLUE's layout) of made-up sentences."""
    rng = random.Random(0)
    words = ("the company said its shares rose on monday after a strong quarter while "
             "analysts expected losses").split()

    def sentence():
        return " ".join(rng.choice(words) for _ in range(rng.randint(5, 12))).capitalize() + "."

    def rows(count, labelled):
        lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String" if labelled else
                 "index\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        for i in range(count):
            a = sentence()
            b = a if rng.random() < 0.5 else sentence()
            lines.append(f"{int(a == b) if labelled else i}\t{100 + i}\t{200 + i}\t{a}\t{b}")
        return "\n".join(lines) + "\n"

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.tsv").write_text(rows(train, True))
    (folder / "dev.tsv").write_text(rows(dev, True))
    (folder / "test.tsv").write_text(rows(test, False))
    return folder


def write_squad(path: Path, questions: int, seed: int) -> Path:
    """A SQuAD v1.1 file of made-up paragraphs, one question each."""
    rng = random.Random(seed)
    words = "the river flows through the old city near a stone bridge".split()
    paragraphs = []
    for i in range(questions):
        answer = f"number{seed}x{i}"
        context = " ".join(rng.choice(words) for _ in range(20)) + f" The answer is {answer}."
        paragraphs.append({"context": context, "qas": [{
            "id": f"q{seed}-{i}", "question": f"What is answer {i}?",
            "answers": [{"text": answer, "answer_start": context.index(answer)}]}]})
    path.write_text(json.dumps({"version": "1.1",
                                "data": [{"title": "t", "paragraphs": paragraphs}]}))
    return path


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory):
    """A random 2-layer BERT on the embedded MiniLM's vocabulary (trains in seconds)."""
    from adapter_bert.model.checkpoints import CheckpointError, default_backbone_dir
    from tests.runner_utils import write_tiny_backbone
    try:
        vocab = Path(default_backbone_dir()) / "vocab.txt"
    except CheckpointError as e:
        pytest.skip(str(e))
    return write_tiny_backbone(tmp_path_factory.mktemp("console_bert"), vocab)


def run_script(script: str, argv) -> subprocess.CompletedProcess:
    """The script with stdout and stderr to pipes and the user's default environment
    (no TF_CPP_MIN_LOG_LEVEL, which the test process sets)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", console.RAW_VARIABLE)}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, str(REPO / script), *map(str, argv)],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=env)


def console_lines(result: subprocess.CompletedProcess):
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stderr + result.stdout
    assert "\r" not in text
    return [line for line in text.splitlines() if line.strip()]


def assert_reads_well(lines, max_lines=MAX_LINES):
    body = [ABSL_PREFIX.sub("", line) for line in lines]
    repeated = [line for line, n in Counter(body).items() if n > 1]
    assert not repeated, "\n".join(lines)
    assert len(lines) <= max_lines, "\n".join(lines)
    assert sum(line.startswith("trainable params: ") for line in lines) == 1
    text = "\n".join(lines)
    for noise in ("*** Example ***", "guid: ", "input_ids: ", "InitializeLog",
                  "oneDNN custom operations", "WARNING:tensorflow", "Sharding callback"):
        assert noise not in text, noise
    if not console.nvidia_driver_present():
        assert "cuda drivers" not in text and "cuInit" not in text


@pytest.mark.slow
def test_classifier_console(tiny_backbone, tmp_path):
    data = write_mrpc(tmp_path / "mrpc")
    common = ["--task_name=MRPC", f"--data_dir={data}",
              f"--init_checkpoint={tiny_backbone / 'bert_model.ckpt'}", "--max_seq_length=32",
              "--adapter_size=8", "--eval_batch_size=4", "--predict_batch_size=4"]
    trained = run_script("run_classifier.py", [
        "--do_train", "--do_eval", "--do_predict", f"--output_dir={tmp_path / 'out'}",
        "--train_batch_size=8", "--num_train_epochs=1", *common])
    lines = console_lines(trained)
    assert_reads_well(lines)
    text = "\n".join(lines)
    # Google's useful lines, the new-weights wording, one short optimizer line.
    assert "***** Training: 40 examples, batch 8, 5 steps (0 warmup) *****" in text
    loads = [line for line in lines if "weights: loaded " in line]
    assert len(loads) == 1
    assert re.search(r"weights: loaded \d+ from .*; 18 new \(adapters 16, head 2\) "
                     r"initialised$", loads[0]), loads[0]
    optimizer = [ABSL_PREFIX.sub("", line) for line in lines if "Optimizer: " in line]
    assert len(optimizer) == 1 and len(optimizer[0]) < 120, optimizer
    assert "pooler was never trained" in text  # it trains: say so
    # Progress: a line per step (5 steps) and per eval batch (5 batches), no bar.
    assert [line.split(",")[0] for line in lines if line.startswith("train: ")] == \
        [f"train: {i}/5 steps (" + f"{20 * i}%)" for i in range(1, 6)]
    assert sum(line.startswith("eval dev: ") for line in lines) == 5
    assert sum(line.startswith("predict test: ") for line in lines) == 2
    assert re.search(r"^eval_accuracy = [\d.]+$", trained.stdout, re.M)
    assert f"Results written to {tmp_path / 'out' / 'eval_results.txt'}" in text
    assert f"predictions: {tmp_path / 'out' / 'test_results.tsv'}" in trained.stdout
    results = (tmp_path / "out" / "eval_results.txt").read_text()
    assert "global_step = 5" in results.splitlines()
    assert len((tmp_path / "out" / "test_results.tsv").read_text().splitlines()) == 6

    # Evaluating a trained adapter: nothing trains, so no pooler warning.
    evaluated = run_script("run_classifier.py", [
        "--do_eval", f"--output_dir={tmp_path / 'eval'}",
        f"--load_adapter={tmp_path / 'out' / 'adapter'}", *common])
    lines = console_lines(evaluated)
    assert_reads_well(lines)
    assert not any("pooler" in line for line in lines), lines
    assert sum(line.startswith("eval dev: ") for line in lines) == 5

    # Ablating the trained adapter (the third root script): one table line per cell.
    ablated = run_script("ablate_adapters.py", [
        f"--output_dir={tmp_path / 'ablation'}", f"--load_adapter={tmp_path / 'out' / 'adapter'}",
        "--ablation_metric=eval_loss", *common])
    assert_reads_well(console_lines(ablated), max_lines=MAX_LINES)
    stored = json.loads((tmp_path / "ablation" / "ablation.json").read_text())
    assert [(c["first"], c["last"]) for c in stored["cells"]] == [(0, 0), (0, 1), (1, 1)]


@pytest.mark.slow
def test_squad_console(tiny_backbone, tmp_path):
    train = write_squad(tmp_path / "train.json", 16, seed=1)
    dev = write_squad(tmp_path / "dev.json", 6, seed=2)
    result = run_script("run_squad.py", [
        "--do_train", "--do_predict", f"--train_file={train}", f"--predict_file={dev}",
        f"--output_dir={tmp_path / 'out'}", f"--init_checkpoint={tiny_backbone}",
        "--max_seq_length=64", "--max_query_length=16", "--doc_stride=32",
        "--train_batch_size=8", "--predict_batch_size=4", "--num_train_epochs=1",
        "--adapter_size=8"])
    lines = console_lines(result)
    assert_reads_well(lines)
    assert [line.split(",")[0] for line in lines if line.startswith("train: ")] == \
        ["train: 1/2 steps (50%)", "train: 2/2 steps (100%)"]
    assert sum(line.startswith("predict: ") for line in lines) == 2
    assert re.search(r"^f1 = [\d.]+$", result.stdout, re.M)
    predictions = json.loads((tmp_path / "out" / "predictions.json").read_text())
    assert sorted(predictions) == [f"q2-{i}" for i in range(6)]
