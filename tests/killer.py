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
"""

import os
import runpy
import signal
import sys


def _die():
    os.kill(os.getpid(), signal.SIGKILL)


def _hook_checkpoints(after: int, before: int):
    from adapter_bert.training import loop as training
    save = training.TrainingCheckpoints.save

    def save_or_die(self, step):
        if step == before:
            _die()
        path = save(self, step)
        if step == after:
            _die()
        return path

    training.TrainingCheckpoints.save = save_or_die


def _hook_step(step: int):
    from adapter_bert.training import loop as training
    batch_end = training._StepCheckpointCallback.on_train_batch_end

    def batch_end_or_die(self, batch, logs=None):
        batch_end(self, batch, logs)
        if int(self.optimizer.iterations.numpy()) == step:
            _die()

    training._StepCheckpointCallback.on_train_batch_end = batch_end_or_die


def _hook_predict(pass_number: int):
    import tf_keras as keras
    predict = keras.Model.predict
    passes = [0]

    class DieAfterFirstBatch(keras.callbacks.Callback):
        def on_predict_batch_end(self, batch, logs=None):
            _die()

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


def main():
    runner = sys.argv[1]
    # A script runs with argv[0] its path; run_module(alter_sys=True) sets argv[0] to the
    # module's file, as `python -m` does.
    sys.argv = sys.argv[1:]
    _hook_checkpoints(int(os.environ.get("KILL_AFTER_CHECKPOINT", "0")),
                      int(os.environ.get("KILL_BEFORE_CHECKPOINT", "0")))
    if os.environ.get("KILL_AT_STEP"):
        _hook_step(int(os.environ["KILL_AT_STEP"]))
    if os.environ.get("KILL_PREDICTING"):
        _hook_predict(int(os.environ["KILL_PREDICTING"]))
    _hook_replace(os.environ.get("KILL_WRITING", ""), os.environ.get("REPLACED_LOG", ""))
    if runner.endswith(".py"):
        runpy.run_path(runner, run_name="__main__")
    else:
        runpy.run_module(runner, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
