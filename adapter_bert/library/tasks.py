"""Several tasks on one `TextClassifier` backbone: each task's adapter, head, labels,
sequence length and optimizer (`TaskTable`), and the methods that add, load and switch
them (`SeveralTasks`, mixed into `TextClassifier`). The backbone's weights are shared by
every task and never copied.
"""

import contextlib
from typing import Dict, Optional, Sequence

import tf_keras as keras

from adapter_bert import io_utils
from adapter_bert.adapters.api import adapter_config_from
from adapter_bert.adapters.files import read_adapter_config
from adapter_bert.adapters.named import named_adapter_info
from adapter_bert.adapters.task_models import adapter_name_for
from adapter_bert.command_line import settings
from adapter_bert.errors import UserError
from adapter_bert.library.inputs import checked_labels
from adapter_bert.library.preprocessing import TextPreprocessor
from adapter_bert.model.heads import ClassifierHead
from adapter_bert.training.loop import set_seed

MAX_SEQ_LENGTH = settings.default("max_seq_length")

# The settings of one task (one adapter and head) on the shared backbone; the others in
# a model's settings are the model's.
TASK_KEYS = ("task", "labels", "max_seq_length", "adapter", "train_pooler", "pair",
             "class_weights")


class TaskTable:
    """The tasks one network holds, shared by every `TextClassifier` on it: adapter name
    -> the task's settings (`TASK_KEYS`), its runner optimizer once made, and its
    preprocessing. A plain object, so Keras tracks none of it (settings, not weights; a
    model saves the optimizer it is compiled with)."""

    def __init__(self):
        self.specs: Dict[str, dict] = {}
        self.optimizers: dict = {}
        self.preprocessors: Dict[str, TextPreprocessor] = {}


