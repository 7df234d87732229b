"""Many tasks on one frozen backbone: named adapters, switching, mixed batches, files.

`MultiAdapterModel` wraps one `BertNetwork` and keeps each named adapter's branches
(named.py) and head; the backbone's weights are shared. Mixed batches (`adapter_names`, one
per row) run as per-task sub-batches gathered, run and stitched back into order, so each
row gets exactly the single-task computation and no weight is copied per row.

    model = MultiAdapterModel.from_pretrained()
    model.add_adapter("mrpc", AdapterConfig(size=64), num_labels=2)
    model.load_adapter("output/sst2_adapter/adapter")
    model.train_adapter("mrpc"); model.compile(...); model.fit(mrpc_dataset)
    mixed = model(features, adapter_names=["mrpc", "sst2", ...])
"""

from collections.abc import Mapping
from typing import Optional

import numpy as np
import tensorflow as tf
import tf_keras as keras

from adapter_bert.adapters.api import AdapterModelMixin, pop_adapter_fields
from adapter_bert.model.encoder import BertNetwork
from adapter_bert.model.heads import SpanHead
from adapter_bert.model.inputs import FeatureInputs, model_features
from adapter_bert.errors import UserError


@keras.utils.register_keras_serializable(package="adapter_bert")
class MultiAdapterModel(AdapterModelMixin, FeatureInputs, keras.Model):
    """A frozen BERT backbone serving several named adapters, each with its own head.

    Called on Google-named features it runs the active adapter or, with `adapter_names` (one
    per row, an argument or a feature), each row's own. Classifier heads return float32
    logits `[B, num_labels]` (mixed batches padded with `-inf` to the widest head), span
    heads `{"start_logits", "end_logits"}`; with no active adapter, the backbone's outputs.
    `bert` is built here if it is not (load its weights before adding adapters). ValueError
    if it holds named adapters already.
    """

    EXTRA_INPUTS = ("adapter_names",)
    HEAD_KINDS = ("classifier", "span")

    def __init__(self, bert: BertNetwork, name="multi_adapter_model", **kwargs):
        super().__init__(name=name, **kwargs)
        if bert.named_adapters:
            raise UserError("MultiAdapterModel needs a backbone without its own adapters; "
                            "add them as named adapters instead")
        if not bert.built:
            bert.build_with_dummy_inputs()
        self.bert = bert
        self._init_adapters()

    @classmethod
    def from_pretrained(cls, path: Optional[str] = None, config_file: Optional[str] = None):
        """Loads a pretrained backbone (see `factory.build_pretrained`) and wraps it.

        Args:
            path: checkpoint or directory; None loads the embedded MiniLM.
            config_file: overrides the config found beside the checkpoint.
        """
        from adapter_bert.model.factory import build_pretrained
        return cls(build_pretrained(path, config_file=config_file))

    # ---------------------------------------------------------------- call
    def __call__(self, inputs, *args, **kwargs):
        # Eager names are checked before Keras runs `call`, so that an unknown one fails
        # in one line rather than inside Keras' call context.
        names = kwargs.get("adapter_names")
        if names is None and isinstance(inputs, Mapping):
            names = inputs.get("adapter_names")
        if names is not None and not self._adapters_off and tf.executing_eagerly():
            self._checked_names(names, self.adapter_names)
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs, training=None, adapter_names=None):
        """Runs the active adapter, or each row's (`adapter_names` [B], overriding the
        feature). Raises ValueError for a mixed batch over heads of different kinds or
        (eagerly) an unknown adapter; InvalidArgumentError for the latter in a traced call.
        """
        features = model_features(inputs, type(self).__name__, self.EXTRA_INPUTS)
        names_feature = features.pop("adapter_names", None)
        if adapter_names is None:
            adapter_names = names_feature
        if self._adapters_off or (adapter_names is None and self._active is None):
            return self.bert(features, training=training, adapter_name=None)
        if adapter_names is None:
            return self._run(features, self._active, training)
        return self._run_mixed(features, adapter_names, training)

    def _run(self, features, name, training):
        outputs = self.bert(features, training=training, adapter_name=name)
        head = self.heads[name]
        if isinstance(head, SpanHead):
            start, end = head(outputs["sequence_output"], training=training)
            return {"start_logits": start, "end_logits": end}
        return head(outputs["pooled_output"], training=training)

    def _run_mixed(self, features, adapter_names, training):
        tasks = self.adapter_names
        kinds = {type(self.heads[t]) for t in tasks}
        if len(kinds) > 1:
            raise UserError("a mixed batch needs adapters whose heads are of one kind; this "
                            "model mixes classifier and span heads (use one model per kind "
                            "on the same backbone)")
        names = self._checked_names(adapter_names, tasks)
        span = kinds == {SpanHead}
        width = max((self.heads[t].num_outputs for t in tasks), default=1)
        indices, outputs = [], []
        for task in tasks:
            rows = tf.cast(tf.where(tf.equal(names, task))[:, 0], tf.int32)
            if tf.executing_eagerly() and int(tf.size(rows)) == 0:
                continue  # in a graph every task runs; an empty sub-batch costs nothing
            result = self._run({k: tf.gather(v, rows) for k, v in features.items()}, task,
                               training)
            if not span and self.heads[task].num_outputs < width:
                pad = width - self.heads[task].num_outputs
                result = tf.pad(result, [[0, 0], [0, pad]], constant_values=-np.inf)
            indices.append(rows)
            outputs.append(result)
        if not indices:  # an empty eager batch
            return self._run(features, tasks[0], training) if tasks else None
        if span:
            return {key: tf.dynamic_stitch(indices, [o[key] for o in outputs])
                    for key in ("start_logits", "end_logits")}
        return tf.dynamic_stitch(indices, outputs)

    @staticmethod
    def _checked_names(adapter_names, tasks) -> tf.Tensor:
        """The [B] names as a string tensor; an unknown name fails in one line (eagerly)
        or with an assertion naming it (in a graph)."""
        names = tf.reshape(tf.convert_to_tensor(adapter_names, tf.string), [-1])
        known = tf.reduce_any(tf.equal(names[:, tf.newaxis],
                                       tf.constant(tasks, tf.string)[tf.newaxis]), 1)
        message = f"adapter_names must name adapters of the model ({', '.join(tasks)})"
        if tf.executing_eagerly():
            unknown = sorted({n.decode("utf-8", "replace")
                              for n in tf.boolean_mask(names, tf.logical_not(known)).numpy()})
            if unknown:
                raise UserError(f"{message}; unknown: {', '.join(unknown)}")
            return names
        check = tf.debugging.Assert(tf.reduce_all(known), [
            f"{message}; unknown:", tf.boolean_mask(names, tf.logical_not(known))], summarize=10)
        with tf.control_dependencies([check]):
            return tf.identity(names)

    # ------------------------------------------------------------ config
    def get_config(self):
        """The backbone's config and each named adapter's description (not its weights:
        Keras saving stores those, `save_adapter` writes one adapter's)."""
        # The backbone's own description only: its named adapters are listed here.
        backbone = BertNetwork.get_config(self.bert)
        return {"name": self.name, "backbone": backbone, **self._adapters_config()}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """A model on a fresh (untrained) backbone of the same shape, with fresh named
        adapters as described (Keras loading then restores all weights)."""
        config = dict(config)
        adapters, active = pop_adapter_fields(config)
        backbone = {k: v for k, v in config["backbone"].items()
                    if k not in ("adapters", "active_adapter")}
        model = cls(BertNetwork.from_config(backbone), name=config["name"])
        model._restore_adapters(adapters, active)
        return model

    def build_from_config(self, config):
        # The backbone and every head are built when added: only the flag is left.
        self.built = True
