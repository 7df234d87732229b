"""GLUE fine-tuning and adapter tuning: the body of run_classifier.py.

Flow: flags -> examples -> features -> tf.data -> model -> fit -> predictions ->
metrics -> files (`eval_results.txt`, `test_results.tsv`, the adapter directory).
"""

import collections
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tf_keras as keras
from absl import logging

from adapter_bert.model.inputs import FEATURE_NAMES
from adapter_bert.adapters.files import (load_trained_weights, read_adapter_config,
                                         save_trained_weights)
from adapter_bert.data.features import check_room_for_text, convert_examples_to_features
from adapter_bert.data.glue import GlueDataFileNotFoundError, get_processor, how_to_get_data
from adapter_bert.data.tfds_text import load_glue_examples
from adapter_bert.data.text_files import output_header, tsv_text
from adapter_bert.data.text_task import hold_out_indices
from adapter_bert.command_line import run_config
from adapter_bert.command_line.flag_checks import FlagError
from adapter_bert.command_line.settings import CLASSIFIER
from adapter_bert.command_line.flag_checks import (uses_own_data, validate_classifier,
                                                   with_recorded_task)
from adapter_bert.runners.own_data import own_task
from adapter_bert.runs.run_record import HELD_OUT_ROWS
from adapter_bert.io_utils import atomic_write_text
from adapter_bert.metrics.classification import confusion, per_class_report, score_logits
from adapter_bert.data.feature_cache import records_digest
from adapter_bert.runners import base
from adapter_bert.runs.epoch_selection import (BEST_DIR, STATE, EpochSelection,
                                                epoch_boundaries, read_state,
                                                selectable_metrics)
from adapter_bert.training.loop import fit_with_resume
from adapter_bert.training.objectives import ClassWeightedCrossEntropy, class_weights_for
from adapter_bert import io_utils



