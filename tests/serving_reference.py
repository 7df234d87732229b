"""A plain-Python statement of google-research/bert's tokenisation, the oracle of the
in-graph tokenizer's tests (tests/test_serving_tokenizer.py).

Written from the behaviour of Google's `tokenization.FullTokenizer` and
`run_classifier.convert_single_example`: invalid UTF-8 ignored; control characters
(every category C* but tab, newline, carriage return), NUL and U+FFFD dropped;
whitespace (space, tab, newline, CR, Zs) to spaces; spaces around CJK ideographs; split
on `str.split()`; per word `str.lower()`, NFD, non-spacing marks dropped (uncased);
punctuation (non-alphanumeric ASCII, Unicode P*) split off; greedy longest-match
WordPiece with "##" suffixes, `[UNK]` for words over 200 characters or without a
match; `[CLS] a [SEP] b [SEP]` with the longer side truncated first (b on a tie).
"""

import unicodedata
from typing import Dict, List, Optional

CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
       (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _control(c):
    return c not in "\t\n\r" and unicodedata.category(c).startswith("C")


def _space(c):
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def _punct(c):
    cp = ord(c)
    return (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126
            or unicodedata.category(c).startswith("P"))


def basic_words(text: str, lower: bool) -> List[str]:
    cleaned = []
    for c in text:
        if ord(c) in (0, 0xFFFD) or _control(c):
            continue
        if any(lo <= ord(c) <= hi for lo, hi in CJK):
            cleaned.append(f" {c} ")
        else:
            cleaned.append(" " if _space(c) else c)
    words = []
    for word in "".join(cleaned).split():
        if lower:
            word = "".join(c for c in unicodedata.normalize("NFD", word.lower())
                           if unicodedata.category(c) != "Mn")
        current = ""
        for c in word:
            if _punct(c):
                words += [current, c] if current else [c]
                current = ""
            else:
                current += c
        if current:
            words.append(current)
    return words


def wordpiece(word: str, vocab: Dict[str, int]) -> List[int]:
    if len(word) > 200:
        return [vocab["[UNK]"]]
    ids, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = ("##" if start else "") + word[start:end]
            if piece in vocab:
                ids.append(vocab[piece])
                start = end
                break
        else:
            return [vocab["[UNK]"]]
    return ids


def tokenize(text, vocab: Dict[str, int], lower: bool) -> List[int]:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "ignore")
    return [i for word in basic_words(text, lower) for i in wordpiece(word, vocab)]


def encode(text_a, text_b: Optional[str], vocab: Dict[str, int], lower: bool,
           max_seq_length: int) -> Dict[str, List[int]]:
    a = tokenize(text_a, vocab, lower)
    b = tokenize(text_b, vocab, lower) if text_b else None
    if b is None:
        a = a[:max_seq_length - 2]
    else:
        while len(a) + len(b) > max_seq_length - 3:
            (a if len(a) > len(b) else b).pop()
    ids = [vocab["[CLS]"]] + a + [vocab["[SEP]"]]
    segments = [0] * len(ids)
    if b is not None:
        ids += b + [vocab["[SEP]"]]
        segments += [1] * (len(b) + 1)
    pad = max_seq_length - len(ids)
    return {"input_ids": ids + [0] * pad, "input_mask": [1] * len(ids) + [0] * pad,
            "segment_ids": segments + [0] * pad}
