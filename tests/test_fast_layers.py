"""The CPU-lean Dropout and LayerNorm (adapter_bert/model/fast_layers.py) and the closed-form GELUs."""

import contextlib
import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from adapter_bert.model import fast_layers
from adapter_bert.model.activations import get_activation
from adapter_bert.model.fast_layers import (Dense, Dropout, LayerNorm, float32_sum, keep_mask,
                                            portable_kernels, quantized_rate)
from adapter_bert.adapters.models import BertClassifier


# ------------------------------------------------------------------------------ dropout
def test_quantized_rate_rounds_to_sixteen_bit_levels():
    assert quantized_rate(0.1) == 6554 / 65536
    assert quantized_rate(0.5) == 0.5
    assert abs(quantized_rate(0.1) - 0.1) < 2 ** -17


def test_keep_mask_has_the_shape_and_keep_probability():
    shape = [501, 999]                      # an odd element count: one 16-bit half is cut
    mask = keep_mask(shape, 0.1, tf.constant([3, 4])).numpy()
    assert mask.shape == (501, 999) and mask.dtype == bool
    kept = mask.mean()
    sd = math.sqrt(0.9 * 0.1 / mask.size)
    assert abs(kept - (1 - quantized_rate(0.1))) < 5 * sd
    # Both 16-bit halves of each random word are used, and both are uniform.
    flat = mask.reshape(-1)
    assert abs(flat[0::2].mean() - 0.9) < 6 * sd and abs(flat[1::2].mean() - 0.9) < 6 * sd


def test_keep_mask_depends_on_the_seed_only():
    first = keep_mask([64, 64], 0.3, tf.constant([1, 2])).numpy()
    again = keep_mask([64, 64], 0.3, tf.constant([1, 2])).numpy()
    other = keep_mask([64, 64], 0.3, tf.constant([1, 3])).numpy()
    assert (first == again).all()
    assert (first != other).mean() > 0.2


def test_dropout_scales_kept_elements_by_the_inverse_keep_probability():
    layer = Dropout(0.1)
    out = layer(tf.ones([200, 384]), training=True).numpy()
    scale = 1 / (1 - quantized_rate(0.1))
    values = np.unique(out)
    assert len(values) == 2 and values[0] == 0.0 and values[1] == pytest.approx(scale, rel=1e-6)
    assert abs(out.mean() - 1.0) < 0.01     # unbiased


def test_dropout_is_the_identity_at_inference():
    x = tf.random.normal([4, 8])
    np.testing.assert_array_equal(Dropout(0.5)(x, training=False).numpy(), x.numpy())
    np.testing.assert_array_equal(Dropout(0.5)(x).numpy(), x.numpy())


def test_dropout_gradient_is_the_same_mask_and_scale():
    x = tf.random.normal([32, 64]) + 3.0    # no zero inputs: out / x recovers mask * scale
    layer = Dropout(0.25, seed=7)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = layer(x, training=True)
        total = tf.reduce_sum(out)
    grad = tape.gradient(total, x).numpy()
    np.testing.assert_allclose(grad, (out / x).numpy(), rtol=1e-5, atol=1e-6)


def test_dropout_is_reproducible_under_a_global_seed():
    def run():
        keras.utils.set_random_seed(11)
        layer = Dropout(0.2)
        step = tf.function(lambda x: layer(x, training=True))
        return step(tf.ones([8, 32])).numpy(), step(tf.ones([8, 32])).numpy()
    first, second = run()
    again_first, again_second = run()
    np.testing.assert_array_equal(first, again_first)
    np.testing.assert_array_equal(second, again_second)
    assert (first != second).any()          # a fresh mask per call


