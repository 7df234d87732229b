"""Merging LoRA into the frozen kernels for inference, and back.

`merge_adapter(model, adapter_name=None)` folds a LoRA adapter's `scale * A @ B` into the
kernels it updates (one matmul per projection, same function to float32 rounding);
`unmerge_adapter` restores them exactly. One adapter is merged at a time; meanwhile running
another, writing or reading adapter files and Keras saving are refused (the serving export
`--merge_lora` ships merged weights). Keras' traced functions are reset on both calls;
a `tf.function` of your own must be traced again.
"""

import contextlib
from typing import Iterator, Optional

from adapter_bert.errors import UserError
from adapter_bert.model.encoder import backbone_of, reset_compiled_functions


def _adapter_in_use(model, adapter_name: Optional[str]) -> str:
    # None: what plain calls run, the model's active named adapter.
    if adapter_name is None:
        adapter_name = getattr(model, "active_adapter", None)
        if adapter_name is None:
            raise UserError("the model has no active adapter: name the adapter to merge")
    return adapter_name


def merge_adapter(model, adapter_name: Optional[str] = None) -> None:
    """Folds the LoRA updates of one adapter (None: the active one) into the frozen kernels.
    ValueError for an adapter without projection updates, an unbuilt model, or an adapter
    merged already.
    """
    adapter_name = _adapter_in_use(model, adapter_name)
    bert = backbone_of(model)
    if not bert.built:
        raise UserError("build the model (and load its weights) before merging adapters")
    merged = bert.merged_adapters()
    if merged:
        raise UserError(f"adapter {merged[0]!r} is merged already; unmerge it first")
    adapters = bert.projection_adapters(adapter_name)
    if not adapters:
        branch = bert.embeddings.task_branches.get(adapter_name)
        config = branch.adapter_config if branch is not None else None
        kind = f"{config.adapter_type} adapters" if config is not None else "no adapters"
        raise UserError(f"adapter {adapter_name!r} has nothing to merge ({kind}): only "
                        f"projection families such as lora fold into the kernels")
    for adapter, projections in adapters:
        adapter.merge(projections)
    reset_compiled_functions(model)


def unmerge_adapter(model, adapter_name: Optional[str] = None) -> None:
    """Restores the kernels `merge_adapter` changed (`adapter_name` None: whichever is
    merged); ValueError if it is not merged.
    """
    bert = backbone_of(model)
    if adapter_name is None:
        merged = bert.merged_adapters()
        if not merged:
            raise UserError("no adapter of the model is merged (nothing to unmerge)")
        adapter_name = merged[0]
    adapters = [(a, p) for a, p in bert.projection_adapters(adapter_name) if a.merged]
    if not adapters:
        raise UserError(f"adapter {adapter_name!r} is not merged")
    for adapter, projections in adapters:
        adapter.unmerge(projections)
    reset_compiled_functions(model)


@contextlib.contextmanager
def adapter_merged(model, adapter_name: Optional[str] = None) -> Iterator[None]:
    """`merge_adapter` for the `with` body, `unmerge_adapter` on exit (even after an error).

    Examples:
        with adapter_merged(classifier):
            logits = classifier.predict(features)   # LoRA folded into the kernels
    """
    adapter_name = _adapter_in_use(model, adapter_name)
    merge_adapter(model, adapter_name)
    try:
        yield
    finally:
        unmerge_adapter(model, adapter_name)
