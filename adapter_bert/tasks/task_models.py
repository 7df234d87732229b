"""Which task model a run builds: the one seam between the flags and the model classes.

`build_task_model_for_flags` is what both runners call. It builds
- a `ResAdapterClassifier` / `ResAdapterSpanModel` with `--adapter_type=resadapter`
  (a side network of cells beside a wholly frozen BERT, see `resadapter`), or
- a `BertClassifier` / `BertSpanModel` otherwise (adapters inside BERT, or none),

then loads the pretrained backbone under the run's strategy, applies the tuning mode and
prints the parameter line. With `--load_adapter` the adapter directory, not the flags,
says which kind of model to build, so an evaluation run needs no architecture flags.
"""

import re
from typing import Dict, Optional, Tuple

from absl import logging

from adapter_bert.adapters.files import adapter_config_of, read_adapter_config
from adapter_bert.adapters.resadapter import (ResAdapterClassifier, ResAdapterConfig,
                                              ResAdapterSpanModel)
from adapter_bert.adapters.tuning import (apply_tuning, parameter_report, parameter_summary,
                                          resolve_train_pooler)
from adapter_bert.model.config import AdapterConfig, adapter_family
from adapter_bert.adapters.models import BertClassifier, BertSpanModel
from adapter_bert.adapters.named import RESERVED_NAMES
from adapter_bert.model.factory import HEADS, load_backbone_weights
from adapter_bert.tasks.flag_checks import FlagError, adapter_type, was_set
from adapter_bert.errors import UserError


def resadapter_config_for_run(flag_values) -> Optional[ResAdapterConfig]:
    """The run's ResAdapter: from --load_adapter's file, or from the flags (None: none).

    Raises:
        FlagError: --adapter_type contradicts the kind of adapter in --load_adapter.
    """
    if flag_values.load_adapter:
        stored = read_adapter_config(flag_values.load_adapter).get("resadapter")
        if was_set(flag_values, "adapter_type") and \
                (adapter_type(flag_values) == "resadapter") != bool(stored):
            raise FlagError(f"--load_adapter={flag_values.load_adapter} holds "
                            f"{'a ResAdapter' if stored else 'no ResAdapter'}, but "
                            f"--adapter_type={adapter_type(flag_values)}")
        return ResAdapterConfig.from_dict(stored) if stored else None
    if adapter_type(flag_values) != "resadapter":
        return None
    return ResAdapterConfig(size=flag_values.adapter_size, variant=flag_values.resadapter_variant,
                            cell=flag_values.resadapter_cell,
                            activation=flag_values.adapter_activation,
                            pooling=flag_values.resadapter_pooling)


def new_task_model(bert_config, head: str, num_labels: Optional[int] = None,
                   adapter_config=None, resadapter_config: Optional[ResAdapterConfig] = None,
                   adapter_name: Optional[str] = None):
    """An unbuilt task model: a ResAdapter one when `resadapter_config` is given.

    `head` is "classifier" (with `num_labels`, 1 for regression) or "span"; `adapter_config`
    becomes the named adapter `adapter_name` (the task's, `adapter_name_for`). Raises
    ValueError for an unknown head, a classifier without `num_labels`, or both kinds of
    adapter at once.
    """
    if head not in HEADS:
        raise UserError(f"head must be one of {HEADS}, got {head!r}")
    if resadapter_config is None:
        if head == "classifier":
            return BertClassifier(bert_config, num_labels, adapter_config,
                                  adapter_name=adapter_name)
        return BertSpanModel(bert_config, adapter_config, adapter_name=adapter_name)
    if head == "classifier" and num_labels is None:
        raise UserError("a classifier head needs num_labels")
    if adapter_config is not None:
        raise UserError("a ResAdapter model keeps BERT free of inner adapters")
    if head == "classifier":
        return ResAdapterClassifier(bert_config, num_labels, resadapter_config)
    return ResAdapterSpanModel(bert_config, resadapter_config)


