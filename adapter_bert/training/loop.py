"""Training and inference plumbing shared by the GLUE and SQuAD runners.

- `fit_with_resume`: Keras `fit` for a fixed number of steps, saving a checkpoint every
  `save_checkpoints_steps` and resuming from the latest one that reads when run again,
  with TensorBoard logs, a clear stop on a NaN loss, and a checkpoint at the step in
  flight when SIGTERM or SIGINT stops it (`preemption`).
- `TrainingCheckpoints`: those checkpoints; an unreadable one is named in a warning and
  the one before it restored, a save that fails is one `WriteError` naming it.
- `KerasProgress`: training steps and prediction batches as an `adapter_bert.progress`
  display (a bar in a terminal, a line per tenth in a log file).

Batching (which examples form a batch, dynamic padding) lives in `batching`.
"""

import dataclasses
import re
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf
import tf_keras as keras
from absl import logging

from adapter_bert import io_utils
from adapter_bert.io_utils import WriteError, atomic_write_text, error_reason, folders
from adapter_bert.errors import CheckpointError, describe_read_error
from adapter_bert.model.naming import tf1_variables
from adapter_bert.adapters.tuning import trained_weights
from adapter_bert.progress import Progress
from adapter_bert.training import preemption
from adapter_bert.errors import UserError


class TrainingError(UserError, RuntimeError):
    """Training cannot go on (e.g. the loss became NaN)."""


def set_seed(seed: int) -> None:
    """Seeds Python, NumPy and TensorFlow (initialisers, shuffling, dropout).

    Dropout then draws from `tf.random.Generator`s (Keras' "tf random generator"),
    whose states are variables: `TrainingCheckpoints` saves them, so a resumed run
    draws the same masks as an uninterrupted one. Call it before building the model.
    """
    keras.backend.experimental.enable_tf_random_generator()
    keras.utils.set_random_seed(int(seed))


def _random_generators(model):
    """The tf.random.Generators of the model's dropout layers, created now, in a stable
    order.

    Keras creates a generator at a layer's first draw, so a dropout that draws only in
    training would be missing from a checkpoint made before the first step, and a resumed
    run would restart its stream. Created here, under the strategy, in tracing order.
    """
    generators = []
    with model.distribute_strategy.scope():
        for layer in model.submodules:
            # Keras keeps a layer's generator in this private slot (see `set_seed`).
            random_generator = getattr(layer, "_random_generator", None)
            if random_generator is None:
                continue
            random_generator._maybe_init()
            generator = getattr(random_generator, "_generator", None)
            if isinstance(generator, tf.random.Generator):
                generators.append(generator)
    return generators


@dataclasses.dataclass
class TrainSchedule:
    """Step counts of a run, computed as Google's scripts do."""

    num_train_steps: int
    num_warmup_steps: int

    @classmethod
    def from_epochs(cls, num_examples: int, batch_size: int, epochs: float,
                    warmup_proportion: float) -> "TrainSchedule":
        steps = int(num_examples / batch_size * epochs)
        if steps < 1:
            raise TrainingError(f"{num_examples} examples at batch size {batch_size} for "
                                f"{epochs} epochs make no training step")
        return cls(steps, int(steps * warmup_proportion))


