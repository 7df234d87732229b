"""The one place that decides which Keras model is built: bare BERT or BERT with a head.

`task_model` maps a head name to its class; `build_pretrained` (a model with a
checkpoint's weights) and the runners (through `adapter_bert.runners.task_models`) both
build their models with it, so a model built by a run and one built in a notebook are the
same network with the same weights' names. Callers may pass the classes:
`ab.load_pretrained` (adapters/models.py), the library's one `load_pretrained`, builds
this module's networks' subclasses that carry the adapter API.
"""

from typing import Mapping, Optional

from adapter_bert import io_utils
from adapter_bert.model.checkpoints import build_model, load_weights, read_weights, resolve_backbone
from adapter_bert.model.config import BertConfig
from adapter_bert.model.encoder import BertNetwork
from adapter_bert.errors import CheckpointError
from adapter_bert.model.heads import BertClassifierNetwork, BertSpanNetwork
from adapter_bert.precision import apply_dtype
from adapter_bert.errors import UserError

# The class built for each head (None: the bare encoder). `adapter_bert.adapters.models`
# passes its subclasses, which add the adapter API (`ab.load_pretrained` builds those).
NETWORKS = {None: BertNetwork, "classifier": BertClassifierNetwork, "span": BertSpanNetwork}

# What an adapter directory holds (adapters/files.py): a path to one is not a backbone.
_ADAPTER_CONFIG_FILE = "adapter_config.json"


def task_model(bert_config: BertConfig, head: Optional[str] = None,
               num_labels: Optional[int] = None, adapter_config=None,
               classes: Optional[Mapping] = None, **options):
    """An unbuilt model: `BertNetwork` (head None), `BertClassifierNetwork` or
    `BertSpanNetwork`, or the class `classes` maps the head to (the adapter API's
    `adapters.models.MODELS`, a ResAdapter's `adapters.resadapter.MODELS`); `options` go to
    that class (`adapter_name`, `resadapter_config`). Only classes with the adapter API take
    an `adapter_config`. Raises ValueError for a head the classes lack, a classifier without
    `num_labels`, or an adapter the classes cannot hold.
    """
    classes = NETWORKS if classes is None else classes
    if head not in classes:
        raise UserError(f"head must be one of {', '.join(map(repr, classes))}, got {head!r}")
    if head == "classifier" and num_labels is None:
        raise UserError("a classifier head needs num_labels")
    if adapter_config is not None:
        if classes[head] is NETWORKS.get(head):
            raise UserError("model/'s networks hold no adapters: build the model with "
                            "ab.load_pretrained(..., adapter_config=...)")
        if "resadapter_config" in options:
            raise UserError("a ResAdapter model keeps BERT free of inner adapters")
        options["adapter_config"] = adapter_config
    labels = (num_labels,) if head == "classifier" else ()
    return classes[head](bert_config, *labels, **options)


def build_pretrained(path: Optional[str] = None, adapter_config=None, head: Optional[str] = None,
                     num_labels: int = 2, config_file: Optional[str] = None,
                     classes: Optional[Mapping] = None, dtype: Optional[str] = None):
    """Builds a model from a pretrained checkpoint and loads its weights.

    `path`: a checkpoint (`resolve_backbone`), a Google release name (downloaded once), or
    None for the embedded MiniLM. `head`: None, "classifier" (`num_labels`, 1 for
    regression) or "span"; `classes` as in `task_model`. `dtype`: None builds under Keras'
    global policy; "auto" picks the hardware's native policy (precision.py), logs it and
    sets it globally; a policy name sets that policy. The model's `load_report` and
    `backbone_files` say what was read. Raises CheckpointError or ConfigError for missing or
    inconsistent files, or an adapter directory given as `path`.
    """
    if path is not None and io_utils.isfile(io_utils.join(io_utils.expand(str(path)),
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
