"""Steps shared by the GLUE and SQuAD runners: backbone, model, outputs, errors."""

import dataclasses
import os
import sys
from typing import Callable, Dict, Optional

import tensorflow as tf
from absl import logging

from adapter_bert.adapter_files import AdapterFileError, adapter_config_of
from adapter_bert.checkpoints import (BackboneFiles, CheckpointError, build_model, load_weights,
                                      read_weights, resolve_backbone)
from adapter_bert.config import AdapterConfig, BertConfig, ConfigError
from adapter_bert.flags import FlagError, was_set
from adapter_bert.io_utils import atomic_write_text, remove_stale_temporaries
from adapter_bert.tokenization import (TokenizerError, check_vocab_matches_config, load_tokenizer,
                                       validate_case_matches_checkpoint)
from adapter_bert.distribute import get_strategy, static_shapes_required
from adapter_bert.optimization import choose_optimizer, create_optimizer
from adapter_bert.training import (TrainingError, TrainSchedule, set_dtype_policy, set_seed,
                                   steps_per_execution)
from adapter_bert.tuning import (apply_tuning, parameter_report, parameter_summary,
                                  pooler_is_untrained)

# Errors that describe bad input or a failed run: shown as one line, exit code 1.
# OSError covers the file system's own refusals (a directory where a file was expected, a
# full disk, no permission): its message names the path.
USER_ERRORS = (FlagError, ConfigError, CheckpointError, TokenizerError, AdapterFileError,
               TrainingError, OSError, ValueError)


@dataclasses.dataclass
class Backbone:
    """The pretrained network a run starts from."""

    files: BackboneFiles
    config: BertConfig
    tokenizer: object


def prepare_backbone(flag_values, max_seq_length: int) -> Backbone:
    """Resolves checkpoint, config and vocabulary and checks they fit the flags.

    Raises:
        FlagError, CheckpointError, ConfigError, TokenizerError: with a clear message.
    """
    files = resolve_backbone(flag_values.init_checkpoint, flag_values.bert_config_file,
                             flag_values.vocab_file)
    if files.vocab_file is None:
        raise FlagError(f"no vocab.txt beside {files.weights}; pass --vocab_file")
    config = BertConfig.from_json_file(files.config_file)
    if max_seq_length > config.max_position_embeddings:
        raise FlagError(f"Cannot use sequence length {max_seq_length} because the BERT model was "
                        f"only trained up to sequence length {config.max_position_embeddings} "
                        f"(--max_seq_length)")
    validate_case_matches_checkpoint(flag_values.do_lower_case,
                                     flag_values.init_checkpoint or files.weights)
    tokenizer = load_tokenizer(files.vocab_file, flag_values.do_lower_case)
    check_vocab_matches_config(tokenizer, config, files.vocab_file)
    logging.info("Backbone: %s (%s), config %s, vocab %s", files.weights, files.format,
                 files.config_file, files.vocab_file)
    return Backbone(files, config, tokenizer)


def adapter_config_for_run(flag_values) -> Optional[AdapterConfig]:
    """The adapters the run's model gets: from --load_adapter's file, or from the flags.

    Only `--tuning_mode=adapter` inserts adapters; the baselines run on plain BERT.
    `--adapter_type` picks the family (houlsby, pfeiffer, parallel, lora; a ResAdapter
    is a side network, not adapters inside the backbone: None). `--adapter_positions`
    applies when given explicitly; otherwise each family goes to its own place.
    """
    if flag_values.load_adapter:
        return adapter_config_of(flag_values.load_adapter)
    adapter_type = getattr(flag_values, "adapter_type", "houlsby")
    if flag_values.tuning_mode != "adapter" or adapter_type == "resadapter":
        return None
    positions = flag_values.adapter_positions
    if adapter_type != "houlsby" and not was_set(flag_values, "adapter_positions"):
        positions = None
    return AdapterConfig(size=flag_values.adapter_size, activation=flag_values.adapter_activation,
                         init_scale=flag_values.adapter_init_scale, positions=positions,
                         leave_out=[int(i) for i in flag_values.adapter_leave_out],
                         adapter_type=adapter_type,
                         lora_alpha=getattr(flag_values, "lora_alpha", None))


def build_pretrained(model, backbone: Backbone, tuning_mode: str, top_k: Optional[int],
                     train_pooler: str = "false"):
    """Builds `model`, loads the pretrained weights and applies the tuning mode.

    Args:
        train_pooler: "true", "false", or "auto" (train it when the checkpoint's pooler
            was never trained; see `tuning.pooler_is_untrained`).
    """
    build_model(model)
    report = load_weights(model, read_weights(backbone.files), source=backbone.files.weights)
    logging.info(report.summary())
    # A side network (ResAdapter) reads a wholly frozen backbone that has no pooler to train.
    frozen_backbone = bool(getattr(model, "frozen_backbone", False))
    has_adapters = bool(model.bert.adapter_config) or frozen_backbone
    mode = tuning_mode if (tuning_mode != "adapter" or has_adapters) else "full"
    pooler = train_pooler == "true"
    if train_pooler == "auto" and mode in ("adapter", "layernorm") and not frozen_backbone \
            and pooler_is_untrained(model):
        pooler = True
        logging.warning("The checkpoint's pooler was never trained (all-zero bias): training it "
                        "with the %s weights. Pass --train_pooler=false to freeze it as the "
                        "original adapter-bert does.", mode)
    apply_tuning(model, mode, top_k, train_pooler=pooler)
    return model


