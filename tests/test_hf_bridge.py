"""Houlsby adapters inside transformers' TF BERT: placement, identity, freezing, and
agreement with this package's encoder on the real MiniLM weights."""


import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from adapter_bert.model.config import AdapterConfig
from tests.conftest import mrpc_dev_pairs, tiny_inputs, transformers_minilm


def _hf_config(**overrides):
    from transformers import BertConfig as HFBertConfig
    values = dict(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=32, max_position_embeddings=64)
    values.update(overrides)
    return HFBertConfig(**values)


def _hf_inputs(inputs):
    return {"input_ids": inputs["input_ids"], "attention_mask": inputs["input_mask"],
            "token_type_ids": inputs["segment_ids"]}


@pytest.fixture
def tiny_hf():
    from transformers import TFBertModel
    tf.random.set_seed(0)
    model = TFBertModel(_hf_config())
    model(_hf_inputs(tiny_inputs()), training=False)
    return model


def _outputs(model, inputs):
    out = model(_hf_inputs(inputs), training=False)
    return out.last_hidden_state.numpy(), out.pooler_output.numpy()


def test_adapters_sit_in_both_output_blocks_with_block_scoped_names(tiny_hf):
    from adapter_bert.model.adapter_layers import HoulsbyAdapter
    from adapter_bert.adapters.hf_bridge import DropoutThenAdapter, adapters_by_position, output_blocks
    from adapter_bert.adapters.hf_bridge import add_adapters
    adapters = add_adapters(tiny_hf, size=4)
    assert len(adapters) == 4 and all(isinstance(a, HoulsbyAdapter) for a in adapters)
    assert sorted(adapters_by_position(tiny_hf)) == [(0, "attention"), (0, "ffn"),
                                                     (1, "attention"), (1, "ffn")]
    for _, _, block in output_blocks(tiny_hf):
        assert isinstance(block.dropout, DropoutThenAdapter)
    names = sorted(v.name for a in adapters for v in a.weights)
    # Keras numbers model names (tf_bert_model_3, ...) when several exist in a process.
    prefix = tiny_hf.name + "/bert/encoder/"
    assert prefix + "layer_._1/attention/output/adapters/weights1:0" in names
    assert prefix + "layer_._0/output/adapters/biases2:0" in names


def test_positions_and_leave_out_are_honoured(tiny_hf):
    from adapter_bert.adapters.hf_bridge import adapters_by_position, add_adapters
    add_adapters(tiny_hf, AdapterConfig(size=4, positions="ffn", leave_out=[0]))
    assert sorted(adapters_by_position(tiny_hf)) == [(1, "ffn")]
    with pytest.raises(ValueError, match="leave_out"):
        add_adapters(tiny_hf, AdapterConfig(size=4, leave_out=[5]))
    with pytest.raises(TypeError, match="not a transformers TF BERT"):
        add_adapters(keras.Sequential([keras.layers.Dense(2)]), size=4)


def test_near_identity_at_init_and_exact_identity_with_zeroed_adapters(tiny_hf):
    from adapter_bert.adapters.hf_bridge import add_adapters, remove_adapters
    inputs = tiny_inputs(seed=1)
    before_seq, before_pooled = _outputs(tiny_hf, inputs)
    adapters = add_adapters(tiny_hf, size=8, init_scale=1e-7)
    seq, pooled = _outputs(tiny_hf, inputs)
    assert np.abs(seq - before_seq).max() < 1e-5
    assert np.abs(pooled - before_pooled).max() < 1e-5
    for adapter in adapters:
        for variable in adapter.weights:
            variable.assign(tf.zeros_like(variable))
    seq, pooled = _outputs(tiny_hf, inputs)
    np.testing.assert_array_equal(seq, before_seq)
    np.testing.assert_array_equal(pooled, before_pooled)
    # A large adapter changes the output; removing it restores the original model.
    for adapter in adapters:
        adapter.weights1.assign(tf.random.normal(adapter.weights1.shape, seed=2))
        adapter.weights2.assign(tf.random.normal(adapter.weights2.shape, seed=3))
    assert np.abs(_outputs(tiny_hf, inputs)[0] - before_seq).max() > 1e-2
    assert remove_adapters(tiny_hf) == 4
    np.testing.assert_array_equal(_outputs(tiny_hf, inputs)[0], before_seq)