class ClassifierRun(base.TaskRun):
    """One invocation of run_classifier.py, configured from parsed flags."""

    HEAD = "classifier"
    UNTRAINED = "evaluating the pretrained model with an untrained head"

    # The runner's one flag check (ablate_adapters.py's run swaps in its own).
    check_flags = staticmethod(validate_classifier)
    # Evaluations show a header and their progress; ablate_adapters.py's run, which
    # evaluates once per span of layers and prints a line for each, turns them off.
    quiet_evaluation = False

    def validate_flags(self, flag_values) -> None:
        task = self.check_flags(flag_values)
        self.flags = flag_values = with_recorded_task(flag_values)
        if uses_own_data(flag_values):
            self.processor = own_task(flag_values)
            self.task = self.processor.task
        else:
            self.task = task
            self.processor = get_processor(task)
        self.is_regression = self.processor.is_regression
        self.held_out_lines = None
        self.kept_epoch: Dict[str, object] = {}
        if not uses_own_data(flag_values):  # your own files say whether they hold pairs
            check_room_for_text(flag_values.max_seq_length, self.processor.pair, FlagError,
                                self.processor.task)
        self.select_metric = self._checked_select_metric(flag_values)

    def _checked_select_metric(self, flag_values) -> str:
        """--select_metric, or the task's main metric; one of the task's metrics or loss."""
        allowed = selectable_metrics(self.processor.metrics)
        chosen = flag_values.select_metric or allowed[0]
        if chosen not in allowed:
            raise FlagError(f"--select_metric={chosen}: {self.processor.task} is scored by "
                            f"{', '.join(allowed)}")
        return chosen

    @property
    def labels(self) -> List[str]:
        """The task's label names in logit order ([] for regression)."""
        return self.processor.get_labels()

    @property
    def num_labels(self) -> int:
        return 1 if self.is_regression else len(self.labels)

    def read_data(self) -> None:
        # Every split the run needs is read now, so a bad dev or test file fails before
        # training rather than after it.
        fraction = self.flags.dev_fraction
        if fraction is not None and uses_own_data(self.flags):
            self.held_out_lines = self.processor.hold_out(fraction, self.flags.seed)
        if fraction is not None and not uses_own_data(self.flags):
            self._examples = self._held_out_glue_dev(fraction)
        else:
            self._examples = {}
        self._features = {}  # split -> (features, count), built or read once per run
        for split in self._splits():
            if split not in self._examples:
                self._examples[split] = self._read_examples(split)
        self.check_data()

    def check_data(self) -> None:
        """The checks of the flags against the data `read_data` read (the sweep runs them
        for every grid point before any trains): two or more labels, room for the texts,
        --class_weights against the labels; sets what the run records of the data."""
        if not self.is_regression and len(self.labels) < 2:
            raise FlagError(f"{self.task}: the training data has {len(self.labels)} label "
                            f"({', '.join(self.labels)}): a classifier needs two or more")
        if uses_own_data(self.flags):  # known now that the files are read
            check_room_for_text(self.flags.max_seq_length, self.processor.pair, FlagError,
                                self.processor.task)
        train = self._examples.get("train")
        self.class_weights = class_weights_for(
            self.flags.class_weights, self.labels, self.is_regression,
            None if train is None else collections.Counter(e.label for e in train))
        target = getattr(self.processor, "target", None)
        self.data_record = {"labels": self.labels,
                            "task_type": "regression" if self.is_regression else "classification",
                            "target": None if target is None else str(target)}

    def _held_out_glue_dev(self, fraction: float) -> Dict[str, list]:
        """--dev_fraction on a GLUE task: a stratified part of its training set becomes
        the dev set the run evaluates (`hold_out_indices`); the task's dev set is unread."""
        train = self._read_examples("train")
        held = hold_out_indices(train, fraction, self.flags.seed, self.is_regression)
        held_set = set(held)
        self.held_out_lines = [train[i].guid for i in held]  # train-<row id>
        return {"train": [e for i, e in enumerate(train) if i not in held_set],
                "dev": [train[i] for i in held]}

    @property
    def eval_splits(self):
        """(split, result prefix) of --do_eval: the task's, or with --dev_fraction the
        held-out rows alone."""
        if self.flags.dev_fraction is not None:
            return (("dev", "eval_"),)
        return self.processor.eval_splits

    def write_held_out_rows(self) -> None:
        """--dev_fraction: lists the held-out rows in dev_fraction_rows.txt (line numbers of
        your --train_file; a GLUE task's example ids)."""
        if self.held_out_lines is not None and self.role.is_chief:
            atomic_write_text(io_utils.join(self.write_dir, HELD_OUT_ROWS),
                              "".join(f"{line}\n" for line in self.held_out_lines))

    # ----------------------------------------------------------------- data
    def _splits(self) -> List[str]:
        """The data splits the requested actions read."""
        splits = ["train"] if self.flags.do_train else []
        if self.flags.do_eval:
            splits += [split for split, _ in self.eval_splits]
        if self.flags.do_predict:
            splits += [split for split, _ in self.processor.test_splits]
        return splits

    def _read_examples(self, split: str):
        if uses_own_data(self.flags):
            examples = self.processor.get_examples(None, split)
        elif self.flags.data_source == "tfds":
            examples = load_glue_examples(self.task, split)
        else:
            try:
                examples = self.processor.get_examples(self.flags.data_dir, split)
            except GlueDataFileNotFoundError as e:
                raise FlagError(f"{e}; {how_to_get_data(self.task, self.flags.data_dir)}") from e
        if not examples:
            raise FlagError(f"the {split} split of {self.task} has no examples")
        return examples

    def features(self, split: str) -> Tuple[Dict[str, np.ndarray], int]:
        # An ablation evaluates dev once per cell: its features come from memory.
        if split not in self._features:
            self._features[split] = self._split_features(split)
        return self._features[split]

    def _split_features(self, split: str) -> Tuple[Dict[str, np.ndarray], int]:
        examples = self._examples[split]
        key = {"task": self.task, "split": split, "examples": records_digest(examples),
               "labels": list(self.labels), "max_seq_length": self.flags.max_seq_length}
        features = self.pipeline.cached_features(
            f"{self.task}-{split}", key,
            lambda: convert_examples_to_features(examples, self.labels,
                                                 self.flags.max_seq_length,
                                                 self.backbone.tokenizer, self.is_regression,
                                                 label=f"tokenise {split}"))
        if self.is_regression:
            features["label_ids"] = features["label_ids"].reshape(-1, 1)
        return features, len(examples)

    # ------------------------------------------------------------- training
    def train(self) -> Dict[str, float]:
        flag_values = self.flags
        features, count = self.features("train")
        schedule, spe = base.training_schedule(flag_values, count, self.static_shapes)
        logging.info("***** Training: %d examples, batch %d, %d steps (%d warmup) *****", count,
                     flag_values.train_batch_size, schedule.num_train_steps,
                     schedule.num_warmup_steps)
        with self.strategy.scope():
            optimizer = base.run_optimizer(flag_values, schedule, self.model)
            self.model.compile(optimizer=optimizer, loss=self._loss(), steps_per_execution=spe,
                               jit_compile=self.pipeline.jit_compile)
        dataset = self.pipeline.training_data(features, FEATURE_NAMES, ["label_ids"],
                                              flag_values.train_batch_size,
                                              schedule.num_train_steps, flag_values.seed)
        callbacks = []
        if flag_values.eval_every_epoch:
            callbacks.append(EpochSelection(
                optimizer, epoch_boundaries(count, flag_values.train_batch_size,
                                            flag_values.num_train_epochs,
                                            schedule.num_train_steps),
                self.select_metric, self._score_selection_split, self._save_weights,
                self.write_dir))
        logs = fit_with_resume(self.model, optimizer, dataset, schedule.num_train_steps,
                               flag_values.output_dir, flag_values.save_checkpoints_steps,
                               extra_callbacks=callbacks, write_dir=self.write_dir)
        if flag_values.eval_every_epoch:
            self._restore_kept_epoch(flag_values.num_train_epochs)
        self.save_trained_adapter(self.task, self.labels, self.training_record)
        return logs

    def _score_selection_split(self) -> Dict[str, float]:
        split, _ = self.eval_splits[0]
        return self.score_split(split, label=None)

    def _save_weights(self, directory: str) -> None:
        save_trained_weights(self.model, directory, self.task, self.labels,
                             self.flags.tuning_mode, self.training_record)

    def _restore_kept_epoch(self, epochs: float) -> None:
        """--eval_every_epoch: the best epoch's weights back into the model."""
        state = read_state(self.write_dir)
        kept = state and state.get("kept")
        if not kept:
            return
        load_trained_weights(self.model, io_utils.join(self.write_dir, BEST_DIR))
        logging.info("Kept epoch %d of %g (%s %.4f); every epoch's score: %s", kept["epoch"],
                     epochs, self.select_metric, kept["value"],
                     io_utils.join(self.write_dir, STATE))
        self.kept_epoch = {"kept_epoch": kept["epoch"], "kept_epoch_step": kept["step"]}

    def _loss(self):
        # The training loss; `metrics.classification.mean_loss` is the same loss,
        # unweighted, for evaluation.
        if self.is_regression:
            return keras.losses.MeanSquaredError()
        if self.class_weights:
            return ClassWeightedCrossEntropy(list(self.class_weights.values()))
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @property
    def training_record(self) -> Optional[Dict[str, object]]:
        """What the adapter records of how it was trained (`adapters.files.describe`): the
        sequence length and class weights; for a regression on your own data its task type
        and target column, so that evaluating, predicting and exporting with it need no
        --task_type."""
        record: Dict[str, object] = {"max_seq_length": int(self.flags.max_seq_length)}
        if self.class_weights:
            record["class_weights"] = self.class_weights
        if uses_own_data(self.flags) and self.processor.pair:
            record["pair"] = True  # read back by TextClassifier.from_adapter
        if self.is_regression and uses_own_data(self.flags):
            target = getattr(self.processor, "target", None)
            record.update(task_type="regression",
                          target=None if target is None else str(target))
        return record or None

    def load_checked_adapter(self, path: str) -> Dict:
        # The label sets are compared before loading: a head for another number of labels
        # would otherwise fail on a weight's shape, without saying why.
        description = read_adapter_config(path)
        labels = description.get("labels")
        task = description.get("task")
        if self.task == "ax":  # GLUE's diagnostic set is scored with an MNLI model
            return super().load_checked_adapter(path)
        if labels and list(labels) != list(self.labels):
            raise FlagError(f"--load_adapter={path} was trained for {task or 'another task'} "
                            f"with {len(labels)} labels ({', '.join(map(str, labels))}), but "
                            f"{self.processor.task} has {len(self.labels)} "
                            f"({', '.join(self.labels)}): pass an adapter trained on "
                            f"{self.processor.task}")
        if task and task.lower() != self.task.lower():
            raise FlagError(f"--load_adapter={path} was trained for {task}, not "
                            f"{self.processor.task}: pass an adapter trained on "
                            f"{self.processor.task} (or --task_name={task} if the data is "
                            f"{task}'s)")
        return super().load_checked_adapter(path)

    # ----------------------------------------------------------- inference
    def logits(self, features, count: int, batch_size: int, label: Optional[str] = None) -> np.ndarray:
        return self.pipeline.predict(self.model, features, FEATURE_NAMES, batch_size,
                                     label=label)[:count]

    def score_split(self, split: str, label: Optional[str]) -> Dict[str, float]:
        """The loss and metrics of one labelled split (`label`: its progress display)."""
        return self._scored_split(split, label)[0]

    def _scored_split(self, split: str, label: Optional[str]):
        """(scores, logits, label ids) of one labelled split."""
        features, count = self.features(split)
        log = logging.debug if self.quiet_evaluation or not label else logging.info
        log("***** Evaluating %s: %d examples, batch %d *****", split, count,
            self.flags.eval_batch_size)
        logits = self.logits(features, count, self.flags.eval_batch_size, label)
        label_ids = features["label_ids"][:count]
        return (score_logits(logits, label_ids, self.processor.metrics, self.is_regression),
                logits, label_ids)

    def evaluate(self, global_step: int) -> Dict[str, object]:
        """eval_results.txt's figures; beside them, per split, the per-class report, the
        confusion matrix and each row's prediction (`write_split_report`)."""
        results: Dict[str, object] = {"global_step": global_step}
        for split, prefix in self.eval_splits:
            scores, logits, label_ids = self._scored_split(
                split, None if self.quiet_evaluation else f"eval {split}")
            if prefix == "eval_":
                results["loss"] = scores["loss"]
            for name, value in scores.items():
                results[prefix + name] = value
            if not self.quiet_evaluation:
                write_split_report(self.write_dir, prefix, self._examples[split], logits,
                                   label_ids, self.labels, self.is_regression,
                                   kept_names=self.kept_names)
        results.update(self.param_results)
        results.update(self.kept_epoch)
        return results

    def predict(self) -> List[str]:
        written = []
        for split, filename in self.processor.test_splits:
            features, count = self.features(split)
            logging.info("***** Predicting %s: %d examples, batch %d *****", split, count,
                         self.flags.predict_batch_size)
            logits = self.logits(features, count, self.flags.predict_batch_size,
                                 f"predict {split}")
            path = io_utils.join(self.write_dir, filename)
            atomic_write_text(path, self._prediction_lines(logits, self._examples[split]))
            # main prints the path on stdout.
            logging.debug("Wrote %d predictions to %s", count, path)
            written.append(path)
            if all(e.label is not None for e in self._examples[split]) and \
                    uses_own_data(self.flags):
                written.extend(self._score_test_split(split, logits, features, count))
        return written

    def _score_test_split(self, split: str, logits, features, count: int) -> List[str]:
        """A labelled --test_file is also scored: test_eval_results.txt (eval_results.txt's
        figures with the test_ prefix), test_per_class.tsv and test_confusion.tsv."""
        label_ids = features["label_ids"][:count]
        scores = score_logits(logits, label_ids, self.processor.metrics, self.is_regression)
        path = io_utils.join(self.write_dir, "test_eval_results.txt")
        base.write_results(path, {f"test_{k}": v for k, v in scores.items()})
        write_split_report(self.write_dir, "test_", self._examples[split], logits, label_ids,
                           self.labels, self.is_regression, predictions=False)
        return [path]


    @property
    def kept_names(self) -> List[str]:
        """The --keep_columns' headers in the outputs ([] for GLUE tasks)."""
        return list(getattr(self.processor, "kept_names", []))

    def _prediction_lines(self, logits: np.ndarray, examples) -> str:
        """test_results.tsv: Google's rows of probabilities (GLUE's score), and for your
        own data a header naming the columns (the --keep_columns first) and the predicted
        label name."""
        rows = logits[:, :1] if self.is_regression else tf.nn.softmax(logits, -1).numpy()
        values = [[str(float(p)) for p in row] for row in rows]
        if not uses_own_data(self.flags):
            return tsv_text(None, values)
        width = len(self.kept_names)
        kept = [list((*example.kept, *[""] * width)[:width]) for example in examples]
        header = output_header(self.kept_names, ["score"]) if self.is_regression else \
            output_header(self.kept_names, [], self.labels, ["predicted_label"])
        if not self.is_regression:
            values = [[*row, self.labels[i]] for row, i in zip(values, rows.argmax(-1))]
        return tsv_text(header,
                        [[*k, *row] for k, row in zip(kept, values)])


