"""A text-classification (or regression) task on the user's own files.

`TextTask` reads the train, dev and test files of one task (`text_files`), finds the text,
text-pair and label columns (or takes them from the flags), keeps the label names as
strings, and gives `InputExample`s, as a GLUE processor does for GLUE's files. It is a task
description like the GLUE processors (`data.glue.DataProcessor`): its label names, whether
it is a regression, whether its rows are pairs, its metrics (`metrics.classification`'s
"classification" or "regression") and its eval and test splits.
"""

import collections
import dataclasses
import json
import math
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from adapter_bert.data.glue import InputExample
from adapter_bert.data.text_files import (Column, DataFileError, Table, file_format,
                                          find_column)
from adapter_bert import io_utils

# Header names taken for each role when the flag is not given (case-insensitive, in order).
TEXT_NAMES = ("sentence", "text", "content", "review", "tweet", "document", "message",
              "comment", "body", "sentence1", "question1", "premise", "text_a")
LABEL_NAMES = ("label", "labels", "class", "category", "target", "gold_label", "score",
               "sentiment")
# A text column with a well-known partner: that partner is the pair's second text.
PAIR_NAMES = {"sentence1": "sentence2", "question1": "question2", "premise": "hypothesis",
              "text_a": "text_b"}


@dataclasses.dataclass(frozen=True)
class Columns:
    """Which columns hold the text, the second text of a pair and the label.

    Each is a header name, a 0-based position or None (found from the header, or absent).
    `header`: whether the files start with a header line; None: they do unless the
    columns are given by position. `keep`: columns of the dev and test files whose values
    the outputs carry (--keep_columns).
    """

    text: Optional[Column] = None
    pair: Optional[Column] = None
    label: Optional[Column] = None
    header: Optional[bool] = None
    # Columns of the dev and test files copied, first, into the rows' outputs.
    keep: Tuple[Column, ...] = ()

    @property
    def has_header(self) -> bool:
        if self.header is not None:
            return self.header
        return not any(isinstance(c, int) for c in (self.text, self.pair, self.label))


def task_name_of(path: str) -> str:
    """A task name from a file name: `data/Tweets.csv` -> `tweets`, `spam_train.tsv` ->
    `spam` (a trailing train/dev/test part is dropped)."""
    stem = io_utils.basename(path).split(".")[0].lower()
    stem = re.sub(r"[^a-z0-9]+", "_", stem).strip("_")
    trimmed = re.sub(r"_?(train|training|dev|valid|validation|test)$", "", stem)
    return trimmed or stem or "task"


