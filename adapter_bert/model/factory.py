"""The one place that decides which Keras model is built: bare BERT or BERT with a head.

`task_model` maps a head name to its class; `build_pretrained` (a model with a
checkpoint's weights) and the runners (through `adapter_bert.tasks.task_models`) both
build their models with it, so a model built by a run and one built in a notebook are the
same network with the same weights' names. Callers may pass the classes:
`ab.load_pretrained` (adapters/models.py), the library's one `load_pretrained`, builds
this module's networks' subclasses that carry the adapter API.
"""

import os
from typing import Mapping, Optional

from adapter_bert import io_utils
from adapter_bert.model.checkpoints import build_model, load_weights, read_weights, resolve_backbone
from adapter_bert.model.config import BertConfig
from adapter_bert.model.encoder import BertNetwork
from adapter_bert.model.errors import CheckpointError
from adapter_bert.model.heads import BertClassifierNetwork, BertSpanNetwork
from adapter_bert.precision import apply_dtype
from adapter_bert.errors import UserError

HEADS = ("classifier", "span")

# The class built for each head (None: the bare encoder). `adapter_bert.adapters.models`
# passes its subclasses, which add the adapter API (`ab.load_pretrained` builds those).
NETWORKS = {None: BertNetwork, "classifier": BertClassifierNetwork, "span": BertSpanNetwork}

# What an adapter directory holds (adapters/files.py): a path to one is not a backbone.
_ADAPTER_CONFIG_FILE = "adapter_config.json"


def task_model(bert_config: BertConfig, head: Optional[str] = None,
               num_labels: Optional[int] = None, adapter_config=None,
               classes: Optional[Mapping] = None):
    """An unbuilt model: `BertNetwork` (head None), `BertClassifierNetwork` or `BertSpanNetwork`.

    Args:
        bert_config: the backbone's `BertConfig`.
        head: None (bare encoder), "classifier" or "span".
        num_labels: classes of the classifier head (1 for regression).
        adapter_config: the adapter to build the model with, or None; only classes with
            the adapter API (`adapter_bert.adapters.models.MODELS`) hold adapters.
        classes: the class for each head, as `NETWORKS` (the default) maps them.

    Raises:
        ValueError: unknown head, a classifier without `num_labels`, or an adapter for
            classes without the adapter API.
    """
    classes = NETWORKS if classes is None else classes
    if head is not None and head not in HEADS:
        raise UserError(f"head must be None, 'classifier' or 'span', got {head!r}")
    if head == "classifier" and num_labels is None:
        raise UserError("a classifier head needs num_labels")
    adapter = {}
    if adapter_config is not None:
        if classes[head] is NETWORKS[head]:
            raise UserError("model/'s networks hold no adapters: build the model with "
                            "ab.load_pretrained(..., adapter_config=...)")
        adapter = {"adapter_config": adapter_config}
    if head == "classifier":
        return classes["classifier"](bert_config, num_labels, **adapter)
    return classes[head](bert_config, **adapter)


def build_pretrained(path: Optional[str] = None, adapter_config=None, head: Optional[str] = None,
                     num_labels: int = 2, config_file: Optional[str] = None,
                     classes: Optional[Mapping] = None, dtype: Optional[str] = None):
    """Builds a model from a pretrained checkpoint and loads its weights.

    Args:
        path: checkpoint (see `resolve_backbone`), or the name of a Google release such
            as "uncased_L-12_H-768_A-12" (downloaded once and cached, see
            `google_checkpoints`); None loads the embedded MiniLM.
        adapter_config: `AdapterConfig` of the adapter to build the model with (a named
            adapter of classes with the adapter API), or None.
        head: None (bare `BertNetwork`), "classifier" or "span".
        num_labels: classes of the classifier head (1 for regression).
        config_file: overrides the config found next to the checkpoint.
        classes: the class for each head (see `task_model`).
        dtype: None (default) builds under Keras' global dtype policy, as any Keras
            layer does; "auto" picks the policy the hardware runs natively, like the
            runners' `--dtype=auto` (mixed_bfloat16 on TPUs, GPUs of compute capability
            8.0+, CPUs with AMX and AMD CPUs with AVX512_BF16, else float32; see
            adapter_bert/precision.py), logs it, and sets it as Keras' global policy (so
            layers added later match); "float32", "mixed_bfloat16" or "mixed_float16"
            set that policy.

    Returns:
        The built model; its `load_report` attribute holds the `LoadReport` and
        `backbone_files` the resolved `BackboneFiles`.

    Raises:
        CheckpointError, ConfigError: files missing or inconsistent, or `path` is an
            adapter directory (the message says what loads one).
    """
    if path is not None and io_utils.isfile(os.path.join(io_utils.expand(str(path)),
                                                         _ADAPTER_CONFIG_FILE)):
        raise CheckpointError(
            f"{path} is an adapter directory, not a backbone: load it with "
            f"ab.load_adapter({str(path)!r}) (onto the embedded MiniLM; backbone=... names "
            f"another), or add it to a loaded model with model.load_adapter({str(path)!r})")
    apply_dtype(dtype, source="dtype")
    files = resolve_backbone(path, config_file)
    model = task_model(BertConfig.from_json_file(files.config_file), head, num_labels,
                       adapter_config, classes)
    load_backbone_weights(model, files)
    model.backbone_files = files
    return model


def load_backbone_weights(model, files) -> None:
    """Builds `model` and loads the backbone checkpoint `files` (a `BackboneFiles`) into
    it; `model.load_report` keeps the `LoadReport` (`apply_tuning` reads it to tell a
    pooler the checkpoint lacked). Logs what was loaded and which weights are new."""
    build_model(model)
    model.load_report = load_weights(model, read_weights(files), source=files.weights)
