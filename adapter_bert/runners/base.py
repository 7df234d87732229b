"""What every runner shares: `TaskRun` (the set-up order, restore, input pipeline,
adapter saving) and the steps it uses (backbone, run preparation, results, errors).

A runner (`runners.classifier.ClassifierRun`, `runners.squad.SquadRun`) subclasses `TaskRun`
and says only what is its own: how its flags are checked, how its data is read, which
head its model has, and what it trains, evaluates and writes.
"""

import contextlib
import errno
import functools
import os
import sys
import traceback
from typing import Callable, Dict, Optional, Sequence, Tuple

import tensorflow as tf
from absl import logging

import adapter_bert
from adapter_bert.adapters.files import load_trained_weights, save_trained_weights
from adapter_bert.adapters.merging import adapter_merged
from adapter_bert.console import configure_logging
from adapter_bert.errors import UserError
from adapter_bert.data.backbone import Backbone, load_backbone
from adapter_bert.io_utils import (atomic_write_text, makedirs, remove_stale_temporaries)
from adapter_bert.google_checkpoints import cache_root
from adapter_bert.runs import run_lock
from adapter_bert.runners.pipeline import InputPipeline
from adapter_bert.runs.run_record import (check_reused_output_dir, check_same_data,
                                           clear_output_dir, write_record)
from adapter_bert.adapters.task_models import report_parameters
from adapter_bert.runners.task_models import recipe_from_flags
from adapter_bert.training import preemption
from adapter_bert.training.distribute import get_strategy, static_shapes_required, worker_role
from adapter_bert.training.loop import (TrainingCheckpoints, set_seed, steps_per_execution)
from adapter_bert.training.optimizer import choose_optimizer
from adapter_bert.training.recipe import optimizer_for, schedule_for
from adapter_bert.precision import apply_dtype
from adapter_bert import io_utils

# The model's inputs, as both runners feed them, and the adapter directory a training
# run writes into --output_dir.
ADAPTER_DIR = "adapter"

# What a user can fix, shown as one line with exit status 1: the package's `UserError`s, and
# The file system's refusals the user fixes wherever they happen: a full disk or quota, no
# permission, a read-only file system.
_MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM,
                             errno.EROFS})


def is_user_error(error: BaseException, user_paths: Sequence[str] = ()) -> bool:
    """Whether `error` is about the user's input: a `UserError`, or an `OSError` the
    machine's state explains (`_MACHINE_ERRNOS`) or whose file is one of `user_paths` or
    inside one (a directory where a file was expected). Any other `OSError` comes from
    the package's own paths: a bug."""
    if isinstance(error, UserError):
        return True
    if not isinstance(error, OSError):
        return False
    if error.errno in _MACHINE_ERRNOS:
        return True
    named = [io_utils.absolute(str(n)) for n in (error.filename, error.filename2) if n]
    return any(io_utils.is_within(n, io_utils.absolute(str(p)))
               for n in named for p in tuple(user_paths) + _configured_paths() if p)


def _configured_paths() -> Tuple[str, ...]:
    """The folders the user's environment names: the checkpoint cache ($ADAPTER_BERT_CACHE)
    and TFDS's data directory ($TFDS_DATA_DIR)."""
    return (io_utils.dirname(cache_root()),
            os.environ.get("TFDS_DATA_DIR") or io_utils.join("~", "tensorflow_datasets"))