class TextTask:
    """One task on the user's files, described as the GLUE processors describe theirs.

    `files` maps "train", "dev", "test" to paths (any TensorFlow filesystem); `columns` says
    where texts and labels are; `file_format` "csv", "tsv" or "jsonl" (None: by extension);
    `labels` in logit order (None: the training file's, sorted; numbers numerically);
    `task_type` "classification" or "regression".
    """

    metrics = "classification"

    def __init__(self, name: str, files: Dict[str, str], columns: Columns,
                 file_format: Optional[str] = None, labels: Optional[Sequence[str]] = None,
                 task_type: str = "classification", labels_source: str = "--labels"):
        self.task = name
        # Where given `labels` come from, for the line that refuses a label outside them.
        self.labels_source = labels_source if labels is not None else "the training file"
        self.files = dict(files)
        self.columns = columns
        self.file_format = file_format
        self.is_regression = task_type == "regression"
        self.metrics = "regression" if self.is_regression else "classification"
        self.labels: Optional[List[str]] = None if labels is None else list(labels)
        self.pair = columns.pair is not None
        self._examples: Dict[str, List[InputExample]] = {}
        self.eval_splits = [("dev", "eval_")]
        self.test_splits = [("test", "test_results.tsv")]
        self.label_counts: Dict[str, Dict[str, int]] = {}
        # Why the training file has no --keep_columns values, should its rows be written out.
        self._kept_missing: Optional[str] = None

    @property
    def splits(self) -> List[str]:
        return list(self.files)

    def get_labels(self) -> List[str]:
        """The label names in logit order ([] for regression, or before they are known)."""
        return list(self.labels or [])

    # ------------------------------------------------------------------ reading
    def get_examples(self, data_dir: Optional[str], split: str) -> List[InputExample]:
        """The examples of `split` (`data_dir` is unused: each split has its file).

        The training split is read first whatever the order of the calls, since it
        fixes the label names the others are checked against.

        Raises:
            DataFileError: naming the file, line and column of what is wrong.
        """
        del data_dir
        if split not in self.files:
            raise DataFileError(f"{self.task}: no file for the {split} split")
        if split != "train" and "train" in self.files and "train" not in self._examples:
            self.get_examples(None, "train")
        if split not in self._examples:
            self._examples[split] = self._read(split)
        return self._examples[split]

    def _table(self, split: str) -> Table:
        """The rows of `split` (subclasses read other sources)."""
        path = self.files[split]
        return Table.read(path, file_format(path, self.file_format), self.columns.has_header)

    def _read(self, split: str) -> List[InputExample]:
        table = self._table(split)
        text, pair, label = self._resolve(table, labeled=split != "test")
        texts = self._texts(table, text, "text_column")
        pairs = self._texts(table, pair, "text_pair_column") if pair is not None else None
        raw_labels = list(table.values(label)) if label is not None else None
        if raw_labels is not None and split == "train" and self.labels is None \
                and not self.is_regression:
            self.labels = _sorted_labels(_label_strings(raw_labels, table, label))
        # Label names exactly as the file spells them need no more checking: the common case.
        known = frozenset(self.labels or ()) if not self.is_regression else frozenset()
        kept = self._kept(table, required=split != "train")
        examples = []
        for i, (line, text_a) in enumerate(texts):
            value = None
            if raw_labels is not None:
                value = raw_labels[i][1]
                if not (isinstance(value, str) and value in known):
                    value = self._label(value, table, line, label)
            examples.append(InputExample(guid=f"{split}-{line}", text_a=text_a,
                                         text_b=pairs[i][1] if pairs else None, label=value,
                                         kept=kept[i] if kept else ()))
        self._log(split, table, text, pair, label, examples)
        return examples

    def _resolve(self, table: Table, labeled: bool):
        """(text, pair, label) indices of `table`; label None for an unlabeled test file."""
        columns = self.columns
        text = columns.text if columns.text is not None else find_column(table.columns,
                                                                         TEXT_NAMES)
        if text is None:
            raise DataFileError(f"{table.path}: no text column found; pass --text_column "
                                f"(a name or a 0-based position): {table.describe_columns()}")
        pair = columns.pair
        if pair is None and isinstance(text, str) and text.lower() in PAIR_NAMES:
            pair = find_column(table.columns, [PAIR_NAMES[text.lower()]])
        if self.pair and pair is None:
            raise DataFileError(f"{table.path}: the training file has text pairs, this one "
                                f"has no second text column; {table.describe_columns()}")
        self.pair = self.pair or pair is not None
        label = columns.label if columns.label is not None else find_column(table.columns,
                                                                            LABEL_NAMES)
        _check_distinct(table, text, pair, label)
        if label is None and labeled:
            raise DataFileError(f"{table.path}: no label column found; pass --label_column "
                                f"(a name or a 0-based position): {table.describe_columns()}")
        if not labeled:
            label = self._test_label(table, label)
        elif getattr(self, "target", None) is None:
            self.target = label  # the label column's name (or position), for the records
        return (table.index_of(text, "text_column"),
                table.index_of(pair, "text_pair_column") if pair is not None else None,
                table.index_of(label, "label_column") if label is not None else None)

    @property
    def kept_names(self) -> List[str]:
        """The headers of the --keep_columns in the outputs."""
        return [c if isinstance(c, str) else f"column_{c}" for c in self.columns.keep]

    def _kept(self, table: Table, required: bool) -> Optional[List[Tuple[str, ...]]]:
        """Each row's values of the --keep_columns: a dev or test file lacking one is
        named; a training file (whose rows --dev_fraction holds out) may lack them."""
        if not self.columns.keep:
            return None
        try:
            indices = [table.index_of(c, "keep_columns") for c in self.columns.keep]
        except DataFileError as e:
            if required:
                raise
            self._kept_missing = str(e)
            return None
        columns = [[_kept_text(v) for _, v in table.values(i)] for i in indices]
        return list(zip(*columns))

    @staticmethod
    def _test_label(table: Table, label):
        """The label column of a test file when it has one with a value in every row (the
        file is then scored as well as predicted), else None (predicted only)."""
        if label is None:
            return None
        try:
            index = table.index_of(label, "label_column")
        except DataFileError:  # a test file need not have the label column
            return None
        if any(_missing(value) for _, value in table.values(index)):
            logging.info("%s: its label column has empty values: predicted, not scored",
                         table.path)
            return None
        return label

    @staticmethod
    def _texts(table: Table, index, flag: str) -> List[Tuple[int, str]]:
        """(line, text) of a text column; an empty text, or a JSON value that is not a
        string, is refused naming its line."""
        texts = []
        for line, value in table.values(index):
            if not isinstance(value, str) or not value.strip():
                what = "an empty text" if value is None or isinstance(value, str) \
                    else f"{type(value).__name__} {value!r}, not a text"
                raise DataFileError(f"{table.path} line {line}: {what} in column "
                                    f"{_column_name(table, index)} (--{flag})")
            texts.append((line, value))
        return texts

    def _label(self, value, table: Table, line: int, index):
        """The label of one row (a name, or a float for a regression), checked."""
        def where():
            return f"{table.path} line {line}, column {_column_name(table, index)}"
        if _missing(value):
            raise DataFileError(f"{where()}: no label" + (f" ({value})" if value else ""))
        if self.is_regression:
            try:
                score = float(value)
            except (TypeError, ValueError):
                raise DataFileError(f"{where()}: target {value!r} is not a number "
                                    f"(--task_type=regression)") from None
            if not math.isfinite(score):
                raise DataFileError(f"{where()}: target {value!r} is not a finite number")
            return score
        name = _label_string(value, where)
        if self.labels is not None and name not in self.labels:
            raise DataFileError(f"{where()}: label {name!r} is not one of the labels of "
                                f"{self.labels_source} ({', '.join(self.labels)})")
        return name

    def _log(self, split, table, text, pair, label, examples) -> None:
        counts = collections.Counter(e.label for e in examples if e.label is not None)
        if not self.is_regression:
            self.label_counts[split] = dict(sorted(counts.items()))
        used = [f"text={_column_name(table, text)}"]
        if pair is not None:
            used.append(f"pair={_column_name(table, pair)}")
        if label is not None:
            used.append(f"label={_column_name(table, label)}")
        if not counts:
            described = "unlabeled"
        elif self.is_regression:
            described = f"target mean {np.mean([e.label for e in examples]):.4g}"
        else:
            described = "labels " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
        logging.info("%s: %d rows (%s), %s", table.path, len(examples), ", ".join(used),
                     described)

    # ------------------------------------------------------------------ held-out split
    def hold_out(self, fraction: float, seed: int) -> List[int]:
        """Moves a stratified `fraction` of the training examples into the dev split
        (`hold_out_indices`).

        Returns:
            The file lines of the held-out rows, in file order.
        """
        train = self.get_examples(None, "train")
        if self._kept_missing:  # the held-out rows are written out with their kept values
            raise DataFileError(f"{self._kept_missing} (--dev_fraction's dev rows come from "
                                f"the training file)")
        held = hold_out_indices(train, fraction, seed, self.is_regression)
        self._examples["dev"] = [dataclasses.replace(train[i], guid=f"dev-{train[i].guid[6:]}")
                                 for i in held]
        held_set = set(held)
        self._examples["train"] = [e for i, e in enumerate(train) if i not in held_set]
        self.files["dev"] = self.files["train"]
        return [int(train[i].guid.split("-", 1)[1]) for i in held]


