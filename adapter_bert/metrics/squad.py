"""SQuAD v1.1 and v2.0 scoring by the official evaluation scripts' rules.

An independent implementation that reproduces `evaluate-v1.1.py` and `evaluate-v2.0.py`:
normalisation (lower case, no punctuation or articles, collapsed spaces), exact match, and
bag-of-tokens F1 (v2.0 scores two empty token lists 1, v1.1 scores any empty side 0), the
maximum over golds and the mean over questions. v2.0: a question is answerable when its
`answers` list is not empty; golds normalising to nothing are dropped (none left: `[""]`);
`na_probs` above `na_prob_thresh` abstain, and the best-threshold search reports the best
scores. Missing predictions score 0 and are logged, kept in every total.
"""

import collections
import re
import string
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from absl import logging
from adapter_bert.errors import UserError

__all__ = [
    "normalize_answer",
    "get_tokens",
    "exact_match_score",
    "f1_score",
    "metric_max_over_ground_truths",
    "find_missing_predictions",
    "evaluate_v1",
    "evaluate_v2",
    "find_best_threshold",
]

_PUNCT = frozenset(string.punctuation)
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """An answer (prediction or gold) normalised as the official scripts do (see the
    module docstring): lower case, no punctuation or articles, single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES_RE.sub(" ", text)
    return " ".join(text.split())


def get_tokens(text: str) -> List[str]:
    """Returns the tokens of the normalised ``text`` (white-space split)."""
    if not text:
        return []
    return normalize_answer(text).split()


def exact_match_score(prediction: str, ground_truth: str) -> float:
    """1.0 if the normalised prediction equals the normalised gold answer, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction: str, ground_truth: str, empty_matches_empty: bool = True) -> float:
    """Token-level F1 in [0, 1] between a prediction and one gold answer. With
    `empty_matches_empty` (v2.0) two empty token lists score 1 and one empty side 0; without
    it (v1.1) any empty side scores 0.
    """
    pred_toks = get_tokens(prediction)
    gold_toks = get_tokens(ground_truth)
    if not pred_toks or not gold_toks:
        if empty_matches_empty:
            return float(pred_toks == gold_toks)
        return 0.0
    common = collections.Counter(pred_toks) & collections.Counter(gold_toks)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_toks)
    recall = num_same / len(gold_toks)
    return 2.0 * precision * recall / (precision + recall)


def metric_max_over_ground_truths(metric_fn, prediction: str, ground_truths: Iterable[str]) -> float:
    """The best ``metric_fn(prediction, gold)`` over the gold answers (at least one:
    ValueError otherwise)."""
    scores = [metric_fn(prediction, gt) for gt in ground_truths]
    if not scores:
        raise UserError("metric_max_over_ground_truths needs at least one gold answer")
    return max(scores)


def _iter_questions(dataset: Any):
    """Yields ``(qid, [gold texts])`` for every question of a SQuAD dataset.

    ``dataset`` is either the parsed JSON file (a dict with "data") or its
    "data" list of articles.
    """
    articles = dataset.get("data") if isinstance(dataset, Mapping) else dataset
    if not isinstance(articles, list):
        raise UserError("dataset must be a SQuAD JSON object with a 'data' list, or that list")
    for a_i, article in enumerate(articles):
        try:
            paragraphs = article["paragraphs"]
        except (KeyError, TypeError):
            raise UserError(f"data[{a_i}] has no 'paragraphs' list") from None
        for p_i, paragraph in enumerate(paragraphs):
            try:
                qas = paragraph["qas"]
            except (KeyError, TypeError):
                raise UserError(f"data[{a_i}].paragraphs[{p_i}] has no 'qas' list") from None
            for q_i, qa in enumerate(qas):
                try:
                    qid = qa["id"]
                    golds = [ans["text"] for ans in qa.get("answers", [])]
                except (KeyError, TypeError):
                    raise UserError(
                        f"data[{a_i}].paragraphs[{p_i}].qas[{q_i}] needs an 'id' and answers with 'text'"
                    ) from None
                yield qid, golds


def find_missing_predictions(dataset: Any, predictions: Mapping[str, str]) -> List[str]:
    """Ids of the questions of ``dataset`` (the parsed SQuAD JSON or its "data" list)
    that have no entry in ``predictions``, in dataset order."""
    return [qid for qid, _ in _iter_questions(dataset) if qid not in predictions]


def _check_prediction(qid: str, prediction: Any) -> str:
    if not isinstance(prediction, str):
        raise UserError(f"prediction for question {qid!r} must be a string, got {type(prediction).__name__}")
    return prediction