def test_dropout_keeps_bfloat16():
    layer = Dropout(0.1, seed=3, dtype="bfloat16")
    out = tf.function(lambda x: layer(x, training=True))(tf.ones([16, 33], tf.bfloat16))
    assert out.dtype == tf.bfloat16
    kept = out.numpy().astype(np.float32)
    assert set(np.unique(kept)) == {0.0, float(tf.cast(1 / (1 - quantized_rate(0.1)), tf.bfloat16))}


def test_dropout_under_xla_is_keras_dropout():
    layer = Dropout(0.1, seed=3)
    traced = {True: [], False: []}

    def step_function(jit_compile):
        def step(x):
            traced[jit_compile].append(layer._uses_bits())
            return layer(x, training=True)
        return tf.function(step, jit_compile=jit_compile)
    out = step_function(True)(tf.ones([64, 64])).numpy()
    step_function(False)(tf.ones([64, 64]))
    # Every trace (TensorFlow may trace more than once) decided alike.
    assert traced[True] and not any(traced[True])
    assert traced[False] and all(traced[False])
    assert out.max() == pytest.approx(1 / 0.9, rel=1e-6) and 0.8 < (out > 0).mean() < 0.97


def test_dropout_falls_back_to_keras_with_a_noise_shape_or_off_cpu(monkeypatch):
    x = tf.ones([4, 6, 8])
    shared = Dropout(0.5, noise_shape=[None, 1, 8], seed=1)(x, training=True).numpy()
    assert (shared == shared[:, :1, :]).all()   # one mask row broadcast over axis 1
    monkeypatch.setattr(fast_layers, "_host_is_cpu", lambda: False)
    keras_scale = Dropout(0.1, seed=1)(tf.ones([64, 64]), training=True).numpy().max()
    assert keras_scale == pytest.approx(1 / 0.9, rel=1e-6)      # Keras' own, unquantized


def test_dropout_config_round_trips():
    layer = Dropout(0.3, seed=5, name="drop")
    clone = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(clone) is Dropout and clone.rate == 0.3 and clone.seed == 5


# ---------------------------------------------------------------------------- layer norm
def _keras_and_ours(epsilon=1e-12, **kwargs):
    ours, theirs = LayerNorm(epsilon=epsilon, **kwargs), \
        keras.layers.LayerNormalization(epsilon=epsilon, **kwargs)
    for layer in (ours, theirs):
        layer.build([None, None, 48])
    rng = np.random.default_rng(0)
    gamma, beta = rng.normal(1, 0.3, 48).astype("float32"), rng.normal(0, 0.3, 48).astype("float32")
    for layer in (ours, theirs):
        layer.set_weights([gamma, beta])
    return ours, theirs


@pytest.mark.parametrize("epsilon", [1e-12, 1e-3])
def test_layer_norm_matches_keras_values_and_gradients(epsilon):
    ours, theirs = _keras_and_ours(epsilon)
    x = tf.random.stateless_normal([4, 7, 48], [1, 2]) * 3.0 + 1.5
    _assert_same_values_and_gradients(ours, theirs, x, tol=1e-4)


def _assert_same_values_and_gradients(ours, theirs, x, tol):
    """Both layers' outputs, input gradients and weight gradients agree within `tol`."""
    upstream = tf.random.stateless_normal(ours(x).shape, [3, 4])
    results = []
    for layer in (ours, theirs):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = layer(x)
            loss = tf.reduce_sum(out * upstream)
        results.append([out] + tape.gradient(loss, [x] + layer.trainable_weights))
    for mine, reference in zip(*results):
        np.testing.assert_allclose(mine.numpy(), reference.numpy(), rtol=tol, atol=tol)


def test_layer_norm_normalises_constant_rows_to_beta():
    ours, _ = _keras_and_ours()
    out = ours(tf.fill([2, 3, 48], 5.0)).numpy()
    np.testing.assert_allclose(out, np.broadcast_to(ours.beta.numpy(), out.shape), atol=1e-6)


