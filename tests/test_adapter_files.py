"""Adapter files: backbone fingerprint, shape check, format versions, named adapters."""

import json
import logging

import numpy as np
import pytest

from adapter_bert.adapters.files import (FORMAT_VERSION, AdapterFileError, adapter_config_of,
                                        backbone_fingerprint, load_trained_weights,
                                        save_trained_weights)
from adapter_bert.model.config import AdapterConfig, BertConfig
from adapter_bert.model.encoder import BertNetwork
from adapter_bert.adapters.multitask import MultiAdapterModel
from adapter_bert.model.naming import tf1_variables
from adapter_bert.adapters.tuning import apply_tuning
from adapter_bert.adapters.models import BertClassifier
from tests.conftest import tiny_inputs

LOGGER = "adapter_bert.adapters.files"


def classifier(cfg, adapter_config=None, source=None):
    """A built BertClassifierNetwork; with `source`, its backbone weights are copied from it."""
    model = BertClassifier(cfg, 2, adapter_config or AdapterConfig(size=4, init_scale=0.2))
    model(tiny_inputs())
    if source is not None:
        theirs = tf1_variables(source)
        for name, variable in tf1_variables(model).items():
            if name.startswith("bert/") and "/adapters/" not in name and name in theirs:
                variable.assign(theirs[name])
    apply_tuning(model, "adapter", train_pooler=False)
    return model


def test_fingerprint_is_stable_and_covers_only_frozen_weights(tiny_config):
    first = classifier(tiny_config)
    copy = classifier(tiny_config, source=first)
    assert backbone_fingerprint(first) == backbone_fingerprint(copy)
    assert backbone_fingerprint(first) == backbone_fingerprint(first.bert)
    fingerprint = backbone_fingerprint(copy)
    assert fingerprint.startswith("sha256:") and len(fingerprint) == len("sha256:") + 16
    # What adapter tuning trains does not enter the fingerprint...
    copy.bert.embeddings.layer_norm.gamma.assign(np.full([16], 2.0, "float32"))
    copy.bert.encoder.transformer_layers[0].ffn_output_block.modification(
        "adapter").adapter.weights1.assign_add(
        np.ones([16, 4], "float32"))
    assert backbone_fingerprint(copy) == fingerprint
    # ...a frozen weight does, even a tiny change of a few values.
    kernel = copy.bert.encoder.transformer_layers[1].intermediate.dense.kernel
    kernel.assign(kernel.numpy() + np.eye(16, 32, dtype="float32") * 1e-6)
    assert backbone_fingerprint(copy) != fingerprint


