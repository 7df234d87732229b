"""SQuAD v1.1 / v2.0 fine-tuning and adapter tuning: the body of run_squad.py.

Flags -> examples -> doc-stride windows -> span model -> fit -> n-best answers ->
`predictions.json` (and `nbest_predictions.json`, v2.0's `null_odds.json`) -> official
scores in `eval_results.txt`, plus the adapter directory. An epoch is one pass over the
windows (Google counts questions; docs/google-compatibility.md). Training questions whose
answer cannot be aligned are counted and skipped. A predict file without answers gets
predictions only.
"""

import json
from typing import Dict, List, Optional, Sequence

import numpy as np
import tf_keras as keras
from absl import logging

from adapter_bert.model.inputs import FEATURE_NAMES
from adapter_bert.adapters.files import read_adapter_config
from adapter_bert.data.squad import (SquadExampleList, convert_examples_to_features,
                                     read_squad_examples)
from adapter_bert.data.squad_postprocess import RawResult, write_predictions
from adapter_bert.command_line import run_config
from adapter_bert.command_line.flag_checks import FlagError
from adapter_bert.command_line.settings import SQUAD
from adapter_bert.command_line.flag_checks import validate_squad
from adapter_bert import io_utils
from adapter_bert.io_utils import atomic_write_text
from adapter_bert.metrics.squad import evaluate_v1, evaluate_v2
from adapter_bert.data.feature_cache import records_digest
from adapter_bert.runners import base
from adapter_bert.training.loop import fit_with_resume

LABEL_KEYS = ("start_positions", "end_positions")
OUTPUT_KEYS = ("start_logits", "end_logits")
HEAD_KIND = "SpanHead"


def task_name(version_2_with_negative: bool) -> str:
    """The task name recorded in adapter files: "squad_v2.0" or "squad_v1.1"."""
    return "squad_v2.0" if version_2_with_negative else "squad_v1.1"


def feature_arrays(features: Sequence, with_labels: bool) -> Dict[str, np.ndarray]:
    """SquadFeature windows (one sequence length) stacked into int32 arrays named as the
    model's inputs, with the gold positions when `with_labels`, and `is_real_example`.
    """
    arrays = {key: np.stack([getattr(f, key) for f in features]).astype(np.int32)
              for key in FEATURE_NAMES}
    if with_labels:
        arrays["start_positions"] = np.asarray([f.start_position for f in features], np.int32)
        arrays["end_positions"] = np.asarray([f.end_position for f in features], np.int32)
    arrays["is_real_example"] = np.ones(len(features), np.int32)
    return arrays


def _labels_by_output_name(inputs, labels):
    # Keras pairs a dict of labels with the model's dict of outputs by key.
    return inputs, {out: labels[lab] for out, lab in zip(OUTPUT_KEYS, LABEL_KEYS)}


def compile_span_model(model, optimizer, steps: int, jit_compile: bool = False) -> None:
    """Compiles the span model with Google's loss: (start CE + end CE) / 2.

    Args:
        model: a `BertSpanModel` (outputs "start_logits" and "end_logits").
        optimizer: the optimizer to train with.
        steps: Keras `steps_per_execution`.
        jit_compile: XLA-compile the train step.
    """
    losses = {key: keras.losses.SparseCategoricalCrossentropy(from_logits=True)
              for key in OUTPUT_KEYS}
    model.compile(optimizer=optimizer, loss=losses,
                  loss_weights={key: 0.5 for key in OUTPUT_KEYS}, steps_per_execution=steps,
                  jit_compile=jit_compile)


def has_gold_answers(examples: SquadExampleList, version_2: bool) -> bool:
    """Whether the file can be scored: every question has an answer (or is unanswerable).

    Raises:
        FlagError: some questions have answers and others do not in a v1.1 run, which
            means a SQuAD 2.0 file read without --version_2_with_negative.
    """
    scoreable = [bool(e.all_answers) or (version_2 and e.is_impossible) for e in examples]
    if all(scoreable):
        return True
    if any(scoreable) and not version_2:
        missing = sum(1 for s in scoreable if not s)
        raise FlagError(f"--predict_file={examples.path}: {missing} of {len(examples)} questions "
                        f"have no answer; for SQuAD 2.0 pass --version_2_with_negative")
    return False


def score_predictions(dataset: dict, predictions: Dict[str, str],
                      null_odds: Optional[Dict[str, float]], version_2: bool,
                      null_score_diff_threshold: float) -> Dict[str, float]:
    """Scores predictions (id -> text, "" abstains) against a SQuAD file's parsed JSON
    (`SquadExampleList.dataset`, `load_squad_json`) by the official rules.

    v2.0 uses `null_odds` and `null_score_diff_threshold` (the predictions' own threshold,
    so `exact`/`f1` score predictions.json as written) and adds HasAns/NoAns and
    best-threshold figures; v1.1 returns exact_match and f1.
    """
    if not version_2:
        return dict(evaluate_v1(dataset, predictions))
    return dict(evaluate_v2(dataset, predictions, na_probs=null_odds,
                            na_prob_thresh=null_score_diff_threshold))