def test_layer_norm_under_mixed_bfloat16_normalises_in_float32():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        layer = LayerNorm(epsilon=1e-12)
        x = tf.random.stateless_normal([2, 5, 48], [5, 6])
        out = layer(tf.cast(x, tf.bfloat16))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert out.dtype == tf.bfloat16 and layer.gamma.dtype == tf.float32
    reference = keras.layers.LayerNormalization(epsilon=1e-12)(tf.cast(tf.cast(x, tf.bfloat16),
                                                                       tf.float32))
    np.testing.assert_allclose(out.numpy().astype(np.float32), reference.numpy(), atol=0.03)


def test_layer_norm_over_other_axes_is_keras():
    ours = LayerNorm(axis=1)
    theirs = keras.layers.LayerNormalization(axis=1)
    x = tf.random.stateless_normal([3, 5, 4], [7, 8])
    np.testing.assert_allclose(ours(x).numpy(), theirs(x).numpy(), rtol=1e-6, atol=1e-6)


def test_layer_norm_keeps_keras_weights_and_config():
    layer = LayerNorm(epsilon=1e-7, name="LayerNorm")
    layer.build([None, 8])
    assert isinstance(layer, keras.layers.LayerNormalization)
    assert [w.name.split("/")[-1] for w in layer.weights] == ["gamma:0", "beta:0"]
    clone = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(clone) is LayerNorm and clone.epsilon == 1e-7


# ---------------------------------------------------------------------------------- GELU
_FORMULAS = {
    "gelu_erf": lambda x: 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi)
                                                     * (x + 0.044715 * tf.pow(x, 3)))),
}


@pytest.mark.parametrize("name", sorted(_FORMULAS))
@pytest.mark.parametrize("dtype", [tf.float64, tf.float32])
@pytest.mark.parametrize("lean", [True, False], ids=["xla-kernels", "plain-ops"])
def test_gelu_matches_its_formula_and_the_formula_gradient(name, dtype, lean, monkeypatch):
    from adapter_bert.model import activations
    monkeypatch.setattr(activations, "lean_cpu_kernels", lambda: lean)
    x = tf.cast(tf.linspace(-9.0, 9.0, 2001), dtype)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours, formula = get_activation(name)(x), _FORMULAS[name](x)
    tolerance = 1e-12 if dtype == tf.float64 else 2e-6
    if lean:    # XLA's erf and tanh are other approximations than TensorFlow's kernels
        np.testing.assert_allclose(ours.numpy(), formula.numpy(), rtol=tolerance, atol=tolerance)
    else:       # the same ops as the formula
        np.testing.assert_array_equal(ours.numpy(), formula.numpy())
    # In float32 the tanh form's derivative cancels in 1 + tanh near x = -5: both
    # computations are then off by a few 1e-6 of the true value, differently.
    grad_atol = 1e-5 if lean and dtype == tf.float32 else tolerance
    np.testing.assert_allclose(tape.gradient(ours, x).numpy(), tape.gradient(formula, x).numpy(),
                               rtol=tolerance, atol=grad_atol)


