"""adapters/api.py and models.py: one adapter API on every model (`ab.BertModel`, `ab.BertClassifier`,
`ab.BertSpanModel`, `MultiAdapterModel`): add, switch, train, delete, disable, save, load."""

import contextlib
import importlib
import io
import json
import logging
import re
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import adapter_bert as ab
from adapter_bert.adapters import api, models
from adapter_bert.adapters.files import AdapterFileError, save_adapter as save_run_files
from adapter_bert.adapters.multitask import MultiAdapterModel
from adapter_bert.adapters.tuning import apply_tuning, parameter_line, parameter_summary
from adapter_bert.model import encoder, heads
from adapter_bert.model.checkpoints import CheckpointError, save_tf1_checkpoint
from adapter_bert.model.config import AdapterConfig, BertConfig
from adapter_bert.model.naming import tf1_variables
from tests.conftest import BERT_VOCAB, REPO, tiny_inputs

M = 4
KINDS = ("backbone", "classifier", "span", "multi")
# What each kind gives an adapter (num_labels 3 for classifiers).
HEAD_SIZES = {"backbone": 0, "classifier": 3 * 16 + 3, "span": 2 * 16 + 2, "multi": 3 * 16 + 3}


def count(variables):
    return sum(int(np.prod(v.shape)) for v in variables)


def base_backbone(config, seed=0):
    """A built plain BertModel with random weights (pooler bias never trained: zero)."""
    tf.keras.utils.set_random_seed(seed)
    bert = encoder.BertModel(config)
    bert.build_with_dummy_inputs()
    return bert


def copy_weights(source, target):
    """Assigns every weight of `target` that `source` has under the same TF1 name."""
    names = tf1_variables(source)
    for name, variable in tf1_variables(target).items():
        if name in names:
            variable.assign(names[name])


def make(kind, config, source):
    """A model of `kind` with the adapter API on the weights of backbone `source`."""
    if kind == "multi":
        bert = encoder.BertModel(config)
        bert.build_with_dummy_inputs()
        copy_weights(source, bert)
        return MultiAdapterModel(bert)
    model = {"backbone": lambda: ab.BertModel(config),
             "classifier": lambda: ab.BertClassifier(config, 3),
             "span": lambda: ab.BertSpanModel(config)}[kind]()
    model.build_with_dummy_inputs()
    copy_weights(source, model)
    return model


def plain_twin(kind, model):
    """The same network without the adapter API or any adapter, on `model`'s weights."""
    config = (model if kind == "backbone" else model.bert).config
    twin = {"backbone": lambda: encoder.BertModel(config),
            "multi": lambda: encoder.BertModel(config),
            "classifier": lambda: heads.BertClassifier(config, 3),
            "span": lambda: heads.BertSpanModel(config)}[kind]()
    twin.build_with_dummy_inputs()
    copy_weights(model, twin)
    return twin


def perturb(model, name, seed=1):
    """Moves adapter `name`'s weights off their start (adapters near identity otherwise)."""
    rng = np.random.default_rng(seed)
    for variable in model.adapter_variables(name).values():
        variable.assign_add(rng.normal(0, 0.2, variable.shape).astype("float32"))


def same(a, b):
    tf.nest.map_structure(lambda x, y: np.testing.assert_array_equal(np.asarray(x),
                                                                     np.asarray(y)), a, b)


def differ(a, b):
    flat_a, flat_b = tf.nest.flatten(a), tf.nest.flatten(b)
    return any(not np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(flat_a, flat_b))


@pytest.fixture
def source(tiny_config):
    return base_backbone(tiny_config)


def run(model):
    return model(tiny_inputs(), training=False)


# ------------------------------------------------------------------- the methods
@pytest.mark.parametrize("kind", KINDS)
def test_add_switch_delete_on_every_kind(tiny_config, source, kind):
    model = make(kind, tiny_config, source)
    assert model.adapter_names == [] and model.active_adapter is None
    model.add_adapter("a", AdapterConfig(size=M), num_labels=3 if kind != "backbone" else None,
                      labels=["x", "y", "z"] if kind != "backbone" else None)
    model.add_adapter("b", "lora", num_labels=3 if kind != "backbone" else None)
    assert model.adapter_names == ["a", "b"]
    assert model.active_adapter == "a"  # the first one added
    assert model.labels["a"] == (["x", "y", "z"] if kind != "backbone" else None)
    for name in ("a", "b"):
        perturb(model, name)
    model.set_active_adapters("a")
    out_a = run(model)
    model.set_active_adapters(["b"])  # AdapterHub's list form
    out_b = run(model)
    assert differ(out_a, out_b)
    model.set_active_adapter("a")  # the older name
    same(run(model), out_a)
    with pytest.raises(KeyError, match=r"no adapter named 'zz'; adapters: \['a', 'b'\]"):
        model.set_active_adapters("zz")
    with pytest.raises(ValueError, match="one adapter is active at a time"):
        model.set_active_adapters(["a", "b"])
    with pytest.raises(ValueError, match="already exists"):
        model.add_adapter("a", AdapterConfig(size=M))
    before = len(model.weights)
    model.delete_adapter("a")
    assert model.adapter_names == ["b"] and model.active_adapter is None
    assert not any("/a/" in n or n.startswith("a/") for n in tf1_variables(model))
    assert len(model.weights) < before
    with pytest.raises(KeyError, match="no adapter named 'a'"):
        model.adapter_variables("a")


