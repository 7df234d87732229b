"""Any TensorFlow Datasets text set as a task (`--data_source=tfds --tfds_name=NAME`).

The set's features are its columns: the text and label features are found as in your
own files (`text_task.TEXT_NAMES`, ...) after the builder's own `supervised_keys`
(`imdb_reviews`: text, label; `ag_news_subset`: description, label); the label names are
its `ClassLabel`'s, in its order. The first run downloads and prepares the set in TFDS's
data directory (`~/tensorflow_datasets`, or `$TFDS_DATA_DIR`); later runs read it from
there. Offline with nothing prepared, one line says so at once.
"""

from typing import Dict, List, Optional, Sequence

from adapter_bert.data.glue_tfds import download_and_prepare
from adapter_bert.data.text_files import DataFileError, Table
from adapter_bert.data.text_task import Columns, TextTask


class TfdsTextTask(TextTask):
    """A `TextTask` whose splits are a TFDS builder's (`tfds_name`:
    `name[/config][:version]`). `splits` maps ours to TFDS's (None: validation else test for
    dev, test for test); `columns` name features; `data_dir` is TFDS's.
    """

    def __init__(self, name: str, tfds_name: str, splits: Dict[str, Optional[str]],
                 columns: Columns, labels: Optional[Sequence[str]] = None,
                 task_type: str = "classification", data_dir: Optional[str] = None):
        import tensorflow_datasets as tfds  # only a TFDS run needs it
        try:
            self.builder = tfds.builder(tfds_name, data_dir=data_dir)
        except Exception as e:  # TFDS raises its own DatasetNotFoundError and others
            raise DataFileError(f"--tfds_name={tfds_name}: {str(e).strip().splitlines()[0]}") \
                from None
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
        import tensorflow_datasets as tfds
        tfds_split = self.files[split]
        if not self.builder.is_prepared():
            download_and_prepare(self.builder, "prepare it on a machine with internet and "
                                               "copy TFDS's data directory, or set "
                                               "$TFDS_DATA_DIR")
        try:
            dataset = self.builder.as_dataset(split=tfds_split, shuffle_files=False)
        except Exception as e:  # an unknown split name, ...
            raise DataFileError(f"--tfds_name={self.tfds_name}: cannot read split "
                                f"{tfds_split!r} ({str(e).strip().splitlines()[0]}); its "
                                f"splits: {', '.join(self.builder.info.splits)}") from None
        features = self.builder.info.features
        class_names = {key: list(features[key].names) for key in features.keys()
                       if getattr(features[key], "names", None)}
        records = [_record(r, class_names) for r in tfds.as_numpy(dataset)]
        return Table.of_records(f"tfds {self.tfds_name} split {tfds_split}", records)


def _record(record: dict, class_names: Dict[str, List[str]]) -> Dict[str, object]:
    """A TFDS record as a row: texts decoded, numbers as Python's, ClassLabel ids as their
    names (id -1, TFDS's unlabeled, as None)."""
    row = {}
    for key, value in record.items():
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        elif hasattr(value, "item"):  # numpy scalars
            value = value.item()
        names = class_names.get(key)
        if names and isinstance(value, int):
            value = names[value] if 0 <= value < len(names) else None
        row[key] = value
    return row


def _default_split(split: str, available: Sequence[str]) -> str:
    if split == "dev":
        return "validation" if "validation" in available else "test"
    return split
