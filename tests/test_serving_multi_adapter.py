"""One SavedModel serving several adapters on one backbone: each row equals the
single-task export's output; unknown tasks fail clearly; export_model.py (tiny backbone)."""

import json

import numpy as np
import pytest

from tests.runner_utils import run_subprocess

pytest.importorskip("tensorflow_text", reason="the [serving] extra (tensorflow-text) is not "
                                              "installed")

import tensorflow as tf  # noqa: E402

MAX_LEN = 32
# name -> labels (None: regression)
TASKS = {"mrpc": ["0", "1"], "mnli": ["contradiction", "entailment", "neutral"], "stsb": None}


@pytest.fixture(scope="module")
def adapters(backbone, tmp_path_factory):
    """Adapter directories with random (not identity) adapters, LayerNorms and heads."""
    from adapter_bert.model.config import AdapterConfig
    from adapter_bert.adapters.multitask import MultiAdapterModel
    root = tmp_path_factory.mktemp("adapters")
    model = MultiAdapterModel.from_pretrained(str(backbone / "bert_model.ckpt"))
    rng = np.random.default_rng(0)
    dirs = {}
    for name, labels in TASKS.items():
        model.add_adapter(name, AdapterConfig(size=4), num_labels=len(labels or [0]),
                          labels=labels)
        for variable in model.adapter_variables(name).values():
            variable.assign_add(rng.normal(0, 0.2, variable.shape).astype("float32"))
        model.save_adapter(str(root / name), name)
        dirs[name] = root / name
    return dirs


@pytest.fixture(scope="module")
def multi_export(backbone, adapters, tmp_path_factory):
    from adapter_bert.serving import export_multi_adapter
    out = tmp_path_factory.mktemp("multi") / "model"
    export_multi_adapter([str(d) for d in adapters.values()], str(out),
                         str(backbone / "bert_model.ckpt"), max_seq_length=MAX_LEN)
    return out


def single_export(backbone, adapter_dir, labels, out):
    from adapter_bert.adapters.files import adapter_config_of, load_trained_weights
    from adapter_bert.adapters.models import load_pretrained
    from adapter_bert.serving import export_classifier
    model = load_pretrained(str(backbone / "bert_model.ckpt"), adapter_config_of(str(adapter_dir)),
                            head="classifier", num_labels=len(labels or [0]))
    load_trained_weights(model, str(adapter_dir))
    return export_classifier(model, str(out), str(backbone / "vocab.txt"), True, MAX_LEN,
                             labels, pair=True)


TEXTS_A = ["The cat sat on the mat.", "Stocks fell sharply.", "", "A man plays a guitar.",
           "Two dogs run in the park.", "It rained all day long in the city of London.",
           "Yes.", "No way!"]
TEXTS_B = ["A cat was on a mat.", "", "Something.", "A man is playing music.",
           "Dogs are running.", "London was sunny.", "", "Sure thing."]


@pytest.mark.slow
def test_each_row_equals_its_single_task_export(backbone, adapters, multi_export, tmp_path):
    multi = tf.saved_model.load(str(multi_export)).signatures["serving_default"]
    tasks = list(TASKS)
    rows = [tasks[i % len(tasks)] for i in range(len(TEXTS_A))]
    mixed = multi(task=tf.constant(rows), text_a=tf.constant(TEXTS_A), text_b=tf.constant(TEXTS_B))
    assert mixed["probabilities"].shape == (len(rows), 3)
    for task, labels in TASKS.items():
        path = single_export(backbone, adapters[task], labels, tmp_path / task)
        single = tf.saved_model.load(path).signatures["serving_default"](
            text_a=tf.constant(TEXTS_A), text_b=tf.constant(TEXTS_B))
        mine = np.array([r == task for r in rows])
        if labels is None:
            np.testing.assert_allclose(mixed["score"].numpy()[mine], single["score"].numpy()[mine],
                                       atol=1e-6)
            assert not mixed["probabilities"].numpy()[mine].any()
            assert set(mixed["label"].numpy()[mine]) == {b""}
            continue
        width = len(labels)
        np.testing.assert_allclose(mixed["probabilities"].numpy()[mine, :width],
                                   single["probabilities"].numpy()[mine], atol=1e-6)
        assert not mixed["probabilities"].numpy()[mine, width:].any()
        np.testing.assert_array_equal(mixed["label"].numpy()[mine], single["label"].numpy()[mine])
        np.testing.assert_allclose(mixed["score"].numpy()[mine],
                                   single["probabilities"].numpy()[mine].max(1), atol=1e-6)


