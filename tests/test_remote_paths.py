"""Every path on a TensorFlow filesystem: runs with all files on `ram://` equal local runs.

`ram://` is TensorFlow's in-memory filesystem; it stands in for `gs://` and the other
`tf.io.gfile` filesystems (it lives in one process, so runs happen in process).
"""

import dataclasses
import json

import numpy as np
import pytest

from adapter_bert import io_utils
from tests.remote_utils import run_spec
from tests.runner_utils import run_subprocess
from tests.test_run_squad import write_slice


def mrpc_subset(mrpc_dir, target, rows=(40, 24, 12)):
    """The first rows of MRPC's train, dev and test TSVs (plus headers)."""
    target.mkdir(parents=True)
    for name, count in zip(("train.tsv", "dev.tsv", "test.tsv"), rows):
        lines = (mrpc_dir / name).read_text(encoding="utf-8").splitlines(True)
        (target / name).write_text("".join(lines[:count + 1]), encoding="utf-8")
    return target


def classifier_argv(*extra):
    return ["--task_name=MRPC", "--data_dir={data}", "--init_checkpoint={bert}/bert_model.ckpt",
            "--output_dir={root}/out", "--max_seq_length=32", "--train_batch_size=16",
            "--eval_batch_size=16", "--predict_batch_size=16", "--learning_rate=1e-3",
            "--adapter_size=8", "--num_train_epochs=1", "--save_checkpoints_steps=1",
            "--seed=3", "--deterministic", *extra]


def listing(directory):
    """Relative paths under `directory`, TensorBoard event files by folder only."""
    return sorted(str(p.relative_to(directory)) if "tfevents" not in p.name
                  else str(p.parent.relative_to(directory)) + "/<events>"
                  for p in directory.rglob("*") if p.is_file())


def assert_same_outputs(local, remote, names):
    assert listing(local) == listing(remote)
    for name in names:
        assert (local / name).read_bytes() == (remote / name).read_bytes(), name


@pytest.fixture(scope="module")
def classifier_runs(backbone, mrpc_dir, tmp_path_factory):
    """train+eval+predict on local disk and on ram://, then predict-only from the ram://
    adapter; outputs of the ram:// runs are copied back to local folders."""
    tmp = tmp_path_factory.mktemp("remote_classifier")
    stage = {"data": str(mrpc_subset(mrpc_dir, tmp / "MRPC")), "bert": str(backbone)}
    argv = classifier_argv("--do_train", "--do_eval", "--do_predict")
    assert run_spec({"module": "run_classifier", "root": str(tmp / "local"), "stage": stage,
                     "argv": argv}) == 0
    assert run_spec({"module": "run_classifier", "root": "ram://classifier", "stage": stage,
                     "argv": argv, "fetch": {"{root}/out": str(tmp / "remote")}}) == 0
    assert run_spec({"module": "run_classifier", "root": "ram://classifier",
                     "argv": [a.replace("--output_dir={root}/out", "--output_dir={root}/again")
                              for a in
                              classifier_argv("--do_predict", "--load_adapter={root}/out/adapter",
                                              "--feature_cache_dir={root}/cache")],
                     "fetch": {"{root}/again": str(tmp / "again")}}) == 0
    return tmp


@pytest.mark.slow
def test_classifier_on_ram_equals_local(classifier_runs):
    local, remote = classifier_runs / "local" / "out", classifier_runs / "remote"
    assert_same_outputs(local, remote, ["eval_results.txt", "test_results.tsv",
                                        "adapter/adapter_model.safetensors",
                                        "adapter/adapter_config.json"])
    files = listing(remote)
    assert "checkpoints/checkpoint" in files and "logs/train/<events>" in files
    assert sum(name.startswith("feature_cache/") and name.endswith(".npz")
               for name in files) == 3
    assert not [name for name in files if name.endswith(".tmp")]


@pytest.mark.slow
def test_adapter_loaded_from_ram_predicts_the_same(classifier_runs):
    again = classifier_runs / "again"
    assert (again / "test_results.tsv").read_bytes() == \
        (classifier_runs / "remote" / "test_results.tsv").read_bytes()
    [entry] = io_utils.listdir("ram://classifier/cache")  # --feature_cache_dir on ram://
    assert "-test-" in entry and entry.endswith(".npz")


