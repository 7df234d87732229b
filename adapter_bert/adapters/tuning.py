"""Which weights train: the one place that decides, plus the parameter report.

Modes: `adapter` (adapters, every LayerNorm and the head, as google-research/adapter-bert),
`full`, `layernorm` (LayerNorms and head) and `top_k` (the top k layers, pooler and head).
`train_pooler` ("auto", as `--train_pooler`) trains the pooler in the first two only when
the backbone's was never trained (`pooler_is_untrained`). A model with named adapters
trains the active one; a `frozen_backbone` model (ResAdapter) its side network and head.
Freezing applies to the layers owning weights only (a frozen Keras 2 container hides its
children's weights; one that owns weights too freezes just its own, as transformers'
models need) and depends only on each layer's role, never on build order.
"""

import logging
import re
from collections import OrderedDict
from typing import Dict, Optional, Tuple

import numpy as np
import tf_keras as keras

from adapter_bert.model.adapter_layers import AdapterLayer
from adapter_bert.model.naming import (FROZEN_OWN_WEIGHTS, direct_weights, state_weights,
                                       walk_layers)
from adapter_bert.errors import UserError
from adapter_bert.model.encoder import backbone_of
from adapter_bert.adapters.named import add_pooler_copy

TUNING_MODES = ("adapter", "full", "layernorm", "top_k")

# `apply_tuning(train_pooler=...)` takes "auto", True and False, and the flag's strings.
_FLAG_VALUES = {"auto": "auto", "true": True, "false": False}

log = logging.getLogger(__name__)

# Components of the parameter report, in display order.
COMPONENTS = ("adapters", "layer_norms", "head", "pooler", "embeddings", "transformer")

_LAYER_INDEX = re.compile(r"/layer_(\d+)(/|$)")

# Scopes of side networks that live beside the backbone and count as adapters.
_SIDE_NETWORK_SCOPES = ("resadapter",)


def _component(scope: str, layer) -> str:
    if isinstance(layer, AdapterLayer) or scope.split("/", 1)[0] in _SIDE_NETWORK_SCOPES:
        return "adapters"
    if isinstance(layer, keras.layers.LayerNormalization):
        return "layer_norms"
    if not scope.startswith("bert"):
        return "head"
    if scope.startswith("bert/pooler"):
        return "pooler"
    if scope.startswith("bert/embeddings"):
        return "embeddings"
    return "transformer"


def _leaf_layers(model):
    """(scope, layer, component) for every layer that owns weights (or will, once built)."""
    for scope, layer in walk_layers(model):
        if _is_leaf(layer):
            yield scope, layer, _component(scope, layer)


def _is_leaf(layer) -> bool:
    """A layer that owns weights itself (Dense, LayerNorm, tables, adapters, heads)."""
    if direct_weights(layer):
        return True
    # Before building no layer owns weights yet: recognise leaves by type.
    from adapter_bert.model.heads import _LinearHead
    from adapter_bert.model.encoder import EmbeddingTable
    return isinstance(layer, (keras.layers.Dense, keras.layers.LayerNormalization,
                              AdapterLayer, EmbeddingTable, _LinearHead))


def _num_layers(model) -> int:
    bert = backbone_of(model)
    return bert.config.num_hidden_layers


def _trains(mode: str, scope: str, component: str, top_k: int, num_layers: int,
            train_pooler: bool) -> bool:
    if mode == "full":
        return True
    if component == "pooler" and train_pooler:
        return True
    if mode == "adapter":
        return component in ("adapters", "layer_norms", "head")
    if mode == "layernorm":
        return component in ("layer_norms", "head")
    # top_k: the top k transformer layers (adapters inside them too), pooler and head.
    if component in ("head", "pooler"):
        return True
    match = _LAYER_INDEX.search(scope)
    return bool(match) and int(match.group(1)) >= num_layers - top_k