@pytest.mark.slow
def test_unknown_task_is_a_clear_error_and_an_empty_batch_is_empty(multi_export):
    serve = tf.saved_model.load(str(multi_export)).signatures["serving_default"]
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        serve(task=tf.constant(["mrpc", "qqp"]), text_a=tf.constant(["a", "b"]),
              text_b=tf.constant(["c", "d"]))
    message = error.value.message
    assert "unknown task: the task of each row must be one of mrpc, mnli, stsb; got" in message
    assert "[qqp]" in message
    empty = serve(task=tf.constant([], tf.string), text_a=tf.constant([], tf.string),
                  text_b=tf.constant([], tf.string))
    assert empty["probabilities"].shape == (0, 3) and empty["label"].shape == (0,)


@pytest.mark.slow
def test_backbone_is_stored_once(backbone, adapters, multi_export):
    """Size on disk: the one-adapter export plus about the other adapters' files."""
    from adapter_bert.serving import export_multi_adapter
    export_multi_adapter([str(adapters["mrpc"])], str(multi_export.parent / "one"),
                               str(backbone / "bert_model.ckpt"), max_seq_length=MAX_LEN)
    size = lambda path: sum(p.stat().st_size for p in path.glob("variables/*"))  # noqa: E731
    extra = sum((adapters[t] / "adapter_model.safetensors").stat().st_size for t in ("mnli", "stsb"))
    grown = size(multi_export) - size(multi_export.parent / "one")
    assert 0.9 * extra < grown < 1.2 * extra
    info = json.loads((multi_export / "export_info.json").read_text())
    assert info["tasks"] == list(TASKS) and info["labels"]["stsb"] is None


@pytest.mark.slow
def test_export_model_command(backbone, adapters, tmp_path):
    out = tmp_path / "cli"
    # As installed (python -m), then as the clone's root script.
    done = run_subprocess("-m adapter_bert.export_model", [
        f"--adapters={adapters['mrpc']},{adapters['mnli']}", f"--export_dir={out}",
        f"--init_checkpoint={backbone / 'bert_model.ckpt'}", f"--max_seq_length={MAX_LEN}"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "export_info.json").read_text())["tasks"] == ["mrpc", "mnli"]
    done = run_subprocess("export_model.py", [
        f"--adapters={adapters['mrpc']},{adapters['mrpc']}", f"--export_dir={tmp_path / 'dup'}",
        f"--init_checkpoint={backbone / 'bert_model.ckpt'}"])
    assert done.returncode == 1 and not (tmp_path / "dup").exists()
    assert done.stderr.strip().splitlines()[-1].startswith("export_model.py: error: ")
    assert "give each one its own name" in done.stderr


@pytest.mark.slow
def test_export_model_dtype_bfloat16_answers_as_float32(backbone, adapters, multi_export, tmp_path):
    out = tmp_path / "bf16"
    done = run_subprocess("-m adapter_bert.export_model", [
        f"--adapters={adapters['mrpc']},{adapters['mnli']},{adapters['stsb']}",
        f"--export_dir={out}", f"--init_checkpoint={backbone / 'bert_model.ckpt'}",
        f"--max_seq_length={MAX_LEN}", "--dtype=mixed_bfloat16"])
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [list(TASKS)[i % len(TASKS)] for i in range(len(TEXTS_A))]
    feed = dict(task=tf.constant(rows), text_a=tf.constant(TEXTS_A), text_b=tf.constant(TEXTS_B))
    bf16 = tf.saved_model.load(str(out)).signatures["serving_default"](**feed)
    fp32 = tf.saved_model.load(str(multi_export)).signatures["serving_default"](**feed)
    assert bf16["probabilities"].dtype == tf.float32
    difference = np.abs(bf16["probabilities"].numpy() - fp32["probabilities"].numpy()).max()
    assert 0 < difference < 0.05  # computed in bfloat16 (not float32), and close to it
    np.testing.assert_allclose(bf16["score"].numpy(), fp32["score"].numpy(), atol=0.05)
