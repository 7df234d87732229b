"""Many tasks on one frozen backbone: named adapters, switching, mixed batches, files.

`MultiAdapterModel` wraps one `BertModel` and keeps, per named adapter, the task's
backbone branches (adapters, LayerNorms, optional pooler or fusion; see
named_adapters.py) and its head. The backbone's frozen weights are shared, never
copied: adding a task adds only its own small parameter set.

Mixed batches (`adapter_names`, one name per row) run as per-task sub-batches: the rows
of each task are gathered, run through the backbone with that task's parameters, and
scattered back into batch order (`tf.dynamic_stitch`). Every row passes through the
backbone once, so the cost is one forward pass over the batch (split in as many
matrix products as there are tasks), no parameter is copied per row, and each row goes
through exactly the computation of a single-task call. The alternative, gathering
per-row adapter and LayerNorm parameters, would materialise `[B, d, m]` weights in
every slot and change the matrix products of the single-task path.

Examples:
    model = MultiAdapterModel.from_pretrained()          # the embedded MiniLM
    model.add_adapter("mrpc", AdapterConfig(size=64), num_labels=2)
    model.load_adapter("output/sst2_adapter/adapter")    # a run_classifier.py adapter
    model.train_adapter("mrpc")                          # only mrpc's weights train
    model.compile(...); model.fit(mrpc_dataset)
    model.set_active_adapter("sst2")
    logits = model(features)                             # SST-2 logits
    mixed = model(features, adapter_names=["mrpc", "sst2", ...])
"""

from typing import Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf
import tf_keras as keras

from adapter_bert.adapters.files import (AdapterFileError, backbone_fingerprint, check_backbone,
                                        check_fingerprint, read_adapter_config,
                                        read_adapter_weights, write_adapter_files)
from adapter_bert.model.config import AdapterConfig
from adapter_bert.model.heads import ClassifierHead, SpanHead
from adapter_bert.model.encoder import BertModel, TaskBranch
from adapter_bert.model.inputs import FeatureInputs, model_features
from adapter_bert.adapters.named import (add_named_adapter, delete_named_adapter,
                                         named_adapter_info, named_adapter_variables)
from adapter_bert.model.naming import direct_weights, walk_layers

HEAD_KINDS = {"classifier": ClassifierHead, "span": SpanHead}
_HEAD_FILE_NAMES = {"ClassifierHead": "classifier", "SpanHead": "span"}


