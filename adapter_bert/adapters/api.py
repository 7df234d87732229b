"""One adapter API on every model `ab` builds: named adapters, with AdapterHub's names.

`AdapterModelMixin` gives `ab.BertModel`, `ab.BertClassifier`, `ab.BertSpanModel`
(adapters/models.py) and `ab.MultiAdapterModel` `add_adapter`, `set_active_adapters`,
`train_adapter`, `delete_adapter`, `disable_adapters`, `save_adapter`, `load_adapter` and
LoRA's `merge_adapter`/`unmerge_adapter`/`adapter_merged`. The networks sit in model/,
below adapter management, so the methods are added one layer up (docs/design.md).

Rules: the first adapter a model gets becomes its active one; adding or loading one
freezes everything but the active adapter's own weights (compile afterwards); None as the
active adapter runs the plain model; a model built with an `adapter_config` holds it as a
named adapter (`adapter_name`, default "adapter") that uses the model's own head.
"""

import contextlib
import logging
from typing import Dict, Iterator, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from adapter_bert.adapters import files, merging
from adapter_bert.adapters.files import (HEAD_FILE_NAMES, AdapterFileError, check_adapter_mode,
                                         check_backbone, check_fingerprint, classifier_outputs,
                                         describe, file_head_kind, read_adapter_config,
                                         read_adapter_weights, write_adapter_files)
from adapter_bert.adapters.named import (add_named_adapter, delete_named_adapter,
                                         named_adapter_info, named_adapter_variables,
                                         validate_name)
from adapter_bert.adapters.tuning import parameter_report, resolve_train_pooler, train_only
from adapter_bert.model import blocks, heads
from adapter_bert.model.config import AdapterConfig
from adapter_bert.model.naming import direct_weights, walk_layers
from adapter_bert.errors import UserError
from adapter_bert.model.encoder import reset_compiled_functions

log = logging.getLogger(__name__)

# `ab.BertModel`'s default `adapter_name`: its active adapter. None runs the backbone's own
# layers and a name that adapter, as in model/'s networks; no adapter name can be this.
ACTIVE = "<active>"

# The name of the adapter a model is built with (`adapter_config=`) unless one is given.
DEFAULT_ADAPTER = "adapter"



def adapter_config_from(config) -> AdapterConfig:
    """An `AdapterConfig` from what `add_adapter` takes: a config, its dict, a family
    name ("houlsby", "pfeiffer", "parallel", "lora": that family's defaults) or None
    (Houlsby adapters of size 64)."""
    if config is None:
        return AdapterConfig()
    if isinstance(config, AdapterConfig):
        return config
    if isinstance(config, dict):
        return AdapterConfig.from_dict(config)
    if isinstance(config, str):
        return AdapterConfig(adapter_type=config)
    raise TypeError(f"config must be an AdapterConfig, its dict or a family name, not "
                    f"{type(config).__name__}")


