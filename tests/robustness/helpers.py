"""Helpers of the robustness tests: flags, output-dir snapshots, one-error-line checks."""

import re
from pathlib import Path

from tests.runner_utils import flag_list

TRACEBACK = "Traceback (most recent call last)"
PREVIOUS = {"eval_results.txt": "eval_accuracy = 0.5\nglobal_step = 7\n",
            "test_results.tsv": "0.25\t0.75\n",
            "notes/keep.txt": "written by an earlier run\n"}


def write_lines(path: Path, lines, raw: bytes = b""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8") + raw)
    return path


def write_mrpc_dir(root: Path, mrpc_lines) -> Path:
    """A small MRPC folder (96 train, 40 dev, 8 test examples) under `root`."""
    train, dev, test = mrpc_lines
    for name, lines in (("train.tsv", train), ("dev.tsv", dev), ("test.tsv", test)):
        write_lines(root / "MRPC" / name, lines)
    return root / "MRPC"


def classifier_flags(backbone, output_dir, data_dir, **overrides):
    values = {"task_name": "MRPC", "data_dir": data_dir,
              "init_checkpoint": backbone / "bert_model.ckpt", "output_dir": output_dir,
              "max_seq_length": 32, "train_batch_size": 16, "eval_batch_size": 32,
              "predict_batch_size": 32, "learning_rate": 1e-3, "adapter_size": 8,
              "num_train_epochs": 1, "save_checkpoints_steps": 2}
    return flag_list(values, overrides)


# Same flags, same machine: bit-identical runs (the reference a resumed run must equal).
DETERMINISTIC = ["--deterministic", "--seed=7"]


def classifier_argv(backbone, out, data):
    """A deterministic train+eval+predict MRPC run: 96 examples at batch 16, 6 steps,
    checkpoints after steps 2, 4 and 6."""
    return ["--do_train", "--do_eval", "--do_predict", *DETERMINISTIC,
            *classifier_flags(backbone, out, data)]


def fill_output_dir(output_dir: Path) -> dict:
    """Puts the outputs of an 'earlier run' in output_dir; returns their bytes by path."""
    for name, text in PREVIOUS.items():
        (output_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (output_dir / name).write_text(text)
    return snapshot(output_dir)


def snapshot(directory: Path) -> dict:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def assert_one_error_line(stderr: str, program: str, pattern: str) -> str:
    """Exactly one `program: error:` line, matching `pattern`, and no traceback."""
    errors = [line for line in stderr.splitlines() if line.startswith(f"{program}: error: ")]
    assert len(errors) == 1, stderr[-3000:]
    assert re.search(pattern, errors[0]), errors[0]
    assert TRACEBACK not in stderr, stderr[-3000:]
    return errors[0]


def squad_flags(backbone, output_dir, **overrides):
    values = {"init_checkpoint": backbone / "bert_model.ckpt", "output_dir": output_dir,
              "max_seq_length": 64, "doc_stride": 16, "max_query_length": 16,
              "train_batch_size": 8, "predict_batch_size": 32, "learning_rate": 1e-3,
              "adapter_size": 8, "num_train_epochs": 1, "save_checkpoints_steps": 2}
    return flag_list(values, overrides)
