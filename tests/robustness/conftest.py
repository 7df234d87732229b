"""Fixtures of the robustness tests: a tiny backbone, written MRPC rows, a SQuAD slice."""

import pytest

from tests import fixtures
from tests.conftest import BERT_VOCAB
from tests.runner_utils import write_tiny_backbone


@pytest.fixture(scope="module")
def vocab():
    """The uncased BERT vocabulary (the embedded backbone's)."""
    return BERT_VOCAB


@pytest.fixture(scope="module")
def backbone(tmp_path_factory, vocab):
    """A random 2-layer, hidden-16 BERT as a Google TF1 checkpoint folder."""
    return write_tiny_backbone(tmp_path_factory.mktemp("robust") / "uncased_L-2_H-16_A-2", vocab)


@pytest.fixture(scope="module")
def mrpc_lines():
    """Written MRPC rows: (train lines, dev lines, test lines), headers included
    (96 train, 40 dev and 8 test examples)."""
    return fixtures.mrpc_lines(rows=(97, 41, 9))


@pytest.fixture(scope="module")
def squad_slice():
    """The first two paragraphs of the written SQuAD v1.1 dev file, as a dict."""
    return fixtures.squad_slice(paragraphs=2)
