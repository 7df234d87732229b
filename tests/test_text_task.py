"""adapter_bert.data.text_task: a task on your own files: columns found or given, label
names kept as strings, the held-out dev split, and one line for each bad input."""

import collections
import json

import pytest

from adapter_bert.data.text_files import DataFileError
from adapter_bert.data.text_task import Columns, TextTask, task_name_of


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _task(tmp_path, train, dev=None, columns=Columns(), name="t.csv", **kwargs):
    files = {"train": _write(tmp_path, name, train)}
    if dev is not None:
        files["dev"] = _write(tmp_path, "dev" + name[name.index("."):], dev)
    return TextTask("t", files, columns, **kwargs)


def test_columns_are_found_in_the_header_and_extra_columns_ignored(tmp_path):
    task = _task(tmp_path, "tweet_id,sentiment,author,content\n1,worry,a,I fear\n"
                           "2,love,b,\"so, much\"\n3,worry,c,again\n")
    examples = task.get_examples(None, "train")
    assert [(e.text_a, e.label) for e in examples] == [("I fear", "worry"), ("so, much", "love"),
                                                       ("again", "worry")]
    assert task.get_labels() == ["love", "worry"] and not task.pair
    assert [e.guid for e in examples] == ["train-2", "train-3", "train-4"]


def test_sentence_pairs_are_found(tmp_path):
    task = _task(tmp_path, "sentence1\tsentence2\tlabel\na\tb\t1\nc\td\t0\n", name="p.tsv")
    examples = task.get_examples(None, "train")
    assert [(e.text_a, e.text_b) for e in examples] == [("a", "b"), ("c", "d")] and task.pair


def test_positions_mean_no_header(tmp_path):
    task = _task(tmp_path, "spam\tWin cash\nham\tSee you\n", columns=Columns(text=1, label=0),
                 name="s.tsv")
    assert [(e.text_a, e.label) for e in task.get_examples(None, "train")] == [
        ("Win cash", "spam"), ("See you", "ham")]


def test_missing_columns_list_the_files_columns(tmp_path):
    task = _task(tmp_path, "id,body_text,y\n1,a,0\n")
    with pytest.raises(DataFileError) as error:
        task.get_examples(None, "train")
    assert str(error.value) == (f"{tmp_path / 't.csv'}: no text column found; pass "
                                f"--text_column (a name or a 0-based position): the file's "
                                f"columns are 'id', 'body_text', 'y'")
    misspelled = _task(tmp_path, "id,text,y\n1,a,0\n", columns=Columns(label="lable"))
    with pytest.raises(DataFileError, match=r"^--label_column=lable: .*t\.csv has no such "
                                            r"column; the file's columns are 'id', 'text', 'y'$"):
        misspelled.get_examples(None, "train")


def test_labels_sort_by_name_and_numbers_numerically(tmp_path):
    names = _task(tmp_path, "text,label\na,positive\nb,negative\nc,neutral\n")
    names.get_examples(None, "train")
    assert names.get_labels() == ["negative", "neutral", "positive"]
    numbers = _task(tmp_path, "text,label\na,10\nb,2\nc,1\n", name="n.csv")
    numbers.get_examples(None, "train")
    assert numbers.get_labels() == ["1", "2", "10"]
    given = _task(tmp_path, "text,label\na,positive\nb,negative\n", name="g.csv",
                  labels=["positive", "negative"])
    given.get_examples(None, "train")
    assert given.get_labels() == ["positive", "negative"]


def test_json_lines_with_integer_labels(tmp_path):
    rows = [{"text": "a", "label": 1}, {"text": "b", "label": 0}, {"text": "c", "label": 1}]
    task = _task(tmp_path, "".join(json.dumps(r) + "\n" for r in rows), name="j.jsonl")
    assert [e.label for e in task.get_examples(None, "train")] == ["1", "0", "1"]
    assert task.get_labels() == ["0", "1"]


def test_kept_json_values_are_written_as_json(tmp_path):
    rows = [{"text": "a", "label": "x", "meta": {"id": 1}, "flag": True, "n": 1.5},
            {"text": "b", "label": "y", "meta": None, "flag": False, "n": "seven"}]
    task = _task(tmp_path, "".join(json.dumps(r) + "\n" for r in rows), name="k.jsonl",
                 columns=Columns(keep=("meta", "flag", "n")))
    assert [e.kept for e in task.get_examples(None, "train")] == [
        ('{"id": 1}', "true", "1.5"), ("", "false", "seven")]


