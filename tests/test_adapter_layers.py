"""Adapter families behind one interface: Houlsby, Pfeiffer, parallel, LoRA, AdapterFusion.

Each family: identity (or near-identity) at initialisation, its forward pass against a
hand-written formula, the trainable set and parameter counts of tuning mode "adapter"
against closed forms, TF1 names, get_config, and one run_classifier.py run.
"""

import json

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from adapter_bert.model.adapter_layers import (HoulsbyAdapter, LoraAdapter, ParallelAdapter,
                                   PfeifferAdapter)
from adapter_bert.model.config import AdapterConfig, ConfigError
from adapter_bert.adapters.fusion import AdapterFusion
from adapter_bert.model.encoder import BertNetwork, BertResidualOutput, BertSelfAttention
from adapter_bert.adapters.multitask import MultiAdapterModel
from adapter_bert.adapters.named import add_named_adapter, named_adapter_info
from adapter_bert.model.blocks import TaskBranch
from adapter_bert.model.checkpoints import checkpoint_variables
from adapter_bert.model.naming import tf1_variables
from adapter_bert.adapters.tuning import apply_tuning, parameter_summary
from adapter_bert.adapters.models import BertClassifier
from tests.conftest import tiny_inputs
from tests.runner_utils import read_results, run_in_process

M = 4
TYPES = ("houlsby", "pfeiffer", "parallel", "lora")


def adapter_params(cfg, adapter_type, m=M):
    """Closed-form adapter weights of a whole model for each family (default positions)."""
    return closed_form(cfg.hidden_size, cfg.num_hidden_layers, adapter_type, m)


def closed_form(h, layers, adapter_type, m):
    """Adapter weights of `layers` layers of width `h` with bottleneck (or rank) `m`."""
    bottleneck = 2 * h * m + m + h
    return {"houlsby": 2 * layers * bottleneck, "pfeiffer": layers * bottleneck,
            "parallel": layers * bottleneck, "lora": layers * 2 * (2 * h * m)}[adapter_type]


def trainable_count(model):
    return sum(int(np.prod(v.shape)) for v in model.trainable_weights)


# ------------------------------------------------------------------ config
def test_config_defaults_per_family_and_old_dicts_load_as_houlsby():
    assert AdapterConfig().positions == "both"
    assert AdapterConfig(adapter_type="pfeiffer").layer_positions(0) == ("ffn",)
    assert AdapterConfig(adapter_type="parallel").positions == "ffn"
    assert AdapterConfig(adapter_type="parallel", positions="both").positions == "both"
    lora = AdapterConfig(size=8, adapter_type="lora", lora_alpha=32)
    assert lora.lora_scale == 4.0 and AdapterConfig(size=8, adapter_type="lora").lora_scale == 1.0
    old = {"size": 8, "activation": "gelu", "init_scale": 1e-3, "positions": "ffn", "leave_out": [1]}
    restored = AdapterConfig.from_dict(old)
    assert restored.adapter_type == "houlsby" and restored.layer_positions(0) == ("ffn",)
    assert AdapterConfig.from_dict(lora.to_dict()) == lora


