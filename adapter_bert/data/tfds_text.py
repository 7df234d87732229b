"""TensorFlow Datasets, the one reader: any TFDS text set as a task, and GLUE's tasks.

`--data_source=tfds --tfds_name=NAME` (`TfdsTextTask`): the set's features are its
columns, found as in your own files (`text_task.TEXT_NAMES`, ...) after the builder's own
`supervised_keys` (`imdb_reviews`: text, label; `ag_news_subset`: description, label);
the label names are its `ClassLabel`'s, in its order. `--data_source=tfds` with a GLUE
task (`load_glue_examples`): TFDS's `glue/<task>` records, labelled and ordered as the TSV
processors read them.

The first run downloads and prepares the set in TFDS's data directory
(`~/tensorflow_datasets`, or `$TFDS_DATA_DIR`), with TFDS's progress bars; later runs read
it from there without the network. Offline with nothing prepared, loading stops at once
with one line naming the other ways to the data, instead of TFDS's minutes of retries.
"""

import socket
from typing import Dict, List, Optional, Sequence, Tuple, Type
from urllib.parse import urlsplit

from absl import logging

from adapter_bert.data.glue import (DataProcessor, GlueDataError, InputExample,
                                     canonical_task_name, get_processor)
from adapter_bert.data.text_files import DataFileError, Table
from adapter_bert.data.text_task import Columns, TextTask
from adapter_bert.errors import MissingDependency, UserError

# Seconds the reachability probe waits for each of TFDS's download hosts.
PROBE_TIMEOUT_S = 5.0

# What TFDS raises for a set, split or data directory it cannot use (its
# DatasetNotFoundError is a ValueError; reading a damaged file raises TensorFlow's errors).
_TFDS_ERRORS = (ValueError, KeyError, OSError, AssertionError)


def _tfds():
    """The tensorflow_datasets module; MissingDependency naming the install without it."""
    try:
        import tensorflow_datasets  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise MissingDependency("--data_source=tfds needs tensorflow_datasets, which is not "
                                "installed (pip install tensorflow-datasets), or read the "
                                "data from files instead") from e
    return tensorflow_datasets


def _errors():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return _TFDS_ERRORS + (tf.errors.OpError,)


def open_builder(name: str, data_dir: Optional[str], what: str,
                 error: Type[UserError] = DataFileError):
    """TFDS's builder of `name` (`name[/config][:version]`); `error` (starting with `what`)
    for a set TFDS does not know."""
    tfds = _tfds()
    try:
        return tfds.builder(name, data_dir=data_dir)
    except _errors() as e:
        raise error(f"{what}: {_first_line(e)}") from None


def read_split(builder, split: str, what: str, remedy: str,
               error: Type[UserError] = DataFileError) -> List[Dict[str, object]]:
    """A split's records as rows: texts decoded, numbers as Python's (ClassLabel ids
    kept), in TFDS's stored order. Prepares the builder first if it is not (`remedy`: the
    other ways to the data, for the offline line). Raises `error` starting with `what`
    when TFDS cannot read the split."""
    if not builder.is_prepared():
        download_and_prepare(builder, remedy, error)
    tfds = _tfds()
    try:
        records = list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))
    except _errors() as e:
        raise error(f"{what}: cannot read split {split!r} ({_first_line(e)}); its splits: "
                    f"{', '.join(builder.info.splits)}; {remedy}") from None
    return [{key: _plain(value) for key, value in record.items()} for record in records]


