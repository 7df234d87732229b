"""Google BERT's tokenisation and input layout as TensorFlow ops, for SavedModels.

`BertInputEncoder` turns UTF-8 strings into the `input_ids`, `input_mask` and
`segment_ids` Google's `FullTokenizer` and `convert_single_example` make, in the graph:
invalid UTF-8 dropped; the basic tokenizer from `unicode_tables` (lower-casing, NFD and
accent stripping for uncased models); tensorflow-text's `FastWordpieceTokenizer` (words
over 200 characters are `[UNK]`); `[CLS] a [SEP] b [SEP]` with Google's pair truncation.
One difference: NFD's reordering of several combining marks is not done, which changes
no natural text.
"""

from typing import Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from adapter_bert.serving import unicode_tables as tables
from adapter_bert import io_utils
from adapter_bert.data.features import check_room_for_text
from adapter_bert.data.tokenization import check_special_tokens, read_vocab
from adapter_bert.errors import UserError

# google-research/bert's WordpieceTokenizer.max_input_chars_per_word.
MAX_CHARS_PER_WORD = 200
# The special tokens whose ids the encoder packs and falls back to.
_SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[UNK]")


class VocabularyError(UserError):
    """The vocabulary file cannot serve as a WordPiece vocabulary."""


def vocabulary_of(vocab_file: str) -> Dict[str, int]:
    """A BERT `vocab.txt` as the runners' tokenizer reads it (`tokenization.read_vocab`:
    one token a line, id = line number from 0, the last id of a repeated token), so that
    an export numbers tokens as training did. VocabularyError for a missing or non-UTF-8
    file (naming the line) or one without the special tokens the runners use
    (`tokenization.check_special_tokens`).
    """
    try:
        data = io_utils.read_bytes(vocab_file)
    except OSError as e:
        raise VocabularyError(f"{vocab_file}: cannot read the vocabulary ({e.strerror})") from None
    io_utils.decode_utf8(data, vocab_file, VocabularyError)
    vocab = read_vocab(data)
    check_special_tokens(vocab, vocab_file, VocabularyError)
    return vocab


def _variable(values, dtype=tf.int32) -> tf.Variable:
    """A constant table held in a (non-trainable) variable."""
    return tf.Variable(tf.cast(values, dtype), trainable=False)