def _column_name(table: Table, index) -> str:
    if isinstance(index, int) and table.columns is not None:
        return repr(table.columns[index])
    return repr(index) if isinstance(index, str) else str(index)


def _kept_text(value) -> str:
    """A --keep_columns value as the outputs write it: text as it is, "" for none, any
    other JSON value as JSON (`true`, `1.5`, `{"a": 1}`)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _missing(value) -> bool:
    """Whether a label value is missing: none, blank, or JSON's NaN or Infinity."""
    return value is None or (isinstance(value, str) and not value.strip()) or \
        (isinstance(value, float) and not math.isfinite(value))


def _label_string(value, where) -> str:
    """A label value as its name: strings as they are (stripped), integers as digits.

    `where()` names the place for an error."""
    if isinstance(value, bool) or isinstance(value, (list, dict)):
        raise DataFileError(f"{where()}: label {value!r} is not a class name")
    if isinstance(value, float):
        if not value.is_integer():
            raise DataFileError(f"{where()}: label {value!r} is a fraction: for a float "
                                f"target pass --task_type=regression")
        value = int(value)
    text = str(value).strip()
    if _is_fraction(text):
        raise DataFileError(f"{where()}: label {text!r} is a fraction: for a float target "
                            f"pass --task_type=regression")
    if re.fullmatch(r"-?\d+\.0*", text):  # "1.0" is the label 1, as JSON's 1.0 is
        text = text.split(".")[0]
    return text