def prepare_run(flag_values, strategy=None):
    """Output directory, seed, determinism, dtype policy and distribution strategy of a run.

    Temporary files of an atomic write that a killed run left behind are removed.
    `--deterministic` turns on TensorFlow's op determinism (process-wide, it stays on):
    together with `--seed`, two runs with the same flags on the same machine and
    software give bit-identical weights and metrics.

    Args:
        flag_values: parsed flags.
        strategy: an existing strategy (a notebook that already connected to a TPU
            passes its own); None builds one from the flags.

    Returns:
        (strategy, static_shapes): static_shapes is True where batches must have fixed
        shapes (TPU).
    """
    prepare_output_dir(flag_values.output_dir)
    for stale in remove_stale_temporaries(flag_values.output_dir):
        logging.info("Removed %s, left by a run killed while writing it", stale)
    set_seed(flag_values.seed)
    if getattr(flag_values, "deterministic", False):
        # With the seed above: same flags, same machine -> bit-identical results.
        tf.config.experimental.enable_op_determinism()
        logging.info("Op determinism enabled (--deterministic) with seed %d", flag_values.seed)
    set_dtype_policy(flag_values.dtype)
    strategy = strategy or get_strategy(
        flag_values.distribution_strategy, flag_values.use_tpu, flag_values.tpu_name,
        flag_values.tpu_zone, flag_values.gcp_project, flag_values.master)
    return strategy, static_shapes_required(strategy)


def build_task_model(strategy, model, backbone: Backbone, flag_values, train_pooler: str):
    """Builds `model` under the strategy with pretrained weights and the run's tuning mode.

    Returns:
        (model, parameter figures for eval_results.txt); the report is printed.
    """
    with strategy.scope():
        build_pretrained(model, backbone, flag_values.tuning_mode, flag_values.top_k_layers,
                         train_pooler)
    return model, report_parameters(model)


def report_parameters(model) -> Dict[str, str]:
    """Logs and prints the parameter report; returns its figures for eval_results.txt."""
    report = parameter_report(model)
    print(report.splitlines()[0], flush=True)
    logging.info("Parameters:\n%s", report)
    summary = parameter_summary(model)
    trainable = sum(t for t, _ in summary.values())
    total = sum(n for _, n in summary.values())
    return {"trainable_params": str(trainable), "all_params": str(total),
            "trainable_percent": f"{100.0 * trainable / total:.4f}"}


def write_results(path: str, results: Dict[str, object]) -> None:
    """Writes `key = value` lines, sorted by key as Google's scripts do, atomically."""
    lines = [f"{key} = {results[key]}" for key in sorted(results)]
    atomic_write_text(path, "\n".join(lines) + "\n")
    logging.info("***** Results (%s) *****", path)
    for line in lines:
        logging.info("  %s", line)


def prepare_output_dir(path: str) -> None:
    """Creates the output directory (FlagError if a file is in the way)."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise FlagError(f"--output_dir={path} exists and is a file, not a directory")
    os.makedirs(path, exist_ok=True)


def run_cli(program: str, main: Callable[[], int]) -> int:
    """Runs `main`, turning input errors into one clear line and exit code 1."""
    try:
        return main() or 0
    except USER_ERRORS as e:
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        # The traceback is for debugging this package, not for the user: --verbosity=1.
        logging.debug("Traceback of the error below:", exc_info=True)
        print(f"{program}: error: {message}", file=sys.stderr, flush=True)
        return 1


def training_schedule(flag_values, num_examples: int, static_shapes: bool):
    """Step counts and Keras steps_per_execution of a training run, from the flags.

    Returns:
        (TrainSchedule, steps_per_execution).
    """
    schedule = TrainSchedule.from_epochs(num_examples, flag_values.train_batch_size,
                                         flag_values.num_train_epochs,
                                         flag_values.warmup_proportion)
    spe = steps_per_execution(flag_values.iterations_per_loop,
                              was_set(flag_values, "iterations_per_loop"), static_shapes,
                              flag_values.save_checkpoints_steps)
    return schedule, spe


def run_optimizer(flag_values, schedule):
    """The run's AdamW (create it under the strategy scope); logs the rate and Adam variant.

    Unset `--learning_rate` / `--adam_bias_correction` (None) take the tuning mode's
    defaults (`optimization.choose_optimizer`).
    """
    choice = choose_optimizer(flag_values.tuning_mode, flag_values.learning_rate,
                              flag_values.adam_bias_correction)
    logging.info(choice.describe())
    return create_optimizer(choice.learning_rate, schedule.num_train_steps,
                            schedule.num_warmup_steps, bias_correction=choice.bias_correction)
