"""adapter_bert.data.tokenization: WordPieceTokenizer keeps Google's limits, gives fixed ids
on the embedded backbone's vocabulary (no transformers needed), and equals transformers'
`BertTokenizerFast` (ids, tokens, offsets, special ids, vocabulary) on varied text."""

import json

import pytest

from adapter_bert.data.tokenization import (MAX_INPUT_CHARS_PER_WORD, TokenizerError,
                                            WordPieceTokenizer, load_tokenizer, read_vocab)

# Accents, other scripts, punctuation, long words, control characters, odd white space.
TEXTS = [
    "Hello, World! How are you?",
    "Héllo wörld: ÀÉÎÕÜ àéîõü naïve café résumé Ångström",
    "ﬁancée ß İstanbul ǅemal Σίσυφος ΣΊΣΥΦΟΣ ＡＢＣ１２３",
    "日本語のテキスト、中文字符。한국어 ภาษาไทย 𠀀𠀁 mixed中文and English東京2020",
    "arabic العربية hebrew עברית devanagari हिन्दी",
    "combining e\u0301 a\u0308 n\u0303 precomposed é ä ñ",
    "control\u0000chars\u0001here\x7f and\u200bzero\u200cwidth\ufeffbom\ufffdreplacement",
    "tabs\tand\nnewlines\r\nand\u00a0nbsp\u2003em\u3000ideographic  double   spaces ",
    "",
    "   \t\n ",
    "don't stop--ever... (really?!) [brackets] {braces} \"quotes\" «guillemets» „low“ ¿qué? ¡sí!",
    "$100.00 + 50% = #1 @user ~tilde^caret_under|pipe\\back/slash `tick` 3.14159e-10",
    "emoji 😀👍🏽 and symbols ™ © ® ° ± × ÷ € £ ¥ ½",
    "[CLS] special [MASK] tokens [SEP] inside, [cls] lower [UNK] [PAD]x[MASK]y [ MASK ]",
    "a" * 101,
    "supercalifragilistic" * 6,
    "b" * 200,
    "c" * 201,
    "pneumono" * 40,
    "long " + "Transformer" * 14 + " then short, " + "é" * 150 + " end",
]
PAIRS = list(zip(TEXTS[:10], TEXTS[10:]))


@pytest.fixture(scope="module")
def vocab_file(minilm_dir):
    """The embedded MiniLM backbone's vocab.txt (BERT's uncased vocabulary)."""
    return str(minilm_dir / "vocab.txt")


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
    return load_tokenizer(vocab_file, do_lower_case=True)


def reference_tokenizer(vocab_file, do_lower_case):
    """transformers' BertTokenizerFast with Google's 200-character words (transformers 4 or 5:
    transformers 5 names the file `vocab`)."""
    transformers = pytest.importorskip("transformers")
    name = "vocab_file" if transformers.__version__.startswith("4.") else "vocab"
    reference = transformers.BertTokenizerFast(**{name: vocab_file}, do_lower_case=do_lower_case)
    reference.backend_tokenizer.model.max_input_chars_per_word = MAX_INPUT_CHARS_PER_WORD
    return reference


@pytest.fixture(scope="module", params=[True, False], ids=["lower", "cased"])
def both(request, vocab_file):
    """(ours, transformers') on the embedded vocabulary, lower-cased or not."""
    return (load_tokenizer(vocab_file, request.param),
            reference_tokenizer(vocab_file, request.param))


# ---- fixed expectations: no transformers needed ----