def evaluate_v1(dataset: Any, predictions: Mapping[str, str]) -> Dict[str, float]:
    """Scores predictions (id -> text; missing ones score 0 and are logged) with the SQuAD
    v1.1 rules against the parsed JSON (or its "data" list): `{"exact_match", "f1"}` in
    percent. ValueError for a malformed or empty dataset, an answerable question without
    answers or a non-string prediction.
    """
    total = 0
    exact = 0.0
    f1 = 0.0
    missing = []
    v1_f1 = lambda p, g: f1_score(p, g, empty_matches_empty=False)  # noqa: E731
    for qid, golds in _iter_questions(dataset):
        total += 1
        if qid not in predictions:
            missing.append(qid)
            continue
        if not golds:
            raise UserError(f"question {qid!r} has no gold answers (not a v1.1 dataset?)")
        pred = _check_prediction(qid, predictions[qid])
        exact += metric_max_over_ground_truths(exact_match_score, pred, golds)
        f1 += metric_max_over_ground_truths(v1_f1, pred, golds)
    if total == 0:
        raise UserError("dataset has no questions")
    if missing:
        logging.warning("%d of %d questions have no prediction and score 0 (first: %s)",
                        len(missing), total, missing[0])
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def find_best_threshold(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    qid_to_has_ans: Mapping[str, bool],
) -> Tuple[float, float]:
    """The no-answer threshold that maximises a v2.0 score: `(best percent, threshold)`.

    From "abstain everywhere", questions are answered one at a time by increasing no-answer
    probability (stable order): an answerable one gains its raw score, an unanswerable one
    loses 1 if its prediction is not empty; the threshold is the probability of the last one
    answered at the best score (first best on ties). Questions without a prediction count 0.
    ValueError if `qid_to_has_ans` is empty.
    """
    if not qid_to_has_ans:
        raise UserError("no questions to score")
    current = sum(1 for qid, has in qid_to_has_ans.items() if not has and qid in scores)
    best, best_thresh = current, 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, best_thresh = current, na_probs[qid]
    return 100.0 * best / len(qid_to_has_ans), best_thresh


def _raw_scores_v2(dataset: Any, predictions: Mapping[str, str]):
    """Unthresholded v2.0 scores of the predicted questions, and which are answerable.

    Returns:
      ``(qid_to_has_ans, exact_raw, f1_raw)``: every question id -> answerable
      (in dataset order), and predicted question id -> exact / F1 in [0, 1].
    """
    qid_to_has_ans: Dict[str, bool] = collections.OrderedDict()
    exact_raw: Dict[str, float] = {}
    f1_raw: Dict[str, float] = {}
    missing = []
    for qid, golds in _iter_questions(dataset):
        # The official script: answerable means a non-empty answers list ...
        qid_to_has_ans[qid] = bool(golds)
        # ... while only the golds that survive normalisation are scored against.
        golds = [g for g in golds if normalize_answer(g)] or [""]
        if qid not in predictions:
            missing.append(qid)
            continue
        pred = _check_prediction(qid, predictions[qid])
        exact_raw[qid] = metric_max_over_ground_truths(exact_match_score, pred, golds)
        f1_raw[qid] = metric_max_over_ground_truths(f1_score, pred, golds)
    if not qid_to_has_ans:
        raise UserError("dataset has no questions")
    if missing:
        logging.warning("%d of %d questions have no prediction and score 0 (first: %s)",
                        len(missing), len(qid_to_has_ans), missing[0])
    return qid_to_has_ans, exact_raw, f1_raw


def _apply_no_answer_threshold(raw: Mapping[str, float], na_probs: Mapping[str, float],
                               qid_to_has_ans: Mapping[str, bool], na_prob_thresh: float) -> Dict[str, float]:
    """Scores after abstaining where the no-answer probability exceeds the threshold: an
    abstention is right (1) on an unanswerable question and wrong (0) on an answerable one.
    """
    return {qid: (float(not qid_to_has_ans[qid]) if na_probs[qid] > na_prob_thresh else s)
            for qid, s in raw.items()}


def _percentages(exact: Mapping[str, float], f1: Mapping[str, float], qids: List[str]):
    """``(exact, f1, total)`` over ``qids`` in percent; a missing prediction counts 0."""
    n = len(qids)
    return (100.0 * sum(exact.get(q, 0.0) for q in qids) / n,
            100.0 * sum(f1.get(q, 0.0) for q in qids) / n, n)


def evaluate_v2(
    dataset: Any,
    predictions: Mapping[str, str],
    na_probs: Optional[Mapping[str, float]] = None,
    na_prob_thresh: float = 1.0,
) -> Dict[str, float]:
    """Scores predictions ("" abstains; missing ones score 0, logged) with the SQuAD v2.0
    rules.

    `na_probs` (e.g. `write_predictions`' null odds) must cover every prediction; those
    above `na_prob_thresh` abstain, and the best-threshold figures are added. Returns
    `exact`, `f1`, `total`, the `HasAns_*` and `NoAns_*` figures where such questions exist,
    and `best_*`. ValueError for a malformed or empty dataset, a non-string prediction or
    `na_probs` missing a prediction.
    """
    qid_to_has_ans, exact_raw, f1_raw = _raw_scores_v2(dataset, predictions)
    if na_probs is not None:
        lacking = [qid for qid in exact_raw if qid not in na_probs]
        if lacking:
            raise UserError(f"na_probs has no value for {len(lacking)} predicted questions (first: {lacking[0]!r})")
        probs = na_probs
    else:
        probs = {qid: 0.0 for qid in exact_raw}
    exact_th = _apply_no_answer_threshold(exact_raw, probs, qid_to_has_ans, na_prob_thresh)
    f1_th = _apply_no_answer_threshold(f1_raw, probs, qid_to_has_ans, na_prob_thresh)

    result: Dict[str, float] = collections.OrderedDict()
    result["exact"], result["f1"], result["total"] = _percentages(exact_th, f1_th, list(qid_to_has_ans))
    for prefix, want in (("HasAns", True), ("NoAns", False)):
        qids = [q for q, has in qid_to_has_ans.items() if has == want]
        if qids:
            (result[prefix + "_exact"], result[prefix + "_f1"],
             result[prefix + "_total"]) = _percentages(exact_th, f1_th, qids)
    if na_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = find_best_threshold(
            predictions, exact_raw, na_probs, qid_to_has_ans)
        result["best_f1"], result["best_f1_thresh"] = find_best_threshold(
            predictions, f1_raw, na_probs, qid_to_has_ans)
    return result
