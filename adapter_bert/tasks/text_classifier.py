"""Your own texts in Keras: a classifier whose `fit`, `evaluate` and `predict` take strings.

`TextClassifier.from_pretrained(labels=[...])` builds the network `run_classifier.py`
builds at the same settings, tokenises as the runner does, trains with the runner's recipe
(`training.recipe`, length-bucketed batches) unless compiled with an optimizer of one's
own, evaluates with the runner's own-data metrics, predicts logits or label names, and
`save_adapter` writes the runner's adapter directory. The same texts, labels, seed and
settings give what `run_classifier.py --train_file=...` gives.
"""

from typing import Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf
import tf_keras as keras

from adapter_bert.adapters.api import adapter_config_from
from adapter_bert.adapters.files import (load_trained_weights, read_adapter_config,
                                         save_trained_weights)
from adapter_bert.data.batching import example_lengths, predict_features, training_batch_plan, \
    training_dataset
from adapter_bert.data.features import convert_examples_to_features
from adapter_bert.data.glue import InputExample
from adapter_bert.data.tokenization import checkpoint_lower_case
from adapter_bert.model.checkpoints import resolve_backbone
from adapter_bert.model.config import BertConfig
from adapter_bert.precision import apply_dtype
from adapter_bert.tasks import base, run_lock, settings
from adapter_bert.metrics.classification import per_class_report
from adapter_bert.tasks.classifier import (ClassWeightedCrossEntropy, class_weights_for,
                                           score_logits)
from adapter_bert.tasks.task_models import (adapter_name_for, build_and_tune, new_task_model,
                                            report_parameters)
from adapter_bert.training.distribute import get_strategy
from adapter_bert.training.loop import fit_with_resume, set_seed
from adapter_bert.training.optimizer import choose_optimizer
from adapter_bert.training.recipe import optimizer_for, schedule_for
from adapter_bert.errors import UserError
from adapter_bert import io_utils

INPUT_KEYS = base.INPUT_KEYS
# The runner's defaults (rows of `tasks.settings`), so that a model built with none of the
# arguments trains as `run_classifier.py` does with none of the flags.
SEED = settings.default("seed")
SAVE_CHECKPOINTS_STEPS = settings.default("save_checkpoints_steps")
MAX_SEQ_LENGTH = settings.default("max_seq_length")
BATCH_SIZE = settings.default("train_batch_size")
EPOCHS = settings.default("num_train_epochs")
WARMUP_PROPORTION = settings.default("warmup_proportion")


