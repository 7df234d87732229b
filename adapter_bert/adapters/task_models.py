"""Which task model is built: a `ModelRecipe`, what both runners and `TextClassifier` build.

- a `ResAdapterClassifier` / `ResAdapterSpanModel` with a `ResAdapterConfig`
  (a side network of cells beside a wholly frozen BERT, see `resadapter`), or
- a `BertClassifier` / `BertSpanModel` otherwise (adapters inside BERT, or none),

with the pretrained backbone's weights under the run's strategy and the tuning mode
applied; `report_parameters` prints the parameter line.
"""

import dataclasses
import re
from typing import Dict, Optional

from absl import logging

from adapter_bert.adapters import resadapter
from adapter_bert.adapters.models import MODELS
from adapter_bert.adapters.named import RESERVED_NAMES
from adapter_bert.adapters.resadapter import ResAdapterConfig
from adapter_bert.adapters.tuning import (apply_tuning, parameter_report, parameter_summary,
                                          resolve_train_pooler)
from adapter_bert.model.config import AdapterConfig
from adapter_bert.model.factory import load_backbone_weights, task_model


def adapter_name_for(task: str) -> str:
    """The name of a run's adapter: its task's name, as an adapter name allows it
    (letters, digits, `_`, `.`, `-`; others become `_`)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", task.lower()).lstrip("_.-") or "task"
    return name if name not in RESERVED_NAMES else f"{name}_task"


@dataclasses.dataclass(frozen=True)
class ModelRecipe:
    """What a task model is: the one recipe both runners (`runners.task_models.recipe_from_flags`)
    and `TextClassifier` build.

    `head` "classifier" (with `num_labels`, 1 for regression) or "span"; `adapter_config`
    becomes the named adapter of `task` (`adapter_name_for`); a `resadapter_config` builds
    a ResAdapter model instead; `tuning_mode`, `top_k` and `train_pooler` ("true",
    "false", "auto"; a ResAdapter never trains it) go to `tuning.apply_tuning`.
    """

    head: str
    num_labels: Optional[int] = None
    adapter_config: Optional[AdapterConfig] = None
    resadapter_config: Optional[ResAdapterConfig] = None
    task: str = "task"
    tuning_mode: str = "adapter"
    top_k: Optional[int] = None
    train_pooler: str = "false"

    def new_model(self, bert_config):
        """The unbuilt model (`model.factory.task_model` picks its class)."""
        if self.resadapter_config is not None:
            return task_model(bert_config, self.head, self.num_labels, self.adapter_config,
                              classes=resadapter.MODELS,
                              resadapter_config=self.resadapter_config)
        return task_model(bert_config, self.head, self.num_labels, self.adapter_config,
                          classes=MODELS, adapter_name=adapter_name_for(self.task))

    def build(self, strategy, backbone, training: bool = True):
        """The model under `strategy`, with `backbone`'s pretrained weights (none when its
        `files` are None) and the tuning mode applied; `training` says the run trains, the
        only case where `train_pooler="auto"` says that it trains the pooler."""
        # The model object itself is created under the scope: Keras records the strategy
        # when a Model is constructed, and under MultiWorkerMirroredStrategy a model created
        # outside it updates its loss metric in cross-replica context and fails in `fit`.
        with strategy.scope():
            model = self.new_model(backbone.config)
            if backbone.files is not None:  # None: the weights come from a saved model
                load_backbone_weights(model, backbone.files)
            has_adapters = bool(getattr(model, "adapter_names", None)) or \
                bool(getattr(model, "frozen_backbone", False))
            mode = self.tuning_mode if (self.tuning_mode != "adapter" or has_adapters) \
                else "full"
            # The library's decision, flag value and all ("auto": a never-trained pooler).
            pooler = resolve_train_pooler(model, mode, self.train_pooler, announce=training)
            apply_tuning(model, mode, self.top_k, train_pooler=pooler)
        return model


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
