"""Per-code-point tables of Google BERT's basic tokenizer, for tokenising inside a graph.

Every step of `BasicTokenizer` (drop controls, whitespace, CJK, lower-case, NFD, drop
marks, split punctuation) is a function of one code point except `str.lower()`'s
final-sigma rule, which reads its neighbours' "cased"/"case-ignorable" properties. The
tables hold those facts as Python's `unicodedata` states them: `code_point_classes()`
(run-length class bits) and `lower_case_mapping()` (every code point
`strip_accents(lower(c))` changes). `CASED` and `CASE_IGNORABLE` are read off
`str.lower()` itself, so they match CPython's rule whatever the Unicode version.
"""

import functools
import sys
import unicodedata
from typing import Dict, List, Tuple

import numpy as np

# Class bits of a code point.
DROP = 1             # removed before anything else: NUL, U+FFFD, control/format/unassigned
SPACE = 2            # a word separator
CJK = 4              # a CJK ideograph: a word of its own
PUNCT = 8            # a punctuation character: a word of its own
CASE_IGNORABLE = 16  # skipped when str.lower() looks for a final sigma's neighbours
CASED = 32           # a cased letter, for the final-sigma rule

CAPITAL_SIGMA = 0x3A3
FINAL_SIGMA = 0x3C2

# The CJK Unified Ideographs blocks google-research/bert puts spaces around.
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_control(char: str) -> bool:
    # Tab, newline and carriage return are whitespace, not control, for BERT.
    if char in "\t\n\r":
        return False
    return unicodedata.category(char).startswith("C")


def _is_whitespace(char: str) -> bool:
    # BERT's own whitespace (space, \t, \n, \r, Zs) and what `str.split()` splits on
    # besides (U+2028, U+2029): both separate words.
    return char in " \t\n\r" or unicodedata.category(char) == "Zs" or char.isspace()


def _is_punctuation(cp: int) -> bool:
    # All non-letter/number ASCII is punctuation for BERT ("^", "$", "`" too), as is any
    # Unicode P* character.
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(chr(cp)).startswith("P")


def _is_cjk(cp: int) -> bool:
    return any(low <= cp <= high for low, high in _CJK_RANGES)


def _sigma_context(char: str) -> int:
    """CASED, CASE_IGNORABLE or 0, as CPython's final-sigma rule sees `char`.

    `char + "Σ"` lowers to a final sigma only if `char` is cased and not ignorable;
    `"AΣ" + char + "A"` only if `char` is neither (an ignorable one is skipped and the
    cased "A" after it is seen); neither outcome leaves the ignorable characters.
    """
    if (char + "\u03a3").lower()[-1] == "\u03c2":
        return CASED
    if ("A\u03a3" + char + "A").lower()[1] == "\u03c2":
        return 0
    return CASE_IGNORABLE


def _classes_of(cp: int) -> int:
    char = chr(cp)
    if cp == 0 or cp == 0xFFFD or _is_control(char):
        return DROP
    bits = _sigma_context(char)
    if _is_whitespace(char):
        bits |= SPACE
    if _is_cjk(cp):
        bits |= CJK
    if _is_punctuation(cp):
        bits |= PUNCT
    return bits


@functools.lru_cache(maxsize=None)
def code_point_classes() -> Tuple[np.ndarray, np.ndarray]:
    """Class bits of every code point, run-length encoded.

    Returns:
        `(starts, bits)`: int32 arrays; code points `starts[i] .. starts[i + 1] - 1` all
        have class bits `bits[i]` (`starts[0] == 0`). Surrogates (never in valid UTF-8)
        are DROP.
    """
    starts: List[int] = []
    bits: List[int] = []
    previous = None
    for cp in range(sys.maxunicode + 1):
        value = DROP if 0xD800 <= cp <= 0xDFFF else _classes_of(cp)
        if value != previous:
            starts.append(cp)
            bits.append(value)
            previous = value
    return np.asarray(starts, np.int32), np.asarray(bits, np.int32)


def _strip_accents(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", text)
                   if unicodedata.category(c) != "Mn")


@functools.lru_cache(maxsize=None)
def lower_case_mapping() -> Dict[int, Tuple[int, ...]]:
    """What an uncased BERT makes of each code point it changes: strip_accents(lower(c)).

    Code points that are dropped or are whitespace never reach this step and are left
    out. The capital sigma maps to 'σ' here; the graph turns a final one into 'ς'
    first (see `_sigma_context`).

    Returns:
        {code point: replacement code points} for every code point not left as it is.
    """
    mapping = {}
    for cp in range(sys.maxunicode + 1):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        char = chr(cp)
        if cp == 0 or cp == 0xFFFD or _is_control(char) or _is_whitespace(char):
            continue
        result = _strip_accents(char.lower())
        if result != char:
            mapping[cp] = tuple(ord(c) for c in result)
    return mapping
