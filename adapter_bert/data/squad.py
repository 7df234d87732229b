"""SQuAD v1.1 / v2.0 reading and windowed feature conversion for BERT.

`read_squad_examples` validates the JSON (`SquadDataError` names file, JSON path and
question id); an `answer_start` that misses its text is counted, logged and skipped in
training. `convert_examples_to_features` tokenises each context once with a fast
tokenizer, keeping character offsets (answers aligned by position), and windows it as
Google's `run_squad.py`: `max_seq_length - len(query) - 3` tokens advancing by
`doc_stride`, "max context" where `min(left, right) + 0.01 * length` is largest.
"""

import dataclasses
import json
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from adapter_bert import io_utils
from adapter_bert.errors import UserError

__all__ = [
    "SquadDataError",
    "SquadExample",
    "SquadExampleList",
    "SquadFeature",
    "SquadFeatureList",
    "read_squad_examples",
    "convert_examples_to_features",
    "FIRST_UNIQUE_ID",
]

FIRST_UNIQUE_ID = 1000000000


class SquadDataError(UserError):
    """A SQuAD file is missing, unreadable or not shaped like SQuAD JSON."""


@dataclasses.dataclass
class SquadExample:
    """One question about one context.

    Attributes:
      qas_id: the question id.
      question_text: the question.
      context_text: the paragraph, unchanged.
      answer_text: the (first) gold answer text, "" if none/impossible.
      start_char: character offset of ``answer_text`` in ``context_text``,
        -1 if none/impossible.
      is_impossible: v2.0 unanswerable question.
      all_answers: every gold answer text (for evaluation).
    """

    qas_id: str
    question_text: str
    context_text: str
    answer_text: str = ""
    start_char: int = -1
    is_impossible: bool = False
    all_answers: List[str] = dataclasses.field(default_factory=list)


class SquadExampleList(list):
    """A list of :class:`SquadExample` that also records reading problems.

    Attributes:
      path: the file read.
      dataset: its parsed JSON, which the official scoring reads.
      num_answer_mismatches: questions whose ``answer_start`` does not point
        at the answer text (skipped when reading for training).
      mismatched_ids: their question ids.
    """

    def __init__(self, items=(), path: str = "", dataset: Optional[dict] = None):
        super().__init__(items)
        self.path = path
        self.dataset = dataset
        self.num_answer_mismatches = 0
        self.mismatched_ids: List[str] = []


@dataclasses.dataclass
class SquadFeature:
    """One window of one example, ready for the model.

    `input_ids`, `input_mask`, `segment_ids` hold `[CLS] query [SEP] window [SEP]` plus
    padding; `token_to_orig` `[max_seq_length, 2]` the character span of each context word
    piece in the original context (-1 elsewhere); `token_is_max_context` marks the context
    tokens whose best window this is; `start_position`/`end_position` the gold tokens (0,
    [CLS], when the answer is outside the window or the question impossible).
    """

    unique_id: int
    example_index: int
    doc_span_index: int
    input_ids: np.ndarray
    input_mask: np.ndarray
    segment_ids: np.ndarray
    token_to_orig: np.ndarray
    token_is_max_context: np.ndarray
    start_position: int = 0
    end_position: int = 0
    is_impossible: bool = False


class SquadFeatureList(list):
    """A list of `SquadFeature` that also records alignment problems: training answers that
    overlap no token (`num_unalignable`, skipped) and those whose token span is not exactly
    the answer text (`num_inexact`, kept with the covering span, as BERT does), with their
    ids.
    """

    def __init__(self, items=()):
        super().__init__(items)
        self.num_unalignable = 0
        self.unalignable_ids: List[str] = []
        self.num_inexact = 0
        self.inexact_ids: List[str] = []


# --------------------------------------------------------------------------- reading


