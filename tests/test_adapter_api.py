"""adapters/api.py and models.py: one adapter API on every model (`ab.BertModel`, `ab.BertClassifier`,
`ab.BertSpanModel`, `MultiAdapterModel`): add, switch, train, delete, disable, save, load."""

import hashlib
import json
import logging

import numpy as np
import pytest
import tf_keras

import adapter_bert as ab
from adapter_bert.adapters import models
from adapter_bert.adapters.files import AdapterFileError, save_trained_weights
from adapter_bert.adapters.multitask import MultiAdapterModel
from adapter_bert.adapters.tuning import apply_tuning, parameter_line
from adapter_bert.model import heads
from adapter_bert.model.config import AdapterConfig, BertConfig
from adapter_bert.model.checkpoints import CheckpointError, checkpoint_variables
from adapter_bert.model.naming import tf1_variables
from adapter_bert.adapters.models import BertClassifier
from tests.adapter_api_helpers import (HEAD_SIZES, KINDS, M, assert_unchanged, base_backbone,
                                       copy_weights, count, differ, fit_briefly, make, perturb,
                                       plain_twin, run, same, write_backbone)
from tests.adapter_api_helpers import source_fixture  # noqa: F401 (fixture `source`)
from tests.conftest import tiny_inputs


# ----------------------------------------------- the adapter a model is built with
def _train_three_steps(model):
    """Three seeded Adam steps with dropout and global-norm clipping; the logits after."""
    import tensorflow as tf
    from adapter_bert.training.loop import _random_generators, set_seed
    set_seed(5)
    _random_generators(model)
    optimizer = tf_keras.optimizers.Adam(1e-2, global_clipnorm=1.0)
    features, labels = tiny_inputs(batch=4), tf.constant([0, 1, 1, 0])
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(features, training=True))
        gradients = tape.gradient(loss, model.trainable_weights)
        optimizer.apply_gradients(zip(gradients, model.trainable_weights))
    return model(features, training=False).numpy()


# What the earlier single-slot network (adapters held by the blocks themselves, which the
# runners trained before they built a named adapter) gave on the tiny config with seed 1,
# per family: a digest of every initial value by Google name (`_digest`), the number of
# trained variables, and the logits after `_train_three_steps`. The runners' model must
# reproduce them, so that results measured before the change still hold.
_SINGLE_SLOT_REFERENCE = {
    "houlsby": ("a9850f07cc1c9b14598421f622821b12", 30,
                [0.09742549061775208, -0.09785374999046326, -0.0318327434360981, 0.04829716682434082, -0.030662482604384422, 0.04570809379220009, 0.04507109895348549, -0.03531443700194359]),
    "pfeiffer": ("8fa0787279c248ee5c0cda3ef65feae3", 22,
                [0.0704280436038971, -0.08980274945497513, -0.05337057635188103, 0.03426036983728409, -0.04931430146098137, 0.029815420508384705, 0.018016096204519272, -0.03718872740864754]),
    "parallel": ("394b54c663fd407b6f1bfa67aefd69bf", 22,
                [0.10665872693061829, -0.12177500873804092, -0.07381266355514526, 0.05824308469891548, -0.06361439824104309, 0.05399467796087265, 0.04911943897604942, -0.06706108897924423]),
    "lora": ("34771d0acdee9f362bdfb9e181452995", 22,
                [0.06852365285158157, -0.0877566710114479, -0.05273241922259331, 0.03376422077417374, -0.049341198056936264, 0.02988504245877266, 0.016938557848334312, -0.03601239621639252]),
}


def _digest(variables):
    digest = hashlib.sha256()
    for name in sorted(variables):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(variables[name].numpy()).tobytes())
    return digest.hexdigest()[:32]


@pytest.mark.parametrize("family", sorted(_SINGLE_SLOT_REFERENCE))
def test_a_model_built_with_its_adapter_trains_as_the_single_slot_network_did(
        tiny_config, family):
    """The runners' model: the same initial values, the same trained outputs."""
    from adapter_bert.training.loop import set_seed
    initial, trained, logits = _SINGLE_SLOT_REFERENCE[family]
    set_seed(1)
    model = ab.BertClassifier(tiny_config, 2, AdapterConfig(size=M, adapter_type=family),
                              adapter_name="t")
    model.build_with_dummy_inputs()
    assert model.adapter_names == ["t"] and model.active_adapter == "t"
    assert model.adapter_head("t") is model.head
    apply_tuning(model, "adapter", train_pooler=True)
    assert _digest(checkpoint_variables(model)) == initial
    assert len(model.trainable_weights) == trained == len(model.adapter_variables("t"))
    # Exact on one machine; another CPU may round the last bit of a sum differently.
    np.testing.assert_allclose(_train_three_steps(model).ravel(), logits, rtol=1e-5, atol=1e-7)


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
    model.set_active_adapters("a")
    same(run(model), out_a)
    assert not hasattr(model, "set_active_adapter")  # one name per operation
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