@pytest.mark.parametrize("name", sorted(_FORMULAS))
def test_xla_gelu_computes_16_bit_inputs_in_float32(name):
    x = tf.linspace(-6.0, 6.0, 1001)
    upstream = tf.cos(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        value32 = _FORMULAS[name](x)
        x16 = tf.cast(x, tf.bfloat16)
        tape.watch(x16)
        value16 = get_activation(name)(x16)
    grad16 = tape.gradient(value16, x16, output_gradients=tf.cast(upstream, tf.bfloat16))
    grad32 = tape.gradient(value32, x, output_gradients=upstream)
    assert value16.dtype == grad16.dtype == tf.bfloat16
    # From the float32 results of the bfloat16-rounded inputs, rounded once: within one
    # bfloat16 step (2^-8 relative) of the float32 function at the unrounded inputs.
    np.testing.assert_allclose(tf.cast(value16, tf.float32).numpy(), value32.numpy(),
                               rtol=2 ** -7, atol=2 ** -7)
    np.testing.assert_allclose(tf.cast(grad16, tf.float32).numpy(), grad32.numpy(),
                               rtol=2 ** -6, atol=2 ** -6)


def test_lean_kernels_run_on_cpu_hosts_outside_xla_only():
    assert fast_layers.lean_cpu_kernels()            # this test machine: CPUs only

    @tf.function(jit_compile=True)
    def inside_xla(x):
        assert not fast_layers.lean_cpu_kernels()     # runs at trace time
        return get_activation("gelu_erf")(x)

    x = tf.linspace(-3.0, 3.0, 7)
    np.testing.assert_allclose(inside_xla(x).numpy(), _FORMULAS["gelu_erf"](x).numpy(),
                               rtol=1e-6, atol=1e-6)


def test_the_classifier_uses_the_lean_layers_everywhere(tiny_config):
    from adapter_bert.model.config import AdapterConfig
    from adapter_bert.model.naming import walk_layers
    from tests.conftest import tiny_inputs
    model = BertClassifier(tiny_config, 2, adapter_config=AdapterConfig(size=4))
    model(tiny_inputs(), training=False)
    layers = [layer for _, layer in walk_layers(model)]
    dropouts = [x for x in layers if isinstance(x, keras.layers.Dropout)]
    norms = [x for x in layers if isinstance(x, keras.layers.LayerNormalization)]
    # Embeddings + 2 per layer + head; embeddings + 2 per layer, the backbone's and the
    # adapter's copies.
    assert len(dropouts) == 1 + 3 * 2 + 1 and len(norms) == 2 * (1 + 2 * 2)
    assert all(type(x) is Dropout for x in dropouts) and all(type(x) is LayerNorm for x in norms)
    # Every encoder projection (query, key, value, 2 outputs, intermediate per layer) and
    # the pooler, whose 2-D input takes Keras' own path.
    denses = [x for x in layers if type(x) is Dense]
    assert len(denses) == 6 * 2 + 1


# ----------------------------------------------------------------------------- Dense

def _dense_pair(units, activation=None):
    """Our Dense and Keras' Dense with the same weights."""
    ours, keras_dense = Dense(units, activation=activation), keras.layers.Dense(units, activation=activation)
    x = tf.random.stateless_normal([3, 5, 8], [1, 2])
    ours(x), keras_dense(x)
    keras_dense.set_weights(ours.get_weights())
    return ours, keras_dense


@pytest.mark.parametrize("activation", [None, "tanh"])
def test_dense_matches_keras_dense_on_3d_inputs_values_and_gradients(activation):
    ours, reference = _dense_pair(4, activation)
    x = tf.random.stateless_normal([3, 5, 8], [3, 4])
    _assert_same_values_and_gradients(ours, reference, x, tol=1e-6)
    assert ours(x).shape == [3, 5, 4]


def test_dense_keeps_static_shapes_with_a_dynamic_batch_and_2d_inputs_are_keras():
    layer = Dense(4)
    traced = tf.function(layer).get_concrete_function(tf.TensorSpec([None, 7, 8]))
    assert traced.outputs[0].shape.as_list() == [None, 7, 4]
    x = tf.random.stateless_normal([2, 8], [5, 6])
    np.testing.assert_allclose(layer(x).numpy(), (x @ layer.kernel + layer.bias).numpy(),
                               rtol=1e-6, atol=1e-6)


def test_dense_adds_the_bias_to_the_2d_product_so_the_rewrite_can_fuse_them():
    # TensorFlow's oneDNN rewrite fuses a BiasAdd only when it reads the MatMul directly;
    # whether it then runs fused (one rounding under bfloat16) depends on the CPU.
    traced = tf.function(Dense(4)).get_concrete_function(tf.TensorSpec([None, 3, 8]))
    bias_adds = [op for op in traced.graph.get_operations() if op.type == "BiasAdd"]
    assert [op.inputs[0].op.type for op in bias_adds] == ["MatMul"]
    keras_traced = tf.function(keras.layers.Dense(4)).get_concrete_function(
        tf.TensorSpec([None, 3, 8]))
    keras_bias = [op for op in keras_traced.graph.get_operations() if op.type == "BiasAdd"]
    assert [op.inputs[0].op.type for op in keras_bias] != ["MatMul"]


def test_dense_under_mixed_bfloat16_is_within_bfloat16_rounding_on_any_cpu():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        layer = Dense(4, bias_initializer=keras.initializers.Constant(100.0))
        x = tf.random.stateless_normal([2, 3, 8], [7, 8])
        out = layer(x)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert out.dtype == tf.bfloat16 and layer.kernel.dtype == tf.float32
    kernel16 = tf.cast(tf.cast(layer.kernel, tf.bfloat16), tf.float32)
    product = tf.einsum("btd,du->btu", tf.cast(tf.cast(x, tf.bfloat16), tf.float32), kernel16)
    exact = (product + 100.0).numpy()

    def half_step(v):  # half a bfloat16 step at |v| (8 significant bits)
        return 2.0 ** -8 * 2.0 ** np.floor(np.log2(np.abs(v)))

    # At most two roundings: the product's (where the CPU runs the bias add unfused) and
    # the biased sum's. A float32 result, or a float32 bias add, would be closer still.
    bound = half_step(exact) + half_step(product.numpy()) + 1e-4
    error = np.abs(out.numpy().astype(np.float32) - exact)
    assert np.all(error <= bound)
    assert np.any(error > 0), "the output was not rounded to bfloat16"


def test_dense_config_round_trips():
    layer = Dense(3, activation="relu", name="proj")
    clone = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(clone) is Dense and clone.get_config() == layer.get_config()


def test_layer_norm_under_mixed_bfloat16_reads_a_float32_input_unrounded():
    # An adapter's float32 sum reaches the normalisation as it is: the bfloat16 output
    # is float32's result rounded once, not the result for a rounded input.
    x = tf.random.stateless_normal([2, 5, 48], [9, 10])
    exact = LayerNorm(epsilon=1e-12)(x)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        layer = LayerNorm(epsilon=1e-12)
        out, from_rounded = layer(x), layer(tf.cast(x, tf.bfloat16))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert out.dtype == tf.bfloat16
    np.testing.assert_array_equal(out.numpy(), tf.cast(exact, tf.bfloat16).numpy())
    assert np.mean(out.numpy() != from_rounded.numpy()) > 0.05


# ---------------------------------------------------------------------- float32_sum

@pytest.mark.parametrize("portable", [False, True])
def test_float32_sum_adds_16_bit_inputs_unrounded_with_gradients_in_their_dtypes(portable):
    big = tf.constant([[256.0, 1.0]], tf.bfloat16)
    small = tf.constant([[1.0, 2.0 ** -10]], tf.bfloat16)
    residual = tf.constant([[3.0, 4.0]], tf.float32)
    with (portable_kernels() if portable else contextlib.nullcontext()):
        with tf.GradientTape() as tape:
            tape.watch([big, small, residual])
            total = float32_sum(float32_sum(big, small), residual)
            loss = tf.reduce_sum(total * tf.constant([[1.0, 3.0]]))
        grads = tape.gradient(loss, [big, small, residual])
    # In bfloat16, 256 + 1 rounds to 256 and 1 + 2^-10 to 1: here neither is lost.
    assert total.dtype == tf.float32
    assert total.numpy().tolist() == [[260.0, 5.0 + 2.0 ** -10]]
    assert [g.dtype for g in grads] == [tf.bfloat16, tf.bfloat16, tf.float32]
    for g in grads:
        assert tf.cast(g, tf.float32).numpy().tolist() == [[1.0, 3.0]]
