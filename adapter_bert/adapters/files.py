"""Adapter files: the weights that a task trained, small and self-describing.

A directory holding
- `adapter_config.json`: format version, adapter config (or ResAdapter config), the
  backbone's BertConfig, tuning mode, task name, labels, head kind, and the weight names;
- `adapter_model.safetensors`: the trained weights by TF1 name (adapters, LayerNorms
  and head in adapter mode).

Loading checks that the backbone has the shape the adapter was trained on, so an
adapter never lands silently on the wrong network. A file also records a fingerprint
of the frozen backbone weights (`backbone_fingerprint`); loading onto a backbone of the
same shape but other weights (another checkpoint) logs a warning naming both.

`format_version` is 2; a file of another version is refused in one line naming it.
"""

import hashlib
import json
import logging
import re
from typing import Dict, Optional, Sequence

import numpy as np

from adapter_bert.model.config import (AdapterConfig, BertConfig, ConfigError,
                                       adapter_families)
from adapter_bert import io_utils
from adapter_bert.io_utils import atomic_write_bytes, atomic_write_text
from adapter_bert.model.naming import tf1_variables
from adapter_bert.adapters.tuning import trained_weights
from adapter_bert.errors import UserError
from adapter_bert.model.encoder import backbone_of
from adapter_bert.adapters.named import add_pooler_copy

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
FORMAT_VERSION = 2

log = logging.getLogger(__name__)

# The frozen backbone weights the fingerprint covers: embedding tables and the dense
# projections of every layer. LayerNorms and the pooler are left out because adapter
# tuning may train them; adapters and heads are what the file itself holds.
_FINGERPRINTED = re.compile(
    r"^bert/embeddings/(word|position|token_type)_embeddings$"
    r"|^bert/encoder/layer_\d+/(attention/self/(query|key|value)|attention/output/dense"
    r"|intermediate/dense|output/dense)/(kernel|bias)$")
# Values sampled per weight for the fingerprint (evenly spaced over the flat array).
_FINGERPRINT_SAMPLES = 4096

# Fields of BertConfig that fix the shapes of the weights an adapter file depends on.
_SHAPE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "intermediate_size", "max_position_embeddings", "type_vocab_size")


class AdapterFileError(UserError):
    """An adapter file is missing, malformed, or does not fit the model."""



def _refuse_merged(model) -> None:
    # Merged LoRA updates live in the backbone's kernels: its fingerprint would not be the
    # backbone's, and weights loaded into merged adapters would not reach the kernels.
    backbone_of(model).refuse_while_merged("saving or loading adapters", AdapterFileError)


def backbone_fingerprint(model) -> str:
    """A short, stable hash ("sha256:" and 16 hex digits) of `model`'s frozen backbone:
    every embedding table and dense kernel/bias by sorted TF1 name, with shape and up to
    4,096 evenly spaced float32 values. Equal for bit-identical weights on any machine;
    refused (AdapterFileError) while an adapter is merged.
    """
    _refuse_merged(model)
    digest = hashlib.sha256()
    variables = tf1_variables(backbone_of(model))
    for name in sorted(n for n in variables if _FINGERPRINTED.match(n)):
        values = np.asarray(variables[name].numpy(), dtype="<f4").ravel()
        picks = np.linspace(0, values.size - 1, min(values.size, _FINGERPRINT_SAMPLES))
        digest.update(name.encode("utf-8"))
        digest.update(repr(tuple(variables[name].shape)).encode("ascii"))
        digest.update(values[picks.astype(np.int64)].tobytes())
    return "sha256:" + digest.hexdigest()[:16]


