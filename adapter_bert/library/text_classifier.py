"""Your own texts in Keras: a Keras model whose `fit`, `evaluate` and `predict` take strings.

`TextClassifier.from_pretrained(labels=[...])` builds the network `run_classifier.py`
builds at the same settings and compiles it with the runner's recipe (Google's AdamW,
warm-up and linear decay, the tuning mode's learning rate). Every Keras method is
`keras.Model`'s own: texts, labels and weights become a `tf.data` pipeline, the
preprocessing (`preprocessing.TextPreprocessor`: the runner's tokenisation, packing and
truncation, in the graph) is mapped over it, and Keras trains, evaluates and predicts.
Saving and loading are `saving.Saving`'s; several tasks on one backbone `tasks.SeveralTasks`'.
"""

import re
from typing import Dict, Optional, Sequence

import numpy as np
import tensorflow as tf
import tf_keras as keras
from absl import logging

from adapter_bert.adapters.api import adapter_config_from
from adapter_bert.adapters.task_models import ModelRecipe, adapter_name_for, report_parameters
from adapter_bert.command_line import settings
from adapter_bert.data.backbone import Backbone, load_backbone
from adapter_bert.data.tokenization import vocab_lines
from adapter_bert.errors import UserError
from adapter_bert.library import pipeline
from adapter_bert.library.tasks import (TASK_KEYS, SeveralTasks, TaskTable, float32_heads,
                                         model_policy)
from adapter_bert.library.inputs import (checked_labels, is_pair, label_array, split_off,
                                         text_columns)
from adapter_bert.library.preprocessing import TextPreprocessor
from adapter_bert.library.saving import Saving
from adapter_bert.metrics.classification import per_class_report, score_logits
from adapter_bert.metrics.keras_metrics import (PearsonCorrelation, for_logits,
                                                scores_one_probability)
from adapter_bert.model.config import BertConfig
from adapter_bert.model.inputs import FEATURE_NAMES, FeatureInputs, check_tf_keras
from adapter_bert.precision import resolve_dtype
from adapter_bert.serving.export import require_serving_extra
from adapter_bert.training.loop import set_seed
from adapter_bert.training.objectives import class_weights_for
from adapter_bert.training.optimizer import PlannedWarmupDecay, choose_optimizer
from adapter_bert.training.recipe import optimizer_for
from adapter_bert import io_utils

# The runner's defaults (rows of `command_line.settings`): a model built with none of the
# arguments trains as `run_classifier.py` does with none of the flags.
SEED = settings.default("seed")
MAX_SEQ_LENGTH = settings.default("max_seq_length")
BATCH_SIZE = settings.default("train_batch_size")
EPOCHS = int(settings.default("num_train_epochs"))
WARMUP_PROPORTION = settings.default("warmup_proportion")
# Texts per `predict` batch when none is given: each batch is padded to its longest row,
# so past a few hundred rows the padding grows faster than the matmuls gain
# (bench/library_predict.py measures it).
PREDICT_BATCH_SIZE = 128
_LR_CALLBACKS = (keras.callbacks.LearningRateScheduler, keras.callbacks.ReduceLROnPlateau)


