"""Shared fixtures: tiny configs for fast tests, paths to ../shared, the MiniLM backbone."""

import os

# Quiet TensorFlow's C++ start-up logs and make transformers' TF classes use tf-keras.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

# Before any test module imports TensorFlow: the package's CPU settings (oneDNN) apply
# to every test, as they do to the scripts.
import adapter_bert  # noqa: E402,F401

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def bench_module(name: str):
    """Imports bench/<name>.py as the module `bench.<name>`."""
    import importlib
    return importlib.import_module(f"bench.{name}")


# A real uncased BERT vocabulary (Google's BERT-Mini), for tokenizer-level tests.
BERT_VOCAB = SHARED / "models" / "google-bert-mini-index" / "vocab.txt"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared data/models folder beside the checkout (skips the test if absent)."""
    if not SHARED.is_dir():
        pytest.skip(f"shared data folder not found at {SHARED}")
    return SHARED


@pytest.fixture(scope="session")
def uncased_tokenizer():
    """transformers' fast BERT tokenizer on the real uncased vocabulary (skips if absent)."""
    if not BERT_VOCAB.is_file():
        pytest.skip(f"vocab not found at {BERT_VOCAB}")
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
def backbone(tmp_path_factory, shared_dir):
    """A random 2-layer, hidden-16 BERT as a Google TF1 checkpoint folder (real vocab):
    what the runner tests train in seconds (tests/robustness overrides it)."""
    from tests.runner_utils import write_tiny_backbone
    vocab = shared_dir / "models/google-bert-mini-index/vocab.txt"
    return write_tiny_backbone(tmp_path_factory.mktemp("tiny_bert"), vocab)


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


def mrpc_dev_pairs(shared_dir, vocab_dir, count=8, seq=64):
    """The first `count` real MRPC dev pairs, tokenised (uncased) and padded to `seq`."""
    import csv

    from transformers import BertTokenizerFast
    with open(shared_dir / "data/glue/MRPC/dev.tsv", encoding="utf-8-sig") as f:
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