@pytest.mark.slow
def test_squad_on_ram_equals_local(backbone, squad_dir, tmp_path):
    squad = squad_dir
    train = write_slice(squad / "train-v1.1-subset.json", tmp_path / "train.json", paragraphs=2)
    dev = write_slice(squad / "dev-v1.1.json", tmp_path / "dev.json", paragraphs=2)
    stage = {"train": str(train), "dev": str(dev), "bert": str(backbone)}
    argv = ["--do_train", "--do_predict", "--train_file={train}", "--predict_file={dev}",
            "--init_checkpoint={bert}/bert_model.ckpt", "--output_dir={root}/out",
            "--max_seq_length=64", "--doc_stride=16", "--max_query_length=16",
            "--train_batch_size=16", "--predict_batch_size=32", "--learning_rate=1e-3",
            "--adapter_size=8", "--num_train_epochs=1", "--save_checkpoints_steps=2",
            "--seed=3", "--deterministic"]
    runs = [{"module": "run_squad", "root": str(tmp_path / "local"), "stage": stage,
             "argv": argv},
            {"module": "run_squad", "root": "ram://squad", "stage": stage, "argv": argv,
             "fetch": {"{root}/out": str(tmp_path / "remote")}}]
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    done = run_subprocess("tests/remote_utils.py", [str(tmp_path / "runs.json")])
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_outputs(tmp_path / "local" / "out", tmp_path / "remote",
                        ["eval_results.txt", "eval_results.json", "predictions.json",
                         "nbest_predictions.json", "adapter/adapter_model.safetensors"])
    predictions = json.loads((tmp_path / "remote" / "predictions.json").read_text())
    assert len(predictions) > 10


def error_line(capsys, argv, root):
    code = run_spec({"module": "run_classifier", "root": root, "argv": argv})
    assert code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    return lines[-1].replace(root, "<root>")


@pytest.mark.parametrize("change, expected", [
    ({"--data_dir={data}": "--data_dir={root}/missing/MRPC"}, "directory not found"),
    ({"--init_checkpoint={bert}/bert_model.ckpt": "--init_checkpoint={root}/bert/none.ckpt"},
     "no checkpoint found"),
    ({"--output_dir={root}/out": "--output_dir={root}/data/train.tsv"}, "is a file"),
])
def test_bad_remote_paths_fail_like_local_ones(backbone, mrpc_dir, tmp_path, capsys,
                                               change, expected):
    data = mrpc_subset(mrpc_dir, tmp_path / "MRPC")
    lines = []
    for root in (str(tmp_path / "disk"), "ram://bad"):
        io_utils.makedirs(root + "/bert")
        io_utils.makedirs(root + "/data")
        io_utils.atomic_write_bytes(root + "/data/train.tsv", (data / "train.tsv").read_bytes())
        argv = [change.get(arg, arg).format(root=root, data=root + "/data",
                                            bert=str(backbone))
                for arg in classifier_argv("--do_train", "--do_eval")]
        lines.append(error_line(capsys, argv, root))
    assert lines[0] == lines[1]
    assert lines[0].startswith("run_classifier.py: error: ") and expected in lines[0]


def test_hugging_face_folder_on_ram_reads_like_local(minilm_dir):
    """config.json, model.safetensors (read from bytes), vocab.txt, tokenizer_config.json."""
    from adapter_bert.data.tokenization import checkpoint_lower_case
    from adapter_bert.model.checkpoints import read_weights, resolve_backbone
    from adapter_bert.model.config import BertConfig
    from tests.remote_utils import copy_to_remote
    remote = "ram://hf/minilm"
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"):
        copy_to_remote(minilm_dir / name, f"{remote}/{name}")
    local_files, remote_files = resolve_backbone(str(minilm_dir)), resolve_backbone(remote)
    assert remote_files == dataclasses.replace(
        local_files, **{k: getattr(local_files, k).replace(str(minilm_dir), remote)
                        for k in ("config_file", "weights", "vocab_file")})
    assert BertConfig.from_json_file(remote_files.config_file) == \
        BertConfig.from_json_file(local_files.config_file)
    local, far = read_weights(local_files), read_weights(remote_files)
    assert sorted(far) == sorted(local) and len(far) > 90
    for name in local:
        assert np.array_equal(far[name], local[name]), name
    assert checkpoint_lower_case(remote) == checkpoint_lower_case(str(minilm_dir)) is True
