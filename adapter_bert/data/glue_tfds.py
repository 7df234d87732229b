"""GLUE from TensorFlow Datasets (`--data_source=tfds`): `glue/<task>` records ->
`InputExample`s with the labels and texts the TSV processors give.

The first run downloads the task through TFDS's own `glue` builder (with TFDS's progress
bars) and prepares it in TFDS's data directory (`~/tensorflow_datasets`, or
`$TFDS_DATA_DIR`); later runs read it from there without the network. Offline, with
nothing prepared, loading stops at once with one line naming both ways to get the data,
instead of TFDS's minutes of download retries.
"""

import socket
from typing import List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from absl import logging

from adapter_bert.errors import MissingDependency
from adapter_bert.data.glue import (DataProcessor, GlueDataError, InputExample,
                                     canonical_task_name, get_processor)


def _tfds_processor(task_name: str) -> DataProcessor:
    """The processor of a task TFDS's `glue` holds; GlueDataError for XNLI."""
    processor = get_processor(task_name)
    if processor.tfds is None:
        raise GlueDataError(f"{task_name} is not part of TFDS glue: read its TSV files "
                            "(--data_source=tsv)")
    return processor


def _as_text(value) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if hasattr(value, "numpy"):  # A tf.Tensor that was not converted.
        return _as_text(value.numpy())
    return str(value)


def tfds_record_to_example(task_name: str, record: dict,
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
    text_b = _as_text(record[source.pair]) if source.pair else None
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
    return InputExample(guid=f"{set_type}-{idx}", text_a=_as_text(record[source.text]),
                        text_b=text_b, label=label)


def load_tfds_examples(task_name: str, split: str,
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
    try:
        import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise MissingDependency(
            "load_tfds_examples needs tensorflow_datasets, which is not "
            "installed (pip install tensorflow-datasets), or use the TSV "
            "processors with a glue_data directory instead") from e
    try:
        builder = tfds.builder(f"glue/{config}", data_dir=data_dir)
        if not builder.is_prepared():
            download_and_prepare(builder, _other_ways(name))
        dataset = builder.as_dataset(split=splits[split], shuffle_files=False)
        records = list(tfds.as_numpy(dataset))
    except GlueDataError:
        raise
    except Exception as e:  # pylint: disable=broad-except
        raise GlueDataError(
            f"could not load TFDS glue/{config} split {splits[split]!r} "
            f"(data_dir={data_dir!r}): {_first_line(e)}; {_other_ways(name)}") from e
    set_type = split.split("_")[0]
    # TFDS stores a split shuffled; its `idx` is the row in GLUE's own file, so sorting by
    # it gives the TSV processors' order, and the same seed trains on the same batches.
    records.sort(key=lambda record: int(record["idx"]))
    return [tfds_record_to_example(name, r, set_type) for r in records]


# Seconds the reachability probe waits for each of TFDS's download hosts.
PROBE_TIMEOUT_S = 5.0


def download_and_prepare(builder, remedy: str) -> None:
    """Downloads and prepares a TFDS builder, failing fast when offline.

    TFDS itself retries an unreachable host for minutes with a warning per retry; one
    short connection attempt per host tells first whether a download can work at all.

    Raises:
        GlueDataError: offline; the line ends with `remedy` (the other ways to the data).
    """
    name = builder.name + (f"/{builder.builder_config.name}" if builder.builder_config else "")
    hosts = download_hosts(builder)
    if hosts and not any_host_reachable(hosts):
        raise GlueDataError(
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


def _other_ways(task: str) -> str:
    """The two ways to get a task's data, for the end of an error line."""
    folder = get_processor(task).folder
    return (f"connect to the internet for TFDS's download, or read a local glue_data folder "
            f"with --data_source=tsv --data_dir=<glue_data>/{folder} "
            f"(make demo GLUE_DIR=<glue_data>)")


def _first_line(error: Exception) -> str:
    """An exception's message cut to its first line (TFDS's can run to pages)."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]
