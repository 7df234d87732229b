"""Attention with recomputed probabilities (adapter_bert/model/attention_kernel.py)."""

import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from adapter_bert.model.attention_kernel import attention_context
from adapter_bert.model.fast_layers import Dropout, quantized_rate

SHAPE = [2, 3, 7, 4]                                     # batch, heads, length, head size


def _inputs(dtype=tf.float32):
    q, k, v, upstream = (tf.random.stateless_normal(SHAPE, [i, 1]) for i in range(4))
    mask = tf.constant([[1.0] * 7, [1.0] * 4 + [0.0] * 3])
    adder = (1.0 - mask)[:, tf.newaxis, tf.newaxis, :] * -10000.0
    keep = tf.random.stateless_uniform(SHAPE[:3] + [SHAPE[2]], [9, 9]) >= 0.3
    return [tf.cast(t, dtype) for t in (q, k, v)], adder, keep, tf.cast(upstream, dtype)


def _op_by_op(q, k, v, adder, scale, keep, keep_scale):
    """The layer's computation before the kernel: autodiff differentiates it."""
    scores = tf.cast(tf.matmul(q, k, transpose_b=True), tf.float32) * scale
    probs = tf.cast(tf.nn.softmax(scores + adder, axis=-1), v.dtype)
    if keep is not None:
        probs = tf.where(keep, probs * tf.cast(keep_scale, v.dtype), tf.zeros([], v.dtype))
    return tf.matmul(probs, v)


def _value_and_gradients(function, qkv, upstream, *args):
    with tf.GradientTape() as tape:
        tape.watch(qkv)
        out = function(*qkv, *args)
        loss = tf.reduce_sum(tf.cast(out * upstream, tf.float32))
    return [out] + tape.gradient(loss, qkv)


@pytest.mark.parametrize("dropout", [True, False])
@pytest.mark.parametrize("graph", [True, False])
def test_matches_autodiff_of_the_op_by_op_attention(dropout, graph):
    qkv, adder, keep, upstream = _inputs()
    args = (adder, 0.5, keep if dropout else None, 1 / 0.7)
    kernel = tf.function(attention_context) if graph else attention_context
    ours = _value_and_gradients(kernel, qkv, upstream, *args)
    reference = _value_and_gradients(_op_by_op, qkv, upstream, *args)
    for mine, theirs, name in zip(ours, reference, ["context", "d query", "d key", "d value"]):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    # Padding keys get no attention, so the value rows of padding carry no gradient.
    assert np.abs(ours[3].numpy()[1, :, 4:]).max() == 0.0


def _square_floats_kept_for_backward(function):
    """Float [B, N, T, T] tensors of the forward pass that the backward pass reads."""
    qkv, adder, keep, upstream = _inputs()
    split = []

    @tf.function
    def step(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            loss = tf.reduce_sum(function(q, k, v, adder, 0.5, keep, 1 / 0.7) * upstream)
        split.append(len(tf.compat.v1.get_default_graph().get_operations()))
        return tape.gradient(loss, [q, k, v])
    operations = step.get_concrete_function(*qkv).graph.get_operations()
    forward, backward = operations[:split[0]], operations[split[0]:]
    read_by_backward = {t.name for op in backward for t in op.inputs}
    square = SHAPE[:3] + [SHAPE[2]]

    def is_square_float(tensor):
        return tensor.shape.as_list() == square and tensor.dtype.is_floating
    kept = [t.name for op in forward for t in op.outputs
            if t.name in read_by_backward and is_square_float(t)]
    # A backward op that reads forward tensors only can run during the forward pass
    # (the executor runs whatever is ready); its output would then be kept, too.
    backward_names = {op.name for op in backward if op.type != "Const"}
    early = [op.name for op in backward if any(is_square_float(t) for t in op.outputs)
             and not _has_ancestor_in(op, backward_names)]
    return kept, early


def _has_ancestor_in(op, names):
    """Whether an ancestor of `op`, through data or control inputs, is named in `names`."""
    stack, seen = [op], set()
    while stack:
        node = stack.pop()
        for parent in [t.op for t in node.inputs] + list(node.control_inputs):
            if parent.name in names:
                return True
            if parent.name not in seen:
                seen.add(parent.name)
                stack.append(parent)
    return False


def test_keeps_only_query_key_value_and_the_mask_for_the_backward_pass():
    kept, early = _square_floats_kept_for_backward(attention_context)
    assert kept == [] and early == []
    # Op by op, autodiff keeps the softmax output and the dropped probabilities.
    kept, _ = _square_floats_kept_for_backward(_op_by_op)
    assert len(kept) >= 2


def test_bfloat16_context_and_gradients_stay_close_to_float32():
    qkv, adder, keep, upstream = _inputs()
    exact = _value_and_gradients(attention_context, qkv, upstream, adder, 0.5, keep, 1 / 0.7)
    low = _value_and_gradients(attention_context, [tf.cast(t, tf.bfloat16) for t in qkv],
                               tf.cast(upstream, tf.bfloat16), adder, 0.5, keep, 1 / 0.7)
    for mine, reference in zip(low, exact):
        assert mine.dtype == tf.bfloat16
        np.testing.assert_allclose(tf.cast(mine, tf.float32).numpy(), reference.numpy(),
                                   rtol=0.05, atol=0.05)


@pytest.mark.parametrize("dtype, square_casts", [(tf.bfloat16, 0), (tf.float16, 6)])
def test_bfloat16_keeps_the_square_tensors_in_bfloat16(dtype, square_casts):
    """Under bfloat16 no [B, N, T, T] tensor is cast, forward or backward (float16's range
    is too narrow: it keeps the float32 softmax and its casts)."""
    qkv, adder, keep, upstream = _inputs(dtype)

    @tf.function
    def step(q, k, v):
        return _value_and_gradients(attention_context, [q, k, v], upstream, adder, 0.5,
                                    keep, 1 / 0.7)
    graph = step.get_concrete_function(*qkv).graph
    square = SHAPE[:3] + [SHAPE[2]]
    casts = [op.name for op in graph.get_operations() if op.type == "Cast"
             and op.outputs[0].shape.as_list() == square]
    assert len(casts) == square_casts, casts


@pytest.mark.parametrize("dropout", [True, False])
def test_bfloat16_fused_softmax_gradient_matches_the_op_by_op_one(dropout):
    """On a CPU the bfloat16 softmax gradient is one XLA kernel computing in float32; the
    portable op-by-op version rounds each step to bfloat16: they agree to its resolution."""
    from adapter_bert.model.fast_layers import portable_kernels
    qkv, adder, keep, upstream = _inputs(tf.bfloat16)
    args = (adder, 0.5, keep if dropout else None, 1 / 0.7)
    fused = _value_and_gradients(tf.function(attention_context), qkv, upstream, *args)
    with portable_kernels():
        plain = _value_and_gradients(tf.function(attention_context), qkv, upstream, *args)
    for mine, theirs in zip(fused, plain):
        a, b = (tf.cast(t, tf.float32).numpy() for t in (mine, theirs))
        np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-2 * np.abs(b).max())