@keras.utils.register_keras_serializable(package="adapter_bert")
class TextClassifier(Saving, SeveralTasks, FeatureInputs, keras.Model):
    """A BERT text classifier (adapters by default) whose Keras methods take raw strings.

    Build it with `from_pretrained` or `from_adapter`. `fit`, `evaluate`, `predict` and the
    `*_on_batch` methods take texts (a list, an array, a pair `(first_texts,
    second_texts)`, or a `tf.data.Dataset` of them with labels and weights, batched or
    not) and labels (names or ids; floats for regression); called directly it takes the
    features dict. In adapter mode one backbone holds several tasks: `add_adapter`,
    `load_adapter`, `set_active_adapters`, or `from_adapter(directory, backbone=model)`
    for a second model on the same backbone. `labels` are the active task's names in
    logit order (empty for regression), `task` its recorded name, `pair` whether it was
    trained on sentence pairs.
    """

    # A SavedModel of it is rebuilt by `from_config`, as Keras' preprocessing layers are.
    _must_restore_from_config = True

    def __init__(self, network, backbone_config: BertConfig, settings: dict,
                 tasks: Optional[TaskTable] = None, active: Optional[str] = None,
                 name: str = "text_classifier", **kwargs):
        super().__init__(name=name, **kwargs)
        self.network = network
        self.backbone_config = backbone_config
        # from_pretrained's resolved arguments: what `get_config` gives to rebuild it.
        self._settings = dict(settings)
        self.tuning_mode = settings["tuning_mode"]
        self.seed = int(settings["seed"])
        if tasks is None:
            tasks = TaskTable()
            tasks.specs[adapter_name_for(settings["task"])] = {
                key: settings.get(key) for key in TASK_KEYS}
        self._task_table = tasks
        self._active = active or next(iter(tasks.specs))

    # -------------------------------------------------- the active task
    @property
    def _spec(self) -> dict:
        return self._task_table.specs[self._active]

    @property
    def labels(self) -> tuple:
        return tuple(self._spec["labels"] or ())

    @property
    def task(self) -> str:
        return self._spec["task"]

    @property
    def max_seq_length(self) -> int:
        return int(self._spec["max_seq_length"])

    @property
    def pair(self) -> bool:
        return bool(self._spec.get("pair"))

    @pair.setter
    def pair(self, value: bool) -> None:
        self._spec["pair"] = bool(value)

    @property
    def class_weights(self) -> Optional[Dict[str, float]]:
        return self._spec.get("class_weights")

    @class_weights.setter
    def class_weights(self, value) -> None:
        self._spec["class_weights"] = value

    @property
    def preprocessor(self) -> TextPreprocessor:
        """The active task's tokenisation, packing and label ids."""
        made = self._task_table.preprocessors.get(self._active)
        if made is None:
            made = TextPreprocessor(self._settings["vocabulary"], self._settings["do_lower_case"],
                                    self.max_seq_length, self.labels)
            self._task_table.preprocessors[self._active] = made
        return made

    # ------------------------------------------------------------ building
    @classmethod
    def from_pretrained(cls, labels: Optional[Sequence[str]] = None, backbone: Optional[str] = None,
                        *, regression: bool = False, adapter="houlsby",
                        tuning_mode: str = "adapter", task: str = "text_classification",
                        max_seq_length: Optional[int] = None,
                        do_lower_case: Optional[bool] = None, seed: int = SEED,
                        dtype: Optional[str] = "auto", train_pooler="auto",
                        learning_rate: Optional[float] = None,
                        warmup_proportion: float = WARMUP_PROPORTION, strategy=None,
                        quiet: bool = False) -> "TextClassifier":
        """A classifier on a pretrained backbone, built and compiled as `run_classifier.py`
        builds and trains it; prints the parameter line (`quiet`: no line, and no notes
        about training, for a model loaded to predict).

        Args:
            labels: label names in logit order (the runner sorts the training labels); None
                with `regression` (one float output, mean squared error).
            backbone: None (the embedded MiniLM), a checkpoint or a Google release name.
            adapter: a family name, an `AdapterConfig` or its dict (adapter mode).
            tuning_mode: "adapter", "full" or "layernorm".
            task: the name adapter directories record.
            max_seq_length: None: 128, or the backbone's limit if lower.
            do_lower_case: None: as the checkpoint says.
            seed, train_pooler, learning_rate, warmup_proportion: `--seed`,
                `--train_pooler`, `--learning_rate` (None: the tuning mode's),
                `--warmup_proportion`.
            dtype: "auto" (the runner's choice for this machine), "float32",
                "mixed_bfloat16" or "mixed_float16", for this model only; None: Keras'
                global policy.
            strategy: a `tf.distribute.Strategy`; None: the one in scope, as Keras models
                are built (`with strategy.scope(): TextClassifier.from_pretrained(...)`).

        Raises ValueError for missing or repeated labels, or labels with `regression`;
        CheckpointError, ConfigError or TokenizerError for unusable backbone files.
        """
        labels = checked_labels(labels, regression)
        if tuning_mode == "top_k":
            raise UserError("tuning_mode='top_k' needs a layer count: use run_classifier.py "
                            "--tuning_mode=top_k --top_k_layers=N")
        require_serving_extra("TextClassifier (its tokenizer runs in the graph)")
        bert = load_backbone(backbone, None, None, do_lower_case, max_seq_length)
        adapter_config = adapter_config_from(adapter) if tuning_mode == "adapter" else None
        found = {
            "labels": labels, "vocabulary": vocab_lines(io_utils.read_bytes(
                bert.files.vocab_file)),
            "do_lower_case": bert.tokenizer.do_lower_case,
            "max_seq_length": max_seq_length or min(MAX_SEQ_LENGTH,
                                                    bert.config.max_position_embeddings),
            "adapter": adapter_config.to_dict() if adapter_config else None,
            "tuning_mode": tuning_mode, "task": task, "seed": int(seed),
            "train_pooler": train_pooler, "learning_rate": learning_rate,
            "warmup_proportion": float(warmup_proportion), "dtype": dtype}
        return cls._build(bert, found, strategy, quiet)

    @classmethod
    def _build(cls, bert: Backbone, found: dict, strategy, quiet: bool) -> "TextClassifier":
        """The model of `found` (from_pretrained's resolved arguments) on `bert` (whose
        `files` are None when the weights come from a saved file), compiled."""
        if strategy is None:  # the one in scope (Keras' default strategy outside any)
            strategy = tf.distribute.get_strategy()
        found = dict(found, dtype=_model_dtype(found["dtype"], strategy))
        if bert.files is not None:  # the runner's order: seed, then the model (a loaded
            set_seed(found["seed"])  # model's weights come from its file)
        adapter = found["adapter"]
        recipe = ModelRecipe("classifier", len(found["labels"]) or 1,
                             adapter_config_from(adapter) if adapter else None,
                             task=found["task"], tuning_mode=found["tuning_mode"],
                             train_pooler=str(found["train_pooler"]).lower())
        with model_policy(found["dtype"]):  # the layers keep it; the user's comes back
            network = recipe.build(strategy, bert, training=not quiet)
            float32_heads(network)
            found["train_pooler"] = _trains_pooler(network)
            with strategy.scope():
                model = cls(network, bert.config, found)
                model._made()
        if not quiet:
            report_parameters(network)
        return model

    def _made(self) -> None:
        """Builds (on zero features: no tokenizer trace before the first data) and
        compiles a model just made, in its strategy's scope."""
        self({key: tf.zeros([1, 2], tf.int32) for key in FEATURE_NAMES})
        self.compile()

    def call(self, inputs, training=None):
        network, name = self.network, self._active
        if name not in network.adapter_names:  # full or LayerNorm tuning: one task
            return network(inputs, training=training)
        pooled = network.bert(inputs, training=training, adapter_name=name)["pooled_output"]
        return network.adapter_head(name)(pooled, training=training)

    # ------------------------------------------------------------- compiling
    def compile(self, optimizer=None, loss=None, metrics=None, **kwargs):
        """Keras' `compile`, with the runner's recipe for what is not given: the
        optimizer (None: the task's runner optimizer, kept across compiles), the loss
        (cross-entropy on the logits, or mean squared error) and the metrics (accuracy,
        or Pearson's r). A metric named by a string is made for the model's logits;
        one-probability metrics (`AUC`, `Precision`, ...) of a two-label model score the
        second label's probability."""
        check_tf_keras(metrics or [], "metrics", "compile(metrics=...)")
        if optimizer is None:
            optimizer = self._runner_optimizer()
        if loss is None:
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True) \
                if self.labels else keras.losses.MeanSquaredError()
        with self.distribute_strategy.scope():
            metrics = [self._metric(m) for m in metrics] if metrics else \
                [keras.metrics.SparseCategoricalAccuracy(name="accuracy") if self.labels
                 else PearsonCorrelation()]
            super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def _runner_optimizer(self):
        """The active task's runner optimizer, made at its first compile."""
        made = self._task_table.optimizers.get(self._active)
        if made is None:
            choice = choose_optimizer(self.tuning_mode, self._settings["learning_rate"])
            with self.distribute_strategy.scope():
                made = optimizer_for(choice, None, self.network)
            self._task_table.optimizers[self._active] = made
        return made

    def _metric(self, metric):
        """A metric for the model's logits: "accuracy" is the labels' accuracy; other
        names are Keras' metrics; one-probability metrics need two labels."""
        if isinstance(metric, str) and metric in ("accuracy", "acc") and self.labels:
            return keras.metrics.SparseCategoricalAccuracy(name=metric)
        if isinstance(metric, str):  # named after the string, not "auc_3"
            name = re.sub(r"(?<!^)(?=[A-Z][a-z])", "_", metric).lower()
            made = keras.metrics.get(metric)
            made = made() if isinstance(made, type) else made
            metric = type(made).from_config({**made.get_config(), "name": name}) \
                if isinstance(made, keras.metrics.Metric) else \
                keras.metrics.MeanMetricWrapper(made, name=name)
        extended = self.distribute_strategy.extended
        if not all(extended.variable_created_in_scope(v) for v in
                   getattr(metric, "variables", ())):  # made outside the model's scope:
            metric = type(metric).from_config(metric.get_config())  # as Keras makes names
        if scores_one_probability(metric) and len(self.labels) != 2:
            raise UserError(f"compile(metrics=...): {metric.name} scores one probability per "
                            f"text, which a model of {len(self.labels) or 1} outputs lacks")
        return for_logits(metric, len(self.labels))

    # ---------------------------------------------------------------- data
    def dataset(self, x, y=None, sample_weight=None, batch_size: Optional[int] = None,
                shuffle: bool = False, labelled: bool = True) -> tf.data.Dataset:
        """The `tf.data` pipeline Keras' methods get: batches of `(features, label ids,
        weights)` (just features without `labelled`). `x`: texts, a pair `(first_texts,
        second_texts)`, or a dataset whose elements are Keras' `x`, `(x, y)` or `(x, y,
        weight)` with `x` a text or a `(first, second)` pair, batched or not (unbatched
        ones are batched by `batch_size`, default 32). One line for anything else."""
        batch = int(batch_size or BATCH_SIZE)
        if pipeline.holds_features(x):
            return x
        if isinstance(x, tf.data.Dataset):
            _no_columns_beside(y, sample_weight)
            return pipeline.mapped(pipeline.text_batches(x, batch), self.preprocessor,
                                   labelled)
        return pipeline.in_memory(self.preprocessor, x, y if labelled else None,
                                  sample_weight, batch, self.seed if shuffle else None)

    def _class_weight_ids(self, class_weight, training_labels) -> Optional[Dict[int, float]]:
        """Keras' `class_weight` ({id: weight} for every label) of the runner's rule:
        "balanced" (counting `training_labels`: names or ids, or a dataset of text
        batches and labels) or {name or id: weight}; recorded for `save_adapter`."""
        if class_weight is None:
            return None
        counts = {}
        if isinstance(class_weight, str):  # "balanced" counts the training labels
            values = pipeline.dataset_labels(training_labels) if isinstance(
                training_labels, tf.data.Dataset) else training_labels
            ids = None if values is None else label_array(values, len(values), self.labels)
            counts = None if ids is None else {
                name: int(np.sum(ids == i)) for i, name in enumerate(self.labels)}
        self.class_weights = class_weights_for(class_weight, list(self.labels),
                                               not self.labels, counts, name="class_weight")
        return {i: w for i, w in enumerate(self.class_weights.values())}

    # ------------------------------------------------------------- training
    def fit(self, x=None, y=None, batch_size: Optional[int] = None, epochs: int = EPOCHS,
            verbose="auto", callbacks=None, validation_split: float = 0.0,
            validation_data=None, shuffle: bool = True, class_weight=None,
            sample_weight=None, initial_epoch: int = 0, steps_per_epoch=None, **kwargs):
        """Keras' `fit` on texts and labels (see `dataset` for what `x` may be), returning
        Keras' `History`. `epochs` defaults to the runner's 3, not Keras' 1. `class_weight`: "balanced", or {label name or id: weight}, as
        `run_classifier.py --class_weights` weighs the loss (recorded by `save_adapter`).
        Under the runner's optimizer the schedule is planned by each fit: warm-up over
        `warmup_proportion` of the steps from the optimizer's first step to this fit's
        last, then linear decay to 0 there, so a later fit (or `initial_epoch`) continues
        the same optimizer. Learning-rate callbacks need an optimizer of one's own
        (`compile(optimizer=...)`): the schedule sets the rate at every step.
        """
        callbacks = list(callbacks or [])
        check_tf_keras(callbacks, "callbacks", "fit(callbacks=...)")
        if _is_planned(self.optimizer):
            for callback in callbacks:
                if isinstance(callback, _LR_CALLBACKS):
                    raise UserError(
                        f"fit(callbacks=...): {type(callback).__name__} sets the learning "
                        "rate, which the runner's schedule sets at every step: compile("
                        "optimizer=...) with an optimizer of your own to use it")
        if validation_split and validation_data is None:
            if isinstance(x, tf.data.Dataset):
                raise UserError("validation_split needs texts and labels, not a dataset: "
                                "pass validation_data")
            x, y, sample_weight, validation_data = split_off(x, y, sample_weight,
                                                              validation_split)
        self._use_active()
        if isinstance(x, tf.data.Dataset) and not pipeline.holds_features(x):
            _no_columns_beside(y, sample_weight)
            batches = pipeline.text_batches(x, int(batch_size or BATCH_SIZE))
            data = pipeline.mapped(batches, self.preprocessor, labelled=True)
            self.pair = self.pair or pipeline.holds_pairs(x)
            training_labels = batches
        else:
            if y is None and not isinstance(x, tf.data.Dataset):
                raise UserError("fit needs y: a label (name, id or float) for each text")
            batches = data = self.dataset(x, y, sample_weight, batch_size, shuffle)
            self.pair = self.pair or is_pair(x)
            training_labels = y
        if validation_data is not None:
            validation_data = self._validation(validation_data, batch_size)
        class_ids = self._class_weight_ids(class_weight, training_labels)
        steps = steps_per_epoch or pipeline.count_batches(batches)
        if _is_planned(self.optimizer) and steps is not None:
            self._plan(steps * (int(epochs) - int(initial_epoch)))
        return super().fit(data, epochs=epochs, verbose=verbose, callbacks=callbacks,
                           validation_data=validation_data, class_weight=class_ids,
                           initial_epoch=initial_epoch, steps_per_epoch=steps_per_epoch,
                           **kwargs)

    def _plan(self, steps: int) -> None:
        """Plans the runner's schedule to end `steps` after the optimizer's current step."""
        if steps <= 0:
            return
        total = int(self.optimizer.iterations.numpy()) + steps
        choice = choose_optimizer(self.tuning_mode, self._settings["learning_rate"])
        warmup = choice.warmup_steps(int(total * self._settings["warmup_proportion"]), total)
        self.optimizer._learning_rate.plan(total, warmup)  # noqa: SLF001 - its schedule

    def _validation(self, data, batch_size):
        if isinstance(data, tf.data.Dataset):
            return self.dataset(data, batch_size=batch_size)
        if not isinstance(data, tuple) or len(data) not in (2, 3):
            raise UserError("validation_data: expected (texts, labels), (texts, labels, "
                            f"weights) or a tf.data.Dataset, got {type(data).__name__}")
        return self.dataset(*data, batch_size=batch_size)

    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None, **kwargs):
        """Keras' `train_on_batch` on one batch of texts and labels."""
        self._use_active()
        return super().train_on_batch(
            *self._labelled(x, y), sample_weight=sample_weight,
            class_weight=self._class_weight_ids(class_weight, y), **kwargs)

    def test_on_batch(self, x, y=None, sample_weight=None, **kwargs):
        """Keras' `test_on_batch` on one batch of texts and labels."""
        return super().test_on_batch(*self._labelled(x, y), sample_weight=sample_weight,
                                     **kwargs)

    def _labelled(self, x, y):
        texts, second = text_columns(x)
        return (pipeline.features_of(self.preprocessor, texts, second),
                label_array(y, len(texts), self.labels))

    # ----------------------------------------------------------- inference
    def predict(self, x, batch_size: Optional[int] = None, verbose="auto", steps=None,
                callbacks=None, return_labels: bool = False, **kwargs):
        """Keras' `predict`: logits `[N, num_labels]` of texts (`[N, 1]` for regression),
        in their order (`batch_size` default `PREDICT_BATCH_SIZE`); with `return_labels`,
        the predicted label names (floats for regression). Texts in memory run in order of
        length (each batch padded to rows of about its length); a dataset's run as they
        come, and labels and weights in its elements are ignored, as Keras ignores them."""
        batch_size = batch_size or PREDICT_BATCH_SIZE
        if isinstance(x, tf.data.Dataset):
            logits = super().predict(self.dataset(x, batch_size=batch_size, labelled=False),
                                     verbose=verbose, steps=steps, callbacks=callbacks,
                                     **kwargs)
        elif pipeline.is_empty(x):
            logits = np.zeros((0, max(1, len(self.labels))), np.float32)
        else:
            # Texts in memory are predicted in order of length, so that each batch is
            # padded to rows of about its own length, and answered in the texts' order.
            features = pipeline.features_of(self.preprocessor, *text_columns(x))
            order = np.argsort(features["input_mask"].numpy().sum(1), kind="stable")
            data = tf.data.Dataset.from_tensor_slices(
                {key: tf.gather(value, order) for key, value in features.items()})
            in_order = super().predict(pipeline.batched(data, batch_size,
                                                        self.preprocessor.static_shapes),
                                       verbose=verbose,
                                       steps=steps, callbacks=callbacks, **kwargs)
            logits = np.empty_like(in_order)
            logits[order] = in_order
        return self.label_names(logits) if return_labels else logits

    def predict_on_batch(self, x):
        """Keras' `predict_on_batch` on one batch of texts."""
        return super().predict_on_batch(pipeline.features_of(self.preprocessor,
                                                             *text_columns(x)))

    def label_names(self, logits) -> list:
        """The predicted label name of each row of `logits` (floats for regression)."""
        logits = np.asarray(logits)
        if not self.labels:
            return [float(v) for v in logits[:, 0]]
        return [self.labels[i] for i in logits.argmax(-1)]

    def evaluate(self, x=None, y=None, batch_size: Optional[int] = None, verbose="auto",
                 sample_weight=None, steps=None, callbacks=None, return_dict=False, **kwargs):
        """Keras' `evaluate`: the loss and the compiled metrics of texts and labels."""
        return super().evaluate(self.dataset(x, y, sample_weight, batch_size), verbose=verbose,
                                steps=steps, callbacks=callbacks, return_dict=return_dict,
                                **kwargs)

    def report(self, x, y, batch_size: Optional[int] = None) -> dict:
        """The runner's eval_results.txt figures for texts and labels: "loss" and the
        metrics of own data (`metrics.classification`: accuracy, macro_f1, mcc, and with
        two labels precision, recall and f1 of the second; pearson, spearmanr and mse for
        regression), and for classes "per_class" (eval_per_class.tsv's figures)."""
        targets = label_array(y, len(text_columns(x)[0]) if not isinstance(
            x, tf.data.Dataset) else 0, self.labels) if y is not None else None
        if targets is None:
            raise UserError("report needs y: a label (name, id or float) for each text")
        logits = self.predict(x, batch_size=batch_size, verbose=0)
        targets = targets.reshape(-1, 1) if not self.labels else targets
        results = dict(score_logits(logits, targets, "classification" if self.labels
                                    else "regression", not self.labels))
        if self.labels:
            results["per_class"] = {
                name: {"precision": p, "recall": r, "f1": f, "support": n}
                for name, p, r, f, n in per_class_report(logits.argmax(-1), targets,
                                                         self.labels)}
        return results



def _no_columns_beside(y, sample_weight) -> None:
    if y is not None or sample_weight is not None:
        raise UserError("y and sample_weight must be None when x is a dataset: its "
                        "elements hold the labels and weights")


def _model_dtype(dtype: Optional[str], strategy) -> str:
    """The dtype policy a model is built under: Keras' global one (None), or `dtype`
    ("auto": the runner's choice for this machine), said in one line."""
    if dtype is None:
        return keras.mixed_precision.global_policy().name
    resolved, why = resolve_dtype(dtype, strategy=strategy)
    if dtype == "auto":
        logging.info("TextClassifier dtype: %s for this model (dtype=auto: %s)", resolved, why)
    return resolved


def _trains_pooler(network) -> bool:
    bert = getattr(network, "bert", None)
    pooler = getattr(bert, "pooler", None)
    return bool(pooler is not None and pooler.trainable and pooler.trainable_weights)


def _is_planned(optimizer) -> bool:
    """Whether `optimizer` is the runner's, whose schedule each fit plans."""
    return isinstance(getattr(optimizer, "_learning_rate", None), PlannedWarmupDecay)
