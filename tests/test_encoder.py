"""Keras BERT layers, the adapter slots of its blocks, and heads on tiny configs."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from adapter_bert.model.adapter_layers import HoulsbyAdapter
from adapter_bert.model.config import AdapterConfig
from adapter_bert.model.heads import BertClassifierNetwork, BertSpanNetwork, ClassifierHead, SpanHead
from adapter_bert.model.blocks import BlockModification, ModifiableBlock
from adapter_bert.model.encoder import (BertAttention, BertEmbeddings, BertEncoder, BertIntermediate,
                                   BertNetwork, BertPooler, BertResidualOutput, BertSelfAttention,
                                   BertTransformerLayer, EmbeddingTable)
from adapter_bert.model.naming import tf1_variables
from tests.conftest import tiny_inputs


@pytest.mark.parametrize("layer_fn", [
    lambda c: BertEmbeddings(c), lambda c: BertSelfAttention(c), lambda c: BertResidualOutput(c),
    lambda c: BertAttention(c), lambda c: BertIntermediate(c), lambda c: BertTransformerLayer(c),
    lambda c: BertEncoder(c), lambda c: BertPooler(c), lambda c: EmbeddingTable(5, 4, name="t"),
    lambda c: HoulsbyAdapter(7, "relu", 0.1), lambda c: ClassifierHead(3), lambda c: SpanHead(),
])
def test_every_layer_round_trips_get_config(tiny_config, layer_fn):
    layer = layer_fn(tiny_config)
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


def test_models_round_trip_get_config(tiny_config):
    model = BertClassifierNetwork(tiny_config, 3, AdapterConfig(size=4, leave_out=[0]))
    clone = BertClassifierNetwork.from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    assert clone.bert.adapter_config.leave_out == (0,)
    span = BertSpanNetwork(tiny_config)
    assert BertSpanNetwork.from_config(span.get_config()).get_config() == span.get_config()
    bert = BertNetwork(tiny_config, AdapterConfig(size=2))
    assert BertNetwork.from_config(bert.get_config()).get_config() == bert.get_config()


def test_backbone_outputs_and_padding_invariance(tiny_config):
    bert = BertNetwork(tiny_config)
    inputs = tiny_inputs()
    out = bert(inputs, training=False, return_all_layers=True)
    assert out["sequence_output"].shape == (2, 7, 16)
    assert out["pooled_output"].shape == (2, 16)
    assert len(out["all_layer_outputs"]) == 2
    # Changing the ids under the padding mask must not change real tokens' outputs.
    changed = dict(inputs, input_ids=inputs["input_ids"].copy())
    changed["input_ids"][0, -2:] = 7
    again = bert(changed, training=False)
    np.testing.assert_allclose(again["sequence_output"][0, :5], out["sequence_output"][0, :5],
                               atol=1e-6)


def test_two_adapters_per_layer_in_the_paper_positions(tiny_config):
    bert = BertNetwork(tiny_config, AdapterConfig(size=4))
    bert(tiny_inputs())
    names = [n for n in tf1_variables(bert) if "/adapters/" in n]
    assert len(names) == 2 * 2 * 4
    assert "bert/encoder/layer_1/attention/output/adapters/weights1" in names
    assert "bert/encoder/layer_1/output/adapters/biases2" in names


def test_adapter_positions_and_leave_out_select_slots(tiny_config):
    bert = BertNetwork(tiny_config, AdapterConfig(size=4, positions="ffn", leave_out=[0]))
    bert(tiny_inputs())
    adapters = sorted({n.rsplit("/adapters/", 1)[0] for n in tf1_variables(bert) if "/adapters/" in n})
    assert adapters == ["bert/encoder/layer_1/output"]


def test_adapters_sit_before_the_layernorm(tiny_config):
    """A huge adapter output must be normalised by the block's LayerNorm."""
    bert = BertNetwork(tiny_config, AdapterConfig(size=4, init_scale=0.0))
    bert(tiny_inputs())
    block = bert.encoder.transformer_layers[0].ffn_output_block
    hidden = tf.random.normal([1, 3, 32], seed=3)  # the intermediate width
    residual = tf.random.normal([1, 3, 16], seed=4)
    shift = np.linspace(-50, 50, 16, dtype="float32")[None]
    block.adapter.biases2.assign(shift)
    out = block(hidden, residual, training=False).numpy()
    # The large adapter output went through LayerNorm: per token mean 0 (beta) and
    # standard deviation 1 (gamma), dominated by the shift's linear ramp.
    np.testing.assert_allclose(out.mean(-1), 0, atol=1e-4)
    np.testing.assert_allclose(out.std(-1), 1, atol=1e-3)
    assert np.corrcoef(out[0, 0], shift[0])[0, 1] > 0.99


