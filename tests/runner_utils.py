"""Helpers to run the command-line entry points in tests (in-process or as subprocesses)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def write_tiny_backbone(directory: Path, vocab_file: Path, dropout: float = 0.1,
                        seed: int = 0) -> Path:
    """Writes a random 2-layer BERT as a Google TF1 checkpoint folder with a real vocab.

    The kernels and embedding tables are drawn from `seed` (LayerNorms and the zero biases
    as initialised), so every session tests the same network: a test's margins do not
    depend on the draw of the day. `dropout` (hidden and attention) 0 makes training a
    deterministic function of the batches, for comparing runs whose random streams differ
    (XLA, several replicas)."""
    import numpy as np

    from adapter_bert.model.checkpoints import save_tf1_checkpoint
    from adapter_bert.model.config import BertConfig
    from adapter_bert.model.encoder import BertNetwork
    directory.mkdir(parents=True, exist_ok=True)
    vocab_size = sum(1 for _ in open(vocab_file, encoding="utf-8"))
    config = BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    bert = BertNetwork(config)
    bert.build_with_dummy_inputs()
    rng = np.random.default_rng(seed)
    for variable in bert.weights:
        if not any(part in variable.name for part in ("gamma", "beta", "bias")):
            draw = rng.normal(0.0, config.initializer_range, variable.shape)
            variable.assign(np.clip(draw, -2 * config.initializer_range,
                                    2 * config.initializer_range).astype("float32"))
    save_tf1_checkpoint(bert, str(directory / "bert_model.ckpt"))
    (directory / "bert_config.json").write_text(config.to_google_json())
    shutil.copy(vocab_file, directory / "vocab.txt")
    return directory


def flag_list(defaults: dict, overrides: dict) -> list:
    """`--name=value` flags from `defaults` updated by `overrides`; None leaves a flag out."""
    values = {**defaults, **overrides}
    return [f"--{k}={v}" for k, v in values.items() if v is not None]


def run_in_process(module_name: str, argv):
    """Parses `argv` into absl FLAGS and runs the runner `adapter_bert.<module_name>`'s main
    (run_classifier, run_squad, ablate_adapters); returns (its exit code, the module).

    The run's Keras dtype policy (--dtype) is undone afterwards, as the end of a process
    would: a later test in this worker builds its layers in float32."""
    import importlib

    import tf_keras as keras
    from absl import flags
    module = importlib.import_module("adapter_bert." + module_name)
    values = flags.FLAGS
    values.unparse_flags()
    values([module_name + ".py", *argv])
    policy = keras.mixed_precision.global_policy()
    try:
        return module.main(), module
    finally:
        keras.mixed_precision.set_global_policy(policy)


def run_killable(script: str, argv, **hooks) -> subprocess.CompletedProcess:
    """Runs the runner `script` (run_classifier.py: the module adapter_bert.run_classifier)
    with `argv` under tests/killer.py's hooks, set by `hooks` (KILL_AFTER_CHECKPOINT,
    KILL_BEFORE_CHECKPOINT, KILL_WRITING, REPLACED_LOG)."""
    module = "adapter_bert." + script.removesuffix(".py")
    return run_subprocess("tests/killer.py", [module, *map(str, argv)],
                          env={k: str(v) for k, v in hooks.items()})


def run_subprocess(script: str, argv, timeout=600, env=None,
                   **kwargs) -> subprocess.CompletedProcess:
    """Runs `python script argv...` from the repository root, capturing output; `env`
    adds environment variables. `script` is a file of the checkout (run_classifier.py, the
    clone's root script) or, with `-m `, a module (`-m adapter_bert.run_classifier`)."""
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO), **(env or {}))
    target = script.split() if script.startswith("-m ") else [str(REPO / script)]
    return subprocess.run([sys.executable, *target, *argv], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=environment, **kwargs)


def python_output(code: str, env=None, timeout: int = 300) -> str:
    """The standard output of `python -c code` run from the repository root (`env`: the
    whole environment, default this one's); fails the test, showing its stderr, unless it
    exits with status 0."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def read_results(path: Path) -> dict:
    """eval_results.txt's `key = value` lines -> dict of strings (the package's reader)."""
    from adapter_bert.io_utils import read_key_values
    return read_key_values(str(path))
