"""Adapter families as plug-ins: the one registry, LoRA's targets, dropout and merging,
and families of the user's own (the docs' example and one defined here) that train, save
and load through the same code as the built-in ones."""

import contextlib
import dataclasses
import importlib
import io
import json
import re
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

import adapter_bert as ab
from adapter_bert.adapters.files import (AdapterFileError, adapter_config_of,
                                        backbone_fingerprint, current_adapter_fields,
                                        load_trained_weights, save_trained_weights)
from adapter_bert.model.adapter_layers import ProjectionAdapter
from adapter_bert.adapters.named import add_named_adapter, delete_named_adapter, named_adapter_info
from adapter_bert.adapters.multitask import MultiAdapterModel
from adapter_bert.adapters.tuning import apply_tuning, parameter_summary
from adapter_bert.model.config import (AdapterConfig, ConfigError, adapter_families,
                                       adapter_family, register_adapter_family,
                                       unregister_adapter_family)
from adapter_bert.model.encoder import BertNetwork
from adapter_bert.model.families import PROJECTIONS, AdapterFamily, AdapterOption
from adapter_bert.model.checkpoints import checkpoint_variables
from adapter_bert.model.naming import tf1_variables
from adapter_bert.runners.ablation import adapters_disabled
from adapter_bert.adapters.models import BertClassifier, BertModel
from tests.conftest import REPO, tiny_inputs

M = 3
BUILT_IN = ("houlsby", "pfeiffer", "parallel", "lora")


@pytest.fixture
def still_config(tiny_config):
    """The tiny config without dropout: training steps are a function of the batch."""
    return dataclasses.replace(tiny_config, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)


def built(model, inputs=None):
    model(inputs if inputs is not None else tiny_inputs(), training=False)
    return model


def randomise_adapters(model, seed=0, stddev=0.3):
    """Moves every adapter weight away from its (identity) start."""
    rng = np.random.default_rng(seed)
    for name, variable in tf1_variables(model).items():
        if "/adapters/" in name:
            variable.assign(rng.normal(scale=stddev, size=variable.shape).astype("float32"))


def copy_backbone(source, target):
    """Copies the frozen backbone weights (everything outside the adapters and the head)."""
    theirs = tf1_variables(source)
    for name, variable in tf1_variables(target).items():
        if name.startswith("bert/") and "/adapters/" not in name and name in theirs:
            variable.assign(theirs[name])


def adapter_weight_count(model):
    return parameter_summary(model)["adapters"][0]


# ---------------------------------------------------------------- the registry
def test_built_in_families_are_registered_and_count_their_weights(tiny_config):
    assert tuple(f.name for f in adapter_families())[:4] == BUILT_IN
    h, i, layers = tiny_config.hidden_size, tiny_config.intermediate_size, 2
    bottleneck = 2 * h * M + M + h
    closed = {"houlsby": 2 * layers * bottleneck, "pfeiffer": layers * bottleneck,
              "parallel": layers * bottleneck, "lora": layers * 2 * M * 2 * h}
    for name in BUILT_IN:
        config = AdapterConfig(size=M, adapter_type=name)
        model = built(BertClassifier(tiny_config, 2, config))
        assert adapter_weight_count(model) == config.param_count(tiny_config) == closed[name]
    every = AdapterConfig(size=M, adapter_type="lora", lora_targets=list(PROJECTIONS),
                          leave_out=[0])
    model = built(BertClassifier(tiny_config, 2, every))
    expected = M * (4 * 2 * h + (h + i) + (i + h))  # one layer: six targets
    assert adapter_weight_count(model) == every.param_count(tiny_config) == expected


def test_runner_flags_offer_the_registered_families():
    from absl import flags
    from adapter_bert.command_line.flags import define_classifier_flags
    if "adapter_type" not in flags.FLAGS:  # another test may have defined them
        define_classifier_flags()
    choices = flags.FLAGS["adapter_type"].parser.enum_values
    assert tuple(choices[:4]) == BUILT_IN and choices[-1] == "resadapter"
    for option in ("lora_alpha", "lora_targets", "lora_dropout"):
        assert option in adapter_families()[3].options and option in flags.FLAGS