FIXED = [  # (text, do_lower_case, tokens, ids, offsets)
    ("Adapters tune BERT cheaply.", True,
     ["[CLS]", "adapt", "##ers", "tune", "bert", "cheap", "##ly", ".", "[SEP]"],
     [101, 15581, 2545, 8694, 14324, 10036, 2135, 1012, 102],
     [(0, 0), (0, 5), (5, 8), (9, 13), (14, 18), (19, 24), (24, 26), (26, 27), (0, 0)]),
    ("Héllo, naïve café!", True,
     ["[CLS]", "hello", ",", "naive", "cafe", "!", "[SEP]"],
     [101, 7592, 1010, 15743, 7668, 999, 102],
     [(0, 0), (0, 5), (5, 6), (7, 12), (13, 17), (17, 18), (0, 0)]),
    # Cased: accents are kept, and these words are not in the uncased vocabulary.
    ("Héllo, naïve café!", False,
     ["[CLS]", "[UNK]", ",", "[UNK]", "[UNK]", "!", "[SEP]"],
     [101, 100, 1010, 100, 100, 999, 102],
     [(0, 0), (0, 5), (5, 6), (7, 12), (13, 17), (17, 18), (0, 0)]),
    ("東京 is big", True, ["[CLS]", "東", "京", "is", "big", "[SEP]"],
     [101, 1879, 1755, 2003, 2502, 102], [(0, 0), (0, 1), (1, 2), (3, 5), (6, 9), (0, 0)]),
    # A special token in the text is one token, whatever the casing option.
    ("unaffable [MASK] x", False, ["[CLS]", "una", "##ffa", "##ble", "[MASK]", "x", "[SEP]"],
     [101, 14477, 20961, 3468, 103, 1060, 102],
     [(0, 0), (0, 3), (3, 6), (6, 9), (10, 16), (17, 18), (0, 0)]),
]


@pytest.mark.parametrize("text, lower, tokens, ids, offsets", FIXED)
def test_fixed_ids_tokens_and_offsets(vocab_file, text, lower, tokens, ids, offsets):
    tokenizer = load_tokenizer(vocab_file, lower)
    encoded = tokenizer(text, return_offsets_mapping=True)
    assert encoded == {"input_ids": ids, "token_type_ids": [0] * len(ids),
                       "attention_mask": [1] * len(ids), "offset_mapping": offsets}
    assert tokenizer.convert_ids_to_tokens(ids) == tokens
    assert tokenizer.convert_tokens_to_ids(tokens) == ids
    assert tokenizer.tokenize(text) == tokens[1:-1]


def test_fixed_pair_and_batch(tokenizer):
    encoded = tokenizer(["How old?", "x"], ["Ten years.", "y"])
    assert encoded["input_ids"] == [[101, 2129, 2214, 1029, 102, 2702, 2086, 1012, 102],
                                    [101, 1060, 102, 1061, 102]]
    assert encoded["token_type_ids"] == [[0] * 5 + [1] * 4, [0, 0, 0, 1, 1]]
    assert encoded["attention_mask"] == [[1] * 9, [1] * 5]
    single = tokenizer(["How old?", ""], add_special_tokens=False, return_attention_mask=False,
                       return_token_type_ids=False)
    assert single == {"input_ids": [[2129, 2214, 1029], []]}


def test_special_tokens_and_vocabulary(tokenizer):
    assert (tokenizer.pad_token, tokenizer.unk_token, tokenizer.cls_token, tokenizer.sep_token,
            tokenizer.mask_token) == ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id,
            tokenizer.sep_token_id, tokenizer.mask_token_id) == (0, 100, 101, 102, 103)
    assert len(tokenizer.get_vocab()) == len(tokenizer) == 30522
    assert tokenizer.convert_tokens_to_ids("no-such-token") == 100
    assert tokenizer.convert_tokens_to_ids(tokenizer.cls_token) == 101
    assert tokenizer.convert_ids_to_tokens(30522) is None
    assert tokenizer.is_fast


def test_truncation_needs_room_and_pairs_must_match(tokenizer):
    with pytest.raises(ValueError, match=r"truncation=True needs max_length, the row length "
                                         r"with special tokens, of at least 3; got None"):
        tokenizer("a b c", truncation=True)
    with pytest.raises(ValueError, match="of at least 4; got 3"):
        tokenizer("a b c", "d", truncation=True, max_length=3)
    with pytest.raises(ValueError, match="2 texts but 1 text pairs"):
        tokenizer(["a", "b"], ["c"])