class TaskRun:
    """One invocation of a runner, configured from parsed flags.

    Set-up order, so a bad flag or file fails before anything slow starts: flags, backbone,
    data, run preparation (output directory, seed, dtype, strategy), model. Subclasses
    define `HEAD`, `UNTRAINED` (the warning when nothing is restored), `validate_flags`,
    `read_data`, `num_labels`, `train_pooler` and `load_checked_adapter(path)`.
    """

    HEAD = ""
    UNTRAINED = ""
    num_labels: Optional[int] = None
    # The task's name (set by `validate_flags`): recorded in adapter files, and the name
    # of the run's adapter.
    task: str = "task"
    # What the data implied that a resumed training must keep (`run_record`): set by
    # `read_data` where the data fixes the model's outputs.
    data_record: Optional[Dict[str, object]] = None

    def __init__(self, flag_values, strategy=None, static_shapes: Optional[bool] = None):
        """Checks the flags, reads the data, prepares the run and builds the model.

        `strategy`: an existing one, or None to build one from the flags. `static_shapes`:
        None follows the device (True on TPU); True forces the TPU's input path on any
        device, which is how that path is tested on CPU.
        """
        self.flags = flag_values
        self.validate_flags(flag_values)  # may complete the configuration (self.flags)
        flag_values = self.flags
        # A reused --output_dir trained with other flags stops here, before any loading.
        check_reused_output_dir(flag_values, self.HEAD)
        self.backbone = prepare_backbone(flag_values, flag_values.max_seq_length)
        self.read_data()
        check_same_data(flag_values, self.data_record)  # before any checkpoint is read
        self.strategy, self.static_shapes, self.role, self.lock = prepare_run(
            flag_values, strategy, runner=self.HEAD, data=self.data_record)
        if static_shapes is not None:
            self.static_shapes = bool(static_shapes)
        try:
            recipe = recipe_from_flags(flag_values, self.HEAD, self.num_labels,
                                       self.train_pooler, self.task)
            self.model = recipe.build(self.strategy, self.backbone,
                                      training=bool(flag_values.do_train))
            self.param_results = report_parameters(self.model)
        except BaseException:
            self.close()
            raise

    @property
    def write_dir(self) -> str:
        """Where this process writes its outputs: --output_dir on the chief (and in every
        one-process run), a temporary directory on other workers (`WorkerRole`)."""
        return self.role.write_dir

    def close(self) -> None:
        """Deletes what a non-chief worker wrote and releases the chief's lock on
        --output_dir; call when the run is over."""
        self.role.close()
        if self.lock is not None:
            self.lock.release()

    def validate_flags(self, flag_values) -> None:
        raise NotImplementedError

    def read_data(self) -> None:
        raise NotImplementedError

    @property
    def train_pooler(self) -> str:
        return self.flags.train_pooler

    @functools.cached_property
    def pipeline(self) -> InputPipeline:
        """Features cache, padding, batching and prediction of this run."""
        return InputPipeline.for_run(self.flags, self.backbone, self.static_shapes,
                                     self.strategy, self.write_dir)

    def save_trained_adapter(self, task: str, labels, training=None) -> None:
        """Writes the trained weights into <output_dir>/adapter (see `adapters.files`;
        `training`: how they were trained, recorded with them)."""
        if self.lock is not None:
            self.lock.check()
        save_trained_weights(self.model, io_utils.join(self.write_dir, ADAPTER_DIR), task,
                             labels, self.flags.tuning_mode, training)

    def restore_trained_weights(self) -> int:
        """For eval/predict without training: --load_adapter, else output_dir's checkpoint.

        Returns:
            The restored global step (0 for an adapter directory or nothing restored).
        """
        path = self.flags.load_adapter
        if path:
            description = self.load_checked_adapter(path)
            logging.info("Loaded adapter %s (task %s)", path, description.get("task"))
            return 0
        checkpoints = TrainingCheckpoints(self.model, None, self.flags.output_dir)
        if not checkpoints.restore_latest(expect_partial=True):
            logging.warning("No trained weights in %s and no --load_adapter: %s",
                            self.flags.output_dir, self.UNTRAINED)
            return 0
        return checkpoints.restored_step

    def load_checked_adapter(self, path: str) -> Dict:
        """Loads --load_adapter into the model; runners override it to reject an adapter
        that does not fit the run (FlagError) before or after loading."""
        return load_trained_weights(self.model, path)


def prepare_backbone(flag_values, max_seq_length: int) -> Backbone:
    """The run's backbone from --init_checkpoint, --bert_config_file, --vocab_file and
    --do_lower_case (`load_backbone`)."""
    return load_backbone(flag_values.init_checkpoint, flag_values.bert_config_file,
                         flag_values.vocab_file, flag_values.do_lower_case, max_seq_length)


