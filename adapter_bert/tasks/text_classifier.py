"""Your own texts in Keras: a classifier whose `fit`, `evaluate` and `predict` take strings.

`TextClassifier.from_pretrained(labels=[...])` builds the network `run_classifier.py`
builds at the same settings, tokenises as the runner does, trains with the runner's recipe
(`training.recipe`, length-bucketed batches) unless compiled with an optimizer of one's
own, evaluates with the runner's own-data metrics, predicts logits or label names, and
`save_adapter` writes the runner's adapter directory. The same texts, labels, seed and
settings give what `run_classifier.py --train_file=...` gives.

It keeps Keras' contract: `fit` takes what `Model.fit` takes (lists, arrays or `tf.data`
datasets of raw strings, validation data, class and sample weights, callbacks seeing each
epoch) and returns a `History`; `compile` takes metric objects; `save("m.keras")` and
SavedModels load back with `tf_keras.models.load_model` once the package is imported.
"""

import math
from typing import Dict, Optional, Sequence

import numpy as np
import tensorflow as tf
import tf_keras as keras

from adapter_bert.model.inputs import FEATURE_NAMES
from adapter_bert.adapters.api import adapter_config_from
from adapter_bert.adapters.files import (load_trained_weights, read_adapter_config,
                                         save_trained_weights)
from adapter_bert.data.batching import (example_lengths, inference_dataset, inference_order,
                                        predict_features, training_batch_plan,
                                        training_dataset)
from adapter_bert.data.features import convert_examples_to_features
from adapter_bert.data.glue import InputExample
from adapter_bert.metrics.classification import per_class_report
from adapter_bert.metrics.keras_metrics import PearsonCorrelation, for_logits
from adapter_bert.model.inputs import FeatureInputs, check_tf_keras
from adapter_bert.tasks.keras_inputs import (checked_labels, holds_features, is_empty,
                                             materialised, refuse_other_arguments, split_off,
                                             label_values, sample_weights, text_columns,
                                             whole_epochs)
from adapter_bert.precision import apply_dtype
from adapter_bert.tasks import base, run_lock, settings
from adapter_bert.tasks.classifier import (ClassWeightedCrossEntropy, class_weights_for,
                                           score_logits)
from adapter_bert.tasks.task_models import ModelRecipe, report_parameters
from adapter_bert.training.distribute import get_strategy
from adapter_bert.training.loop import TrainSchedule, fit_with_resume, set_seed
from adapter_bert.training.optimizer import choose_optimizer
from adapter_bert.training.recipe import optimizer_for
from adapter_bert.errors import UserError
from adapter_bert import io_utils

LABEL_KEY, WEIGHT_KEY = "label_ids", "sample_weight"
# The runner's defaults (rows of `tasks.settings`), so that a model built with none of the
# arguments trains as `run_classifier.py` does with none of the flags.
SEED = settings.default("seed")
SAVE_CHECKPOINTS_STEPS = settings.default("save_checkpoints_steps")
MAX_SEQ_LENGTH = settings.default("max_seq_length")
BATCH_SIZE = settings.default("train_batch_size")
EPOCHS = settings.default("num_train_epochs")
WARMUP_PROPORTION = settings.default("warmup_proportion")