class TextClassifier(keras.Model):
    """A BERT text classifier (adapters by default) taking raw strings and label names.

    Build it with `from_pretrained` or `from_adapter`; `fit`, `evaluate` and `predict` take
    texts (and `tf.data` datasets of features); called directly it takes the features dict.
    `classifier` is the runner's task model, `labels` the names in logit order (empty for
    regression), `task` the name adapter directories record, `pair` whether it was trained
    on sentence pairs.
    """

    def __init__(self, classifier, backbone: base.Backbone, labels: Sequence[str],
                 max_seq_length: int, task: str, tuning_mode: str, seed: int,
                 name: str = "text_classifier", **kwargs):
        super().__init__(name=name, **kwargs)
        self.classifier = classifier
        self.backbone = backbone
        # Tuples, not lists: Keras would track a list attribute as part of the model.
        self.labels = tuple(labels)
        self.max_seq_length = int(max_seq_length)
        self.task = task
        self.tuning_mode = tuning_mode
        self.seed = int(seed)
        self.pair: Optional[bool] = None
        self._recipe_optimizer = None

    # ------------------------------------------------------------ building
    @classmethod
    def from_pretrained(cls, labels: Optional[Sequence[str]] = None, backbone: Optional[str] = None,
                        *, regression: bool = False, adapter="houlsby",
                        tuning_mode: str = "adapter", task: str = "text_classification",
                        max_seq_length: Optional[int] = None,
                        do_lower_case: Optional[bool] = None,
                        seed: int = SEED, dtype: Optional[str] = "auto",
                        train_pooler: str = "auto", strategy=None) -> "TextClassifier":
        """A classifier on a pretrained backbone, as `run_classifier.py` builds it; prints
        the parameter line.

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
            strategy: a `tf.distribute.Strategy`; None: the runner's default.

        Raises ValueError for missing or repeated labels, or labels with `regression`;
        CheckpointError, ConfigError or TokenizerError for unusable backbone files.
        """
        labels = _checked_labels(labels, regression)
        if tuning_mode == "top_k":
            raise UserError("tuning_mode='top_k' needs a layer count: use run_classifier.py "
                            "--tuning_mode=top_k --top_k_layers=N")
        files = resolve_backbone(backbone)
        if do_lower_case is None:
            found = checkpoint_lower_case(files.weights)
            do_lower_case = True if found is None else found
        if max_seq_length is None:
            limit = BertConfig.from_json_file(files.config_file).max_position_embeddings
            max_seq_length = min(MAX_SEQ_LENGTH, limit)
        bert_files = base.load_backbone(backbone, None, None, do_lower_case, max_seq_length)
        strategy = strategy or get_strategy("auto")
        # The runner's order: seed, dtype, then the model under the strategy's scope.
        set_seed(seed)
        apply_dtype(dtype, strategy=strategy, source="dtype")
        adapter_config = adapter_config_from(adapter) if tuning_mode == "adapter" else None
        with strategy.scope():
            classifier = new_task_model(bert_files.config, "classifier",
                                        1 if regression else len(labels), adapter_config,
                                        adapter_name=adapter_name_for(task))
            build_and_tune(classifier, bert_files, tuning_mode, None, train_pooler)
            model = cls(classifier, bert_files, labels, max_seq_length, task, tuning_mode, seed)
        report_parameters(classifier)
        return model

    @classmethod
    def from_adapter(cls, directory: str, backbone: Optional[str] = None,
                     **kwargs) -> "TextClassifier":
        """The classifier an adapter directory holds (`save_adapter`'s or a run's
        `<output_dir>/adapter`), trained on `backbone` (None: the embedded MiniLM); `kwargs`
        are `from_pretrained`'s settings. AdapterFileError for another kind of directory or
        backbone.
        """
        description = read_adapter_config(directory)
        labels = description.get("labels") or None
        model = cls.from_pretrained(labels, backbone, regression=labels is None,
                                    adapter=description.get("adapter_config"),
                                    task=description.get("task") or io_utils.basename(directory),
                                    **kwargs)
        load_trained_weights(model.classifier, directory)
        return model

    def call(self, inputs, training=None):
        return self.classifier(inputs, training=training)

    # ---------------------------------------------------------------- data
    def features(self, x, y=None) -> Dict[str, np.ndarray]:
        """The runner's features (`input_ids`, `input_mask`, `segment_ids`, `label_ids`) of
        texts `x` (or a pair of equally long lists) and labels `y` (names or ids; floats for
        regression; None: ids 0). ValueError naming the first text or label not as expected.
        """
        texts, second = _texts(x)
        targets = _targets(y, len(texts), self.labels)
        examples = [InputExample(str(i), a, None if second is None else second[i], target)
                    for i, (a, target) in enumerate(zip(texts, targets))]
        features = convert_examples_to_features(examples, list(self.labels), self.max_seq_length,
                                                self.backbone.tokenizer, not self.labels)
        if not self.labels:
            features["label_ids"] = features["label_ids"].reshape(-1, 1)
        return features

    # ------------------------------------------------------------- training
    def fit(self, x=None, y=None, batch_size: int = BATCH_SIZE, epochs: float = EPOCHS,
            verbose=1, callbacks=None, learning_rate: Optional[float] = None,
            warmup_proportion: float = WARMUP_PROPORTION,
            checkpoint_dir: Optional[str] = None, class_weight=None, **kwargs):
        """Trains on texts and labels with the runner's recipe; returns the last logs and
        "global_step". `class_weight`: "balanced", or {label name or id: weight}, as
        `run_classifier.py --class_weights` weighs the loss (recorded by `save_adapter`).

        Unless compiled with an optimizer of one's own, each call trains as one
        `run_classifier.py` run: `int(len(x) / batch_size * epochs)` steps of Google's AdamW
        schedule over the runner's seeded, length-bucketed batches (`learning_rate` None:
        the tuning mode's default). A `tf.data.Dataset` goes to Keras' `fit`.
        `checkpoint_dir` keeps step checkpoints so a stopped fit resumes (None: a temporary
        folder). Raises ValueError for texts or labels not as expected, TrainingError for a
        NaN loss, FlagError when another run holds `checkpoint_dir`.
        """
        if isinstance(x, tf.data.Dataset):
            return super().fit(x, y, batch_size=None, epochs=int(epochs), verbose=verbose,
                               callbacks=callbacks, **kwargs)
        if y is None:
            raise UserError("fit needs y: a label (name, id or float) for each text")
        features = self.features(x, y)
        self.pair = isinstance(x, tuple)
        count = len(features["input_ids"])
        labels = list(self.labels)
        self.class_weights = class_weights_for(
            class_weight, labels, not labels, [InputExample(str(i), "", label=labels[int(k)])
                                               for i, k in enumerate(features["label_ids"])]
            if labels else [], name="class_weight")
        choice = choose_optimizer(self.tuning_mode, learning_rate)
        schedule = schedule_for(choice, count, batch_size, epochs, warmup_proportion)
        optimizer = self._training_optimizer(choice, schedule)
        plan = training_batch_plan(count, batch_size, schedule.num_train_steps, self.seed,
                                   example_lengths(features))
        directory = checkpoint_dir or io_utils.make_scratch_dir("adapter_bert_fit_")
        lock = run_lock.acquire(directory) if checkpoint_dir else None
        try:
            return fit_with_resume(
                self, optimizer,
                lambda: training_dataset(features, plan, INPUT_KEYS, ["label_ids"], True),
                schedule.num_train_steps, directory, SAVE_CHECKPOINTS_STEPS,
                verbose=verbose, extra_callbacks=callbacks or ())
        finally:
            if lock is not None:
                lock.release()
            else:  # the temporary folder this call made
                io_utils.remove_tree(directory)

    def _training_optimizer(self, choice, schedule):
        """The model's own optimizer if the user compiled one; else a fresh recipe."""
        if self._is_compiled and self.optimizer is not self._recipe_optimizer:
            return self.optimizer
        with self.distribute_strategy.scope():
            optimizer = optimizer_for(choice, schedule, self.classifier)
            weights = getattr(self, "class_weights", None)
            loss = (keras.losses.MeanSquaredError() if not self.labels
                    else ClassWeightedCrossEntropy(list(weights.values())) if weights
                    else keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            self.compile(optimizer=optimizer, loss=loss)
        self._recipe_optimizer = optimizer
        return optimizer

    # ----------------------------------------------------------- inference
    def predict(self, x, batch_size: int = 32, verbose=0, return_labels: bool = False,
                **kwargs):
        """Logits `[N, num_labels]` of texts (`[N, 1]` for regression), in their order;
        with `return_labels`, the predicted label names (floats for regression).

        Batches are sorted by length and padded to their longest row, as the runner
        predicts. A `tf.data.Dataset` or features dict goes to Keras' own `predict`.
        """
        if isinstance(x, (tf.data.Dataset, dict)):
            return super().predict(x, batch_size=batch_size, verbose=verbose, **kwargs)
        logits = predict_features(self, self.features(x), INPUT_KEYS, batch_size,
                                  dynamic=True, static_shapes=False, verbose=verbose)
        if not return_labels:
            return logits
        if not self.labels:
            return [float(v) for v in logits[:, 0]]
        return [self.labels[i] for i in logits.argmax(-1)]

    def evaluate(self, x=None, y=None, batch_size: int = 32, verbose=0, **kwargs):
        """The runner's eval_results.txt figures for texts and labels, as a dict: "loss"
        and the metrics of own data (`metrics.classification`: accuracy, macro_f1, mcc,
        and with two labels precision, recall and f1 of the second; pearson, spearmanr
        and mse for regression). A `tf.data.Dataset` goes to Keras' own `evaluate`.
        """
        if isinstance(x, tf.data.Dataset):
            return super().evaluate(x, y, verbose=verbose, **kwargs)
        if y is None:
            raise UserError("evaluate needs y: a label (name, id or float) for each text")
        features = self.features(x, y)
        logits = predict_features(self, features, INPUT_KEYS, batch_size, dynamic=True,
                                  static_shapes=False, verbose=verbose)
        kind = "classification" if self.labels else "regression"
        results = dict(score_logits(logits, features["label_ids"], kind, not self.labels))
        if self.labels:  # eval_per_class.tsv's figures, by label
            results["per_class"] = {
                name: {"precision": p, "recall": r, "f1": f, "support": n}
                for name, p, r, f, n in per_class_report(logits.argmax(-1),
                                                         features["label_ids"], self.labels)}
        return results

    # --------------------------------------------------------------- files
    def save_adapter(self, directory: str) -> str:
        """Writes the adapter directory `run_classifier.py` writes (weights, backbone
        description, task, label names); returns the weights file's path."""
        weights = getattr(self, "class_weights", None)
        return save_trained_weights(self.classifier, directory, self.task,
                                    list(self.labels), self.tuning_mode,
                                    {"class_weights": weights} if weights else None)


def _checked_labels(labels, regression: bool) -> List[str]:
    if regression:
        if labels:
            raise UserError("regression=True takes no labels (one float output)")
        return []
    if labels is None or isinstance(labels, str) or len(labels) < 2:
        raise UserError(f"labels: need a list of two or more label names, got {labels!r}")
    names = [str(label) for label in labels]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UserError(f"labels: {', '.join(repeated)} given more than once")
    return names


def _texts(x):
    """(texts, second texts or None) of `features`' `x`, checked."""
    if isinstance(x, tuple) and len(x) == 2 and not isinstance(x[0], (str, bytes)):
        first, second = _strings(x[0], "x[0]"), _strings(x[1], "x[1]")
        if len(first) != len(second):
            raise UserError(f"x: a sentence pair needs as many second texts as first ones "
                            f"({len(first)} and {len(second)})")
        return first, second
    return _strings(x, "x"), None


def _strings(values, what: str) -> List[str]:
    if isinstance(values, (str, bytes)) or values is None:
        raise UserError(f"{what}: expected a sequence of texts, got {type(values).__name__}")
    values = values.numpy() if isinstance(values, tf.Tensor) else values
    texts = []
    for i, value in enumerate(values):
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if not isinstance(value, str):
            raise UserError(f"{what}[{i}]: expected a text, got {type(value).__name__} "
                            f"{value!r}")
        texts.append(value)
    if not texts:
        raise UserError(f"{what}: no texts")
    return texts


def _targets(y, count: int, labels: Sequence[str]) -> list:
    """Label names (classification) or floats (regression) of `y`; None when no `y`."""
    if y is None:
        return [None] * count
    y = y.numpy() if isinstance(y, tf.Tensor) else y
    values = list(np.asarray(y).reshape(-1)) if isinstance(y, np.ndarray) else list(y)
    if len(values) != count:
        raise UserError(f"y: {len(values)} labels for {count} texts")
    if not labels:
        try:
            return [float(v) for v in values]
        except (TypeError, ValueError):
            raise UserError("y: regression targets must be numbers") from None
    known = set(labels)
    targets = []
    for i, value in enumerate(values):
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and \
                str(value) not in known:
            if not 0 <= value < len(labels):
                raise UserError(f"y[{i}]: label id {value} is not in 0..{len(labels) - 1}")
            value = labels[value]
        value = str(value)
        if value not in known:
            raise UserError(f"y[{i}]: {value!r} is not one of the labels "
                            f"({', '.join(labels)})")
        targets.append(value)
    return targets
