"""The package's models with the adapter API, and the `ab.*` functions that build them.

`ab.BertModel`, `ab.BertClassifier` and `ab.BertSpanModel` are the networks of model/
with `AdapterModelMixin` (adapters/api.py) mixed in; `load_pretrained`, `load_adapter`
and `save_adapter` are `ab.load_pretrained`, `ab.load_adapter` and `ab.save_adapter`.
"""

from typing import Optional, Sequence

import tf_keras as keras

from adapter_bert.adapters import files
from adapter_bert.adapters.api import ACTIVE, AdapterModelMixin
from adapter_bert.adapters.files import (AdapterFileError, check_adapter_mode, check_backbone,
                                         classifier_outputs, file_head_kind, read_adapter_config,
                                         read_adapter_weights)
from adapter_bert.model import encoder, factory, heads


@keras.utils.register_keras_serializable(package="adapter_bert.api")
class BertModel(AdapterModelMixin, encoder.BertNetwork):
    """The BERT backbone (`model.encoder.BertNetwork`) with the adapter API.

    Called without `adapter_name` it runs its active adapter (`adapter_name=None`: its own
    layers; a name: that adapter). Its adapters have no head: `load_adapter(dir,
    with_head=False)` loads a task file's backbone part, `ab.load_adapter(dir,
    backbone=model)` the task model. `adapter_config` builds it with that adapter, named
    `adapter_name` (default "adapter") and active.
    """

    def __init__(self, config, adapter_config=None, name="bert", adapter_name=None, **kwargs):
        super().__init__(config, name=name, **kwargs)
        self._init_adapters(adapter_config, adapter_name)

    def _backbone_model(self):
        return self

    def call(self, inputs, training=None, return_all_layers=False, adapter_name=ACTIVE):
        if adapter_name == ACTIVE:
            adapter_name = self._adapter_in_use()
        return super().call(inputs, training=training, return_all_layers=return_all_layers,
                            adapter_name=adapter_name)


@keras.utils.register_keras_serializable(package="adapter_bert.api")
class BertClassifier(AdapterModelMixin, heads.BertClassifierNetwork):
    """`adapter_bert.model.heads.BertClassifierNetwork` with the adapter API.

    Each named adapter has its own classifier head (`num_labels` per adapter, default
    the model's), except the one the model is built with (`adapter_config`,
    `adapter_name`), which uses the model's own head; with no active adapter the model's
    own head runs.
    """

    HEAD_KINDS = ("classifier",)

    def __init__(self, config, num_labels, adapter_config=None, name="bert_classifier",
                 adapter_name=None, **kwargs):
        super().__init__(config, num_labels, name=name, **kwargs)
        self._init_adapters(adapter_config, adapter_name)

    def _default_num_labels(self) -> int:
        return self.num_labels

    def call(self, inputs, training=None):
        name = self._adapter_in_use()
        pooled = self.bert(inputs, training=training, adapter_name=name)["pooled_output"]
        return self.adapter_head(name)(pooled, training=training)


@keras.utils.register_keras_serializable(package="adapter_bert.api")
class BertSpanModel(AdapterModelMixin, heads.BertSpanNetwork):
    """`adapter_bert.model.heads.BertSpanNetwork` with the adapter API.

    Each named adapter has its own span head, except the one the model is built with,
    which uses the model's own head; with no active adapter the model's own head runs.
    """

    HEAD_KINDS = ("span",)

    def __init__(self, config, adapter_config=None, name="bert_span", adapter_name=None,
                 **kwargs):
        super().__init__(config, name=name, **kwargs)
        self._init_adapters(adapter_config, adapter_name)

    def call(self, inputs, training=None):
        name = self._adapter_in_use()
        sequence = self.bert(inputs, training=training,
                             adapter_name=name)["sequence_output"]
        start_logits, end_logits = self.adapter_head(name)(sequence, training=training)
        return {"start_logits": start_logits, "end_logits": end_logits}


# The factory's classes with the API, by head.
MODELS = {None: BertModel, "classifier": BertClassifier, "span": BertSpanModel}