def _log_features(examples, features, tokenizer, count: int, at_info: bool = False) -> None:
    """Logs the first `count` windows (tokens, max-context flags, gold span) for debugging,
    at DEBUG level (shown with --verbosity=1), or INFO when `at_info` (--verbose_logging).
    """
    log = logging.info if at_info else logging.debug
    for feature in features[:count]:
        length = int(feature.input_mask.sum())
        tokens = tokenizer.convert_ids_to_tokens(feature.input_ids[:length].tolist())
        log("*** Feature %d: question %r, window %d ***", feature.unique_id,
            examples[feature.example_index].qas_id, feature.doc_span_index)
        log("tokens: %s", " ".join(tokens))
        log("max-context tokens: %d", int(feature.token_is_max_context.sum()))
        if feature.start_position or feature.end_position:
            log("answer: %s", " ".join(tokens[feature.start_position:feature.end_position + 1]))


def _json_value(value):
    """Numbers kept as numbers (the parameter figures arrive as strings)."""
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                pass
    return value


def write_eval_results(output_dir: str, results: Dict[str, object]) -> None:
    """Writes eval_results.txt (`key = value`, sorted) and eval_results.json."""
    base.write_results(io_utils.join(output_dir, "eval_results.txt"), results)
    as_json = {key: _json_value(results[key]) for key in sorted(results)}
    atomic_write_text(io_utils.join(output_dir, "eval_results.json"),
                      json.dumps(as_json, indent=2) + "\n")


