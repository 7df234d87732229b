"""What a `TextClassifier` writes and reads (`Saving`, mixed into it): Keras' saving
contract (its config holds the backbone's architecture, vocabulary and casing, so `.keras`
files, SavedModels and `ModelCheckpoint` files load without the backbone's files), the
SavedModel that answers raw strings, and adapter directories written and read.
"""

from typing import Optional, Sequence

from adapter_bert import io_utils
from adapter_bert.adapters.files import (load_trained_weights, read_adapter_config,
                                         save_trained_weights)
from adapter_bert.data.backbone import Backbone
from adapter_bert.data.tokenization import read_vocab
from adapter_bert.errors import UserError
from adapter_bert.model.config import BertConfig
from adapter_bert.serving.export import export_classifier


class Saving:
    """The file methods of `TextClassifier` (which holds `network`, `backbone_config`,
    `_settings`, `_task_table`, `_active` and `tuning_mode`, and builds with `_build`)."""

    @classmethod
    def from_adapter(cls, directory: str, backbone=None, **kwargs) -> "Saving":
        """The classifier an adapter directory holds (`save_adapter`'s or a run's
        `<output_dir>/adapter`), with the sequence length, pairs and class weights it
        records. `backbone`: None (the embedded MiniLM), a checkpoint it was trained on, or
        a `TextClassifier` (adapter mode), whose backbone the new model shares: the
        adapter is added to it (`load_adapter`) and the model returned runs it, at the
        memory of one more adapter. `kwargs` are `from_pretrained`'s settings (none with a
        shared model: its settings hold). Quiet: it prints no parameter line.
        AdapterFileError for another kind of directory or backbone.
        """
        if isinstance(backbone, Saving):
            if kwargs:
                raise UserError(f"from_adapter(..., backbone=<TextClassifier>) shares that "
                                f"model's settings; got {', '.join(sorted(kwargs))}")
            return backbone._view(backbone.load_adapter(directory))
        description = read_adapter_config(directory)
        labels = description.get("labels") or None
        training = description.get("training") or {}
        kwargs.setdefault("quiet", True)
        kwargs.setdefault("max_seq_length", training.get("max_seq_length"))
        model = cls.from_pretrained(labels, backbone, regression=labels is None,
                                    adapter=description.get("adapter_config"),
                                    task=description.get("task") or io_utils.basename(directory),
                                    **kwargs)
        load_trained_weights(model.network, directory)
        model.pair = bool(training.get("pair"))
        model.class_weights = training.get("class_weights")
        return model

    def get_config(self):
        """Everything `from_config` rebuilds the model from without the backbone's files:
        the backbone's architecture, vocabulary, casing, the settings, every task's labels
        and adapter, and the active one (the weights come from the saved file)."""
        first, *others = self._task_table.specs
        return {"name": self.name, "backbone_config": self.backbone_config.to_dict(),
                "settings": {**self._settings, **self._task_table.specs[first]},
                "tasks": [dict(self._task_table.specs[n], name=n) for n in others],
                "active": self._active}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        bert = Backbone(None, BertConfig.from_dict(config["backbone_config"]), None)
        model = cls._build(bert, config["settings"], None, quiet=True)
        for spec in config.get("tasks") or ():
            spec = dict(spec)
            model._add_task(spec.pop("name"), spec)
        if config.get("active", model._active) != model._active:
            model.set_active_adapters(config["active"])
        # Its slots made now, so that a file holding the optimizer's state restores it.
        with model.distribute_strategy.scope():
            model.optimizer.build(model.trainable_variables)
        return model

    def get_build_config(self):
        return None  # built by from_config

    def get_compile_config(self):
        return None  # compiled by from_config, with the runner's recipe

    def save(self, filepath, *args, **kwargs):
        """Keras' `save`: a `.keras` file or a SavedModel folder, which
        `tf_keras.models.load_model` reads back once the package is imported."""
        problem = io_utils.write_problem(io_utils.dirname(str(filepath)) or ".")
        if problem:  # before Keras' own writes, which loop on a missing bucket
            raise UserError(f"save: {filepath}: {problem}")
        return super().save(filepath, *args, **kwargs)

    def export(self, directory: str) -> str:
        """Writes the SavedModel that answers raw strings (`serving_default`: `text_a`,
        and `text_b` for a pair model -> probabilities and label, or score), served
        with TensorFlow and tensorflow-text only (docs/serving.md), of the active task.
        Returns its path."""
        self._use_active()  # the network runs this model's task
        return export_classifier(self.network, directory, read_vocab(self.preprocessor.vocabulary),
                                 self.preprocessor.do_lower_case, self.max_seq_length,
                                 self.labels, self.pair, task=self.task)

    def save_adapter(self, directory: str, name: Optional[str] = None,
                     task: Optional[str] = None, labels: Optional[Sequence[str]] = None) -> str:
        """Writes the adapter directory `run_classifier.py` writes (weights, backbone
        description, task, label names, sequence length, and how it was trained);
        returns the weights file's path. `name`: its adapter (default: the active task's);
        `task` (default the task's) names it; `labels`, if given, must be the task's."""
        name = name or self._active
        if name not in self._task_table.specs:
            raise UserError(f"save_adapter: no task {name!r} on this model; its tasks: "
                            f"{', '.join(self._task_table.specs)}")
        spec = self._task_table.specs[name]
        if labels is not None and list(labels) != list(spec["labels"]):
            raise UserError(f"save_adapter: labels {list(labels)} are not the task's "
                            f"{list(spec['labels'])}")
        training = {key: spec.get(key) for key in ("class_weights", "pair", "max_seq_length")}
        named = name if name in self.network.adapter_names else None
        return save_trained_weights(self.network, directory, task or spec["task"],
                                    list(spec["labels"]), self.tuning_mode,
                                    {k: v for k, v in training.items() if v}, named)