@pytest.mark.parametrize("kwargs, message", [
    ({"adapter_type": "prefix"}, "adapter_type must be one of"),
    ({"adapter_type": "pfeiffer", "positions": "both"}, "pfeiffer adapters go at positions"),
    ({"adapter_type": "lora", "positions": "ffn"}, "lora adapters go at positions"),
    ({"lora_alpha": 16}, "lora_alpha applies to adapter_type 'lora'"),
    ({"adapter_type": "lora", "lora_alpha": 0}, "lora_alpha must be > 0"),
])
def test_config_rejects_inconsistent_families(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        AdapterConfig(**kwargs)


# --------------------------------------------------------- identity at init
@pytest.mark.parametrize("adapter_type", TYPES)
def test_identity_at_initialisation(tiny_config, adapter_type):
    """LoRA and parallel adapters start exactly at the backbone; the others close to it."""
    bert = BertNetwork(tiny_config)
    inputs = tiny_inputs()
    plain = bert(inputs, training=False)["sequence_output"].numpy()
    add_named_adapter(bert, "t", AdapterConfig(size=M, adapter_type=adapter_type))
    adapted = bert(inputs, training=False, adapter_name="t")["sequence_output"].numpy()
    if adapter_type in ("lora", "parallel"):
        np.testing.assert_array_equal(adapted, plain)
    else:
        relative = np.linalg.norm(adapted - plain) / np.linalg.norm(plain)
        assert 0 < relative < 1e-2


# ------------------------------------------------------- forward formulas
def _layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _put(block, adapter, name="t"):
    """Gives a built block a named adapter `name` holding `adapter` (built here)."""
    branch = TaskBranch(name)
    adapter.build(block.adapter_input_shape(adapter))
    branch.adapter = adapter
    block.add_task_branch(branch)


def _block_with(tiny_config, adapter):
    block = BertResidualOutput(tiny_config)
    rng = np.random.default_rng(1)
    hidden = rng.normal(size=(2, 3, 32)).astype("float32")
    residual = rng.normal(size=(2, 3, 16)).astype("float32")
    block(hidden, residual)
    _put(block, adapter)
    for variable in adapter.weights:  # away from the (near-)identity start
        variable.assign(rng.normal(scale=0.3, size=variable.shape).astype("float32"))
    block.layer_norm.gamma.assign(rng.uniform(0.5, 1.5, size=16).astype("float32"))
    out = block(hidden, residual, training=False, adapter_name="t").numpy()
    h = hidden @ block.dense.kernel.numpy() + block.dense.bias.numpy()
    ln = lambda x: _layer_norm(x, block.layer_norm.gamma.numpy(), block.layer_norm.beta.numpy())  # noqa: E731
    return out, h, residual, ln


def _bottleneck(adapter, x, act):
    w1, b1, w2, b2 = (v.numpy() for v in (adapter.weights1, adapter.biases1, adapter.weights2,
                                          adapter.biases2))
    return act(x @ w1 + b1) @ w2 + b2


def test_pfeiffer_block_follows_adapterhub_placement(tiny_config):
    adapter = PfeifferAdapter(size=M, activation="relu")
    out, h, r, ln = _block_with(tiny_config, adapter)
    relu = lambda x: np.maximum(x, 0)  # noqa: E731
    expected = ln(h + _bottleneck(adapter, ln(h + r), relu) + r)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_parallel_block_adds_the_scaled_bottleneck_of_the_sublayer_input(tiny_config):
    adapter = ParallelAdapter(size=M, activation="relu", scaling=4.0)
    out, h, r, ln = _block_with(tiny_config, adapter)
    relu = lambda x: np.maximum(x, 0)  # noqa: E731
    expected = ln(h + 4.0 * _bottleneck(adapter, r, relu) + r)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_houlsby_block_is_unchanged_by_the_common_interface(tiny_config):
    adapter = HoulsbyAdapter(size=M, activation="relu")
    out, h, r, ln = _block_with(tiny_config, adapter)
    relu = lambda x: np.maximum(x, 0)  # noqa: E731
    np.testing.assert_allclose(out, ln(h + _bottleneck(adapter, h, relu) + r), rtol=1e-4, atol=1e-4)


def test_lora_equals_attention_with_merged_query_and_value_kernels(tiny_config):
    attention = BertSelfAttention(tiny_config)
    hidden = tf.random.normal([2, 5, 16], seed=2)
    adder = tf.zeros([2, 1, 1, 5])
    attention(hidden, adder)
    lora = LoraAdapter(rank=M, scale=2.0)
    _put(attention, lora)
    for target in ("query", "value"):
        lora.lora_b[target].assign(tf.random.normal([M, 16], stddev=0.3, seed=3))
    with_lora = attention(hidden, adder, training=False, adapter_name="t").numpy()
    for target in ("query", "value"):
        dense = getattr(attention, target)
        dense.kernel.assign_add(2.0 * lora.lora_a[target] @ lora.lora_b[target])
    merged = attention(hidden, adder, training=False).numpy()
    np.testing.assert_allclose(with_lora, merged, rtol=1e-4, atol=1e-5)


# ------------------------------------------------ names, counts, trainable set
@pytest.mark.parametrize("adapter_type, first_name", [
    ("houlsby", "bert/encoder/layer_0/attention/output/adapters/weights1"),
    ("pfeiffer", "bert/encoder/layer_0/output/adapters/weights1"),
    ("parallel", "bert/encoder/layer_0/output/adapters/weights1"),
    ("lora", "bert/encoder/layer_0/attention/self/adapters/query_lora_A"),
])
def test_adapter_mode_trains_exactly_adapters_layernorms_and_head(tiny_config, adapter_type,
                                                                  first_name):
    model = BertClassifier(tiny_config, 2, AdapterConfig(size=M, adapter_type=adapter_type))
    model(tiny_inputs())
    apply_tuning(model, "adapter", train_pooler=False)
    h, layers = tiny_config.hidden_size, tiny_config.num_hidden_layers
    layer_norms, head = (1 + 2 * layers) * 2 * h, 2 * h + 2
    expected = adapter_params(tiny_config, adapter_type)
    assert parameter_summary(model)["adapters"] == (expected, expected)
    assert trainable_count(model) == expected + layer_norms + head
    names = [n for n in checkpoint_variables(model) if "/adapters/" in n]
    assert names[0] == first_name
    trainable = {id(v) for v in model.trainable_weights}
    adapter_ids = {id(v) for n, v in checkpoint_variables(model).items() if "/adapters/" in n}
    assert adapter_ids <= trainable
    # The network that runs: the adapter's LayerNorms in place of the backbone's.
    frozen = [n for n, v in checkpoint_variables(model).items()
              if id(v) not in trainable and ("LayerNorm" in n or "/adapters/" in n)]
    assert frozen == []


def test_lora_shapes_and_param_count():
    lora = LoraAdapter(rank=3)
    lora(tf.zeros([1, 2, 10]))
    shapes = {v.name.split("/")[-1].split(":")[0]: tuple(v.shape) for v in lora.weights}
    assert shapes == {"query_lora_A": (10, 3), "query_lora_B": (3, 10),
                      "value_lora_A": (10, 3), "value_lora_B": (3, 10)}
    assert lora.count_params() == LoraAdapter.param_count(10, 3) == 2 * 2 * 10 * 3


@pytest.mark.parametrize("layer", [
    PfeifferAdapter(5, "relu", 0.1), ParallelAdapter(5, "gelu", 0.0, scaling=2.0),
    LoraAdapter(rank=3, scale=0.5), AdapterFusion(initializer_range=0.05, temperature=2.0),
], ids=["pfeiffer", "parallel", "lora", "fusion"])
def test_new_layers_round_trip_get_config(layer):
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


def test_models_with_each_family_round_trip_get_config(tiny_config):
    for adapter_type in TYPES:
        model = BertClassifier(tiny_config, 2, AdapterConfig(size=M, adapter_type=adapter_type))
        clone = BertClassifier.from_config(model.get_config())
        assert named_adapter_info(clone.bert, "adapter").adapter_config.adapter_type == adapter_type


# ------------------------------------------------------------------- fusion
def test_fusion_starts_as_the_average_of_the_adapter_outputs():
    fusion = AdapterFusion()
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(2, 3, 8)).astype("float32")
    outputs = [rng.normal(size=(2, 3, 8)).astype("float32") for _ in range(3)]
    fusion(hidden, outputs)
    fusion.query_kernel.assign(tf.zeros([8, 8]))  # scores 0 -> uniform attention
    np.testing.assert_allclose(fusion(hidden, outputs), np.mean(outputs, axis=0), atol=1e-6)
    assert fusion.count_params() == AdapterFusion.param_count(8) == 3 * (64 + 8)


