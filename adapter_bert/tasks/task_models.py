"""Which task model a run builds: the one seam between the flags and the model classes.

`build_task_model_for_flags` is what both runners call. It builds
- a `ResAdapterClassifier` / `ResAdapterSpanModel` with `--adapter_type=resadapter`
  (a side network of cells beside a wholly frozen BERT, see `resadapter`), or
- a `BertClassifier` / `BertSpanModel` otherwise (adapters inside BERT, or none),

then loads the pretrained backbone under the run's strategy, applies the tuning mode and
prints the parameter line. With `--load_adapter` the adapter directory, not the flags,
says which kind of model to build, so an evaluation run needs no architecture flags.
"""

from typing import Dict, Optional, Tuple

from adapter_bert.adapters.files import read_adapter_config
from adapter_bert.tasks.flags import FlagError, was_set
from adapter_bert.model.heads import BertClassifier, BertSpanModel
from adapter_bert.adapters.resadapter import ResAdapterClassifier, ResAdapterConfig, ResAdapterSpanModel
from adapter_bert.tasks import base

HEADS = ("classifier", "span")

# Flags that place Houlsby adapters inside BERT; a ResAdapter has no use for them.
_INSIDE_ADAPTER_FLAGS = ("adapter_positions", "adapter_leave_out", "adapter_init_scale")
_RESADAPTER_FLAGS = ("resadapter_variant", "resadapter_cell", "resadapter_pooling")


def _adapter_type(flag_values) -> str:
    return getattr(flag_values, "adapter_type", None) or "houlsby"


def validate_resadapter_flags(flag_values) -> None:
    """Rejects flag combinations that mean nothing for the chosen adapter type.

    Args:
        flag_values: parsed flags (absl FLAGS or an object with the same attributes;
            "explicitly given" can only be told for absl FLAGS).

    Raises:
        FlagError: naming the flags and why they do not go together.
    """
    kind = _adapter_type(flag_values)
    if kind != "resadapter":
        given = [f"--{name}" for name in _RESADAPTER_FLAGS if was_set(flag_values, name)]
        if given:
            raise FlagError(f"{', '.join(given)} only apply with --adapter_type=resadapter "
                            f"(got --adapter_type={kind})")
        return
    if flag_values.tuning_mode != "adapter":
        raise FlagError(f"--adapter_type=resadapter trains a side network beside a frozen BERT; "
                        f"it needs --tuning_mode=adapter, not --tuning_mode="
                        f"{flag_values.tuning_mode}")
    if getattr(flag_values, "train_pooler", "auto") == "true":
        raise FlagError("--train_pooler=true does not apply with --adapter_type=resadapter: the "
                        "whole BERT stays frozen and the heads read the side network, not the "
                        "pooler")
    given = [f"--{name}" for name in _INSIDE_ADAPTER_FLAGS if was_set(flag_values, name)]
    if given:
        raise FlagError(f"{', '.join(given)} place(s) adapters inside BERT; a ResAdapter has one "
                        f"cell beside every layer: drop them with --adapter_type=resadapter")
    if getattr(flag_values, "resadapter_cell", "feedforward") == "attention" \
            and was_set(flag_values, "adapter_activation"):
        raise FlagError("--adapter_activation is the feedforward cell's non-linearity; "
                        "--resadapter_cell=attention has self-attention in its place")


def resadapter_config_for_run(flag_values) -> Optional[ResAdapterConfig]:
    """The run's ResAdapter: from --load_adapter's file, or from the flags (None: none).

    Raises:
        FlagError: --adapter_type contradicts the kind of adapter in --load_adapter.
    """
    if flag_values.load_adapter:
        stored = read_adapter_config(flag_values.load_adapter).get("resadapter")
        if was_set(flag_values, "adapter_type") and \
                (_adapter_type(flag_values) == "resadapter") != bool(stored):
            raise FlagError(f"--load_adapter={flag_values.load_adapter} holds "
                            f"{'a ResAdapter' if stored else 'no ResAdapter'}, but "
                            f"--adapter_type={_adapter_type(flag_values)}")
        return ResAdapterConfig.from_dict(stored) if stored else None
    if _adapter_type(flag_values) != "resadapter":
        return None
    return ResAdapterConfig(size=flag_values.adapter_size, variant=flag_values.resadapter_variant,
                            cell=flag_values.resadapter_cell,
                            activation=flag_values.adapter_activation,
                            pooling=flag_values.resadapter_pooling)


def new_task_model(bert_config, head: str, num_labels: Optional[int] = None,
                   adapter_config=None, resadapter_config: Optional[ResAdapterConfig] = None):
    """An unbuilt task model: a ResAdapter one when `resadapter_config` is given.

    Args:
        bert_config: the backbone's `BertConfig`.
        head: "classifier" or "span".
        num_labels: classes of the classifier head (1 for regression).
        adapter_config: `AdapterConfig` for adapters inside BERT (BertClassifier /
            BertSpanModel only).
        resadapter_config: `ResAdapterConfig`, or None.

    Returns:
        The Keras model.

    Raises:
        ValueError: unknown head, a classifier without `num_labels`, or both kinds of
            adapter at once.
    """
    if head not in HEADS:
        raise ValueError(f"head must be one of {HEADS}, got {head!r}")
    if head == "classifier" and num_labels is None:
        raise ValueError("a classifier head needs num_labels")
    if resadapter_config is not None:
        if adapter_config is not None:
            raise ValueError("a ResAdapter model keeps BERT free of inner adapters")
        if head == "classifier":
            return ResAdapterClassifier(bert_config, num_labels, resadapter_config)
        return ResAdapterSpanModel(bert_config, resadapter_config)
    if head == "classifier":
        return BertClassifier(bert_config, num_labels, adapter_config)
    return BertSpanModel(bert_config, adapter_config)


def build_task_model_for_flags(strategy, backbone: "base.Backbone", flag_values, head: str,
                               num_labels: Optional[int] = None,
                               train_pooler: str = "false") -> Tuple[object, Dict[str, str]]:
    """Builds the run's task model under `strategy`, with pretrained weights and tuning.

    Args:
        strategy: the run's `tf.distribute.Strategy`.
        backbone: the resolved pretrained backbone (`base.prepare_backbone`).
        flag_values: parsed flags.
        head: "classifier" (GLUE) or "span" (SQuAD).
        num_labels: classes of the classifier head (1 for regression).
        train_pooler: "true", "false" or "auto" for models that read the pooler; a
            ResAdapter model never trains it.

    Returns:
        (model, parameter figures for eval_results.txt); the parameter line is printed.

    Raises:
        FlagError: a meaningless flag combination (see `validate_resadapter_flags`).
    """
    validate_resadapter_flags(flag_values)
    if head == "span" and was_set(flag_values, "resadapter_pooling"):
        raise FlagError("--resadapter_pooling chooses a classification head's input; the "
                        "span head scores every token")
    resadapter_config = resadapter_config_for_run(flag_values)
    adapter_config = None if resadapter_config else base.adapter_config_for_run(flag_values)
    model = new_task_model(backbone.config, head, num_labels, adapter_config, resadapter_config)
    return base.build_task_model(strategy, model, backbone, flag_values,
                                   "false" if resadapter_config else train_pooler)