def test_near_identity_adapters_barely_change_the_output(tiny_config):
    inputs = tiny_inputs()
    plain = BertNetwork(tiny_config)
    reference = plain(inputs, training=False)["sequence_output"]
    plain.add_adapters(AdapterConfig(size=8))  # added after build: built on the spot
    with_adapters = plain(inputs, training=False)["sequence_output"]
    relative = float(tf.norm(with_adapters - reference) / tf.norm(reference))
    assert 0 < relative < 1e-2
    plain.remove_adapters()
    np.testing.assert_allclose(plain(inputs, training=False)["sequence_output"], reference, atol=1e-6)
    assert not [n for n in tf1_variables(plain) if "adapters" in n]


def test_disabling_an_adapter_slot_skips_it(tiny_config):
    bert = BertNetwork(tiny_config, AdapterConfig(size=4, init_scale=0.5))
    inputs = tiny_inputs()
    with_adapters = bert(inputs, training=False)["sequence_output"].numpy()
    for block in bert.output_blocks():
        block.adapter_enabled = False
    without = bert(inputs, training=False)["sequence_output"].numpy()
    bert.remove_adapters()
    np.testing.assert_allclose(bert(inputs, training=False)["sequence_output"], without, atol=1e-6)
    assert np.abs(with_adapters - without).max() > 1e-3


class _Recorder:
    """Stands in for a layer of a `BlockModification`: counts calls, returns `fn(*args)`."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args):
        self.calls += 1
        return self.fn(*args)


def test_every_block_runs_what_modification_returns(tiny_config, monkeypatch):
    """A block's call reads the slot and the task branches only through `modification`."""
    bert = BertNetwork(tiny_config, AdapterConfig(size=4))
    bert.build_with_dummy_inputs()
    layer = bert.encoder.transformer_layers[0]
    holders = [bert.embeddings, layer.attention.self_attention, layer.attention_output_block,
               layer.ffn_output_block, bert.pooler]
    assert all(isinstance(h, ModifiableBlock) for h in holders)
    zero_norm = _Recorder(tf.zeros_like)
    lora = _Recorder(lambda h: {"query": tf.zeros_like(h), "value": tf.zeros_like(h)})
    cancel = _Recorder(lambda hidden, residual, layer_norm: -residual)
    pooled = _Recorder(lambda x: tf.fill(tf.shape(x), 7.0))
    asked = []
    replacements = {id(bert.embeddings): BlockModification(layer_norm=zero_norm),
                    id(layer.attention.self_attention): BlockModification(adapter=lora),
                    id(layer.ffn_output_block): BlockModification(layer_norm=tf.zeros_like,
                                                                  adapter=cancel),
                    id(bert.pooler): BlockModification(dense=pooled)}
    for holder in holders:
        real = holder.modification

        def patched(adapter_name=None, holder=holder, real=real):
            asked.append((holder.name, adapter_name))
            return replacements.get(id(holder)) or real(adapter_name)
        monkeypatch.setattr(holder, "modification", patched)
    outputs = bert(tiny_inputs(), training=False, return_all_layers=True)
    assert [zero_norm.calls, lora.calls, cancel.calls, pooled.calls] == [1, 1, 1, 1]
    np.testing.assert_array_equal(outputs["all_layer_outputs"][0], 0.0)
    np.testing.assert_array_equal(outputs["pooled_output"], 7.0)
    assert {name for name, _ in asked} == {h.name for h in holders}
    assert all(adapter_name is None for _, adapter_name in asked)


