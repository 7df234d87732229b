"""The in-graph tokenizer gives exactly the Python pipeline's features on whole GLUE dev
sets (written ones in every task's layout; the real ones in the realdata group), and
Google's tokenisation on hand-picked and random Unicode text."""

import random
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow_text", reason="the [serving] extra (tensorflow-text) is not "
                                              "installed")

import tensorflow as tf  # noqa: E402

from adapter_bert.model.inputs import FEATURE_NAMES  # noqa: E402
from adapter_bert.serving import unicode_tables as tables  # noqa: E402
from adapter_bert.serving.tokenizer import (BertInputEncoder, VocabularyError,  # noqa: E402
                                            vocabulary_of)
from tests.conftest import BERT_VOCAB  # noqa: E402
from tests.fixtures import GLUE_ROWS  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import serving_reference as google  # noqa: E402



@pytest.fixture(scope="module")
def vocab_file():
    return str(BERT_VOCAB)


@pytest.fixture(scope="module")
def encoders(vocab_file):
    return {lower: BertInputEncoder(vocab_file, lower, 64) for lower in (True, False)}


@pytest.mark.parametrize("data_source, task", [
    *(("written", task) for task in GLUE_ROWS if task != "diagnostic"),
    *(pytest.param("real", task, marks=pytest.mark.realdata)
      for task in ("MRPC", "SST-2", "CoLA", "RTE")),
])
def test_every_glue_dev_row_matches_the_python_pipeline(data_source, task, data_root,
                                                        minilm_dir):
    """All rows of a dev set, with run_classifier.py's vocabulary and tokenizer."""
    from adapter_bert.data.features import convert_examples_to_features
    from adapter_bert.data.glue import canonical_task_name, get_processor
    from adapter_bert.data.tokenization import load_tokenizer
    vocab = str(minilm_dir / "vocab.txt")
    processor = get_processor(canonical_task_name(task))
    examples = processor.get_examples(str(data_root / "glue" / task), "dev")
    expected = convert_examples_to_features(examples, processor.get_labels(), 128,
                                            load_tokenizer(vocab, True),
                                            is_regression=processor.is_regression,
                                            log_examples=0)
    pair = examples[0].text_b is not None
    got = BertInputEncoder(vocab, True, 128).encode(
        tf.constant([e.text_a for e in examples]),
        tf.constant([e.text_b for e in examples]) if pair else None)
    for key in FEATURE_NAMES:
        np.testing.assert_array_equal(got[key].numpy(), expected[key], err_msg=key)
    # ... and Google's own algorithm agrees on these rows.
    oracle_vocab = vocabulary_of(vocab)
    for i in range(0, len(examples), 7):
        reference = google.encode(examples[i].text_a, examples[i].text_b, oracle_vocab, True, 128)
        assert got["input_ids"][i].numpy().tolist() == reference["input_ids"]


# Characters that exercise every rule of Google's basic tokenizer.
EDGE_CHARACTERS = list("aAbBzZ09 .,;'-!?$^`~\t\n\r") + [
    "\u00a0", "\u3000", "\u2028", "\u2029",            # whitespace (Zs, and str.split's)
    "\u200b", "\u00ad", "\x00", "\ufffd", "\x85", "\x1f", "\ue000", "\U000E0001",  # dropped
    "\u0378",                                          # unassigned: dropped (category Cn)
    "\u0301", "\u0308", "\u0345", "é", "É", "ñ", "Å", "\u212b", "ǅ", "ß", "ﬁ",  # case, NFD
    "Σ", "σ", "ς", "ΑΒ", "İ", "·", ":", "'",           # final sigma and its context
    "中", "文", "\uf900", "\U00020000", "가", "한",      # CJK, compatibility, Hangul
    "\u037e", "\u1fef", "¿", "«", "\u2161", "ⓐ", "\U0001F600",  # punctuation after NFD, ...
]


@pytest.mark.parametrize("lower", [True, False], ids=["uncased", "cased"])
def test_unicode_edge_cases_match_google(encoders, vocab_file, lower):
    vocab = vocabulary_of(vocab_file)
    rng = random.Random(0)
    texts = ["ΟΔΟΣ ΣΑΣ. Σ", "Ὀδυσσεύς", "naïve café", "x\u200by", "a" * 150, "a" * 201,
             "A\u0301\u0302\u0327", "Hello,World!!", "ǅemal İstanbul", "\u0301", ""]
    texts += ["".join(rng.choice(EDGE_CHARACTERS) for _ in range(rng.randint(0, 30)))
              for _ in range(2000)]
    got = encoders[lower].tokenize(tf.constant(texts)).to_list()
    for text, ids in zip(texts, got):
        assert ids == google.tokenize(text, vocab, lower), repr(text)


