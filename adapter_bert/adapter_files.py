"""Adapter files: the weights that a task trained, small and self-describing.

A directory holding
- `adapter_config.json`: format version, adapter config, the backbone's BertConfig,
  tuning mode, task name, labels, head kind, and the weight names;
- `adapter_model.safetensors`: the trained weights by TF1 name (adapters, LayerNorms
  and head in adapter mode).

Loading checks that the backbone has the shape the adapter was trained on, so an
adapter never lands silently on the wrong network.
"""

import json
import os
from typing import Optional, Sequence

import numpy as np

from adapter_bert.config import AdapterConfig, BertConfig
from adapter_bert.io_utils import atomic_write_text, atomic_write_with
from adapter_bert.naming import tf1_variables

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
FORMAT_VERSION = 1

# Fields of BertConfig that fix the shapes of the weights an adapter file depends on.
_SHAPE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "intermediate_size", "max_position_embeddings", "type_vocab_size")


class AdapterFileError(ValueError):
    """An adapter file is missing, malformed, or does not fit the model."""


def _backbone(model):
    return model if hasattr(model, "encoder") else model.bert


def save_adapter(model, directory: str, task: Optional[str] = None,
                 labels: Optional[Sequence[str]] = None, tuning_mode: str = "adapter") -> str:
    """Writes the model's trainable weights and a JSON description to `directory`.

    Args:
        model: a built task model (or `BertModel`) with its tuning mode applied.
        directory: created if needed; existing adapter files are replaced atomically.
        task: task name recorded in the config (e.g. "mrpc").
        labels: label list of the head, in logit order.
        tuning_mode: recorded so a reader knows what the file holds.

    Returns:
        The path of the weights file.
    """
    from safetensors.numpy import save_file
    bert = _backbone(model)
    trainable = {id(v) for v in model.trainable_weights}
    weights = {name: v.numpy() for name, v in tf1_variables(model).items() if id(v) in trainable}
    head = type(getattr(model, "head", None)).__name__ if hasattr(model, "head") else None
    description = {
        "format_version": FORMAT_VERSION,
        "task": task,
        "labels": list(labels) if labels is not None else None,
        "head": head,
        "tuning_mode": tuning_mode,
        "adapter_config": bert.adapter_config.to_dict() if bert.adapter_config else None,
        "backbone": bert.config.to_dict(),
        "weights": sorted(weights),
    }
    os.makedirs(directory, exist_ok=True)
    weights_path = os.path.join(directory, WEIGHTS_NAME)
    atomic_write_with(weights_path, lambda tmp: save_file(
        {k: np.ascontiguousarray(v) for k, v in weights.items()}, tmp))
    atomic_write_text(os.path.join(directory, CONFIG_NAME), json.dumps(description, indent=2) + "\n")
    return weights_path


def read_adapter_config(directory: str) -> dict:
    """Reads and validates `adapter_config.json`.

    Raises:
        AdapterFileError: missing file, bad JSON, or an unknown format version.
    """
    path = os.path.join(directory, CONFIG_NAME)
    if not os.path.isfile(path):
        raise AdapterFileError(f"{directory}: no {CONFIG_NAME}; not an adapter directory")
    try:
        with open(path, encoding="utf-8") as f:
            description = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise AdapterFileError(f"{path}: not valid JSON ({e})") from None
    if description.get("format_version") != FORMAT_VERSION:
        raise AdapterFileError(f"{path}: format_version {description.get('format_version')!r} "
                               f"is not supported (expected {FORMAT_VERSION})")
    return description


def adapter_config_of(directory: str) -> Optional[AdapterConfig]:
    """The AdapterConfig stored in an adapter directory (None for adapter-free files)."""
    values = read_adapter_config(directory)["adapter_config"]
    return AdapterConfig.from_dict(values) if values else None


def check_backbone(description: dict, config: BertConfig, source: str) -> None:
    """Raises AdapterFileError if the model's backbone shape differs from the file's."""
    stored = description["backbone"]
    diffs = [f"{k}: file {stored.get(k)} vs model {getattr(config, k)}"
             for k in _SHAPE_FIELDS if stored.get(k) != getattr(config, k)]
    if diffs:
        raise AdapterFileError(f"{source} was trained on another backbone shape ("
                               + "; ".join(diffs) + ")")


def load_adapter(model, directory: str) -> dict:
    """Loads an adapter directory's weights into a built model of the same shape.

    Args:
        model: built task model whose backbone matches the file's, with the same
            adapter layout (build it with `adapter_config_of(directory)`).
        directory: written by `save_adapter`.

    Returns:
        The file's description (task, labels, ...).

    Raises:
        AdapterFileError: file missing or malformed, another backbone shape, or a
            weight the model lacks or has with another shape.
    """
    from safetensors.numpy import load_file
    description = read_adapter_config(directory)
    check_backbone(description, _backbone(model).config, directory)
    weights_path = os.path.join(directory, WEIGHTS_NAME)
    try:
        weights = load_file(weights_path)
    except Exception as e:  # safetensors raises its own error types
        raise AdapterFileError(f"{weights_path}: cannot read ({e})") from None
    variables = tf1_variables(model)
    for name, value in weights.items():
        if name not in variables:
            raise AdapterFileError(f"{weights_path}: weight {name} has no place in this model "
                                   f"(different adapter layout or head?)")
        if tuple(variables[name].shape) != value.shape:
            raise AdapterFileError(f"{weights_path}: weight {name} has shape {list(value.shape)}, "
                                   f"the model's is {variables[name].shape.as_list()}")
        variables[name].assign(value)
    return description
