"""`InputExample`s -> fixed-length BERT features (numpy arrays).

`[CLS] a [SEP]` (segment 0), `b [SEP]` (segment 1), zero padding to `max_seq_length`.
Word pieces come in batches from `tokenization.WordPieceTokenizer`; truncation is Google's
`_truncate_seq_pair` here, because `tokenizers`' "longest_first" gives an odd budget's
extra token to the longer side (BERT gives it to `a`).
"""

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from absl import logging
from adapter_bert.model.inputs import FEATURE_NAMES
from adapter_bert.errors import UserError
from adapter_bert.progress import Progress

# Examples are tokenised this many at a time, to bound memory on MNLI/QQP.
_TOKENIZE_CHUNK = 8192


def truncate_seq_pair(tokens_a: List, tokens_b: List, max_length: int) -> None:
    """Truncates a pair of token lists in place to at most `max_length` in total, as
    Google's code: drop the last token of the longer list (of `tokens_b` on a tie).
    """
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def _tokenize_ids(tokenizer, texts: Sequence[str]) -> List[List[int]]:
    if not texts:
        return []
    encoded = tokenizer(list(texts), add_special_tokens=False,
                        truncation=False, return_attention_mask=False,
                        return_token_type_ids=False, verbose=False)
    return encoded["input_ids"]


def _chunk_ids(tokenizer, chunk: Sequence) -> Tuple[List[List[int]], List[Optional[List[int]]]]:
    """Word-piece ids of `text_a` and `text_b` of a chunk of examples (None: no `text_b`)."""
    ids_a = _tokenize_ids(tokenizer, [e.text_a for e in chunk])
    # As Google (`if example.text_b:`), an empty text_b is no second segment.
    pair_positions = [j for j, e in enumerate(chunk) if e.text_b]
    ids_b: List[Optional[List[int]]] = [None] * len(chunk)
    for j, ids in zip(pair_positions, _tokenize_ids(tokenizer, [chunk[j].text_b for j in pair_positions])):
        ids_b[j] = ids
    return ids_a, ids_b


def bert_layout(tokens_a: List[int], tokens_b: Optional[List[int]], max_seq_length: int,
                cls_id: int, sep_id: int) -> Tuple[List[int], int]:
    """BERT's `[CLS] a [SEP] (b [SEP])`, truncated as Google does; returns the ids and the
    length of the segment-0 part."""
    tokens_a = list(tokens_a)
    if tokens_b:  # Google: a text_b of no word pieces is no second segment either
        tokens_b = list(tokens_b)
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
        return [cls_id] + tokens_a + [sep_id] + tokens_b + [sep_id], len(tokens_a) + 2
    del tokens_a[max_seq_length - 2:]
    ids = [cls_id] + tokens_a + [sep_id]
    return ids, len(ids)


def _log_example(tokenizer, example, ids, features: Dict[str, np.ndarray], row: int) -> None:
    # Google's script logs these at INFO; here they are debugging output (--verbosity=1),
    # which keeps a first run's console short.
    logging.debug("*** Example ***")
    logging.debug("guid: %s", example.guid)
    logging.debug("tokens: %s", " ".join(tokenizer.convert_ids_to_tokens(ids)))
    for key in FEATURE_NAMES:
        logging.debug("%s: %s", key, " ".join(map(str, features[key][row])))
    logging.debug("label: %s (id = %s)", example.label, features["label_ids"][row])


def check_room_for_text(max_seq_length: int, pair: bool, error=UserError,
                        task: str = "") -> None:
    """The one length check: `[CLS] a [SEP]` needs 2 tokens beside the text, a pair's
    `[CLS] a [SEP] b [SEP]` 3; raises `error` naming --max_seq_length (and `task`)."""
    least = 3 if pair else 2
    if max_seq_length < least:
        what = "sentence pairs need [CLS] and two [SEP]" if pair \
            else "sentences need [CLS] and [SEP]"
        raise error(f"--max_seq_length={max_seq_length} leaves no room for text: "
                    f"{task + chr(39) + 's ' if task else ''}{what}, so at least {least}")