class BertInputEncoder(tf.Module):
    """Raw strings -> BERT features, exactly as Google's Python pipeline, for the run's
    vocabulary (a `vocab_file` path, or its {token: id} as `vocabulary_of` reads it),
    casing and `max_seq_length` (>= 3). `in_variables`: the tables live in variables, so a
    SavedModel stores them once for all its signatures; False keeps them as constants,
    which a `tf.data` map can capture under any distribution strategy. Raises
    VocabularyError or ValueError.
    """

    def __init__(self, vocab_file, do_lower_case: bool, max_seq_length: int,
                 name: str = "bert_input_encoder", in_variables: bool = True):
        super().__init__(name=name)
        import tensorflow_text as text  # the optional [serving] extra
        check_room_for_text(max_seq_length, pair=True)
        vocab = vocabulary_of(vocab_file) if isinstance(vocab_file, str) else vocab_file
        _table = _variable if in_variables else tf.constant
        self.do_lower_case = bool(do_lower_case)
        self.max_seq_length = int(max_seq_length)
        self.cls_id, self.sep_id, self.unk_id = (vocab[t] for t in _SPECIAL_TOKENS)
        # FastWordpiece numbers tokens by their position in the list it gets: give it each
        # non-empty token once and map its ids back to the file's (last-wins) ids.
        tokens = [t for t in dict.fromkeys(vocab) if t]
        # Byte limit high enough for any word of MAX_CHARS_PER_WORD characters; the
        # character limit itself is applied in `_wordpiece`.
        model = text.FastWordpieceTokenizer(
            tokens, suffix_indicator="##", max_bytes_per_word=4 * MAX_CHARS_PER_WORD + 4,
            unknown_token="[UNK]", no_pretokenization=True)
        # The tables are variables rather than constants: a SavedModel then stores them
        # once, not once per signature that tokenises.
        self._wordpiece_model = _table(model._model, tf.uint8)  # noqa: SLF001 - its buffer
        self._file_ids = _table([vocab[t] for t in tokens])
        starts, bits = tables.code_point_classes()
        self._class_starts, self._class_bits = _table(starts), _table(bits)
        if self.do_lower_case:
            mapping = tables.lower_case_mapping()
            keys = sorted(mapping)
            self._map_keys = _table(keys)
            self._map_values = _table([v for k in keys for v in mapping[k]])
            self._map_splits = _table(np.cumsum([0] + [len(mapping[k]) for k in keys]),
                                      tf.int64)

    # --------------------------------------------------------------- steps
    def _classes(self, code_points: tf.Tensor) -> tf.Tensor:
        run = tf.searchsorted(self._class_starts, code_points, side="right") - 1
        return tf.gather(self._class_bits, run)

    @staticmethod
    def _has(bits: tf.Tensor, flag: int) -> tf.Tensor:
        return tf.not_equal(tf.bitwise.bitwise_and(bits, flag), 0)

    def _final_sigmas(self, chars: tf.RaggedTensor, bits: tf.RaggedTensor) -> tf.RaggedTensor:
        """Capital sigmas that end a word become 'ς', as `str.lower()` does.

        A sigma is final when the nearest character before it that is not
        case-ignorable is cased and the nearest one after it is not (or there is none).
        """
        flat, flat_bits = chars.flat_values, bits.flat_values
        positions = tf.range(tf.size(flat, out_type=tf.int64))
        row_starts = tf.gather(chars.row_starts(), chars.value_rowids())
        row_limits = tf.gather(chars.row_limits(), chars.value_rowids())
        relevant = tf.logical_not(self._has(flat_bits, tables.CASE_IGNORABLE))
        anchors = tf.boolean_mask(positions, relevant)   # positions of relevant characters
        count_upto = tf.cumsum(tf.cast(relevant, tf.int64))          # inclusive
        count_before = count_upto - tf.cast(relevant, tf.int64)
        anchors_padded = tf.concat([[-1], anchors, [-1]], 0)
        previous = tf.gather(anchors_padded, count_before)            # -1: none
        following = tf.gather(anchors_padded, count_upto + 1)         # -1: none
        cased = self._has(flat_bits, tables.CASED)
        cased_padded = tf.concat([[False], cased, [False]], 0)

        def cased_at(index, inside):
            return tf.logical_and(inside, tf.gather(cased_padded, index + 1))

        before = cased_at(previous, previous >= row_starts)
        after = cased_at(following, tf.logical_and(following >= 0, following < row_limits))
        final = tf.logical_and(tf.equal(flat, tables.CAPITAL_SIGMA),
                               tf.logical_and(before, tf.logical_not(after)))
        return chars.with_flat_values(tf.where(final, tables.FINAL_SIGMA, flat))

    def _lower_case(self, flat: tf.Tensor) -> tf.RaggedTensor:
        """[N] code points -> [N, (k)] code points of strip_accents(lower(c))."""
        index = tf.searchsorted(self._map_keys, flat, side="left")
        index = tf.minimum(index, tf.size(self._map_keys) - 1)
        mapped = tf.equal(tf.gather(self._map_keys, index), flat)
        table_rows = tf.cast(tf.shape(self._map_keys)[0], tf.int32)
        own = tf.RaggedTensor.from_tensor(flat[:, tf.newaxis])
        rows = tf.where(mapped, index, table_rows + tf.range(tf.size(flat)))
        table = tf.RaggedTensor.from_row_splits(tf.convert_to_tensor(self._map_values),
                                                tf.convert_to_tensor(self._map_splits))
        return tf.gather(tf.concat([table, own], 0), rows)

    def words(self, texts: tf.Tensor) -> Tuple[tf.RaggedTensor, tf.Tensor]:
        """The basic tokenizer on [B] strings.

        Returns:
            (the code points of every word of every text, in order, [W, (chars)];
            int64 [B] number of words of each text).
        """
        chars = tf.strings.unicode_decode(texts, "UTF-8", errors="replace",
                                          replacement_char=0xFFFD)
        bits = tf.ragged.map_flat_values(self._classes, chars)
        # The dropped characters go by a mask on the flat values (a ragged boolean mask
        # traces hundreds of ops).
        keep = tf.logical_not(self._has(bits.flat_values, tables.DROP))
        chars = tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(chars.flat_values, keep),
            tf.boolean_mask(chars.value_rowids(), keep), nrows=chars.nrows())
        bits = chars.with_flat_values(tf.boolean_mask(bits.flat_values, keep))
        if self.do_lower_case:
            chars = self._final_sigmas(chars, bits)
        space = self._has(bits.flat_values, tables.SPACE)
        cjk = self._has(bits.flat_values, tables.CJK)
        flat = chars.flat_values
        row_of = chars.value_rowids()
        if self.do_lower_case:
            pieces = self._lower_case(flat)             # [N, (k)]
            counts = pieces.row_lengths()
            flat = pieces.flat_values
            space, cjk = (tf.repeat(x, counts) for x in (space, cjk))
            row_of = tf.repeat(row_of, counts)
        alone = tf.logical_or(cjk, self._has(self._classes(flat), tables.PUNCT))
        # A word starts at a non-space character that begins its text, follows a space,
        # stands alone, or follows one that stands alone.
        previous_row = _shifted(row_of, -1)
        previous_space = _shifted(space, True)
        previous_alone = _shifted(alone, True)
        starts = tf.reduce_any(tf.stack([tf.not_equal(previous_row, row_of), previous_space,
                                         alone, previous_alone]), 0)
        starts = tf.logical_and(starts, tf.logical_not(space))
        letters = tf.logical_not(space)
        word_of = tf.cumsum(tf.cast(tf.boolean_mask(starts, letters), tf.int64)) - 1
        words = tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(flat, letters), word_of,
            nrows=tf.reduce_sum(tf.cast(starts, tf.int64)))
        words_per_text = tf.math.unsorted_segment_sum(tf.cast(starts, tf.int64), row_of,
                                                      tf.size(texts, out_type=tf.int64))
        return words, words_per_text

    def _wordpiece(self, words: tf.RaggedTensor) -> tf.RaggedTensor:
        """Word code points [W, (chars)] -> WordPiece ids [W, (pieces)] in the file's ids."""
        strings = tf.strings.unicode_encode(words, "UTF-8")
        import tensorflow_text as text
        tokenizer = text.FastWordpieceTokenizer(
            model_buffer=tf.convert_to_tensor(self._wordpiece_model), token_out_type=tf.int32)
        pieces = tokenizer.tokenize(strings)
        pieces = pieces.with_flat_values(tf.gather(self._file_ids, pieces.flat_values))
        too_long = words.row_lengths() > MAX_CHARS_PER_WORD
        count = tf.cast(tf.size(too_long), tf.int32)
        unknown = tf.RaggedTensor.from_tensor(tf.fill([count, 1], tf.constant(self.unk_id,
                                                                              tf.int32)))
        rows = tf.where(too_long, count + tf.range(count), tf.range(count))
        return tf.gather(tf.concat([pieces, unknown], 0), rows)

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """[B] UTF-8 strings -> WordPiece ids [B, (tokens)], as Google's FullTokenizer."""
        texts = tf.reshape(tf.convert_to_tensor(texts, tf.string), [-1])
        words, words_per_text = self.words(texts)
        pieces = self._wordpiece(words)
        return tf.RaggedTensor.from_row_lengths(pieces, words_per_text).merge_dims(1, 2)

    # -------------------------------------------------------------- layout
    def encode(self, text_a: tf.Tensor, text_b: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
        """[B] strings (and [B] second strings) -> int32 [B, max_seq_length] features.

        Rows whose `text_b` is empty are single sentences: `[CLS] a [SEP]`.
        """
        tokens_a = self.tokenize(text_a)
        batch = tokens_a.nrows(out_type=tf.int64)
        if text_b is None:
            has_b = tf.zeros([batch], tf.bool)
            tokens_b = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int32),
                                                        tf.zeros([batch], tf.int64))
        else:
            text_b = tf.reshape(tf.convert_to_tensor(text_b, tf.string), [-1])
            check = tf.debugging.assert_equal(tf.size(text_b, out_type=tf.int64), batch, message=(
                "text_a and text_b must have the same number of rows"))
            # Everything that pairs rows of a and b waits for the check.
            with tf.control_dependencies([check] if check is not None else []):
                text_b = tf.identity(text_b)
            has_b = tf.strings.length(text_b) > 0
            tokens_b = self.tokenize(text_b)
        len_a, len_b = self._truncated_lengths(tokens_a.row_lengths(),
                                               tf.where(has_b, tokens_b.row_lengths(), 0), has_b)
        tokens_a = _first(tokens_a, len_a)
        tokens_b = _first(tokens_b, len_b)
        cls = tf.RaggedTensor.from_tensor(tf.fill([batch, 1], self.cls_id))
        sep = tf.RaggedTensor.from_tensor(tf.fill([batch, 1], self.sep_id))
        second_sep = tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(
            tf.cast(has_b, tf.int64))], self.sep_id), tf.cast(has_b, tf.int64))
        ids = tf.concat([cls, tokens_a, sep, tokens_b, second_sep], 1)
        # Segment 1 from the first token after `[CLS] a [SEP]`, by position in the row.
        rows = ids.value_rowids()
        position = tf.range(tf.size(ids.flat_values, out_type=tf.int64)) - tf.gather(
            ids.row_starts(), rows)
        segments = ids.with_flat_values(tf.cast(position >= tf.gather(len_a + 2, rows), tf.int32))
        shape = [None, self.max_seq_length]
        return {"input_ids": ids.to_tensor(0, shape=shape),
                "input_mask": tf.ones_like(ids).to_tensor(0, shape=shape),
                "segment_ids": segments.to_tensor(0, shape=shape)}

    def _truncated_lengths(self, len_a, len_b, has_b):
        """Google's `_truncate_seq_pair` in closed form.

        Google drops the last token of the longer side (of b on a tie) until the pair
        fits: the longer side alone is cut when the length difference covers the
        excess; otherwise both end at half the budget, a keeping the odd token.
        """
        budget = tf.where(has_b, self.max_seq_length - 3, self.max_seq_length - 2)
        budget = tf.cast(budget, tf.int64)
        excess = len_a + len_b - budget
        half_b = budget // 2
        half_a = budget - half_b
        a = tf.where(excess <= 0, len_a,
                     tf.where(len_a - len_b >= excess, len_a - excess,
                              tf.where(len_b - len_a >= excess, len_a, half_a)))
        b = tf.where(excess <= 0, len_b,
                     tf.where(len_a - len_b >= excess, len_b,
                              tf.where(len_b - len_a >= excess, len_b - excess, half_b)))
        return a, b


def _shifted(values: tf.Tensor, fill) -> tf.Tensor:
    """`values` moved one place right, `fill` first (same length, also when empty)."""
    return tf.concat([tf.fill([1], tf.cast(fill, values.dtype)), values], 0)[:-1]


def _first(tokens: tf.RaggedTensor, lengths: tf.Tensor) -> tf.RaggedTensor:
    """The first `lengths[i]` tokens of every row (`lengths[i]` at most the row's length).

    Gathered by position: a few ops, where a ragged boolean mask traces hundreds."""
    starts = tokens.row_starts()
    kept = tf.ragged.range(starts, starts + tf.cast(lengths, starts.dtype))
    return tf.RaggedTensor.from_row_lengths(tf.gather(tokens.values, kept.flat_values),
                                            kept.row_lengths())