def apply_tuning(model, mode: str, top_k: Optional[int] = None, train_pooler="auto") -> None:
    """Sets which weights of `model` train, for one of `TUNING_MODES`; before or after
    building, and again to switch. The runners call it too, so a run and a notebook train
    the same.

    `top_k`: the layers mode "top_k" trains. `train_pooler`: "auto" (train the pooler in
    "adapter" and "layernorm" when it was never trained, `resolve_train_pooler`), True or
    False (the original's), or the flag's strings. Raises ValueError for an unknown mode, a
    bad `top_k` or `train_pooler`, "adapter" without adapters, or a model with named
    adapters in a mode other than "adapter".
    """
    if mode not in TUNING_MODES:
        raise UserError(f"unknown tuning mode {mode!r}; expected one of {', '.join(TUNING_MODES)}")
    num_layers = _num_layers(model)
    if mode == "top_k":
        if top_k is None or not 0 <= int(top_k) <= num_layers:
            raise UserError(f"tuning mode top_k needs 0 <= top_k <= {num_layers} "
                            f"(the backbone's layers), got {top_k}")
        top_k = int(top_k)
    elif top_k is not None:
        raise UserError(f"top_k is only used with tuning mode 'top_k', not {mode!r}")
    named = _named_adapters(model)
    if named:
        _tune_active_adapter(model, mode, named, train_pooler)
        return
    leaves = list(_leaf_layers(model))
    if mode == "adapter" and not any(c == "adapters" for _, _, c in leaves):
        raise UserError("tuning mode 'adapter' needs a model with adapters "
                        "(ab.load_pretrained(adapter_config=...) or model.add_adapter)")
    train_pooler = resolve_train_pooler(model, mode, train_pooler)
    frozen_backbone = bool(getattr(model, "frozen_backbone", False))
    if frozen_backbone and (mode != "adapter" or train_pooler):
        raise UserError(f"{type(model).__name__} keeps its whole backbone frozen: only tuning "
                        f"mode 'adapter' without the pooler applies, not {mode!r}"
                        + (" with train_pooler" if train_pooler else ""))
    if frozen_backbone:
        chosen = [layer for _, layer, component in leaves if component in ("adapters", "head")]
    else:
        chosen = [layer for scope, layer, component in leaves
                  if _trains(mode, scope, component, top_k or 0, num_layers, train_pooler)]
    train_only(model, chosen)


def _tune_active_adapter(model, mode: str, named: list, train_pooler) -> None:
    """Mode "adapter" on a model holding named adapters: the active one's weights train
    (its adapters, LayerNorm copies and head), and its own copy of the pooler when
    `train_pooler` says so (a copy it has is frozen otherwise); everything else is
    frozen."""
    active = getattr(model, "active_adapter", None)
    if mode != "adapter" or active is None:
        raise UserError(f"{type(model).__name__} holds named adapters {named}: tuning mode "
                        f"'adapter' trains the active one (or model.train_adapter(name)); "
                        f"mode {mode!r} would set every named adapter's weights alike")
    bert = backbone_of(model)
    pooler = resolve_train_pooler(model, mode, train_pooler)
    if pooler:
        add_pooler_copy(bert, active)
    pooler_copy = bert.pooler.task_branches.get(active)
    # Without the pooler, a copy the adapter has stays as it is.
    train_only(model, [layer for layer in model.adapter_layers(active)
                       if pooler or layer is not pooler_copy])


def _named_adapters(model) -> list:
    """Names of the named adapters in the model's backbone (see adapters/named.py)."""
    bert = backbone_of(model) if hasattr(model, "encoder") or hasattr(model, "bert") else None
    return list(getattr(bert, "named_adapters", None) or [])


def train_only(model, layers) -> None:
    """The one freezing function: makes exactly the weights of `layers` (and the layers
    inside them) trainable and freezes every other weight of `model`. Only layers owning
    weights are frozen: a frozen container would hide its children's weights.
    """
    own = {id(sub) for layer in layers
           for sub in layer._flatten_layers(include_self=True)}  # noqa: SLF001
    for _, layer in walk_layers(model):
        if not _is_leaf(layer):
            layer._trainable = True  # noqa: SLF001 - the setter would recurse into children
        elif _has_children(layer):
            _set_own_weights_trainable(layer, id(layer) in own)
        else:
            layer.trainable = id(layer) in own


def _has_children(layer) -> bool:
    """Whether a layer holds layers that own weights (a Dropout child does not count:
    Keras' own `trainable` flag serves such a layer)."""
    return any(direct_weights(child)
               for child in layer._flatten_layers(include_self=False))  # noqa: SLF001


def _set_own_weights_trainable(layer, trainable: bool) -> None:
    """Freezes or unfreezes the weights a layer that has children owns itself.

    Keras 2 hides every child's weights when a container is frozen, so such a layer
    (transformers' `TFBertEmbeddings` owns the tables and has the embedding LayerNorm as a
    child) stays trainable and its own weights move to its non-trainable list instead.
    """
    layer._trainable = True  # noqa: SLF001 - the public setter would recurse into children
    frozen = list(getattr(layer, FROZEN_OWN_WEIGHTS, []))
    if trainable:
        for variable in frozen:
            layer._non_trainable_weights.remove(variable)  # noqa: SLF001
            layer._trainable_weights.append(variable)  # noqa: SLF001
        frozen = []
    else:
        for variable in list(layer._trainable_weights):  # noqa: SLF001
            layer._trainable_weights.remove(variable)  # noqa: SLF001
            layer._non_trainable_weights.append(variable)  # noqa: SLF001
            frozen.append(variable)
    # Plain attribute: Keras would track a list of variables set the usual way as the
    # layer's own (trainable) weights.
    object.__setattr__(layer, FROZEN_OWN_WEIGHTS, frozen)


