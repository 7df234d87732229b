"""Your own data from run_classifier.py's flags: the task a run reads (files or a TFDS
text set) and where its label names come from when it does not train.

The label names of a run that trains come from `--labels` or the training data. A run
that only evaluates or predicts takes them from `--labels`, else from the adapter it
loads (`--load_adapter`), else from the adapter a training run left in --output_dir: the
head's order must be the order it was trained with.
"""

from typing import Optional

from adapter_bert import io_utils
from adapter_bert.adapters.files import CONFIG_NAME, read_adapter_config
from adapter_bert.data.text_files import parse_column
from adapter_bert.data.text_task import Columns, TextTask, task_name_of
from adapter_bert.data.tfds_text import TfdsTextTask
from adapter_bert.runners.base import ADAPTER_DIR
from adapter_bert.command_line.flag_checks import FlagError


def own_task(values) -> TextTask:
    """The task of a run on your own files (or a TFDS set), from its flags.

    Raises:
        FlagError: no label names can be had for a run that does not train.
    """
    columns = Columns(text=parse_column(values.text_column),
                      pair=parse_column(values.text_pair_column),
                      label=parse_column(values.label_column),
                      header=None if values.header is None else values.header == "true",
                      keep=tuple(parse_column(c) for c in values.keep_columns or ()))
    stored = None if values.do_train else _trained_description(values)
    name = values.task_name or (stored or {}).get("task") or _default_name(values)
    _check_labels_flag(values.labels)
    labels = values.labels or (None if values.do_train else (stored or {}).get("labels"))
    source = "--labels" if values.labels else "the adapter this run loads"
    task_type = _task_type(values, stored)
    if task_type == "regression" and values.labels:
        why = "--task_type=regression" if "task_type" not in ((stored or {}).get(
            "training") or {}) else "the adapter this run loads is a regression"
        raise FlagError(f"--labels={','.join(values.labels)}: {why} (one score, no label "
                        f"names); leave --labels out")
    if values.data_source == "tfds":
        splits = {"train": values.tfds_train_split} if values.do_train else {}
        if values.do_eval and values.dev_fraction is None:
            splits["dev"] = values.tfds_dev_split
        if values.do_predict:
            splits["test"] = values.tfds_test_split
        return TfdsTextTask(name, values.tfds_name, splits, columns, labels=labels,
                            task_type=task_type)
    files = {split: values[f"{split}_file"]
             for split, action in (("train", "do_train"), ("dev", "do_eval"),
                                   ("test", "do_predict"))
             if values[f"{split}_file"] and values[action]}
    if not values.do_train and task_type == "classification" and not labels:
        raise FlagError("no label names for an evaluation without training: pass "
                        "--labels=a,b,... in the trained order, or --load_adapter (or the "
                        "--output_dir of the training run)")
    task = TextTask(name, files, columns, values.file_format, labels, task_type, source)
    if not files:  # an adapter exported alone takes pairs as it was trained to
        task.pair = task.pair or bool(((stored or {}).get("training") or {}).get("pair"))
    return task


def _check_labels_flag(labels) -> None:
    """--labels names each label once, none empty."""
    if not labels:
        return
    given = "--labels=" + ",".join(labels)
    if any(not name.strip() for name in labels):
        raise FlagError(f"{given}: an empty label name; name each label once, "
                        f"comma-separated")
    repeated = sorted({name for name in labels if labels.count(name) > 1})
    if repeated:
        raise FlagError(f"{given}: {', '.join(repr(n) for n in repeated)} named more than "
                        f"once; the head gets one output per label")


def _task_type(values, stored: Optional[dict]) -> str:
    """--task_type, or, for a run that does not train, the one the adapter records."""
    recorded = ((stored or {}).get("training") or {}).get("task_type")
    if recorded is None:
        return values.task_type
    if values.was_set("task_type") and values.task_type != recorded:
        raise FlagError(f"--task_type={values.task_type}: the adapter this run loads was "
                        f"trained as a {recorded} task; leave --task_type out")
    return recorded


def _default_name(values) -> str:
    if values.tfds_name:
        return values.tfds_name.split(":")[0].split("/")[0]
    path = values.train_file or values.dev_file or values.test_file
    return task_name_of(path)


def _trained_description(values) -> Optional[dict]:
    """adapter_config.json of --load_adapter, else of the training run in --output_dir."""
    for directory in (values.load_adapter, io_utils.join(values.output_dir, ADAPTER_DIR)):
        if directory and io_utils.isfile(io_utils.join(directory, CONFIG_NAME)):
            return read_adapter_config(directory)
    return None