@pytest.mark.parametrize("kind", KINDS)
def test_no_active_adapter_runs_the_plain_network(tiny_config, source, kind):
    model = make(kind, tiny_config, source)
    model.add_adapter("a", AdapterConfig(size=M, init_scale=0.3), num_labels=3 if kind != "backbone"
                      else None, train_pooler=kind in ("classifier", "multi"))
    perturb(model, "a")
    with_adapter = run(model)
    model.set_active_adapters(None)
    plain = plain_twin(kind, model)
    same(run(model), run(plain))
    assert differ(with_adapter, run(model))


@pytest.mark.parametrize("kind", KINDS)
def test_disable_adapters_gives_the_backbone_and_restores(tiny_config, source, kind):
    model = make(kind, tiny_config, source)
    model.add_adapter("a", AdapterConfig(size=M), num_labels=3 if kind != "backbone" else None)
    perturb(model, "a")
    expected = run(model)
    with model.disable_adapters():
        same(run(model), run(plain_twin(kind, model)))
        assert model.active_adapter == "a"
    same(run(model), expected)
    with pytest.raises(RuntimeError):  # restored after an error too
        with model.disable_adapters():
            raise RuntimeError("inside")
    same(run(model), expected)


def test_disable_adapters_bypasses_the_single_set_too(tiny_config, source):
    """A model built with an adapter_config (the runners' single set) runs as plain BERT."""
    model = ab.BertClassifier(tiny_config, 2, AdapterConfig(size=M, adapter_type="lora"))
    model.build_with_dummy_inputs()
    copy_weights(source, model)
    rng = np.random.default_rng(3)
    for name, variable in tf1_variables(model).items():
        if "/lora" in name or "adapter" in name:
            variable.assign(rng.normal(0, 0.3, variable.shape).astype("float32"))
    expected = run(model)
    plain = heads.BertClassifier(tiny_config, 2)
    plain.build_with_dummy_inputs()
    copy_weights(model, plain)
    assert differ(expected, run(plain))
    with model.disable_adapters():
        same(run(model), run(plain))
    same(run(model), expected)
    assert all(block.adapter_enabled for block in api._modifiable_blocks(model.bert))


# ------------------------------------------------------------------- training
def named_closed_form(config, adapter_type, head_size, pooler=False):
    """Weights one named adapter owns: adapters, every LayerNorm copy, head, pooler copy."""
    h, layers = config.hidden_size, config.num_hidden_layers
    adapters = {"houlsby": 2 * layers * (2 * h * M + M + h), "lora": layers * 4 * h * M}
    return (adapters[adapter_type] + (1 + 2 * layers) * 2 * h + head_size
            + (h * h + h if pooler else 0))


@pytest.mark.parametrize("kind", KINDS)
def test_train_adapter_trains_exactly_its_own_weights(tiny_config, source, kind, capsys):
    model = make(kind, tiny_config, source)
    # "auto": the tiny backbone's pooler was never trained (zero bias), so an adapter with
    # a classifier head gets its own pooler copy; span heads and bare backbones do not.
    model.add_adapter("a", AdapterConfig(size=M), num_labels=3 if kind != "backbone" else None)
    pooler = kind in ("classifier", "multi")
    own_a = named_closed_form(tiny_config, "houlsby", HEAD_SIZES[kind], pooler)
    # Adding leaves only the active adapter trainable: never the backbone.
    assert count(model.trainable_weights) == own_a
    model.add_adapter("b", AdapterConfig(size=M, adapter_type="lora"),
                      num_labels=3 if kind != "backbone" else None, train_pooler=False)
    assert count(model.trainable_weights) == own_a
    own_b = named_closed_form(tiny_config, "lora", HEAD_SIZES[kind])
    report = model.train_adapter("b")
    assert model.active_adapter == "b"
    assert count(model.trainable_weights) == own_b
    total = count(model.weights)
    line = parameter_line(own_b, total)
    assert report.splitlines()[0] == line
    assert line in capsys.readouterr().out.splitlines()
    trainable = {id(v) for v in model.trainable_weights}
    assert trainable == {id(v) for v in model.adapter_variables("b").values()}
    model.train_adapter("a", verbose=False)
    assert capsys.readouterr().out == ""
    assert count(model.trainable_weights) == own_a


