"""How a backbone block is modified: the named adapters it holds.

Every BERT layer adapters can change (model/encoder.py: embeddings, self-attention, the
output blocks, the intermediate block, the pooler) is a `ModifiableBlock`. It stores one
`TaskBranch` per named adapter (`task_branches`), and its `call` asks
`modification(adapter_name)` which LayerNorm, adapter, projection and fusion to run, so
that every path through a block (the backbone alone, a named adapter, an ablation,
AdapterFusion) is decided in one method.
"""

from typing import Dict, NamedTuple, Optional, Tuple

import tensorflow as tf
import tf_keras as keras

from adapter_bert.model.adapter_layers import ProjectionAdapter
from adapter_bert.model.config import BertConfig
from adapter_bert.model.naming import direct_weights, walk_layers
from adapter_bert.errors import UserError


class ConfiguredLayer(keras.layers.Layer):
    """Base for layers built from a `BertConfig`; serialises the config in `get_config`."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config if isinstance(config, BertConfig) else BertConfig.from_dict(config)

    def get_config(self):
        base = super().get_config()
        base["config"] = self.config.to_dict()
        return base


@keras.utils.register_keras_serializable(package="adapter_bert")
class TaskBranch(keras.layers.Layer):
    """What one named adapter owns inside one backbone block (TF1 scope `<block>/<task>`).

    Optional parts: `layer_norm` (its copy of the block's LayerNorm), `adapter`, `dense`
    (its pooler projection) and `fusion` with `fused`. The embeddings' branch also records
    `adapter_config` and `train_pooler`. `adapter_enabled` (ablations) bypasses the adapter,
    weights kept.
    """

    def __init__(self, name, **kwargs):
        super().__init__(name=name, **kwargs)
        self.layer_norm = None
        self.adapter = None
        self.dense = None
        self.fusion = None
        self.fused = []
        self.adapter_config = None
        self.train_pooler = False
        self.adapter_enabled = True
        # A container that is never called (its block calls its parts, built when they
        # are added): built from the start, so that SavedModel serialises it.
        self.built = True


class BlockModification(NamedTuple):
    """What one call of a block runs: the block's own layers or a task's `layer_norm`,
    `adapter`, `dense` (the pooler's only), `fusion` and the `fused` adapters; None where
    the block has no such part.
    """

    layer_norm: Optional[keras.layers.Layer] = None
    adapter: Optional[keras.layers.Layer] = None
    dense: Optional[keras.layers.Layer] = None
    fusion: Optional[keras.layers.Layer] = None
    fused: Tuple[keras.layers.Layer, ...] = ()


class ModifiableBlock(ConfiguredLayer):
    """Base of the backbone layers adapters modify: the one extension point of a block.

    `task_branches` holds one `TaskBranch` per named adapter (`add_task_branch`,
    `remove_task_branch`); `call` reads them through `modification` alone. With
    `BRANCH_PER_TASK` (blocks holding a LayerNorm) every named adapter has a branch;
    elsewhere a task without one runs the block unmodified.
    """

    BRANCH_PER_TASK = False

    @property
    def projection_input_width(self) -> int:
        """Width of the input of this block's dense projections (a projection adapter's)."""
        return self.config.hidden_size

    def adapter_input_shape(self, adapter: keras.layers.Layer) -> tf.TensorShape:
        """The input shape `adapter` is built for in this block: the projections' input
        for a `ProjectionAdapter`, the hidden state otherwise."""
        width = (self.projection_input_width if isinstance(adapter, ProjectionAdapter)
                 else self.config.hidden_size)
        return tf.TensorShape([None, None, width])

    def build(self, input_shape):
        # A named adapter's call runs its own copy of the LayerNorm, so the block's own
        # one may never be called: it is built here (checkpoints and the other adapters
        # read it). A LayerNorm draws no random numbers, so this changes no initial value.
        layer_norm = getattr(self, "layer_norm", None)
        if layer_norm is not None and not layer_norm.built:
            with tf.name_scope(layer_norm.name):  # the weight names a call would give
                layer_norm.build(tf.TensorShape([None, None, self.config.hidden_size]))
        super().build(input_shape)

    def _init_modifications(self) -> None:
        # Called last in `__init__`: attribute order is the order Keras walks the
        # layers, hence the order of the weights (and of the optimizer's slots).
        self.task_branches = {}

    def add_task_branch(self, branch: TaskBranch) -> None:
        """Adds the named adapter `branch.name`'s parts for this block."""
        self.task_branches[branch.name] = branch

    def remove_task_branch(self, name: str) -> None:
        """Removes the named adapter `name`'s parts (if it has any here)."""
        if name in self.task_branches:
            # A fresh dict (rather than `del`) keeps Keras' tracking and checkpoints sound.
            self.task_branches = {k: v for k, v in self.task_branches.items() if k != name}

    @tf.autograph.experimental.do_not_convert  # Python dispatch while tracing
    def modification(self, adapter_name: Optional[str] = None) -> BlockModification:
        """What this block runs: its own layers (None) or named adapter `adapter_name`'s.

        Raises:
            KeyError: `BRANCH_PER_TASK` and no adapter named `adapter_name`.
        """
        own_layer_norm = getattr(self, "layer_norm", None)
        own_dense = getattr(self, "dense", None)
        branch = None if adapter_name is None else self.task_branches.get(adapter_name)
        if branch is None:
            if adapter_name is not None and self.BRANCH_PER_TASK:
                raise KeyError(f"no adapter named {adapter_name!r} in {self.name} (named "
                               f"adapters: {sorted(self.task_branches)})")
            return BlockModification(own_layer_norm, None, own_dense)
        if not branch.adapter_enabled and getattr(branch.adapter, "merged", False):
            raise UserError(f"adapter {adapter_name!r} of {self.name} is merged into its "
                            f"kernels and cannot be switched off: unmerge it first")
        return BlockModification(
            own_layer_norm if branch.layer_norm is None else branch.layer_norm,
            branch.adapter if branch.adapter_enabled else None,
            own_dense if branch.dense is None else branch.dense,
            branch.fusion, tuple(self.modification(name).adapter for name in branch.fused))


def branch_variables(bert: keras.layers.Layer, name: str) -> Dict[str, tf.Variable]:
    """The variables of named adapter `name` in backbone `bert`, by shared TF1 name.

    The shared name is the one the same weight has without the adapter's scope segment:
    `bert/encoder/layer_0/output/<name>/LayerNorm/gamma` is returned as
    `bert/encoder/layer_0/output/LayerNorm/gamma`. Adapter files use these names, and a
    pretrained checkpoint gives a new adapter's LayerNorm and pooler copies their values
    under them (`checkpoints.load_weights`).
    """
    variables: Dict[str, tf.Variable] = {}
    for scope, layer in walk_layers(bert):
        if not (isinstance(layer, TaskBranch) and layer.name == name):
            continue
        parent = scope.rsplit("/", 1)[0]
        for sub_scope, sub in walk_layers(layer, parent):
            for variable in direct_weights(sub):
                short = variable.name.split("/")[-1].split(":")[0]
                variables[f"{sub_scope}/{short}"] = variable
    return variables


def add_projection_updates(adapter, inputs, projections):
    """`projections` ({Dense name: its output}) plus the updates `adapter(inputs)` returns.

    The adapter is a `ProjectionAdapter` (or stands for one); Keras passes it the block's
    `training` (its dropout).
    """
    updated = dict(projections)
    for target, update in adapter(inputs).items():
        updated[target] = updated[target] + tf.cast(update, updated[target].dtype)
    return updated
