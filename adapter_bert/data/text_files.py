"""Your own data files: CSV, TSV or JSON Lines -> rows of named fields.

Format by extension (`.csv`, `.tsv`/`.tab`, `.jsonl`/`.json`/`.ndjson`) unless given: CSV
by RFC 4180, TSV without quoting (as Google's readers), JSON Lines one object per line.
UTF-8 with or without a BOM, LF or CRLF, blank lines skipped. A row is `(line, fields)`,
the 1-based line where it starts. Columns are a header name or a 0-based position; a file
has a header unless its columns are given by position or `header=False`.
"""

import csv
import io
import json
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

from adapter_bert import io_utils
from adapter_bert.errors import UserError

FORMATS = ("csv", "tsv", "jsonl")
_EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl",
               ".json": "jsonl", ".ndjson": "jsonl"}

Column = Union[str, int]


class DataFileError(UserError):
    """A data file that cannot be read as asked; the message names the file (and line
    and column where there is one)."""


def allow_fields_of_any_length() -> None:
    """Lifts the csv module's field limit (128 KiB by default, process-wide): a field as
    long as the file itself is read, as Google's readers and the IANA TSV format allow."""
    limit = 2**31 - 1  # the largest value a C long holds everywhere (Windows included)
    if csv.field_size_limit() < limit:
        csv.field_size_limit(limit)


def file_format(path: str, given: Optional[str] = None) -> str:
    """The format of `path`: `given` if set, else from its extension.

    Raises:
        DataFileError: an extension that names no format, and none given.
    """
    if given:
        if given not in FORMATS:
            raise DataFileError(f"--file_format={given}: expected one of {', '.join(FORMATS)}")
        return given
    name = path.lower()
    for extension, kind in _EXTENSIONS.items():
        if name.endswith(extension):
            return kind
    raise DataFileError(f"{path}: cannot tell the format from the file name; pass "
                        f"--file_format=csv, tsv or jsonl")


class Table:
    """The rows of one data file, read whole.

    Attributes:
        path: the file.
        kind: "csv", "tsv" or "jsonl".
        columns: the header's names (JSON Lines: the keys of the first object), or None
            for a file without a header.
        rows: (line, fields): fields a list of strings (CSV, TSV) or a dict (JSON Lines).
    """

    def __init__(self, path: str, kind: str, columns: Optional[List[str]],
                 rows: List[Tuple[int, object]]):
        self.path = path
        self.kind = kind
        self.columns = columns
        self.rows = rows
        if kind != "jsonl":
            self._check_widths()
        if not self.rows:
            raise DataFileError(f"{path}: no rows" + (" under the header" if self.columns
                                                      and kind != "jsonl" else ""))

    @classmethod
    def read(cls, path: str, kind: str, header: bool) -> "Table":
        """Reads a CSV, TSV or JSON Lines file (`header`: its first row names columns).

        Raises:
            DataFileError: naming the file, and the line where there is one.
        """
        text = read_data_file(path)
        if kind == "jsonl":
            rows = list(_json_lines(text, path))
            return cls(path, kind, _union_of_keys(rows), rows)
        rows = list(delimited_rows(text, path, kind))
        columns = None
        if header and rows:
            columns = [name.strip() for name in rows[0][1]]
            rows = rows[1:]
        return cls(path, kind, columns, rows)

    @classmethod
    def of_records(cls, source: str, records: Sequence[Dict[str, object]]) -> "Table":
        """Named records (a TFDS split) as a table; record i is "line" i + 1."""
        rows = [(i + 1, record) for i, record in enumerate(records)]
        return cls(source, "jsonl", _union_of_keys(rows), rows)

    def _check_widths(self) -> None:
        width = len(self.columns) if self.columns is not None else len(self.rows[0][1]) \
            if self.rows else 0
        for line, fields in self.rows:
            if len(fields) != width:
                what = "the header has" if self.columns is not None else "line " \
                    f"{self.rows[0][0]} has"
                raise DataFileError(f"{self.path} line {line}: {len(fields)} fields, but "
                                    f"{what} {width}" + _quote_hint(self.kind))

    def describe_columns(self) -> str:
        """The columns, for an error line: names, or how many positions there are."""
        if self.columns is not None:
            return "the file's columns are " + ", ".join(repr(c) for c in self.columns)
        width = len(self.rows[0][1]) if self.rows else 0
        return f"the file has no header and {width} columns (positions 0..{width - 1})"

    def index_of(self, column: Column, flag: str) -> Union[int, str]:
        """Where `column` is in each row: a position (CSV, TSV) or a key (JSON Lines).

        Raises:
            DataFileError: no such column; the line lists the file's columns.
        """
        if isinstance(column, int):
            if self.kind == "jsonl":
                raise DataFileError(f"--{flag}={column}: {self.path} is JSON Lines, whose "
                                    f"columns are named, not numbered; "
                                    f"{self.describe_columns()}")
            width = len(self.columns) if self.columns is not None else len(self.rows[0][1])
            if not 0 <= column < width:
                raise DataFileError(f"--{flag}={column}: {self.path} has no column at that "
                                    f"position; {self.describe_columns()}")
            return column
        if self.columns is None or column not in self.columns:
            raise DataFileError(f"--{flag}={column}: {self.path} has no such column; "
                                f"{self.describe_columns()}")
        if self.columns.count(column) > 1:
            places = [str(i) for i, name in enumerate(self.columns) if name == column]
            raise DataFileError(f"--{flag}={column}: {self.path}'s header names {column!r} "
                                f"{len(places)} times (positions {', '.join(places)}); rename "
                                f"them or pass the position")
        return column if self.kind == "jsonl" else self.columns.index(column)

    def values(self, index: Union[int, str]) -> Iterator[Tuple[int, object]]:
        """(line, value) of one column over the rows (JSON Lines: None when absent)."""
        for line, fields in self.rows:
            yield line, fields.get(index) if isinstance(fields, dict) else fields[index]


