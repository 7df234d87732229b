"""Runs an entry point and kills its own process (SIGKILL) at a chosen point.

Used by the interruption tests (`tests.runner_utils.run_killable`): the kill is a real
`kill -9`, placed deterministically, so no test races a poller against a fast run.

    python tests/killer.py RUNNER ARGS...

RUNNER is a runner module, e.g. adapter_bert.run_classifier (run as `python -m RUNNER
ARGS...` runs it), or a script's path (run_classifier.py, the clone's root script).

KILL_AFTER_CHECKPOINT=N: right after training checkpoint N is written.
KILL_BEFORE_CHECKPOINT=N: just before checkpoint N would be written, so the steps since
the previous checkpoint are lost.
KILL_AT_STEP=N: right after training step N, wherever it falls between checkpoints.
KILL_PREDICTING=N: in the middle of the N-th Keras prediction pass of the run (after its
first batch): the classifier's dev evaluation is pass 1 and its test prediction the next.
KILL_WRITING=name: in the middle of writing the output file called `name`, i.e. after
half of its bytes reached the temporary file and before it is renamed over the target.
REPLACED_LOG=path: append the target of every atomic rename (os.replace) to this file.
KILL_SWAPPING=N: after N files of a new folder were copied into place by the object-store
swap of `io_utils.folders.replace` (an export or best/ on gs://): the target half-written.

Signals instead of kills (the run handles them, `adapter_bert.training.preemption`): the
process sends itself SIGTERM, or the signal SIGNAL names (e.g. SIGNAL=SIGINT).
SIGNAL_AT_STEP=N: right after training step N, before the run looks for a signal.
SIGNAL_PREDICTING=N: in the N-th Keras prediction pass, after its first batch.

Writes that fail, as on a full disk or in a folder whose permission was taken away:
FULL_DISK_AFTER_CHECKPOINT=N: from right after checkpoint N is written, no file of the
process may grow any more (the kernel's file-size limit RLIMIT_FSIZE is set to 0), so every
later write fails with "File too large": the next checkpoint, the outputs.
FULL_DISK_WRITING=name: the same, from the moment the atomic writer has created the
temporary file of the output called `name` (before any byte of it is written).
DENY_WRITING=name: opening the temporary file of the output called `name` for writing
fails with "Permission denied" (what `open` raises in a folder the process may no longer
write; root ignores file modes, so a test cannot take the permission away for real).
"""

import builtins
import os
import resource
import runpy
import signal
import sys
import tempfile


def _die():
    os.kill(os.getpid(), signal.SIGKILL)


def _signal():
    os.kill(os.getpid(), getattr(signal, os.environ.get("SIGNAL", "SIGTERM")))


def _fill_disk():
    """From now on no file of this process may grow: a write fails with EFBIG."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def _hook_checkpoints(after: int, before: int, full_after: int):
    from adapter_bert.training import loop as training
    save = training.TrainingCheckpoints.save

    def save_or_die(self, step):
        if step == before:
            _die()
        path = save(self, step)
        if step == after:
            _die()
        if step == full_after:
            _fill_disk()
        return path

    training.TrainingCheckpoints.save = save_or_die


def _hook_step(step: int, action=_die):
    from adapter_bert.training import loop as training
    batch_end = training._StepCheckpointCallback.on_train_batch_end

    def batch_end_or_die(self, batch, logs=None):
        batch_end(self, batch, logs)
        if int(self.optimizer.iterations.numpy()) == step:
            action()

    training._StepCheckpointCallback.on_train_batch_end = batch_end_or_die


def _hook_predict(pass_number: int, action=_die):
    import tf_keras as keras
    predict = keras.Model.predict
    passes = [0]

    class DieAfterFirstBatch(keras.callbacks.Callback):
        def on_predict_batch_end(self, batch, logs=None):
            if batch == 0:
                action()

    def predict_or_die(self, *args, **kwargs):
        passes[0] += 1
        if passes[0] == pass_number:
            kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), DieAfterFirstBatch()]
        return predict(self, *args, **kwargs)

    keras.Model.predict = predict_or_die


def _hook_replace(kill_name: str, log: str):
    replace = os.replace

    def replace_or_die(src, dst, *args, **kwargs):
        if log:
            with open(log, "a") as f:
                f.write(os.path.abspath(dst) + "\n")
        if kill_name and os.path.basename(dst) == kill_name:
            size = os.path.getsize(src)
            with open(src, "r+b") as f:
                f.truncate(size // 2)
            _die()
        return replace(src, dst, *args, **kwargs)

    os.replace = replace_or_die


def _temporary_of(path, name: str) -> bool:
    """Whether `path` is the atomic writer's temporary file of `name` (`.name.XXXX.tmp`)."""
    base = os.path.basename(str(path))
    return bool(name) and base.startswith(f".{name}.") and base.endswith(".tmp")


def _hook_temporaries(full_name: str, denied_name: str):
    mkstemp = tempfile.mkstemp

    def mkstemp_then_fill(*args, **kwargs):
        made = mkstemp(*args, **kwargs)
        if _temporary_of(made[1], full_name):
            _fill_disk()
        return made

    real_open = builtins.open

    def open_or_deny(file, mode="r", *args, **kwargs):
        if _temporary_of(file, denied_name) and any(c in mode for c in "wax+"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, mode, *args, **kwargs)

    if full_name:
        tempfile.mkstemp = mkstemp_then_fill
    if denied_name:
        builtins.open = open_or_deny


def _hook_swap(after: int):
    from adapter_bert import io_utils
    copy_file, copied = io_utils.copy_file, [0]

    def copy_or_die(source, target):
        if ".adapter_bert.staging." in str(source):  # the swap's copies, out of the staging
            if copied[0] == after:
                _die()
            copied[0] += 1
        return copy_file(source, target)

    io_utils.copy_file = copy_or_die


def main():
    runner = sys.argv[1]
    # A script runs with argv[0] its path; run_module(alter_sys=True) sets argv[0] to the
    # module's file, as `python -m` does.
    sys.argv = sys.argv[1:]
    _hook_checkpoints(int(os.environ.get("KILL_AFTER_CHECKPOINT", "0")),
                      int(os.environ.get("KILL_BEFORE_CHECKPOINT", "0")),
                      int(os.environ.get("FULL_DISK_AFTER_CHECKPOINT", "0")))
    if os.environ.get("KILL_AT_STEP"):
        _hook_step(int(os.environ["KILL_AT_STEP"]))
    if os.environ.get("KILL_PREDICTING"):
        _hook_predict(int(os.environ["KILL_PREDICTING"]))
    if os.environ.get("SIGNAL_AT_STEP"):
        _hook_step(int(os.environ["SIGNAL_AT_STEP"]), _signal)
    if os.environ.get("SIGNAL_PREDICTING"):
        _hook_predict(int(os.environ["SIGNAL_PREDICTING"]), _signal)
    if os.environ.get("KILL_SWAPPING"):
        _hook_swap(int(os.environ["KILL_SWAPPING"]))
    _hook_replace(os.environ.get("KILL_WRITING", ""), os.environ.get("REPLACED_LOG", ""))
    _hook_temporaries(os.environ.get("FULL_DISK_WRITING", ""),
                      os.environ.get("DENY_WRITING", ""))
    if runner.endswith(".py"):
        runpy.run_path(runner, run_name="__main__")
    else:
        runpy.run_module(runner, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
