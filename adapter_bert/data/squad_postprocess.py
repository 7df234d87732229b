"""Turns per-window start/end logits into SQuAD answer texts, as Google's `run_squad.py`.

Candidates: each window's `n_best_size` best starts and ends inside the context, the start
in its max-context window, at most `max_answer_length` tokens; the text is cut from the
original context by character offsets, ranked by `start_logit + end_logit`, deduplicated,
with softmax probabilities. SQuAD 2.0: the null score is the [CLS] score minimised over
windows, and the answer is "" when `null - best > null_score_diff_threshold`.
Writes `predictions.json`, `nbest_predictions.json` and (v2.0) `null_odds.json`.
"""

import collections
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from adapter_bert.io_utils import atomic_write_text, makedirs
from adapter_bert.errors import UserError
from adapter_bert import io_utils

__all__ = ["RawResult", "write_predictions", "NO_SPAN_NULL_ODDS"]

RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])
"""Model output for one feature (window): its unique_id and two logit vectors."""

# null odds recorded (v2.0) when an example has no valid non-null span at all.
NO_SPAN_NULL_ODDS = 1e9

_Candidate = collections.namedtuple("_Candidate", ["feature_index", "start", "end", "start_logit", "end_logit"])


def _field(result: Any, name: str):
    if isinstance(result, Mapping):
        return result[name]
    return getattr(result, name)


def _top_indexes(logits: np.ndarray, n: int) -> np.ndarray:
    """Indexes of the ``n`` largest logits, best first (lower index first on ties)."""
    return np.argsort(-logits, kind="stable")[:n]


def _softmax(scores: Sequence[float]) -> List[float]:
    if not scores:
        return []
    x = np.asarray(scores, dtype=np.float64)
    e = np.exp(x - x.max())
    return (e / e.sum()).tolist()


def _write_json_atomic(path: str, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=4) + "\n")


def _window_logits(feature: Any, by_id: Mapping[int, Any], qas_id: str) -> Tuple[np.ndarray, np.ndarray]:
    """The start and end logits of one window, checked against its sequence length."""
    if feature.unique_id not in by_id:
        raise UserError(f"no result for feature unique_id {feature.unique_id} (question id {qas_id!r})")
    result = by_id[feature.unique_id]
    start_logits = np.asarray(_field(result, "start_logits"), dtype=np.float64).reshape(-1)
    end_logits = np.asarray(_field(result, "end_logits"), dtype=np.float64).reshape(-1)
    seq_len = len(feature.token_to_orig)
    if start_logits.shape[0] != seq_len or end_logits.shape[0] != seq_len:
        raise UserError(f"logits of unique_id {feature.unique_id} have length "
                        f"{start_logits.shape[0]}/{end_logits.shape[0]}, expected {seq_len}")
    return start_logits, end_logits


def _window_candidates(f_i: int, feature: Any, start_logits: np.ndarray, end_logits: np.ndarray,
                       n_best_size: int, max_answer_length: int) -> List[_Candidate]:
    """Valid spans among the window's ``n_best_size`` best starts and ends."""
    in_context = feature.token_to_orig[:, 0] >= 0
    candidates = []
    for s in _top_indexes(start_logits, n_best_size):
        if not (in_context[s] and feature.token_is_max_context[s]):
            continue
        for e in _top_indexes(end_logits, n_best_size):
            if not in_context[e] or e < s or e - s + 1 > max_answer_length:
                continue
            candidates.append(_Candidate(f_i, int(s), int(e), float(start_logits[s]), float(end_logits[e])))
    return candidates


def _example_candidates(example: Any, ex_features: Sequence[Any], by_id: Mapping[int, Any],
                        n_best_size: int, max_answer_length: int, version_2_with_negative: bool):
    """All span candidates of an example's windows, best first, and (v2.0) its null
    candidate.

    Returns:
      ``(candidates, null_candidate)``; the null candidate (also in the list) is
      the [CLS] score of the window where it is smallest, None for v1.1.
    """
    candidates: List[_Candidate] = []
    null_cand = None
    for f_i, feature in enumerate(ex_features):
        start_logits, end_logits = _window_logits(feature, by_id, example.qas_id)
        if version_2_with_negative:
            score = start_logits[0] + end_logits[0]
            if null_cand is None or score < null_cand.start_logit + null_cand.end_logit:
                null_cand = _Candidate(f_i, 0, 0, float(start_logits[0]), float(end_logits[0]))
        candidates.extend(_window_candidates(f_i, feature, start_logits, end_logits, n_best_size,
                                             max_answer_length))
    if null_cand is not None:
        candidates.append(null_cand)
    candidates.sort(key=lambda c: c.start_logit + c.end_logit, reverse=True)
    return candidates, null_cand


