"""AdapterFusion (Pfeiffer et al., 2021): attention over several trained task adapters.

In every adapter slot, the fusion layer of a new task attends from the sub-layer output
(the query) over the outputs of N frozen task adapters (keys and values):

    q = h Wq + bq,   k_j = a_j Wk + bk,   v_j = a_j Wv + bv
    fused = sum_j softmax_j(q . k_j) v_j

with `h` the sub-layer output and `a_j` adapter j's adapted output on it; the block
then applies its LayerNorm to `fused + residual`. Only the fusion weights (and the new
task's LayerNorms and head) train. `Wv` starts at the identity and `Wq`, `Wk` small,
so a new fusion starts as the plain average of the fused adapters' outputs.
"""

from typing import Sequence

import tensorflow as tf
import tf_keras as keras

from adapter_bert.model.adapter_layers import AdapterLayer
from adapter_bert.errors import UserError


@keras.utils.register_keras_serializable(package="adapter_bert")
class AdapterFusion(AdapterLayer):
    """Attention over adapter outputs, for one adapter slot (AdapterHub's AdapterFusion).

    Weights under `<task>/adapter_fusion`: `query_kernel [d, d]`, `key_kernel`,
    `value_kernel` (identity at start) and their biases; scores are divided by
    `temperature`.

        >>> h = tf.ones([2, 3, 8])
        >>> AdapterFusion()(h, [h, 2 * h]).shape
        TensorShape([2, 3, 8])
    """

    def __init__(self, initializer_range=0.02, temperature=1.0, name="adapter_fusion", **kwargs):
        super().__init__(name=name, **kwargs)
        self.initializer_range = float(initializer_range)
        self.temperature = float(temperature)

    def build(self, input_shape):
        width = int(input_shape[-1])
        normal = lambda: keras.initializers.TruncatedNormal(  # noqa: E731
            stddev=self.initializer_range)
        self.query_kernel = self.add_weight("query_kernel", [width, width], initializer=normal())
        self.query_bias = self.add_weight("query_bias", [width], initializer="zeros")
        self.key_kernel = self.add_weight("key_kernel", [width, width], initializer=normal())
        self.key_bias = self.add_weight("key_bias", [width], initializer="zeros")
        self.value_kernel = self.add_weight("value_kernel", [width, width],
                                            initializer=keras.initializers.Identity())
        self.value_bias = self.add_weight("value_bias", [width], initializer="zeros")
        super().build(input_shape)

    def call(self, inputs, adapter_outputs: Sequence[tf.Tensor]):
        """Fuses `adapter_outputs` (N tensors like `inputs`) with `inputs` as the query.

        Returns:
            [B, T, d], the attention-weighted sum of the projected adapter outputs.

        Raises:
            ValueError: no adapter outputs.
        """
        if not adapter_outputs:
            raise UserError("AdapterFusion needs at least one adapter output")
        dtype = self.compute_dtype
        cast = lambda v: tf.cast(v, dtype)  # noqa: E731
        stacked = tf.stack([tf.cast(a, dtype) for a in adapter_outputs], axis=2)  # [B,T,N,d]
        query = tf.tensordot(inputs, cast(self.query_kernel), 1) + cast(self.query_bias)
        keys = tf.tensordot(stacked, cast(self.key_kernel), 1) + cast(self.key_bias)
        values = tf.tensordot(stacked, cast(self.value_kernel), 1) + cast(self.value_bias)
        scores = tf.einsum("btd,btnd->btn", query, keys)
        probs = tf.nn.softmax(tf.cast(scores, tf.float32) / self.temperature, axis=-1)
        return tf.einsum("btn,btnd->btd", tf.cast(probs, dtype), values)

    def attention_probs(self, inputs, adapter_outputs: Sequence[tf.Tensor]) -> tf.Tensor:
        """The fusion weights [B, T, N] over the adapters, for inspection."""
        stacked = tf.stack(list(adapter_outputs), axis=2)
        query = tf.tensordot(inputs, self.query_kernel, 1) + self.query_bias
        keys = tf.tensordot(stacked, self.key_kernel, 1) + self.key_bias
        return tf.nn.softmax(tf.einsum("btd,btnd->btn", query, keys) / self.temperature, axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(initializer_range=self.initializer_range, temperature=self.temperature)
        return config

    @staticmethod
    def param_count(width: int) -> int:
        """Number of weights of one fusion layer: `3 * (d * d + d)`."""
        return 3 * (width * width + width)