def resolve_train_pooler(model, mode: str, train_pooler="auto", announce: bool = True) -> bool:
    """What `train_pooler` means for this model and mode: True or False.

    "auto" is True in modes "adapter" and "layernorm" when the pooler was never trained (the
    checkpoint lacked it, `load_report.pooler_missing`, or its bias is all zero); a warning
    then says how to freeze it (debug level with `announce=False`). False for an unbuilt
    model and for frozen backbones (ResAdapter). ValueError for values other than "auto",
    True, False ("true"/"false").
    """
    if isinstance(train_pooler, str):
        if train_pooler.lower() not in _FLAG_VALUES:
            raise UserError(f"train_pooler must be 'auto', True or False, got {train_pooler!r}")
        train_pooler = _FLAG_VALUES[train_pooler.lower()]
    if train_pooler != "auto":
        if not isinstance(train_pooler, (bool, np.bool_)):
            raise UserError(f"train_pooler must be 'auto', True or False, got {train_pooler!r}")
        return bool(train_pooler)
    if mode not in ("adapter", "layernorm") or getattr(model, "frozen_backbone", False):
        return False
    bert = backbone_of(model)
    report = getattr(model, "load_report", None)
    missing = bool(report is not None and report.pooler_missing)
    if not missing and not bert.pooler.dense.built:
        return False
    if not missing and not pooler_is_untrained(model):
        return False
    (log.warning if announce else log.debug)(
        "The backbone's pooler was never trained (%s): training it with the %s "
                "weights. Pass train_pooler=False (--train_pooler=false) to freeze it as "
                "the original adapter-bert does.",
                "absent" if missing else "all-zero bias", mode)
    return True


def trained_weights(model) -> list:
    """What training changes: the trainable weights first, then the state of the layers they
    train (a BatchNorm's moving statistics, which inference reads), for checkpoints and
    adapter files.
    """
    weights = list(model.trainable_weights)
    trainable_ids = {id(v) for v in weights}
    for _, layer in walk_layers(model):
        if any(id(v) in trainable_ids for v in layer._trainable_weights):  # noqa: SLF001
            weights.extend(v for v in state_weights(layer) if id(v) not in trainable_ids)
    return weights


def pooler_is_untrained(model) -> bool:
    """True when the loaded pooler still has its initial all-zero bias.

    Pretraining with next-sentence prediction trains the pooler (Google's BERT); models
    distilled or trained without it (all-MiniLM-L6-v2) keep the zero-initialised bias.
    """
    bert = backbone_of(model)
    return not np.any(bert.pooler.dense.bias.numpy())


def parameter_components(model):
    """Yields (variable, component) for every parameter of a built model.

    Components are `COMPONENTS`. State that is not a parameter (BatchNorm moving
    statistics) is left out, as PyTorch/PEFT count parameters only, and so are the
    backbone's LayerNorms and pooler where the active named adapter runs its own copies
    (they do not run with it): the counts are those of the network the model runs.
    """
    shadowed = _shadowed_layers(model)
    for scope, layer, component in _leaf_layers(model):
        if id(layer) in shadowed:
            continue
        state = {id(v) for v in state_weights(layer)}
        for variable in direct_weights(layer):
            if id(variable) not in state:
                yield variable, component


def _shadowed_layers(model) -> set:
    """Ids of the backbone layers the active named adapter replaces with its copies."""
    name = getattr(model, "active_adapter", None)
    if name is None or getattr(model, "_adapters_off", False):
        return set()
    shadowed = set()
    for _, layer in walk_layers(backbone_of(model)):
        branch = getattr(layer, "task_branches", {}).get(name)
        if branch is None:
            continue
        for part in ("layer_norm", "dense"):
            if getattr(branch, part) is not None:
                shadowed.add(id(getattr(layer, part)))
    return shadowed


def parameter_summary(model) -> "OrderedDict[str, Tuple[int, int]]":
    """Counts weights per component of a built model: component -> (trainable, total)."""
    counts: Dict[str, list] = OrderedDict((c, [0, 0]) for c in COMPONENTS)
    trainable_ids = {id(v) for v in model.trainable_weights}
    for variable, component in parameter_components(model):
        size = int(np.prod(variable.shape))
        counts[component][1] += size
        if id(variable) in trainable_ids:
            counts[component][0] += size
    return OrderedDict((k, (v[0], v[1])) for k, v in counts.items())


def parameter_line(trainable: int, total: int) -> str:
    """The greppable line: `trainable params: 1,234 || all params: 56,789 || trainable%:
    2.1731`.
    """
    percent = 100.0 * trainable / total if total else 0.0
    return f"trainable params: {trainable:,} || all params: {total:,} || trainable%: {percent:.4f}"


def parameter_report(model) -> str:
    """The parameter line followed by a per-component table (trainable / total)."""
    summary = parameter_summary(model)
    trainable = sum(t for t, _ in summary.values())
    total = sum(n for _, n in summary.values())
    rows = [parameter_line(trainable, total), "",
            f"{'component':<14}{'trainable':>14}{'total':>14}"]
    for name, (t, n) in summary.items():
        if n:
            rows.append(f"{name:<14}{t:>14,}{n:>14,}")
    frozen = total - trainable
    rows.append(f"{'frozen':<14}{'':>14}{frozen:>14,}")
    return "\n".join(rows)
