"""`--data_source=tfds` without a network: TFDS's real `glue` builder prepares MRPC from
files the test writes (only its download step is replaced), the runner trains on it, and
an offline machine with nothing prepared gets one line naming both ways to the data."""

import socket
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from adapter_bert.data import glue, tfds_text
from adapter_bert.data.glue import GlueDataError

from tests.conftest import REPO

tfds = pytest.importorskip("tensorflow_datasets")

# MRPC as Microsoft ships it (msr_paraphrase_*.txt, what TFDS downloads): a BOM, a header,
# then quality, the two sentence ids and the two sentences. Pairs in DEV_IDS form dev.
HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
PAIRS = [
    ("1", "The company posted a profit of $2 million in the third quarter.",
     "Third-quarter profit at the company came to $2 million."),
    ("0", "The senator said she would vote against the bill on Tuesday.",
     "The bill was introduced by a group of senators last spring."),
    ("1", "Shares of the retailer rose 4 percent in early trading.",
     "The retailer's stock climbed 4 percent soon after the market opened."),
    ("0", "Rain is expected across the north of the country this weekend.",
     "The weather service issued a heat warning for the southern coast."),
    ("1", "Police arrested two men after the robbery on Main Street.",
     "Two men were taken into custody following the Main Street robbery."),
    ("0", "The museum will reopen in March after a two-year renovation.",
     "Ticket prices at the museum have doubled since last year."),
    ("1", "The new drug reduced symptoms in most patients, the study found.",
     "Most patients saw fewer symptoms on the new drug, according to the study."),
    ("0", "He joined the team as a coach in 1998.",
     "The team has won three championships since it was founded."),
    ("1", "The airline cancelled more than 200 flights because of the storm.",
     "Over 200 flights were cancelled by the airline as the storm hit."),
    ("1", "The court rejected the appeal on Monday.",
     "On Monday the appeal was turned down by the court."),
]
DEV_IDS = {4, 9}  # indices of PAIRS that TFDS puts in the validation split


def _ids(index):
    return str(1000 + 2 * index), str(1001 + 2 * index)


def write_mrpc_sources(folder):
    """Writes the three files TFDS's glue/mrpc downloads; returns {key: path} as the
    builder's `dl_manager.download` would."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [HEADER] + [f"{q}\t{_ids(i)[0]}\t{_ids(i)[1]}\t{a}\t{b}"
                       for i, (q, a, b) in enumerate(PAIRS)]
    train = folder / "msr_paraphrase_train.txt"
    train.write_text("\ufeff" + "\n".join(rows) + "\n", encoding="utf-8")
    test = folder / "msr_paraphrase_test.txt"
    test.write_text("\n".join(rows[:4]) + "\n", encoding="utf-8")
    dev_ids = folder / "mrpc_dev_ids.tsv"
    dev_ids.write_text("".join("\t".join(_ids(i)) + "\n" for i in sorted(DEV_IDS)),
                       encoding="utf-8")
    return {"train": train, "test": test, "dev_ids": dev_ids}


@pytest.fixture
def local_downloads(tmp_path, monkeypatch):
    """Replaces TFDS's network download with the files this test writes; counts calls."""
    sources = write_mrpc_sources(tmp_path / "sources")
    calls = []

    def download(self, url_or_urls):
        calls.append(url_or_urls)
        return {key: str(sources[key]) for key in url_or_urls}

    monkeypatch.setattr(tfds.download.DownloadManager, "download", download)
    # The real hosts cannot be reached here: pretend the probe got through.
    monkeypatch.setattr(tfds_text, "any_host_reachable", lambda hosts, timeout=0: True)
    return calls


def test_real_builder_prepares_mrpc_once_and_reads_it_back(tmp_path, local_downloads,
                                                           monkeypatch):
    data_dir = str(tmp_path / "tfds")
    train = tfds_text.load_glue_examples("MRPC", "train", data_dir=data_dir)
    dev = tfds_text.load_glue_examples("MRPC", "dev", data_dir=data_dir)
    assert len(local_downloads) == 1  # prepared once, for every split

    expected_train = [(a, b, q) for i, (q, a, b) in enumerate(PAIRS) if i not in DEV_IDS]
    expected_dev = [(a, b, q) for i, (q, a, b) in enumerate(PAIRS) if i in DEV_IDS]
    # In the file's order (TFDS shuffles what it stores), as GLUE's train.tsv / dev.tsv.
    assert [(e.text_a, e.text_b, e.label) for e in train] == expected_train
    assert [(e.text_a, e.text_b, e.label) for e in dev] == expected_dev
    assert all(e.guid.startswith("dev-") for e in dev)

    # The next run reads TFDS's data directory: no download, no probe.
    monkeypatch.setattr(tfds_text, "any_host_reachable",
                        lambda hosts, timeout=0: pytest.fail("probed although prepared"))
    again = tfds_text.load_glue_examples("MRPC", "dev", data_dir=data_dir)
    assert [e.text_a for e in again] == [e.text_a for e in dev]
    assert len(local_downloads) == 1


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_download_hosts_are_the_builders_urls():
    builder = tfds.builder("glue/mrpc", data_dir="/nonexistent-tfds-dir")
    hosts = tfds_text.download_hosts(builder)
    assert hosts and all(port == 443 for _, port in hosts)
    assert len({h for h, _ in hosts}) == len(hosts)