def prepare_run(flag_values, strategy=None, runner: str = "",
                data: Optional[Dict[str, object]] = None):
    """Output directory, seed, determinism, dtype policy and distribution strategy of a run.

    Removes temporary files a killed atomic write left. `--deterministic` turns on op
    determinism (process-wide), so equal flags on one machine give bit-identical results.
    `strategy` may be a notebook's own (its TPU); `runner` ("classifier", "span") is
    recorded with a training run's flags (`tasks.run_record`).

    Returns (strategy, static_shapes, role, lock): fixed shapes where the device needs them;
    only the chief (`role`) creates, locks (`tasks.run_lock`; None elsewhere) and cleans
    --output_dir. Raises FlagError when another run holds the lock.
    """
    strategy = strategy or get_strategy(
        flag_values.distribution_strategy, flag_values.use_tpu, flag_values.tpu_name,
        flag_values.tpu_zone, flag_values.gcp_project, flag_values.master,
        num_tpu_cores=flag_values.num_tpu_cores if flag_values.was_set("num_tpu_cores")
        else None)
    preemption.reclaim_signals()  # a multi-worker strategy's runtime takes SIGTERM over
    role = worker_role(strategy, flag_values.output_dir)
    lock = None
    if role.is_chief:
        prepare_output_dir(flag_values.output_dir)
        lock = run_lock.acquire(flag_values.output_dir)
        try:
            _prepare_locked_output_dir(flag_values, runner, data)
        except BaseException:
            lock.release()
            raise
    set_seed(flag_values.seed)
    if flag_values.deterministic:
        # With the seed above: same flags, same machine -> bit-identical results.
        tf.config.experimental.enable_op_determinism()
        logging.info("Op determinism enabled (--deterministic) with seed %d", flag_values.seed)
    apply_dtype(flag_values.dtype, strategy=strategy)
    return strategy, static_shapes_required(strategy), role, lock


def _prepare_locked_output_dir(flag_values, runner: str,
                               data: Optional[Dict[str, object]]) -> None:
    """The chief's first writes, under the lock: clearing, the record, stale temporaries."""
    if flag_values.do_train and flag_values.overwrite_output_dir:
        clear_output_dir(flag_values.output_dir)
    if flag_values.do_train:
        write_record(flag_values.output_dir, flag_values, runner, data)
    for stale in remove_stale_temporaries(flag_values.output_dir):
        logging.info("Removed %s, left by a run killed while writing it", stale)


def run_task(run_class, flag_values, strategy, steps: Callable,
             export: Optional[Callable] = None) -> int:
    """A runner's `main`: makes `run_class`'s run, does `steps(run, flag_values)` and with
    --export_dir exports through `export(run, export_dir)` (which imports serving/ only
    then), then
    closes the run; returns 0. The serving extra is checked before training, not after it;
    only the chief exports (other workers of a cluster keep their copies in a temporary
    dir); with --merge_lora the export has LoRA folded into its kernels (restored after)."""
    exporting = bool(flag_values.export_dir)
    if exporting:
        from adapter_bert.serving.export import require_serving_extra
        require_serving_extra()
    run = run_class(flag_values, strategy)
    try:
        steps(run, flag_values)
        if exporting and run.role.is_chief:
            with (adapter_merged(run.model) if flag_values.merge_lora
                  else contextlib.nullcontext()):
                path = export(run, flag_values.export_dir)
            print(f"exported: {path}", flush=True)
        return 0
    finally:
        run.close()


def write_results(path: str, results: Dict[str, object]) -> None:
    """Writes `key = value` lines, sorted by key as Google's scripts do, atomically."""
    lines = [f"{key} = {results[key]}" for key in sorted(results)]
    atomic_write_text(path, "\n".join(lines) + "\n")
    # The runners print the scores on stdout; the log names the file (all lines: debug).
    logging.info("***** Results written to %s *****", path)
    for line in lines:
        logging.debug("  %s", line)


