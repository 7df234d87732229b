"""Tuning modes: exact trainable counts against closed forms, report format, one train step."""

import re

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from adapter_bert.model.config import AdapterConfig
from adapter_bert.model.heads import BertClassifierNetwork
from adapter_bert.adapters.tuning import (apply_tuning, parameter_line, parameter_report,
                                          parameter_summary, train_only)
from adapter_bert.adapters.models import BertClassifier
from adapter_bert.model.naming import tf1_variables
from tests.conftest import bench_module, tiny_inputs

op_profile = bench_module("op_profile")

M = 4          # adapter size
LABELS = 3


def closed_form(cfg, m=M, labels=LABELS):
    """Parameter counts of a classifier, component by component (`adapters` and the
    adapter's LayerNorm copies only in a model built with adapters; `per_layer`: one
    transformer layer's backbone weights)."""
    h, i, n_layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    adapter = 2 * h * m + m + h
    per_layer_dense = 4 * (h * h + h) + (h * i + i) + (i * h + h)
    return {
        "adapters": 2 * n_layers * adapter,
        "layer_norms": (1 + 2 * n_layers) * 2 * h,
        "head": labels * h + labels,
        "pooler": h * h + h,
        "embeddings": (cfg.vocab_size + cfg.max_position_embeddings + cfg.type_vocab_size) * h,
        "transformer": n_layers * per_layer_dense,
        "per_layer": per_layer_dense + 2 * 2 * h,
    }


def built_classifier(cfg, adapters=True):
    """A built classifier with adapters of size M (as the runners' in tuning mode
    "adapter"), or without (as theirs in the other modes)."""
    model = BertClassifier(cfg, LABELS, AdapterConfig(size=M) if adapters else None)
    model(tiny_inputs())
    return model


def trained_names(model):
    """TF1 names of the weights that train (Keras' own names depend on build order)."""
    trained = {id(v) for v in model.trainable_weights}
    return [name for name, v in tf1_variables(model).items() if id(v) in trained]


def trainable_count(model):
    return sum(int(np.prod(v.shape)) for v in model.trainable_weights)


def test_adapter_mode_trains_adapters_layernorms_and_head(tiny_config):
    model = built_classifier(tiny_config)
    apply_tuning(model, "adapter", train_pooler=False)
    c = closed_form(tiny_config)
    assert trainable_count(model) == c["adapters"] + c["layer_norms"] + c["head"]
    names = {v.name for v in model.trainable_weights}
    assert any("embeddings/LayerNorm" in n for n in names)
    assert not any("pooler" in n for n in names)


def test_full_layernorm_and_top_k_counts(tiny_config):
    model = built_classifier(tiny_config, adapters=False)
    c = closed_form(tiny_config)
    total = sum(v for k, v in c.items() if k not in ("per_layer", "adapters"))
    apply_tuning(model, "full")
    assert trainable_count(model) == total == model.count_params()
    apply_tuning(model, "layernorm", train_pooler=False)
    assert trainable_count(model) == c["layer_norms"] + c["head"]
    apply_tuning(model, "top_k", top_k=1)
    assert trainable_count(model) == c["per_layer"] + c["pooler"] + c["head"]
    apply_tuning(model, "top_k", top_k=0)
    assert trainable_count(model) == c["pooler"] + c["head"]


def test_freezing_does_not_depend_on_build_order(tiny_config):
    before = BertClassifier(tiny_config, LABELS, AdapterConfig(size=M))
    apply_tuning(before, "adapter", train_pooler=False)  # decided before any weight exists
    before(tiny_inputs())
    after = built_classifier(tiny_config)
    apply_tuning(after, "adapter", train_pooler=False)
    assert [v.name for v in before.trainable_weights] == [v.name for v in after.trainable_weights]
    assert trainable_count(before) == trainable_count(after)


def test_switching_modes_back_and_forth_is_exact(tiny_config):
    model = built_classifier(tiny_config, adapters=False)
    apply_tuning(model, "layernorm")
    first = trainable_count(model)
    apply_tuning(model, "full")
    apply_tuning(model, "layernorm")
    assert trainable_count(model) == first
    adapters = built_classifier(tiny_config)
    apply_tuning(adapters, "adapter", train_pooler=False)
    first = trainable_count(adapters)
    apply_tuning(adapters, "adapter", train_pooler=True)
    apply_tuning(adapters, "adapter", train_pooler=False)
    assert trainable_count(adapters) == first


@pytest.mark.parametrize("mode, top_k, message", [
    ("adaptor", None, "unknown tuning mode 'adaptor'"),
    ("top_k", None, r"0 <= top_k <= 2"),
    ("top_k", 3, r"0 <= top_k <= 2"),
    ("full", 1, "only used with tuning mode 'top_k'"),
])
def test_bad_tuning_arguments(tiny_config, mode, top_k, message):
    with pytest.raises(ValueError, match=message):
        apply_tuning(built_classifier(tiny_config), mode, top_k)


def test_adapter_mode_without_adapters_is_an_error(tiny_config):
    with pytest.raises(ValueError, match="needs a model with adapters"):
        apply_tuning(BertClassifierNetwork(tiny_config, 2), "adapter")


