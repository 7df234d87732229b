"""Any TFDS text set by name, without a network: TFDS's real `ag_news_subset` builder
prepares from CSV files this test writes (only its download is replaced); the set's
features are the columns, its ClassLabel names the labels, and the runner trains on it."""

import csv

import pytest

tfds = pytest.importorskip("tensorflow_datasets")

from adapter_bert.data import tfds_text  # noqa: E402
from adapter_bert.data.text_files import DataFileError  # noqa: E402
from adapter_bert.data.text_task import Columns  # noqa: E402
from adapter_bert.data.tfds_text import TfdsTextTask  # noqa: E402
from tests.robustness.helpers import assert_one_error_line  # noqa: E402
from tests.runner_utils import flag_list, read_results, run_in_process  # noqa: E402

# ag_news_csv as its authors ship it: class number (1-4), title, description; no header.
TOPICS = ("World", "Sports", "Business", "Sci/Tech")


def _write_ag_news(folder):
    inner = folder / "ag_news_csv"
    inner.mkdir(parents=True)
    for name, count in (("train.csv", 40), ("test.csv", 12)):
        with open(inner / name, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, quoting=csv.QUOTE_ALL)
            for i in range(count):
                topic = i % 4
                writer.writerow([topic + 1, f"{TOPICS[topic]} headline {i}",
                                 f"News about {TOPICS[topic].lower()}, story {i}."])
    return folder


@pytest.fixture
def ag_news(tmp_path, monkeypatch):
    """TFDS's data directory for this test, with ag_news_subset's download replaced."""
    sources = _write_ag_news(tmp_path / "sources")
    calls = []

    def download_and_extract(self, url_or_urls):
        calls.append(url_or_urls)
        return {key: str(sources) for key in url_or_urls}

    monkeypatch.setattr(tfds.download.DownloadManager, "download_and_extract",
                        download_and_extract)
    monkeypatch.setattr(tfds_text, "any_host_reachable", lambda hosts, timeout=0: True)
    data_dir = tmp_path / "tfds"
    monkeypatch.setenv("TFDS_DATA_DIR", str(data_dir))
    return data_dir, calls


def test_a_tfds_set_reads_with_its_features_and_class_names(ag_news):
    data_dir, calls = ag_news
    task = TfdsTextTask("news", "ag_news_subset", {"train": "train", "dev": None},
                        Columns(), data_dir=str(data_dir))
    assert task.get_labels() == list(TOPICS)  # the ClassLabel's order, not sorted
    assert task.files == {"train": "train", "dev": "test"}  # no validation split: test
    train = task.get_examples(None, "train")
    assert len(train) == 40 and len(calls) == 1
    assert sorted((e.text_a, e.label) for e in train)[:2] == [
        ("News about business, story 10.", "Business"),
        ("News about business, story 14.", "Business")]  # supervised_keys: description
    assert len(task.get_examples(None, "dev")) == 12
    titles = TfdsTextTask("news", "ag_news_subset", {"train": "train"}, Columns(text="title"),
                          data_dir=str(data_dir))
    assert all(" headline " in e.text_a for e in titles.get_examples(None, "train"))


def test_an_unknown_feature_lists_the_sets_features(ag_news):
    data_dir, _ = ag_news
    task = TfdsTextTask("news", "ag_news_subset", {"train": "train"}, Columns(text="body"),
                        data_dir=str(data_dir))
    with pytest.raises(DataFileError, match=r"--text_column=body: tfds ag_news_subset split "
                                            r"train has no such column; the file's columns are "
                                            r"'description', 'label', 'title'"):
        task.get_examples(None, "train")


@pytest.mark.slow
def test_the_runner_trains_on_a_tfds_set_by_name(ag_news, backbone, tmp_path):
    out = tmp_path / "out"
    code, _ = run_in_process("run_classifier", [
        "--data_source=tfds", "--tfds_name=ag_news_subset", "--do_train", "--do_eval",
        *flag_list({"init_checkpoint": backbone / "bert_model.ckpt", "output_dir": out,
                    "max_seq_length": 32, "train_batch_size": 8, "eval_batch_size": 16,
                    "num_train_epochs": 1, "adapter_size": 8}, {})])
    assert code == 0
    results = read_results(out / "eval_results.txt")
    assert {"eval_accuracy", "eval_macro_f1", "eval_mcc"} <= set(results)
    import json
    description = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert description["task"] == "ag_news_subset" and description["labels"] == list(TOPICS)


def test_an_unknown_set_is_one_line(backbone, tmp_path, capfd):
    code, _ = run_in_process("run_classifier", [
        "--data_source=tfds", "--tfds_name=no_such_set_anywhere", "--do_train",
        f"--output_dir={tmp_path / 'out'}", f"--init_checkpoint={backbone}/bert_model.ckpt"])
    assert code == 1
    assert_one_error_line(capfd.readouterr().err, "run_classifier.py",
                          r"error: --tfds_name=no_such_set_anywhere: ")