def test_a_json_lines_label_that_is_nan_is_missing_not_a_fraction(tmp_path):
    text = '{"text": "a", "label": 1}\n{"text": "b", "label": NaN}\n{"text": "c", "label": 0}\n'
    task = _task(tmp_path, text, name="j.jsonl")
    with pytest.raises(DataFileError, match=r"j\.jsonl line 2, column 'label': no label \(nan\)$"):
        task.get_examples(None, "train")
    assert task.get_labels() == ["0", "1"]  # the names, read before the rows are checked


@pytest.mark.parametrize("train, dev, kwargs, expected", [
    ("text,label\na,x\nb,y\n", "text,label\nc,z\n", {},
     r"dev\.csv line 2, column 'label': label 'z' is not one of the labels of the training "
     r"file \(x, y\)$"),
    ("text,label\na,x\n ,y\n", None, {}, r"t\.csv line 3: an empty text in column 'text' "
                                         r"\(--text_column\)$"),
    ("text,label\na,x\nb,\n", None, {}, r"t\.csv line 3, column 'label': no label$"),
    ("text,label\na,0.5\nb,1.25\n", None, {},
     r"t\.csv line 2, column 'label': label '0\.5' is a fraction: for a float target pass "
     r"--task_type=regression$"),
    ("text,score\na,0.5\nb,high\n", None, {"task_type": "regression"},
     r"t\.csv line 3, column 'score': target 'high' is not a number "
     r"\(--task_type=regression\)$"),
])
def test_bad_rows_are_one_line_naming_file_line_and_column(tmp_path, train, dev, kwargs,
                                                           expected):
    task = _task(tmp_path, train, dev, **kwargs)
    with pytest.raises(DataFileError, match=expected):
        task.get_examples(None, "dev" if dev else "train")


def test_regression_targets_are_floats(tmp_path):
    task = _task(tmp_path, "text,score\na,0.5\nb,3\n", task_type="regression")
    assert [e.label for e in task.get_examples(None, "train")] == [0.5, 3.0]
    assert task.get_labels() == [] and task.metrics == "regression"


def test_the_held_out_split_is_stratified_and_fixed_by_the_seed(tmp_path):
    rows = [f"text {i},{'spam' if i % 5 == 0 else 'ham'}" for i in range(200)]
    task = _task(tmp_path, "text,label\n" + "\n".join(rows) + "\n")
    lines = task.hold_out(0.1, seed=42)
    dev, train = task.get_examples(None, "dev"), task.get_examples(None, "train")
    assert len(dev) == 20 and len(train) == 180
    assert collections.Counter(e.label for e in dev) == {"ham": 16, "spam": 4}
    assert [int(e.guid.split("-")[1]) for e in dev] == lines == sorted(lines)
    again = _task(tmp_path, "text,label\n" + "\n".join(rows) + "\n", name="u.csv")
    assert again.hold_out(0.1, seed=42) == lines
    other = _task(tmp_path, "text,label\n" + "\n".join(rows) + "\n", name="v.csv")
    assert other.hold_out(0.1, seed=7) != lines


@pytest.mark.parametrize("path, name", [("data/Tweets.csv", "tweets"),
                                        ("spam_train.tsv", "spam"), ("gs://b/dev.jsonl", "dev"),
                                        ("SMS Spam-Collection.txt", "sms_spam_collection")])
def test_task_names_come_from_file_names(path, name):
    assert task_name_of(path) == name


@pytest.mark.realdata
def test_the_real_airline_csv_reads_whole(real_data):
    """Twitter US Airline Sentiment as released: 14,640 tweets, 15 columns, 138 texts with
    newlines inside quotes; the text column is found, the label column named."""
    from tests.conftest import real_file
    path = real_file(real_data, "classification/airline/Tweets.csv")
    task = TextTask("airline", {"train": str(path)}, Columns(label="airline_sentiment"))
    examples = task.get_examples(None, "train")
    assert len(examples) == 14640
    assert collections.Counter(e.label for e in examples) == {
        "negative": 9178, "neutral": 3099, "positive": 2363}
    assert task.get_labels() == ["negative", "neutral", "positive"]
    assert sum("\n" in e.text_a for e in examples) == 138
    assert examples[3].text_a.startswith("@VirginAmerica it's really aggressive to blast "
                                         "obnoxious \"entertainment\"")