def convert_examples_to_features(examples: Sequence, label_list: Sequence[str],
                                 max_seq_length: int, tokenizer,
                                 is_regression: bool = False,
                                 log_examples: int = 5,
                                 label: str = "tokenise") -> Dict[str, np.ndarray]:
    """Tokenises examples into fixed-length BERT inputs.

    As in Google's code, an empty or missing `text_b` gives a single sentence, and
    `label=None` (test) gives label id 0. Label ids are positions in `label_list` (unused
    for regression, whose `label_ids` are float32). `tokenizer`:
    `tokenization.load_tokenizer`'s (or a transformers `BertTokenizerFast`); the first
    `log_examples` are logged at DEBUG. More examples than one chunk of `_TOKENIZE_CHUNK`
    show a progress line under `label` (a large file takes a while).

    Returns int32 arrays `[N, max_seq_length]` `input_ids`, `input_mask`, `segment_ids`,
    plus `label_ids` and `is_real_example` (all ones). Raises ValueError for a
    `max_seq_length` too small or a label not in `label_list` (naming the guid).
    """
    check_room_for_text(max_seq_length, pair=any(e.text_b for e in examples))
    label_map = {label: i for i, label in enumerate(label_list)}
    cls_id = tokenizer.convert_tokens_to_ids(tokenizer.cls_token)
    sep_id = tokenizer.convert_tokens_to_ids(tokenizer.sep_token)

    n = len(examples)
    features = {key: np.zeros((n, max_seq_length), dtype=np.int32)
                for key in FEATURE_NAMES}
    features["label_ids"] = np.zeros((n,), dtype=np.float32 if is_regression else np.int32)
    progress = Progress(label, n, unit="rows") if n > _TOKENIZE_CHUNK else None
    for start in range(0, n, _TOKENIZE_CHUNK):
        chunk = examples[start:start + _TOKENIZE_CHUNK]
        ids_a, ids_b = _chunk_ids(tokenizer, chunk)
        for j, example in enumerate(chunk):
            row = start + j
            ids, num_a = bert_layout(ids_a[j], ids_b[j], max_seq_length, cls_id, sep_id)
            features["input_ids"][row, :len(ids)] = ids
            features["input_mask"][row, :len(ids)] = 1
            features["segment_ids"][row, num_a:len(ids)] = 1
            features["label_ids"][row] = _label_id(example, label_map, is_regression)
            if row < log_examples:
                _log_example(tokenizer, example, ids, features, row)
        if progress:
            progress.update(start + len(chunk))
    if progress:
        progress.finish()
    features["is_real_example"] = np.ones((n,), dtype=np.int32)
    return features


def _label_id(example, label_map, is_regression):
    if example.label is None:
        return 0
    if is_regression:
        return float(example.label)
    if example.label not in label_map:
        raise UserError(
            f"example {example.guid}: label {example.label!r} is not in the "
            f"label list {list(label_map)}")
    return label_map[example.label]


def pad_to_multiple_of_batch(features: Dict[str, np.ndarray],
                             batch_size: int) -> Dict[str, np.ndarray]:
    """Appends fake examples (zeros, `is_real_example=0`, which metrics ignore) so the
    example count divides `batch_size`: TPUs need fixed batch shapes, as Google's
    `PaddingInputExample`. Raises ValueError for `batch_size < 1`, no `is_real_example` or
    arrays of different lengths.
    """
    if batch_size < 1:
        raise UserError(f"batch_size must be >= 1, got {batch_size}")
    if "is_real_example" not in features:
        raise UserError("features must contain 'is_real_example'")
    lengths = {key: len(value) for key, value in features.items()}
    if len(set(lengths.values())) != 1:
        raise UserError(f"feature arrays have different lengths: {lengths}")
    n = next(iter(lengths.values()))
    num_pad = -n % batch_size
    padded = {}
    for key, value in features.items():
        value = np.asarray(value)
        pad = np.zeros((num_pad,) + value.shape[1:], dtype=value.dtype)
        padded[key] = np.concatenate([value, pad], axis=0)
    return padded