def _family(**overrides):
    values = dict(name="mine", layer=ab.HoulsbyAdapter,
                  param_count=lambda config, d_in, d_out: 0)
    return AdapterFamily(**{**values, **overrides})


@pytest.mark.parametrize("make, message", [
    (lambda: _family(name="Mine"), "must start with a letter"),
    (lambda: _family(slot="prefix"), "slot must be one of"),
    (lambda: _family(positions=("ffn",), default_positions="both"), "default_positions"),
    (lambda: _family(slot="projections"), "says which projections it updates"),
    (lambda: _family(layer=object), "from_adapter_config"),
    (lambda: _family(options={"size": 3}), "common field"),
    (lambda: _family(options={"mine_rate": AdapterOption(2.0, _unit_interval)}),
     "mine_rate must be in"),
    (lambda: register_adapter_family(_family(name="lora")), "is built in"),
    (lambda: register_adapter_family(_family(name="resadapter")), "is built in"),
    (lambda: register_adapter_family(_family(options={"lora_alpha": None})),
     "belong to family 'lora'"),
    (lambda: register_adapter_family(_family(options={"family": 1})),
     "are AdapterConfig attributes"),
])
def test_inconsistent_families_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make()
    assert "mine" not in [f.name for f in adapter_families()]


def _unit_interval(value):
    if not 0 <= float(value) <= 1:
        raise ValueError(f"mine_rate must be in [0, 1], got {value}")
    return float(value)


def test_config_options_follow_their_family():
    lora = AdapterConfig(size=4, adapter_type="lora", lora_targets="value, query",
                         lora_dropout=0.25)
    assert lora.lora_targets == ("query", "value") and lora.lora_dropout == 0.25
    assert lora.options == {"lora_alpha": None, "lora_targets": ("query", "value"),
                            "lora_dropout": 0.25}
    assert AdapterConfig.from_dict(json.loads(json.dumps(lora.to_dict()))) == lora
    assert dataclasses.replace(lora, size=8).lora_dropout == 0.25
    with pytest.raises(AttributeError, match="has no field 'lora_targets'"):
        AdapterConfig().lora_targets
    for kwargs, message in [
        ({"adapter_type": "lora", "lora_targets": ["query", "ffn"]}, "lora_targets must name"),
        ({"adapter_type": "lora", "lora_targets": []}, "lora_targets must name"),
        ({"adapter_type": "lora", "lora_dropout": 1.0}, r"lora_dropout must be in \[0, 1\)"),
        ({"lora_dropout": 0.1}, "lora_dropout applies to adapter_type 'lora', not 'houlsby'"),
        ({"adapter_type": "pfeiffer", "parallel_scaling": 2.0},
         "applies to adapter_type 'parallel'"),
        ({"adapter_type": "gated"}, "adapter_type must be one of"),
    ]:
        with pytest.raises(ConfigError, match=message):
            AdapterConfig(**kwargs)


# ------------------------------------------------------------- LoRA's targets
_WEIGHT_SCOPES = {"query": "attention/self/adapters/query", "key": "attention/self/adapters/key",
                  "value": "attention/self/adapters/value",
                  "attention_output": "attention/output/adapters/dense",
                  "intermediate": "intermediate/adapters/dense",
                  "output": "output/adapters/dense"}
_KERNELS = {"query": "attention/self/query", "key": "attention/self/key",
            "value": "attention/self/value", "attention_output": "attention/output/dense",
            "intermediate": "intermediate/dense", "output": "output/dense"}


