"""GLUE data processors: TSV files -> `InputExample`s (TFDS records: `tfds_text`).

Google's `run_classifier.py` processors, one per task: each task's `_Layout`s are the
configuration of the one delimited-text reader (`text_files`: no quoting, as the original,
since GLUE text has unbalanced `"`; a BOM, CRLF and blank lines read as plain files). Read
strictly: a missing or empty file, a short row, an unknown label, bytes that are not UTF-8
or another task's header raise `GlueDataError` with file and 1-based line. Test examples
have `label=None`; `guid` is `"<split>-<index>"` from the file's index column where it has
one.
"""

import dataclasses
import math
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

# Re-exported so that callers only need this module.
from adapter_bert import io_utils
from adapter_bert.data.text_files import delimited_rows, read_data_file
from adapter_bert.data.features import (  # noqa: F401
    convert_examples_to_features,
    pad_to_multiple_of_batch,
    truncate_seq_pair,
)
from adapter_bert.errors import UserError


class GlueDataError(UserError):
    """A GLUE data file is missing, malformed or has an unexpected label."""


class GlueDataFileNotFoundError(GlueDataError, FileNotFoundError):
    """A GLUE data file does not exist (also a `FileNotFoundError`)."""


@dataclasses.dataclass
class InputExample:
    """A single training/dev/test example for sequence (pair) classification.

    Attributes:
      guid: Unique id, e.g. "train-12".
      text_a: The first (or only) sequence, untokenized.
      text_b: The second sequence for pair tasks, else None.
      label: The label string ("0", "entailment", ...), a float for STS-B, or
        None for unlabeled (test) examples.
      kept: the values of the row's --keep_columns, copied into the outputs.
    """

    guid: str
    text_a: str
    text_b: Optional[str] = None
    label: Optional[object] = None
    kept: Tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where the fields of one split live in its TSV (0-based columns)."""

    filename: str
    min_columns: int
    text_a: int
    text_b: Optional[int] = None
    label: Optional[int] = None  # None: unlabeled split; may be negative (-1 = last).
    index: Optional[int] = None  # Column with the example's id, if any.
    header: bool = True
    language: Optional[int] = None  # Column naming the row's language (XNLI), if any.
    # The header's column names in the files download_glue_data.py writes (None: no
    # header, or not known): only used to recognise another task's files.
    columns: Optional[Tuple[str, ...]] = None


def _read_tsv_rows(path: str, task: str) -> List[Tuple[int, List[str]]]:
    """A TSV file's rows with their 1-based lines (`text_files`: no quoting, blank lines
    skipped). Raises GlueDataFileNotFoundError, or GlueDataError for an empty, unreadable
    or non-UTF-8 file."""
    text = read_data_file(path, GlueDataError, f"{task} {path}",
                          missing=lambda _: GlueDataFileNotFoundError(
                              f"{task}: data file not found: {path}"))
    rows = list(delimited_rows(text, path, "tsv"))
    if not rows:
        raise GlueDataError(f"{task} {path}: file is empty")
    return rows


@dataclasses.dataclass(frozen=True)
class TfdsSource:
    """Where a task lives in TensorFlow Datasets' `glue` builder.

    Attributes:
        config: the `glue/<config>` name.
        text, pair: the features holding text_a and text_b (pair None: single texts).
        label_names: the TSV label of each ClassLabel id (empty: a float score).
        splits: our split name -> TFDS's.
    """

    config: str
    text: str
    pair: Optional[str] = None
    label_names: Tuple[str, ...] = ()
    splits: Tuple[Tuple[str, str], ...] = (("train", "train"), ("dev", "validation"),
                                           ("test", "test"))


class DataProcessor:
    """Base class: one GLUE task, described whole, and the reader of its files.

    The description is what the runner, the metrics, TFDS and the ablation read:
    `task` (its name), `labels`, `is_regression`, `metrics` (a kind of
    `metrics.classification`), `eval_splits` and `test_splits` (what --do_eval and
    --do_predict read and write), `folder` (its folder in glue_data) and `tfds` (its
    place in TFDS's `glue`, or None). Subclasses set those and one `_Layout` per split in
    `layouts`; `splits` lists the split names `get_examples` accepts.
    """

    task = ""
    labels: Sequence[str] = ()
    is_regression = False
    layouts: Dict[str, _Layout] = {}
    metrics = "accuracy"
    eval_splits: Sequence[Tuple[str, str]] = (("dev", "eval_"),)
    test_splits: Sequence[Tuple[str, str]] = (("test", "test_results.tsv"),)
    folder = ""
    tfds: Optional[TfdsSource] = None

    @property
    def splits(self) -> List[str]:
        return list(self.layouts)

    @property
    def pair(self) -> bool:
        """Whether the task's examples are sentence pairs."""
        return any(layout.text_b is not None for layout in self.layouts.values())

    def get_labels(self) -> List[str]:
        """Returns the label vocabulary (empty for regression tasks)."""
        return list(self.labels)

    def get_train_examples(self, data_dir: str) -> List[InputExample]:
        """Returns the labeled training examples (`train.tsv`)."""
        return self.get_examples(data_dir, "train")

    def get_dev_examples(self, data_dir: str) -> List[InputExample]:
        """Returns the labeled dev examples (MNLI: `dev_matched.tsv`)."""
        return self.get_examples(data_dir, "dev")

    def get_test_examples(self, data_dir: str) -> List[InputExample]:
        """Returns the unlabeled test examples (MNLI: `test_matched.tsv`)."""
        return self.get_examples(data_dir, "test")

    def get_examples(self, data_dir: str, split: str) -> List[InputExample]:
        """One split of this task (one of `self.splits`) from `data_dir`, in file order.
        Raises GlueDataError for an unknown split or a missing or malformed file (naming
        file and line).
        """
        if split not in self.layouts:
            raise GlueDataError(
                f"{self.task} has no split {split!r}; valid splits: "
                f"{', '.join(self.splits)}")
        layout = self.layouts[split]
        path = io_utils.join(data_dir, layout.filename)
        rows = _read_tsv_rows(path, self.task)
        self._check_not_another_task(rows[0][1], layout, path)
        first = 1 if layout.header else 0
        if len(rows) <= first:
            raise GlueDataError(
                f"{self.task} {path}: file has a header but no examples")
        set_type = split.split("_")[0]  # dev_matched -> dev
        examples = []
        for i, (line, row) in enumerate(rows[first:]):
            if self._in_language(row, layout):
                examples.append(self._row_to_example(row, layout, path, line, str(i), set_type))
        return examples

    def _check_not_another_task(self, row: List[str], layout: _Layout, path: str) -> None:
        """Raises GlueDataError when the first line is the header of another task's files
        and not this split's: its columns would be read as this task's."""
        header = tuple(row)
        if header == layout.columns:
            return
        others = sorted(tasks_with_header(header) - {self.task})
        if not others:
            return
        expected = f"({', '.join(layout.columns)})" if layout.columns else "(no header)"
        raise GlueDataError(
            f"{self.task} {path} line 1: the header ({', '.join(header)}) is that of "
            f"{' or '.join(others)} files, not {self.task}'s {expected}: is --data_dir "
            f"another task's folder?")

    def _in_language(self, row, layout) -> bool:
        """Whether a row belongs to the processor's language (always, without a column)."""
        if layout.language is None or len(row) <= layout.language:
            return True  # too short a row is reported by _row_to_example
        return row[layout.language] == getattr(self, "language", None)

    def _row_to_example(self, row, layout, path, line_no, guid_default, set_type):
        where = f"{self.task} {path} line {line_no}"
        if len(row) < layout.min_columns:
            raise GlueDataError(
                f"{where}: expected at least {layout.min_columns} "
                f"tab-separated columns, found {len(row)}")
        index = row[layout.index] if layout.index is not None else guid_default
        text_b = row[layout.text_b] if layout.text_b is not None else None
        label = None
        if layout.label is not None:
            label = self._parse_label(row[layout.label], where)
        return InputExample(guid=f"{set_type}-{index}",
                            text_a=row[layout.text_a], text_b=text_b,
                            label=label)

    def _parse_label(self, value: str, where: str):
        if self.is_regression:
            try:
                score = float(value)
            except ValueError:
                raise GlueDataError(
                    f"{where}: label {value!r} is not a number") from None
            if not math.isfinite(score):  # "nan" would make every loss NaN
                raise GlueDataError(
                    f"{where}: label {value!r} is not a finite number")
            return score
        if value not in self.labels:
            raise GlueDataError(
                f"{where}: unknown label {value!r}; allowed labels: "
                f"{', '.join(self.labels)}")
        return value


BINARY_LABELS = ("0", "1")
_NLI3 = ("contradiction", "entailment", "neutral")
_NLI2 = ("entailment", "not_entailment")
# TFDS's ClassLabel order of the three NLI labels (glue/mnli, glue/ax).
_NLI3_TFDS = ("entailment", "neutral", "contradiction")

# Header columns of the files download_glue_data.py writes (`_Layout.columns`).
_MRPC = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")
_STSB = ("index", "genre", "filename", "year", "old_index", "source1", "source2",
         "sentence1", "sentence2")
_MNLI = ("index", "promptID", "pairID", "genre", "sentence1_binary_parse",
         "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
         "sentence2")


def _labeled(min_columns: int, **fields) -> Dict[str, _Layout]:
    """The layouts of `train.tsv` and `dev.tsv`, which share their columns."""
    return {split: _Layout(f"{split}.tsv", min_columns, **fields) for split in ("train", "dev")}


def _task(name: str, doc: str, labels: Tuple[str, ...], tfds: TfdsSource,
          layouts: Dict[str, _Layout], **more) -> type:
    """A task's processor class: one row of GLUE's table, under Google's class name."""
    class_name = name.replace("-", "").capitalize() + "Processor"
    return type(class_name, (DataProcessor,), {
        "__doc__": doc, "task": name, "labels": labels, "folder": name, "tfds": tfds,
        "layouts": layouts, **more})


def _indexed_pair_task(name: str, labels: Tuple[str, ...], text_a: str, text_b: str) -> type:
    """QNLI, RTE and WNLI: `index <text_a> <text_b> label` (test without label), in TFDS
    under the same feature names."""
    columns = ("index", text_a, text_b)
    return _task(name, f"{name}: `index {text_a} {text_b} label`; test without label.", labels,
                 TfdsSource(name.lower(), text_a, text_b, labels),
                 {**_labeled(4, text_a=1, text_b=2, label=3, index=0,
                             columns=columns + ("label",)),
                  "test": _Layout("test.tsv", 3, text_a=1, text_b=2, index=0, columns=columns)})


_SINGLE_TEST = _Layout("test.tsv", 2, text_a=1, index=0, columns=("index", "sentence"))
_MNLI_DEV = dict(text_a=8, text_b=9, label=-1, index=0, columns=_MNLI + (
    "label1", "label2", "label3", "label4", "label5", "gold_label"))
_MNLI_TEST = dict(text_a=8, text_b=9, index=0, columns=_MNLI)

ColaProcessor = _task(
    "CoLA", "CoLA: `source label original_label sentence`, train/dev headerless.",
    BINARY_LABELS, TfdsSource("cola", "sentence", label_names=BINARY_LABELS),
    {**_labeled(4, text_a=3, label=1, header=False), "test": _SINGLE_TEST}, metrics="mcc")
Sst2Processor = _task(
    "SST-2", "SST-2: `sentence label`; test `index sentence`.", BINARY_LABELS,
    TfdsSource("sst2", "sentence", label_names=BINARY_LABELS),
    {**_labeled(2, text_a=0, label=1, columns=("sentence", "label")), "test": _SINGLE_TEST})
MrpcProcessor = _task(
    "MRPC", "MRPC: `Quality #1 ID #2 ID #1 String #2 String`; test has `index`.",
    BINARY_LABELS, TfdsSource("mrpc", "sentence1", "sentence2", BINARY_LABELS),
    {**_labeled(5, text_a=3, text_b=4, label=0, columns=_MRPC),
     "test": _Layout("test.tsv", 5, text_a=3, text_b=4, index=0,
                     columns=("index",) + _MRPC[1:])}, metrics="accuracy_f1")
StsbProcessor = _task(
    "STS-B", "STS-B (regression): sentences in columns 7, 8 and the score in 9.", (),
    TfdsSource("stsb", "sentence1", "sentence2"),
    {**_labeled(10, text_a=7, text_b=8, label=9, index=0, columns=_STSB + ("score",)),
     "test": _Layout("test.tsv", 9, text_a=7, text_b=8, index=0, columns=_STSB)},
    is_regression=True, metrics="correlation")
QqpProcessor = _task(
    "QQP", "QQP: `id qid1 qid2 question1 question2 is_duplicate`; test `id q1 q2`.",
    BINARY_LABELS, TfdsSource("qqp", "question1", "question2", BINARY_LABELS),
    {**_labeled(6, text_a=3, text_b=4, label=5, index=0, columns=(
        "id", "qid1", "qid2", "question1", "question2", "is_duplicate")),
     "test": _Layout("test.tsv", 3, text_a=1, text_b=2, index=0,
                     columns=("id", "question1", "question2"))}, metrics="accuracy_f1")
MnliProcessor = _task(
    "MNLI", """MNLI: sentence1/2 in columns 8, 9 and gold_label in the last column.

    train.tsv has 12 columns, dev_*.tsv 16 (five annotator labels, then gold_label) and
    test_*.tsv 10 (no label). "dev"/"test" are the matched sets, as in the original; the
    mismatched ones are the splits "dev_mismatched"/"test_mismatched".
    """, _NLI3, TfdsSource("mnli", "premise", "hypothesis", _NLI3_TFDS, (
        ("train", "train"), ("dev", "validation_matched"),
        ("dev_matched", "validation_matched"), ("dev_mismatched", "validation_mismatched"),
        ("test", "test_matched"), ("test_matched", "test_matched"),
        ("test_mismatched", "test_mismatched"))),
    {"train": _Layout("train.tsv", 12, text_a=8, text_b=9, label=-1, index=0,
                      columns=_MNLI + ("label1", "gold_label")),
     "dev": _Layout("dev_matched.tsv", 16, **_MNLI_DEV),
     "test": _Layout("test_matched.tsv", 10, **_MNLI_TEST),
     "dev_matched": _Layout("dev_matched.tsv", 16, **_MNLI_DEV),
     "dev_mismatched": _Layout("dev_mismatched.tsv", 16, **_MNLI_DEV),
     "test_matched": _Layout("test_matched.tsv", 10, **_MNLI_TEST),
     "test_mismatched": _Layout("test_mismatched.tsv", 10, **_MNLI_TEST)},
    eval_splits=(("dev_matched", "eval_"), ("dev_mismatched", "eval_mismatched_")),
    test_splits=(("test_matched", "test_results.tsv"),
                 ("test_mismatched", "test_mismatched_results.tsv")))
QnliProcessor = _indexed_pair_task("QNLI", _NLI2, "question", "sentence")
RteProcessor = _indexed_pair_task("RTE", _NLI2, "sentence1", "sentence2")
WnliProcessor = _indexed_pair_task("WNLI", BINARY_LABELS, "sentence1", "sentence2")
# GLUE's diagnostic set is scored with a model trained on MNLI, so it has MNLI's labels.
AxProcessor = _task(
    "AX", "AX (GLUE diagnostic): `index sentence1 sentence2`, test only (`diagnostic.tsv`).",
    _NLI3, TfdsSource("ax", "premise", "hypothesis", _NLI3_TFDS, (("test", "test"),)),
    {"test": _Layout("diagnostic.tsv", 3, text_a=1, text_b=2, index=0,
                     columns=("index", "sentence1", "sentence2"))},
    metrics="mcc", folder="diagnostic")


class XnliProcessor(DataProcessor):
    """XNLI, as google-research/bert's `XnliProcessor` reads it.

    Train: XNLI-MT 1.0's `multinli/multinli.train.<language>.tsv` ("contradictory" read as
    "contradiction"); dev: `xnli.dev.tsv`, the rows of `language`; no test split. The
    language defaults to Chinese ("zh"), as in the original.
    """

    task = "XNLI"
    labels = _NLI3
    folder = "XNLI"

    def __init__(self, language: str = "zh"):
        self.language = language
        self.layouts = {
            "train": _Layout(io_utils.join("multinli", f"multinli.train.{language}.tsv"), 3,
                             text_a=0, text_b=1, label=2),
            "dev": _Layout("xnli.dev.tsv", 8, text_a=6, text_b=7, label=1, language=0),
        }

    def _row_to_example(self, row, layout, path, line_no, guid_default, set_type):
        if set_type == "train" and len(row) > layout.label and row[layout.label] == "contradictory":
            row = list(row)
            row[layout.label] = "contradiction"
        return super()._row_to_example(row, layout, path, line_no, guid_default, set_type)


# Task name (lower case) -> processor class.
PROCESSORS = {processor.task.lower(): processor for processor in (
    ColaProcessor, Sst2Processor, MrpcProcessor, StsbProcessor, QqpProcessor, MnliProcessor,
    QnliProcessor, RteProcessor, WnliProcessor, AxProcessor, XnliProcessor)}

def tasks_with_header(columns: Sequence[str]) -> FrozenSet[str]:
    """The tasks (e.g. {"RTE", "WNLI"}) one of whose files starts with the header
    `columns`, as download_glue_data.py writes them; empty for a line no task's file
    starts with."""
    return _HEADER_TASKS.get(tuple(columns), frozenset())


def _header_tasks() -> Dict[Tuple[str, ...], FrozenSet[str]]:
    found: Dict[Tuple[str, ...], set] = {}
    for processor in PROCESSORS.values():
        for layout in processor.layouts.values():  # XNLI's are per language: none here
            if layout.columns:
                found.setdefault(layout.columns, set()).add(processor.task)
    return {columns: frozenset(tasks) for columns, tasks in found.items()}


_HEADER_TASKS = _header_tasks()

_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "sts_b": "sts-b", "sst_2": "sst-2"}