def test_a_trained_adapter_learns_and_leaves_the_backbone_alone(tiny_config, source):
    model = make("classifier", tiny_config, source)
    model.add_adapter("a", AdapterConfig(size=M), num_labels=2, train_pooler=False)
    model.add_adapter("b", AdapterConfig(size=M), num_labels=2, train_pooler=False)
    model.train_adapter("a")
    model.compile(optimizer=tf_keras.optimizers.Adam(1e-2),
                  loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    frozen = {n: v.numpy().copy() for n, v in tf1_variables(model).items() if "/a/" not in n
              and not n.startswith("a/")}
    inputs = tiny_inputs(batch=16, seed=4, pad_last=0)
    labels = (inputs["input_ids"][:, 1] % 2).astype("int32")
    losses = model.fit(inputs, labels, epochs=4, batch_size=8, verbose=0).history["loss"]
    assert losses[-1] < losses[0]
    for name, value in frozen.items():
        np.testing.assert_array_equal(tf1_variables(model)[name].numpy(), value, err_msg=name)


def test_apply_tuning_refuses_a_model_with_named_adapters(tiny_config, source):
    multi = make("multi", tiny_config, source)
    multi.add_adapter("a", AdapterConfig(size=M))
    with pytest.raises(ValueError) as excinfo:
        apply_tuning(multi, "adapter")
    assert str(excinfo.value) == (
        "MultiAdapterModel holds named adapters ['a']: train one with model.train_adapter(name), "
        "which freezes the others (apply_tuning would set every named adapter's weights alike)")


# --------------------------------------------------------------------- files
def write_backbone(bert, folder):
    """`bert`'s weights as a TF1 checkpoint folder `load_pretrained` reads."""
    folder.mkdir(parents=True, exist_ok=True)
    save_tf1_checkpoint(bert, str(folder / "bert_model.ckpt"))
    (folder / "bert_config.json").write_text(bert.config.to_google_json())
    return folder


@pytest.mark.parametrize("kind", KINDS)
def test_save_then_load_onto_a_fresh_backbone_in_one_call(tiny_config, source, kind, tmp_path):
    model = make(kind, tiny_config, source)
    model.add_adapter("other", "lora", num_labels=2 if kind != "backbone" else None)
    model.add_adapter("mrpc", AdapterConfig(size=M), num_labels=3 if kind != "backbone" else None,
                      labels=["no", "maybe", "yes"] if kind != "backbone" else None)
    perturb(model, "mrpc")
    model.set_active_adapters("mrpc")
    expected = run(model)
    model.save_adapter(str(tmp_path / "mrpc"), "mrpc")
    folder = write_backbone(source, tmp_path / "backbone")
    loaded = ab.load_adapter(str(tmp_path / "mrpc"), backbone=str(folder))
    assert type(loaded) is {"backbone": ab.BertModel, "classifier": ab.BertClassifier,
                            "span": ab.BertSpanModel, "multi": ab.BertClassifier}[kind]
    assert loaded.adapter_names == ["mrpc"] and loaded.active_adapter == "mrpc"
    if kind != "backbone":
        assert loaded.labels["mrpc"] == ["no", "maybe", "yes"]
    same(run(loaded), expected)
    # The two-line path: a loaded backbone with a head, then the adapter.
    if kind in ("classifier", "multi"):
        two_lines = ab.load_pretrained(str(folder), head="classifier", num_labels=2)
        assert two_lines.load_adapter(str(tmp_path / "mrpc")) == "mrpc"
        same(run(two_lines), expected)


def test_load_adapter_into_a_multi_adapter_model_and_back(tiny_config, source, tmp_path):
    single = make("classifier", tiny_config, source)
    single.add_adapter("rte", AdapterConfig(size=M, adapter_type="pfeiffer"), num_labels=2)
    perturb(single, "rte")
    expected = run(single)
    ab.save_adapter(single, str(tmp_path / "rte"))  # the active adapter
    multi = make("multi", tiny_config, source)
    assert multi.load_adapter(str(tmp_path / "rte")) == "rte"
    same(run(multi), expected)
    # MultiAdapterModel's older save_adapter(name, directory) order still works.
    multi.save_adapter("rte", str(tmp_path / "again"))
    same(run(ab.load_adapter(str(tmp_path / "again"), backbone=source)), expected)


def test_a_runner_style_directory_loads_as_a_named_adapter(tiny_config, source, tmp_path):
    """What run_classifier.py writes (the single set of adapters, trained weights only)."""
    run_model = heads.BertClassifier(tiny_config, 2, AdapterConfig(size=M, adapter_type="parallel"))
    run_model.build_with_dummy_inputs()
    copy_weights(source, run_model)
    apply_tuning(run_model, "adapter", train_pooler=True)
    rng = np.random.default_rng(5)
    for variable in run_model.trainable_weights:
        variable.assign_add(rng.normal(0, 0.1, variable.shape).astype("float32"))
    save_run_files(run_model, str(tmp_path / "run"), "mrpc", ["0", "1"])
    loaded = ab.load_adapter(str(tmp_path / "run"), backbone=source)
    assert loaded.active_adapter == "mrpc" and loaded.labels["mrpc"] == ["0", "1"]
    same(run(loaded), run(run_model))


def test_format_1_directories_still_load(tiny_config, source, tmp_path, caplog):
    run_model = heads.BertClassifier(tiny_config, 2, AdapterConfig(size=M))
    run_model.build_with_dummy_inputs()
    copy_weights(source, run_model)
    apply_tuning(run_model, "adapter", train_pooler=False)
    save_run_files(run_model, str(tmp_path / "v1"), "mrpc")
    path = tmp_path / "v1" / "adapter_config.json"
    description = json.loads(path.read_text())
    description["format_version"] = 1
    del description["backbone_fingerprint"]
    description["adapter_config"] = {k: description["adapter_config"][k] for k in
                                     ("size", "activation", "init_scale", "positions",
                                      "leave_out")}
    path.write_text(json.dumps(description))
    with caplog.at_level(logging.INFO, logger="adapter_bert.adapters.files"):
        loaded = ab.load_adapter(str(tmp_path / "v1"), backbone=source)
    assert any("records no backbone fingerprint" in r.getMessage() for r in caplog.records)
    same(run(loaded), run(run_model))


def test_another_backbone_shape_is_refused_in_one_line(tiny_config, source, tmp_path,
                                                       monkeypatch):
    model = make("classifier", tiny_config, source)
    model.add_adapter("mrpc", AdapterConfig(size=M))
    model.save_adapter(str(tmp_path / "mrpc"))
    wider = base_backbone(BertConfig(**dict(tiny_config.to_dict(), hidden_size=32)))
    with pytest.raises(AdapterFileError) as excinfo:
        ab.load_adapter(str(tmp_path / "mrpc"), backbone=wider)
    message = str(excinfo.value)
    assert "\n" not in message
    assert message == (f"{tmp_path / 'mrpc'} was trained on another backbone shape "
                       f"(hidden_size: file 16 vs model 32)")
    with pytest.raises(AdapterFileError, match="another backbone shape"):
        MultiAdapterModel(wider).load_adapter(str(tmp_path / "mrpc"))
    # Onto the default backbone (the embedded MiniLM, here a wide stand-in) the line says
    # what to pass.
    monkeypatch.setattr(models, "load_pretrained", lambda path=None: ab.BertModel.from_config(
        {"name": "bert", "config": wider.config.to_dict(), "adapter_config": None}))
    with pytest.raises(AdapterFileError, match=r"\(hidden_size: file 16 vs model 32\); pass "
                                               r"backbone= the checkpoint it was trained on$"):
        ab.load_adapter(str(tmp_path / "mrpc"))


def test_other_backbone_weights_of_the_same_shape_only_warn(tiny_config, source, tmp_path,
                                                            caplog):
    model = make("classifier", tiny_config, source)
    model.add_adapter("mrpc", AdapterConfig(size=M))
    model.save_adapter(str(tmp_path / "mrpc"))
    with caplog.at_level(logging.WARNING, logger="adapter_bert.adapters.files"):
        ab.load_adapter(str(tmp_path / "mrpc"), backbone=base_backbone(tiny_config, seed=9))
    assert any("same shape, different weights" in r.getMessage() for r in caplog.records)


def test_heads_the_model_has_no_place_for(tiny_config, source, tmp_path):
    classifier = make("classifier", tiny_config, source)
    classifier.add_adapter("mrpc", AdapterConfig(size=M, init_scale=0.3))
    perturb(classifier, "mrpc")
    classifier.save_adapter(str(tmp_path / "mrpc"))
    bare = make("backbone", tiny_config, source)
    with pytest.raises(AdapterFileError, match=r"holds a classifier head and a BertModel has no "
                                               r"heads: .*with_head=False"):
        bare.load_adapter(str(tmp_path / "mrpc"))
    assert bare.adapter_names == []
    bare.load_adapter(str(tmp_path / "mrpc"), with_head=False)
    same(run(bare), classifier.bert(tiny_inputs(), training=False, adapter_name="mrpc"))
    span = make("span", tiny_config, source)
    with pytest.raises(AdapterFileError, match="a BertSpanModel's adapters have span heads"):
        span.load_adapter(str(tmp_path / "mrpc"))
    with pytest.raises(ValueError, match="head must be 'span', got 'classifier'"):
        span.add_adapter("x", head="classifier")


def test_adapter_directories_are_not_backbones(tiny_config, source, tmp_path):
    model = make("classifier", tiny_config, source)
    model.add_adapter("mrpc", AdapterConfig(size=M))
    model.save_adapter(str(tmp_path / "mrpc"))
    with pytest.raises(CheckpointError) as excinfo:
        ab.load_pretrained(str(tmp_path / "mrpc"))
    assert str(excinfo.value).startswith(
        f"{tmp_path / 'mrpc'} is an adapter directory, not a backbone: load it with "
        f"ab.load_adapter('{tmp_path / 'mrpc'}')")
    with pytest.raises(TypeError, match=r"call model.load_adapter\(directory\)"):
        ab.load_adapter(model, str(tmp_path / "mrpc"))


def test_save_adapter_without_a_named_adapter(tiny_config, source, tmp_path):
    bare = make("classifier", tiny_config, source)
    with pytest.raises(ValueError, match="has no active adapter to save"):
        bare.save_adapter(str(tmp_path / "none"))
    # The runners' single set: the trained weights, as a run writes them.
    single = ab.BertClassifier(tiny_config, 2, AdapterConfig(size=M))
    single.build_with_dummy_inputs()
    apply_tuning(single, "adapter", train_pooler=False)
    single.save_adapter(str(tmp_path / "single"), labels=["0", "1"])
    description = json.loads((tmp_path / "single" / "adapter_config.json").read_text())
    assert description["labels"] == ["0", "1"] and description["head"] == "ClassifierHead"
    assert "bert/encoder/layer_0/output/adapters/weights1" in description["weights"]


def test_unknown_adapter_names_in_a_batch_fail_in_one_line(tiny_config, source):
    multi = make("multi", tiny_config, source)
    multi.add_adapter("mrpc", AdapterConfig(size=M))
    multi.add_adapter("sst-2", AdapterConfig(size=M))
    with pytest.raises(ValueError) as excinfo:
        multi(dict(tiny_inputs(), adapter_names=["mrpc", "qqp"]))
    assert str(excinfo.value) == ("adapter_names must name adapters of the model "
                                  "(mrpc, sst-2); unknown: qqp")


# ---------------------------------------------------------------- Keras saving
@pytest.mark.parametrize("kind", ["backbone", "classifier", "span"])
def test_keras_file_keeps_the_named_adapters(tiny_config, source, kind, tmp_path):
    model = make(kind, tiny_config, source)
    model.add_adapter("a", AdapterConfig(size=M), num_labels=3 if kind != "backbone" else None,
                      labels=["x", "y", "z"] if kind != "backbone" else None)
    model.add_adapter("b", "lora", num_labels=2 if kind != "backbone" else None)
    for name in ("a", "b"):
        perturb(model, name)
    model.set_active_adapters("b")
    outputs = {}
    for name in ("a", "b", None):
        model.set_active_adapters(name)
        outputs[name] = run(model)
    model.set_active_adapters("b")
    model.save(tmp_path / "m.keras")
    loaded = tf_keras.models.load_model(tmp_path / "m.keras")
    assert type(loaded) is type(model)
    assert loaded.adapter_names == ["a", "b"] and loaded.active_adapter == "b"
    assert loaded.labels["a"] == (["x", "y", "z"] if kind != "backbone" else None)
    for name, expected in outputs.items():
        loaded.set_active_adapters(name)
        same(run(loaded), expected)


def test_add_adapter_takes_a_config_its_dict_a_family_or_nothing(tiny_config, source):
    model = make("backbone", tiny_config, source)
    model.add_adapter("default")
    model.add_adapter("lora", "lora")
    model.add_adapter("dict", AdapterConfig(size=M, adapter_type="pfeiffer").to_dict())
    from adapter_bert.adapters.named import named_adapter_info
    configs = {n: named_adapter_info(model, n).adapter_config for n in model.adapter_names}
    assert configs["default"] == AdapterConfig()
    assert configs["lora"].adapter_type == "lora"
    assert configs["dict"] == AdapterConfig(size=M, adapter_type="pfeiffer")
    with pytest.raises(TypeError, match="config must be an AdapterConfig"):
        model.add_adapter("bad", 3)


def test_the_package_root_exports_the_api():
    assert ab.BertModel is models.BertModel and ab.BertClassifier is models.BertClassifier
    assert ab.BertSpanModel is models.BertSpanModel
    assert ab.load_adapter is models.load_adapter and ab.save_adapter is models.save_adapter
    assert ab.load_pretrained is models.load_pretrained
    for name in ("load_adapter", "save_adapter"):
        assert name in ab.__all__


# ------------------------------------------------------------------ LoRA merging
LORA = AdapterConfig(size=M, adapter_type="lora", lora_alpha=8,
                     lora_targets=["key", "attention_output", "intermediate"], lora_dropout=0.2)
# The kernels LORA's targets update, in every layer.
LORA_KERNELS = ("attention/self/key", "attention/output/dense", "intermediate/dense")


def kernels(model):
    return {n: v.numpy().copy() for n, v in tf1_variables(model).items() if n.endswith("/kernel")}


@pytest.mark.parametrize("kind", ["classifier", "multi"])
def test_a_named_lora_adapter_trains_saves_loads_merges_and_unmerges(tiny_config, source, kind,
                                                                    tmp_path):
    model = make(kind, tiny_config, source)
    model.add_adapter("other", AdapterConfig(size=M), num_labels=2)
    model.add_adapter("lora", LORA, num_labels=2, labels=["no", "yes"], train_pooler=False)
    report = model.train_adapter("lora", verbose=False)
    # key and attention_output: r (16 + 16) each, intermediate: r (16 + 32); two layers.
    assert LORA.param_count(tiny_config) == 2 * M * (32 + 32 + 48) == 896
    own = 896 + (1 + 2 * 2) * 2 * 16 + (2 * 16 + 2)  # + every LayerNorm copy + head
    assert count(model.trainable_weights) == own
    assert {id(v) for v in model.trainable_weights} == {
        id(v) for v in model.adapter_variables("lora").values()}
    assert "adapters" in report and parameter_line(own, count(model.weights)) in report
    assert sorted(n for n in model.adapter_variables("lora") if "_lora_" in n) == sorted(
        f"bert/encoder/layer_{i}/{block}/adapters/{weight}_lora_{ab_}"
        for i in range(2) for block, weight in (("attention/self", "key"),
                                               ("attention/output", "dense"),
                                               ("intermediate", "dense"))
        for ab_ in "AB")
    lora_layers = [layer for layer in model.bert._flatten_layers()  # noqa: SLF001
                   if isinstance(layer, ab.LoraAdapter)]
    assert len(lora_layers) == 2 * 3  # per layer: self-attention, attention output, intermediate
    assert {layer.dropout_rate for layer in lora_layers} == {0.2}
    assert {layer.scale for layer in lora_layers} == {2.0}  # alpha / r

    frozen = {n: v for n, v in kernels(model).items()}
    start = {n: v.numpy().copy() for n, v in model.adapter_variables("lora").items()}
    model.compile(optimizer=tf_keras.optimizers.Adam(3e-2),
                  loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    inputs = tiny_inputs(batch=8, seed=4, pad_last=0)
    labels = (inputs["input_ids"][:, 1] % 2).astype("int32")
    losses = model.fit(inputs, labels, epochs=6, batch_size=8, verbose=0).history["loss"]
    assert losses[-1] < losses[0]
    for name, value in frozen.items():
        np.testing.assert_array_equal(tf1_variables(model)[name].numpy(), value, err_msg=name)
    moved = [n for n, v in model.adapter_variables("lora").items()
             if not np.array_equal(v.numpy(), start[n])]
    assert sorted(moved) == sorted(start)
    # Dropout acts on the updates' input while training only.
    layer = lora_layers[0]
    x = tf.ones([1, 3, 16])
    tf.keras.utils.set_random_seed(7)
    assert differ(layer(x, training=True), layer(x, training=False))

    expected = run(model)
    model.save_adapter(str(tmp_path / "lora"))  # the active adapter
    stored = json.loads((tmp_path / "lora" / "adapter_config.json").read_text())
    assert stored["adapter_config"] == LORA.to_dict()
    assert stored["adapter_config"]["lora_targets"] == ["key", "attention_output",
                                                        "intermediate"]
    folder = write_backbone(source, tmp_path / "backbone")
    loaded = ab.load_adapter(str(tmp_path / "lora"), backbone=str(folder))
    assert loaded.adapter_names == ["lora"] and loaded.labels["lora"] == ["no", "yes"]
    same(run(loaded), expected)
    two_lines = ab.load_pretrained(str(folder), head="classifier")
    assert two_lines.load_adapter(str(tmp_path / "lora")) == "lora"
    same(run(two_lines), expected)

    before = kernels(loaded)
    predicted = loaded.predict(tiny_inputs(), verbose=0)  # a traced function to reset
    loaded.merge_adapter()  # the active adapter
    assert loaded.bert.merged_adapters() == ["lora"]
    changed = sorted(n for n, v in kernels(loaded).items() if not np.array_equal(v, before[n]))
    assert changed == sorted(f"bert/encoder/layer_{i}/{k}/kernel"
                             for i in range(2) for k in LORA_KERNELS)
    np.testing.assert_allclose(run(loaded), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loaded.predict(tiny_inputs(), verbose=0), predicted,
                               rtol=1e-5, atol=1e-5)
    # While merged: saving (adapter files or Keras), loading and training are refused,
    # and nothing is written.
    with pytest.raises(AdapterFileError, match="adapter 'lora' is merged into the backbone's "
                                               "kernels: unmerge it"):
        loaded.save_adapter(str(tmp_path / "merged"))
    with pytest.raises(AdapterFileError, match="unmerge it"):
        ab.save_adapter(loaded, str(tmp_path / "merged"))
    with pytest.raises(AdapterFileError, match="unmerge it .* before loading"):
        loaded.load_adapter(str(tmp_path / "lora"), name="again")
    assert loaded.adapter_names == ["lora"]
    for target in ("merged.keras", "merged_savedmodel"):
        with pytest.raises(ValueError, match="before saving the model with Keras"):
            loaded.save(str(tmp_path / target))
        assert not (tmp_path / target).exists()
    assert not (tmp_path / "merged").exists()
    with pytest.raises(ValueError, match="before training adapter 'lora'"):
        loaded.train_adapter("lora")
    with pytest.raises(ValueError, match="merged already"):
        loaded.merge_adapter("lora")
    loaded.unmerge_adapter()
    for name, value in before.items():
        np.testing.assert_array_equal(tf1_variables(loaded)[name].numpy(), value, err_msg=name)
    same(run(loaded), expected)
    with pytest.raises(ValueError, match="no adapter of the model is merged"):
        loaded.unmerge_adapter()
    with loaded.adapter_merged():
        np.testing.assert_allclose(run(loaded), expected, rtol=1e-5, atol=1e-5)
    same(run(loaded), expected)
    # The package's functions do the same (default: the active adapter).
    ab.merge_adapter(loaded)
    assert loaded.bert.merged_adapters() == ["lora"]
    ab.unmerge_adapter(loaded)
    same(run(loaded), expected)
    # Unmerged, it saves again: the same file as before merging.
    loaded.save_adapter(str(tmp_path / "after"))
    after = json.loads((tmp_path / "after" / "adapter_config.json").read_text())
    assert after["backbone_fingerprint"] == stored["backbone_fingerprint"]
    assert after["weights_sha256"] == stored["weights_sha256"]


def test_merge_methods_choose_the_adapter_and_restore_the_active_one(tiny_config, source):
    model = make("multi", tiny_config, source)
    model.add_adapter("h", AdapterConfig(size=M), num_labels=2)
    for name in ("a", "b"):
        model.add_adapter(name, LORA, num_labels=2)
        perturb(model, name)
    outputs = {}
    for name in ("a", "b"):
        model.set_active_adapters(name)
        outputs[name] = run(model)
    model.set_active_adapters("h")
    with pytest.raises(ValueError, match=r"adapter 'h' has nothing to merge \(houlsby "
                                         r"adapters\)"):
        model.merge_adapter()
    model.merge_adapter("a")  # activates it: the shared kernels hold its update
    assert model.active_adapter == "a" and model.bert.merged_adapters() == ["a"]
    np.testing.assert_allclose(run(model), outputs["a"], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="'a' is merged already"):
        model.merge_adapter("b")
    with pytest.raises(ValueError, match="adapter 'a' is merged .* before running adapter 'b'"):
        model(dict(tiny_inputs(), adapter_names=["a", "b"]), training=False)
    with pytest.raises(ValueError, match="adapter 'b' is not merged"):
        model.unmerge_adapter("b")
    with pytest.raises(KeyError, match="no adapter named 'zz'"):
        model.unmerge_adapter("zz")
    model.unmerge_adapter("a")
    model.set_active_adapters("h")
    with model.adapter_merged("b"):
        assert model.active_adapter == "b"
        np.testing.assert_allclose(run(model), outputs["b"], rtol=1e-5, atol=1e-5)
    assert model.active_adapter == "h" and model.bert.merged_adapters() == []
    with pytest.raises(RuntimeError):  # unmerged after an error too
        with model.adapter_merged("b"):
            raise RuntimeError("inside")
    assert model.active_adapter == "h" and model.bert.merged_adapters() == []
    model.set_active_adapters(None)
    with pytest.raises(ValueError, match=r"MultiAdapterModel has no active adapter to merge: "
                                         r"pass name=\.\.\. \(adapters: \['h', 'a', 'b'\]\)"):
        model.merge_adapter()


def test_the_single_set_of_a_runner_style_model_merges_by_method(tiny_config, source):
    model = ab.BertClassifier(tiny_config, 2, LORA)
    model.build_with_dummy_inputs()
    copy_weights(source, model)
    rng = np.random.default_rng(5)
    for name, variable in tf1_variables(model).items():
        if "_lora_" in name:
            variable.assign(rng.normal(0, 0.3, variable.shape).astype("float32"))
    expected = run(model)
    before = kernels(model)
    model.merge_adapter()  # no named adapter: the model's own set
    assert model.bert.merged_adapters() == [None]
    np.testing.assert_allclose(run(model), expected, rtol=1e-5, atol=1e-5)
    model.unmerge_adapter()
    for name, value in before.items():
        np.testing.assert_array_equal(tf1_variables(model)[name].numpy(), value, err_msg=name)
    same(run(model), expected)


# ------------------------------------------------------- a family of one's own
def docs_family_example() -> str:
    """The "Adding an adapter family" block of docs/adapters.md."""
    text = (REPO / "docs" / "adapters.md").read_text()
    start = text.index("<!-- family-example")
    return re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)


@pytest.fixture
def gated_family(tmp_path, monkeypatch):
    """Runs the docs' block (on a tiny backbone standing in for MiniLM) as a module, which
    registers the "gated" family; unregisters it afterwards."""
    from adapter_bert.model import checkpoints
    from adapter_bert.model.config import adapter_families, unregister_adapter_family
    from tests.runner_utils import write_tiny_backbone
    tiny = write_tiny_backbone(tmp_path / "minilm_stand_in", BERT_VOCAB)
    monkeypatch.setattr(checkpoints, "default_backbone_dir", lambda: str(tiny))
    # A module file rather than exec: AutoGraph reads the layer's source.
    (tmp_path / "docs_gated_family.py").write_text(docs_family_example())
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield importlib.import_module("docs_gated_family")
    finally:
        sys.modules.pop("docs_gated_family", None)
        if "gated" in [family.name for family in adapter_families()]:
            unregister_adapter_family("gated")


def test_the_docs_family_goes_through_add_save_and_load(gated_family, tiny_config, source,
                                                        tmp_path):
    config = AdapterConfig(size=M, adapter_type="gated", gated_init=0.5)
    model = make("classifier", tiny_config, source)
    model.add_adapter("gate", config, num_labels=3, labels=["a", "b", "c"], train_pooler=False)
    gates = [layer for layer in model.bert._flatten_layers()  # noqa: SLF001
             if isinstance(layer, gated_family.GatedAdapter)]
    assert len(gates) == 2 * 2 and {float(g.gate.numpy()) for g in gates} == {0.5}
    model.train_adapter("gate", verbose=False)
    # Per slot 2 * 16 * M + M + 16 + 1 (the gate); two slots in each of two layers.
    assert config.param_count(tiny_config) == 4 * (2 * 16 * M + M + 16 + 1)
    own = config.param_count(tiny_config) + (1 + 2 * 2) * 2 * 16 + (3 * 16 + 3)
    assert count(model.trainable_weights) == own
    assert parameter_summary(model)["adapters"] == (config.param_count(tiny_config),) * 2
    perturb(model, "gate")
    expected = run(model)
    model.save_adapter(str(tmp_path / "gate"))
    stored = json.loads((tmp_path / "gate" / "adapter_config.json").read_text())
    assert stored["adapter_config"]["adapter_type"] == "gated"
    assert stored["adapter_config"]["gated_init"] == 0.5
    loaded = ab.load_adapter(str(tmp_path / "gate"),
                             backbone=str(write_backbone(source, tmp_path / "backbone")))
    assert loaded.labels == {"gate": ["a", "b", "c"]}
    assert sum(isinstance(layer, gated_family.GatedAdapter)
               for layer in loaded.bert._flatten_layers()) == 4  # noqa: SLF001
    same(run(loaded), expected)
    multi = make("multi", tiny_config, source)
    assert multi.load_adapter(str(tmp_path / "gate")) == "gate"
    same(run(multi), expected)
    with pytest.raises(ValueError, match=r"nothing to merge \(gated adapters\)"):
        loaded.merge_adapter()
