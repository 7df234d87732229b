"""The WordPiece tokenizer (on the `tokenizers` library) and its sanity checks."""

import io
import re
from typing import Dict, List, Optional, Sequence, Union

from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

from adapter_bert import io_utils
from adapter_bert.data.features import truncate_seq_pair
from adapter_bert.model.config import BertConfig
from adapter_bert.errors import UserError


# Google's WordpieceTokenizer turns a word longer than this (in characters) into [UNK];
# the `tokenizers` library (and transformers' fast tokenizer) defaults to 100.
MAX_INPUT_CHARS_PER_WORD = 200

# BERT's special tokens, in the order transformers adds them: one the vocabulary lacks
# gets the next free id.
SPECIAL_TOKENS = ("[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]")
# The special tokens fine-tuning uses ([MASK] is for pre-training only).
USED_SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]", "[UNK]")


class TokenizerError(UserError):
    """The vocabulary or casing does not fit the checkpoint."""


TextInput = Union[str, Sequence[str]]


def _token_id(attribute: str) -> property:
    """The id of the special token the tokenizer's `attribute` names."""
    return property(lambda self: self.backend_tokenizer.token_to_id(getattr(self, attribute)))


class WordPieceTokenizer:
    """BERT's WordPiece tokenisation of a `vocab.txt`, with exact character offsets.

    A `tokenizers.Tokenizer` with BERT's normaliser (lower case and accents stripped with
    `do_lower_case`), pre-tokenizer and greedy longest-match word pieces (long words [UNK]);
    special tokens match whole and are never lower-cased. Its output equals transformers'
    `BertTokenizerFast`, whose calling convention it keeps for what this package uses.
    """

    is_fast = True
    unk_token, sep_token, pad_token, cls_token, mask_token = SPECIAL_TOKENS

    def __init__(self, vocab: Dict[str, int], do_lower_case: bool = True):
        """Builds the tokenizer on `vocab` (token -> id, as `read_vocab` returns it)."""
        self.do_lower_case = bool(do_lower_case)
        backend = Tokenizer(WordPiece(vocab, unk_token=self.unk_token,
                                      max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD))
        # strip_accents=None: accents are stripped exactly when the text is lower-cased.
        backend.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None,
            lowercase=self.do_lower_case)
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        backend.add_special_tokens([AddedToken(token, normalized=False, special=True)
                                    for token in SPECIAL_TOKENS])
        backend.post_processor = processors.TemplateProcessing(
            single=f"{self.cls_token}:0 $A:0 {self.sep_token}:0",
            pair=f"{self.cls_token}:0 $A:0 {self.sep_token}:0 $B:1 {self.sep_token}:1",
            special_tokens=[(token, backend.token_to_id(token))
                            for token in (self.cls_token, self.sep_token)])
        backend.decoder = decoders.WordPiece(prefix="##")
        self.backend_tokenizer = backend

    pad_token_id = _token_id("pad_token")
    unk_token_id = _token_id("unk_token")
    cls_token_id = _token_id("cls_token")
    sep_token_id = _token_id("sep_token")
    mask_token_id = _token_id("mask_token")

    def get_vocab(self) -> Dict[str, int]:
        """Token -> id, the special tokens included."""
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def tokenize(self, text: str) -> List[str]:
        """The word pieces of `text`, without [CLS] and [SEP]."""
        return self.backend_tokenizer.encode(text, add_special_tokens=False).tokens

    def convert_tokens_to_ids(self, tokens: Union[str, Sequence[str]]):
        """The id of a token, or the list of ids of a list; an unknown token is [UNK]'s."""
        if isinstance(tokens, str):
            index = self.backend_tokenizer.token_to_id(tokens)
            return self.unk_token_id if index is None else index
        return [self.convert_tokens_to_ids(token) for token in tokens]

    def convert_ids_to_tokens(self, ids: Union[int, Sequence[int]]):
        """The token of an id, or the list of tokens of a list (None for an unknown id)."""
        if isinstance(ids, int):
            return self.backend_tokenizer.id_to_token(ids)
        return [self.backend_tokenizer.id_to_token(int(index)) for index in ids]

    def __call__(self, text: TextInput, text_pair: Optional[TextInput] = None, *,
                 add_special_tokens: bool = True, return_offsets_mapping: bool = False,
                 return_token_type_ids: bool = True, return_attention_mask: bool = True,
                 truncation: bool = False, max_length: Optional[int] = None,
                 verbose: bool = True) -> Dict[str, list]:
        """Encodes a text (or pair) or a list of them in one batch, as `BertTokenizerFast`.

        Returns `input_ids`, `token_type_ids`, `attention_mask` and, with
        `return_offsets_mapping`, `offset_mapping` ((0, 0) for special tokens).
        `truncation=True` cuts to `max_length` as Google's BERT does (a pair loses tokens
        from the end of the longer text, the second on a tie); a second text of no pieces is
        no second segment. Raises ValueError for `truncation` without room for text, or
        texts and pairs of other counts.
        """
        single = isinstance(text, str)
        texts = [text] if single else list(text)
        if text_pair is not None:
            pairs = [text_pair] if single else list(text_pair)
            if len(pairs) != len(texts):
                raise UserError(f"{len(texts)} texts but {len(pairs)} text pairs")
            if truncation:
                return self._truncated(texts, pairs, max_length, add_special_tokens,
                                       return_offsets_mapping, return_token_type_ids,
                                       return_attention_mask, single)
            texts = list(zip(texts, pairs))
        elif truncation:
            return self._truncated(texts, None, max_length, add_special_tokens,
                                   return_offsets_mapping, return_token_type_ids,
                                   return_attention_mask, single)
        # Without offsets, `encode_batch_fast` skips computing them (the same ids).
        encode = self.backend_tokenizer.encode_batch if return_offsets_mapping \
            else self.backend_tokenizer.encode_batch_fast
        encodings = encode(texts, add_special_tokens=add_special_tokens)
        fields = {"input_ids": [e.ids for e in encodings]}
        if return_token_type_ids:
            fields["token_type_ids"] = [e.type_ids for e in encodings]
        if return_attention_mask:
            fields["attention_mask"] = [e.attention_mask for e in encodings]
        if return_offsets_mapping:
            fields["offset_mapping"] = [e.offsets for e in encodings]
        return {k: v[0] for k, v in fields.items()} if single else fields


    def _truncated(self, texts, pairs, max_length, add_special_tokens, offsets, type_ids,
                   attention_mask, single) -> Dict[str, list]:
        """`__call__` with truncation: pieces of each text, cut and laid out as Google's."""
        specials = (3 if pairs is not None else 2) if add_special_tokens else 0
        if max_length is None or max_length < specials + 1:
            raise UserError(f"truncation=True needs max_length, the row length with special "
                            f"tokens, of at least {specials + 1}; got {max_length}")
        encode = self.backend_tokenizer.encode_batch if offsets \
            else self.backend_tokenizer.encode_batch_fast
        first = encode(texts, add_special_tokens=False)
        second = encode(pairs, add_special_tokens=False) if pairs is not None else None
        fields = {name: [] for name, wanted in (("input_ids", True), ("token_type_ids", type_ids),
                                                ("attention_mask", attention_mask),
                                                ("offset_mapping", offsets)) if wanted}
        for i, a in enumerate(first):
            b = second[i] if second is not None and len(second[i].ids) else None
            row = _cut_row(a, b, max_length, add_special_tokens, self.cls_token_id,
                           self.sep_token_id)
            for name in fields:
                fields[name].append(row[name])
        return {k: v[0] for k, v in fields.items()} if single else fields