def prepare_output_dir(path: str) -> None:
    """Creates the output directory (the runner's flag validation already refused a file
    in the way; a file created since fails here with the OSError naming the path)."""
    makedirs(path)


def run_cli(program: str, main: Callable[[], int],
            user_paths: Callable[[], Sequence[str]] = tuple) -> int:
    """Runs `main`, turning input errors (`is_user_error`; `user_paths()` gives the paths
    the user named) into one clear line and exit code 1, and anything else into its
    traceback, a line saying it is a bug, and exit code 2.

    Log levels are set first (`console.configure_logging`: TensorFlow's Python INFO
    lines only with --verbosity=1). SIGTERM and SIGINT stop the run cleanly
    (`training.preemption`): one line `<program>: SIGTERM: ...; preempted, run again ...`
    and exit code 128 + the signal number (143 for SIGTERM, 130 for SIGINT)."""
    configure_logging()
    try:
        with preemption.handle_signals():
            return _run_reporting_errors(program, main, user_paths)
    except preemption.Preempted as e:
        logging.debug("Where the run stopped:", exc_info=True)
        print(f"{program}: {e}", file=sys.stderr, flush=True)
        return e.exit_code


def _run_reporting_errors(program: str, main: Callable[[], int],
                          user_paths: Callable[[], Sequence[str]]) -> int:
    try:
        return main() or 0
    except Exception as e:  # noqa: BLE001 - sorted below: the user's input, or a bug
        if not is_user_error(e, user_paths()):
            return _report_bug(program)
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        # The traceback is for debugging this package, not for the user: --verbosity=1.
        logging.debug("Traceback of the error below:", exc_info=True)
        print(f"{program}: error: {message}", file=sys.stderr, flush=True)
        return 1


def _report_bug(program: str) -> int:
    traceback.print_exc()
    print(f"{program}: internal error: this is a bug in adapter-bert "
          f"{adapter_bert.__version__}, not a problem with your input; please report "
          f"it with the traceback above and the command you ran", file=sys.stderr,
          flush=True)
    return 2


def training_schedule(flag_values, num_examples: int, static_shapes: bool):
    """Step counts and Keras steps_per_execution of a training run, from the flags
    (`training.recipe.schedule_for`).

    Returns:
        (TrainSchedule, steps_per_execution).
    """
    choice = optimizer_choice(flag_values)
    schedule = schedule_for(choice, num_examples, flag_values.train_batch_size,
                            flag_values.num_train_epochs, flag_values.warmup_proportion)
    googles = int(schedule.num_train_steps * flag_values.warmup_proportion)
    if schedule.num_warmup_steps != googles:
        logging.info("Warmup: %d steps instead of %d (--warmup_proportion=%g): the peak rate "
                     "%g is above the step ceiling %g, so the rate climbs at that ceiling's "
                     "slope (--adam_bias_correction keeps Google's warmup)",
                     schedule.num_warmup_steps, googles, flag_values.warmup_proportion,
                     choice.peak_rate, choice.step_ceiling)
    spe = steps_per_execution(flag_values.iterations_per_loop,
                              flag_values.was_set("iterations_per_loop"), static_shapes,
                              flag_values.save_checkpoints_steps)
    return schedule, spe


def optimizer_choice(flag_values):
    """The run's rate, Adam variant and epsilon from its flags (`choose_optimizer`)."""
    return choose_optimizer(flag_values.tuning_mode, flag_values.learning_rate,
                            flag_values.adam_bias_correction, flag_values.adam_epsilon,
                            flag_values.adapter_learning_rate)


def run_optimizer(flag_values, schedule, model=None):
    """The run's AdamW (create it under the strategy scope), logged in one line. Unset
    `--learning_rate`, `--adam_bias_correction` and `--adam_epsilon` take the tuning mode's
    defaults (`choose_optimizer`); `--adapter_learning_rate` gives `model`'s adapters their
    own rate.
    """
    choice = optimizer_choice(flag_values)
    logging.info(choice.summary())
    logging.debug("Optimizer details: %s", choice.describe()[len("Optimizer: "):])
    return optimizer_for(choice, schedule, model)