def adapter_name_for(task: str) -> str:
    """The name of a run's adapter: its task's name, as an adapter name allows it
    (letters, digits, `_`, `.`, `-`; others become `_`)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", task.lower()).lstrip("_.-") or "task"
    return name if name not in RESERVED_NAMES else f"{name}_task"


def build_task_model_for_flags(strategy, backbone, flag_values, head: str,
                               num_labels: Optional[int] = None,
                               train_pooler: str = "false",
                               task: str = "task") -> Tuple[object, Dict[str, str]]:
    """Builds the run's task model under `strategy`, with pretrained weights and tuning.

    `backbone` is the resolved `base.Backbone`; `train_pooler` "true", "false" or "auto" (a
    ResAdapter never trains it); `task` names the adapter. Prints the parameter line and
    returns (model, parameter figures for eval_results.txt). Raises FlagError when
    --adapter_type contradicts --load_adapter's file.
    """
    resadapter_config = resadapter_config_for_run(flag_values)
    adapter_config = None if resadapter_config else adapter_config_for_run(flag_values)
    # The model object itself is created under the scope: Keras records the strategy when
    # a Model is constructed, and under MultiWorkerMirroredStrategy a model created outside
    # it updates its loss metric in cross-replica context and fails in `fit`.
    with strategy.scope():
        model = new_task_model(backbone.config, head, num_labels, adapter_config,
                               resadapter_config, adapter_name_for(task))
    return build_task_model(strategy, model, backbone, flag_values,
                                   "false" if resadapter_config else train_pooler)


def adapter_config_for_run(flag_values) -> Optional[AdapterConfig]:
    """The adapters the run's model gets: from --load_adapter's file, or from the flags.

    Only `--tuning_mode=adapter` inserts adapters (None for a ResAdapter, a side network):
    `--adapter_type` picks a registered family, its options come from the flags named after
    them (`--lora_alpha`, ...), and `--adapter_positions` applies only when given.
    """
    if flag_values.load_adapter:
        return adapter_config_of(flag_values.load_adapter)
    adapter_type = getattr(flag_values, "adapter_type", "houlsby")
    if flag_values.tuning_mode != "adapter" or adapter_type == "resadapter":
        return None
    positions = flag_values.adapter_positions
    if adapter_type != "houlsby" and not was_set(flag_values, "adapter_positions"):
        positions = None
    options = {name: getattr(flag_values, name) for name in adapter_family(adapter_type).options
               if hasattr(flag_values, name)}
    return AdapterConfig(size=flag_values.adapter_size, activation=flag_values.adapter_activation,
                         init_scale=flag_values.adapter_init_scale, positions=positions,
                         leave_out=[int(i) for i in flag_values.adapter_leave_out],
                         adapter_type=adapter_type, **options)


def build_and_tune(model, backbone, tuning_mode: str, top_k: Optional[int],
                   train_pooler: str = "false", training: bool = True):
    """Builds `model`, loads the pretrained weights and applies the tuning mode.

    `train_pooler` goes to `tuning.apply_tuning`; `training` says the run trains, the only
    case where `--train_pooler=auto` warns that it trains the pooler.
    """
    load_backbone_weights(model, backbone.files)
    frozen_backbone = bool(getattr(model, "frozen_backbone", False))
    has_adapters = bool(getattr(model, "adapter_names", None)) or frozen_backbone
    mode = tuning_mode if (tuning_mode != "adapter" or has_adapters) else "full"
    # The library's decision, flag value and all ("auto" trains a never-trained pooler).
    pooler = resolve_train_pooler(model, mode, train_pooler, announce=training)
    apply_tuning(model, mode, top_k, train_pooler=pooler)
    return model


def build_task_model(strategy, model, backbone, flag_values, train_pooler: str):
    """Builds `model` under the strategy with pretrained weights and the run's tuning mode.

    Returns:
        (model, parameter figures for eval_results.txt); the report is printed.
    """
    with strategy.scope():
        build_and_tune(model, backbone, flag_values.tuning_mode, flag_values.top_k_layers,
                       train_pooler, training=bool(getattr(flag_values, "do_train", True)))
    return model, report_parameters(model)


def report_parameters(model) -> Dict[str, str]:
    """Prints the parameter line (`trainable params: ... || all params: ... ||
    trainable%: ...`) once, on stdout; the table by component is logged at debug level
    (--verbosity=1). Returns the figures for eval_results.txt."""
    report = parameter_report(model)
    print(report.splitlines()[0], flush=True)
    logging.debug("Parameters by component:\n%s", "\n".join(report.splitlines()[1:]).strip("\n"))
    summary = parameter_summary(model)
    trainable = sum(t for t, _ in summary.values())
    total = sum(n for _, n in summary.values())
    return {"trainable_params": str(trainable), "all_params": str(total),
            "trainable_percent": f"{100.0 * trainable / total:.4f}"}