@pytest.mark.parametrize("max_length", [4, 6, 9, 16, 128])
def test_truncation_is_googles_and_equals_the_runners_features(tokenizer, max_length):
    """`truncation=True, max_length=N` gives the rows run_classifier.py's features hold
    (Google's `_truncate_seq_pair`: the extra piece of an odd budget goes to the first text,
    a tie drops from the second), with offsets cut alongside."""
    from adapter_bert.data.features import convert_examples_to_features
    from adapter_bert.data.glue import InputExample
    examples = [InputExample(f"x-{i}", a, b or None) for i, (a, b) in enumerate(PAIRS)]
    examples += [InputExample("x-single", TEXTS[15]), InputExample("x-empty-b", "a b", "")]
    features = convert_examples_to_features(examples, ["0"], max_length, tokenizer,
                                            log_examples=0)
    texts = [e.text_a for e in examples]
    pairs = [e.text_b or "" for e in examples]
    cut = tokenizer(texts, pairs, truncation=True, max_length=max_length,
                    return_offsets_mapping=True)
    for row, example in enumerate(examples):
        length = int(features["input_mask"][row].sum())
        assert cut["input_ids"][row] == features["input_ids"][row][:length].tolist(), example
        assert cut["token_type_ids"][row] == features["segment_ids"][row][:length].tolist()
        assert cut["attention_mask"][row] == [1] * length
        full = tokenizer(example.text_a, example.text_b, return_offsets_mapping=True) \
            if example.text_b else tokenizer(example.text_a, return_offsets_mapping=True)
        kept = dict(zip(range(length), cut["offset_mapping"][row]))
        assert all(offset in full["offset_mapping"] for offset in kept.values())
    one = tokenizer("one two three four five", truncation=True, max_length=4)
    assert one["input_ids"] == [tokenizer.cls_token_id, *tokenizer.convert_tokens_to_ids(
        ["one", "two"]), tokenizer.sep_token_id]


def test_vocabulary_is_read_as_transformers_load_vocab():
    """Text-mode lines (\\r\\n, \\r, a last line without \\n); a repeated token keeps its last index."""
    vocab = read_vocab(b"[PAD]\r\n[UNK]\rhello\nworld\r\nhello\n##s\nlast")
    assert vocab == {"[PAD]": 0, "[UNK]": 1, "hello": 4, "world": 3, "##s": 5, "last": 6}


def test_load_tokenizer_errors(tmp_path):
    with pytest.raises(TokenizerError, match="vocabulary file not found"):
        load_tokenizer(str(tmp_path / "missing.txt"))
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(TokenizerError, match="is empty"):
        load_tokenizer(str(tmp_path / "empty.txt"))
    (tmp_path / "latin1.txt").write_bytes(b"[UNK]\ncaf\xe9\n")
    with pytest.raises(TokenizerError, match=r"latin1.txt line 2: not valid UTF-8 \(byte 0xe9 at byte column 4\)"):
        load_tokenizer(str(tmp_path / "latin1.txt"))


def test_missing_special_tokens_get_the_next_ids():
    tokenizer = WordPieceTokenizer({"[UNK]": 0, "a": 1, "[SEP]": 2, "[CLS]": 3})
    assert (tokenizer.pad_token_id, tokenizer.mask_token_id) == (4, 5)
    assert tokenizer("a [MASK] a")["input_ids"] == [3, 1, 5, 1, 2]


# ---- Google's word-length limit ----

def _google_wordpiece(word, vocab, max_input_chars_per_word=200):
    """google-research/bert's WordpieceTokenizer on one word: greedy longest match first."""
    if len(word) > max_input_chars_per_word:
        return ["[UNK]"]
    pieces, start = [], 0
    while start < len(word):
        end, piece = len(word), None
        while start < end:
            candidate = word[start:end] if start == 0 else "##" + word[start:end]
            if candidate in vocab:
                piece = candidate
                break
            end -= 1
        if piece is None:
            return ["[UNK]"]
        pieces.append(piece)
        start = end
    return pieces


@pytest.mark.parametrize("length", [100, 101, 150, 200, 201])
def test_long_words_split_as_googles_wordpiece(tokenizer, length):
    """Words of 101..200 characters are split (the tokenizers library's default gives [UNK])."""
    assert MAX_INPUT_CHARS_PER_WORD == 200
    word = ("adapters" * 30)[:length]
    pieces = tokenizer.tokenize(word)
    assert pieces == _google_wordpiece(word, tokenizer.get_vocab())
    assert (pieces == ["[UNK]"]) == (length > 200)