def canonical_task_name(task_name: str) -> str:
    """The `PROCESSORS` key of a task name ("SST2" -> "sst-2"; case-insensitive, aliases);
    ValueError listing the valid names otherwise.
    """
    name = task_name.strip().lower()
    name = _ALIASES.get(name, name)
    if name not in PROCESSORS:
        raise UserError(
            f"Unknown GLUE task {task_name!r}; valid tasks: "
            f"{', '.join(sorted(PROCESSORS))} (aliases: "
            f"{', '.join(sorted(_ALIASES))})")
    return name


def get_processor(task_name: str) -> DataProcessor:
    """A new `DataProcessor` for `task_name` (as `canonical_task_name` reads it)."""
    return PROCESSORS[canonical_task_name(task_name)]()


def how_to_get_data(task_name: str, data_dir: Optional[str] = None) -> str:
    """How to point run_classifier.py at a task's data, for an error's one line: the task's
    folder when `data_dir` is a whole glue_data folder, else where GLUE data comes from.
    """
    task = canonical_task_name(task_name)
    folder = PROCESSORS[task].folder
    first_file = next(iter(PROCESSORS[task].layouts.values())).filename
    if data_dir and io_utils.isfile(io_utils.join(data_dir, folder, first_file)):
        return f"did you mean --data_dir={io_utils.join(data_dir, folder)}?"
    return (f"pass --data_dir=<glue_data>/{folder}, the task's folder in a glue_data folder "
            f"as download_glue_data.py writes it ({first_file}, ...), or --data_source=tfds "
            f"to download GLUE with tensorflow-datasets (needs internet)")
