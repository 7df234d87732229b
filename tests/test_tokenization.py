"""adapter_bert.data.tokenization: the WordPiece tokenizer keeps Google's limits."""

import pytest

from adapter_bert.data.tokenization import MAX_INPUT_CHARS_PER_WORD, load_tokenizer
from tests.conftest import BERT_VOCAB


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(str(BERT_VOCAB), do_lower_case=True)


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


@pytest.mark.parametrize("length", [101, 150, 200, 201])
def test_long_words_split_as_googles_wordpiece(tokenizer, length):
    """Words of 101..200 characters are split (the fast tokenizer's default gives [UNK])."""
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
