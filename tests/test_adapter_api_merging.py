"""adapters/api.py: named LoRA adapters merged into and out of their kernels through the
adapter API's methods (adapters/merging.py's functions: tests/test_adapter_families.py)."""

import json

import numpy as np
import pytest
import tensorflow as tf

import adapter_bert as ab
from adapter_bert.adapters.files import AdapterFileError
from adapter_bert.adapters.tuning import parameter_line
from adapter_bert.model.config import AdapterConfig
from adapter_bert.model.naming import tf1_variables
from tests.adapter_api_helpers import (M, assert_unchanged, count, differ,
                                       fit_briefly, make, perturb, run, same, write_backbone)
from tests.adapter_api_helpers import source_fixture  # noqa: F401 (fixture `source`)
from tests.conftest import tiny_inputs


# ------------------------------------------------------------------ LoRA merging
LORA = AdapterConfig(size=M, adapter_type="lora", lora_alpha=8,
                     lora_targets=["key", "attention_output", "intermediate"], lora_dropout=0.2)
# The kernels LORA's targets update, in every layer.
LORA_KERNELS = ("attention/self/key", "attention/output/dense", "intermediate/dense")


def kernels(model):
    return {n: v.numpy().copy() for n, v in tf1_variables(model).items() if n.endswith("/kernel")}


@pytest.mark.slow
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
    # The report leaves out the backbone LayerNorms "lora" replaces with its copies.
    shadowed = (1 + 2 * 2) * 2 * 16
    assert "adapters" in report and parameter_line(own, count(model.weights) - shadowed) in report
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
    losses = fit_briefly(model, 3e-2, examples=8, epochs=6)
    assert losses[-1] < losses[0]
    assert_unchanged(model, frozen)
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