@pytest.mark.parametrize("target", PROJECTIONS)
def test_each_lora_target_adds_scale_a_b_to_its_projection(tiny_config, target):
    """Against an independent oracle: a plain BERT whose kernel holds W + alpha/r A B."""
    config = AdapterConfig(size=M, adapter_type="lora", lora_targets=[target], lora_alpha=6)
    model = built(BertModel(tiny_config, config))
    randomise_adapters(model, stddev=1.0)
    variables = checkpoint_variables(model)
    names = sorted(n for n in variables if "/adapters/" in n)
    assert names == sorted(f"bert/encoder/layer_{i}/{_WEIGHT_SCOPES[target]}_lora_{ab}"
                           for i in range(2) for ab in "AB")
    h, i = tiny_config.hidden_size, tiny_config.intermediate_size
    d_in, d_out = {"intermediate": (h, i), "output": (i, h)}.get(target, (h, h))
    assert variables[names[0]].shape == (d_in, M) and variables[names[1]].shape == (M, d_out)
    oracle = built(BertNetwork(tiny_config))
    copy_backbone(model, oracle)
    for layer in range(2):
        prefix = f"bert/encoder/layer_{layer}/"
        a = variables[prefix + _WEIGHT_SCOPES[target] + "_lora_A"].numpy()
        b = variables[prefix + _WEIGHT_SCOPES[target] + "_lora_B"].numpy()
        kernel = tf1_variables(oracle)[prefix + _KERNELS[target] + "/kernel"]
        kernel.assign(kernel.numpy() + 2.0 * a @ b)  # alpha / r = 6 / 3
    inputs = tiny_inputs()
    adapted = model(inputs, training=False)["sequence_output"].numpy()
    plain = built(BertNetwork(tiny_config))
    copy_backbone(model, plain)
    # (a query change moves little on a random backbone: its values are all alike)
    assert np.abs(adapted - plain(inputs, training=False)["sequence_output"]).max() > 1e-3
    np.testing.assert_allclose(adapted, oracle(inputs, training=False)["sequence_output"],
                               rtol=1e-5, atol=1e-5)


def test_lora_targets_on_a_built_model_and_as_named_adapters(tiny_config):
    """Adapters added after building get the projections' input widths (the feed-forward
    output's is intermediate_size); named LoRA adapters have branches in every block."""
    config = AdapterConfig(size=M, adapter_type="lora", lora_targets=["intermediate", "output"])
    bert = built(BertNetwork(tiny_config))
    add_named_adapter(bert, "late", config)
    layer = bert.encoder.transformer_layers[0]
    assert layer.ffn_output_block.modification("late").adapter.lora_a["dense"].shape == (32, M)
    assert layer.intermediate.modification("late").adapter.lora_a["dense"].shape == (16, M)
    assert layer.attention.self_attention.modification("late").adapter is None
    bert(tiny_inputs(), adapter_name="late")
    delete_named_adapter(bert, "late")
    multi = MultiAdapterModel(bert)
    multi.add_adapter("ffn", config, num_labels=2)
    names = [n for n in tf1_variables(multi) if "/ffn/adapters/" in n]
    assert "bert/encoder/layer_1/intermediate/ffn/adapters/dense_lora_B" in names
    assert "bert/encoder/layer_1/output/ffn/adapters/dense_lora_A" in names
    assert "ffn" not in layer.attention.self_attention.task_branches
    multi.set_active_adapters("ffn")
    multi(tiny_inputs())
    with pytest.raises(ValueError, match="is a lora adapter, which updates projections"):
        multi.add_adapter_fusion("fused", ["ffn"])


def test_lora_dropout_acts_on_the_update_only_while_training(still_config):
    config = AdapterConfig(size=M, adapter_type="lora", lora_targets=list(PROJECTIONS),
                           lora_dropout=0.5)
    model = built(BertModel(still_config, config))
    intermediate = model.encoder.transformer_layers[1].intermediate
    assert intermediate.modification("adapter").adapter.dropout_rate == 0.5
    inputs = tiny_inputs()

    def outputs(training):
        return model(inputs, training=training)["sequence_output"].numpy()
    # B at zero: no update to drop, so training (with dropout) equals inference.
    np.testing.assert_array_equal(outputs(True), outputs(False))
    randomise_adapters(model)
    inference = outputs(False)
    np.testing.assert_array_equal(outputs(False), inference)
    assert np.abs(outputs(True) - inference).max() > 1e-3
    without = built(BertModel(still_config, dataclasses.replace(config, lora_dropout=0.0)))
    theirs = tf1_variables(model)
    for name, variable in tf1_variables(without).items():
        variable.assign(theirs[name])
    np.testing.assert_array_equal(without(inputs, training=True)["sequence_output"], inference)


