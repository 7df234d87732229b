"""Named adapters in the backbone's blocks (adapters/named.py): where each family's layers
go, what a block runs for each adapter, and the paper's placement before the LayerNorm."""

import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.adapters.models import BertModel
from adapter_bert.adapters.named import add_named_adapter, delete_named_adapter, named_adapter_variables
from adapter_bert.model.config import AdapterConfig
from adapter_bert.model.encoder import BertNetwork
from adapter_bert.model.naming import tf1_variables
from tests.conftest import tiny_inputs


def _adapter(block, name="adapter"):
    return block.modification(name).adapter


def test_two_adapters_per_layer_in_the_paper_positions(tiny_config):
    bert = BertModel(tiny_config, AdapterConfig(size=4))
    bert(tiny_inputs())
    names = [n for n in named_adapter_variables(bert, "adapter") if "/adapters/" in n]
    assert len(names) == 2 * 2 * 4
    assert "bert/encoder/layer_1/attention/output/adapters/weights1" in names
    assert "bert/encoder/layer_1/output/adapters/biases2" in names
    # In the model, under the adapter's own scope.
    assert "bert/encoder/layer_1/output/adapter/adapters/biases2" in tf1_variables(bert)


def test_adapter_positions_and_leave_out_select_blocks(tiny_config):
    bert = BertModel(tiny_config, AdapterConfig(size=4, positions="ffn", leave_out=[0]))
    bert(tiny_inputs())
    adapters = sorted({n.rsplit("/adapters/", 1)[0]
                       for n in named_adapter_variables(bert, "adapter") if "/adapters/" in n})
    assert adapters == ["bert/encoder/layer_1/output"]


def test_adapters_sit_before_the_layernorm(tiny_config):
    """A huge adapter output must be normalised by the adapter's LayerNorm."""
    bert = BertModel(tiny_config, AdapterConfig(size=4, init_scale=0.0))
    bert(tiny_inputs())
    block = bert.encoder.transformer_layers[0].ffn_output_block
    hidden = tf.random.normal([1, 3, 32], seed=3)  # the intermediate width
    residual = tf.random.normal([1, 3, 16], seed=4)
    shift = np.linspace(-50, 50, 16, dtype="float32")[None]
    _adapter(block).biases2.assign(shift)
    out = block(hidden, residual, training=False, adapter_name="adapter").numpy()
    # The large adapter output went through LayerNorm: per token mean 0 (beta) and
    # standard deviation 1 (gamma), dominated by the shift's linear ramp.
    np.testing.assert_allclose(out.mean(-1), 0, atol=1e-4)
    np.testing.assert_allclose(out.std(-1), 1, atol=1e-3)
    assert np.corrcoef(out[0, 0], shift[0])[0, 1] > 0.99


def test_near_identity_adapters_barely_change_the_output(tiny_config):
    inputs = tiny_inputs()
    plain = BertNetwork(tiny_config)
    reference = plain(inputs, training=False)["sequence_output"]
    add_named_adapter(plain, "t", AdapterConfig(size=8))  # added after build: built on the spot
    with_adapters = plain(inputs, training=False, adapter_name="t")["sequence_output"]
    relative = float(tf.norm(with_adapters - reference) / tf.norm(reference))
    assert 0 < relative < 1e-2
    delete_named_adapter(plain, "t")
    np.testing.assert_allclose(plain(inputs, training=False)["sequence_output"], reference, atol=1e-6)
    assert not [n for n in tf1_variables(plain) if "adapters" in n]


def test_disabling_an_adapter_skips_it(tiny_config):
    bert = BertModel(tiny_config, AdapterConfig(size=4, init_scale=0.5))
    inputs = tiny_inputs()
    with_adapters = bert(inputs, training=False)["sequence_output"].numpy()
    for block in bert.output_blocks():
        block.task_branches["adapter"].adapter_enabled = False
    without = bert(inputs, training=False)["sequence_output"].numpy()
    # Without its adapters, the adapter runs the backbone with its LayerNorm copies,
    # which are still the backbone's values.
    np.testing.assert_allclose(bert(inputs, training=False, adapter_name=None)["sequence_output"],
                               without, atol=1e-6)
    assert np.abs(with_adapters - without).max() > 1e-3


def test_modification_of_each_path(tiny_config):
    bert = BertNetwork(tiny_config)
    bert.build_with_dummy_inputs()
    block = bert.encoder.transformer_layers[0].ffn_output_block
    attention = bert.encoder.transformer_layers[0].attention.self_attention
    own = block.modification()
    assert own.adapter is None and own.layer_norm is block.layer_norm
    assert own.fusion is None and own.fused == ()
    add_named_adapter(bert, "t", AdapterConfig(size=4))
    add_named_adapter(bert, "l", AdapterConfig(size=4, adapter_type="lora"))
    add_named_adapter(bert, "f", fuse=["t"])
    branch = block.task_branches["t"]
    task = block.modification("t")
    assert task.adapter is branch.adapter is not None
    assert task.layer_norm is branch.layer_norm is not block.layer_norm
    branch.adapter_enabled = False
    assert block.modification("t").adapter is None
    assert block.modification("t").layer_norm is branch.layer_norm
    branch.adapter_enabled = True
    assert block.modification().adapter is None  # the backbone alone runs no adapter
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