def write_split_report(directory: str, prefix: str, examples, logits: np.ndarray,
                       label_ids: np.ndarray, labels: List[str], regression: bool,
                       predictions: bool = True, kept_names: Sequence[str] = ()) -> None:
    """Beside eval_results.txt, for the split whose figures start `prefix` ("eval_"):
    `<prefix>predictions.tsv` (each row's id, label, predicted label and probabilities, or
    label and score; left out with `predictions=False`), and for classes
    `<prefix>per_class.tsv` (scikit-learn's classification_report) and
    `<prefix>confusion.tsv` (true label by predicted label). A class the split lacks is
    named in one warning: its recall and F1 are 0 there and pull the macro average down.
    `kept_names`: the --keep_columns, whose values (`InputExample.kept`) lead each row."""
    width = len(kept_names)
    ids = [[*(*example.kept, *[""] * width)[:width], example.guid]
           for example in examples][:len(logits)]
    if regression and not predictions:
        return
    if regression:
        io_utils.atomic_write_text(
            io_utils.join(directory, f"{prefix}predictions.tsv"),
            tsv_text(output_header(kept_names, ["id", "label", "score"]),
                     [[*i, float(t), float(p)]
                      for i, t, p in zip(ids, label_ids[:, 0], logits[:, 0])]))
        return
    probabilities = tf.nn.softmax(logits, -1).numpy()
    predicted = probabilities.argmax(-1)
    if predictions:
        io_utils.atomic_write_text(
            io_utils.join(directory, f"{prefix}predictions.tsv"),
            tsv_text(output_header(kept_names, ["id", "label", "predicted_label"], labels),
                     [[*i, labels[t], labels[p], *(f"{float(v):.6g}" for v in row)]
                      for i, t, p, row in zip(ids, label_ids, predicted, probabilities)]))
    report = per_class_report(predicted, label_ids, labels)
    io_utils.atomic_write_text(
        io_utils.join(directory, f"{prefix}per_class.tsv"),
        tsv_text(["label", "precision", "recall", "f1", "support"],
                 [[name, f"{p:.6g}", f"{r:.6g}", f"{f:.6g}", n]
                  for name, p, r, f, n in report]))
    counts = confusion(predicted, label_ids, len(labels))
    io_utils.atomic_write_text(
        io_utils.join(directory, f"{prefix}confusion.tsv"),
        tsv_text(["true \\ predicted", *labels],
                 [[labels[i], *row] for i, row in enumerate(counts)]))
    absent = [name for name, *_, support in report[:len(labels)] if support == 0]
    if absent:
        logging.warning("The %s set has no row of %s: their recall and F1 are 0 in "
                        "%sper_class.tsv and pull macro-averaged figures down", prefix[:-1],
                        ", ".join(absent), prefix)