def test_ablation_switches_lora_off_in_every_block_it_targets(tiny_config):
    model = built(BertModel(tiny_config, AdapterConfig(size=M, adapter_type="lora",
                                                       lora_targets=list(PROJECTIONS))))
    randomise_adapters(model)
    plain = built(BertNetwork(tiny_config))
    copy_backbone(model, plain)
    inputs = tiny_inputs()
    expected = plain(inputs, training=False)["sequence_output"].numpy()
    assert np.abs(model(inputs, training=False)["sequence_output"] - expected).max() > 1e-3
    with adapters_disabled(model, [0, 1]):
        np.testing.assert_array_equal(model(inputs, training=False)["sequence_output"], expected)


# ------------------------------------------------------------------- merging
def lora_classifier(cfg, targets=PROJECTIONS, **options):
    config = AdapterConfig(size=M, adapter_type="lora", lora_targets=list(targets),
                           lora_alpha=6, **options)
    model = built(BertClassifier(cfg, 2, config))
    randomise_adapters(model)
    apply_tuning(model, "adapter", train_pooler=False)
    return model


def test_merge_gives_the_same_outputs_and_unmerge_restores_the_kernels(tiny_config, tmp_path):
    model = lora_classifier(tiny_config, lora_dropout=0.1)
    inputs = tiny_inputs()
    before = model(inputs, training=False).numpy()
    predicted = model.predict(inputs, verbose=0)  # traces Keras' predict function
    kernels = {n: v.numpy() for n, v in tf1_variables(model).items() if n.endswith("/kernel")}
    fingerprint = backbone_fingerprint(model)
    ab.merge_adapter(model)
    assert model.bert.merged_adapters() == ["adapter"]
    changed = [n for n, v in tf1_variables(model).items()
               if n in kernels and not np.array_equal(kernels[n], v.numpy())]
    assert sorted(changed) == sorted(f"bert/encoder/layer_{i}/{_KERNELS[t]}/kernel"
                                     for i in range(2) for t in PROJECTIONS)
    assert model.bert.encoder.transformer_layers[0].intermediate.modification(
        "adapter").adapter(tf.ones([1, 2, 16])) == {}  # merged: no LoRA work
    np.testing.assert_allclose(model(inputs, training=False), before, rtol=1e-5, atol=1e-5)
    # A stale traced function would add the updates a second time.
    np.testing.assert_allclose(model.predict(inputs, verbose=0), predicted, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="merged already"):
        ab.merge_adapter(model)
    ab.unmerge_adapter(model)
    for name, value in kernels.items():
        np.testing.assert_array_equal(tf1_variables(model)[name].numpy(), value, err_msg=name)
    np.testing.assert_array_equal(model(inputs, training=False), before)
    assert backbone_fingerprint(model) == fingerprint
    with pytest.raises(ValueError, match="no adapter of the model is merged"):
        ab.unmerge_adapter(model)
    with model.adapter_merged():  # the method: the active adapter, the one it is built with
        assert model.bert.merged_adapters() == ["adapter"]
        np.testing.assert_allclose(model(inputs, training=False), before, rtol=1e-5, atol=1e-5)
    assert model.bert.merged_adapters() == []
    houlsby = built(BertClassifier(tiny_config, 2, AdapterConfig(size=M)))
    with pytest.raises(ValueError, match=r"nothing to merge \(houlsby adapters\): only "
                                         r"projection families"):
        ab.merge_adapter(houlsby)


