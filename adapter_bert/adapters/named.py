"""Named adapters on one frozen backbone: create, delete and address a task's parameters.

A named adapter ("mrpc") owns, in every block of the backbone, a `TaskBranch` (added
through the block's `ModifiableBlock.add_task_branch`, see model/encoder.py) under the
TF1 scope `<block>/mrpc`: its adapter for that slot (if the config puts one there), its
own copy of the block's LayerNorm (Houlsby-style adapter tuning trains the LayerNorms
per task), optionally its own pooler projection, or, for a fusion task, an
`AdapterFusion` over other named adapters. The backbone's frozen weights are shared by
every task and never copied.

`named_adapter_variables` maps a task's variables to their shared names, without the
task's scope segment (`bert/encoder/layer_0/output/mrpc/adapters/weights1` ->
`bert/encoder/layer_0/output/adapters/weights1`): the names of adapter files and of
Google's adapter-bert checkpoints.
"""

import re
from typing import Dict, List, Optional, Sequence

import tensorflow as tf
import tf_keras as keras

from adapter_bert.model.config import AdapterConfig, adapter_families, adapter_family
from adapter_bert.model.fast_layers import LayerNorm
from adapter_bert.adapters.fusion import AdapterFusion
from adapter_bert.model.blocks import TaskBranch, branch_variables
from adapter_bert.model.encoder import (BertNetwork, BertTransformerLayer, holders,
                                        projection_blocks)
from adapter_bert.errors import UserError

_VALID_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

# Scope names already used inside the backbone and at the top level of task models:
# an adapter of that name would make TF1 names ambiguous.
RESERVED_NAMES = frozenset({
    "bert", "cls", "embeddings", "encoder", "pooler", "attention", "self", "output",
    "intermediate", "dense", "LayerNorm", "adapters", "adapter_fusion", "query", "key",
    "value", "word_embeddings", "position_embeddings", "token_type_embeddings",
    "output_weights", "output_bias", "resadapter",
})


def validate_name(name: str) -> str:
    """Checks that `name` can be an adapter name (a TF1 scope segment); returns it.

    Raises:
        ValueError: empty, with characters other than letters, digits, `_`, `.`, `-`,
            or a reserved scope name.
    """
    if not isinstance(name, str) or not _VALID_NAME.match(name):
        raise UserError(f"adapter name {name!r} must start with a letter or digit and use only "
                        f"letters, digits, '_', '.' and '-'")
    if name in RESERVED_NAMES:
        raise UserError(f"adapter name {name!r} is reserved (a scope name of the model)")
    return name


def _width_shape(bert: BertNetwork) -> tf.TensorShape:
    return tf.TensorShape([None, None, bert.config.hidden_size])


def _layer_norm_copy(bert: BertNetwork, source: keras.layers.LayerNormalization):
    """A new LayerNorm holding the current gamma/beta of `source` (the task's start);
    unbuilt on an unbuilt backbone (the pretrained checkpoint fills it)."""
    layer = LayerNorm(epsilon=bert.config.layer_norm_eps, name="LayerNorm")
    if bert.built:
        layer.build(_width_shape(bert))
        layer.gamma.assign(source.gamma)
        layer.beta.assign(source.beta)
    return layer


def _pooler_copy(bert: BertNetwork) -> keras.layers.Dense:
    # Zeros, not a random initializer: the values are copied (now, or from the checkpoint
    # on an unbuilt backbone), and drawing none keeps every other initial value as it is.
    dense = keras.layers.Dense(bert.config.hidden_size, activation="tanh", name="dense",
                               kernel_initializer="zeros")
    if bert.built:
        source = bert.pooler.dense
        dense.build(tf.TensorShape([None, bert.config.hidden_size]))
        dense.kernel.assign(source.kernel)
        dense.bias.assign(source.bias)
    return dense