# ----------------------------------------------------------------- functions
def load_pretrained(path: Optional[str] = None, adapter_config=None, head: Optional[str] = None,
                    num_labels: int = 2, config_file: Optional[str] = None,
                    dtype: Optional[str] = None):
    """A pretrained model with the adapter API (`ab.load_pretrained`): a `BertModel` (head
    None), `BertClassifier` or `BertSpanModel`, built, with the checkpoint's weights.

    `path`: a checkpoint, Hugging Face folder or Google release name; None: the embedded
    MiniLM. `adapter_config`: built with that adapter (named "adapter", active, using the
    model's head, as the runners' models). `dtype`: None (Keras' global policy), "auto" (the
    hardware's native policy, set globally) or a policy name. Raises CheckpointError or
    ConfigError for missing or inconsistent files.
    """
    return factory.build_pretrained(path, adapter_config, head, num_labels, config_file,
                                   classes=MODELS, dtype=dtype)


def load_adapter(directory: str, backbone=None, name: Optional[str] = None):
    """The task model an adapter directory describes, in one call (`ab.load_adapter`).

    Loads `backbone` (None: the embedded MiniLM; a checkpoint or Google release name; or a
    loaded `BertModel`, or a model holding one as `.bert`, to share), builds the model the
    file's head asks for and adds the adapter with its head and labels as the active one
    (`name` default: the file's task). `model.labels[model.active_adapter]` holds the
    labels. Raises AdapterFileError as `model.load_adapter` (another backbone shape says to
    pass `backbone=`), TypeError for a model passed as `directory`.
    """
    if isinstance(directory, keras.layers.Layer):
        raise TypeError("load_adapter(directory, backbone=None) builds a new model; to add an "
                        "adapter to a model you have, call model.load_adapter(directory)")
    description = read_adapter_config(directory)
    check_adapter_mode(description, directory)
    if description.get("fusion"):
        raise AdapterFileError(f"{directory} fuses the adapters {description['fusion']}: load "
                               f"those into one model first, then this file "
                               f"(model.load_adapter)")
    kind = file_head_kind(description, directory)
    bert = _backbone_for(backbone)
    try:
        check_backbone(description, bert.config, directory)
    except AdapterFileError as e:
        if backbone is None:
            raise AdapterFileError(f"{e}; pass backbone= the checkpoint it was trained "
                                   f"on") from None
        raise
    if kind == "classifier":
        model = BertClassifier(bert, classifier_outputs(read_adapter_weights(directory),
                                                        directory))
    elif kind == "span":
        model = BertSpanModel(bert)
    elif isinstance(bert, AdapterModelMixin):
        model = bert
    else:
        raise TypeError(f"{directory} holds no head and backbone= is a network without the "
                        f"adapter API: pass ab.load_pretrained(...)'s model")
    if model is not bert:
        for attribute in ("load_report", "backbone_files"):
            if getattr(bert, attribute, None) is not None:
                setattr(model, attribute, getattr(bert, attribute))
    model.load_adapter(directory, name)
    return model


def save_adapter(model, directory: str, name: Optional[str] = None, task: Optional[str] = None,
                 labels: Optional[Sequence[str]] = None) -> str:
    """Writes a model's adapter as an adapter directory (`ab.save_adapter`): the model's
    own `save_adapter` where it has one (every class `ab` builds), else, for model/'s
    networks, their trained weights (`files.save_trained_weights`). Returns the weights
    file's path.
    """
    save = getattr(model, "save_adapter", None)
    if save is None:
        return files.save_trained_weights(model, directory, task, labels, name=name)
    return save(directory, name=name, task=task, labels=labels)


def _backbone_for(backbone):
    if backbone is None or isinstance(backbone, str):
        return load_pretrained(backbone)
    if isinstance(backbone, encoder.BertNetwork):
        return backbone
    if isinstance(getattr(backbone, "bert", None), encoder.BertNetwork):
        return backbone.bert
    raise TypeError(f"backbone must be None, a checkpoint path or a BertModel, not "
                    f"{type(backbone).__name__}")