def test_pair_truncation_and_layout_match_google(encoders, vocab_file):
    vocab = vocabulary_of(vocab_file)
    rng = random.Random(1)
    words = ["the", "cat", "sat", "on", "mat", "unbelievable", "!"]
    pairs = [(" ".join(rng.choice(words) for _ in range(rng.randint(0, 70))),
              " ".join(rng.choice(words) for _ in range(rng.randint(0, 70))))
             for _ in range(400)]
    pairs += [("a", ""), ("", ""), ("", "b"), ("a b", "\u200b")]  # empty b: single sentence
    for length in (3, 4, 9, 64):
        encoder = encoders[True] if length == 64 else BertInputEncoder(vocab_file, True, length)
        got = encoder.encode(tf.constant([a for a, _ in pairs]), tf.constant([b for _, b in pairs]))
        for i, (a, b) in enumerate(pairs):
            expected = google.encode(a, b, vocab, True, length)
            for key in FEATURE_NAMES:
                assert got[key][i].numpy().tolist() == expected[key], (length, a, b, key)


def test_bytes_that_are_not_utf8_are_dropped_like_google(encoders, vocab_file):
    vocab = vocabulary_of(vocab_file)
    texts = [b"caf\xc3\xa9", b"\xff\xfeok", b"ab\xe2\x82cd", b"\xe2\x82", b"\xc3", b"\xed\xa0\x80x",
             b"\xf4\x90\x80\x80y", b"\xc0\xafz", "Déjà vu".encode("utf-8")]
    got = encoders[True].tokenize(tf.constant(texts)).to_list()
    for text, ids in zip(texts, got):
        assert ids == google.tokenize(text, vocab, True), text


def test_empty_batch_and_single_sentences(encoders):
    empty = encoders[True].encode(tf.constant([], tf.string), tf.constant([], tf.string))
    for key in FEATURE_NAMES:
        assert empty[key].shape == (0, 64) and empty[key].dtype == tf.int32
    blank = encoders[True].encode(tf.constant(["", "\u200b"]), tf.constant(["", ""]))
    np.testing.assert_array_equal(blank["input_ids"].numpy()[:, :3], [[101, 102, 0]] * 2)
    single = encoders[True].encode(tf.constant(["hello world"]))
    assert single["input_mask"].numpy().sum() == 4 and single["segment_ids"].numpy().sum() == 0
    with pytest.raises(tf.errors.InvalidArgumentError, match="same number of rows"):
        encoders[True].encode(tf.constant(["a", "b"]), tf.constant(["a"]))


def test_table_facts_the_graph_relies_on():
    """Whitespace is neither cased nor case-ignorable, so lower-casing whole texts decides
    final sigmas as Google's word-by-word lower-casing does; no code point changed by
    lower-casing becomes a space or a dropped character."""
    starts, bits = tables.code_point_classes()
    spaces = bits[(bits & tables.SPACE) != 0]
    assert spaces.size and not np.any(spaces & (tables.CASED | tables.CASE_IGNORABLE))
    for replacement in tables.lower_case_mapping().values():
        for cp in replacement:
            char = chr(cp)
            assert not char.isspace() and not unicodedata.category(char).startswith("C")
    assert starts[0] == 0 and np.all(np.diff(starts) > 0)


def test_vocabulary_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "vocab.txt"
    bad.write_bytes(b"[PAD]\n[UNK]\n[CLS]\n\xff\n[SEP]\n")
    with pytest.raises(VocabularyError, match=r"vocab.txt line 4: not valid UTF-8 \(byte 0xff at byte column 1\)"):
        vocabulary_of(str(bad))
    bad.write_bytes(b"[PAD]\n[CLS]\n[SEP]\nthe\n")
    with pytest.raises(VocabularyError, match=r"no \[UNK\] token"):
        vocabulary_of(str(bad))
    with pytest.raises(VocabularyError, match="cannot read"):
        vocabulary_of(str(tmp_path / "missing.txt"))


def test_the_vocabulary_numbers_tokens_as_the_runners_tokenizer(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n##s\n \nhello \nhello\n")
    assert vocabulary_of(str(vocab))["hello"] == 8  # a repeated token: its last line
    from adapter_bert.data.tokenization import load_tokenizer
    python = load_tokenizer(str(vocab), True)
    encoder = BertInputEncoder(str(vocab), True, 8)
    assert encoder.tokenize(tf.constant(["Hellos x"])).to_list() == [[8, 5, 1]] == \
        [python.convert_tokens_to_ids(python.tokenize("Hellos x"))]