def write_adapter_files(directory: str, weights: Dict[str, np.ndarray], description: dict) -> str:
    """Writes `adapter_model.safetensors` and `adapter_config.json` atomically into
    `directory` (created if needed), adding `format_version` and the weight names to
    `description`; returns the weights file's path.
    """
    from safetensors.numpy import save
    description = dict(description, format_version=FORMAT_VERSION, weights=sorted(weights))
    io_utils.makedirs(directory)
    weights_path = io_utils.join(directory, WEIGHTS_NAME)
    # np.asarray(order="C"), not np.ascontiguousarray, which turns a scalar weight (a
    # family's gate, say) into shape [1].
    data = save({k: np.asarray(v, order="C") for k, v in weights.items()})
    atomic_write_bytes(weights_path, data)
    # Each file is replaced atomically, but not both at once: the config names the
    # digest of its weights, so a pair mixed by a run killed between the two writes is
    # detected when loading instead of silently combining two runs.
    description["weights_sha256"] = hashlib.sha256(data).hexdigest()
    atomic_write_text(io_utils.join(directory, CONFIG_NAME), json.dumps(description, indent=2) + "\n")
    return weights_path


def describe(bert, *, task: Optional[str], labels: Optional[Sequence[str]], head: Optional[str],
             tuning_mode: str, adapter_config, fusion: Optional[Sequence[str]] = None,
             resadapter=None, training: Optional[dict] = None) -> dict:
    """The JSON fields of an adapter directory, the one description every writer uses: the
    backbone's config and fingerprint, `task`, `labels` in logit order, the `head` class
    name, `tuning_mode`, the `adapter_config`, `fusion` or `resadapter` it holds, and how
    it was trained where that changes what it learnt (`training`: e.g. `class_weights`).
    """
    return {
        "task": task,
        "labels": list(labels) if labels is not None else None,
        "head": head,
        "tuning_mode": tuning_mode,
        "training": dict(training) if training else None,
        "adapter_config": adapter_config.to_dict() if adapter_config else None,
        "fusion": list(fusion) if fusion else None,
        "resadapter": resadapter.to_dict() if resadapter else None,
        "backbone": bert.config.to_dict(),
        "backbone_fingerprint": backbone_fingerprint(bert),
    }


def save_trained_weights(model, directory: str, task: Optional[str] = None,
                         labels: Optional[Sequence[str]] = None,
                         tuning_mode: str = "adapter", training: Optional[dict] = None,
                         name: Optional[str] = None) -> str:
    """Writes a model's trained weights and their description to `directory`; returns the
    weights file's path.

    A model with named adapters writes adapter `name` (default: the active one) through the
    adapter API's `save_adapter`; other models their trainable weights plus the state
    training updates (a ResAdapter's BatchNorm statistics). `tuning_mode` and `training`
    (`describe`) are recorded for readers. ValueError for a `name` the model cannot have.
    """
    active = getattr(model, "active_adapter", None)
    if (active is not None or name is not None) and tuning_mode == "adapter" \
            and hasattr(model, "adapter_names"):
        return model.save_adapter(directory, name, task, labels, training=training)
    if name is not None:
        raise UserError(f"{type(model).__name__} has no named adapters; save it without a "
                        f"name")
    bert = backbone_of(model)
    # Trainable weights plus the state training updates (BatchNorm moving statistics).
    trained = {id(v) for v in trained_weights(model)}
    weights = {name: v.numpy() for name, v in tf1_variables(model).items() if id(v) in trained}
    head = type(getattr(model, "head", None)).__name__ if hasattr(model, "head") else None
    description = describe(bert, task=task, labels=labels, head=head, tuning_mode=tuning_mode,
                           adapter_config=None,
                           resadapter=getattr(model, "resadapter_config", None),
                           training=training)
    return write_adapter_files(directory, weights, description)


def read_adapter_config(directory: str) -> dict:
    """Reads and validates `adapter_config.json`.

    Raises:
        AdapterFileError: missing file, bad JSON, or a format version this code does not
            read (a newer one: upgrade adapter_bert).
    """
    path = io_utils.join(directory, CONFIG_NAME)
    if not io_utils.isfile(path):
        raise AdapterFileError(f"{directory}: no {CONFIG_NAME}; not an adapter directory")
    description = io_utils.read_json_object(path, AdapterFileError)
    version = description.get("format_version")
    if version != FORMAT_VERSION:
        newer = isinstance(version, int) and version > FORMAT_VERSION
        raise AdapterFileError(
            f"{path}: format_version {version!r} is not supported (this adapter_bert reads "
            f"version {FORMAT_VERSION}"
            + ("; the file was written by a newer adapter_bert: upgrade it)" if newer else
               "; train the adapter again with this version)"))
    _check_description_types(description, path)
    if description.get("adapter_config") is not None:
        description["adapter_config"] = current_adapter_fields(description["adapter_config"])
    return description