def load_squad_json(path: str) -> Any:
    """The parsed JSON of a SQuAD file (a UTF-8 byte-order mark allowed): the one reading
    of it, for the examples and the official scoring. SquadDataError naming the file, and
    line and column for malformed JSON."""
    if not io_utils.isfile(path):
        raise SquadDataError(f"{path}: SQuAD file not found")
    text = io_utils.decode_utf8(io_utils.read_bytes(path), path, SquadDataError)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SquadDataError(f"{path}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise SquadDataError(f"{path}: JSON nested too deeply to be a SQuAD file") from None


def _get(obj: Any, key: str, kind, path: str, where: str, qid: Optional[str] = None):
    """``obj[key]`` checked to be of type ``kind``, else a SquadDataError."""
    qpart = f" (question id {qid!r})" if qid is not None else ""
    if not isinstance(obj, dict):
        raise SquadDataError(f"{path}: {where}{qpart}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise SquadDataError(f"{path}: {where}{qpart}: missing key {key!r}")
    value = obj[key]
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        raise SquadDataError(f"{path}: {where}.{key}{qpart}: expected {kind.__name__}, "
                             f"got {type(value).__name__}")
    return value


def read_squad_examples(path: str, is_training: bool, version_2_with_negative: bool = False) -> SquadExampleList:
    """Reads a SQuAD JSON file (v1.1 or v2.0 layout) into a `SquadExampleList`.

    In training every answerable question needs an answer (the first is used) and those
    whose `answer_start` misses the text are skipped and counted (`num_answer_mismatches`);
    in evaluation "answers" may be absent. `version_2_with_negative` requires
    `is_impossible`. Raises SquadDataError naming the file and, for JSON problems, line and
    column or the JSON path and question id (a duplicate id too).
    """
    dataset = load_squad_json(path)
    data = _get(dataset, "data", list, path, "top level")
    examples = SquadExampleList(path=path, dataset=dataset)
    seen = {}  # question id -> where it was first met
    for a_i, article in enumerate(data):
        for p_i, paragraph in enumerate(_get(article, "paragraphs", list, path, f"data[{a_i}]")):
            where_p = f"data[{a_i}].paragraphs[{p_i}]"
            context = _get(paragraph, "context", str, path, where_p)
            for q_i, qa in enumerate(_get(paragraph, "qas", list, path, where_p)):
                where = f"{where_p}.qas[{q_i}]"
                qid = _get(qa, "id", str, path, where)
                if qid in seen:
                    # Predictions are keyed by id: a second question would overwrite the
                    # first's answer and both would be graded against one.
                    raise SquadDataError(f"{path}: {where}: question id {qid!r} is used "
                                         f"again (first at {seen[qid]}); ids must be unique")
                seen[qid] = where
                example, mismatched = _question(qa, context, path, where, qid, is_training,
                                                version_2_with_negative)
                if mismatched:
                    examples.num_answer_mismatches += 1
                    examples.mismatched_ids.append(qid)
                    if is_training:
                        continue
                examples.append(example)
    if examples.num_answer_mismatches:
        logging.warning("%s: %d answers whose answer_start does not match the text%s", path,
                        examples.num_answer_mismatches, " (skipped)" if is_training else "")
    logging.info("%s: read %d examples", path, len(examples))
    return examples


def _question(qa: dict, context: str, path: str, where: str, qid: str, is_training: bool,
              version_2_with_negative: bool) -> Tuple[SquadExample, bool]:
    """The `SquadExample` of question `qa`, and whether its first answer's `answer_start`
    misses the text (warned). SquadDataError for a malformed question."""
    question = _get(qa, "question", str, path, where, qid)
    impossible = False
    if version_2_with_negative:
        impossible = _get(qa, "is_impossible", bool, path, where, qid)
    answers = _get(qa, "answers", list, path, where, qid) \
        if is_training or "answers" in qa else []
    texts, starts = [], []
    for n_i, ans in enumerate(answers):
        texts.append(_get(ans, "text", str, path, f"{where}.answers[{n_i}]", qid))
        starts.append(_get(ans, "answer_start", int, path, f"{where}.answers[{n_i}]", qid))
    example = SquadExample(qid, question, context, is_impossible=impossible, all_answers=texts)
    if not impossible and texts:
        example.answer_text, example.start_char = texts[0], starts[0]
        if context[starts[0]:starts[0] + len(texts[0])] != texts[0] or starts[0] < 0:
            logging.warning("%s: %s (question id %r): answer_start %d does not point at %r",
                            path, where, qid, starts[0], texts[0])
            return example, True
    elif is_training and not impossible:
        if not version_2_with_negative and qa.get("is_impossible") is True:
            raise SquadDataError(
                f"{path}: {where} (question id {qid!r}) is a SQuAD 2.0 "
                "unanswerable question (is_impossible: true): pass "
                "--version_2_with_negative to train on SQuAD 2.0")
        raise SquadDataError(f"{path}: {where}.answers (question id {qid!r}): "
                             "an answerable training question needs at least one answer")
    return example, False


# --------------------------------------------------------------------------- features


def _doc_spans(num_tokens: int, max_tokens: int, doc_stride: int):
    """BERT's sliding windows: ``[(start, length), ...]`` covering ``num_tokens``.

    Google's loop: each window holds up to ``max_tokens`` tokens and the next
    one starts ``min(length, doc_stride)`` later, so a stride longer than the
    window gives back-to-back windows rather than skipped tokens. One
    difference: an empty context still gets one (empty) window here, so its
    question is predicted (as "no answer") instead of vanishing.
    """
    spans, start = [], 0
    while True:
        length = min(num_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length >= num_tokens:
            return spans
        start += min(length, doc_stride)


def _best_windows(num_tokens: int, spans) -> np.ndarray:
    """For each context token, the index of the window where it has most context."""
    best = np.full(num_tokens, -1, dtype=np.int64)
    best_score = np.full(num_tokens, -np.inf)
    for s_i, (start, length) in enumerate(spans):
        idx = np.arange(start, start + length)
        score = np.minimum(idx - start, start + length - 1 - idx) + 0.01 * length
        better = score > best_score[idx]
        best[idx[better]] = s_i
        best_score[idx[better]] = score[better]
    return best


def _align_answer(offsets: np.ndarray, start_char: int, end_char: int):
    """Token span ``(first, last)`` overlapping ``[start_char, end_char)``, or None."""
    if len(offsets) == 0 or end_char <= start_char:
        return None
    overlap = (offsets[:, 1] > start_char) & (offsets[:, 0] < end_char) & (offsets[:, 1] > offsets[:, 0])
    hits = np.flatnonzero(overlap)
    if hits.size == 0:
        return None
    return int(hits[0]), int(hits[-1])


def _check_sizes(tokenizer: Any, max_seq_length: int, doc_stride: int, max_query_length: int) -> None:
    """Raises ValueError on sizes (or a tokenizer) the conversion cannot work with."""
    if max_seq_length <= 0 or doc_stride <= 0 or max_query_length <= 0:
        raise UserError("max_seq_length, doc_stride and max_query_length must be positive")
    if max_seq_length <= max_query_length + 3:
        raise UserError(f"max_seq_length ({max_seq_length}) must be greater than max_query_length + 3 "
                        f"({max_query_length + 3}) to leave room for the context")
    if not getattr(tokenizer, "is_fast", False):
        raise UserError("convert_examples_to_features needs a fast tokenizer (e.g. BertTokenizerFast)")


def _question_ids(examples: Sequence[SquadExample], tokenizer: Any, max_query_length: int,
                  batch: int = 256) -> List[List[int]]:
    """Word-piece ids of every question, cut to ``max_query_length`` (tokenised in batches)."""
    questions = []
    for b in range(0, len(examples), batch):
        enc = tokenizer([e.question_text for e in examples[b:b + batch]], add_special_tokens=False, verbose=False)
        questions.extend(ids[:max_query_length] for ids in enc["input_ids"])
    return questions


class _ContextTokens:
    """Word pieces and character offsets of a context; consecutive questions on the
    same paragraph (the usual order of SQuAD files) reuse the last tokenisation."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.context: Optional[str] = None
        self.ids = self.offsets = None

    def __call__(self, context: str):
        if context != self.context:
            enc = self.tokenizer(context, add_special_tokens=False, return_offsets_mapping=True,
                                 verbose=False)
            self.context = context
            self.ids = np.asarray(enc["input_ids"], dtype=np.int32)
            self.offsets = np.asarray(enc["offset_mapping"], dtype=np.int32).reshape(-1, 2)
        return self.ids, self.offsets


def _training_answer(example: SquadExample, doc_offsets: np.ndarray, features: SquadFeatureList):
    """The answer's token span ``(first, last)`` in the context, or None to skip the
    example.

    Counts (in ``features``) answers that overlap no token and answers whose
    covering token span is wider than the answer text.
    """
    end_char = example.start_char + len(example.answer_text)
    span = _align_answer(doc_offsets, example.start_char, end_char)
    if span is None:
        features.num_unalignable += 1
        features.unalignable_ids.append(example.qas_id)
        logging.warning("question %r: answer %r overlaps no token; skipped",
                        example.qas_id, example.answer_text)
        return None
    decoded = example.context_text[doc_offsets[span[0], 0]:doc_offsets[span[1], 1]]
    if decoded != example.answer_text:
        features.num_inexact += 1
        features.inexact_ids.append(example.qas_id)
    return span


@dataclasses.dataclass(frozen=True)
class _SpecialIds:
    cls: int
    sep: int
    pad: int


def _window_arrays(query: Sequence[int], doc_ids: np.ndarray, doc_offsets: np.ndarray,
                   start: int, length: int, max_seq_length: int, ids: _SpecialIds):
    """``[CLS] query [SEP] doc[start:start+length] [SEP]`` + padding, as the feature arrays
    ``(input_ids, input_mask, segment_ids, token_to_orig)``."""
    ctx0 = len(query) + 2  # position of the first context token
    n = ctx0 + length + 1
    input_ids = np.full(max_seq_length, ids.pad, dtype=np.int32)
    input_ids[0] = ids.cls
    input_ids[1:ctx0 - 1] = query
    input_ids[ctx0 - 1] = ids.sep
    input_ids[ctx0:ctx0 + length] = doc_ids[start:start + length]
    input_ids[n - 1] = ids.sep
    input_mask = np.zeros(max_seq_length, dtype=np.int32)
    input_mask[:n] = 1
    segment_ids = np.zeros(max_seq_length, dtype=np.int32)
    segment_ids[ctx0:n] = 1
    token_to_orig = np.full((max_seq_length, 2), -1, dtype=np.int32)
    token_to_orig[ctx0:ctx0 + length] = doc_offsets[start:start + length]
    return input_ids, input_mask, segment_ids, token_to_orig


def convert_examples_to_features(
    examples: Sequence[SquadExample],
    tokenizer: Any,
    max_seq_length: int,
    doc_stride: int,
    max_query_length: int,
    is_training: bool,
    output_fn: Optional[Callable[[SquadFeature], None]] = None,
    first_unique_id: int = FIRST_UNIQUE_ID,
) -> SquadFeatureList:
    """Converts examples into fixed-length, possibly overlapping windows.

    `tokenizer` must give offsets (`tokenization.load_tokenizer`'s or a
    `BertTokenizerFast`). Windows are `max_seq_length` long, advance by `doc_stride` tokens
    (a stride of a whole window or more is accepted, as Google's: no overlap, nothing
    skipped) and questions are cut to `max_query_length`. In training, positions are set and
    unalignable answers skipped. `output_fn` streams each feature instead of keeping it.
    Raises ValueError for `max_seq_length <= max_query_length + 3`, non-positive sizes or a
    slow tokenizer.
    """
    _check_sizes(tokenizer, max_seq_length, doc_stride, max_query_length)
    ids = _SpecialIds(tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id or 0)
    features = SquadFeatureList()
    unique_id = first_unique_id
    questions = _question_ids(examples, tokenizer, max_query_length)
    context_tokens = _ContextTokens(tokenizer)

    for ex_i, example in enumerate(examples):
        doc_ids, doc_offsets = context_tokens(example.context_text)
        answer = None
        if is_training and not example.is_impossible:
            answer = _training_answer(example, doc_offsets, features)
            if answer is None:
                continue
        query = questions[ex_i]
        ctx0 = len(query) + 2  # position of the first context token in a window
        spans = _doc_spans(len(doc_ids), max_seq_length - len(query) - 3, doc_stride)
        best = _best_windows(len(doc_ids), spans)
        for s_i, (start, length) in enumerate(spans):
            arrays = _window_arrays(query, doc_ids, doc_offsets, start, length, max_seq_length, ids)
            is_max = np.zeros(max_seq_length, dtype=bool)
            is_max[ctx0:ctx0 + length] = best[start:start + length] == s_i
            start_pos = end_pos = 0  # [CLS]: no answer in this window
            if answer is not None and start <= answer[0] and answer[1] < start + length:
                start_pos, end_pos = answer[0] - start + ctx0, answer[1] - start + ctx0
            feature = SquadFeature(unique_id, ex_i, s_i, *arrays, is_max, start_pos, end_pos,
                                   bool(example.is_impossible))
            unique_id += 1
            if output_fn is not None:
                output_fn(feature)
            else:
                features.append(feature)
    if features.num_unalignable or features.num_inexact:
        logging.warning("%d training answers overlap no token (skipped); %d align only to a wider token span",
                        features.num_unalignable, features.num_inexact)
    return features