class AdapterModelMixin:
    """The adapter API (see the module docstring); mixed into the package's models.

    A subclass calls `_init_adapters(adapter_config, adapter_name)` at the end of
    `__init__`, runs `_adapter_in_use()` in `call` and may override `_backbone_model`
    (default `.bert`), `_default_num_labels` and `HEAD_KINDS`. `heads` maps adapter names to
    head layers.
    """

    # Head kinds this model's adapters can have; the first is the default. () = no head.
    HEAD_KINDS: tuple = ()

    def get_config(self):
        """The network's config plus its named adapters (and which is active)."""
        return dict(super().get_config(), **self._adapters_config())

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """Rebuilds the network, then its named adapters, from `get_config`'s dict."""
        config = dict(config)
        adapters, active = pop_adapter_fields(config)
        model = super().from_config(config, custom_objects)
        model._restore_adapters(adapters, active)
        return model

    def _init_adapters(self, adapter_config=None, adapter_name: Optional[str] = None) -> None:
        self.heads = {}
        # Adapter name -> label names; the keys are the model's adapters, in order.
        self._adapter_labels = {}
        self._active = None
        self._adapters_off = False
        # The adapter the model is built with: it uses the model's own head.
        self._model_adapter = None
        if adapter_config is not None:
            name = adapter_name or DEFAULT_ADAPTER
            self._check_new_name(name)
            # Added before the first call builds the model: its layers are built where the
            # backbone's are, and the checkpoint fills its LayerNorm copies.
            add_named_adapter(self._backbone_model(), name, adapter_config_from(adapter_config))
            self._model_adapter = name
            self._register(name, None, None, None)

    def adapter_head(self, name: Optional[str]):
        """The head adapter `name` runs (None: none); `name` None: the model's own head.

        The adapter a model was built with (`adapter_config=`) uses the model's own head.
        """
        if name is None or name == self._model_adapter:
            return getattr(self, "head", None)
        return self.heads.get(name)

    def _backbone_model(self):
        return self.bert

    def _default_num_labels(self) -> int:
        return 2

    # ------------------------------------------------------------ queries
    @property
    def adapter_names(self) -> List[str]:
        """This model's named adapters, in the order they were added."""
        return list(self._adapter_labels)

    @property
    def labels(self) -> Dict[str, Optional[List[str]]]:
        """Adapter name -> its label names in logit order (None: none given), a copy."""
        return {name: None if labels is None else list(labels)
                for name, labels in self._adapter_labels.items()}

    @property
    def active_adapter(self) -> Optional[str]:
        """The adapter plain calls run (None: none)."""
        return self._active

    def adapter_variables(self, name: str) -> Dict[str, tf.Variable]:
        """All weights of adapter `name` by their single-adapter TF1 names (what its
        adapter file holds): backbone branches plus the head's (`output_weights`, ...).

        Raises:
            KeyError: no such adapter.
        """
        self._require(name)
        variables = named_adapter_variables(self._backbone_model(), name)
        head = self.adapter_head(name)
        if head is not None:
            scope = type(head).tf1_scope
            for variable in direct_weights(head):
                short = variable.name.split("/")[-1].split(":")[0]
                variables[f"{scope}/{short}" if scope else short] = variable
        return variables

    # ------------------------------------------------------- add, delete
    def add_adapter(self, name: str, config=None, head: Optional[str] = None,
                    num_labels: Optional[int] = None, labels: Optional[Sequence[str]] = None,
                    train_pooler="auto") -> None:
        """Adds a fresh named adapter: adapters, LayerNorm copies and (task models) a head.

        Its LayerNorms (and pooler) start as copies of the backbone's, so load the
        pretrained weights first (`ab.load_pretrained` has). The first adapter becomes the
        active one and everything but its own weights is frozen. Under a strategy, call it
        in its scope.

        Args:
            name: letters, digits, `_`, `.`, `-`; the TF1 scope of its weights.
            config: an `AdapterConfig`, its dict, a family name, or None (Houlsby, size 64).
            head: a `MultiAdapterModel`'s head kind ("classifier", default, or "span").
            num_labels: classifier outputs (1 for regression); default the model's, or 2.
            labels: label names in logit order, recorded in saved files.
            train_pooler: its own trainable pooler copy: True, False or "auto" (when a
                classifier reads the pooled output and the backbone's pooler never trained).

        Raises ValueError for a bad or taken name or a head the model cannot hold,
        ConfigError for a config that does not fit the backbone.
        """
        kind = self._head_kind(head)
        num_labels = self._num_labels(kind, num_labels)
        config = adapter_config_from(config)
        self._check_new_name(name)
        self._ensure_built()
        add_named_adapter(self._backbone_model(), name, config,
                          train_pooler=self._resolve_pooler(kind, train_pooler))
        self._register(name, kind, num_labels, labels)

    def add_adapter_fusion(self, name: str, adapters: Sequence[str], head: Optional[str] = None,
                           num_labels: Optional[int] = None,
                           labels: Optional[Sequence[str]] = None,
                           train_pooler: bool = False) -> None:
        """Adds a task that fuses this model's trained bottleneck `adapters` (same slots)
        with AdapterFusion; `train_adapter(name)` then trains the fusion layers and the
        task's LayerNorms and head, the fused adapters frozen. Other arguments as
        `add_adapter`'s. ValueError for unknown or LoRA adapters, or different slot layouts.
        """
        kind = self._head_kind(head)
        num_labels = self._num_labels(kind, num_labels)
        self._check_new_name(name)
        for fused in adapters:
            self._require(fused)
        self._ensure_built()
        add_named_adapter(self._backbone_model(), name, fuse=list(adapters),
                          train_pooler=self._resolve_pooler(kind, train_pooler))
        self._register(name, kind, num_labels, labels)

    def delete_adapter(self, name: str) -> None:
        """Removes a named adapter, all its weights and its head.

        Raises:
            KeyError: no such adapter. ValueError: a fusion still uses it.
        """
        self._require(name)
        delete_named_adapter(self._backbone_model(), name)
        # Fresh dicts (rather than `del`) keep Keras' tracking sound.
        self.heads = {k: v for k, v in self.heads.items() if k != name}
        self._adapter_labels = {k: v for k, v in self._adapter_labels.items() if k != name}
        if self._active == name:
            self._active = None
        if self._model_adapter == name:
            self._model_adapter = None
        reset_compiled_functions(self)

    # -------------------------------------------------- switch and train
    def set_active_adapters(self, name: Optional[str]) -> None:
        """Chooses the adapter plain calls run: a name (or a list of one, AdapterHub's
        form), or None for none; trainable weights do not change. KeyError for an unknown
        adapter, ValueError for several names (several at once: `add_adapter_fusion`).
        """
        if isinstance(name, (list, tuple)):
            if len(name) != 1:
                raise UserError(f"one adapter is active at a time, got {list(name)} (to "
                                f"combine adapters, add a fusion: add_adapter_fusion)")
            name = name[0]
        if name is not None:
            self._require(name)
        self._active = name
        reset_compiled_functions(self)

    def train_adapter(self, name: str, verbose: bool = True) -> str:
        """Activates `name` and makes exactly its own weights trainable (its adapters or
        fusion, LayerNorm and pooler copies, head); compile afterwards. Prints the parameter
        line unless `verbose=False` and returns the parameter report
        (`tuning.parameter_report`). KeyError for an unknown adapter, ValueError while an
        adapter is merged.
        """
        self._require(name)
        self._backbone_model().refuse_while_merged(f"training adapter {name!r}")
        self.set_active_adapters(name)
        self._freeze_except(name)
        report = parameter_report(self)
        if verbose:
            print(report.splitlines()[0], flush=True)
        return report

    @contextlib.contextmanager
    def disable_adapters(self) -> Iterator[None]:
        """Within the `with` body, calls run the backbone without any adapter.

        Every named adapter is bypassed; a task model uses its own head. Everything is
        restored on exit, even after an error. Keras' traced predict/evaluate functions
        are reset on entry and exit; a `tf.function` of your own traced inside keeps what
        it saw.
        """
        was_off = self._adapters_off
        self._adapters_off = True
        reset_compiled_functions(self)
        try:
            yield
        finally:
            self._adapters_off = was_off
            reset_compiled_functions(self)

    # ------------------------------------------------------------- merging
    def merge_adapter(self, name: Optional[str] = None) -> None:
        """Folds a LoRA adapter (default: the active one) into the frozen kernels, for
        inference: the same outputs at the plain backbone's cost. It becomes the active
        adapter; until `unmerge_adapter`, running another, training, adapter files and Keras
        saving are refused. KeyError for an unknown adapter; ValueError for nothing to merge
        or one merged already.
        """
        name = self._merge_target(name)
        merging.merge_adapter(self, name)
        if name is not None and self._active != name:
            self._active = name
            reset_compiled_functions(self)

    def unmerge_adapter(self, name: Optional[str] = None) -> None:
        """Restores the kernels `merge_adapter` changed, exactly (`name` default: whichever
        is merged). KeyError for an unknown adapter, ValueError if it is not merged.
        """
        if name is not None:
            self._require(name)
        merging.unmerge_adapter(self, name)

    @contextlib.contextmanager
    def adapter_merged(self, name: Optional[str] = None) -> Iterator[None]:
        """`merge_adapter(name)` for the `with` body, `unmerge_adapter` on exit (even
        after an error); the active adapter is restored too."""
        active = self._active
        name = self._merge_target(name)
        self.merge_adapter(name)
        try:
            yield
        finally:
            merging.unmerge_adapter(self, name)
            if self._active != active:
                self._active = active
                reset_compiled_functions(self)

    def _merge_target(self, name: Optional[str]) -> Optional[str]:
        """The adapter `merge_adapter(name)` merges: `name`, else the active one."""
        if name is not None:
            self._require(name)
            return name
        if self._active is None:
            raise UserError(f"{type(self).__name__} has no active adapter to merge: pass "
                            f"name=... (adapters: {self.adapter_names})")
        return self._active

    # --------------------------------------------------------------- files
    def save_adapter(self, directory: str, name: Optional[str] = None,
                     task: Optional[str] = None,
                     labels: Optional[Sequence[str]] = None,
                     training: Optional[dict] = None) -> str:
        """Writes adapter `name` (default: the active one) as an adapter directory, the
        files a runner's adapter-mode run writes (without the backbone); returns the weights
        file's path.

        `task` defaults to `name`, `labels` to those given when it was added; `training`
        records how it was trained (e.g. `{"class_weights": {...}}`); existing files
        are replaced atomically. KeyError for an unknown adapter, ValueError for nothing to
        save, AdapterFileError while an adapter is merged.
        """
        self._backbone_model().refuse_while_merged(f"saving to {directory}", AdapterFileError)
        name = self._active if name is None else name
        if name is None:
            raise UserError(f"{type(self).__name__} has no active adapter to save: pass "
                            f"name=... (adapters: {self.adapter_names})")
        variables = self.adapter_variables(name)
        bert = self._backbone_model()
        info = named_adapter_info(bert, name)
        head = self.adapter_head(name)
        description = describe(bert, task=task or name,
                               labels=labels if labels is not None else self.labels.get(name),
                               head=type(head).__name__ if head is not None else None,
                               tuning_mode="adapter", adapter_config=info.adapter_config,
                               fusion=info.fused, training=training)
        return write_adapter_files(directory, {k: v.numpy() for k, v in variables.items()},
                                   description)

    def load_adapter(self, directory: str, name: Optional[str] = None,
                     with_head: bool = True) -> str:
        """Adds the adapter stored in `directory` (`save_adapter`'s, or a runner's
        `<output_dir>/adapter` in adapter mode) with its head and labels; returns its name.

        `name` defaults to the task the file records, else the directory's name;
        `with_head=False` loads the backbone part alone. The first adapter becomes the
        active one. Raises AdapterFileError for a malformed or non-adapter-mode file,
        another backbone shape, a head the model cannot hold, mismatched weights or a merged
        adapter; a backbone of the same shape with other weights only warns.
        """
        bert = self._backbone_model()
        # Checked first: the fingerprint check at the end would fail on merged kernels,
        # with the adapter already added.
        bert.refuse_while_merged(f"loading {directory}", AdapterFileError)
        description = read_adapter_config(directory)
        check_backbone(description, bert.config, directory)
        check_adapter_mode(description, directory)
        weights = read_adapter_weights(directory)
        name = name or description.get("task") or _name_of_directory(directory)
        stored = file_head_kind(description, directory)
        if with_head and stored is not None and stored not in self.HEAD_KINDS:
            raise AdapterFileError(self._head_refusal(directory, stored))
        kind = self.HEAD_KINDS[0] if self.HEAD_KINDS else None
        if with_head and stored is not None:
            kind = stored
        head_loaded = with_head and stored is not None
        num_labels = None
        if head_loaded and kind == "classifier":
            num_labels = classifier_outputs(weights, directory)
        elif kind is not None:
            log.info("%s: adapter %r gets a fresh, untrained %s head", directory, name, kind)
        if not head_loaded:
            weights = {k: v for k, v in weights.items() if k.startswith("bert/")}
        train_pooler = any(k.startswith("bert/pooler/") for k in weights)
        labels = description.get("labels") if head_loaded else None
        if description.get("fusion"):
            self.add_adapter_fusion(name, description["fusion"], kind, num_labels, labels,
                                    train_pooler)
        else:
            self.add_adapter(name, AdapterConfig.from_dict(description["adapter_config"]), kind,
                             num_labels, labels, train_pooler)
        try:
            self._assign(name, weights, directory, head_loaded)
        except AdapterFileError:
            self.delete_adapter(name)
            raise
        check_fingerprint(description, bert, directory)
        return name

    # ------------------------------------------------------- Keras config
    def _adapters_config(self) -> dict:
        """The named adapters' descriptions for `get_config` (Keras saving restores the
        weights)."""
        bert = self._backbone_model()
        adapters = []
        for name in self.adapter_names:
            if name == self._model_adapter:
                continue  # the model's constructor adds it
            info = named_adapter_info(bert, name)
            head = self.heads.get(name)
            adapters.append({
                "name": name,
                "adapter_config": info.adapter_config.to_dict() if info.adapter_config else None,
                "fuse": list(info.fused) or None,
                "head": HEAD_FILE_NAMES[type(head).__name__] if head is not None else None,
                "num_labels": head.num_outputs if head is not None else None,
                "labels": self.labels.get(name),
                "train_pooler": bool(info.train_pooler)})
        own = self._model_adapter
        return {"adapters": adapters, "active_adapter": self._active,
                "adapter_name": own,
                "adapter_config": (named_adapter_info(bert, own).adapter_config.to_dict()
                                   if own is not None else None)}

    def _restore_adapters(self, adapters: Optional[list], active: Optional[str]) -> None:
        """Adds fresh named adapters as `_adapters_config` described them."""
        for spec in adapters or []:
            if spec.get("fuse"):
                self.add_adapter_fusion(spec["name"], spec["fuse"], spec.get("head"),
                                        spec.get("num_labels"), spec.get("labels"),
                                        bool(spec.get("train_pooler", False)))
            else:
                self.add_adapter(spec["name"], AdapterConfig.from_dict(spec["adapter_config"]),
                                 spec.get("head"), spec.get("num_labels"), spec.get("labels"),
                                 bool(spec.get("train_pooler", False)))
        self.set_active_adapters(active if active in self._adapter_labels else None)

    # ------------------------------------------------------------- helpers
    def _adapter_in_use(self) -> Optional[str]:
        """The named adapter a call runs now (None: none)."""
        return None if self._adapters_off else self._active

    def _require(self, name: str) -> None:
        if name not in self._adapter_labels:
            raise KeyError(f"no adapter named {name!r}; adapters: {self.adapter_names}")

    def _check_new_name(self, name: str) -> None:
        validate_name(name)
        if name in self._adapter_labels or name in self._backbone_model().named_adapters:
            raise UserError(f"an adapter named {name!r} already exists")

    def _head_kind(self, head: Optional[str]) -> Optional[str]:
        if head is None:
            return self.HEAD_KINDS[0] if self.HEAD_KINDS else None
        if head not in self.HEAD_KINDS:
            kinds = " or ".join(repr(k) for k in self.HEAD_KINDS)
            raise UserError(f"head must be {kinds}, got {head!r}" if kinds else
                            f"a {type(self).__name__}'s adapters have no head, got "
                            f"head={head!r} (a BertClassifier, BertSpanModel or "
                            f"MultiAdapterModel gives each adapter its head)")
        return head

    def _num_labels(self, kind: Optional[str], num_labels: Optional[int]) -> Optional[int]:
        if kind != "classifier":
            return None
        num_labels = self._default_num_labels() if num_labels is None else num_labels
        if int(num_labels) < 1:
            raise UserError(f"num_labels must be at least 1, got {num_labels}")
        return int(num_labels)

    def _head_refusal(self, directory: str, stored: str) -> str:
        if not self.HEAD_KINDS:
            return (f"{directory} holds a {stored} head and a {type(self).__name__} has no "
                    f"heads: ab.load_adapter({directory!r}, backbone=model) builds the task "
                    f"model, or pass with_head=False to load the adapter alone")
        return (f"{directory} holds a {stored} head; a {type(self).__name__}'s adapters have "
                f"{' or '.join(self.HEAD_KINDS)} heads (load it into a MultiAdapterModel, or "
                f"pass with_head=False to load the adapter alone)")

    def _resolve_pooler(self, kind: Optional[str], train_pooler) -> bool:
        if isinstance(train_pooler, str) and train_pooler.lower() == "auto":
            if kind != "classifier":
                return False  # nothing reads the pooled output
            bert = self._backbone_model()
            holder = self if getattr(self, "load_report", None) is not None else bert
            return resolve_train_pooler(holder, "adapter", "auto")
        return resolve_train_pooler(self, "adapter", train_pooler)

    def _ensure_built(self) -> None:
        # Named adapters copy the backbone's LayerNorms: its weights must exist.
        if not self.built or not self._backbone_model().built:
            self.build_with_dummy_inputs()

    def _register(self, name: str, kind: Optional[str], num_labels: Optional[int],
                  labels: Optional[Sequence[str]]) -> None:
        if kind is not None:
            self.heads = {**self.heads, name: self._new_head(name, kind, num_labels)}
        self._adapter_labels = {**self._adapter_labels,
                                name: list(labels) if labels is not None else None}
        if self._active is None:
            self._active = name
        self._freeze_except(self._active)
        reset_compiled_functions(self)

    def _new_head(self, name: str, kind: str, num_labels: Optional[int]):
        config = self._backbone_model().config
        if kind == "classifier":
            layer = heads.ClassifierHead(num_labels, dropout_rate=config.hidden_dropout_prob,
                                         initializer_range=config.initializer_range, name=name)
        else:
            layer = heads.SpanHead(initializer_range=config.initializer_range, name=name)
        # The head's weights live under the adapter's scope: `mrpc/output_weights`.
        layer.tf1_scope = f"{name}/{type(layer).tf1_scope}".rstrip("/")
        layer.build(tf.TensorShape([None, config.hidden_size]))
        return layer

    def adapter_layers(self, name: str) -> list:
        """Every layer holding weights of adapter `name`: its branches and its head."""
        self._require(name)
        head = self.adapter_head(name)
        layers = [head] if head is not None else []
        for _, layer in walk_layers(self._backbone_model()):
            if isinstance(layer, blocks.TaskBranch) and layer.name == name:
                layers.append(layer)
        return layers

    def _freeze_except(self, name: Optional[str]) -> None:
        train_only(self, self.adapter_layers(name) if name is not None else [])

    def _assign(self, name: str, weights: Dict[str, np.ndarray], directory: str,
                with_head: bool) -> None:
        variables = self.adapter_variables(name)
        if not with_head:
            variables = {k: v for k, v in variables.items() if k.startswith("bert/")}
        files.assign_adapter_weights(variables, weights, directory)


def _name_of_directory(directory: str) -> str:
    """The adapter name of a file that records no task: the directory's own name."""
    base = str(directory).rstrip("/").rsplit("/", 1)[-1]
    try:
        return validate_name(base)
    except ValueError:
        raise AdapterFileError(f"{directory} records no task name and {base!r} cannot be an "
                               f"adapter name; pass name=...") from None


def pop_adapter_fields(config: dict):
    """Removes the adapter API's fields from a `get_config` dict: (adapters, active)."""
    return config.pop("adapters", None), config.pop("active_adapter", None)