def add_pooler_copy(bert: BertNetwork, name: str) -> None:
    """Gives the named adapter `name` its own copy of the pooler (to train it), as it is
    now; nothing when it has one.

    Raises:
        KeyError: no named adapter `name`.
    """
    info = named_adapter_info(bert, name)
    if info.train_pooler:
        return
    branch = bert.pooler.task_branches.get(name) or TaskBranch(name)
    branch.dense = _pooler_copy(bert)
    bert.pooler.add_task_branch(branch)
    info.train_pooler = True


def new_adapters(layer: BertTransformerLayer, adapter_config: AdapterConfig, index: int):
    """Fresh adapter layers for transformer layer `index`: [(block, layer)], in call order.

    Where they go is the family's registration: an "output" family gets one layer in
    each output block its `positions` select; a "projections" family one layer in each
    block holding projections it updates (`AdapterFamily.projections`), built with
    {the projections' Dense names in the block: their output widths}. The layers are
    not built.
    """
    family = adapter_family(adapter_config.adapter_type)
    positions = adapter_config.layer_positions(index)
    if family.slot == "output":
        return [(layer.attention_output_block if position == "attention"
                 else layer.ffn_output_block, family.layer.from_adapter_config(adapter_config))
                for position in positions]
    if not positions:
        return []
    targets = set(family.projections(adapter_config))
    by_block = {}
    for name, (block, dense) in projection_blocks(layer).items():
        if name in targets:
            by_block.setdefault(id(block), (block, {}))[1][dense] = getattr(block, dense).units
    return [(block, family.layer.from_adapter_config(adapter_config, projections))
            for block, projections in by_block.values()]


def _branch_holders(bert: BertNetwork):
    """Every layer of the backbone that can hold task branches."""
    yield bert.embeddings
    for layer in bert.encoder.transformer_layers:
        yield from holders(layer)
    yield bert.pooler


def named_adapter_info(bert: BertNetwork, name: str) -> TaskBranch:
    """The embeddings branch of `name`, which records the task's `adapter_config`,
    `fused` names and `train_pooler`.

    Raises:
        KeyError: no named adapter `name`.
    """
    if name not in bert.embeddings.task_branches:
        raise KeyError(f"no adapter named {name!r}; named adapters: {bert.named_adapters}")
    return bert.embeddings.task_branches[name]


def add_named_adapter(bert: BertNetwork, name: str, adapter_config: Optional[AdapterConfig] = None,
                      train_pooler: bool = False, fuse: Optional[Sequence[str]] = None) -> None:
    """Adds the named adapter `name` (adapters from `adapter_config`, or a fusion of the
    adapters named in `fuse`) to a backbone; under a distribution strategy, call it inside
    the strategy's scope.

    Its LayerNorms (and pooler, with `train_pooler`) start as copies of the backbone's. On
    an unbuilt backbone its layers are built by the first call, where the backbone's are (so
    initial values are those of a network built with it), and the copies take the
    checkpoint's values when it loads. Raises ValueError for a bad or taken name, both or
    neither of `adapter_config` and `fuse`, or adapters that cannot be fused, and
    ConfigError for a config that does not fit.
    """
    adapter_config = _checked_request(bert, name, adapter_config, fuse)
    fused = _check_fusable(bert, fuse) if fuse is not None else []
    branches = {holder: TaskBranch(name) for holder in _branch_holders(bert)}
    for holder, branch in branches.items():
        if getattr(holder, "layer_norm", None) is None:
            continue  # the pooler, self-attention and the intermediate block have none
        branch.layer_norm = _layer_norm_copy(bert, holder.layer_norm)
    if train_pooler:
        branches[bert.pooler].dense = _pooler_copy(bert)
    for index, layer in enumerate(bert.encoder.transformer_layers):
        _add_layer_branches(bert, layer, index, branches, adapter_config, fused)
    info = branches[bert.embeddings]
    info.adapter_config = adapter_config
    info.fused = list(fused)
    info.train_pooler = bool(train_pooler)
    for holder, branch in branches.items():
        if not holder.BRANCH_PER_TASK and branch.adapter is None and branch.dense is None:
            continue  # these holders fall back to the shared layer
        holder.add_task_branch(branch)