class TrainingCheckpoints:
    """Step checkpoints of the trainable weights and the optimizer, in
    `output_dir/checkpoints`.

    Frozen weights always come from the pretrained checkpoint, so adapter checkpoints stay
    small. `tf.train.CheckpointManager` lists a checkpoint only once its files are whole;
    a listed one that does not read is named in a warning and the newest readable one is
    restored (`restore_latest`).
    """

    def __init__(self, model, optimizer, output_dir: str, max_to_keep: int = 5,
                 write_dir: Optional[str] = None):
        """`optimizer` may be None to read only the weights (evaluation).

        `write_dir` (default `output_dir`): where `save` writes. A multi-worker run's
        non-chief workers save into a temporary directory (every worker must save, only
        the chief's copy is kept) and restore from the chief's `output_dir`.
        """
        names = tf1_variables(model)
        # Trainable weights plus the state they train with (BatchNorm moving statistics).
        trainable = {id(v) for v in trained_weights(model)}
        # tf.train.Checkpoint keys may not contain "/", so TF1 names are escaped.
        tracked = {name.replace("/", "."): v for name, v in names.items() if id(v) in trainable}
        self.trained = list(tracked.values())
        if optimizer is not None:
            tracked["optimizer"] = optimizer
            for index, generator in enumerate(_random_generators(model)):
                tracked[f"dropout_rng_{index}"] = generator
        self.checkpoint = tf.train.Checkpoint(**tracked)
        self.directory = io_utils.join(output_dir, "checkpoints")
        self.write_directory = io_utils.join(write_dir or output_dir, "checkpoints")
        self.max_to_keep = max_to_keep
        self.training = optimizer is not None
        self._manager = None
        self.restored_step = 0
        self.status = None

    @property
    def manager(self) -> tf.train.CheckpointManager:
        """The manager of `write_directory`, created when first needed (after
        `restore_latest` has repaired the state file it reads)."""
        if self._manager is None:
            self._manager = tf.train.CheckpointManager(self.checkpoint, self.write_directory,
                                                       self.max_to_keep)
        return self._manager

    def settle(self) -> None:
        """Marks what the last restore has not matched yet (optimizer slots, created only by
        a training step) as expected: a run that takes no step then ends without one
        "Value in checkpoint could not be found" warning per slot."""
        if self.status is not None:
            self.status.expect_partial()

    def restore_latest(self, expect_partial: bool = False) -> Optional[str]:
        """Restores the newest checkpoint that reads, if any, and returns its path.

        Unreadable newer ones are named in one warning, and a training run then lists the
        restored one as the latest. `expect_partial`: the caller tracks only part of what
        was saved (no optimizer when evaluating). Raises CheckpointError when none reads.
        """
        candidates, state_problem = self._candidates()
        if state_problem:
            logging.warning("%s %s: using the checkpoint files beside it", *state_problem)
        unreadable = []
        for path in candidates:
            problem = self._try_restore(path, expect_partial)
            if problem is None:
                break
            unreadable.append((path, problem))
        else:
            if unreadable:
                raise CheckpointError(
                    f"no checkpoint in {self.directory} can be read ("
                    f"{'; '.join(f'{io_utils.basename(p)}: {why}' for p, why in unreadable)}): "
                    f"pass --overwrite_output_dir (with --do_train) to delete them and train "
                    f"anew, or use a new --output_dir")
            return None
        if unreadable:
            logging.warning("Checkpoint %s cannot be read: restored %s instead",
                            ", ".join(f"{p} ({why})" for p, why in unreadable), path)
        if (unreadable or state_problem) and self.training \
                and self.write_directory == self.directory:
            self._list_as_latest(path, candidates)
        logging.info("Restored %s", path)
        return path

    def _candidates(self):
        """Checkpoint prefixes to try, newest first, and a problem with the state file
        ((path, what is wrong) or None). The state file's list is used when it reads;
        else the `ckpt-N.index` files in the directory."""
        state = io_utils.join(self.directory, "checkpoint")
        listed = _read_state(state)
        found = _checkpoint_files(self.directory)
        if listed is None:
            problem = None
            if found:
                what = "cannot be read" if io_utils.exists(state) else "is missing"
                problem = (state, what)
            return sorted(found, key=_step_of, reverse=True), problem
        return sorted(listed, key=_step_of, reverse=True), None

    def _try_restore(self, path: str, expect_partial: bool) -> Optional[str]:
        """Restores `path`; returns None, or why it does not read."""
        if not io_utils.exists(path + ".index"):
            return "index file missing"
        if not io_utils.glob(path + ".data-*"):
            return "data file missing"
        try:
            status = self.checkpoint.restore(path)
        except (tf.errors.OpError, IndexError) as e:
            # Nothing is assigned before the reads succeed, and the next restore assigns
            # every tracked value (and supersedes any deferred slot restore).
            return describe_read_error(e)
        if expect_partial:
            status.expect_partial()
        else:
            status.assert_existing_objects_matched()
        # The optimizer's slots are restored when it creates them (first step);
        # `settle` silences them when no step follows.
        self.status = status
        self.restored_step = _step_of(path)
        return None

    def _list_as_latest(self, path: str, candidates) -> None:
        """Rewrites the state file: `path` is the latest, older listed ones are kept."""
        from google.protobuf import text_format
        from tensorflow.python.training.checkpoint_state_pb2 import CheckpointState
        kept = sorted((p for p in candidates if _step_of(p) <= _step_of(path)), key=_step_of)
        now = time.time()
        state = CheckpointState(
            model_checkpoint_path=io_utils.basename(path),
            all_model_checkpoint_paths=[io_utils.basename(p) for p in kept],
            all_model_checkpoint_timestamps=[now] * len(kept), last_preserved_timestamp=now - 1)
        atomic_write_text(io_utils.join(self.directory, "checkpoint"),
                          text_format.MessageToString(state))
        self._manager = None  # re-read by the next save

    def latest_step(self) -> Optional[int]:
        """The step of the newest checkpoint this process wrote or restored (None: none)."""
        latest = self.manager.latest_checkpoint
        return _step_of(latest) if latest else None

    def save(self, step: int) -> str:
        """Writes a checkpoint numbered by the global step.

        Raises:
            WriteError: it could not be written (no space, no permission, ...): names the
                checkpoint and the reason. The earlier checkpoints stay as they were and
                what the failed write left (`ckpt-N_temp/`) is removed.
        """
        try:
            path = self.manager.save(checkpoint_number=step)
            folders.note_written_under(self.write_directory, _is_checkpoint_file)
            return path
        except (tf.errors.OpError, OSError) as e:
            prefix = io_utils.join(self.write_directory, f"ckpt-{step}")
            io_utils.remove_tree(prefix + "_temp")
            raise WriteError(prefix, error_reason(e), getattr(e, "errno", None),
                             note="the checkpoints already written are kept and the same "
                                  "command resumes from the last of them") from None

    def weights_are_finite(self) -> bool:
        """Whether every saved weight is finite. A diverging step can leave NaN or Inf in
        the weights while its own loss, computed before the update, was finite: such
        weights must never become a checkpoint (or adapter files, or results)."""
        return all(bool(tf.reduce_all(tf.math.is_finite(v)))
                   for v in self.trained if v.dtype.is_floating)

    def remove_partial_saves(self) -> List[str]:
        """Deletes the `ckpt-N_temp/` directories a save killed mid-way left behind."""
        if not io_utils.isdir(self.write_directory):
            return []
        # Listed rather than globbed: object stores and ram:// have no directory entries.
        partial = [io_utils.join(self.write_directory, name)
                   for name in io_utils.listdir(self.write_directory) if _PARTIAL.match(name)]
        for path in partial:
            io_utils.remove_tree(path)
            logging.info("Removed %s, left by a checkpoint save that did not complete", path)
        return partial