def current_adapter_fields(stored: dict) -> dict:
    """An adapter config dict as this version writes it: files of earlier versions stored
    every family's options, at their defaults where another family was chosen; those are
    dropped here, so that `AdapterConfig` sees only the chosen family's."""
    chosen = stored.get("adapter_type", "houlsby")
    # Option names are unique across families, so the chosen family's are never here.
    others = {key: option.default for family in adapter_families() if family.name != chosen
              for key, option in family.options.items()}
    return {key: value for key, value in stored.items()
            if key not in others or value != others[key]}


# The type of each field of adapter_config.json that a reader uses (None allowed unless
# the field is required: "backbone").
_DESCRIPTION_TYPES = {"task": str, "labels": list, "head": str, "tuning_mode": str,
                      "adapter_config": dict, "resadapter": dict, "backbone": dict,
                      "backbone_fingerprint": str, "weights_sha256": str, "fusion": list,
                      "training": dict}


def _check_description_types(description: dict, path: str) -> None:
    """Raises AdapterFileError naming the first field of the wrong type."""
    if not isinstance(description.get("backbone"), dict):
        raise AdapterFileError(f"{path}: field 'backbone' must be a JSON object (the backbone's "
                               f"config), got {description.get('backbone')!r}")
    for key, kind in _DESCRIPTION_TYPES.items():
        value = description.get(key)
        if value is not None and not isinstance(value, kind):
            raise AdapterFileError(f"{path}: field {key!r} must be a JSON "
                                   f"{'object' if kind is dict else kind.__name__}, got "
                                   f"{value!r}")
    for key in ("labels", "fusion"):
        if not all(isinstance(item, str) for item in description.get(key) or []):
            raise AdapterFileError(f"{path}: field {key!r} must be a list of strings, got "
                                   f"{description[key]!r}")


def read_adapter_weights(directory: str) -> Dict[str, np.ndarray]:
    """Reads `adapter_model.safetensors` of an adapter directory.

    Raises:
        AdapterFileError: missing or unreadable file.
    """
    from safetensors.numpy import load
    weights_path = io_utils.join(directory, WEIGHTS_NAME)
    expected = read_adapter_config(directory).get("weights_sha256")
    try:
        data = io_utils.read_bytes(weights_path)
    except OSError as e:
        raise AdapterFileError(f"{weights_path}: cannot read ({e})") from None
    if expected and hashlib.sha256(data).hexdigest() != expected:
        raise AdapterFileError(f"{weights_path} is not the weights file {CONFIG_NAME} was written "
                               f"with (a write was interrupted, or files of two runs were "
                               f"mixed); write the adapter again")
    try:
        return load(data)
    except Exception as e:  # safetensors raises its own error types
        raise AdapterFileError(f"{weights_path}: cannot read ({e})") from None


def check_fingerprint(description: dict, model, source: str) -> Optional[str]:
    """Warns when the file (`description`, from `source`) was trained on other backbone
    weights than `model`'s; returns the model's fingerprint (None when the file records
    none).
    """
    stored = description.get("backbone_fingerprint")
    if stored is None:
        log.info("%s records no backbone fingerprint: the backbone's weights are not "
                 "checked", source)
        return None
    current = backbone_fingerprint(model)
    if current != stored:
        log.warning("%s was trained on a backbone with fingerprint %s, but the model's backbone "
                    "has fingerprint %s: same shape, different weights (another checkpoint?). "
                    "Its outputs will not match the training run.", source, stored, current)
    return current


def adapter_config_of(directory: str) -> Optional[AdapterConfig]:
    """The AdapterConfig stored in an adapter directory (None for adapter-free files).

    Raises:
        AdapterFileError: the file is unreadable, or its `adapter_config` is not one.
    """
    values = read_adapter_config(directory).get("adapter_config")
    if not values:
        return None
    try:
        return AdapterConfig.from_dict(values)
    except ConfigError as e:
        raise AdapterFileError(f"{io_utils.join(directory, CONFIG_NAME)}: adapter_config: "
                               f"{e}") from None