def _checked_request(bert: BertNetwork, name: str, adapter_config, fuse):
    """`add_named_adapter`'s arguments checked; its `AdapterConfig` (None for a fusion)."""
    validate_name(name)
    if fuse is not None and not bert.built:
        raise UserError("build the backbone (and load its weights) before adding a fusion")
    if name in bert.embeddings.task_branches:
        raise UserError(f"an adapter named {name!r} already exists")
    if (adapter_config is None) == (fuse is None):
        raise UserError("give either adapter_config (an adapter task) or fuse (a fusion task)")
    if isinstance(adapter_config, dict):
        adapter_config = AdapterConfig.from_dict(adapter_config)
    if adapter_config is not None:
        adapter_config.validate_for(bert.config)
    return adapter_config


def _add_layer_branches(bert: BertNetwork, layer, index: int, branches: dict,
                        adapter_config: Optional[AdapterConfig], fused: List[str]) -> None:
    """Fills transformer layer `index`'s branches: its adapters, or fusions of `fused`."""
    if adapter_config is not None:
        for slot, adapter in new_adapters(layer, adapter_config, index):
            if bert.built:
                adapter.build(slot.adapter_input_shape(adapter))
            branches[slot].adapter = adapter
    for block in (layer.attention_output_block, layer.ffn_output_block):
        if fused and block.modification(fused[0]).adapter is not None:
            fusion = AdapterFusion(initializer_range=bert.config.initializer_range)
            fusion.build(_width_shape(bert))
            branches[block].fusion = fusion
            branches[block].fused = list(fused)


def _check_fusable(bert: BertNetwork, names: Sequence[str]) -> List[str]:
    names = list(names)
    if not names:
        raise UserError("fuse needs at least one adapter name")
    if len(set(names)) != len(names):
        raise UserError(f"fuse names an adapter twice: {names}")
    layouts = []
    for fused_name in names:
        config = named_adapter_info(bert, fused_name).adapter_config
        if config is None:
            raise UserError(f"{fused_name!r} is a fusion, not an adapter; fuse adapters only")
        if adapter_family(config.adapter_type).slot != "output":
            fusable = [f.name for f in adapter_families() if f.slot == "output"]
            raise UserError(f"{fused_name!r} is a {config.adapter_type} adapter, which updates "
                            f"projections; fusion attends over output-block adapters "
                            f"({', '.join(fusable)})")
        layouts.append([[block.modification(fused_name).adapter is not None
                         for block in (layer.attention_output_block, layer.ffn_output_block)]
                        for layer in bert.encoder.transformer_layers])
    if any(layout != layouts[0] for layout in layouts):
        raise UserError(f"adapters {names} sit in different slots; fusion needs the same "
                        f"adapter positions and leave_out for all of them")
    return names


def delete_named_adapter(bert: BertNetwork, name: str) -> None:
    """Removes the named adapter `name` and all its weights from the backbone.

    Raises:
        KeyError: no such adapter.
        ValueError: a fusion task still fuses it.
    """
    named_adapter_info(bert, name)
    users = [other for other in bert.named_adapters
             if name in named_adapter_info(bert, other).fused]
    if users:
        raise UserError(f"adapter {name!r} is fused by {users}; delete those first")
    if name in bert.merged_adapters():
        bert.refuse_while_merged("deleting it")
    for holder in _branch_holders(bert):
        holder.remove_task_branch(name)


def named_adapter_variables(bert: BertNetwork, name: str) -> Dict[str, tf.Variable]:
    """The backbone variables of the named adapter `name` by shared TF1 name: the names of
    adapter files and Google's adapter-bert checkpoints
    (`.../output/<name>/adapters/weights1` as `.../output/adapters/weights1`,
    `blocks.branch_variables`). KeyError if absent.
    """
    named_adapter_info(bert, name)
    return branch_variables(bert, name)