def _is_checkpoint_file(name: str) -> bool:
    """Whether `name` is one TensorFlow writes for a `ckpt-N` checkpoint, or its state."""
    return name == "checkpoint" or bool(re.match(r"^ckpt-\d+\.", name))


def _step_of(path: str) -> int:
    return int(path.rsplit("-", 1)[1])


_INDEX = re.compile(r"^ckpt-(\d+)\.index$")
# What TensorFlow writes a checkpoint into before moving its files to `ckpt-N.*`.
_PARTIAL = re.compile(r"^ckpt-\d+_temp$")


def _checkpoint_files(directory: str) -> List[str]:
    """The prefixes of the `ckpt-N.index` files in `directory`."""
    if not io_utils.isdir(directory):
        return []
    return [io_utils.join(directory, name[:-len(".index")])
            for name in io_utils.listdir(directory) if _INDEX.match(name)]


def _read_state(path: str) -> Optional[List[str]]:
    """The checkpoint prefixes a state file lists, or None if it is missing or does not
    parse (read here rather than by TensorFlow, which logs each problem twice)."""
    from google.protobuf import text_format
    from tensorflow.python.training.checkpoint_state_pb2 import CheckpointState
    if not io_utils.isfile(path):
        return None
    try:
        state = text_format.Parse(io_utils.read_text(path), CheckpointState())
    except (OSError, UnicodeDecodeError, text_format.ParseError):
        return None
    directory = io_utils.dirname(path)
    names = list(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path and state.model_checkpoint_path not in names:
        names.append(state.model_checkpoint_path)
    # A relative name is relative to the state file's folder; an absolute one (a path or
    # a URL) stands as it is.
    paths = [io_utils.join(directory, name) if io_utils.is_local(name) else name
             for name in names]
    return [p for p in paths if re.search(r"-\d+$", p)]


class _StepCheckpointCallback(keras.callbacks.Callback):
    """Saves a checkpoint each time the global step crosses a multiple of `every`."""

    def __init__(self, checkpoints: TrainingCheckpoints, optimizer, every: int):
        super().__init__()
        self.checkpoints, self.optimizer, self.every = checkpoints, optimizer, every
        self.boundary = 0
        self.diverged = False  # the weights became NaN or Inf (training was stopped)

    def on_train_begin(self, logs=None):
        self.boundary = int(self.optimizer.iterations.numpy()) // self.every

    def on_train_batch_end(self, batch, logs=None):
        if logs and not np.isfinite(logs.get("loss", 0.0)):
            return  # never checkpoint weights that produced a NaN loss
        step = int(self.optimizer.iterations.numpy())
        if step // self.every > self.boundary:
            if not self.checkpoints.weights_are_finite():
                self.diverged = True
                self.model.stop_training = True
                return
            self.checkpoints.save(step)
            self.boundary = step // self.every


class _GlobalStepTensorBoard(keras.callbacks.TensorBoard):
    """Keras' TensorBoard logging every 10 steps, numbered by the global step: `fit`
    restarts the model's step counter at 0, so without this a resumed run would log its
    steps over those of the run it resumes, and its curve would start again at 0."""

    def __init__(self, log_dir: str, optimizer):
        super().__init__(log_dir, update_freq=10)
        self.optimizer = optimizer

    def on_train_begin(self, logs=None):
        step = self.optimizer.iterations  # pylint: disable=protected-access
        self.model._train_counter.assign(tf.cast(step, self.model._train_counter.dtype))
        super().on_train_begin(logs)
        self._note_event_files()

    def on_train_end(self, logs=None):
        super().on_train_end(logs)
        self._note_event_files()

    def _note_event_files(self):
        """Records TensorBoard's files in the run folder's manifest (`io_utils.folders`):
        TensorFlow writes them itself, under names it chooses."""
        folders.note_written_under(self.log_dir, lambda name: name.startswith("events.out."))


class _StopOnSignal(keras.callbacks.Callback):
    """After the step in which SIGTERM or SIGINT arrived (on any worker, see
    `preemption`): saves a checkpoint at that step, unless one was just saved, and
    stops training. `stopped` then holds (signal, received here, step, checkpoint);
    `diverged` says the weights were not finite, so nothing was saved."""

    def __init__(self, checkpoints: TrainingCheckpoints, optimizer, num_train_steps: int):
        super().__init__()
        self.checkpoints, self.optimizer = checkpoints, optimizer
        self.num_train_steps = num_train_steps
        self.stopped = None
        self.diverged = False

    def on_train_batch_end(self, batch, logs=None):
        signum, here = preemption.stop_requested(self.model.distribute_strategy)
        if signum is None:
            return
        step = int(self.optimizer.iterations.numpy())
        path = None
        if logs and not np.isfinite(logs.get("loss", 0.0)):
            pass  # TerminateOnNaN stops the run; never checkpoint such weights
        elif not self.checkpoints.weights_are_finite():
            self.diverged = True
        else:
            if self.checkpoints.latest_step() != step:
                self.checkpoints.save(step)  # every worker; the chief's copy is the one kept
            path = io_utils.join(self.checkpoints.directory, f"ckpt-{step}")
            logging.warning("%s: saved checkpoint %s at training step %d of %d",
                            preemption.signal_name(signum), path, step, self.num_train_steps)
        self.stopped = (signum, here, step, path)
        self.model.stop_training = True


class KerasProgress(keras.callbacks.Callback):
    """Shows Keras `fit` steps (with the loss) or `predict` batches as a `Progress`.

    Use with `verbose=0` (Keras' bar rewrites one line with `\r`, even in a log file).
    `total` is the last step (fit) or the batch count (predict); `start` the global step a
    resumed `fit` starts from.
    """

    def __init__(self, label: str, total: int, start: int = 0, stream=None,
                 terminal: Optional[bool] = None):
        super().__init__()
        self.label, self.total, self.first = label, total, start
        self.stream, self.terminal = stream, terminal
        self.progress: Optional[Progress] = None

    def _begin(self, unit: str) -> None:
        self.progress = Progress(self.label, self.total, unit, self.stream, self.terminal,
                                 start=self.first)

    def _end(self) -> None:
        if self.progress is not None:
            self.progress.finish()

    def on_train_begin(self, logs=None):
        self._begin("steps")

    def on_train_batch_end(self, batch, logs=None):
        # `batch` counts from 0 in each epoch (the last step of an execution of several).
        loss = (logs or {}).get("loss")
        fields = {} if loss is None else {"loss": float(loss)}
        self.progress.update(self.first + batch + 1, **fields)

    def on_epoch_end(self, epoch, logs=None):
        if self.progress is not None:
            self.first = self.progress.done

    def on_train_end(self, logs=None):
        self._end()

    def on_predict_begin(self, logs=None):
        self._begin("batches")

    def on_predict_batch_end(self, batch, logs=None):
        self.progress.update(self.first + batch + 1)

    def on_predict_end(self, logs=None):
        self._end()


def steps_per_execution(iterations_per_loop: int, explicitly_set: bool, on_tpu: bool,
                        save_checkpoints_steps: int) -> int:
    """Keras `steps_per_execution` from Google's `iterations_per_loop`.

    On TPU the flag applies as in the original. On CPU/GPU it applies only when the
    user set it, so by default progress and TensorBoard update every step. It never
    exceeds the checkpoint interval, so checkpoints land on their steps.
    """
    if not (on_tpu or explicitly_set):
        return 1
    return max(1, min(iterations_per_loop, save_checkpoints_steps))


def fit_with_resume(model, optimizer, make_train_dataset: Callable[[], tf.data.Dataset],
                    num_train_steps: int, output_dir: str, save_checkpoints_steps: int,
                    verbose: int = 1, extra_callbacks: Sequence = (),
                    write_dir: Optional[str] = None) -> Dict[str, float]:
    """Trains for `num_train_steps` steps in total, resuming from the latest checkpoint.

    The model must be compiled with `optimizer`. The training stream is replayed and the
    batches already trained on skipped, so a resumed run sees what an uninterrupted one
    would. Checkpoints are read from `output_dir` and written with TensorBoard logs into
    `write_dir` (default `output_dir`; a temporary folder on non-chief workers). Under
    `preemption.handle_signals` a signal ends training after the step in flight, with a
    checkpoint. `verbose`: 1 `KerasProgress`, 0 nothing, 2 Keras' line per epoch. The
    steps are one Keras epoch.

    Returns the last logged metrics and "global_step". Raises TrainingError when the loss or
    weights become non-finite (the last good checkpoint is kept), `preemption.Preempted`,
    CheckpointError (none reads) and `io_utils.WriteError`.
    """
    with preemption.deferred("training", "stopped at the end of training (checkpoint saved)"):
        return _fit(model, optimizer, make_train_dataset, num_train_steps, output_dir,
                    save_checkpoints_steps, verbose, extra_callbacks, write_dir or output_dir)


class _StopOnNaN(keras.callbacks.TerminateOnNaN):
    """Keras' TerminateOnNaN, remembering that it stopped the run (another callback may
    stop it for its own reasons: `EarlyStopping`)."""

    stopped = False

    def on_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        self.stopped = self.stopped or (loss is not None and not np.isfinite(float(loss)))
        super().on_batch_end(batch, logs)


def _fit(model, optimizer, make_train_dataset, num_train_steps, output_dir,
         save_checkpoints_steps, verbose, extra_callbacks, write_dir):
    checkpoints = TrainingCheckpoints(model, optimizer, output_dir, write_dir=write_dir)
    checkpoints.remove_partial_saves()
    checkpoints.restore_latest()
    done = int(optimizer.iterations.numpy())
    remaining = num_train_steps - done
    if remaining <= 0:
        checkpoints.settle()
        logging.info("Training already complete (%d of %d steps)", done, num_train_steps)
        return {"global_step": done}
    logging.info("***** Running training: steps %d..%d of %d *****", done + 1, num_train_steps,
                 num_train_steps)
    step_checkpoints = _StepCheckpointCallback(checkpoints, optimizer, save_checkpoints_steps)
    stop = _StopOnSignal(checkpoints, optimizer, num_train_steps)
    nan_stop = _StopOnNaN()
    callbacks = [
        step_checkpoints,
        stop,
        _GlobalStepTensorBoard(io_utils.join(write_dir, "logs"), optimizer),
        nan_stop,
        *extra_callbacks,
    ]
    if verbose == 1:
        callbacks.append(KerasProgress("train", num_train_steps, start=done))
        verbose = 0
    if isinstance(model.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy):
        # tf_keras sums each step's logs over the replicas on every strategy but TPU; under
        # several workers each replica's are already the cluster's, so the progress line
        # and TensorBoard's batch loss would show N times the loss: take one replica's.
        model.distribute_reduction_method = "first"
    model.fit(make_train_dataset().skip(done), steps_per_epoch=num_train_steps - done,
              epochs=1, callbacks=callbacks, verbose=verbose)
    logs = {k: float(v[-1]) for k, v in model.history.history.items()}
    step = int(optimizer.iterations.numpy())
    what = None
    if step_checkpoints.diverged or stop.diverged or (
            step == num_train_steps and not checkpoints.weights_are_finite()):
        what = f"the trained weights became NaN or infinite at step {step}"
    elif not np.isfinite(logs.get("loss", 0.0)) or nan_stop.stopped:
        what = f"the training loss became NaN near step {step}"
    if what:
        latest = checkpoints.manager.latest_checkpoint
        raise TrainingError(f"{what}; stopped. Last good checkpoint: {latest or 'none'}. "
                            f"Lower --learning_rate or check the data.")
    if stop.stopped:
        signum, here, step, path = stop.stopped
        where = "" if here else " (received by another worker)"
        raise preemption.Preempted(signum, f"stopped at training step {step} of "
                                           f"{num_train_steps}{where}; checkpoint {path} saved")
    if checkpoints.latest_step() != step:  # the last periodic save may have been this step
        checkpoints.save(step)
    logs["global_step"] = step
    return logs
