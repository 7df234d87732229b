"""The WordPiece tokenizer (transformers' fast BERT tokenizer) and its sanity checks."""

import io
import json
import os
import re
from typing import Optional

from adapter_bert import io_utils
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
    if not vocab_file or not io_utils.isfile(vocab_file):
        raise TokenizerError(f"{vocab_file}: vocabulary file not found (pass --vocab_file)")
    data = io_utils.read_bytes(vocab_file)
    if not data:
        raise TokenizerError(f"{vocab_file}: vocabulary file is empty")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise TokenizerError(f"{vocab_file}: not valid UTF-8 (line {line}, byte "
                             f"0x{data[e.start]:02x}); a BERT vocab.txt is UTF-8, one token "
                             f"a line") from None
    from transformers import BertTokenizerFast
    # The tokenizers library opens local files only: a remote vocab is built from its bytes.
    tokenizer = (BertTokenizerFast(vocab_file=vocab_file, do_lower_case=do_lower_case)
                 if io_utils.is_local(vocab_file) else _tokenizer_from_bytes(data, do_lower_case))
    tokenizer.backend_tokenizer.model.max_input_chars_per_word = MAX_INPUT_CHARS_PER_WORD
    return tokenizer


def _tokenizer_from_bytes(data: bytes, do_lower_case: bool):
    """The same fast tokenizer built from vocab.txt's bytes (for remote paths, which the
    tokenizers library cannot open): the vocabulary is read as `load_vocab` reads it."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece
    from transformers import BertTokenizerFast
    vocab = {}  # as transformers' load_vocab: text-mode lines, a repeated token keeps its last index
    for index, token in enumerate(io.StringIO(data.decode("utf-8"), newline=None).readlines()):
        vocab[token.rstrip("\n")] = index
    backend = Tokenizer(WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=do_lower_case)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab.get("[CLS]", 0)), ("[SEP]", vocab.get("[SEP]", 0))])
    backend.decoder = decoders.WordPiece(prefix="##")
    return BertTokenizerFast(tokenizer_object=backend, do_lower_case=do_lower_case)


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
    folder = init_checkpoint if io_utils.isdir(init_checkpoint) else os.path.dirname(init_checkpoint)
    config_path = os.path.join(folder, "tokenizer_config.json")
    if io_utils.isfile(config_path):
        try:
            value = json.loads(io_utils.read_text(config_path)).get("do_lower_case")
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