def test_loading_onto_another_backbone_of_the_same_shape_warns(tiny_config, tmp_path, caplog):
    trained = classifier(tiny_config)
    save_trained_weights(trained, str(tmp_path / "ad"), task="mrpc")
    stored = json.loads((tmp_path / "ad" / "adapter_config.json").read_text())
    assert stored["format_version"] == FORMAT_VERSION == 2
    assert stored["backbone_fingerprint"] == backbone_fingerprint(trained)
    same = classifier(tiny_config, source=trained)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        load_trained_weights(same, str(tmp_path / "ad"))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    np.testing.assert_array_equal(same(tiny_inputs(), training=False),
                                  trained(tiny_inputs(), training=False))
    other = classifier(tiny_config)  # same shape, freshly initialised weights
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        load_trained_weights(other, str(tmp_path / "ad"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert stored["backbone_fingerprint"] in warnings[0]
    assert backbone_fingerprint(other) in warnings[0]


def test_named_adapter_loading_also_warns_on_other_weights(tiny_config, tmp_path, caplog):
    trained = classifier(tiny_config)
    save_trained_weights(trained, str(tmp_path / "ad"), task="mrpc")
    bert = BertNetwork(tiny_config)
    bert.build_with_dummy_inputs()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        MultiAdapterModel(bert).load_adapter(str(tmp_path / "ad"))
    assert any("fingerprint" in r.getMessage() for r in caplog.records)


def test_another_backbone_shape_fails_clearly(tiny_config, tmp_path):
    save_trained_weights(classifier(tiny_config), str(tmp_path / "ad"))
    wider = BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=32, max_position_embeddings=64)
    with pytest.raises(AdapterFileError, match="another backbone shape .*hidden_size: file 16 vs model 32"):
        load_trained_weights(classifier(wider), str(tmp_path / "ad"))
    bert = BertNetwork(wider)
    bert.build_with_dummy_inputs()
    with pytest.raises(AdapterFileError, match="another backbone shape"):
        MultiAdapterModel(bert).load_adapter(str(tmp_path / "ad"))


def test_a_format_1_file_is_refused_in_one_line(tiny_config, tmp_path):
    """Pre-release files (no fingerprint, Houlsby only) are not read: one line says so."""
    trained = classifier(tiny_config)
    save_trained_weights(trained, str(tmp_path / "v1"), task="mrpc")
    path = tmp_path / "v1" / "adapter_config.json"
    description = json.loads(path.read_text())
    description["format_version"] = 1
    path.write_text(json.dumps(description))
    with pytest.raises(AdapterFileError, match=r"format_version 1 is not supported \(this "
                                               r"adapter_bert reads version 2; train the "
                                               r"adapter again"):
        load_trained_weights(classifier(tiny_config, source=trained), str(tmp_path / "v1"))


@pytest.mark.parametrize("version, message", [
    (3, "written by a newer adapter_bert: upgrade it"), ("two", "format_version 'two'"),
])
def test_unknown_format_versions_are_refused(tiny_config, tmp_path, version, message):
    save_trained_weights(classifier(tiny_config), str(tmp_path / "ad"))
    path = tmp_path / "ad" / "adapter_config.json"
    description = json.loads(path.read_text())
    description["format_version"] = version
    path.write_text(json.dumps(description))
    with pytest.raises(AdapterFileError, match=message):
        adapter_config_of(str(tmp_path / "ad"))


def test_weights_from_another_write_are_detected(tiny_config, tmp_path):
    """A run killed between the two file writes leaves a mixed pair: refused, not combined."""
    model = classifier(tiny_config)
    save_trained_weights(model, str(tmp_path / "a"), task="mrpc")
    other = classifier(tiny_config, source=model)
    save_trained_weights(other, str(tmp_path / "b"), task="mrpc")
    (tmp_path / "a" / "adapter_model.safetensors").write_bytes(
        (tmp_path / "b" / "adapter_model.safetensors").read_bytes())
    with pytest.raises(AdapterFileError, match="not the weights file adapter_config.json"):
        load_trained_weights(classifier(tiny_config, source=model), str(tmp_path / "a"))
    # intact: loads
    load_trained_weights(classifier(tiny_config, source=model), str(tmp_path / "b"))


def test_an_adapter_file_without_the_pooler_loads_into_an_adapter_holding_a_pooler_copy(
        tiny_config, tmp_path):
    """A run trained with --train_pooler=false, evaluated where "auto" copied the pooler:
    the copy holds the backbone's pooler, which the run used, so the outputs match."""
    import adapter_bert as ab
    from adapter_bert.adapters.files import (load_trained_weights, read_adapter_weights,
                                             save_trained_weights)
    trained = ab.BertClassifier(tiny_config, 2, AdapterConfig(size=4), adapter_name="t")
    trained(tiny_inputs())
    apply_tuning(trained, "adapter", train_pooler=False)
    for variable in trained.trainable_weights:
        variable.assign(variable + np.random.default_rng(1).normal(0, 0.1, variable.shape))
    save_trained_weights(trained, str(tmp_path / "t"), "t", ["a", "b"])
    assert not any(k.startswith("bert/pooler/") for k in read_adapter_weights(str(tmp_path / "t")))
    evaluated = ab.BertClassifier(tiny_config, 2, AdapterConfig(size=4), adapter_name="t")
    evaluated(tiny_inputs())
    ours = tf1_variables(evaluated)
    for name, variable in tf1_variables(trained).items():
        if name.startswith("bert/") and "/t/" not in name:
            ours[name].assign(variable)
    apply_tuning(evaluated, "adapter", train_pooler=True)  # gives the adapter a pooler copy
    assert "bert/pooler/dense/kernel" in evaluated.adapter_variables("t")
    load_trained_weights(evaluated, str(tmp_path / "t"))
    inputs = tiny_inputs()
    np.testing.assert_array_equal(evaluated(inputs, training=False), trained(inputs, training=False))


def test_a_classifier_file_without_its_output_bias_is_refused_by_both_loaders(
        tiny_config, tmp_path):
    """The head's size comes from its stored output_bias: a file recording a classifier
    head without one is refused in one line by model.load_adapter and ab.load_adapter."""
    import adapter_bert as ab
    from adapter_bert.adapters.files import (read_adapter_config, read_adapter_weights,
                                             write_adapter_files)
    from tests.adapter_api_helpers import base_backbone
    backbone = base_backbone(tiny_config)
    model = ab.BertClassifier(backbone, 3)
    model.add_adapter("t", AdapterConfig(size=4), labels=["a", "b", "c"])
    model(tiny_inputs())
    model.save_adapter(str(tmp_path / "whole"), "t")
    weights = read_adapter_weights(str(tmp_path / "whole"))
    assert weights["output_bias"].shape == (3,)
    description = read_adapter_config(str(tmp_path / "whole"))
    del weights["output_bias"]
    write_adapter_files(str(tmp_path / "cut"), weights, description)
    message = "cut: no output_bias weight for its classifier head"
    with pytest.raises(AdapterFileError, match=message):
        ab.BertClassifier(base_backbone(tiny_config), 3).load_adapter(str(tmp_path / "cut"))
    with pytest.raises(AdapterFileError, match=message):
        ab.load_adapter(str(tmp_path / "cut"), backbone=base_backbone(tiny_config))
    # The intact file loads, with its head's three outputs.
    assert ab.load_adapter(str(tmp_path / "whole"),
                           backbone=base_backbone(tiny_config)).num_labels == 3