def test_while_merged_what_would_go_wrong_is_refused(tiny_config, tmp_path):
    model = lora_classifier(tiny_config, targets=("value", "output"))
    save_trained_weights(model, str(tmp_path / "before"))
    ab.merge_adapter(model)
    for action in (lambda: save_trained_weights(model, str(tmp_path / "merged")),
                   lambda: load_trained_weights(model, str(tmp_path / "before"))):
        with pytest.raises(AdapterFileError, match="unmerge it"):
            action()
    assert not (tmp_path / "merged").exists()
    with pytest.raises(ValueError, match="before saving the model with Keras"):
        model.save(str(tmp_path / "merged.keras"))
    with pytest.raises(ValueError, match="before deleting it"):
        model.delete_adapter("adapter")
    with pytest.raises(ValueError, match="cannot be switched off"):
        with adapters_disabled(model, [0]):
            model(tiny_inputs(), training=False)
    ab.unmerge_adapter(model)
    save_trained_weights(model, str(tmp_path / "after"))
    before = json.loads((tmp_path / "before" / "adapter_config.json").read_text())
    after = json.loads((tmp_path / "after" / "adapter_config.json").read_text())
    assert after["backbone_fingerprint"] == before["backbone_fingerprint"]
    assert after["weights_sha256"] == before["weights_sha256"]


def test_a_merged_named_adapter_excludes_the_others(tiny_config):
    bert = built(BertNetwork(tiny_config))
    multi = MultiAdapterModel(bert)
    for name in ("a", "b"):
        multi.add_adapter(name, AdapterConfig(size=M, adapter_type="lora",
                                              lora_targets=["key", "intermediate"]), num_labels=2)
    multi(tiny_inputs())
    randomise_adapters(multi)
    inputs = tiny_inputs()
    multi.set_active_adapters("a")
    expected = multi(inputs, training=False).numpy()
    ab.merge_adapter(multi, "a")
    assert bert.merged_adapters() == ["a"]
    np.testing.assert_allclose(multi(inputs, training=False), expected, rtol=1e-5, atol=1e-5)
    multi.set_active_adapters("b")
    with pytest.raises(ValueError, match="adapter 'a' is merged .* before running adapter 'b'"):
        multi(inputs, training=False)
    with pytest.raises(ValueError, match="'a' is merged already"):
        ab.merge_adapter(multi, "b")
    with pytest.raises(ValueError, match="before deleting it"):
        multi.delete_adapter("a")
    ab.unmerge_adapter(multi, "a")
    multi.set_active_adapters("a")
    np.testing.assert_array_equal(multi(inputs, training=False), expected)


def test_existing_adapter_directories_still_load(tiny_config, tmp_path):
    """Directories whose adapter_config has the older layout: LoRA (query/value, no
    targets or dropout) and Houlsby, both with every family's options at their defaults,
    converted when the file is read."""
    older = {"lora": {"size": M, "activation": "gelu", "init_scale": 0.01,
                      "positions": "attention", "leave_out": [], "adapter_type": "lora",
                      "lora_alpha": 6.0, "parallel_scaling": 4.0},
             "houlsby": {"size": M, "activation": "gelu", "init_scale": 0.01, "positions": "both",
                         "leave_out": [1], "adapter_type": "houlsby", "lora_alpha": None,
                         "parallel_scaling": 4.0}}
    for kind, stored in older.items():
        with pytest.raises(ConfigError, match="applies to adapter_type"):
            AdapterConfig.from_dict(stored)  # the model takes the current layout only
        trained = built(BertClassifier(tiny_config, 2, AdapterConfig.from_dict(
            current_adapter_fields(stored))))
        randomise_adapters(trained)
        apply_tuning(trained, "adapter", train_pooler=False)
        directory = tmp_path / kind
        save_trained_weights(trained, str(directory), task="mrpc")
        path = directory / "adapter_config.json"
        description = json.loads(path.read_text())
        description["adapter_config"] = stored
        path.write_text(json.dumps(description))
        config = adapter_config_of(str(directory))
        assert config.adapter_type == kind
        if kind == "lora":
            assert (config.lora_targets, config.lora_dropout, config.lora_scale) == (
                ("query", "value"), 0.0, 2.0)
        fresh = built(BertClassifier(tiny_config, 2, config))
        copy_backbone(trained, fresh)
        load_trained_weights(fresh, str(directory))
        np.testing.assert_array_equal(fresh(tiny_inputs(), training=False),
                                      trained(tiny_inputs(), training=False))


