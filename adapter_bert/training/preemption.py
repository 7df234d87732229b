"""Stopping a run cleanly on SIGTERM or SIGINT: a preempted VM, Colab, Ctrl-C.

`handle_signals()` (entered by `runners.base.run_cli`) notes a signal inside a Keras loop
(`deferred(phase)`): the step in flight completes, training saves a checkpoint there and
stops, evaluation or prediction stop without writing. Elsewhere, or on a second signal,
`Preempted` (a `BaseException`) is raised at once; `run_cli` exits with 128 + the signal.

Several workers agree on the step to stop at: each step end sums with one tiny all-reduce
which signals each worker received, and the chief writes the checkpoint. TensorFlow's
coordination service takes SIGTERM when a strategy starts it, so the runners call
`reclaim_signals` after creating their strategy.
"""

import contextlib
import signal
import threading
from typing import Optional, Tuple

# The signals handled, in the order of the all-reduced counts (the first one wins when
# workers received different ones).
HANDLED = (signal.SIGTERM, signal.SIGINT)


class Preempted(BaseException):
    """The run was stopped by SIGTERM or SIGINT; running the same command resumes it.

    Attributes:
        signum: the signal.
        detail: what the run did when it stopped ("stopped at training step 3 of 6 and
            saved ...").
        exit_code: 128 + signum.
    """

    def __init__(self, signum: int, detail: str):
        super().__init__(signum, detail)
        self.signum, self.detail = signum, detail

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)

    def __str__(self) -> str:
        return (f"{signal_name(self.signum)}: {self.detail}; preempted, run again with the "
                f"same command to resume")


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class _Watch:
    """The state `handle_signals` keeps: the first signal received, and how deep the run
    is in `deferred` code."""

    def __init__(self):
        self.signum: Optional[int] = None
        self.phases = []

    def handler(self, signum, frame):
        del frame  # unused
        if self.signum is not None:
            raise Preempted(signum, "a second signal: stopped at once, nothing more saved")
        self.signum = signum
        if not self.phases:
            raise Preempted(signum, "stopped; nothing was in progress that could be saved")


_ACTIVE: Optional[_Watch] = None


@contextlib.contextmanager
def handle_signals():
    """Handles SIGTERM and SIGINT as the module docstring says, until the block ends.

    Only the main thread may set signal handlers: from any other thread (a notebook's
    worker, a test runner's) this does nothing. The previous handlers come back after.
    """
    global _ACTIVE
    if threading.current_thread() is not threading.main_thread() or _ACTIVE is not None:
        yield
        return
    watch = _Watch()
    previous = {signum: signal.signal(signum, watch.handler) for signum in HANDLED}
    _ACTIVE = watch
    try:
        yield
    finally:
        _ACTIVE = None
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def reclaim_signals() -> None:
    """Installs the run's handlers again after TensorFlow replaced them.

    A `MultiWorkerMirroredStrategy` starts TensorFlow's coordination service, whose C++
    preemption notifier takes SIGTERM over (it only logs "SIGTERM caught" and lets the
    process run on). Call this once the strategy exists; nothing when signals are not
    handled."""
    watch = _ACTIVE
    if watch is not None and threading.current_thread() is threading.main_thread():
        for signum in HANDLED:
            signal.signal(signum, watch.handler)


@contextlib.contextmanager
def deferred(phase: str, stopped: str = ""):
    """A Keras loop (`phase`: "training", "evaluating dev", ...): a signal waits for
    `stop_requested`. A signal that came too late for the loop's last check raises
    `Preempted` when the block ends without an error, with `stopped` as its detail
    (default "stopped after <phase>")."""
    watch = _ACTIVE
    if watch is None:
        yield
        return
    watch.phases.append(phase)
    try:
        yield
    finally:
        watch.phases.pop()
    if watch.signum is not None:
        raise Preempted(watch.signum, stopped or f"stopped after {phase}")


def stop_requested(strategy=None) -> Tuple[Optional[int], bool]:
    """Whether the loop must stop now, the same answer on every worker.

    Args:
        strategy: the model's distribution strategy; with several workers their
            signals are summed by an all-reduce (every worker must call this at the same
            step).

    Returns:
        (signum, here): the signal to stop for (None: go on) and whether it reached this
        process (False: another worker received it).
    """
    if _ACTIVE is None:
        return None, False
    local = _ACTIVE.signum
    if not _several_workers(strategy):
        return local, local is not None
    counts = _sum_over_workers(strategy, [int(local == s) for s in HANDLED])
    for signum, count in zip(HANDLED, counts):
        if count > 0:
            return signum, local is not None
    return None, False


def _several_workers(strategy) -> bool:
    """A MultiWorkerMirroredStrategy whose cluster has more than one worker."""
    if strategy is None:
        return False
    import tensorflow as tf
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    spec = strategy.cluster_resolver.cluster_spec().as_dict()
    return sum(len(spec.get(job, ())) for job in ("chief", "worker")) > 1


# The traced all-reduce of each strategy: id -> (strategy, function).
_REDUCERS = {}


def _sum_over_workers(strategy, values):
    """The element-wise sum of `values` over every worker (one all-reduce)."""
    import tensorflow as tf
    strategy_and_reducer = _REDUCERS.get(id(strategy))
    if strategy_and_reducer is None or strategy_and_reducer[0] is not strategy:
        @tf.function
        def reducer(local):
            per_replica = strategy.run(lambda: tf.identity(local))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        strategy_and_reducer = _REDUCERS[id(strategy)] = (strategy, reducer)
    summed = strategy_and_reducer[1](tf.constant(values, tf.int32))
    return [int(v) for v in summed.numpy()]


def keras_stop_callback(phase: str, strategy=None):
    """A Keras callback that ends a `predict` call after the batch in flight when a signal
    came (agreed across workers): it raises `Preempted`. Nothing when signals are not
    handled."""
    if _ACTIVE is None:
        return None
    import tf_keras as keras

    class StopPredicting(keras.callbacks.Callback):
        def on_predict_batch_end(self, batch, logs=None):
            signum, here = stop_requested(strategy or self.model.distribute_strategy)
            if signum is not None:
                where = "" if here else " (received by another worker)"
                raise Preempted(signum, f"stopped while {phase}{where}, before writing "
                                        f"its results")

    return StopPredicting()
