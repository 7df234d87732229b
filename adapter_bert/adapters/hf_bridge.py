"""Houlsby adapters for `transformers`' TF BERT models (`TFBertModel`, `TFBertFor...`).

`add_adapters(model)` puts this package's `HoulsbyAdapter` in both output blocks of every
layer, where the paper does: `LayerNorm(input + Adapter(Dropout(Dense(hidden))))`, by
replacing each block's dropout with `DropoutThenAdapter`; no transformers code or weight
changes, and `remove_adapters(model)` restores the dropouts. `freeze=True` trains only the
adapters, the LayerNorms, optionally the pooler, and the task head.

    add_adapters(model, AdapterConfig(size=64)); print(parameter_line_of(model))
"""

from typing import Dict, Iterator, List, Optional, Tuple

from adapter_bert.errors import MissingDependency, UserError


# The one line that says what to install when transformers is missing or has no TF models.
TRANSFORMERS_NEEDED = ('adapter_bert.adapters.hf_bridge needs transformers 4.x with its TF '
                       'models (transformers 5 removed them): pip install "transformers>=4.57,<5"')


def check_transformers() -> None:
    """Raises ImportError (TRANSFORMERS_NEEDED, and what was found) unless transformers 4.x,
    which has the TF BERT models this module equips, can be imported."""
    try:
        import transformers
    except ImportError as e:
        found = ("transformers is not installed" if e.name == "transformers"
                 else f"importing transformers failed: {e}")
        raise MissingDependency(f"{TRANSFORMERS_NEEDED} ({found})") from None
    version = str(getattr(transformers, "__version__", "0"))
    if not version.split(".")[0].isdigit() or int(version.split(".")[0]) != 4:
        raise MissingDependency(f"{TRANSFORMERS_NEEDED} (found transformers {version})")


check_transformers()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from adapter_bert.model.adapter_layers import HoulsbyAdapter  # noqa: E402
from adapter_bert.model.config import AdapterConfig  # noqa: E402
from adapter_bert.adapters.tuning import parameter_line, train_only  # noqa: E402
from adapter_bert.model.naming import direct_weights  # noqa: E402
from adapter_bert.model.encoder import backbone_of, reset_compiled_functions  # noqa: E402

@keras.utils.register_keras_serializable(package="adapter_bert")
class DropoutThenAdapter(keras.layers.Layer):
    """A transformers output block's `dropout`, then a Houlsby adapter: in
    `LayerNorm(dropout(dense(h)) + input)` the adapter sits where Houlsby et al. put it.
    `enabled=False` bypasses it, weights kept.
    """

    def __init__(self, dropout, adapter, enabled=True, name="dropout_then_adapter", **kwargs):
        super().__init__(name=name, **kwargs)
        if isinstance(dropout, dict):
            dropout = keras.layers.deserialize(dropout)
        if isinstance(adapter, dict):
            adapter = keras.layers.deserialize(adapter)
        self.dropout = dropout
        self.adapter = adapter
        self.enabled = bool(enabled)

    def call(self, inputs, training=None):
        hidden = self.dropout(inputs, training=training)
        if self.enabled:
            # transformers' block adds its residual in its own dtype.
            hidden = tf.cast(self.adapter(hidden), inputs.dtype)
        return hidden

    def get_config(self):
        config = super().get_config()
        config.update(dropout=keras.layers.serialize(self.dropout),
                      adapter=keras.layers.serialize(self.adapter), enabled=self.enabled)
        return config


def main_layer(model):
    """The `TFBertMainLayer` of a transformers TF BERT model (or the layer itself).

    Raises:
        TypeError: the model is not a transformers TF BERT.
    """
    candidate = getattr(model, "bert", model)
    encoder = getattr(candidate, "encoder", None)
    if encoder is None or not hasattr(encoder, "layer") or not hasattr(candidate, "embeddings"):
        raise TypeError(f"{type(model).__name__} is not a transformers TF BERT model "
                        f"(expected a TFBertModel, TFBertFor... or TFBertMainLayer)")
    return candidate