def _cut_row(a, b, max_length: int, special: bool, cls_id: int, sep_id: int) -> dict:
    """One encoded text (and pair) cut to `max_length` as Google's BERT does; ids, types,
    mask and offsets, special tokens added when `special`."""
    pieces_a = list(zip(a.ids, a.offsets))
    pieces_b = list(zip(b.ids, b.offsets)) if b is not None else None
    if pieces_b is not None:
        truncate_seq_pair(pieces_a, pieces_b, max_length - (3 if special else 0))
    else:
        del pieces_a[max_length - (2 if special else 0):]
    edge = [(cls_id, (0, 0))] if special else []
    end = [(sep_id, (0, 0))] if special else []
    segment_a = edge + pieces_a + end
    segment_b = (pieces_b + end) if pieces_b is not None else []
    rows = segment_a + segment_b
    return {"input_ids": [i for i, _ in rows], "offset_mapping": [o for _, o in rows],
            "token_type_ids": [0] * len(segment_a) + [1] * len(segment_b),
            "attention_mask": [1] * len(rows)}


def vocab_lines(data: bytes) -> List[str]:
    """vocab.txt's bytes -> its tokens by line, as transformers' `load_vocab` splits the
    file: text-mode lines (any line ending)."""
    return [line.rstrip("\n") for line in
            io.StringIO(data.decode("utf-8"), newline=None).readlines()]


