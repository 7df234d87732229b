"""Keras BERT layers, the one method through which its blocks run adapters, and heads."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from adapter_bert.adapters.models import BertClassifier
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
    model = BertClassifierNetwork(tiny_config, 3)
    clone = BertClassifierNetwork.from_config(model.get_config())
    assert clone.get_config() == model.get_config() and clone.num_labels == 3
    span = BertSpanNetwork(tiny_config)
    assert BertSpanNetwork.from_config(span.get_config()).get_config() == span.get_config()
    bert = BertNetwork(tiny_config)
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


class _Recorder:
    """Stands in for a layer of a `BlockModification`: counts calls, returns `fn(*args)`."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args):
        self.calls += 1
        return self.fn(*args)


def test_every_block_runs_what_modification_returns(tiny_config, monkeypatch):
    """A block's call reads its task branches only through `modification`."""
    bert = BertNetwork(tiny_config)
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


def test_tf1_names_do_not_depend_on_build_order(tiny_config):
    first = BertClassifier(tiny_config, 2, AdapterConfig(size=4))
    first(tiny_inputs())
    second = BertClassifier(tiny_config, 2, AdapterConfig(size=4))
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
        clf = BertClassifier(tiny_config, 2, AdapterConfig(size=4))
        logits = clf(tiny_inputs(), training=False)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert logits.dtype == tf.float32
    assert all(v.dtype == tf.float32 for v in clf.weights)
    reference = BertClassifier(tiny_config, 2, AdapterConfig(size=4))
    reference(tiny_inputs())
    reference.set_weights(clf.get_weights())
    np.testing.assert_allclose(logits, reference(tiny_inputs(), training=False), atol=0.05)