# ------------------------------------------------------------------ Dropout.keep_mask
def test_keep_mask_is_the_mask_call_applies():
    keras.utils.set_random_seed(8)
    keep, scale = Dropout(0.1, seed=4).keep_mask([64, 96], training=True)
    keras.utils.set_random_seed(8)              # the same draw for a twin layer's call
    dropped = Dropout(0.1, seed=4)(tf.ones([64, 96]), training=True).numpy()
    assert scale == pytest.approx(1 / (1 - quantized_rate(0.1)))
    assert 0.85 < keep.numpy().mean() < 0.95
    np.testing.assert_array_equal(keep.numpy(), dropped > 0)


def test_keep_mask_is_none_at_inference_or_rate_zero():
    assert Dropout(0.1).keep_mask([4, 4], training=False) == (None, 1.0)
    assert Dropout(0.0).keep_mask([4, 4], training=True) == (None, 1.0)
    assert Dropout(0.1).keep_mask([4, 4]) == (None, 1.0)      # Keras' learning phase: 0


def test_keep_mask_with_a_training_flag_known_only_at_run_time():
    layer = Dropout(0.5, seed=2)
    masked = tf.function(lambda flag: layer.keep_mask([32, 32], training=flag))
    keep, scale = masked(tf.constant(True))
    assert 0.3 < keep.numpy().mean() < 0.7 and float(scale) == pytest.approx(2.0)
    keep, scale = masked(tf.constant(False))
    assert keep.numpy().all() and float(scale) == 1.0


def test_keep_mask_under_xla_uses_keras_random_numbers():
    layer = Dropout(0.1, seed=3)
    keep, scale = tf.function(lambda: layer.keep_mask([64, 64], training=True),
                              jit_compile=True)()
    assert float(scale) == pytest.approx(1 / 0.9) and 0.85 < keep.numpy().mean() < 0.95


# -------------------------------------------------------------------- in the encoder
def test_self_attention_layer_matches_the_op_by_op_computation(tiny_config):
    from adapter_bert.model.encoder import BertSelfAttention, attention_adder_from_mask
    from tests.conftest import tiny_inputs
    layer = BertSelfAttention(tiny_config)
    hidden = tf.random.stateless_normal([2, 7, 16], [5, 5])
    adder = attention_adder_from_mask(tiny_inputs()["input_mask"])
    drawn = []                                   # the dropout mask the layer draws
    draw = layer.dropout.keep_mask
    layer.dropout.keep_mask = lambda shape, training=None: drawn.append(
        draw(shape, training)) or drawn[-1]
    with tf.GradientTape() as tape:
        out = layer(hidden, adder, training=True)
        loss = tf.reduce_sum(out * out)
    grads = tape.gradient(loss, layer.trainable_weights)
    # Same weights and the same dropout draw, computed op by op.
    (keep, keep_scale), = drawn
    assert keep.shape == [2, 2, 7, 7] and not keep.numpy().all()

    def heads(x):
        return tf.transpose(tf.reshape(x, [2, 7, 2, 8]), [0, 2, 1, 3])
    with tf.GradientTape() as tape:
        q, k, v = (heads(dense(hidden)) for dense in (layer.query, layer.key, layer.value))
        context = _op_by_op(q, k, v, adder, 1 / math.sqrt(8), keep, keep_scale)
        expected = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [2, 7, 16])
        expected_loss = tf.reduce_sum(expected * expected)
    expected_grads = tape.gradient(expected_loss, layer.trainable_weights)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    for mine, theirs in zip(grads, expected_grads):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-5)
