"""--eval_every_epoch: evaluate after every epoch and keep the best epoch's weights.

As Hugging Face's `load_best_model_at_end`: a run of E epochs evaluates its selection data
(the dev set, or the `--dev_fraction` held-out part) at the end of each epoch, writes the
weights of the best epoch so far into `<output_dir>/best_epoch/` (an adapter directory),
and after training loads them back, so that the run's adapter, evaluation, predictions and
export are the kept epoch's. Each epoch's score is in `<output_dir>/epoch_selection.json`,
which a resumed run reads: epochs already evaluated are not evaluated again and the best
so far is kept.

The epoch boundaries are Google's step counts: epoch k ends after
`int(examples / batch_size * k)` steps (the last one at the run's last step).
"""

import json
import math
from typing import Callable, Dict, List, Optional

import tf_keras as keras
from absl import logging

from adapter_bert import io_utils
from adapter_bert.metrics.classification import METRIC_NAMES

STATE = "epoch_selection.json"
BEST_DIR = "best_epoch"
# Metrics where lower is better; every other one is maximised.
LOWER_IS_BETTER = frozenset({"loss", "mse"})


def selectable_metrics(kind: str) -> List[str]:
    """The metric names a task of metrics `kind` can be selected by."""
    return [*METRIC_NAMES[kind], "loss"]


def is_better(metric: str, value: float, best: Optional[float]) -> bool:
    """Whether `value` of `metric` beats `best` (None: nothing yet)."""
    if best is None:
        return True
    return value < best if metric in LOWER_IS_BETTER else value > best


def epoch_boundaries(num_examples: int, batch_size: int, epochs: float,
                     total_steps: int) -> List[int]:
    """The step at which each epoch ends: `[int(n / b * k) for k = 1..ceil(epochs)]`, the
    last capped at the run's last step."""
    count = max(1, math.ceil(epochs))
    return [min(total_steps, int(num_examples / batch_size * k)) for k in range(1, count + 1)]


class EpochSelection(keras.callbacks.Callback):
    """Evaluates at each epoch boundary and keeps the best epoch's weights.

    `evaluate()` returns the selection split's `{metric: value}` for the current weights,
    `save(path)` writes them as an adapter directory; `boundaries` come from
    `epoch_boundaries`, and `directory` (the run's folder) holds the state file and
    `best_epoch/`.
    """

    def __init__(self, optimizer, boundaries: List[int], metric: str,
                 evaluate: Callable[[], Dict[str, float]], save: Callable[[str], None],
                 directory: str):
        super().__init__()
        self.optimizer, self.boundaries, self.metric = optimizer, boundaries, metric
        self.evaluate, self.save, self.directory = evaluate, save, directory
        self.state = read_state(directory) or {"metric": metric, "epochs": [], "kept": None}
        done = {entry["epoch"] for entry in self.state["epochs"]}
        self.pending = [(epoch, step) for epoch, step in enumerate(boundaries, 1)
                        if epoch not in done]

    def on_train_begin(self, logs=None):
        # A run resumed exactly at an epoch's end (stopped while evaluating it) evaluates
        # it now; an epoch whose end a resumed run has passed is gone.
        step = int(self.optimizer.iterations.numpy())
        self._evaluate_up_to(step, passed_ok=False)

    def on_train_batch_end(self, batch, logs=None):
        self._evaluate_up_to(int(self.optimizer.iterations.numpy()), passed_ok=True)

    def _evaluate_up_to(self, step: int, passed_ok: bool) -> None:
        while self.pending and self.pending[0][1] <= step:
            epoch, boundary = self.pending.pop(0)
            if boundary < step and not passed_ok:
                logging.warning("Epoch %d ended at step %d, before the checkpoint this run "
                                "resumed from (step %d): it is not evaluated", epoch,
                                boundary, step)
                continue
            self._evaluate_epoch(epoch, step)

    def _evaluate_epoch(self, epoch: int, step: int) -> None:
        value = float(self.evaluate()[self.metric])
        kept = self.state["kept"]
        better = is_better(self.metric, value, kept["value"] if kept else None)
        if better:
            self.save(io_utils.join(self.directory, BEST_DIR))
            self.state["kept"] = {"epoch": epoch, "step": step, "value": value}
        self.state["epochs"].append({"epoch": epoch, "step": step, "value": value})
        io_utils.atomic_write_text(io_utils.join(self.directory, STATE),
                                   json.dumps(self.state, indent=2) + "\n")
        logging.info("Epoch %d (step %d): %s %.4f%s", epoch, step, self.metric, value,
                     " (best so far: kept)" if better else "")


def read_state(directory: str) -> Optional[dict]:
    """The epoch scores a run wrote into `directory`, or None."""
    path = io_utils.join(directory, STATE)
    if not io_utils.exists(path):
        return None
    return io_utils.read_json_object(path)
