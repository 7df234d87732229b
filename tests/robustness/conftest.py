"""Fixtures of the robustness tests: a tiny backbone, real MRPC rows, a real SQuAD slice."""

import json

import pytest

from tests.runner_utils import write_tiny_backbone


@pytest.fixture(scope="module")
def vocab(shared_dir):
    return shared_dir / "models/google-bert-mini-index/vocab.txt"


@pytest.fixture(scope="module")
def backbone(tmp_path_factory, vocab):
    """A random 2-layer, hidden-16 BERT as a Google TF1 checkpoint folder."""
    return write_tiny_backbone(tmp_path_factory.mktemp("robust") / "uncased_L-2_H-16_A-2", vocab)


@pytest.fixture(scope="module")
def mrpc_lines(shared_dir):
    """Real MRPC rows: (train lines, dev lines, test lines), headers included."""
    source = shared_dir / "data/glue/MRPC"

    def read(name, count):
        return (source / name).read_text(encoding="utf-8-sig").splitlines()[:count]
    return read("train.tsv", 97), read("dev.tsv", 41), read("test.tsv", 9)


@pytest.fixture(scope="module")
def squad_slice(shared_dir):
    """Two real SQuAD v1.1 dev paragraphs, as a dict."""
    data = json.loads((shared_dir / "data/squad/dev-v1.1.json").read_text(encoding="utf-8"))
    article = data["data"][0]
    return {"version": "1.1", "data": [dict(article, paragraphs=article["paragraphs"][:2])]}