def output_blocks(model) -> Iterator[Tuple[int, str, keras.layers.Layer]]:
    """(layer index, position, block) for both output blocks of every transformer layer.

    `position` is "attention" (`TFBertSelfOutput`) or "ffn" (`TFBertOutput`).
    """
    for index, layer in enumerate(main_layer(model).encoder.layer):
        yield index, "attention", layer.attention.dense_output
        yield index, "ffn", layer.bert_output


def _ensure_built(model) -> None:
    """Creates the weights of an unbuilt transformers model (with its own name scopes)."""
    if model.built:
        return
    if hasattr(model, "build_in_name_scope"):
        model.build_in_name_scope()
    else:
        model(model.dummy_inputs, training=False)


def _weight_scope(block) -> str:
    """The variable-name scope of a built block, e.g.
    `tf_bert_model/bert/encoder/layer_._0/attention/output`."""
    name = block.dense.kernel.name
    return name[:name.rindex("/dense/")]


def _config_from(adapter_config, overrides) -> AdapterConfig:
    if adapter_config is None:
        adapter_config = AdapterConfig(**overrides)
    elif overrides:
        raise TypeError("pass either an AdapterConfig or keyword fields, not both")
    elif isinstance(adapter_config, dict):
        adapter_config = AdapterConfig.from_dict(adapter_config)
    kind = getattr(adapter_config, "adapter_type", "houlsby")
    if kind != "houlsby":
        raise UserError(f"add_adapters inserts Houlsby adapters; adapter_type={kind!r} is "
                        f"not supported for transformers models")
    return adapter_config


def add_adapters(model, adapter_config: Optional[AdapterConfig] = None, freeze: bool = True,
                 train_pooler: bool = False, train_head: bool = True,
                 **adapter_fields) -> List[HoulsbyAdapter]:
    """Inserts Houlsby adapters into a transformers TF BERT model (or its main layer), in
    place.

    Builds the model if needed and replaces earlier adapters; weights are named after their
    block (`.../layer_._3/attention/output/adapters/weights1:0`). The adapters come from
    `adapter_config` or keyword fields (`size=64, init_scale=1e-3`). `freeze` applies
    `freeze_for_adapter_tuning` (with `train_pooler`, `train_head`). Returns the adapters in
    order (layer 0 attention, layer 0 ffn, ...). Raises TypeError for another model,
    ValueError or ConfigError for a bad config.
    """
    config = _config_from(adapter_config, adapter_fields)
    bert = main_layer(model)
    num_layers = len(bert.encoder.layer)
    bad = [i for i in config.leave_out if not 0 <= i < num_layers]
    if bad:
        raise UserError(f"adapter leave_out names layers {bad}, but the model has layers "
                        f"0..{num_layers - 1}")
    _ensure_built(model)
    remove_adapters(model, unfreeze_weights=False)
    hidden = int(bert.config.hidden_size)
    adapters = []
    for index, position, block in output_blocks(model):
        if position not in config.layer_positions(index):
            continue
        adapter = HoulsbyAdapter(config.size, config.activation, config.init_scale,
                                 name="adapters")
        with tf.name_scope(_weight_scope(block) + "/adapters/"):
            adapter.build(tf.TensorShape([None, None, hidden]))
        block.dropout = DropoutThenAdapter(block.dropout, adapter)
        adapters.append(adapter)
    if freeze:
        freeze_for_adapter_tuning(model, train_pooler=train_pooler, train_head=train_head)
    reset_compiled_functions(model)
    return adapters


def remove_adapters(model, unfreeze_weights: bool = True) -> int:
    """Takes every adapter out again: the blocks get their original dropout back.

    Args:
        unfreeze_weights: also make every weight trainable again (`unfreeze`).

    Returns:
        The number of adapters removed.
    """
    removed = 0
    for _, _, block in output_blocks(model):
        if isinstance(block.dropout, DropoutThenAdapter):
            block.dropout = block.dropout.dropout
            removed += 1
    if unfreeze_weights:
        unfreeze(model)
    reset_compiled_functions(model)
    return removed


