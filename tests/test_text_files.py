"""adapter_bert.data.text_files: CSV (RFC 4180), TSV (no quoting) and JSON Lines read
into rows with the line each starts on; the formats' unusual but valid forms; one line
naming the file and line for what cannot be read."""

import pytest

from adapter_bert.data.text_files import (DataFileError, Table, file_format, find_column,
                                          parse_column)


def _table(tmp_path, name, data: bytes, header=True, kind=None):
    path = tmp_path / name
    path.write_bytes(data)
    return Table.read(str(path), kind or file_format(str(path)), header)


@pytest.mark.parametrize("name, kind", [("a.csv", "csv"), ("A.TSV", "tsv"), ("b.tab", "tsv"),
                                        ("c.jsonl", "jsonl"), ("d.json", "jsonl"),
                                        ("gs://bucket/e.ndjson", "jsonl")])
def test_the_format_comes_from_the_extension(name, kind):
    assert file_format(name) == kind
    assert file_format(name, "csv") == "csv"


def test_an_unknown_extension_asks_for_the_format():
    with pytest.raises(DataFileError, match=r"^data\.txt: cannot tell the format from the file "
                                            r"name; pass --file_format=csv, tsv or jsonl$"):
        file_format("data.txt")


def test_csv_follows_rfc_4180(tmp_path):
    data = (b'id,text,label\r\n'
            b'1,"a comma, inside",pos\r\n'
            b'2,"doubled ""quotes""",neg\r\n'
            b'3,"a newline\r\ninside",pos\r\n'
            b'4,plain,neg\r\n')
    table = _table(tmp_path, "d.csv", data)
    assert table.columns == ["id", "text", "label"]
    assert [line for line, _ in table.rows] == [2, 3, 4, 6]
    assert [fields[1] for _, fields in table.rows] == [
        "a comma, inside", 'doubled "quotes"', "a newline\r\ninside", "plain"]


def test_tsv_has_no_quoting(tmp_path):
    table = _table(tmp_path, "d.tsv", b'label\ttext\n1\tHe said "hi\n0\t"quoted"\n')
    assert [fields for _, fields in table.rows] == [["1", 'He said "hi'], ["0", '"quoted"']]


@pytest.mark.parametrize("name", ["d.csv", "d.tsv"])
def test_bom_crlf_and_blank_lines_read_as_the_plain_file(tmp_path, name):
    sep = b"," if name.endswith("csv") else b"\t"
    plain = sep.join([b"text", b"label"]) + b"\n" + sep.join([b"a", b"1"]) + b"\n" \
        + sep.join([b"b", b"0"]) + b"\n"
    unusual = b"\xef\xbb\xbf" + plain.replace(b"\n", b"\r\n") + b"\r\n\r\n  \r\n"
    expected = [fields for _, fields in _table(tmp_path, name, plain).rows]
    table = _table(tmp_path, name, unusual)
    assert table.columns == ["text", "label"]
    assert [fields for _, fields in table.rows] == expected == [["a", "1"], ["b", "0"]]


def test_a_field_of_a_megabyte_is_read(tmp_path):
    text = "x" * 1_100_000
    table = _table(tmp_path, "d.csv", f'text,label\n"{text}",1\n'.encode())
    assert len(table.rows[0][1][0]) == 1_100_000


def test_rows_of_another_width_are_named(tmp_path):
    with pytest.raises(DataFileError) as error:
        _table(tmp_path, "d.csv", b"text,label\na,1\nb,with, comma,0\n")
    assert str(error.value) == (f"{tmp_path / 'd.csv'} line 3: 4 fields, but the header has 2 "
                                f"(a text with a comma needs double quotes around it)")
    with pytest.raises(DataFileError, match=r"d\.tsv line 2: 3 fields, but line 1 has 2"):
        _table(tmp_path, "d.tsv", b"1\ta\n0\tb\tc\n", header=False)


def test_an_unclosed_quote_is_named(tmp_path):
    with pytest.raises(DataFileError, match=r"d\.csv line 3: not valid CSV \(unexpected end "
                                            r"of data\)"):
        _table(tmp_path, "d.csv", b'text,label\na,1\n"never closed,0\n')