def test_fusion_attends_to_the_adapter_that_matches_the_query():
    fusion = AdapterFusion()
    hidden = tf.ones([1, 1, 4])
    outputs = [-tf.ones([1, 1, 4]), 3.0 * tf.ones([1, 1, 4])]
    fusion(hidden, outputs)
    fusion.query_kernel.assign(tf.eye(4))
    fusion.key_kernel.assign(tf.eye(4))
    probs = fusion.attention_probs(hidden, outputs).numpy()[0, 0]
    assert probs[1] > 0.999  # q.k = 12 against -4
    np.testing.assert_allclose(fusion(hidden, outputs).numpy()[0, 0], 3.0, atol=1e-3)


def test_fusion_task_trains_only_fusion_layernorms_and_head(tiny_config):
    bert = BertNetwork(tiny_config)
    bert.build_with_dummy_inputs()
    model = MultiAdapterModel(bert)
    for name in ("a", "b"):
        model.add_adapter(name, AdapterConfig(size=M, init_scale=0.3), num_labels=2)
    model.add_adapter_fusion("fused", ["a", "b"], num_labels=3)
    model.train_adapter("fused")
    h, layers = tiny_config.hidden_size, tiny_config.num_hidden_layers
    fusion = 2 * layers * AdapterFusion.param_count(h)
    layer_norms, head = (1 + 2 * layers) * 2 * h, 3 * h + 3
    assert trainable_count(model) == fusion + layer_norms + head
    names = {n for n, v in tf1_variables(model).items()
             if id(v) in {id(w) for w in model.trainable_weights}}
    assert "bert/encoder/layer_1/output/fused/adapter_fusion/value_kernel" in names
    assert not any("/a/" in n or "/b/" in n for n in names)
    variables = tf1_variables(model)
    before = {n: v.numpy().copy() for n, v in variables.items()}
    optimizer = keras.optimizers.Adam(1e-2)
    with tf.GradientTape() as tape:
        logits = model(tiny_inputs(), training=True)
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            tf.constant([0, 2]), logits, from_logits=True))
    grads = tape.gradient(loss, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    changed = {n for n, v in variables.items() if not np.array_equal(before[n], v.numpy())}
    # The key bias adds the same q.b_k to every adapter's score, which softmax cannot
    # see: its gradient is zero up to rounding, so it may or may not move.
    key_biases = {n for n in names if n.endswith("adapter_fusion/key_bias")}
    assert changed - key_biases == names - key_biases
    name_of = {id(v): n for n, v in variables.items()}
    key_grads = [g for v, g in zip(model.trainable_weights, grads)
                 if name_of.get(id(v)) in key_biases]
    assert len(key_grads) == len(key_biases) == 2 * tiny_config.num_hidden_layers
    for grad in key_grads:
        np.testing.assert_allclose(grad.numpy(), 0.0, atol=1e-6)


def test_fusion_refuses_lora_and_mismatched_slots(tiny_config):
    bert = BertNetwork(tiny_config)
    bert.build_with_dummy_inputs()
    model = MultiAdapterModel(bert)
    model.add_adapter("h", AdapterConfig(size=M))
    model.add_adapter("p", AdapterConfig(size=M, adapter_type="pfeiffer"))
    model.add_adapter("l", AdapterConfig(size=M, adapter_type="lora"))
    with pytest.raises(ValueError, match="is a lora adapter, which updates projections"):
        model.add_adapter_fusion("f", ["h", "l"])
    with pytest.raises(ValueError, match="different slots"):
        model.add_adapter_fusion("f", ["h", "p"])
    with pytest.raises(KeyError, match="no adapter named 'x'"):
        model.add_adapter_fusion("f", ["h", "x"])


# --------------------------------------------------------- run_classifier.py
@pytest.mark.slow
@pytest.mark.parametrize("adapter_type", ("pfeiffer", "parallel", "lora"))  # houlsby: test_run_classifier
def test_run_classifier_trains_each_family(backbone, mrpc_dir, tmp_path, adapter_type):
    out = tmp_path / "out"
    flags = [f"--init_checkpoint={backbone / 'bert_model.ckpt'}", "--max_seq_length=32",
             "--train_batch_size=16", "--eval_batch_size=128", "--learning_rate=1e-3",
             "--adapter_size=8", "--train_pooler=false", "--save_checkpoints_steps=100",
             f"--data_dir={mrpc_dir}", "--task_name=MRPC"]
    code, _ = run_in_process("run_classifier", [
        "--do_train", "--do_eval", "--num_train_epochs=0.01", f"--adapter_type={adapter_type}",
        "--lora_alpha=16" if adapter_type == "lora" else "--adapter_init_scale=1e-3",
        f"--output_dir={out}", *flags])
    assert code == 0
    results = read_results(out / "eval_results.txt")
    h, layers = 16, 2  # the tiny backbone
    expected = closed_form(h, layers, adapter_type, 8) + (1 + 2 * layers) * 2 * h + 2 * h + 2
    assert results["trainable_params"] == str(expected)
    stored = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert stored["adapter_config"]["adapter_type"] == adapter_type
    assert stored["format_version"] == 2 and stored["backbone_fingerprint"].startswith("sha256:")
    # The file alone rebuilds the right family: evaluating it reproduces the metrics.
    code, _ = run_in_process("run_classifier", [
        "--do_eval", f"--load_adapter={out / 'adapter'}", f"--output_dir={tmp_path / 'again'}",
        *flags])
    assert code == 0
    again = read_results(tmp_path / "again" / "eval_results.txt")
    assert float(again["eval_loss"]) == pytest.approx(float(results["eval_loss"]), abs=1e-6)


@pytest.mark.slow
def test_run_squad_selects_the_family(backbone, squad_dir, tmp_path):
    from tests.test_run_squad import run_squad, squad_flags, write_slice
    dev = write_slice(squad_dir / "dev-v1.1.json", tmp_path / "dev.json", paragraphs=1)
    out = tmp_path / "out"
    result = run_squad(["--do_predict", f"--predict_file={dev}", "--adapter_type=lora",
                        "--train_pooler=false", *squad_flags(backbone, out)])
    assert result.returncode == 0, result.stderr[-3000:]
    results = read_results(out / "eval_results.txt")
    h, layers = 16, 2
    span_head = 2 * h + 2
    assert results["trainable_params"] == str(closed_form(h, layers, "lora", 8)
                                              + (1 + 2 * layers) * 2 * h + span_head)


@pytest.mark.parametrize("adapter_type", ["houlsby", "pfeiffer", "parallel"])
def test_mixed_bfloat16_keeps_a_new_adapters_small_output_in_the_skip_sum(adapter_type):
    # A new adapter adds well under 1% of its input: a bfloat16 sum would round most of it
    # away, so the skip sum is float32 (model/adapter_layers.py skip_sum).
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        cls = {"houlsby": HoulsbyAdapter, "pfeiffer": PfeifferAdapter,
               "parallel": ParallelAdapter}[adapter_type]
        adapter = cls(size=8, init_scale=1e-2)
        x = tf.cast(tf.random.stateless_normal([4, 6, 32], [1, 2]), tf.bfloat16)
        norm = keras.layers.LayerNormalization()
        adapter(x, x, norm)
        if adapter_type == "parallel":  # starts exactly at zero: give it a small output
            adapter.weights2.assign(tf.random.stateless_normal(adapter.weights2.shape, [3, 4]) * 1e-3)
        out = adapter(x, x, norm)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert out.dtype == tf.float32
    delta = out.numpy() - tf.cast(x, tf.float32).numpy()
    assert np.abs(delta).max() > 0
    rounded = tf.cast(tf.cast(out, tf.bfloat16), tf.float32).numpy() - tf.cast(x, tf.float32).numpy()
    # bfloat16 rounding of the sum would lose a large share of what the adapter adds.
    lost = np.linalg.norm(rounded - delta) / np.linalg.norm(delta)
    assert lost > 0.05


def test_adapter_shapes_names_and_param_count():
    adapter = HoulsbyAdapter(size=4)
    out = adapter(tf.random.normal([2, 3, 10]))
    assert out.shape == (2, 3, 10)
    shapes = {v.name.split("/")[-1]: tuple(v.shape) for v in adapter.weights}
    assert shapes == {"weights1:0": (10, 4), "biases1:0": (1, 4), "weights2:0": (4, 10),
                      "biases2:0": (1, 10)}
    assert adapter.count_params() == HoulsbyAdapter.param_count(10, 4) == 2 * 10 * 4 + 4 + 10


def test_adapter_is_identity_with_zero_init_and_near_identity_by_default():
    x = tf.random.normal([4, 5, 32], seed=1)
    np.testing.assert_array_equal(HoulsbyAdapter(size=8, init_scale=0.0)(x), x)
    near = HoulsbyAdapter(size=8)(x)  # init_scale 1e-3
    relative = float(tf.norm(near - x) / tf.norm(x))
    assert 0 < relative < 1e-3


def test_adapter_computes_bottleneck_with_skip():
    adapter = HoulsbyAdapter(size=3, activation="relu", init_scale=0.5)
    x = np.random.default_rng(0).normal(size=(2, 4, 6)).astype("float32")
    out = adapter(x).numpy()
    w1, b1, w2, b2 = (v.numpy() for v in (adapter.weights1, adapter.biases1, adapter.weights2,
                                          adapter.biases2))
    expected = x + np.maximum(x @ w1 + b1, 0) @ w2 + b2
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