def adapters_by_position(model) -> Dict[Tuple[int, str], HoulsbyAdapter]:
    """{(layer index, "attention" | "ffn"): adapter} for every inserted adapter."""
    return {(index, position): block.dropout.adapter
            for index, position, block in output_blocks(model)
            if isinstance(block.dropout, DropoutThenAdapter)}


def set_adapters_enabled(model, enabled: bool, layers=None) -> None:
    """Switches the adapters of `layers` (default: all) on or off without removing them."""
    wanted = None if layers is None else {int(i) for i in layers}
    for index, _, block in output_blocks(model):
        if isinstance(block.dropout, DropoutThenAdapter) and (wanted is None or index in wanted):
            block.dropout.enabled = bool(enabled)
    reset_compiled_functions(model)



# ------------------------------------------------------------------ freezing
def _all_layers(model) -> List[keras.layers.Layer]:
    return list(model._flatten_layers(include_self=True, recursive=True))  # noqa: SLF001


def freeze_for_adapter_tuning(model, train_pooler: bool = False, train_head: bool = True) -> None:
    """Makes only the adapters, every LayerNorm, and optionally pooler and head trainable
    (through `tuning.train_only`, as the package's own models).

    Args:
        model: a transformers TF BERT model (built).
        train_pooler: train `bert.pooler` (useful when the checkpoint's pooler was never
            trained, as in all-MiniLM-L6-v2).
        train_head: train the layers outside the BERT main layer (the task head).
    """
    bert = main_layer(model)
    in_bert = {id(layer) for layer in _all_layers(bert)}
    chosen = [layer for layer in _all_layers(model)
              if isinstance(layer, (HoulsbyAdapter, keras.layers.LayerNormalization))]
    if train_pooler and getattr(bert, "pooler", None) is not None:
        chosen.append(bert.pooler)
    if train_head:
        chosen += [layer for layer in _all_layers(model)
                   if id(layer) not in in_bert and direct_weights(layer)]
    train_only(model, chosen)
    reset_compiled_functions(model)


def unfreeze(model) -> None:
    """Makes every weight of the model trainable again (undoes the freezing)."""
    train_only(model, [model])
    reset_compiled_functions(model)


def parameter_counts(model) -> Tuple[int, int]:
    """(trainable, total) weight counts of the model."""
    count = lambda variables: int(sum(np.prod(v.shape) for v in variables))  # noqa: E731
    return count(model.trainable_weights), count(model.weights)


def parameter_line_of(model) -> str:
    """The package's greppable parameter line for a transformers model."""
    return parameter_line(*parameter_counts(model))


# ------------------------------------------------------------ weight transfer
def copy_adapter_weights(source, model) -> int:
    """Copies the Houlsby adapters of an `adapter_bert` model into a transformers model
    equipped by `add_adapters` with the same layout; returns how many. ValueError when
    places or shapes differ.
    """
    bert = backbone_of(source)
    # The source's active adapter (a runner's model: the one it trained).
    name = getattr(source, "active_adapter", None)
    theirs = {}
    for index, layer in enumerate(bert.encoder.transformer_layers):
        for position, block in (("attention", layer.attention_output_block),
                                ("ffn", layer.ffn_output_block)):
            adapter = block.modification(name).adapter
            if adapter is not None:
                theirs[(index, position)] = adapter
    ours = adapters_by_position(model)
    if set(theirs) != set(ours):
        raise UserError(f"adapter layouts differ: source has {sorted(theirs)}, the "
                        f"transformers model has {sorted(ours)}")
    for key, target in ours.items():
        source_adapter = theirs[key]
        if type(source_adapter) is not HoulsbyAdapter:  # noqa: E721 - subclasses compute otherwise
            raise UserError(f"adapter {key} of the source is a {type(source_adapter).__name__}; "
                            f"add_adapters inserts Houlsby adapters")
        for name in ("weights1", "biases1", "weights2", "biases2"):
            value = getattr(source_adapter, name)
            variable = getattr(target, name)
            if tuple(value.shape) != tuple(variable.shape):
                raise UserError(f"adapter {key} {name}: shape {value.shape.as_list()} vs "
                                f"{variable.shape.as_list()}")
            variable.assign(value)
    return len(ours)