def test_modification_of_each_path(tiny_config):
    from adapter_bert.adapters.named import add_named_adapter

    bert = BertNetwork(tiny_config, AdapterConfig(size=4))
    bert.build_with_dummy_inputs()
    block = bert.encoder.transformer_layers[0].ffn_output_block
    attention = bert.encoder.transformer_layers[0].attention.self_attention
    own = block.modification()
    assert own.adapter is block.adapter is not None and own.layer_norm is block.layer_norm
    assert own.fusion is None and own.fused == ()
    block.adapter_enabled = False
    assert block.modification().adapter is None
    block.adapter_enabled = True
    add_named_adapter(bert, "t", AdapterConfig(size=4))
    add_named_adapter(bert, "l", AdapterConfig(size=4, adapter_type="lora"))
    add_named_adapter(bert, "f", fuse=["t"])
    branch = block.task_branches["t"]
    task = block.modification("t")
    assert task.adapter is branch.adapter and task.adapter is not block.adapter
    assert task.layer_norm is branch.layer_norm is not block.layer_norm
    fused = block.modification("f")
    assert fused.fusion is block.task_branches["f"].fusion is not None
    assert fused.fused == (branch.adapter,)
    assert attention.modification("l").adapter is attention.task_branches["l"].adapter
    assert attention.modification("t").adapter is None  # no LoRA: plain attention
    assert bert.pooler.modification("t").dense is bert.pooler.dense  # no pooler of its own
    with pytest.raises(KeyError, match="no adapter named 'x'"):
        block.modification("x")
    bert.pooler.remove_task_branch("absent")  # removing what is not there is a no-op
    block.remove_task_branch("f")
    assert "f" not in block.task_branches and "t" in block.task_branches


def test_tf1_names_do_not_depend_on_build_order(tiny_config):
    first = BertClassifierNetwork(tiny_config, 2, AdapterConfig(size=4))
    first(tiny_inputs())
    second = BertClassifierNetwork(tiny_config, 2, AdapterConfig(size=4))
    # Build the inner pieces in another order: the head first, then a lone layer, then all.
    second.head.build([None, 16])
    second.bert.encoder.transformer_layers[1](tf.zeros([1, 2, 16]), tf.zeros([1, 1, 1, 2]))
    second(tiny_inputs())
    assert list(tf1_variables(first)) == list(tf1_variables(second))
    assert {n: v.shape for n, v in tf1_variables(first).items()} == \
        {n: v.shape for n, v in tf1_variables(second).items()}


def test_classifier_and_span_heads_use_google_names_and_shapes(tiny_config):
    clf = BertClassifierNetwork(tiny_config, 3)
    assert clf(tiny_inputs(), training=False).shape == (2, 3)
    names = tf1_variables(clf)
    assert names["output_weights"].shape == (3, 16) and names["output_bias"].shape == (3,)
    regression = BertClassifierNetwork(tiny_config, 1)
    assert regression(tiny_inputs()).shape == (2, 1)
    span = BertSpanNetwork(tiny_config)
    out = span(tiny_inputs(), training=False)
    assert out["start_logits"].shape == (2, 7) and out["end_logits"].dtype == tf.float32
    assert tf1_variables(span)["cls/squad/output_weights"].shape == (2, 16)


def test_span_head_computes_the_projection(tiny_config):
    span = BertSpanNetwork(tiny_config)
    inputs = tiny_inputs()
    out = span(inputs, training=False)
    sequence = span.bert(inputs, training=False)["sequence_output"].numpy()
    w, b = span.head.output_weights.numpy(), span.head.output_bias.numpy()
    np.testing.assert_allclose(out["start_logits"], sequence @ w[0] + b[0], atol=1e-5)
    np.testing.assert_allclose(out["end_logits"], sequence @ w[1] + b[1], atol=1e-5)


def test_shared_backbone_is_not_copied(tiny_config):
    bert = BertNetwork(tiny_config)
    a, b = BertClassifierNetwork(bert, 2), BertSpanNetwork(bert)
    a(tiny_inputs())
    b(tiny_inputs())
    assert a.bert is b.bert
    assert tf1_variables(a)["bert/pooler/dense/kernel"] is tf1_variables(b)["bert/pooler/dense/kernel"]


def test_dropout_is_active_only_in_training(tiny_config):
    clf = BertClassifierNetwork(tiny_config, 2)
    inputs = tiny_inputs()
    np.testing.assert_array_equal(clf(inputs, training=False), clf(inputs, training=False))
    assert np.abs(clf(inputs, training=True).numpy() - clf(inputs, training=False).numpy()).max() > 0


def test_mixed_bfloat16_keeps_softmax_and_logits_float32(tiny_config):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        clf = BertClassifierNetwork(tiny_config, 2, AdapterConfig(size=4))
        logits = clf(tiny_inputs(), training=False)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert logits.dtype == tf.float32
    assert all(v.dtype == tf.float32 for v in clf.weights)
    reference = BertClassifierNetwork(tiny_config, 2, AdapterConfig(size=4))
    reference(tiny_inputs())
    reference.set_weights(clf.get_weights())
    np.testing.assert_allclose(logits, reference(tiny_inputs(), training=False), atol=0.05)