@pytest.mark.parametrize("targets", [None, ["intermediate", "output"]])
def test_disable_adapters_bypasses_the_adapter_the_model_is_built_with(tiny_config, source,
                                                                      targets):
    """A model built with an adapter_config (as the runners build theirs) runs as plain
    BERT, LoRA on the feed-forward projections included."""
    options = {"lora_targets": targets} if targets else {}
    model = ab.BertClassifier(tiny_config, 2, AdapterConfig(size=M, adapter_type="lora",
                                                            **options))
    model.build_with_dummy_inputs()
    copy_weights(source, model)
    rng = np.random.default_rng(3)
    for name, variable in tf1_variables(model).items():
        if "/lora" in name or "adapter" in name:
            variable.assign(rng.normal(0, 0.3, variable.shape).astype("float32"))
    expected = run(model)
    plain = heads.BertClassifierNetwork(tiny_config, 2)
    plain.build_with_dummy_inputs()
    copy_weights(model, plain)
    assert differ(expected, run(plain))
    with model.disable_adapters():
        same(run(model), run(plain))
    same(run(model), expected)


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
    # The backbone's LayerNorms do not run with "b", which has its own copies: the
    # report counts the network the model runs.
    h, layers = tiny_config.hidden_size, tiny_config.num_hidden_layers
    total = count(model.weights) - (1 + 2 * layers) * 2 * h
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
    frozen = {n: v.numpy().copy() for n, v in tf1_variables(model).items() if "/a/" not in n
              and not n.startswith("a/")}
    losses = fit_briefly(model, 1e-2, examples=16, epochs=4)
    assert losses[-1] < losses[0]
    assert_unchanged(model, frozen)


def test_apply_tuning_trains_the_active_named_adapter_and_refuses_other_modes(tiny_config,
                                                                             source):
    multi = make("multi", tiny_config, source)
    multi.add_adapter("a", AdapterConfig(size=M))
    multi.add_adapter("b", AdapterConfig(size=M))
    multi.train_adapter("b", verbose=False)
    by_train_adapter = [id(v) for v in multi.trainable_weights]
    multi.train_adapter("a", verbose=False)
    multi.set_active_adapters("b")
    apply_tuning(multi, "adapter")
    assert [id(v) for v in multi.trainable_weights] == by_train_adapter
    with pytest.raises(ValueError) as excinfo:
        apply_tuning(multi, "layernorm")
    assert str(excinfo.value) == (
        "MultiAdapterModel holds named adapters ['a', 'b']: tuning mode 'adapter' trains the "
        "active one (or model.train_adapter(name)); mode 'layernorm' would set every named "
        "adapter's weights alike")


# --------------------------------------------------------------------- files
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
    multi.save_adapter(str(tmp_path / "again"), "rte")
    same(run(ab.load_adapter(str(tmp_path / "again"), backbone=source)), expected)


def test_a_runner_style_directory_loads_as_a_named_adapter(tiny_config, source, tmp_path):
    """What run_classifier.py writes (the single set of adapters, trained weights only)."""
    run_model = BertClassifier(tiny_config, 2, AdapterConfig(size=M, adapter_type="parallel"))
    run_model.build_with_dummy_inputs()
    copy_weights(source, run_model)
    apply_tuning(run_model, "adapter", train_pooler=True)
    rng = np.random.default_rng(5)
    for variable in run_model.trainable_weights:
        variable.assign_add(rng.normal(0, 0.1, variable.shape).astype("float32"))
    save_trained_weights(run_model, str(tmp_path / "run"), "mrpc", ["0", "1"])
    loaded = ab.load_adapter(str(tmp_path / "run"), backbone=source)
    assert loaded.active_adapter == "mrpc" and loaded.labels["mrpc"] == ["0", "1"]
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
