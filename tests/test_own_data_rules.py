"""Your own files hold no silent surprises: numeric labels read one way in every format,
--labels names each label once and takes the blame for a label it lacks, the text, pair
and label columns differ, a repeated header name is refused where it is used, JSON Lines
columns are the union of the objects' keys, and --dev_fraction keeps a training row of
every label. Each refusal is one line naming the file, line, column or flag."""

import json

import pytest

from adapter_bert.data.text_files import DataFileError
from adapter_bert.data.text_task import Columns, TextTask, hold_out_indices
from adapter_bert.data.glue import InputExample
from adapter_bert.command_line.flag_checks import FlagError
from adapter_bert.runners.own_data import _check_labels_flag


def task(path, **columns):
    return TextTask("t", {"train": str(path)}, Columns(**{"text": None, "pair": None,
                                                          "label": None, "header": None,
                                                          **columns}))


def test_numeric_labels_are_one_label_in_every_format_and_sort_as_numbers(tmp_path):
    csv_file = tmp_path / "n.csv"
    csv_file.write_text("text,label\na,1\nb,1.0\nc,10\nd,2\ne,2.00\n")
    jsonl = tmp_path / "n.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t, "label": v}) + "\n" for t, v in
                             [("a", 1), ("b", 1.0), ("c", 10), ("d", 2), ("e", "2")]))
    for path in (csv_file, jsonl):
        reader = task(path)
        examples = reader.get_examples(None, "train")
        assert reader.get_labels() == ["1", "2", "10"], path
        assert [e.label for e in examples] == ["1", "1", "10", "2", "2"]


def test_labels_flag_names_each_label_once_and_takes_the_blame(tmp_path):
    with pytest.raises(FlagError, match=r"^--labels=neg,pos,neg: 'neg' named more than once"):
        _check_labels_flag(["neg", "pos", "neg"])
    with pytest.raises(FlagError, match=r"^--labels=neg,,pos: an empty label name"):
        _check_labels_flag(["neg", "", "pos"])
    path = tmp_path / "t.csv"
    path.write_text("text,label\na,neg\nb,pos\nc,meh\n")
    reader = TextTask("t", {"train": str(path)}, Columns(None, None, None, None),
                      labels=["neg", "pos"])
    with pytest.raises(DataFileError, match=r"t.csv line 4, column 'label': label 'meh' is "
                                            r"not one of the labels of --labels \(neg, pos\)"):
        reader.get_examples(None, "train")


def test_text_pair_and_label_columns_must_differ(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("text,label\na,x\nb,y\n")
    with pytest.raises(DataFileError, match=r"--text_column and --label_column both name "
                                            r"column 'text' of .*t.csv"):
        task(path, text="text", label="text").get_examples(None, "train")


def test_a_repeated_header_name_is_refused_where_it_is_used(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("text,label,label\na,x,y\nb,y,x\n")
    with pytest.raises(DataFileError, match=r"--label_column=label: .*t.csv's header names "
                                            r"'label' 2 times \(positions 1, 2\)"):
        task(path).get_examples(None, "train")
    ok = tmp_path / "ok.csv"
    ok.write_text("text,label,note,note\na,x,1,2\nb,y,3,4\n")
    assert len(task(ok).get_examples(None, "train")) == 2  # unused repeats do no harm


def test_json_lines_columns_are_every_key_and_a_missing_one_names_its_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "a"}\n{"text": "b", "label": "x"}\n{"text": "c", "label": "y"}\n')
    with pytest.raises(DataFileError, match=r"t.jsonl line 1, column 'label': no label"):
        task(path).get_examples(None, "train")


def test_dev_fraction_keeps_a_training_row_of_every_label():
    examples = [InputExample(f"train-{i}", "t", label=label)
                for i, label in enumerate(["a"] * 10 + ["b"])]
    with pytest.raises(DataFileError, match=r"--dev_fraction=0.6 would hold out every "
                                            r"training row of label 'b' \(1 row\)"):
        hold_out_indices(examples, 0.6, 42, False)
    held = hold_out_indices(examples, 0.2, 42, False)
    assert all(examples[i].label == "a" for i in held)