def test_disabled_adapters_are_bypassed(tiny_hf):
    from adapter_bert.adapters.hf_bridge import add_adapters, set_adapters_enabled
    inputs = tiny_inputs(seed=2)
    before = _outputs(tiny_hf, inputs)[0]
    add_adapters(tiny_hf, size=4, init_scale=0.5)
    adapted = _outputs(tiny_hf, inputs)[0]
    # The size of the change depends on the random draw (1e-2 to 2e-2 seen): any
    # visible change shows the adapters run; the bypass below must restore exactly.
    assert np.abs(adapted - before).max() > 1e-3
    set_adapters_enabled(tiny_hf, False)
    np.testing.assert_array_equal(_outputs(tiny_hf, inputs)[0], before)
    set_adapters_enabled(tiny_hf, True)
    np.testing.assert_array_equal(_outputs(tiny_hf, inputs)[0], adapted)


def _one_step_changes(model, inputs, labels):
    before = [v.numpy().copy() for v in model.weights]
    optimizer = keras.optimizers.Adam(1e-2)
    with tf.GradientTape() as tape:
        logits = model(_hf_inputs(inputs), training=True).logits
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            labels, logits, from_logits=True))
    grads = tape.gradient(loss, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    return {v.name for v, old in zip(model.weights, before) if not np.array_equal(old, v.numpy())}


@pytest.mark.parametrize("train_pooler", [False, True])
def test_one_step_trains_only_adapters_layernorms_and_head(train_pooler):
    from transformers import TFBertForSequenceClassification

    from adapter_bert.adapters.hf_bridge import add_adapters, parameter_counts, unfreeze
    tf.random.set_seed(1)
    model = TFBertForSequenceClassification(_hf_config(num_labels=2))
    inputs = tiny_inputs(batch=4, seed=3, pad_last=0)
    model(_hf_inputs(inputs), training=False)
    total_before = parameter_counts(model)[1]
    add_adapters(model, size=4, init_scale=1e-2, train_pooler=train_pooler)
    trainable = {v.name for v in model.trainable_weights}
    expected = {v.name for v in model.weights
                if "/adapters/" in v.name or "LayerNorm" in v.name or "classifier" in v.name
                or (train_pooler and "/pooler/" in v.name)}
    assert trainable == expected
    assert len(trainable) == 4 * 4 + 5 * 2 + 2 + (2 if train_pooler else 0)
    changed = _one_step_changes(model, inputs, tf.constant([0, 1, 1, 0]))
    assert changed == trainable
    # The word embeddings stay frozen although their layer holds a trainable LayerNorm.
    assert not any("word_embeddings" in name for name in changed)
    trainable_count, total = parameter_counts(model)
    assert total == total_before + 4 * (2 * 16 * 4 + 4 + 16)
    assert trainable_count < total / 3
    unfreeze(model)
    assert len(model.trainable_weights) == len(model.weights)


# ------------------------------------------------------------- real weights
@pytest.fixture(scope="module")
def mrpc_batch(mrpc_dir, minilm_dir):
    """Eight MRPC dev pairs (written English text), padded to 64 tokens."""
    return mrpc_dev_pairs(mrpc_dir, minilm_dir)


def test_transformers_with_our_adapters_matches_our_encoder_on_minilm(minilm_dir, mrpc_batch):
    import adapter_bert as ab
    from adapter_bert.adapters.hf_bridge import add_adapters, copy_adapter_weights
    adapters = AdapterConfig(size=32, init_scale=0.05)
    tf.random.set_seed(7)
    ours = ab.load_pretrained(adapter_config=adapters)  # a named adapter, as the runners'
    assert ours.active_adapter == "adapter"
    hf = transformers_minilm(minilm_dir)
    plain = _outputs(hf, mrpc_batch)
    add_adapters(hf, adapters)
    assert copy_adapter_weights(ours, hf) == 12
    theirs = _outputs(hf, mrpc_batch)
    mine = ours(mrpc_batch, training=False)
    seq_diff = float(np.abs(mine["sequence_output"].numpy() - theirs[0]).max())
    pooled_diff = float(np.abs(mine["pooled_output"].numpy() - theirs[1]).max())
    effect = float(np.abs(theirs[0] - plain[0]).max())
    print(f"\nmax |ours - transformers+adapters|: sequence {seq_diff:.2e}, pooled "
          f"{pooled_diff:.2e}; adapters move the sequence output by up to {effect:.2e}")
    assert seq_diff <= 1e-4 and pooled_diff <= 1e-4
    assert effect > 100 * max(seq_diff, 1e-6)  # the adapters really are in the computation


def test_copy_refuses_different_layouts(tiny_hf, tiny_config):
    from adapter_bert.adapters.hf_bridge import add_adapters, copy_adapter_weights
    import adapter_bert as ab
    ours = ab.BertModel(tiny_config, AdapterConfig(size=4, positions="ffn"))
    ours.build_with_dummy_inputs()
    add_adapters(tiny_hf, size=4)
    with pytest.raises(ValueError, match="layouts differ"):
        copy_adapter_weights(ours, tiny_hf)


def test_unbuilt_model_is_built_first_with_its_own_weight_names():
    from transformers import TFBertModel

    from adapter_bert.adapters.hf_bridge import add_adapters
    model = TFBertModel(_hf_config())
    add_adapters(model, size=4)
    names = {v.name for v in model.weights}
    prefix = model.name + "/bert/encoder/layer_._0/attention/output/"
    assert prefix + "dense/kernel:0" in names
    assert prefix + "adapters/weights1:0" in names
    seq, _ = _outputs(model, tiny_inputs())
    assert seq.shape == (2, 7, 16)


def test_dropout_then_adapter_config_round_trip():
    from adapter_bert.model.adapter_layers import HoulsbyAdapter
    from adapter_bert.adapters.hf_bridge import DropoutThenAdapter
    layer = DropoutThenAdapter(keras.layers.Dropout(0.3), HoulsbyAdapter(5, init_scale=0.1),
                               enabled=False)
    again = DropoutThenAdapter.from_config(layer.get_config())
    assert again.dropout.rate == 0.3 and again.adapter.size == 5
    assert again.adapter.init_scale == 0.1 and again.enabled is False


@pytest.mark.slow
def test_keras_fit_updates_adapters_and_leaves_frozen_weights():
    from transformers import TFBertForSequenceClassification

    from adapter_bert.adapters.hf_bridge import add_adapters
    tf.random.set_seed(2)
    model = TFBertForSequenceClassification(_hf_config(num_labels=2))
    inputs = tiny_inputs(batch=4, seed=4, pad_last=0)
    adapters = add_adapters(model, size=4, init_scale=1e-2)
    frozen = {v.name: v.numpy().copy() for v in model.weights
              if "word_embeddings" in v.name or "attention/self/query" in v.name}
    adapter_before = adapters[0].weights1.numpy().copy()
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(_hf_inputs(inputs), np.array([0, 1, 1, 0]), epochs=1, batch_size=4, verbose=0)
    assert not np.array_equal(adapters[0].weights1.numpy(), adapter_before)
    for v in model.weights:
        if v.name in frozen:
            np.testing.assert_array_equal(v.numpy(), frozen[v.name], err_msg=v.name)
    assert len(frozen) == 1 + 2 * 2  # word embeddings; query kernel and bias per layer