def read_vocab(data) -> Dict[str, int]:
    """vocab.txt's bytes (or its `vocab_lines`) -> token -> id: the line number, a
    repeated token keeping its last."""
    lines = vocab_lines(data) if isinstance(data, bytes) else data
    return {token: index for index, token in enumerate(lines)}


def load_tokenizer(vocab_file: str, do_lower_case: bool = True) -> WordPieceTokenizer:
    """Builds the WordPiece tokenizer of a `vocab.txt`, local or remote (`gs://`...).

    Words of up to `MAX_INPUT_CHARS_PER_WORD` (200) characters are split into
    word pieces, as by Google's tokenizer; longer ones become [UNK].

    Raises:
        TokenizerError: the file is missing, empty or not UTF-8 (naming the line), or
            has no [UNK] (the line names every special token the runners use that it lacks).
    """
    if not vocab_file or not io_utils.isfile(vocab_file):
        raise TokenizerError(f"{vocab_file}: vocabulary file not found (pass --vocab_file)")
    data = io_utils.read_bytes(vocab_file)
    if not data:
        raise TokenizerError(f"{vocab_file}: vocabulary file is empty")
    io_utils.decode_utf8(data, vocab_file, TokenizerError)
    vocab = read_vocab(data)
    if WordPieceTokenizer.unk_token not in vocab:  # WordPiece cannot tokenise without it
        check_special_tokens(vocab, vocab_file)
    return WordPieceTokenizer(vocab, do_lower_case)


def check_special_tokens(in_file, vocab_file: str, error=None) -> None:
    """The one check of a vocabulary's special tokens: a BERT vocabulary holds those the
    runners and exports use (`USED_SPECIAL_TOKENS`); without them the tokenizer would add
    them past the embedding table (or, for [UNK], fail on the first unknown word). Raises
    `error` (default TokenizerError) naming the file and the missing tokens."""
    missing = [token for token in USED_SPECIAL_TOKENS if token not in in_file]
    if missing:
        raise (error or TokenizerError)(
            f"{vocab_file} has no {', '.join(missing)} token: not the WordPiece vocabulary of "
            f"a BERT checkpoint (a vocab.txt of another kind of model?); pass the vocab.txt "
            f"of --init_checkpoint")


def check_vocab_matches_config(tokenizer, config: BertConfig, vocab_file: str) -> None:
    """Raises TokenizerError if the vocabulary is not one the checkpoint can have been
    trained with: a BERT special token the runners use is missing from it (the tokenizer
    would add it past the embedding table), or its size is not the config's vocab_size."""
    check_special_tokens(tokenizer.backend_tokenizer.get_vocab(with_added_tokens=False),
                          vocab_file)
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
    folder = init_checkpoint if io_utils.isdir(init_checkpoint) else io_utils.dirname(init_checkpoint)
    config_path = io_utils.join(folder, "tokenizer_config.json")
    if io_utils.isfile(config_path):
        try:
            value = io_utils.read_json_object(config_path).get("do_lower_case")
            if isinstance(value, bool):
                return value
        except UserError:  # a tokenizer file we cannot read says nothing about casing
            pass
    match = _CASE_HINT.search(io_utils.basename(folder))
    if match:
        return match.group(1).lower() == "uncased"
    return None


def validate_case_matches_checkpoint(do_lower_case: bool, init_checkpoint: Optional[str]) -> None:
    """Fails early when --do_lower_case contradicts the checkpoint (a silent accuracy
    killer).

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