def test_json_lines(tmp_path):
    table = _table(tmp_path, "d.jsonl", b'{"text": "a", "label": 1}\n\n{"text": "b", '
                                        b'"label": "x", "extra": [1]}\n')
    assert table.columns == ["text", "label", "extra"]  # every object's keys
    assert [line for line, _ in table.rows] == [1, 3]
    assert list(table.values("label")) == [(1, 1), (3, "x")]
    with pytest.raises(DataFileError, match=r"e\.jsonl line 2: expected a JSON object, got "
                                            r"list"):
        _table(tmp_path, "e.jsonl", b'{"text": "a"}\n[1, 2]\n')


def test_bytes_that_are_not_utf8_are_named(tmp_path):
    with pytest.raises(DataFileError, match=r"d\.csv line 2: not valid UTF-8 \(byte 0xe9 at byte column 4\); "
                                            r"save the file as UTF-8"):
        _table(tmp_path, "d.csv", b"text,label\ncaf\xe9,1\n")


def test_empty_files_are_named(tmp_path):
    with pytest.raises(DataFileError, match=r"d\.csv: no rows under the header$"):
        _table(tmp_path, "d.csv", b"text,label\n\n")
    with pytest.raises(DataFileError, match=r"e\.tsv: no rows$"):
        _table(tmp_path, "e.tsv", b"\xef\xbb\xbf\n", header=False)


def test_columns_by_name_or_position(tmp_path):
    table = _table(tmp_path, "d.tsv", b"spam\tWin now\nham\tSee you\n", header=False)
    assert table.index_of(1, "text_column") == 1
    with pytest.raises(DataFileError) as error:
        table.index_of(2, "label_column")
    assert str(error.value) == (f"--label_column=2: {tmp_path / 'd.tsv'} has no column at that "
                                f"position; the file has no header and 2 columns "
                                f"(positions 0..1)")
    named = _table(tmp_path, "e.csv", b"id,Content\n1,x\n")
    with pytest.raises(DataFileError, match=r"--text_column=text: .*e\.csv has no such column; "
                                            r"the file's columns are 'id', 'Content'$"):
        named.index_of("text", "text_column")
    assert find_column(named.columns, ["text", "content"]) == "Content"
    assert parse_column("3") == 3 and parse_column("text") == "text" and parse_column("") is None


def test_every_output_column_is_named_once():
    """Kept columns and label names that collide with an output's own columns are renamed
    by the stated rule (kept_<name>, probability_<label>); the fixed columns never move."""
    from adapter_bert.data.text_files import output_header
    header = output_header(["id", "id", "note"], ["id", "label", "predicted_label"],
                           ["label", "x", "id"])
    assert header == ["kept_id", "kept_kept_id", "note", "id", "label", "predicted_label",
                      "probability_label", "x", "probability_id"]
    assert output_header(["predicted_label"], [], ["predicted_label", "x"],
                         ["predicted_label"]) == [
        "kept_predicted_label", "probability_predicted_label", "x", "predicted_label"]
    for columns in (header, output_header(["a"], ["id", "label", "score"])):
        assert len(set(columns)) == len(columns)


def test_tsv_text_reads_back_one_row_per_row_written():
    import csv as csv_module
    import io as io_module
    from adapter_bert.data.text_files import tsv_text
    rows = [["a\tb", 'say "hi"', "line\nbreak", "\r"], ["plain", "", "1.5", "x"]]
    text = tsv_text(["w", "x", "y", "z"], rows)
    assert list(csv_module.reader(io_module.StringIO(text, newline=""), delimiter="\t")) == \
        [["w", "x", "y", "z"], *rows]
    assert text.endswith("x\n") and text.startswith("w\tx\ty\tz\n")
    import pandas
    frame = pandas.read_csv(io_module.StringIO(text), sep="\t", keep_default_na=False)
    assert frame.values.tolist() == [["a\tb", 'say "hi"', "line\nbreak", "\r"],
                                     ["plain", "", "1.5", "x"]]