def _nbest(example: Any, ex_features: Sequence[Any], candidates: Sequence[_Candidate], null_cand,
           n_best_size: int) -> List[Tuple[str, float, float]]:
    """The ``n_best_size`` best distinct answer texts as ``(text, start_logit, end_logit)``.

    Texts are cut from the original context through the word pieces' offsets.
    The null answer ("") is kept even beyond ``n_best_size``; with no
    candidate at all the list holds BERT's placeholder ``("empty", 0, 0)``.
    """
    nbest, seen = [], set()
    for cand in candidates:
        if len(nbest) >= n_best_size:
            break
        if cand is null_cand:
            text = ""
        else:
            offsets = ex_features[cand.feature_index].token_to_orig
            text = example.context_text[offsets[cand.start, 0]:offsets[cand.end, 1]]
        if text in seen:
            continue
        seen.add(text)
        nbest.append((text, cand.start_logit, cand.end_logit))
    if null_cand is not None and "" not in seen:
        nbest.append(("", null_cand.start_logit, null_cand.end_logit))
    if not nbest:
        nbest.append(("empty", 0.0, 0.0))
    return nbest


def _write_files(output_dir: str, predictions, nbest_json, null_odds, version_2_with_negative: bool) -> None:
    makedirs(output_dir)
    _write_json_atomic(io_utils.join(output_dir, "predictions.json"), predictions)
    _write_json_atomic(io_utils.join(output_dir, "nbest_predictions.json"), nbest_json)
    if version_2_with_negative:
        _write_json_atomic(io_utils.join(output_dir, "null_odds.json"), null_odds)


def write_predictions(
    examples: Sequence[Any],
    features: Sequence[Any],
    results: Sequence[Any],
    n_best_size: int,
    max_answer_length: int,
    version_2_with_negative: bool,
    null_score_diff_threshold: float,
    output_dir: str,
) -> Tuple[Dict[str, str], Optional[Dict[str, float]]]:
    """Builds the final answers and writes the prediction files into `output_dir`
    (atomically).

    `examples` and `features` are `SquadExample`s and their `SquadFeature` windows;
    `results` one per feature with `unique_id`, `start_logits`, `end_logits` (attributes or
    keys). Returns `(predictions, null_odds)`: id -> answer text and, for v2.0, id ->
    `null_score - best_non_null_score` (None for v1.1). An example without a valid span is
    predicted "" (v2.0 null odds `NO_SPAN_NULL_ODDS`). Raises ValueError for non-positive
    sizes, a feature without a result, or logits of the wrong length.
    """
    if n_best_size <= 0 or max_answer_length <= 0:
        raise UserError("n_best_size and max_answer_length must be positive")
    by_id = {int(_field(r, "unique_id")): r for r in results}
    features_of = collections.defaultdict(list)
    for feature in features:
        features_of[feature.example_index].append(feature)

    predictions: Dict[str, str] = collections.OrderedDict()
    nbest_json: Dict[str, List[Dict[str, Any]]] = collections.OrderedDict()
    null_odds: Dict[str, float] = collections.OrderedDict()
    for ex_i, example in enumerate(examples):
        ex_features = features_of.get(ex_i, [])
        candidates, null_cand = _example_candidates(example, ex_features, by_id, n_best_size,
                                                    max_answer_length, version_2_with_negative)
        nbest = _nbest(example, ex_features, candidates, null_cand, n_best_size)
        probs = _softmax([s + e for _, s, e in nbest])
        nbest_json[example.qas_id] = [
            {"text": t, "probability": p, "start_logit": s, "end_logit": e}
            for (t, s, e), p in zip(nbest, probs)
        ]
        # the placeholder "empty" entry is no answer text
        best_non_null = next((entry for entry in nbest if entry[0]), None) \
            if candidates else None
        if not version_2_with_negative:
            predictions[example.qas_id] = best_non_null[0] if best_non_null else ""
            continue
        if best_non_null is None or null_cand is None:
            diff = NO_SPAN_NULL_ODDS
        else:
            diff = float(null_cand.start_logit + null_cand.end_logit - best_non_null[1] - best_non_null[2])
        null_odds[example.qas_id] = diff
        predictions[example.qas_id] = "" if best_non_null is None or diff > null_score_diff_threshold \
            else best_non_null[0]

    _write_files(output_dir, predictions, nbest_json, null_odds, version_2_with_negative)
    return predictions, (null_odds if version_2_with_negative else None)
