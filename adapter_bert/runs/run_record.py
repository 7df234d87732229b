"""A reused --output_dir: the flags a run trained with, and the check that a rerun matches.

The chief records the flags that define training in `<output_dir>/run_flags.json`; a
later run resuming there with other values stops before loading anything, naming the
differing flags (`--overwrite_output_dir` starts anew, keeping the feature cache). Flags
that change only speed, placement or the eval/predict outputs are not compared. Beside
the flags it records what the data implied (the label names in order, the task type, the
target column): a resume whose data implies other values stops once the data is read,
before any checkpoint is.
"""

import json
from typing import Dict, List, Optional

from absl import logging

from adapter_bert import io_utils
from adapter_bert.errors import UserError
from adapter_bert.io_utils import folders
from adapter_bert.command_line.flag_checks import FlagError
from adapter_bert.runs.run_lock import LOCK_NAME
from adapter_bert.command_line.settings import resume_compared, resume_paths

RECORD_NAME = "run_flags.json"
CHECKPOINT_DIR = "checkpoints"
# Kept by --overwrite_output_dir: its entries are keyed by data file, tokenizer and flags.
FEATURE_CACHE_DIR = "feature_cache"
# --dev_fraction's held-out rows: their line numbers in --train_file.
HELD_OUT_ROWS = "dev_fraction_rows.txt"
def _value(name: str, value):
    if value is not None and name in resume_paths():
        return io_utils.absolute(str(value))
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return value


def training_record(flag_values, runner: str) -> Dict[str, object]:
    """The runner and the values of the settings a resumed run must match
    (`command_line.settings`, in table order) that the runner of `flag_values` (a
    `RunConfig`) has."""
    values: Dict[str, object] = {"runner": runner}
    for name in resume_compared():
        if name in flag_values:
            values[name] = _value(name, flag_values[name])
    return values


def has_checkpoint(output_dir: str) -> bool:
    """Whether `output_dir` holds a training checkpoint (something was trained there)."""
    return io_utils.isfile(io_utils.join(output_dir, CHECKPOINT_DIR, "checkpoint"))


def read_record(output_dir: str, part: str = "flags") -> Optional[Dict[str, object]]:
    """The recorded flags (`part="flags"`) or data facts ("data") of `output_dir`, or None
    if there are none (or unreadable)."""
    path = io_utils.join(output_dir, RECORD_NAME)
    if not io_utils.isfile(path):
        return None
    try:
        record = io_utils.read_json_object(path)
    except UserError as e:
        logging.warning("%s: %s not compared", e, part)
        return None
    values = record.get(part)
    if not isinstance(values, dict):
        if part == "flags":
            logging.warning("%s holds no flags record: flags not compared", path)
        return None
    return values


def _show(value) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value)) if value else "''"
    return "unset" if value is None else str(value)


def differing_flags(recorded: Dict[str, object], current: Dict[str, object]) -> List[str]:
    """`--name old -> new` for every flag both records hold with different values."""
    changes = []
    for name, value in current.items():
        if name in recorded and recorded[name] != value:
            label = "the runner" if name == "runner" else f"--{name}"
            changes.append(f"{label} {_show(recorded[name])} -> {_show(value)}")
    return changes


def _resumes(flag_values) -> bool:
    """Whether a run would resume training in its --output_dir."""
    return bool(flag_values.do_train) and not flag_values.overwrite_output_dir \
        and has_checkpoint(flag_values.output_dir)


def check_same_data(flag_values, data: Optional[Dict[str, object]]) -> None:
    """Refuses a resume whose data implies other facts (`data`: label names, task type,
    target) than the run it resumes recorded; runs before any checkpoint is read.

    Raises:
        FlagError: one line naming what changed (old -> new) and the way out.
    """
    if not data or not _resumes(flag_values):
        return
    recorded = read_record(flag_values.output_dir, "data") or {}
    changes = [f"{name.replace('_', ' ')} {_show(recorded[name])} -> {_show(value)}"
               for name, value in data.items() if name in recorded and recorded[name] != value]
    if changes:
        raise FlagError(f"--output_dir={flag_values.output_dir} holds a run trained on data "
                        f"with other {'; other '.join(changes)}: use a new --output_dir, or "
                        f"--overwrite_output_dir to delete its outputs and train anew")


def check_reused_output_dir(flag_values, runner: str) -> None:
    """Refuses a training run whose --output_dir was trained with other flags.

    Nothing is checked without --do_train, with --overwrite_output_dir, or when the folder
    holds no checkpoint. A folder trained before flags were recorded resumes (one log line).

    Raises:
        FlagError: one line naming the differing flags (old -> new) and the way out.
    """
    output_dir = flag_values.output_dir
    if flag_values.do_train and flag_values.overwrite_output_dir:
        check_may_clear(output_dir)
    if not _resumes(flag_values):
        return
    recorded = read_record(output_dir)
    if recorded is None:
        logging.info("%s holds checkpoints but no %s (written by an earlier version): the "
                     "training flags could not be compared; resuming", output_dir, RECORD_NAME)
        return
    changes = differing_flags(recorded, training_record(flag_values, runner))
    if changes:
        raise FlagError(f"--output_dir={output_dir} holds a run trained with other flags "
                        f"({'; '.join(changes)}): use a new --output_dir, or "
                        f"--overwrite_output_dir to delete its outputs and train anew")


def write_record(output_dir: str, flag_values, runner: str,
                 data: Optional[Dict[str, object]] = None) -> None:
    """Writes `run_flags.json` (atomically; the chief only): the flags, and `data`, what
    the data implied."""
    record = {"flags": training_record(flag_values, runner), **({"data": data} if data else {})}
    text = json.dumps(record, indent=2, sort_keys=True)
    io_utils.atomic_write_text(io_utils.join(output_dir, RECORD_NAME), text + "\n")


# What --overwrite_output_dir leaves in place: the feature cache (its entries are keyed by
# data file, tokenizer and flags) and the lock of the run doing the clearing.
KEPT_BY_OVERWRITE = (FEATURE_CACHE_DIR, LOCK_NAME)
_OVERWRITE = "--overwrite_output_dir: --output_dir"


def check_may_clear(path: str) -> None:
    """Raises ForeignFileError (one line naming the file) unless every file in `path`
    but the feature cache was written by a run there (its manifest, `io_utils.folders`)."""
    folders.check_ours(path, _OVERWRITE, "deleted", keep=KEPT_BY_OVERWRITE)


def clear_output_dir(path: str) -> List[str]:
    """--overwrite_output_dir: deletes what runs wrote in `path`, the feature cache
    excepted, after checking every file against the folder's manifest: a file a run did
    not write there (anywhere inside) stops it, naming that file, and nothing is deleted.
    Returns the top-level names deleted."""
    names = folders.clear(path, _OVERWRITE, keep=KEPT_BY_OVERWRITE)
    if names:
        logging.info("--overwrite_output_dir: deleted %s from %s", ", ".join(names), path)
    return names
