"""GLUE from TensorFlow Datasets (`--data_source=tfds`): `glue/<task>` records ->
`InputExample`s with the labels and texts the TSV processors give."""

from typing import List, Optional

from adapter_bert.data.glue import (BINARY_LABELS, GlueDataError, InputExample,
                                     canonical_task_name)

# TFDS `glue/<config>` names and the field(s) holding text_a / text_b.
_TFDS_CONFIGS = {
    "cola": ("cola", "sentence", None),
    "sst-2": ("sst2", "sentence", None),
    "mrpc": ("mrpc", "sentence1", "sentence2"),
    "sts-b": ("stsb", "sentence1", "sentence2"),
    "qqp": ("qqp", "question1", "question2"),
    "mnli": ("mnli", "premise", "hypothesis"),
    "qnli": ("qnli", "question", "sentence"),
    "rte": ("rte", "sentence1", "sentence2"),
    "wnli": ("wnli", "sentence1", "sentence2"),
    "ax": ("ax", "premise", "hypothesis"),
}

# TFDS ClassLabel names, by integer id, translated to the TSV label strings.
# (cola: unacceptable/acceptable, sst2: negative/positive, mrpc:
# not_equivalent/equivalent, qqp: not_duplicate/duplicate, wnli:
# not_entailment/entailment -- all 0/1 in the TSVs.)
_TFDS_LABELS = {
    "cola": BINARY_LABELS, "sst-2": BINARY_LABELS, "mrpc": BINARY_LABELS, "qqp": BINARY_LABELS,
    "wnli": BINARY_LABELS,
    "mnli": ("entailment", "neutral", "contradiction"),
    "ax": ("entailment", "neutral", "contradiction"),
    "qnli": ("entailment", "not_entailment"),
    "rte": ("entailment", "not_entailment"),
}

# Our split names -> TFDS split names.
_TFDS_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
_TFDS_MNLI_SPLITS = {
    "train": "train",
    "dev": "validation_matched", "dev_matched": "validation_matched",
    "dev_mismatched": "validation_mismatched",
    "test": "test_matched", "test_matched": "test_matched",
    "test_mismatched": "test_mismatched",
}


def _tfds_task(task_name: str) -> str:
    """The canonical name of a task TFDS's `glue` holds; GlueDataError for XNLI."""
    name = canonical_task_name(task_name)
    if name not in _TFDS_CONFIGS:
        raise GlueDataError(f"{task_name} is not part of TFDS glue: read its TSV files "
                            "(--data_source=tsv)")
    return name


def _as_text(value) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if hasattr(value, "numpy"):  # A tf.Tensor that was not converted.
        return _as_text(value.numpy())
    return str(value)


def tfds_record_to_example(task_name: str, record: dict,
                           set_type: str) -> InputExample:
    """Converts one TFDS `glue/<task>` record (a dict) to an `InputExample`.

    Args:
      task_name: GLUE task name (see `get_processor`).
      record: A dict such as `{"sentence1": b"...", "sentence2": b"...",
        "label": 1, "idx": 7}`; strings may be bytes or str, numbers numpy
        scalars or Python numbers. Label -1 (TFDS test splits) means unlabeled.
      set_type: "train", "dev" or "test"; used in the guid.

    Returns:
      An `InputExample` whose label uses the same vocabulary as the TSV
      processor of the task (e.g. "0"/"1", "entailment"), a float for STS-B,
      or None for label -1.

    Raises:
      GlueDataError: If a field is missing or the label id is out of range.
    """
    name = _tfds_task(task_name)
    _, field_a, field_b = _TFDS_CONFIGS[name]
    needed = [field_a] + ([field_b] if field_b else []) + ["label", "idx"]
    missing = [k for k in needed if k not in record]
    if missing:
        raise GlueDataError(
            f"TFDS glue/{_TFDS_CONFIGS[name][0]} record is missing field(s) "
            f"{missing}; it has {sorted(record)}")
    idx = int(record["idx"])
    text_b = _as_text(record[field_b]) if field_b else None
    raw_label = record["label"]
    if name == "sts-b":
        label = float(raw_label)
        label = None if label == -1 else label
    else:
        label_id = int(raw_label)
        names = _TFDS_LABELS[name]
        if label_id == -1:
            label = None
        elif 0 <= label_id < len(names):
            label = names[label_id]
        else:
            raise GlueDataError(
                f"TFDS glue/{_TFDS_CONFIGS[name][0]} record idx {idx}: label "
                f"id {label_id} out of range 0..{len(names) - 1}")
    return InputExample(guid=f"{set_type}-{idx}", text_a=_as_text(record[field_a]),
                        text_b=text_b, label=label)


def load_tfds_examples(task_name: str, split: str,
                       data_dir: Optional[str] = None) -> List[InputExample]:
    """Reads a GLUE split from TensorFlow Datasets (`glue/<task>`).

    Args:
      task_name: GLUE task name (see `get_processor`).
      split: "train", "dev" or "test"; for MNLI also "dev_matched",
        "dev_mismatched", "test_matched", "test_mismatched".
      data_dir: Optional TFDS data directory (passed to `tfds.load`).

    Returns:
      A list of `InputExample`s with the same label vocabulary as the TSV
      processors; test examples have `label=None`.

    Raises:
      ImportError: If tensorflow_datasets is not installed.
      GlueDataError: If the split is unknown or TFDS cannot load the data
        (e.g. no network and nothing in `data_dir`).
    """
    name = _tfds_task(task_name)
    config = _TFDS_CONFIGS[name][0]
    splits = _TFDS_MNLI_SPLITS if name == "mnli" else _TFDS_SPLITS
    if name == "ax":
        splits = {"test": "test"}
    if split not in splits:
        raise GlueDataError(
            f"TFDS glue/{config} has no split {split!r}; valid splits: "
            f"{', '.join(splits)}")
    try:
        import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise ImportError(
            "load_tfds_examples needs tensorflow_datasets, which is not "
            "installed (pip install tensorflow-datasets), or use the TSV "
            "processors with a glue_data directory instead") from e
    try:
        dataset = tfds.load(f"glue/{config}", split=splits[split],
                            data_dir=data_dir, shuffle_files=False)
        records = list(tfds.as_numpy(dataset))
    except Exception as e:  # pylint: disable=broad-except
        raise GlueDataError(
            f"could not load TFDS glue/{config} split {splits[split]!r} "
            f"(data_dir={data_dir!r}): {e}. TFDS needs network access to "
            "download GLUE, or a data_dir that already holds it.") from e
    set_type = split.split("_")[0]
    return [tfds_record_to_example(name, r, set_type) for r in records]