@keras.utils.register_keras_serializable(package="adapter_bert")
class TextClassifier(FeatureInputs, keras.Model):
    """A BERT text classifier (adapters by default) taking raw strings and label names.

    Build it with `from_pretrained` or `from_adapter`; `fit`, `evaluate` and `predict` take
    texts (and `tf.data` datasets of texts or of features); called directly it takes the
    features dict. `classifier` is the runner's task model, `labels` the names in logit
    order (empty for regression), `task` the name adapter directories record, `pair`
    whether it takes sentence pairs.
    """

    # A SavedModel of it is rebuilt by `from_config` (not from its traced functions, which
    # take features, not strings), as Keras' preprocessing layers are.
    _must_restore_from_config = True

    def __init__(self, classifier, backbone: base.Backbone, labels: Sequence[str],
                 max_seq_length: int, task: str, tuning_mode: str, seed: int,
                 name: str = "text_classifier", built_with: Optional[dict] = None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.classifier = classifier
        self.backbone = backbone
        # Tuples, not lists: Keras would track a list attribute as part of the model.
        self.labels = tuple(labels)
        self.max_seq_length = int(max_seq_length)
        self.task = task
        self.tuning_mode = tuning_mode
        self.seed = int(seed)
        self.pair = False
        self.class_weights: Optional[Dict[str, float]] = None
        # from_pretrained's arguments, which `get_config` gives Keras to rebuild the model.
        self._built_with = dict(built_with or {})
        # What `compile` was given. Not tracked by Keras: its metric objects may come from
        # outside the model's strategy scope (`_made_in_scope` compiles copies of them).
        object.__setattr__(self, "_compiled_with", None)

    # ------------------------------------------------------------ building
    @classmethod
    def from_pretrained(cls, labels: Optional[Sequence[str]] = None, backbone: Optional[str] = None,
                        *, regression: bool = False, adapter="houlsby",
                        tuning_mode: str = "adapter", task: str = "text_classification",
                        max_seq_length: Optional[int] = None,
                        do_lower_case: Optional[bool] = None,
                        seed: int = SEED, dtype: Optional[str] = "auto",
                        train_pooler: str = "auto", strategy=None,
                        quiet: bool = False) -> "TextClassifier":
        """A classifier on a pretrained backbone, as `run_classifier.py` builds it; prints
        the parameter line (`quiet`: no line, and no notes about training, for a model
        loaded to predict).

        Args:
            labels: label names in logit order (the runner sorts the training labels); None
                with `regression` (one float output, mean squared error).
            backbone: None (the embedded MiniLM), a checkpoint or a Google release name.
            adapter: a family name, an `AdapterConfig` or its dict (adapter mode).
            tuning_mode: "adapter", "full" or "layernorm".
            task: the name adapter directories record.
            max_seq_length: None: 128, or the backbone's limit if lower.
            do_lower_case: None: as the checkpoint says.
            seed, dtype, train_pooler: `--seed`, `--dtype` ("auto"; None keeps the global
                policy), `--train_pooler`.
            strategy: a `tf.distribute.Strategy`; None: the one in scope, as Keras models
                are built (`with strategy.scope(): TextClassifier.from_pretrained(...)`),
                else the runner's default.

        Raises ValueError for missing or repeated labels, or labels with `regression`;
        CheckpointError, ConfigError or TokenizerError for unusable backbone files.
        """
        labels = checked_labels(labels, regression)
        if tuning_mode == "top_k":
            raise UserError("tuning_mode='top_k' needs a layer count: use run_classifier.py "
                            "--tuning_mode=top_k --top_k_layers=N")
        bert = base.load_backbone(backbone, None, None, do_lower_case, max_seq_length)
        do_lower_case = bert.tokenizer.do_lower_case
        if max_seq_length is None:
            max_seq_length = min(MAX_SEQ_LENGTH, bert.config.max_position_embeddings)
        if strategy is None:  # the one in scope, else the runner's (one device, or GPUs)
            strategy = tf.distribute.get_strategy() if tf.distribute.has_strategy() \
                else get_strategy("auto")
        # The runner's order: seed, dtype, then the model under the strategy's scope.
        set_seed(seed)
        apply_dtype(dtype, strategy=strategy, source="dtype")
        adapter_config = adapter_config_from(adapter) if tuning_mode == "adapter" else None
        built_with = {"labels": labels or None, "backbone": backbone, "regression": regression,
                      "adapter": adapter_config.to_dict() if adapter_config else None,
                      "tuning_mode": tuning_mode, "task": task,
                      "max_seq_length": max_seq_length, "do_lower_case": do_lower_case,
                      "seed": seed, "train_pooler": train_pooler}
        recipe = ModelRecipe("classifier", 1 if regression else len(labels), adapter_config,
                             task=task, tuning_mode=tuning_mode, train_pooler=train_pooler)
        classifier = recipe.build(strategy, bert, training=not quiet)
        with strategy.scope():
            model = cls(classifier, bert, labels, max_seq_length, task, tuning_mode, seed,
                        built_with=built_with)
            # Built now, so that `summary()` and saving work before any fit or predict.
            model({key: np.zeros((1, max_seq_length), np.int32) for key in FEATURE_NAMES})
        if not quiet:
            report_parameters(classifier)
        return model

    @classmethod
    def from_adapter(cls, directory: str, backbone: Optional[str] = None,
                     **kwargs) -> "TextClassifier":
        """The classifier an adapter directory holds (`save_adapter`'s or a run's
        `<output_dir>/adapter`), trained on `backbone` (None: the embedded MiniLM); `kwargs`
        are `from_pretrained`'s settings. Quiet: it prints no parameter line. AdapterFileError
        for another kind of directory or backbone.
        """
        description = read_adapter_config(directory)
        labels = description.get("labels") or None
        kwargs.setdefault("quiet", True)
        model = cls.from_pretrained(labels, backbone, regression=labels is None,
                                    adapter=description.get("adapter_config"),
                                    task=description.get("task") or io_utils.basename(directory),
                                    **kwargs)
        load_trained_weights(model.classifier, directory)
        training = description.get("training") or {}
        model.pair = bool(training.get("pair"))
        model.class_weights = training.get("class_weights")
        return model

    def call(self, inputs, training=None):
        return self.classifier(inputs, training=training)

    def keras_fit(self, *args, **kwargs):
        """Keras' own `fit` on batches of features (what `training.loop` runs)."""
        return super().fit(*args, **kwargs)

    # --------------------------------------------------- Keras' saving contract
    def get_config(self):
        """What `from_config` rebuilds the model from: `from_pretrained`'s arguments (the
        weights come from the saved file) and whether it takes pairs."""
        return {"name": self.name, "built_with": self._built_with, "pair": self.pair}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        model = cls.from_pretrained(**config["built_with"], quiet=True)
        model.pair = bool(config.get("pair"))
        return model

    def save(self, filepath, *args, **kwargs):
        """Keras' `save`: a `.keras` file or a SavedModel folder, which
        `tf_keras.models.load_model` reads back once the package is imported. Neither holds
        the optimizer: `fit` builds the runner's afresh (its schedule depends on the data)."""
        problem = io_utils.write_problem(io_utils.dirname(str(filepath)) or ".")
        if problem:  # before Keras' own writes, which loop on a missing bucket
            raise UserError(f"save: {filepath}: {problem}")
        if not str(filepath).endswith(".keras"):
            kwargs.setdefault("include_optimizer", False)
        return super().save(filepath, *args, **kwargs)

    def get_build_config(self):
        return None  # built by from_config

    def get_compile_config(self):
        # The runner's optimizer is rebuilt by `fit` (its schedule depends on the data): a
        # loaded model is uncompiled, ready to predict or to train again.
        return None

    # ---------------------------------------------------------------- data
    def features(self, x, y=None, sample_weight=None) -> Dict[str, np.ndarray]:
        """The runner's features (`input_ids`, `input_mask`, `segment_ids`, `label_ids`) of
        texts `x` (or a pair of equally long lists) and labels `y` (names or ids; floats for
        regression; None: ids 0), with `sample_weight` (one number per text) if given.
        ValueError naming the first text or label not as expected.
        """
        texts, second = text_columns(x)
        targets = label_values(y, len(texts), self.labels)
        examples = [InputExample(str(i), a, None if second is None else second[i], target)
                    for i, (a, target) in enumerate(zip(texts, targets))]
        features = convert_examples_to_features(examples, list(self.labels), self.max_seq_length,
                                                self.backbone.tokenizer, not self.labels)
        if not self.labels:
            features[LABEL_KEY] = features[LABEL_KEY].reshape(-1, 1)
        if sample_weight is not None:
            features[WEIGHT_KEY] = sample_weights(sample_weight, len(texts))
        return features

    # ------------------------------------------------------------- compiling
    def compile(self, optimizer=None, loss=None, metrics=None, **kwargs):
        """Keras' `compile`. Without an `optimizer`, `fit` trains with the runner's recipe;
        without a `loss`, the runner's (cross-entropy, or mean squared error); metric
        objects need no strategy scope, and one-probability metrics (`AUC`, `Precision`,
        ...) of a two-label model score the second label's probability. A Keras 3 object
        is refused in one line naming its tf_keras equivalent."""
        metrics = list(metrics or [])
        check_tf_keras(optimizer, "optimizers", "compile(optimizer=...)")
        check_tf_keras(loss, "losses", "compile(loss=...)")
        check_tf_keras(metrics, "metrics", "compile(metrics=...)")
        object.__setattr__(self, "_compiled_with", {
            "optimizer": optimizer, "loss": loss, "metrics": metrics, "kwargs": kwargs})
        self._compile(optimizer or "rmsprop")

    def _compile(self, optimizer) -> None:
        """Compiles with `optimizer` and the user's (or the runner's) loss and metrics."""
        given = self._compiled_with or {"loss": None, "metrics": [], "kwargs": {}}
        loss = given["loss"] or self._runner_loss()
        with self.distribute_strategy.scope():  # where Keras wants the metrics made
            metrics = [for_logits(self._made_in_scope(m), len(self.labels))
                       for m in given["metrics"]] or \
                [keras.metrics.SparseCategoricalAccuracy(name="accuracy") if self.labels
                 else PearsonCorrelation()]
            super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **given["kwargs"])

    def _made_in_scope(self, metric):
        """`metric`, or, made outside the model's strategy scope, a fresh one of its config
        made in the scope, as Keras makes a metric named by a string."""
        extended = self.distribute_strategy.extended
        if all(extended.variable_created_in_scope(v) for v in getattr(metric, "variables", ())):
            return metric
        return type(metric).from_config(metric.get_config())

    def _runner_loss(self):
        if not self.labels:
            return keras.losses.MeanSquaredError()
        if self.class_weights:
            return ClassWeightedCrossEntropy(list(self.class_weights.values()))
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    # ------------------------------------------------------------- training
    def fit(self, x=None, y=None, batch_size: Optional[int] = None, epochs: int = int(EPOCHS),
            verbose="auto", callbacks=None, validation_split: float = 0.0,
            validation_data=None, shuffle: bool = True, class_weight=None, sample_weight=None,
            initial_epoch: int = 0, *, learning_rate: Optional[float] = None,
            warmup_proportion: float = WARMUP_PROPORTION, checkpoint_dir: Optional[str] = None,
            **kwargs) -> keras.callbacks.History:
        """Keras' `fit` on texts and labels, with the runner's recipe; returns the `History`
        (`loss`, the main metric, and their `val_` figures given validation data).

        `x`: texts, a pair `(texts, second_texts)`, or a `tf.data.Dataset` of `(text,
        label[, weight])` (a text may be a `(first, second)` pair; batched or not). `y`:
        label names or ids (floats for regression). `validation_data`: `(x, y[, weights])`
        or such a dataset; `validation_split`: the last fraction of `x` instead.
        `class_weight`: "balanced", or {label name or id: weight}, as `run_classifier.py
        --class_weights` weighs the loss (recorded by `save_adapter`); `sample_weight`: a
        weight per text. `shuffle=False` keeps the texts' order.

        An epoch is ceil(len(x) / batch_size) batches of `batch_size` rows (the whole set
        when smaller) from the runner's seeded stream of shuffles, so no row is left out
        for want of a full last batch; when `batch_size` divides the set, the steps and
        batches are `run_classifier.py`'s exactly (`--num_train_epochs=epochs`). Unless
        compiled with an optimizer of one's own, the optimizer is Google's AdamW on the
        runner's schedule (`learning_rate` None: the tuning mode's default).
        `checkpoint_dir` keeps step checkpoints so a stopped fit resumes (None: a temporary
        folder). A dataset of features (`input_ids`, ...) goes to Keras' own `fit` (compile
        first). Raises ValueError for an argument `Model.fit` does not take or data not as
        expected, TrainingError for a NaN loss, FlagError when another run holds
        `checkpoint_dir`.
        """
        refuse_other_arguments("fit", kwargs)
        callbacks = list(callbacks or [])
        check_tf_keras(callbacks, "callbacks", "fit(callbacks=...)")
        verbose = 1 if verbose == "auto" else verbose
        if holds_features(x):
            if not self._is_compiled:
                raise UserError("fit: a dataset of features trains with Keras' own fit: "
                                "compile the model first, or pass texts")
            return super().fit(x, epochs=epochs, verbose=verbose, callbacks=callbacks,
                               validation_data=validation_data, initial_epoch=initial_epoch,
                               class_weight=class_weight)
        x, y, sample_weight = materialised(x, y, sample_weight, "fit")
        if y is None:
            raise UserError("fit needs y: a label (name, id or float) for each text")
        if validation_split and validation_data is None:
            x, y, sample_weight, validation_data = split_off(x, y, sample_weight,
                                                              validation_split)
        features = self.features(x, y, sample_weight)
        self.pair = isinstance(x, tuple)
        labels = list(self.labels)
        self.class_weights = class_weights_for(
            class_weight, labels, not labels, [InputExample(str(i), "", label=labels[int(k)])
                                               for i, k in enumerate(features[LABEL_KEY])]
            if labels else [], name="class_weight")
        count = len(features["input_ids"])
        batch = min(int(batch_size or BATCH_SIZE), count)
        epoch_steps, epochs = math.ceil(count / batch), whole_epochs(epochs, initial_epoch)
        total = epoch_steps * epochs
        choice = choose_optimizer(self.tuning_mode, learning_rate)
        schedule = TrainSchedule(total, choice.warmup_steps(int(total * warmup_proportion),
                                                            total))
        optimizer = self._training_optimizer(choice, schedule)
        optimizer.iterations.assign(initial_epoch * epoch_steps)
        plan = training_batch_plan(count, batch, total, self.seed,
                                   example_lengths(features) if shuffle else None,
                                   shuffle=shuffle)
        weight_key = WEIGHT_KEY if WEIGHT_KEY in features else None
        history = keras.callbacks.History()
        directory = checkpoint_dir or io_utils.make_scratch_dir("adapter_bert_fit_")
        lock = run_lock.acquire(directory) if checkpoint_dir else None
        try:
            fit_with_resume(
                self, optimizer,
                lambda: training_dataset(features, plan, FEATURE_NAMES, [LABEL_KEY], True,
                                         weight_key),
                total, directory, SAVE_CHECKPOINTS_STEPS, verbose=verbose,
                extra_callbacks=[history, *callbacks], epoch_steps=epoch_steps,
                validation_data=self._validation_dataset(validation_data, batch_size))
        finally:
            if lock is not None:
                lock.release()
            else:  # the temporary folder this call made
                io_utils.remove_tree(directory)
        history.epoch = list(range(initial_epoch, initial_epoch + len(history.history.get(
            "loss", []))))
        history.set_model(self)
        self.history = history
        return history

    def _training_optimizer(self, choice, schedule):
        """The user's compiled optimizer, else a fresh one of the runner's recipe; the model
        compiled with it."""
        given = self._compiled_with and self._compiled_with["optimizer"]
        if given is not None and not isinstance(given, str):
            optimizer = given
        elif given:
            optimizer = keras.optimizers.get(given)
            self._compiled_with["optimizer"] = optimizer  # one optimizer over the fits
        else:
            with self.distribute_strategy.scope():
                optimizer = optimizer_for(choice, schedule, self.classifier)
        self._compile(optimizer)
        return optimizer

    def _validation_dataset(self, data, batch_size: Optional[int]):
        """Keras' validation batches (inputs, labels[, weights]) of `validation_data`."""
        if data is None or holds_features(data):
            return data
        if isinstance(data, tf.data.Dataset):
            x, y, weights = materialised(data, None, None, "validation_data")
        elif isinstance(data, tuple) and len(data) in (2, 3):
            x, y, weights = (*data, None)[:3]
        else:
            raise UserError("validation_data: expected (texts, labels), (texts, labels, "
                            f"weights) or a tf.data.Dataset, got {type(data).__name__}")
        features = self.features(x, y, weights)
        return inference_dataset(features, FEATURE_NAMES, int(batch_size or BATCH_SIZE),
                                 inference_order(features, True), True,
                                 label_keys=[LABEL_KEY],
                                 weight_key=WEIGHT_KEY if weights is not None else None)

    # ----------------------------------------------------------- inference
    def predict(self, x, batch_size: int = 32, verbose=0, return_labels: bool = False,
                **kwargs):
        """Logits `[N, num_labels]` of texts (`[N, 1]` for regression), in their order;
        with `return_labels`, the predicted label names (floats for regression). `x`:
        texts, a pair of lists, or a `tf.data.Dataset` of texts (or of `(text, ...)`
        tuples, whose other parts are ignored as Keras does); no texts give no rows.

        Batches are sorted by length and padded to their longest row, as the runner
        predicts. A features dict or dataset of features goes to Keras' own `predict`.
        """
        if isinstance(x, dict) or holds_features(x):
            return super().predict(x, batch_size=batch_size, verbose=verbose, **kwargs)
        refuse_other_arguments("predict", kwargs, allowed=("callbacks", "steps"))
        x, _, _ = materialised(x, None, None, "predict")
        if is_empty(x):
            outputs = max(1, len(self.labels))
            return [] if return_labels else np.zeros((0, outputs), np.float32)
        logits = predict_features(self, self.features(x), FEATURE_NAMES, batch_size,
                                  dynamic=True, static_shapes=False, verbose=verbose)
        if not return_labels:
            return logits
        if not self.labels:
            return [float(v) for v in logits[:, 0]]
        return [self.labels[i] for i in logits.argmax(-1)]

    def evaluate(self, x=None, y=None, batch_size: int = 32, verbose=0, sample_weight=None,
                 **kwargs):
        """The runner's eval_results.txt figures for texts and labels (or a dataset of
        `(text, label)`), as a dict: "loss" and the metrics of own data
        (`metrics.classification`: accuracy, macro_f1, mcc, and with two labels precision,
        recall and f1 of the second; pearson, spearmanr and mse for regression), and
        "per_class". A dataset of features goes to Keras' own `evaluate`.
        """
        if holds_features(x):
            return super().evaluate(x, y, verbose=verbose, sample_weight=sample_weight,
                                    **kwargs)
        refuse_other_arguments("evaluate", kwargs, allowed=("callbacks", "steps",
                                                             "return_dict"))
        x, y, _ = materialised(x, y, None, "evaluate")
        if y is None:
            raise UserError("evaluate needs y: a label (name, id or float) for each text")
        features = self.features(x, y)
        logits = predict_features(self, features, FEATURE_NAMES, batch_size, dynamic=True,
                                  static_shapes=False, verbose=verbose)
        kind = "classification" if self.labels else "regression"
        results = dict(score_logits(logits, features[LABEL_KEY], kind, not self.labels))
        if self.labels:  # eval_per_class.tsv's figures, by label
            results["per_class"] = {
                name: {"precision": p, "recall": r, "f1": f, "support": n}
                for name, p, r, f, n in per_class_report(logits.argmax(-1),
                                                         features[LABEL_KEY], self.labels)}
        return results

    # --------------------------------------------------------------- files
    def save_adapter(self, directory: str, name: Optional[str] = None,
                     task: Optional[str] = None, labels: Optional[Sequence[str]] = None) -> str:
        """Writes the adapter directory `run_classifier.py` writes (weights, backbone
        description, task, label names, and how it was trained); returns the weights
        file's path. `name`: its adapter (default: the one it trains); `task` (default the
        model's) names it; `labels`, if given, must be the model's.
        """
        if labels is not None and list(labels) != list(self.labels):
            raise UserError(f"save_adapter: labels {list(labels)} are not the model's "
                            f"{list(self.labels)}")
        training = {"class_weights": self.class_weights, "pair": self.pair or None}
        return save_trained_weights(self.classifier, directory, task or self.task,
                                    list(self.labels), self.tuning_mode,
                                    {k: v for k, v in training.items() if v} or None, name)