# --------------------------------------------------- families of the user's own
@keras.utils.register_keras_serializable(package="test_adapter_families")
class DiagonalAdapter(ProjectionAdapter):
    """`x * d` added to square projections, d starting at zero: a projection family
    written outside the package, mergeable through `delta`."""

    @classmethod
    def from_adapter_config(cls, adapter_config, projections):
        return cls(tuple(projections), dict(projections))

    def build(self, input_shape):
        self.diagonal = {target: self.add_weight(f"{target}_diagonal", [int(input_shape[-1])],
                                                 initializer="zeros")
                         for target in self.targets}
        super().build(input_shape)

    def update(self, inputs, target, training=None):
        return inputs * tf.cast(self.diagonal[target], inputs.dtype)

    def delta(self, target):
        return tf.linalg.diag(self.diagonal[target])


def _square_targets(value):
    targets = tuple(value)
    if not targets or not set(targets) <= {"query", "key", "value", "attention_output"}:
        raise ValueError(f"diagonal_targets must be square projections, got {value!r}")
    return targets


DIAGONAL = AdapterFamily(
    name="diagonal", layer=DiagonalAdapter, slot="projections", positions=("attention",),
    default_positions="attention", param_count=lambda config, d_in, d_out: d_in,
    options={"diagonal_targets": AdapterOption(("value",), _square_targets)},
    projections=lambda config: config.diagonal_targets, description="diagonal updates")


def _docs_example() -> str:
    text = (REPO / "docs" / "adapters.md").read_text()
    start = text.index("<!-- family-example")
    return re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)


@pytest.fixture(scope="module")
def user_families(tmp_path_factory):
    """Registers the docs' "gated" family (importing the docs' block as a module, whose
    printed output is `example.printed`) and "diagonal"; unregisters both afterwards."""
    folder = tmp_path_factory.mktemp("docs_example")
    # A module file rather than exec: AutoGraph reads the layer's source.
    (folder / "docs_adapters_example.py").write_text(_docs_example())
    register_adapter_family(DIAGONAL)
    sys.path.insert(0, str(folder))
    try:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            example = importlib.import_module("docs_adapters_example")
        example.printed = printed.getvalue()
        yield example
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("docs_adapters_example", None)
        for name in ("gated", "diagonal"):
            if name in [f.name for f in adapter_families()]:
                unregister_adapter_family(name)