class SquadRun(base.TaskRun):
    """One invocation of run_squad.py, configured from parsed flags."""

    HEAD = "span"
    UNTRAINED = "predicting with the pretrained model and an untrained head"
    # The span head reads the sequence output, never the pooler: it is not trained.
    train_pooler = "false"

    def validate_flags(self, flag_values) -> None:
        validate_squad(flag_values)
        self.version_2 = bool(flag_values.version_2_with_negative)
        self.task = task_name(self.version_2)

    def read_data(self) -> None:
        # The data is read before the model is built, so a bad file fails fast.
        values = self.flags
        self.train_examples = self._read(values.train_file, True) if values.do_train else None
        self.predict_examples = self._read(values.predict_file, False) \
            if values.do_predict else None
        self.scoreable = bool(self.predict_examples) and \
            has_gold_answers(self.predict_examples, self.version_2)

    # ----------------------------------------------------------------- data
    def _read(self, path: str, is_training: bool) -> SquadExampleList:
        examples = read_squad_examples(path, is_training, self.version_2)
        if not examples:
            flag = "train_file" if is_training else "predict_file"
            if not examples.num_answer_mismatches:
                raise FlagError(f"--{flag}={path}: the file holds no questions (every "
                                f"data[].paragraphs[].qas is empty)")
            raise FlagError(f"--{flag}={path}: no usable questions")
        return examples

    def _features(self, examples, is_training: bool):
        values = self.flags
        key = {"examples": records_digest(examples), "is_training": is_training,
               "max_seq_length": values.max_seq_length, "doc_stride": values.doc_stride,
               "max_query_length": values.max_query_length}
        features = self.pipeline.cached_features(
            "squad-train" if is_training else "squad-predict", key,
            lambda: convert_examples_to_features(
                examples, self.backbone.tokenizer, values.max_seq_length, values.doc_stride,
                values.max_query_length, is_training))
        if not features:
            raise FlagError(f"{examples.path}: no question could be turned into a window")
        _log_features(examples, features, self.backbone.tokenizer,
                      20 if values.verbose_logging else 3, at_info=values.verbose_logging)
        return features

    # ------------------------------------------------------------- training
    def train(self) -> Dict[str, object]:
        """Trains on --train_file; returns the figures for eval_results (global_step, ...)."""
        values = self.flags
        features = self._features(self.train_examples, True)
        stats = self._training_data_report(features)
        arrays = feature_arrays(features, with_labels=True)
        schedule, spe = base.training_schedule(values, len(features), self.static_shapes)
        logging.info("***** Training: %d questions, %d windows, batch %d, %d steps (%d warmup) "
                     "*****", len(self.train_examples), len(features), values.train_batch_size,
                     schedule.num_train_steps, schedule.num_warmup_steps)
        with self.strategy.scope():
            optimizer = base.run_optimizer(values, schedule, self.model)
            compile_span_model(self.model, optimizer, spe, self.pipeline.jit_compile)
        batches = self.pipeline.training_data(arrays, FEATURE_NAMES, LABEL_KEYS,
                                              values.train_batch_size,
                                              schedule.num_train_steps, values.seed)

        def dataset():
            return batches().map(_labels_by_output_name)

        logs = fit_with_resume(self.model, optimizer, dataset, schedule.num_train_steps,
                               values.output_dir, values.save_checkpoints_steps,
                               write_dir=self.write_dir)
        self.save_trained_adapter(self.task, None)
        stats.update(global_step=int(logs["global_step"]))
        if "loss" in logs:
            stats["train_loss"] = logs["loss"]
        return stats

    def _training_data_report(self, features) -> Dict[str, int]:
        """Counts (and logs) the training questions kept, skipped and inexactly aligned."""
        stats = {
            "train_questions": len(self.train_examples) - features.num_unalignable,
            "train_windows": len(features),
            "train_skipped_answer_start_mismatch": self.train_examples.num_answer_mismatches,
            "train_skipped_unalignable": features.num_unalignable,
            "train_inexact_alignment": features.num_inexact,
        }
        skipped = stats["train_skipped_answer_start_mismatch"] + stats["train_skipped_unalignable"]
        if skipped:
            logging.warning("Skipped %d training questions whose answer cannot be aligned "
                            "(%d answer_start mismatches, %d overlapping no token)", skipped,
                            stats["train_skipped_answer_start_mismatch"],
                            stats["train_skipped_unalignable"])
            print(f"skipped training questions: {skipped}", flush=True)
        return stats

    def load_checked_adapter(self, path: str) -> Dict:
        head = read_adapter_config(path).get("head")
        if head not in (None, HEAD_KIND):
            raise FlagError(f"--load_adapter={path} holds a {head}, not a SQuAD span head")
        return super().load_checked_adapter(path)

    # ----------------------------------------------------------- inference
    def span_logits(self, features) -> Dict[str, np.ndarray]:
        """Start/end logits [num_windows, T] for every window, in order."""
        return self.pipeline.predict(self.model, feature_arrays(features, with_labels=False),
                                     FEATURE_NAMES, self.flags.predict_batch_size,
                                     per_token_outputs=OUTPUT_KEYS, label="predict")

    def predict(self) -> Dict[str, object]:
        """Predicts --predict_file, writes the prediction files, scores them if possible."""
        values = self.flags
        examples = self.predict_examples
        features = self._features(examples, False)
        logging.info("***** Predicting: %d questions, %d windows, batch %d *****",
                     len(examples), len(features), values.predict_batch_size)
        logits = self.span_logits(features)
        results = [RawResult(f.unique_id, logits["start_logits"][i], logits["end_logits"][i])
                   for i, f in enumerate(features)]
        predictions, null_odds = write_predictions(
            examples, features, results, values.n_best_size, values.max_answer_length,
            self.version_2, values.null_score_diff_threshold, self.write_dir)
        logging.debug("Wrote predictions for %d questions to %s", len(predictions),
                     self.write_dir)
        figures: Dict[str, object] = {"predict_questions": len(examples),
                                      "predict_windows": len(features)}
        if self.scoreable:
            figures.update(score_predictions(examples.dataset, predictions, null_odds,
                                             self.version_2, values.null_score_diff_threshold))
        else:
            logging.info("%s has no gold answers: predictions written, nothing scored",
                         values.predict_file)
        return figures


def _print_scores(results: Dict[str, object], keys: List[str]) -> None:
    for key in sorted(keys):
        print(f"{key} = {results[key]}", flush=True)


def main(flag_values, strategy=None) -> int:
    """Runs the requested steps (train / predict) and writes the outputs; returns 0. Bad
    input raises a `UserError` (run_cli prints its one line). `flag_values`: the run's
    configuration (`command_line.run_config.RunConfig`, or parsed absl flags, made into
    one).
    """
    return base.run_task(SquadRun, run_config.of(flag_values, SQUAD), strategy, _run_steps,
                         _export)


def _export(run: "SquadRun", export_dir: str) -> str:
    from adapter_bert.serving.squad import export_squad_run  # only when exporting
    return export_squad_run(run, export_dir)


def _run_steps(run: SquadRun, flag_values) -> None:
    """Train and predict as the flags ask; outputs go to the run's write_dir."""
    results: Dict[str, object] = {}
    if flag_values.do_train:
        results.update(run.train())
    else:
        results["global_step"] = run.restore_trained_weights()
    if flag_values.do_predict:
        figures = run.predict()
        results.update(figures)
        results.update(run.param_results)
        write_eval_results(run.write_dir, results)
        _print_scores(results, [k for k in figures if not k.startswith("predict_")])
        if run.role.is_chief:
            print(f"predictions: {io_utils.join(run.write_dir, 'predictions.json')}",
                  flush=True)
