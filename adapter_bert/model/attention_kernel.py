"""Scaled dot-product attention that keeps no [length x length] activation for its gradient.

The attention probabilities (batch x heads x length^2) are a training step's largest
activations. `attention_context` keeps only query, key, value and the boolean dropout mask,
and its closed-form backward pass recomputes the probabilities (one batched matmul, a few
percent of a layer's FLOPs). Outputs and gradients match the op-by-op computation
(tests/test_attention_kernel.py). Scales are applied where the tensor is smallest.

Under mixed_bfloat16 the square tensors stay in bfloat16 (the matmuls round to it anyway
and the CPU softmax accumulates in float32); on a CPU outside XLA the softmax gradient is
one XLA-fused float32 pass. float16 keeps a float32 softmax for its range.
"""

from typing import Optional

import tensorflow as tf

from adapter_bert.model.fast_layers import lean_cpu_kernels


def _probabilities(query, key, adder, scale):
    """softmax(query . key^T * scale + adder), [B, N, T, T]: in bfloat16 for bfloat16 inputs
    (see the module), float32 otherwise (float16's range is too narrow to skip the cast).
    """
    if query.dtype == tf.bfloat16:
        scores = tf.matmul(query * tf.cast(scale, query.dtype), key, transpose_b=True)
        return tf.nn.softmax(scores + tf.cast(adder, scores.dtype), axis=-1)
    scores = tf.cast(tf.matmul(query, key, transpose_b=True), tf.float32)
    return tf.nn.softmax(scores * scale + adder, axis=-1)


def _dropped(probs, keep):
    return probs if keep is None else tf.where(keep, probs, tf.zeros([], probs.dtype))


def _softmax_dropout_backward(probs, keep, grad_dropped):
    """(dropped probabilities, gradient of the scores) from the gradient of the dropped
    ones.

    Softmax through dropout: with g the gradient of the kept probabilities,
    d scores = P * (g - sum(g * P)), and g * P = grad_dropped * dropped because dropped
    equals P where kept and g is zero elsewhere.
    """
    dropped = _dropped(probs, keep)
    weighted = grad_dropped * dropped
    return dropped, weighted - probs * tf.reduce_sum(weighted, axis=-1, keepdims=True)


@tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
def _fused_softmax_dropout_backward(probs, keep, grad_dropped):
    """`_softmax_dropout_backward` of 16-bit tensors as one XLA-fused pass, in float32
    inside (the op-by-op version is five passes, each rounding to 16 bits).
    """
    dropped, grad_scores = _softmax_dropout_backward(
        tf.cast(probs, tf.float32), keep, tf.cast(grad_dropped, tf.float32))
    return tf.cast(dropped, probs.dtype), tf.cast(grad_scores, probs.dtype)


def attention_context(query, key, value, adder, scale: float,
                      keep: Optional[tf.Tensor] = None, keep_scale=1.0) -> tf.Tensor:
    """`dropout(softmax(query key^T * scale + adder)) value`, recomputing the softmax for
    its gradient.

    `query`, `key`, `value` are [B, N, T, D]; `adder` a float32 mask offset broadcastable to
    [B, N, T, T] (no gradient); `keep` None or the boolean mask of kept probabilities,
    scaled by `keep_scale`. Returns [B, N, T, D] in `value`'s dtype.

        >>> q = tf.random.normal([1, 2, 3, 4])
        >>> attention_context(q, q, q, tf.zeros([1, 1, 1, 3]), 0.5).shape
        TensorShape([1, 2, 3, 4])
    """

    # The backward ops are named as TensorFlow names those of autodiff, under the
    # caller's scope: profiles and graph dumps attribute them to their layer.
    caller_scope = tf.get_current_name_scope()
    backward_scope = "gradient_tape/" + (caller_scope + "/" if caller_scope else "")

    @tf.custom_gradient
    def context_of(q, k, v):
        probs = _dropped(_probabilities(q, k, adder, scale), keep)
        context = tf.matmul(tf.cast(probs, v.dtype), v)
        if keep is not None:
            context = context * tf.cast(keep_scale, context.dtype)

        def _gradients(upstream):
            # The recomputation reads forward tensors only: without this dependency,
            # TensorFlow's executor would run it as soon as the forward pass had made
            # query and key, and the probabilities would again wait for the backward pass.
            with tf.control_dependencies([upstream]):
                probs = _probabilities(q, k, adder, scale)
            upstream = tf.cast(upstream, v.dtype)
            if keep is not None:
                upstream = upstream * tf.cast(keep_scale, v.dtype)
            # Gradient of the dropped probabilities, times `scale` so that the softmax
            # gradient below comes out already scaled for the raw scores.
            grad_dropped = tf.cast(
                tf.matmul(upstream * tf.cast(scale, v.dtype), v, transpose_b=True), probs.dtype)
            if probs.dtype == tf.bfloat16 and lean_cpu_kernels():
                dropped, grad_scores = _fused_softmax_dropout_backward(probs, keep, grad_dropped)
            else:
                dropped, grad_scores = _softmax_dropout_backward(probs, keep, grad_dropped)
            grad_v = tf.matmul(tf.cast(dropped, v.dtype), upstream, transpose_a=True)
            grad_scores = tf.cast(grad_scores, q.dtype)
            grad_q = tf.matmul(grad_scores, k)
            grad_k = tf.matmul(grad_scores, q, transpose_a=True)
            return grad_q, grad_k, grad_v

        def grad(upstream):
            with tf.name_scope(backward_scope):
                return _gradients(upstream)

        return context, grad

    return context_of(query, key, value)