def train_steps(model, steps=12, seed=0):
    """Keras fit on one fixed batch; returns the losses per step."""
    inputs = tiny_inputs(batch=4, seed=seed)
    labels = np.array([0, 1, 1, 0])
    model.compile(optimizer=keras.optimizers.Adam(3e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(inputs, labels, batch_size=4, epochs=steps, verbose=0, shuffle=False)
    return history.history["loss"]


@pytest.mark.parametrize("family, options, layer_class", [
    ("gated", {}, "GatedAdapter"),
    ("diagonal", {"diagonal_targets": ["query", "attention_output"]}, "DiagonalAdapter"),
])
def test_a_family_of_ones_own_trains_saves_and_loads(user_families, still_config, tmp_path,
                                                    family, options, layer_class):
    # The docs' block printed its parameter count on the real MiniLM, as its comment says.
    assert user_families.printed == "78444\n"
    docs_model = user_families.model
    assert adapter_weight_count(docs_model) == 78444
    config = AdapterConfig(size=M, adapter_type=family, **options)
    model = built(BertClassifier(still_config, 2, config))
    adapters = [layer for layer in model.bert._flatten_layers()  # noqa: SLF001
                if isinstance(layer, ab.AdapterLayer)]
    assert adapters and {type(a).__name__ for a in adapters} == {layer_class}
    apply_tuning(model, "adapter", train_pooler=False)
    assert adapter_weight_count(model) == config.param_count(still_config) > 0
    start = {n: v.numpy() for n, v in tf1_variables(model).items() if "/adapters/" in n}
    losses = train_steps(model)
    assert losses[-1] < 0.8 * losses[0]
    moved = [n for n, v in tf1_variables(model).items()
             if n in start and not np.array_equal(start[n], v.numpy())]
    assert sorted(moved) == sorted(start)
    save_trained_weights(model, str(tmp_path / "adapter"), task="t", labels=["a", "b"])
    stored = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert stored["adapter_config"]["adapter_type"] == family
    assert adapter_config_of(str(tmp_path / "adapter")) == config
    fresh = built(BertClassifier(still_config, 2, adapter_config_of(str(tmp_path / "adapter"))))
    copy_backbone(model, fresh)
    load_trained_weights(fresh, str(tmp_path / "adapter"))
    inputs = tiny_inputs(seed=5)
    expected = model(inputs, training=False).numpy()
    np.testing.assert_array_equal(fresh(inputs, training=False), expected)
    clone = BertClassifier.from_config(model.get_config())
    assert named_adapter_info(clone.bert, "adapter").adapter_config == config
    # The adapter API's paths: the method writes the same file, a new model on the same
    # backbone loads it with its labels, and so does a model serving several tasks.
    model.save_adapter(str(tmp_path / "by_method"), task="t", labels=["a", "b"])
    assert (json.loads((tmp_path / "by_method" / "adapter_config.json").read_text())
            ["weights_sha256"] == stored["weights_sha256"])
    backbone = built(ab.BertModel(still_config))
    copy_backbone(model, backbone)
    loaded = ab.load_adapter(str(tmp_path / "by_method"), backbone=backbone)
    assert loaded.labels == {"t": ["a", "b"]}
    np.testing.assert_array_equal(loaded(inputs, training=False), expected)
    multi = MultiAdapterModel(built(BertNetwork(still_config)))
    copy_backbone(model, multi)
    assert multi.load_adapter(str(tmp_path / "adapter"), name="mine") == "mine"
    np.testing.assert_array_equal(multi(inputs, training=False), expected)
    if family == "diagonal":  # a projection family of one's own merges too
        ab.merge_adapter(fresh)
        np.testing.assert_allclose(fresh(inputs, training=False), expected, rtol=1e-5, atol=1e-5)
        ab.unmerge_adapter(fresh)
    else:
        with pytest.raises(ValueError, match=r"nothing to merge \(gated adapters\)"):
            ab.merge_adapter(fresh)


def test_an_unregistered_family_in_a_file_names_the_registered_ones(user_families, tiny_config,
                                                                   tmp_path):
    model = built(BertClassifier(tiny_config, 2, AdapterConfig(size=M, adapter_type="gated")))
    apply_tuning(model, "adapter", train_pooler=False)
    save_trained_weights(model, str(tmp_path / "gated"))
    gated = adapter_family("gated")
    unregister_adapter_family("gated")
    try:
        with pytest.raises(AdapterFileError, match=r"gated/adapter_config\.json: adapter_config: "
                                                   r"adapter_type must be one of \('houlsby', "
                                                   r"'pfeiffer', 'parallel', 'lora', 'diagonal'\), "
                                                   r"got 'gated'"):
            adapter_config_of(str(tmp_path / "gated"))
    finally:
        register_adapter_family(gated)
    with pytest.raises(ValueError, match="is built in and stays registered"):
        unregister_adapter_family("houlsby")


# ------------------------------------------------------- merged models and Keras
@pytest.mark.slow
@pytest.mark.parametrize("target", ["merged.keras", "merged_savedmodel"])
def test_keras_saving_while_merged_is_refused_before_writing(tiny_config, tmp_path, target):
    """A SavedModel of a merged model would reload with LoRA applied over the merged
    kernels, twice; a .keras file would be cut off half-way."""
    model = lora_classifier(tiny_config, targets=("value", "intermediate"))
    ab.merge_adapter(model)
    with pytest.raises(ValueError, match=r"^adapter .adapter. is merged into the backbone.s "
                                         r"kernels: unmerge it \(unmerge_adapter\) before "
                                         r"saving the model with Keras$"):
        model.save(str(tmp_path / target))
    assert not (tmp_path / target).exists()
    ab.unmerge_adapter(model)
    expected = model(tiny_inputs(), training=False)
    model.save(str(tmp_path / target))
    reloaded = keras.models.load_model(str(tmp_path / target))
    np.testing.assert_array_equal(reloaded(tiny_inputs(), training=False), expected)