def test_report_line_and_table(tiny_config):
    model = built_classifier(tiny_config)
    apply_tuning(model, "adapter", train_pooler=False)
    c = closed_form(tiny_config)
    summary = parameter_summary(model)
    assert summary["adapters"] == (c["adapters"], c["adapters"])
    assert summary["pooler"] == (0, c["pooler"])
    report = parameter_report(model)
    line = report.splitlines()[0]
    trainable = c["adapters"] + c["layer_norms"] + c["head"]
    assert re.fullmatch(r"trainable params: [\d,]+ \|\| all params: [\d,]+ \|\| trainable%: \d+\.\d{4}",
                        line)
    assert f"trainable params: {trainable:,} " in line
    assert "frozen" in report and "adapters" in report


def test_parameter_line_matches_the_documented_example():
    assert parameter_line(2379264, 111863042) == (
        "trainable params: 2,379,264 || all params: 111,863,042 || trainable%: 2.1269")


def test_one_optimizer_step_changes_exactly_the_trainable_variables(tiny_config):
    model = built_classifier(tiny_config)
    apply_tuning(model, "adapter", train_pooler=False)
    before = {v.name: v.numpy().copy() for v in model.weights}
    optimizer = keras.optimizers.Adam(1e-2)
    inputs = tiny_inputs()
    with tf.GradientTape() as tape:
        logits = model(inputs, training=True)
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            tf.constant([0, 2]), logits, from_logits=True))
    grads = tape.gradient(loss, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    trainable = {v.name for v in model.trainable_weights}
    changed = {v.name for v in model.weights if not np.array_equal(before[v.name], v.numpy())}
    assert changed == trainable
    assert len(trainable) == 4 * 4 + 2 * 5 + 2  # adapter vars, LayerNorm vars, head vars


@pytest.mark.parametrize("mode", ["adapter", "layernorm", "full"])
def test_optimizer_keeps_slots_only_for_trainable_variables(tiny_config, mode):
    from adapter_bert.training.optimizer import create_optimizer
    model = built_classifier(tiny_config, adapters=mode == "adapter")
    apply_tuning(model, mode)
    optimizer = create_optimizer(1e-3, num_train_steps=10, num_warmup_steps=1)
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(tiny_inputs(), np.array([0, 2]), epochs=1, verbose=0)
    trainable = model.trainable_weights
    slots = [v for v in optimizer.variables if v is not optimizer.iterations]
    # Adam keeps a first and a second moment per trained variable, and nothing for
    # frozen ones: adapter tuning pays no optimizer memory for the backbone.
    assert len(slots) == 2 * len(trainable)
    assert sum(int(np.prod(v.shape)) for v in slots) == 2 * trainable_count(model)


def test_train_pooler_adds_exactly_the_pooler(tiny_config):
    model = built_classifier(tiny_config)
    c = closed_form(tiny_config)
    apply_tuning(model, "adapter", train_pooler=True)
    assert trainable_count(model) == c["adapters"] + c["layer_norms"] + c["head"] + c["pooler"]
    plain = built_classifier(tiny_config, adapters=False)
    apply_tuning(plain, "layernorm", train_pooler=True)
    assert trainable_count(plain) == c["layer_norms"] + c["head"] + c["pooler"]


def test_untrained_pooler_is_detected_by_its_zero_bias(tiny_config):
    from adapter_bert.adapters.tuning import pooler_is_untrained
    model = built_classifier(tiny_config)
    assert pooler_is_untrained(model)  # Keras initialises biases to zero
    model.bert.pooler.dense.bias.assign(tf.fill([16], 0.01))
    assert not pooler_is_untrained(model)


def test_auto_trains_a_never_trained_pooler_and_says_so(tiny_config, caplog):
    model = built_classifier(tiny_config)  # fresh: the pooler's bias is all zero
    c = closed_form(tiny_config)
    with caplog.at_level("WARNING", logger="adapter_bert.adapters.tuning"):
        apply_tuning(model, "adapter")  # train_pooler="auto", the default
    assert trainable_count(model) == c["adapters"] + c["layer_norms"] + c["head"] + c["pooler"]
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["The backbone's pooler was never trained (all-zero bias): training it "
                     "with the adapter weights. Pass train_pooler=False (--train_pooler=false) "
                     "to freeze it as the original adapter-bert does."]
    caplog.clear()
    plain = built_classifier(tiny_config, adapters=False)
    apply_tuning(plain, "layernorm", train_pooler="auto")
    assert trainable_count(plain) == c["layer_norms"] + c["head"] + c["pooler"]
    apply_tuning(model, "adapter", train_pooler="false")  # the flag's spelling
    assert not any("pooler" in n for n in trained_names(model))


def test_auto_freezes_a_trained_pooler_and_an_unbuilt_one_silently(tiny_config, caplog):
    model = built_classifier(tiny_config)
    model.bert.pooler.dense.bias.assign(tf.fill([16], 0.01))  # as NSP pretraining leaves it
    unbuilt = BertClassifier(tiny_config, LABELS, AdapterConfig(size=M))
    with caplog.at_level("WARNING", logger="adapter_bert.adapters.tuning"):
        apply_tuning(model, "adapter")
        apply_tuning(unbuilt, "adapter")  # no weights to judge: the original's choice
    assert not caplog.records
    assert not any("pooler" in n for n in trained_names(model))
    unbuilt(tiny_inputs())
    assert not any("pooler" in n for n in trained_names(unbuilt))
    apply_tuning(model, "adapter", train_pooler=True)
    assert any("pooler" in n for n in trained_names(model))


def test_auto_trains_a_pooler_the_checkpoint_lacked(tiny_config, caplog):
    from types import SimpleNamespace
    model = built_classifier(tiny_config)
    model.bert.pooler.dense.bias.assign(tf.fill([16], 0.01))
    model.load_report = SimpleNamespace(pooler_missing=["bert/pooler/dense/bias"])
    with caplog.at_level("WARNING", logger="adapter_bert.adapters.tuning"):
        apply_tuning(model, "adapter")
    assert "pooler was never trained (absent): training it with the adapter weights" \
        in caplog.text
    assert any("pooler" in n for n in trained_names(model))


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_bad_train_pooler_values(tiny_config, value):
    with pytest.raises(ValueError, match="train_pooler must be 'auto', True or False"):
        apply_tuning(built_classifier(tiny_config), "adapter", train_pooler=value)


@pytest.mark.realweights
def test_minilm_pooler_is_untrained():
    from adapter_bert.model.factory import build_pretrained
    from adapter_bert.adapters.tuning import pooler_is_untrained
    assert pooler_is_untrained(build_pretrained())


def executed_matmuls(model, inputs, labels):
    """Names of the MatMul ops TensorFlow ran in one `fit` step, from a profiler trace.

    The traced graph holds a weight-gradient MatMul for every kernel, frozen or not;
    what matters is which of them survive graph pruning and actually run.
    """
    model.fit(inputs, labels, epochs=1, verbose=0)  # trace and warm up outside the profile
    events = op_profile.op_events(lambda: model.fit(inputs, labels, epochs=1, verbose=0))
    return [name for name, op_type, _ in events if op_profile.is_matmul(op_type)]


@pytest.mark.parametrize("mode", ["adapter", "full"])
def test_frozen_kernels_get_no_weight_gradient_at_run_time(tiny_config, mode):
    from adapter_bert.training.optimizer import create_optimizer
    model = built_classifier(tiny_config, adapters=mode == "adapter")
    apply_tuning(model, mode, train_pooler=False)
    model.compile(optimizer=create_optimizer(1e-3, num_train_steps=10, num_warmup_steps=1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    backward = [n for n in executed_matmuls(model, tiny_inputs(), np.array([0, 2]))
                if n.startswith("gradient_tape/")]
    layers = tiny_config.num_hidden_layers
    backbone = 6 * layers + 1        # Q, K, V, attention output and 2 FFN kernels; pooler
    # 2 adapters per layer, each a down and an up projection (full fine-tuning has none).
    adapters = 2 * 2 * layers if mode == "adapter" else 0
    head = 1
    # Every matmul needs its input gradient (adapters sit in every layer, down to layer 0);
    # a weight gradient is computed only where the kernel trains.
    input_gradients = backbone + adapters + head
    weight_gradients = adapters + head if mode == "adapter" else backbone + head
    # Attention's two products (scores, context) per layer: both operands are activations;
    # and the scores product again, recomputed for the softmax gradient (attention_kernel).
    attention_gradients = 2 * 2 * layers + layers
    assert len(backward) == input_gradients + weight_gradients + attention_gradients, backward


@pytest.mark.realweights
def test_readme_example_trains_what_the_runner_trains():
    """The library's default on the embedded MiniLM is run_classifier.py's: the README's
    figures (753,794 trainable, pooler included) for both."""
    from adapter_bert.adapters.models import load_pretrained
    model = load_pretrained(adapter_config=AdapterConfig(size=64), head="classifier",
                            num_labels=2)
    apply_tuning(model, "adapter")
    assert parameter_report(model).splitlines()[0] == (
        "trainable params: 753,794 || all params: 23,309,186 || trainable%: 3.2339")
    assert parameter_summary(model)["pooler"] == (147840, 147840)


def test_a_layer_whose_children_own_no_weights_freezes_by_keras_flag(tiny_config, tmp_path):
    """LoRA with dropout holds a Dropout child: freezing it must not move its weights
    between Keras' lists (Keras would track them twice and refuse to load the file)."""
    model = BertClassifier(tiny_config, 2, AdapterConfig(size=4, adapter_type="lora",
                                                         lora_dropout=0.1))
    model(tiny_inputs())
    train_only(model, [])  # everything frozen
    for layer in model._flatten_layers():
        layer._update_trackables()  # what Keras does on loading
        own = layer._trainable_weights + layer._non_trainable_weights
        assert len({id(v) for v in own}) == len(own), layer.name
    model.save(str(tmp_path / "model.keras"))
    keras.models.load_model(str(tmp_path / "model.keras"))
