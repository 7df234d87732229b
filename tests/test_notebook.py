"""The Colab TPU notebook's non-TPU path runs end to end (cells executed in order)."""

import json
import os
import subprocess
import sys

from tests.conftest import REPO
from tests.runner_utils import read_results, write_tiny_backbone

NOTEBOOK = REPO / "examples" / "colab_tpu_mrpc.ipynb"

RUNNER = """
import json, sys
cells = json.load(open(sys.argv[1]))["cells"]
namespace = {}
for cell in cells:
    if cell["cell_type"] == "code":
        exec(compile("".join(cell["source"]), "<notebook cell>", "exec"), namespace)
print("ON_TPU =", namespace["ON_TPU"])
"""


def test_notebook_runs_without_a_tpu(tmp_path, shared_dir):
    backbone = write_tiny_backbone(tmp_path / "tiny", shared_dir / "models/google-bert-mini-index/vocab.txt")
    out = tmp_path / "out"
    env = dict(os.environ, ADAPTER_BERT_DIR=str(REPO), PYTHONPATH=str(REPO),
               MRPC_DIR=str(shared_dir / "data/glue/MRPC"), OUTPUT_DIR=str(out),
               TF_CPP_MIN_LOG_LEVEL="2",
               EXTRA_FLAGS=f"--init_checkpoint={backbone}/bert_model.ckpt --max_seq_length=32 "
                           f"--num_train_epochs=0.01 --train_batch_size=16 --adapter_size=8")
    env.pop("COLAB_TPU_ADDR", None)
    env.pop("TPU_NAME", None)
    result = subprocess.run([sys.executable, "-c", RUNNER, str(NOTEBOOK)], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ON_TPU = False" in result.stdout
    assert "no TPU: OneDeviceStrategy with 1 replica(s)" in result.stdout
    assert "eval_accuracy = " in result.stdout and "adapter_model.safetensors" in result.stdout
    assert read_results(out / "eval_results.txt")["global_step"] == str(int(3668 / 16 * 0.01))


def test_notebook_is_valid_json_with_the_tpu_cells():
    notebook = json.loads(NOTEBOOK.read_text())
    source = "".join("".join(c["source"]) for c in notebook["cells"])
    assert notebook["nbformat"] == 4
    assert 'get_strategy("tpu" if ON_TPU else "auto", use_tpu=ON_TPU)' in source
    assert "--use_tpu={ON_TPU}" in source