def _check_distinct(table: Table, text, pair, label) -> None:
    """The text, pair and label columns are three different columns."""
    roles = []
    for flag, column in (("text_column", text), ("text_pair_column", pair),
                         ("label_column", label)):
        try:
            roles.append((flag, table.index_of(column, flag)))
        except DataFileError:  # absent (a test file's label): said where it is read
            continue
    for i, (flag, index) in enumerate(roles):
        for other, other_index in roles[i + 1:]:
            if index == other_index:
                raise DataFileError(f"--{flag} and --{other} both name column "
                                    f"{_column_name(table, index)} of {table.path}: each "
                                    f"role needs its own column")


def _is_fraction(text: str) -> bool:
    """Whether a label reads as a number that is not a whole one ("0.37")."""
    try:
        number = float(text)
    except ValueError:
        return False
    return math.isfinite(number) and not number.is_integer()


def _label_strings(values, table: Table, index) -> List[str]:
    """The label names of a training file's rows (empty labels are reported later)."""
    names, seen = [], {}
    for line, value in values:
        if _missing(value):
            continue
        if value not in seen if isinstance(value, str) else True:
            name = _label_string(value, lambda line=line: f"{table.path} line {line}, column "
                                                          f"{_column_name(table, index)}")
            if isinstance(value, str):
                seen[value] = name
        else:
            name = seen[value]
        names.append(name)
    return names


def _sorted_labels(names: Sequence[str]) -> List[str]:
    """The distinct label names, sorted; all-integer names in numeric order."""
    distinct = set(names)
    if all(re.fullmatch(r"-?\d+", name) for name in distinct):
        return sorted(distinct, key=int)
    return sorted(distinct)


def hold_out_indices(examples: Sequence, fraction: float, seed: int,
                     regression: bool) -> List[int]:
    """The positions of a stratified `fraction` of `examples`, in order (--dev_fraction).

    Deterministic for a seed: each label's examples (all of them, for regression) are
    shuffled with it and the first round(fraction * count) held out, at least one of any
    label with two or more examples.

    Raises:
        DataFileError: every example would be held out.
    """
    groups: Dict[object, List[int]] = collections.defaultdict(list)
    for i, example in enumerate(examples):
        groups[None if regression else example.label].append(i)
    generator = np.random.RandomState(seed)
    held = []
    for key in sorted(groups, key=str):
        members = groups[key]
        count = int(round(fraction * len(members)))
        if count == 0 and len(members) >= 2 and fraction > 0:
            count = 1
        if count >= len(members) and not regression:
            raise DataFileError(f"--dev_fraction={fraction} would hold out every training "
                                f"row of label {key!r} ({len(members)} row"
                                f"{'s' if len(members) > 1 else ''}): lower it, or give "
                                f"--dev_file")
        held.extend(generator.permutation(members)[:count].tolist())
    if len(set(held)) == len(examples):
        raise DataFileError(f"--dev_fraction={fraction} holds out every training row")
    return sorted(set(held))