def main(flag_values, strategy=None) -> int:
    """Runs the requested steps (train / eval / predict) and writes the outputs.

    Args:
        flag_values: the run's configuration (`command_line.run_config.RunConfig`, or
            parsed absl flags, made into one).
        strategy: an existing `tf.distribute.Strategy` to use instead of building one
            from the flags.
    """
    return base.run_task(ClassifierRun, run_config.of(flag_values, CLASSIFIER), strategy,
                         _run_steps, _export)


def _export(run: "ClassifierRun", export_dir: str) -> str:
    from adapter_bert.serving.export import export_classifier_run  # only when exporting
    return export_classifier_run(run, export_dir)


def _run_steps(run: ClassifierRun, flag_values) -> None:
    """Train, eval and predict as the flags ask; outputs go to the run's write_dir."""
    run.write_held_out_rows()
    if flag_values.do_train:
        global_step = int(run.train()["global_step"])
    else:
        global_step = run.restore_trained_weights()
    if flag_values.do_eval:
        results = run.evaluate(global_step)
        base.write_results(io_utils.join(run.write_dir, "eval_results.txt"), results)
        for key in sorted(results):
            if key.startswith("eval_"):
                print(f"{key} = {results[key]}", flush=True)
    if flag_values.do_predict:
        for path in run.predict():
            if run.role.is_chief:
                print(f"predictions: {path}", flush=True)