def _plain(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def download_and_prepare(builder, remedy: str, error: Type[UserError] = DataFileError) -> None:
    """Downloads and prepares a TFDS builder, failing fast when offline.

    TFDS itself retries an unreachable host for minutes with a warning per retry; one
    short connection attempt per host tells first whether a download can work at all.

    Raises:
        `error`: offline; the line ends with `remedy` (the other ways to the data).
    """
    name = builder.name + (f"/{builder.builder_config.name}" if builder.builder_config else "")
    hosts = download_hosts(builder)
    if hosts and not any_host_reachable(hosts):
        raise error(
            f"{name} is not in TFDS's data directory {builder.data_dir_root} and cannot be "
            f"downloaded (no connection to {', '.join(h for h, _ in hosts)}); {remedy}")
    logging.info("Downloading %s with tensorflow-datasets into %s (once: later runs "
                 "read it from there)", name, builder.data_dir_root)
    builder.download_and_prepare()


def download_hosts(builder) -> List[Tuple[str, int]]:
    """The (host, port) pairs of the URLs a TFDS builder downloads from, in order."""
    hosts = []
    for url in sorted(builder.url_infos or {}):
        parts = urlsplit(url)
        if parts.hostname:
            host = (parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
            if host not in hosts:
                hosts.append(host)
    return hosts


def any_host_reachable(hosts: Sequence[Tuple[str, int]],
                       timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection opens to at least one of `hosts` within `timeout` each."""
    for host, port in hosts:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return True
        except OSError:
            continue
    return False


def _first_line(error: Exception) -> str:
    """An exception's message cut to its first line (TFDS's can run to pages)."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]


# ------------------------------------------------------------------ any text set
class TfdsTextTask(TextTask):
    """A `TextTask` whose splits are a TFDS builder's (`tfds_name`:
    `name[/config][:version]`). `splits` maps ours to TFDS's (None: validation else test for
    dev, test for test); `columns` name features; `data_dir` is TFDS's.
    """

    def __init__(self, name: str, tfds_name: str, splits: Dict[str, Optional[str]],
                 columns: Columns, labels: Optional[Sequence[str]] = None,
                 task_type: str = "classification", data_dir: Optional[str] = None):
        self.builder = open_builder(tfds_name, data_dir, f"--tfds_name={tfds_name}")
        self.tfds_name = tfds_name
        available = list(self.builder.info.splits) if self.builder.info.splits else []
        chosen = {split: given or _default_split(split, available)
                  for split, given in splits.items()}
        columns = self._with_supervised_keys(columns)
        super().__init__(name, chosen, columns, labels=labels or self._class_names(columns),
                         task_type=task_type)

    def _with_supervised_keys(self, columns: Columns) -> Columns:
        keys = self.builder.info.supervised_keys
        if not keys or len(keys) != 2 or not all(isinstance(k, str) for k in keys):
            return columns
        return Columns(text=columns.text if columns.text is not None else keys[0],
                       pair=columns.pair,
                       label=columns.label if columns.label is not None else keys[1],
                       header=True, keep=columns.keep)

    def _class_names(self, columns: Columns) -> Optional[List[str]]:
        features = self.builder.info.features
        feature = features[columns.label] if isinstance(columns.label, str) \
            and columns.label in features.keys() else None
        names = getattr(feature, "names", None)
        return list(names) if names else None

    def _table(self, split: str) -> Table:
        tfds_split = self.files[split]
        rows = read_split(self.builder, tfds_split, f"--tfds_name={self.tfds_name}",
                          "prepare it on a machine with internet and copy TFDS's data "
                          "directory, or set $TFDS_DATA_DIR")
        features = self.builder.info.features
        class_names = {key: list(features[key].names) for key in features.keys()
                       if getattr(features[key], "names", None)}
        for row in rows:  # ClassLabel ids as their names (-1, TFDS's unlabeled, as None)
            for key, names in class_names.items():
                if isinstance(row.get(key), int):
                    row[key] = names[row[key]] if 0 <= row[key] < len(names) else None
        return Table.of_records(f"tfds {self.tfds_name} split {tfds_split}", rows)


def _default_split(split: str, available: Sequence[str]) -> str:
    if split == "dev":
        return "validation" if "validation" in available else "test"
    return split


# ------------------------------------------------------------------ GLUE
def _tfds_processor(task_name: str) -> DataProcessor:
    """The processor of a task TFDS's `glue` holds; GlueDataError for XNLI."""
    processor = get_processor(task_name)
    if processor.tfds is None:
        raise GlueDataError(f"{task_name} is not part of TFDS glue: read its TSV files "
                            "(--data_source=tsv)")
    return processor


def glue_record_to_example(task_name: str, record: dict,
                           set_type: str) -> InputExample:
    """One TFDS `glue/<task>` record (bytes or str, numpy or Python numbers) ->
    `InputExample`, labelled in the TSV processor's vocabulary (a float for STS-B; None for
    TFDS's -1). Raises GlueDataError for a missing field or a label id out of range.
    """
    source = _tfds_processor(task_name).tfds
    needed = [source.text] + ([source.pair] if source.pair else []) + ["label", "idx"]
    missing = [k for k in needed if k not in record]
    if missing:
        raise GlueDataError(
            f"TFDS glue/{source.config} record is missing field(s) "
            f"{missing}; it has {sorted(record)}")
    idx = int(record["idx"])
    text_b = _text(record[source.pair]) if source.pair else None
    raw_label = record["label"]
    if not source.label_names:  # a float score (STS-B)
        label = float(raw_label)
        label = None if label == -1 else label
    else:
        label_id = int(raw_label)
        names = source.label_names
        if label_id == -1:
            label = None
        elif 0 <= label_id < len(names):
            label = names[label_id]
        else:
            raise GlueDataError(
                f"TFDS glue/{source.config} record idx {idx}: label "
                f"id {label_id} out of range 0..{len(names) - 1}")
    return InputExample(guid=f"{set_type}-{idx}", text_a=_text(record[source.text]),
                        text_b=text_b, label=label)


def load_glue_examples(task_name: str, split: str,
                       data_dir: Optional[str] = None) -> List[InputExample]:
    """Reads a GLUE split from TensorFlow Datasets (`glue/<task>`), labelled as the TSV
    processors label. `split`: "train", "dev", "test" (MNLI: "dev_matched", ...);
    `data_dir` goes to `tfds.load`. Raises ImportError without tensorflow_datasets and
    GlueDataError for an unknown split or data TFDS cannot load.
    """
    name = canonical_task_name(task_name)
    config = _tfds_processor(name).tfds.config
    splits = dict(_tfds_processor(name).tfds.splits)
    if split not in splits:
        raise GlueDataError(
            f"TFDS glue/{config} has no split {split!r}; valid splits: "
            f"{', '.join(splits)}")
    what = f"TFDS glue/{config} (data_dir={data_dir!r})"
    builder = open_builder(f"glue/{config}", data_dir, what, GlueDataError)
    records = read_split(builder, splits[split], what, _other_ways(name), GlueDataError)
    set_type = split.split("_")[0]
    # TFDS stores a split shuffled; its `idx` is the row in GLUE's own file, so sorting by
    # it gives the TSV processors' order, and the same seed trains on the same batches.
    records.sort(key=lambda record: int(record["idx"]))
    return [glue_record_to_example(name, r, set_type) for r in records]


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _other_ways(task: str) -> str:
    """The two ways to get a task's data, for the end of an error line."""
    folder = get_processor(task).folder
    return (f"connect to the internet for TFDS's download, or read a local glue_data folder "
            f"with --data_source=tsv --data_dir=<glue_data>/{folder} "
            f"(make demo GLUE_DIR=<glue_data>)")