def test_probe_tells_a_closed_port_from_an_open_one():
    closed = _closed_port()
    assert not tfds_text.any_host_reachable([("127.0.0.1", closed)], timeout=1.0)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        assert tfds_text.any_host_reachable([("127.0.0.1", closed), ("127.0.0.1", port)])


def test_offline_with_nothing_prepared_is_one_line_naming_both_ways(tmp_path, monkeypatch):
    closed = _closed_port()
    monkeypatch.setattr(tfds_text, "download_hosts", lambda builder: [("127.0.0.1", closed)])
    monkeypatch.setattr(tfds.download.DownloadManager, "download",
                        lambda self, urls: pytest.fail("downloaded although offline"))
    start = time.monotonic()
    with pytest.raises(GlueDataError) as error:
        tfds_text.load_glue_examples("MRPC", "train", data_dir=str(tmp_path / "tfds"))
    assert time.monotonic() - start < 30  # TFDS's own retries take minutes
    message = str(error.value)
    assert "\n" not in message
    assert "glue/mrpc" in message and "127.0.0.1" in message
    assert "internet" in message and "--data_dir=<glue_data>/MRPC" in message
    assert "GLUE_DIR" in message


@pytest.mark.slow
def test_runner_trains_on_tfds_data(tmp_path, local_downloads, minilm_dir):
    """run_classifier.py --data_source=tfds reads what TFDS prepared in $TFDS_DATA_DIR."""
    from tests.runner_utils import write_tiny_backbone
    data_dir = tmp_path / "tfds"
    tfds_text.load_glue_examples("MRPC", "train", data_dir=str(data_dir))  # prepares it
    backbone = write_tiny_backbone(tmp_path / "bert", minilm_dir / "vocab.txt")
    out = tmp_path / "out"
    env = {"TFDS_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
           "TF_CPP_MIN_LOG_LEVEL": "2", "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, str(REPO / "run_classifier.py"), "--task_name=MRPC", "--do_train",
         "--do_eval", "--data_source=tfds", f"--output_dir={out}",
         f"--init_checkpoint={backbone}/bert_model.ckpt",
         f"--bert_config_file={backbone}/bert_config.json",
         f"--vocab_file={backbone}/vocab.txt", "--max_seq_length=32",
         "--train_batch_size=4", "--eval_batch_size=4", "--num_train_epochs=1"],
        capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    results = (out / "eval_results.txt").read_text()
    assert "eval_accuracy" in results


@pytest.mark.realdata
def test_tfds_mrpc_equals_the_glue_data_files(real_data, tmp_path, monkeypatch):
    """TFDS's glue/mrpc, prepared from Microsoft's own files (msr_paraphrase_train.txt,
    msr_paraphrase_test.txt and the GLUE dev ids, what TFDS downloads), reads back as the
    TSV processor reads glue_data's train.tsv and dev.tsv: same pairs, labels and order,
    so the quickstart trains on the same batches whichever way it gets MRPC."""
    from adapter_bert.data.glue import get_processor
    from tests.conftest import real_file
    folder = real_file(real_data, "glue/MRPC/train.tsv").parent
    paths = {"train": real_file(real_data, "glue/MRPC/msr_paraphrase_train.txt"),
             "test": real_file(real_data, "glue/MRPC/msr_paraphrase_test.txt"),
             "dev_ids": real_file(real_data, "glue/MRPC/dev_ids.tsv")}
    monkeypatch.setattr(tfds.download.DownloadManager, "download",
                        lambda self, urls: {key: str(paths[key]) for key in urls})
    monkeypatch.setattr(tfds_text, "any_host_reachable", lambda hosts, timeout=0: True)
    processor = get_processor("MRPC")
    for split, count in (("train", 3668), ("dev", 408)):
        tsv = processor.get_examples(str(folder), split)
        from_tfds = tfds_text.load_glue_examples("MRPC", split, data_dir=str(tmp_path / "tfds"))
        assert len(from_tfds) == len(tsv) == count
        assert [(e.text_a, e.text_b, e.label) for e in from_tfds] == \
            [(e.text_a, e.text_b, e.label) for e in tsv]


# ---------------------------------------------------------------------------
# Records -> examples, and loading through a stand-in tensorflow_datasets module.

