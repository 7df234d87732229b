"""Bottleneck adapter layers (Houlsby et al., 2019)."""

import tensorflow as tf
import tf_keras as keras

from adapter_bert.activations import canonical_activation, get_activation


@keras.utils.register_keras_serializable(package="adapter_bert")
class HoulsbyAdapter(keras.layers.Layer):
    """Bottleneck adapter: `x + up(act(down(x)))`.

    Down-projects the hidden state to `size` units, applies the non-linearity,
    projects back up and adds the input (the identity skip). Both projections start
    from a truncated normal with stddev `init_scale` and zero biases, so a new
    adapter is almost the identity and a pretrained network is undisturbed at the
    start of training.

    Weight names and shapes follow google-research/adapter-bert: `weights1 [d, m]`,
    `biases1 [1, m]`, `weights2 [m, d]`, `biases2 [1, d]`, under the scope `adapters`,
    so checkpoints of the original code load by name.

    Args:
        size: bottleneck width m.
        activation: non-linearity name; "gelu" is the tanh approximation.
        init_scale: stddev of the initial projection weights.

    Examples:
        >>> layer = HoulsbyAdapter(size=4)
        >>> layer(tf.zeros([2, 3, 8])).shape
        TensorShape([2, 3, 8])
    """

    def __init__(self, size=64, activation="gelu", init_scale=1e-3, name="adapters", **kwargs):
        super().__init__(name=name, **kwargs)
        self.size = int(size)
        self.activation = canonical_activation(activation)
        self.init_scale = float(init_scale)
        self._act = get_activation(self.activation)

    def build(self, input_shape):
        width = int(input_shape[-1])
        init = lambda: keras.initializers.TruncatedNormal(stddev=self.init_scale)  # noqa: E731
        self.weights1 = self.add_weight("weights1", [width, self.size], initializer=init())
        self.biases1 = self.add_weight("biases1", [1, self.size], initializer="zeros")
        self.weights2 = self.add_weight("weights2", [self.size, width], initializer=init())
        self.biases2 = self.add_weight("biases2", [1, width], initializer="zeros")
        super().build(input_shape)

    def call(self, inputs):
        dtype = self.compute_dtype
        hidden = tf.tensordot(inputs, tf.cast(self.weights1, dtype), 1) + tf.cast(self.biases1, dtype)
        hidden = self._act(hidden)
        up = tf.tensordot(hidden, tf.cast(self.weights2, dtype), 1) + tf.cast(self.biases2, dtype)
        return inputs + up

    def get_config(self):
        config = super().get_config()
        config.update(size=self.size, activation=self.activation, init_scale=self.init_scale)
        return config

    @staticmethod
    def param_count(width: int, size: int) -> int:
        """Number of weights of one adapter on a hidden state of `width` units."""
        return 2 * width * size + size + width