def test_offsets_of_a_long_word_cover_it(tokenizer):
    """SQuAD reads answers through the offsets: a 150-character word keeps exact ones."""
    text = "see " + "transformer" * 13 + "s end"
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = encoded["offset_mapping"]
    assert offsets[1][0] == 4 and offsets[-2][1] == len(text) - 4
    assert "".join(text[s:e] for s, e in offsets[1:-1]) == "transformer" * 13 + "s"


# ---- against transformers' BertTokenizerFast ----

def test_pipeline_equals_transformers(both):
    """Normaliser, pre-tokenizer, model (vocabulary, 200 characters), special tokens,
    template and decoder: the same `tokenizers` pipeline, serialised."""
    ours, reference = both
    assert json.loads(ours.backend_tokenizer.to_str()) == \
        json.loads(reference.backend_tokenizer.to_str())


@pytest.mark.parametrize("special", [True, False])
def test_batches_equal_transformers(both, special):
    ours, reference = both
    kwargs = dict(add_special_tokens=special, return_offsets_mapping=True)
    assert ours(TEXTS, **kwargs) == dict(reference(TEXTS, **kwargs))
    first, second = zip(*PAIRS)
    assert ours(list(first), list(second), **kwargs) == \
        dict(reference(list(first), list(second), **kwargs))


def test_single_texts_and_tokens_equal_transformers(both):
    ours, reference = both
    for text in TEXTS:
        assert ours(text, return_offsets_mapping=True) == \
            dict(reference(text, return_offsets_mapping=True)), repr(text)
        tokens = ours.tokenize(text)
        assert tokens == reference.tokenize(text), repr(text)
        ids = ours.convert_tokens_to_ids(tokens)
        assert ids == reference.convert_tokens_to_ids(tokens)
        assert ours.convert_ids_to_tokens(ids) == reference.convert_ids_to_tokens(ids)
    for text, pair in PAIRS:
        assert ours(text, pair, return_offsets_mapping=True) == \
            dict(reference(text, pair, return_offsets_mapping=True))


def test_special_ids_and_vocabulary_equal_transformers(both):
    ours, reference = both
    for name in ("pad", "unk", "cls", "sep", "mask"):
        assert getattr(ours, f"{name}_token") == getattr(reference, f"{name}_token")
        assert getattr(ours, f"{name}_token_id") == getattr(reference, f"{name}_token_id")
    assert ours.get_vocab() == reference.get_vocab()
    assert len(ours) == len(reference)
    for token in ("no-such-token", "[CLS]", "##ing", "the"):
        assert ours.convert_tokens_to_ids(token) == reference.convert_tokens_to_ids(token)
    for index in (0, 100, 103, 2000, 30521, 30522):
        assert ours.convert_ids_to_tokens(index) == reference.convert_ids_to_tokens(index)


ODD_VOCABS = {
    # Windows line endings, a repeated token (its last index counts), no final newline.
    "crlf_repeated": b"[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\nthe\r\ncat\r\n##s\r\n"
                     b"the\r\nsat\r\n.\r\n,\r\n\xc3\xa9t\xc3\xa9\r\nsa\r\n##t",
    # [PAD] and [MASK] missing: they get the next free ids.
    "missing_specials": b"[UNK]\nthe\n[SEP]\n[CLS]\ncat\n##s\nsat\n.\n",
}


@pytest.mark.parametrize("name", sorted(ODD_VOCABS))
@pytest.mark.parametrize("lower", [True, False])
def test_odd_vocabularies_equal_transformers(tmp_path, name, lower):
    path = tmp_path / "vocab.txt"
    path.write_bytes(ODD_VOCABS[name])
    ours, reference = load_tokenizer(str(path), lower), reference_tokenizer(str(path), lower)
    assert json.loads(ours.backend_tokenizer.to_str()) == \
        json.loads(reference.backend_tokenizer.to_str())
    texts = ["the cats sat.", "The CATS, sat [MASK]", "été dogs", "[PAD] [SEP] the"]
    assert ours(texts, return_offsets_mapping=True) == \
        dict(reference(texts, return_offsets_mapping=True))
    assert ours.get_vocab() == reference.get_vocab()
    assert (ours.pad_token_id, ours.mask_token_id, ours.cls_token_id) == \
        (reference.pad_token_id, reference.mask_token_id, reference.cls_token_id)
