"""What a flag value must be, checked before anything is loaded: the error a bad value
raises (`FlagError`, one line naming the flag), the bounds of every numeric flag of every
entry point (`NUMERIC_BOUNDS`), and the checks of the paths flags name.

The flags themselves are defined, and each runner's combination of them checked, in
`tasks.flags`.
"""

import dataclasses
import math
import os

from adapter_bert import io_utils
from adapter_bert.errors import UserError


class FlagError(UserError):
    """A flag value is invalid; the message names the flag and what was expected."""


def was_set(values, name: str) -> bool:
    """Whether the user gave --name explicitly (absl FlagValues); False for other objects."""
    try:
        return bool(values[name].present)
    except (TypeError, KeyError, AttributeError):
        return False


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The values a numeric flag takes: finite, within [low, high] (or the open ends), an
    integer for integer flags. The ceilings keep a value from overflowing a step count or
    a tensor shape far later; they lie well above any value that makes sense."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False

    def admits(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def describe(self, integer: bool) -> str:
        if math.isinf(self.high):
            return f"a finite number {'>' if self.low_open else '>='} {self.low:g}"
        if integer:
            return f"an integer in [{int(self.low)}, {int(self.high)}]"
        return (f"a finite number in {'(' if self.low_open else '['}{self.low:g}, "
                f"{self.high:g}{')' if self.high_open else ']'}")


_STEPS = Bounds(1, 2**31 - 1)
_BATCH = Bounds(1, 2**20)
_TOKENS = Bounds(1, 2**16)
# A rate has no ceiling: a huge one diverges, which the training loop reports.
_RATE = Bounds(0, math.inf, low_open=True)
# Every numeric flag of every entry point (tests/robustness/test_numeric_flags.py walks
# them all): checked first by `check_numeric_flags`, before anything is loaded.
NUMERIC_BOUNDS = {
    "train_batch_size": _BATCH, "eval_batch_size": _BATCH, "predict_batch_size": _BATCH,
    "max_seq_length": Bounds(2, 2**16),  # [CLS] [SEP] at least; pairs need 3 (checked later)
    "save_checkpoints_steps": _STEPS, "iterations_per_loop": _STEPS,
    "num_tpu_cores": Bounds(1, 2**16), "top_k_layers": Bounds(1, 2**10),
    "adapter_size": _TOKENS, "seed": Bounds(0, 2**32 - 1),  # NumPy's seed range
    "doc_stride": _TOKENS, "max_query_length": _TOKENS, "n_best_size": Bounds(1, 10**4),
    "max_answer_length": _TOKENS,
    "learning_rate": _RATE, "adapter_learning_rate": _RATE,
    "num_train_epochs": Bounds(0, 10**6, low_open=True),
    "warmup_proportion": Bounds(0, 1), "adapter_init_scale": Bounds(0, 10),
    "lora_alpha": Bounds(0, 10**6, low_open=True), "lora_dropout": Bounds(0, 1, high_open=True),
    "adam_epsilon": Bounds(0, 1, low_open=True),
    "null_score_diff_threshold": Bounds(-10**6, 10**6),
    "dev_fraction": Bounds(0, 1, low_open=True, high_open=True),
}


def check_numeric_flags(values) -> None:
    """Checks every numeric flag `values` has against `NUMERIC_BOUNDS` (None: unset).

    Raises:
        FlagError: the first flag out of bounds, e.g. `--num_train_epochs must be a finite
            number in (0, 1e+06], got nan`.
    """
    for name, bounds in NUMERIC_BOUNDS.items():
        value = getattr(values, name, None)
        if value is None or bounds.admits(value) and (
                not _is_integer_flag(values, name) or float(value).is_integer()):
            continue
        raise FlagError(f"--{name} must be {bounds.describe(_is_integer_flag(values, name))}, "
                        f"got {value}")


def _is_integer_flag(values, name: str) -> bool:
    try:
        return values[name].flag_type() == "int"
    except (TypeError, KeyError, AttributeError):
        return isinstance(getattr(values, name, None), int)


def path_is(name: str, path: str, query) -> bool:
    """`query(path)` (`io_utils.exists`, `isdir`, `isfile`), a store that cannot be reached
    (`gs://` without network or credentials) named by its flag."""
    try:
        return query(path)
    except io_utils.StorageError as e:
        raise FlagError(f"--{name}={e}") from None


def check_writable_dir(name: str, path: str) -> None:
    """Raises FlagError unless a file can be written in the local directory `path`, or, if
    it does not exist yet, a folder can be made in its nearest existing parent. Both are
    tried (a temporary entry, removed at once: permission bits do not stop root, while
    /proc or a read-only mount do). URLs (gs://, ...) are not checked: their store
    answers when the run writes.
    """
    if not io_utils.is_local(path):
        return
    import tempfile
    path = os.path.abspath(io_utils.expand(path))
    parent = path
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise FlagError(f"--{name}={path}: cannot create it, {parent} is a file")
    try:
        probe = tempfile.mkdtemp(prefix=".adapter_bert_probe_", dir=parent)
    except OSError as e:
        where = "directory is not writable" if parent == path else \
            f"cannot create it in {parent}"
        raise FlagError(f"--{name}={path}: {where} ({e.strerror or e})") from None
    os.rmdir(probe)