def check_backbone(description: dict, config: BertConfig, source: str) -> None:
    """Raises AdapterFileError if the model's backbone shape differs from the file's."""
    stored = description["backbone"]
    diffs = [f"{k}: file {stored.get(k)} vs model {getattr(config, k)}"
             for k in _SHAPE_FIELDS if stored.get(k) != getattr(config, k)]
    if diffs:
        raise AdapterFileError(f"{source} was trained on another backbone shape ("
                               + "; ".join(diffs) + ")")


def load_trained_weights(model, directory: str) -> dict:
    """Loads an adapter directory's weights into a built model of the same shape (build it
    with `adapter_config_of(directory)`); returns the file's description.

    A model with an active named adapter takes an adapter-mode file into it; other files are
    assigned by TF1 name. Raises AdapterFileError for a missing or malformed file, another
    backbone shape, a weight the model lacks or has with another shape, or a merged adapter;
    another backbone of the same shape only warns.
    """
    description = read_adapter_config(directory)
    _refuse_merged(model)
    check_backbone(description, backbone_of(model).config, directory)
    weights = read_adapter_weights(directory)
    weights_path = io_utils.join(directory, WEIGHTS_NAME)
    check_fingerprint(description, model, directory)
    name = getattr(model, "active_adapter", None)
    if name is not None and description.get("tuning_mode") == "adapter":
        trained_pooler = any(k.startswith("bert/pooler/") for k in weights)
        if trained_pooler:
            add_pooler_copy(backbone_of(model), name)
        # Without pooler weights the file's run used the backbone's pooler, which a copy
        # the adapter may have holds as it is.
        variables = {k: v for k, v in model.adapter_variables(name).items()
                     if trained_pooler or not k.startswith("bert/pooler/")}
        assign_adapter_weights(variables, weights, directory)
        return description
    variables = tf1_variables(model)
    homeless = sorted(set(weights) - set(variables))
    if homeless:
        raise AdapterFileError(f"{weights_path}: weight {homeless[0]} has no place in this "
                               f"model (different adapter layout or head?)")
    # The file holds what its run trained, a part of the model's weights: those load.
    assign_adapter_weights({name: variables[name] for name in weights}, weights, directory)
    return description


def assign_adapter_weights(variables: Dict[str, object], weights: Dict[str, np.ndarray],
                           directory: str) -> None:
    """Assigns a file's `weights` to an adapter's `variables` (both by the file's names).

    Raises:
        AdapterFileError: a weight missing on either side, or of another shape.
    """
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


# Head kind by the class name adapter files record.
HEAD_FILE_NAMES = {"ClassifierHead": "classifier", "SpanHead": "span"}


def check_adapter_mode(description: dict, directory: str) -> None:
    """Refuses a description that cannot load as a named adapter (not an adapter-mode run,
    a ResAdapter, or no adapters at all)."""
    if description.get("tuning_mode") != "adapter" or description.get("resadapter"):
        raise AdapterFileError(
            f"{directory} holds a {description.get('tuning_mode')!r} run"
            + (" with a ResAdapter" if description.get("resadapter") else "")
            + "; only adapter-mode files load as named adapters (the run's own model reads "
              "it: --load_adapter, or adapter_bert.adapters.files.load_trained_weights)")
    if not description.get("adapter_config") and not description.get("fusion"):
        raise AdapterFileError(f"{directory} holds no adapters (adapter_config is null)")


def classifier_outputs(weights: Dict[str, np.ndarray], directory: str) -> int:
    """How many outputs the classifier head stored in `directory` (`weights`) has."""
    if "output_bias" not in weights:
        raise AdapterFileError(f"{directory}: no output_bias weight for its classifier head")
    return int(weights["output_bias"].shape[0])


def file_head_kind(description: dict, directory: str) -> Optional[str]:
    """The head kind ("classifier", "span") a description records, or None."""
    stored = description.get("head")
    if stored is None:
        return None
    if stored not in HEAD_FILE_NAMES:
        raise AdapterFileError(f"{directory}: head {stored!r} is not a classifier or span head")
    return HEAD_FILE_NAMES[stored]