def _union_of_keys(rows) -> Optional[List[str]]:
    """A JSON Lines file's columns: every key of any of its objects, in order of first
    appearance (an object without a key reads as a missing value, named by its line)."""
    keys: Dict[str, None] = {}
    for _, record in rows:
        keys.update(dict.fromkeys(record))
    return list(keys) if rows else None


def _quote_hint(kind: str) -> str:
    if kind == "csv":
        return " (a text with a comma needs double quotes around it)"
    if kind == "tsv":
        return " (a text with a tab in it splits a TSV row)"
    return ""


def read_data_file(path: str, error=DataFileError, where: Optional[str] = None,
              missing=None) -> str:
    """A data file's text (UTF-8, with or without a BOM): the one reader of the files users
    give, theirs and GLUE's. Raises `missing` (default `error`) for a file that is not
    there and `error` for one that cannot be read or is not UTF-8; messages start with
    `where` (default: the path)."""
    where = where or path
    try:
        data = io_utils.read_bytes(path)
    except FileNotFoundError:
        raise (missing or error)(f"{where}: file not found") from None
    except OSError as e:
        raise error(f"{where}: cannot read it ({e.strerror or e})") from None
    return io_utils.decode_utf8(data, where, error)


def delimited_rows(text: str, path: str, kind: str) -> Iterator[Tuple[int, List[str]]]:
    """Rows of a CSV or TSV text, blank lines skipped, with the line each starts on. TSV
    is split on tabs without quoting (as Google's readers: GLUE text has unbalanced `"`);
    CSV by RFC 4180."""
    if kind == "tsv":
        for number, line in enumerate(text.split("\n"), 1):
            line = line[:-1] if line.endswith("\r") else line
            if line.strip():
                yield number, line.split("\t")
        return
    allow_fields_of_any_length()
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    start = 1
    try:
        for fields in reader:
            if fields and any(field.strip() for field in fields):
                yield start, fields
            start = reader.line_num + 1
    except csv.Error as e:
        raise DataFileError(f"{path} line {reader.line_num}: not valid CSV ({e})") from None


def _json_lines(text: str, path: str) -> Iterator[Tuple[int, Dict[str, object]]]:
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise DataFileError(f"{path} line {number}: not a JSON object ({e})") from None
        if not isinstance(value, dict):
            raise DataFileError(f"{path} line {number}: expected a JSON object, got "
                                f"{type(value).__name__}")
        yield number, value


def tsv_text(header: Optional[Sequence[str]], rows) -> str:
    """`rows` (and `header`) as tab-separated text by the csv module's rules: a value
    holding a tab, a newline or a double quote is quoted (its quotes doubled), so that
    `csv.reader(f, delimiter="\\t")` and `pandas.read_csv(f, sep="\\t")` read back one row
    per row written."""
    # The writer ends rows with "\r\n", so that it quotes a value holding either character
    # (with "\n" alone, a lone "\r" in a tweet would go unquoted and end the row for
    # readers); each row's own ending is then written as "\n".
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\r\n")
    lines = []
    for row in ([header] if header is not None else []) + [list(r) for r in rows]:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(row)
        lines.append(buffer.getvalue()[:-2] + "\n")
    return "".join(lines)


def unique_names(names: Sequence[str], taken: Sequence[str], prefix: str) -> List[str]:
    """`names`, each named like one of `taken` (or like an earlier one) given `prefix`
    until it is unique."""
    used, result = set(taken), []
    for name in names:
        while name in used:
            name = prefix + name
        used.add(name)
        result.append(name)
    return result


def output_header(kept: Sequence[str], fixed: Sequence[str], labels: Sequence[str] = (),
                  fixed_last: Sequence[str] = ()) -> List[str]:
    """An output file's header, every column named once: the --keep_columns, the file's
    `fixed` columns, a probability column per label, then `fixed_last`. A label named
    like a fixed column has its column written as `probability_<label>`; a kept column
    named like any other column as `kept_<name>` (each prefix repeated until unique)."""
    fixed = [*fixed, *fixed_last]
    probabilities = unique_names(labels, fixed, "probability_")
    own = [*fixed[:len(fixed) - len(fixed_last)], *probabilities, *fixed_last]
    return unique_names(kept, own, "kept_") + own


def parse_column(value: Optional[str]) -> Optional[Column]:
    """A column flag's value: a 0-based position ("1") or a header name."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    return int(text) if text.isdigit() else text


def find_column(columns: Optional[Sequence[str]], candidates: Sequence[str]) -> Optional[str]:
    """The first of `candidates` (case-insensitive) among a header's `columns`."""
    if not columns:
        return None
    lowered = {name.lower(): name for name in columns}
    for candidate in candidates:
        if candidate in lowered:
            return lowered[candidate]
    return None
