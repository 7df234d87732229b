"""The non-linearities by name (model/activations.py)."""

import numpy as np
import tensorflow as tf

from adapter_bert.model.activations import canonical_activation, get_activation


def test_gelu_variants_match_tensorflow():
    x = tf.linspace(-4.0, 4.0, 41)
    np.testing.assert_allclose(get_activation("gelu")(x), tf.nn.gelu(x, approximate=True), atol=1e-6)
    np.testing.assert_allclose(get_activation("gelu_erf")(x), tf.nn.gelu(x, approximate=False),
                               atol=1e-6)
    assert canonical_activation("gelu_new") == "gelu_tanh"