def test_tfds_record_mapping():
    cases = [
        ("cola", {"sentence": b"It is.", "label": np.int64(1),
                  "idx": np.int32(4)}, ("It is.", None, "1")),
        ("sst2", {"sentence": b"bad .", "label": 0, "idx": 2},
         ("bad .", None, "0")),
        ("mrpc", {"sentence1": b"A", "sentence2": b"B", "label": 1, "idx": 0},
         ("A", "B", "1")),
        ("stsb", {"sentence1": b"A", "sentence2": b"B",
                  "label": np.float32(3.8), "idx": 0},
         ("A", "B", float(np.float32(3.8)))),
        ("qqp", {"question1": b"Q1", "question2": b"Q2", "label": 0, "idx": 0},
         ("Q1", "Q2", "0")),
        ("mnli", {"premise": b"P", "hypothesis": b"H", "label": 0, "idx": 0},
         ("P", "H", "entailment")),
        ("mnli", {"premise": b"P", "hypothesis": b"H", "label": 1, "idx": 0},
         ("P", "H", "neutral")),
        ("mnli", {"premise": b"P", "hypothesis": b"H", "label": 2, "idx": 0},
         ("P", "H", "contradiction")),
        ("qnli", {"question": b"Q", "sentence": b"S", "label": 1, "idx": 0},
         ("Q", "S", "not_entailment")),
        ("rte", {"sentence1": "A", "sentence2": "B", "label": 0, "idx": 0},
         ("A", "B", "entailment")),
        ("wnli", {"sentence1": b"A", "sentence2": b"B", "label": 1, "idx": 0},
         ("A", "B", "1")),
        ("ax", {"premise": b"P", "hypothesis": b"H", "label": -1, "idx": 3},
         ("P", "H", None)),
        ("rte", {"sentence1": b"A", "sentence2": b"B", "label": -1, "idx": 0},
         ("A", "B", None)),
        ("stsb", {"sentence1": b"A", "sentence2": b"B", "label": -1.0,
                  "idx": 0}, ("A", "B", None)),
    ]
    for task, record, (text_a, text_b, label) in cases:
        example = tfds_text.glue_record_to_example(task, record, "dev")
        assert (example.text_a, example.text_b, example.label) == (
            text_a, text_b, label), task
        assert example.guid == f"dev-{int(record['idx'])}"
        if label is not None and not glue.get_processor(task).is_regression:
            assert label in glue.get_processor(task).get_labels()
    with pytest.raises(glue.GlueDataError, match=r"label id 3 out of range"):
        tfds_text.glue_record_to_example(
            "rte", {"sentence1": b"A", "sentence2": b"B", "label": 3,
                    "idx": 0}, "train")
    with pytest.raises(glue.GlueDataError, match=r"missing field.*sentence2"):
        tfds_text.glue_record_to_example(
            "mrpc", {"sentence1": b"A", "label": 1, "idx": 0}, "train")


def _fake_tfds(records, calls, fail=None):
    """A stand-in tensorflow_datasets whose `glue/<task>` builders are already prepared:
    `as_dataset` records (name, split, data_dir) and returns `records` (or raises `fail`)."""
    module = types.ModuleType("tensorflow_datasets")

    class Builder:
        def __init__(self, name, data_dir=None):
            self.full_name, self.data_dir = name, data_dir
            self.info = types.SimpleNamespace(splits={"train": None, "validation": None})

        def is_prepared(self):
            return True

        def as_dataset(self, split, shuffle_files=False):
            calls.append((self.full_name, split, self.data_dir))
            if fail:
                raise fail
            return list(records)

    module.builder = Builder
    module.as_numpy = lambda dataset: iter(dataset)
    return module


def test_load_glue_examples_with_fake_module(monkeypatch):
    calls = []
    records = [{"premise": b"P0", "hypothesis": b"H0", "label": 2, "idx": 0},
               {"premise": b"P1", "hypothesis": b"H1", "label": 0, "idx": 1}]
    monkeypatch.setitem(sys.modules, "tensorflow_datasets",
                        _fake_tfds(records, calls))
    examples = tfds_text.load_glue_examples("MNLI", "dev_mismatched", data_dir="/tfds")
    assert calls == [("glue/mnli", "validation_mismatched", "/tfds")]
    assert examples == [glue.InputExample("dev-0", "P0", "H0", "contradiction"),
                        glue.InputExample("dev-1", "P1", "H1", "entailment")]
    tfds_text.load_glue_examples("mnli", "test")
    assert calls[1] == ("glue/mnli", "test_matched", None)
    calls.clear()
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", _fake_tfds(
        [{"sentence": b"fine .", "label": -1, "idx": 7}], calls))
    assert tfds_text.load_glue_examples("sst2", "test") == [
        glue.InputExample("test-7", "fine .", None, None)]
    assert tfds_text.load_glue_examples("SST-2", "dev")[0].guid == "dev-7"
    assert calls == [("glue/sst2", "test", None),
                     ("glue/sst2", "validation", None)]
    with pytest.raises(glue.GlueDataError, match=r"no split 'dev_matched'"):
        tfds_text.load_glue_examples("rte", "dev_matched")


def test_load_glue_examples_errors(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    with pytest.raises(ImportError, match=r"tensorflow_datasets.*not installed"):
        tfds_text.load_glue_examples("mrpc", "train")
    monkeypatch.setitem(
        sys.modules, "tensorflow_datasets",
        _fake_tfds([], [], fail=ConnectionError("no network")))
    with pytest.raises(glue.GlueDataError,
                       match=r"TFDS glue/mrpc .*: cannot read split 'train' \(no network\)"
                             r".*--data_source=tsv"):
        tfds_text.load_glue_examples("mrpc", "train")