@keras.utils.register_keras_serializable(package="adapter_bert")
class MultiAdapterModel(FeatureInputs, keras.Model):
    """A frozen BERT backbone serving several named adapters, each with its own head.

    Call it on Google-named features (`input_ids`, `input_mask`, `segment_ids`): it runs
    the active adapter, or, with `adapter_names` (one name per row, as a call argument
    or an `adapter_names` feature), each row with its own adapter. Classifier heads
    return float32 logits `[B, num_labels]`; in a mixed batch rows are padded with
    `-inf` to the widest classifier head of the model. Span heads return
    `{"start_logits", "end_logits"}` `[B, T]`.

    Args:
        bert: the backbone to share; built here if it is not (load its pretrained
            weights before adding adapters: task LayerNorms start as copies).

    Raises:
        ValueError: the backbone has single-path adapters of its own.
    """

    EXTRA_INPUTS = ("adapter_names",)

    def __init__(self, bert: BertModel, name="multi_adapter_model", **kwargs):
        super().__init__(name=name, **kwargs)
        if bert.adapter_config is not None:
            raise ValueError("MultiAdapterModel needs a backbone without its own adapters; "
                             "add them as named adapters instead")
        if not bert.built:
            bert.build_with_dummy_inputs()
        self.bert = bert
        self.heads = {}
        self.labels = {}
        self._active = None

    @classmethod
    def from_pretrained(cls, path: Optional[str] = None, config_file: Optional[str] = None):
        """Loads a pretrained backbone (see `factory.load_pretrained`) and wraps it.

        Args:
            path: checkpoint or directory; None loads the embedded MiniLM.
            config_file: overrides the config found beside the checkpoint.
        """
        from adapter_bert.model.factory import load_pretrained
        return cls(load_pretrained(path, config_file=config_file))

    # ------------------------------------------------------------ adapters
    @property
    def adapter_names(self) -> List[str]:
        """Names of the adapters that have a head in this model, in the order added."""
        return list(self.heads)

    @property
    def active_adapter(self) -> Optional[str]:
        """The adapter plain calls run (None before one is set)."""
        return self._active

    def add_adapter(self, name: str, adapter_config: AdapterConfig, head: str = "classifier",
                    num_labels: int = 2, labels: Optional[Sequence[str]] = None,
                    train_pooler: bool = False) -> None:
        """Adds a fresh named adapter with its own LayerNorms and head.

        Args:
            name: letters, digits, `_`, `.`, `-`; it is the TF1 scope of its weights.
            adapter_config: which family, size and slots (any `AdapterConfig`).
            head: "classifier" (on the pooled output) or "span" (SQuAD start/end).
            num_labels: classifier outputs (1 for regression); ignored for "span".
            labels: label names in logit order, recorded in saved files.
            train_pooler: the task gets its own (trainable) copy of the pooler.

        Under a `tf.distribute` strategy, call it inside the strategy's scope.

        Raises:
            ValueError: bad or taken name, unknown head kind.
            ConfigError: the config does not fit the backbone.
        """
        self._check_head_kind(head)
        if name in self.heads:
            raise ValueError(f"an adapter named {name!r} already exists")
        add_named_adapter(self.bert, name, adapter_config, train_pooler=train_pooler)
        self._add_head(name, head, num_labels, labels)

    def add_adapter_fusion(self, name: str, adapters: Sequence[str], head: str = "classifier",
                           num_labels: int = 2, labels: Optional[Sequence[str]] = None,
                           train_pooler: bool = False) -> None:
        """Adds a task that fuses trained adapters with AdapterFusion (see fusion.py).

        In every slot where the fused adapters sit, an `AdapterFusion` attends over
        their outputs. Training it with `train_adapter(name)` trains the fusion layers
        and the task's own LayerNorms and head; the fused adapters stay frozen.

        Args:
            name: the fusion task's name.
            adapters: names of trained bottleneck adapters (same slots for all).
            head, num_labels, labels, train_pooler: as in `add_adapter`.

        Raises:
            ValueError: unknown adapters, LoRA adapters, different slot layouts.
        """
        self._check_head_kind(head)
        add_named_adapter(self.bert, name, fuse=list(adapters), train_pooler=train_pooler)
        self._add_head(name, head, num_labels, labels)

    def delete_adapter(self, name: str) -> None:
        """Removes a named adapter, its branches and its head.

        Raises:
            KeyError: no such adapter. ValueError: a fusion still uses it.
        """
        self._require(name)
        delete_named_adapter(self.bert, name)
        self.heads = {k: v for k, v in self.heads.items() if k != name}
        self.labels = {k: v for k, v in self.labels.items() if k != name}
        if self._active == name:
            self._active = None
        self._reset_compiled_functions()

    def set_active_adapter(self, name: Optional[str]) -> None:
        """Chooses the adapter that plain calls run (None: no adapter, calls fail).

        Raises:
            KeyError: no such adapter.
        """
        if name is not None:
            self._require(name)
        self._active = name
        self._reset_compiled_functions()

    def train_adapter(self, name: str) -> None:
        """Activates `name` and makes exactly its own weights trainable.

        Its adapters (or fusion layers), LayerNorms, pooler copy (if any) and head
        train; the backbone and every other adapter are frozen. Compile after calling.

        Raises:
            KeyError: no such adapter.
        """
        self.set_active_adapter(name)
        own = {id(layer) for layer in self._own_layers(name)}
        for _, layer in walk_layers(self):
            if direct_weights(layer):
                layer.trainable = id(layer) in own
            else:
                layer._trainable = True  # noqa: SLF001 - containers must not hide children

    def adapter_variables(self, name: str) -> Dict[str, tf.Variable]:
        """All weights of adapter `name` by their single-adapter TF1 names (what its
        adapter file holds): backbone branches plus `output_weights`/`output_bias`."""
        self._require(name)
        variables = named_adapter_variables(self.bert, name)
        head = self.heads[name]
        scope = type(head).tf1_scope
        for variable in direct_weights(head):
            short = variable.name.split("/")[-1].split(":")[0]
            variables[f"{scope}/{short}" if scope else short] = variable
        return variables

    # --------------------------------------------------------------- files
    def save_adapter(self, name: str, directory: str, task: Optional[str] = None) -> str:
        """Writes adapter `name` as an adapter directory (see adapter_files.py).

        Files of plain adapters are the same as a run_classifier.py / run_squad.py run
        writes, so `--load_adapter` reads them.

        Returns:
            The path of the weights file.
        """
        variables = self.adapter_variables(name)
        info = named_adapter_info(self.bert, name)
        description = {
            "task": task or name,
            "labels": self.labels.get(name),
            "head": type(self.heads[name]).__name__,
            "tuning_mode": "adapter",
            "adapter_config": info.adapter_config.to_dict() if info.adapter_config else None,
            "fusion": list(info.fused) or None,
            "resadapter": None,
            "backbone": self.bert.config.to_dict(),
            "backbone_fingerprint": backbone_fingerprint(self.bert),
        }
        return write_adapter_files(directory, {k: v.numpy() for k, v in variables.items()},
                                   description)

    def load_adapter(self, directory: str, name: Optional[str] = None) -> str:
        """Adds the adapter stored in `directory` (written by `save_adapter` or by a
        run_classifier.py / run_squad.py run in tuning mode "adapter").

        Args:
            directory: the adapter directory.
            name: the name to give it; default: the task recorded in the file.

        Returns:
            The adapter's name.

        Raises:
            AdapterFileError: malformed file, another backbone shape, not an adapter-mode
                file, or weights that do not match the adapter it describes. A backbone
                of the same shape with other weights only logs a warning.
        """
        description = read_adapter_config(directory)
        check_backbone(description, self.bert.config, directory)
        weights = read_adapter_weights(directory)
        name = name or description.get("task")
        if not name:
            raise AdapterFileError(f"{directory} records no task name; pass name=...")
        if description.get("tuning_mode") != "adapter" or description.get("resadapter"):
            raise AdapterFileError(f"{directory} holds a {description.get('tuning_mode')!r} run"
                                   + (" with a ResAdapter" if description.get("resadapter") else "")
                                   + "; only adapter-mode files load as named adapters")
        head = _HEAD_FILE_NAMES.get(description.get("head"))
        if head is None:
            raise AdapterFileError(f"{directory}: head {description.get('head')!r} is not a "
                                   f"classifier or span head")
        bias = "output_bias" if head == "classifier" else "cls/squad/output_bias"
        if bias not in weights:
            raise AdapterFileError(f"{directory}: no {bias} weight for its {head} head")
        num_labels = int(weights[bias].shape[0])
        train_pooler = any(k.startswith("bert/pooler/") for k in weights)
        config = description.get("adapter_config")
        if description.get("fusion"):
            self.add_adapter_fusion(name, description["fusion"], head, num_labels,
                                    description.get("labels"), train_pooler)
        elif config:
            self.add_adapter(name, AdapterConfig.from_dict(config), head, num_labels,
                             description.get("labels"), train_pooler)
        else:
            raise AdapterFileError(f"{directory} holds no adapters (adapter_config is null)")
        try:
            self._assign(name, weights, directory)
        except AdapterFileError:
            self.delete_adapter(name)
            raise
        check_fingerprint(description, self.bert, directory)
        return name

    def _assign(self, name: str, weights: Dict[str, np.ndarray], directory: str) -> None:
        variables = self.adapter_variables(name)
        missing = sorted(set(variables) - set(weights))
        extra = sorted(set(weights) - set(variables))
        if missing or extra:
            raise AdapterFileError(
                f"{directory}: weights do not match the adapter it describes"
                + (f"; missing {missing[:3]}" if missing else "")
                + (f"; unexpected {extra[:3]}" if extra else ""))
        for key, variable in variables.items():
            if tuple(variable.shape) != weights[key].shape:
                raise AdapterFileError(f"{directory}: weight {key} has shape "
                                       f"{list(weights[key].shape)}, the model's is "
                                       f"{variable.shape.as_list()}")
            variable.assign(weights[key])

    # ---------------------------------------------------------------- call
    def call(self, inputs, training=None, adapter_names=None):
        """Runs the active adapter, or each row's adapter when names are given.

        Args:
            inputs: dict of int features (`input_ids`, optional `input_mask`,
                `segment_ids`, optional `adapter_names` [B] strings; Hugging Face's
                `attention_mask` / `token_type_ids` are accepted, other keys fail).
            training: dropout on or off.
            adapter_names: [B] adapter name per row (overrides the feature).

        Raises:
            ValueError: no active adapter, or a mixed batch over heads of different kinds.
            InvalidArgumentError: a row names an adapter the model does not have.
        """
        features = model_features(inputs, type(self).__name__, self.EXTRA_INPUTS)
        names_feature = features.pop("adapter_names", None)
        if adapter_names is None:
            adapter_names = names_feature
        if adapter_names is None:
            if self._active is None:
                raise ValueError(f"no active adapter: call set_active_adapter(name) (adapters: "
                                 f"{self.adapter_names}) or pass adapter_names")
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
            raise ValueError("a mixed batch needs adapters whose heads are of one kind; this "
                             "model mixes classifier and span heads (use one model per kind "
                             "on the same backbone)")
        names = tf.reshape(tf.convert_to_tensor(adapter_names, tf.string), [-1])
        known = tf.reduce_any(tf.equal(names[:, tf.newaxis], tf.constant(tasks)[tf.newaxis]), 1)
        with tf.control_dependencies([tf.debugging.assert_equal(
                known, True, message=f"adapter_names must name adapters of the model: {tasks}")]):
            names = tf.identity(names)
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

    # ------------------------------------------------------------- helpers
    def _require(self, name: str) -> None:
        if name not in self.heads:
            raise KeyError(f"no adapter named {name!r}; adapters: {self.adapter_names}")

    @staticmethod
    def _check_head_kind(head: str) -> None:
        if head not in HEAD_KINDS:
            raise ValueError(f"head must be one of {sorted(HEAD_KINDS)}, got {head!r}")

    def _add_head(self, name, head, num_labels, labels) -> None:
        config = self.bert.config
        if head == "classifier":
            layer = ClassifierHead(num_labels, dropout_rate=config.hidden_dropout_prob,
                                   initializer_range=config.initializer_range, name=name)
        else:
            layer = SpanHead(initializer_range=config.initializer_range, name=name)
        # The head's weights live under the adapter's scope: `mrpc/output_weights`.
        layer.tf1_scope = f"{name}/{type(layer).tf1_scope}".rstrip("/")
        layer.build(tf.TensorShape([None, config.hidden_size]))
        self.heads[name] = layer
        self.labels[name] = list(labels) if labels is not None else None
        if self._active is None:
            self._active = name
        self._reset_compiled_functions()

    def _own_layers(self, name: str):
        """Every layer holding weights of adapter `name` (branches and head)."""
        self._require(name)
        layers = [self.heads[name]]
        for _, layer in walk_layers(self.bert):
            if isinstance(layer, TaskBranch) and layer.name == name:
                layers.extend(layer._flatten_layers(include_self=True))  # noqa: SLF001
        return layers

    def _reset_compiled_functions(self) -> None:
        # The active adapter is read while tracing: drop Keras' traced functions.
        for attribute in ("predict_function", "test_function", "train_function"):
            if getattr(self, attribute, None) is not None:
                setattr(self, attribute, None)

    def get_config(self):
        """The backbone's config and each named adapter's description (not its weights:
        Keras saving stores those, `save_adapter` writes one adapter's)."""
        adapters = []
        for name in self.adapter_names:
            info = named_adapter_info(self.bert, name)
            head = self.heads[name]
            adapters.append({
                "name": name,
                "adapter_config": info.adapter_config.to_dict() if info.adapter_config else None,
                "fuse": list(info.fused) or None,
                "head": _HEAD_FILE_NAMES[type(head).__name__],
                "num_labels": head.num_outputs,
                "labels": self.labels.get(name),
                "train_pooler": bool(info.train_pooler)})
        return {"name": self.name, "backbone": self.bert.get_config(), "adapters": adapters,
                "active_adapter": self._active}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """A model on a fresh (untrained) backbone of the same shape, with fresh named
        adapters as described (Keras loading then restores all weights)."""
        model = cls(BertModel.from_config(config["backbone"]), name=config["name"])
        for spec in config.get("adapters") or []:
            if spec.get("fuse"):
                model.add_adapter_fusion(spec["name"], spec["fuse"], spec["head"],
                                         spec["num_labels"], spec.get("labels"),
                                         spec.get("train_pooler", False))
            else:
                model.add_adapter(spec["name"], AdapterConfig.from_dict(spec["adapter_config"]),
                                  spec["head"], spec["num_labels"], spec.get("labels"),
                                  spec.get("train_pooler", False))
        if config.get("active_adapter") in model.heads:
            model.set_active_adapter(config["active_adapter"])
        return model

    def build_from_config(self, config):
        # The backbone and every head are built when added: only the flag is left.
        self.built = True
