"""The WordPiece tokenizer (transformers' fast BERT tokenizer) and its sanity checks."""

import json
import os
import re
from typing import Optional

from adapter_bert.model.config import BertConfig


# Google's WordpieceTokenizer turns a word longer than this (in characters) into [UNK];
# transformers' fast tokenizer defaults to 100.
MAX_INPUT_CHARS_PER_WORD = 200


class TokenizerError(ValueError):
    """The vocabulary or casing does not fit the checkpoint."""


def load_tokenizer(vocab_file: str, do_lower_case: bool = True):
    """Builds a fast BERT tokenizer from a `vocab.txt` (offsets are exact for SQuAD).

    Words of up to `MAX_INPUT_CHARS_PER_WORD` (200) characters are split into
    word pieces, as by Google's tokenizer; longer ones become [UNK].

    Raises:
        TokenizerError: the file is missing, empty or not UTF-8 (naming the line).
    """
    from transformers import BertTokenizerFast
    if not vocab_file or not os.path.isfile(vocab_file):
        raise TokenizerError(f"{vocab_file}: vocabulary file not found (pass --vocab_file)")
    with open(vocab_file, "rb") as f:
        data = f.read()
    if not data:
        raise TokenizerError(f"{vocab_file}: vocabulary file is empty")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise TokenizerError(f"{vocab_file}: not valid UTF-8 (line {line}, byte "
                             f"0x{data[e.start]:02x}); a BERT vocab.txt is UTF-8, one token "
                             f"a line") from None
    tokenizer = BertTokenizerFast(vocab_file=vocab_file, do_lower_case=do_lower_case)
    tokenizer.backend_tokenizer.model.max_input_chars_per_word = MAX_INPUT_CHARS_PER_WORD
    return tokenizer


def check_vocab_matches_config(tokenizer, config: BertConfig, vocab_file: str) -> None:
    """Raises TokenizerError if the vocabulary is larger than the embedding table."""
    size = len(tokenizer.get_vocab())
    if size != config.vocab_size:
        raise TokenizerError(
            f"{vocab_file} has {size} tokens but the BERT config says vocab_size="
            f"{config.vocab_size}: the vocabulary does not belong to this checkpoint")


_CASE_HINT = re.compile(r"(?<![a-z])(uncased|cased)(?![a-z])", re.IGNORECASE)


def checkpoint_lower_case(init_checkpoint: Optional[str]) -> Optional[bool]:
    """Whether a checkpoint was trained on lower-cased text, if its files or name say so.

    A Hugging Face `tokenizer_config.json` beside the weights is authoritative;
    otherwise a Google-style directory name (`uncased_L-12_H-768_A-12`,
    `cased_L-12_H-768_A-12`) decides. None when nothing tells.
    """
    if not init_checkpoint:
        return None
    folder = init_checkpoint if os.path.isdir(init_checkpoint) else os.path.dirname(init_checkpoint)
    config_path = os.path.join(folder, "tokenizer_config.json")
    if os.path.isfile(config_path):
        try:
            with open(config_path, encoding="utf-8") as f:
                value = json.load(f).get("do_lower_case")
            if isinstance(value, bool):
                return value
        except (OSError, ValueError):
            pass
    match = _CASE_HINT.search(os.path.basename(os.path.normpath(folder)))
    if match:
        return match.group(1).lower() == "uncased"
    return None


def validate_case_matches_checkpoint(do_lower_case: bool, init_checkpoint: Optional[str]) -> None:
    """Fails early when --do_lower_case contradicts the checkpoint (a silent accuracy killer).

    Raises:
        TokenizerError: naming the flag value, the checkpoint and the fix.
    """
    expected = checkpoint_lower_case(init_checkpoint)
    if expected is None or expected == bool(do_lower_case):
        return
    kind = "uncased" if expected else "cased"
    raise TokenizerError(
        f"--do_lower_case={bool(do_lower_case)} but {init_checkpoint} is a {kind} checkpoint; "
        f"pass --do_lower_case={expected}")