class SeveralTasks:
    """The task methods of `TextClassifier` (which holds `network`, `backbone_config`,
    `_settings`, `_task_table`, `_active`, `seed` and `tuning_mode`)."""

    @property
    def adapter_names(self) -> list:
        """The tasks' adapters on this model's backbone, in the order they were added."""
        return list(self._task_table.specs)

    @property
    def active_adapter(self) -> str:
        """The adapter (task) this model's methods run and train."""
        return self._active

    def add_adapter(self, name: str, labels: Optional[Sequence[str]] = None, *,
                    regression: bool = False, config="houlsby",
                    max_seq_length: Optional[int] = None, train_pooler="auto",
                    task: Optional[str] = None) -> None:
        """Adds a task to the backbone: a fresh named adapter (`config`: a family name, an
        `AdapterConfig` or its dict) with its own head for `labels` (or one float output
        with `regression`), its own LayerNorm copies and, `train_pooler` as
        `from_pretrained`'s, pooler copy. The backbone's weights are shared, not copied.
        `set_active_adapters(name)` then trains and runs it. `task` (default `name`) is
        the name its adapter directory records. Adapter mode only.
        """
        labels = checked_labels(labels, regression)
        spec = {"task": task or name, "labels": labels,
                "max_seq_length": self._checked_length(max_seq_length),
                "adapter": adapter_config_from(config).to_dict(), "train_pooler": train_pooler,
                "pair": False, "class_weights": None}
        set_seed(self.seed)  # as from_pretrained: the same adapter for the same seed
        self._add_task(name, spec)

    def load_adapter(self, directory: str, name: Optional[str] = None) -> str:
        """Adds the task an adapter directory holds (`save_adapter`'s, or a run's
        `<output_dir>/adapter` in adapter mode, trained on this backbone) with its head,
        labels, sequence length and pairs; returns its adapter name (`name`, else the
        task it records, else the directory's name). It does not become active.
        AdapterFileError for another backbone, mode or head.
        """
        description = read_adapter_config(directory)
        if description.get("fusion"):
            raise UserError(f"{directory}: an AdapterFusion task; TextClassifier holds one "
                            f"adapter per task (ab.BertClassifier.load_adapter loads fusions)")
        task = description.get("task") or io_utils.basename(directory)
        if name is None:
            taken = set(self._task_table.specs)
            name = next((n for n in (adapter_name_for(task),
                                     adapter_name_for(io_utils.basename(directory)))
                         if n not in taken), None)
            if name is None:
                raise UserError(f"{directory}: an adapter named {adapter_name_for(task)!r} is "
                                f"on this model already; pass name=...")
        training = description.get("training") or {}
        spec = {"task": task, "labels": list(description.get("labels") or []),
                "max_seq_length": self._checked_length(training.get("max_seq_length")),
                "adapter": description.get("adapter_config"), "train_pooler": None,
                "pair": bool(training.get("pair")),
                "class_weights": training.get("class_weights")}
        self._add_task(name, spec, directory)
        return name

    def set_active_adapters(self, name: str) -> None:
        """Makes task `name` the one this model's methods run and train (its adapter's
        weights alone trainable), compiled with its own runner optimizer, which keeps its
        state across switches: `compile` again after switching for other settings."""
        if name not in self._task_table.specs:
            raise UserError(f"no task {name!r} on this model; its tasks: "
                            f"{', '.join(self._task_table.specs)}")
        self._active = name
        self._use_active()
        self.compile()

    def _add_task(self, name: str, spec: dict, directory: Optional[str] = None) -> None:
        """Adds task `name` of `spec` to the network: a fresh adapter and head, or the
        ones in `directory`; the active task stays as it was."""
        if self.tuning_mode != "adapter":
            raise UserError(f"several tasks on one backbone need tuning_mode='adapter'; "
                            f"this model tunes {self.tuning_mode!r}")
        with model_policy(self._settings["dtype"]), self.distribute_strategy.scope():
            if directory is None:
                self.network.add_adapter(name, spec["adapter"], num_labels=len(spec["labels"])
                                         or 1, labels=spec["labels"] or None,
                                         train_pooler=spec["train_pooler"])
            else:
                self.network.load_adapter(directory, name)
        float32_heads(self.network)
        spec["train_pooler"] = bool(named_adapter_info(self.network.bert, name).train_pooler)
        self._task_table.specs[name] = spec
        self._use_active()

    def _use_active(self) -> None:
        """Makes the network run and train this model's task: its adapter's weights alone
        trainable (other models on the same backbone may have switched them)."""
        if self._active in self.network.adapter_names:
            self.network.train_adapter(self._active, verbose=False)

    def _view(self, name: str) -> "SeveralTasks":
        """Another model on this one's network and tasks, running task `name`."""
        with model_policy(self._settings["dtype"]), self.distribute_strategy.scope():
            view = type(self)(self.network, self.backbone_config, self._settings,
                              tasks=self._task_table, active=name)
            view._use_active()
            view._made()
        return view

    def _checked_length(self, max_seq_length: Optional[int]) -> int:
        limit = self.backbone_config.max_position_embeddings
        length = int(max_seq_length or min(MAX_SEQ_LENGTH, limit))
        if not 2 < length <= limit:
            raise UserError(f"max_seq_length={length}: expected 3..{limit} (this backbone's "
                            f"limit)")
        return length


@contextlib.contextmanager
def model_policy(dtype: str):
    """Keras' global policy set to `dtype` while a model's layers are made (they keep
    it), the user's restored after."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(dtype)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def float32_heads(network) -> None:
    """Heads compute in float32 under a mixed policy, as Keras' mixed-precision guide has
    the last layer: logits not rounded to bfloat16's 8 bits, which would tie the scores
    of many texts. (The runners keep their own numerics, which their figures state.)"""
    for head in [m for m in network.submodules if isinstance(m, ClassifierHead)]:
        for layer in (head, *head.submodules):  # its dropout too, which would cast back
            if isinstance(layer, keras.layers.Layer):
                layer._set_dtype_policy("float32")  # noqa: SLF001 - Keras' own setter
