"""Tests for adapter_bert.metrics.squad on hand-checked cases and (realdata group) the real
dev sets."""

import json

import pytest

from adapter_bert.metrics import squad as m

from tests.conftest import real_file


def _dataset(questions):
    """A one-paragraph SQuAD dataset: questions = [(qid, [gold texts])]."""
    qas = [{"id": qid, "question": "q?", "answers": [{"text": g, "answer_start": 0} for g in golds]}
           for qid, golds in questions]
    return {"version": "x", "data": [{"title": "T", "paragraphs": [{"context": "c", "qas": qas}]}]}


def _load(real_data, name):
    path = real_file(real_data, f"squad/{name}")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# ---------------------------------------------------------------- normalisation


@pytest.mark.parametrize("raw, expected", [
    ("The  Cat!", "cat"),
    ("an apple", "apple"),
    ("theatre", "theatre"),
    ("A.B.C.", "abc"),
    ("  Hello,\t  World \n", "hello world"),
    ("the-end", "theend"),          # punctuation goes first, so "theend" is no article
    ("Rock 'n' Roll", "rock n roll"),
    ("a an the", ""),
    ("Thea and the cat", "thea and cat"),
    ("Beyoncé", "beyoncé"),          # only ASCII punctuation is removed, accents stay
    ("", ""),
])
def test_normalize_answer(raw, expected):
    assert m.normalize_answer(raw) == expected


def test_exact_match():
    assert m.exact_match_score("The Denver Broncos", "denver broncos!") == 1.0
    assert m.exact_match_score("Denver", "Denver Broncos") == 0.0
    assert m.exact_match_score("", "a") == 1.0  # both normalise to ""


@pytest.mark.parametrize("pred, gold, expected", [
    ("the big red dog", "a red dog barked", 2 / 3),   # P = 2/3, R = 2/3
    ("Panthers", "Carolina Panthers", 2 / 3),         # P = 1, R = 1/2
    ("red red", "red", 2 / 3),                        # overlap counts min(2, 1) = 1: P = 1/2, R = 1
    ("one two three four", "four", 0.4),              # P = 1/4, R = 1
    ("Denver Broncos", "denver broncos", 1.0),
    ("cat", "dog", 0.0),
    ("", "Denver", 0.0),
    ("Denver", "", 0.0),
    ("", "", 1.0),                                    # v2.0: empty vs empty
    ("the", ".", 1.0),                                # both normalise to nothing
])
def test_f1_by_hand(pred, gold, expected):
    assert m.f1_score(pred, gold) == pytest.approx(expected)


def test_f1_v1_rule_for_empty_tokens():
    # The v1.1 script has no empty special case: no common token -> 0.
    assert m.f1_score(".", ".", empty_matches_empty=False) == 0.0
    assert m.f1_score("x b", "b c", empty_matches_empty=False) == pytest.approx(0.5)


def test_max_over_ground_truths():
    assert m.metric_max_over_ground_truths(m.f1_score, "Carolina", ["Panthers", "Carolina Panthers", "x"]) \
        == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        m.metric_max_over_ground_truths(m.f1_score, "x", [])


# ---------------------------------------------------------------- v1.1


def test_evaluate_v1_by_hand():
    ds = _dataset([("q1", ["Denver Broncos", "the Broncos"]),
                   ("q2", ["Carolina Panthers"]),
                   ("q3", ["Santa Clara, California"]),
                   ("q4", ["Levi's Stadium"])])
    preds = {"q1": "Broncos", "q2": "the Carolina Panthers", "q3": "", "q4": "Levi Stadium"}
    r = m.evaluate_v1(ds, preds)
    # q1: EM 1 (via "the Broncos"), q2 EM 1, q3 0, q4: "levis stadium" vs "levi stadium" -> F1 1/2
    assert set(r) == {"exact_match", "f1"}
    assert r["exact_match"] == pytest.approx(50.0)
    assert r["f1"] == pytest.approx(100.0 * (1 + 1 + 0 + 0.5) / 4)


def test_evaluate_v1_missing_predictions_count_zero():
    ds = _dataset([("q1", ["a cat"]), ("q2", ["dog"]), ("q3", ["fish"]), ("q4", ["bird"])])
    preds = {"q1": "cat", "q3": "fish"}
    assert m.find_missing_predictions(ds, preds) == ["q2", "q4"]
    assert m.evaluate_v1(ds, preds) == {"exact_match": 50.0, "f1": 50.0}
    # the "data" list works as well as the whole file
    assert m.evaluate_v1(ds["data"], preds) == {"exact_match": 50.0, "f1": 50.0}


def test_evaluate_v1_dot_gold_keeps_official_v1_quirk():
    ds = _dataset([("q1", ["."])])
    assert m.evaluate_v1(ds, {"q1": "."}) == {"exact_match": 100.0, "f1": 0.0}


def test_evaluate_bad_inputs():
    with pytest.raises(ValueError):
        m.evaluate_v1({"nodata": []}, {})
    with pytest.raises(ValueError):
        m.evaluate_v1({"data": []}, {})
    with pytest.raises(ValueError):
        m.evaluate_v1(_dataset([("q1", ["a"])]), {"q1": 3})
    with pytest.raises(ValueError):
        m.evaluate_v2(_dataset([("q1", ["a"])]), {"q1": "a"}, na_probs={})


# ---------------------------------------------------------------- v2.0


def _toy_v2():
    ds = _dataset([("q1", ["Denver Broncos"]), ("q2", ["Carolina Panthers"]), ("q3", []), ("q4", [])])
    preds = {"q1": "Denver Broncos", "q2": "Panthers", "q3": "Santa Clara", "q4": ""}
    na_probs = {"q1": 0.1, "q2": 0.4, "q3": 0.5, "q4": 0.8}
    return ds, preds, na_probs


def test_evaluate_v2_without_na_probs():
    ds, preds, _ = _toy_v2()
    r = m.evaluate_v2(ds, preds)
    # raw: q1 EM 1 F1 1; q2 EM 0 F1 2/3; q3 ("" gold, non-empty pred) 0; q4 ("" vs "") 1
    assert r["total"] == 4 and r["HasAns_total"] == 2 and r["NoAns_total"] == 2
    assert r["exact"] == pytest.approx(50.0)
    assert r["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0 + 1) / 4)
    assert r["HasAns_exact"] == pytest.approx(50.0)
    assert r["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert r["NoAns_exact"] == r["NoAns_f1"] == pytest.approx(50.0)
    assert "best_exact" not in r
    assert list(r)[:3] == ["exact", "f1", "total"]


def test_evaluate_v2_best_threshold_by_hand():
    ds, preds, na_probs = _toy_v2()
    r = m.evaluate_v2(ds, preds, na_probs=na_probs)
    # Start: abstain everywhere -> q3, q4 right = 2. Answer by increasing na_prob:
    #   q1 (0.1): EM +1 -> 3, F1 +1 -> 3           (best so far, thresh 0.1)
    #   q2 (0.4): EM +0 -> 3, F1 +2/3 -> 3.667     (F1 best, thresh 0.4)
    #   q3 (0.5): non-empty answer to unanswerable -> -1
    #   q4 (0.8): "" -> 0
    assert r["best_exact"] == pytest.approx(75.0) and r["best_exact_thresh"] == 0.1
    assert r["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 4) and r["best_f1_thresh"] == 0.4
    # With na_prob_thresh = 1.0 nobody abstains: same as without na_probs
    assert r["exact"] == pytest.approx(50.0)
    # Abstaining above 0.45 (q3, q4) reproduces the best-F1 setting
    r2 = m.evaluate_v2(ds, preds, na_probs=na_probs, na_prob_thresh=0.45)
    assert r2["exact"] == pytest.approx(75.0)
    assert r2["f1"] == pytest.approx(r["best_f1"])
    assert r2["NoAns_exact"] == 100.0


def test_find_best_threshold_keeps_all_abstain_when_nothing_helps():
    preds = {"a": "x", "b": "y"}
    score, thresh = m.find_best_threshold(preds, {"a": 0.0, "b": 0.0}, {"a": 0.2, "b": 0.7},
                                          {"a": False, "b": False})
    assert (score, thresh) == (100.0, 0.0)


def test_evaluate_v2_unanswerable_and_missing():
    ds = _dataset([("q1", []), ("q2", []), ("q3", ["."]), ("q4", ["Paris"])])
    # q3 has an answer, so it is answerable (official: bool(qa["answers"])); its only
    # gold normalises to nothing, so it is scored against "" and "" is right.
    r = m.evaluate_v2(ds, {"q1": "", "q2": "London", "q3": ""})
    assert r["NoAns_total"] == 2 and r["HasAns_total"] == 2 and r["total"] == 4
    assert r["exact"] == pytest.approx(50.0)   # q1, q3 right; q2 wrong; q4 missing -> 0
    assert r["HasAns_exact"] == r["HasAns_f1"] == pytest.approx(50.0)  # q3 right, q4 missing
    assert r["NoAns_exact"] == r["NoAns_f1"] == pytest.approx(50.0)    # q1 right, q2 wrong
    # Abstaining on an answerable question scores 0 even there, as in the official
    # apply_no_ans_threshold; the best-threshold search counts q3 as answerable too.
    r = m.evaluate_v2(ds, {"q1": "", "q2": "London", "q3": "", "q4": "Paris"},
                      na_probs={"q1": 0.9, "q2": 0.8, "q3": 0.7, "q4": 0.1}, na_prob_thresh=0.5)
    assert r["HasAns_exact"] == pytest.approx(50.0) and r["NoAns_exact"] == 100.0
    # start 2 (q1, q2 abstain); q4 +1 -> 3; q3 +1 -> 4; q2 -1 -> 3; q1 +0
    assert r["best_exact"] == 100.0 and r["best_exact_thresh"] == 0.7


# --------------------------------------------------- real dev sets (realdata group)


@pytest.mark.realdata
def test_real_dev_v1_first_gold_is_perfect(real_data):
    ds = _load(real_data, "dev-v1.1.json")
    first = {}
    for article in ds["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                first[qa["id"]] = qa["answers"][0]["text"]
    assert len(first) == 10570
    assert m.evaluate_v1(ds, first) == {"exact_match": 100.0, "f1": 100.0}
    # Predicting "" scores F1 0 but not quite EM 0: three questions have a gold "." that
    # normalises to "" too (the official v1.1 script gives the same 3 / 10570).
    assert m.evaluate_v1(ds, {qid: "" for qid in first}) == {"exact_match": pytest.approx(100 * 3 / 10570),
                                                            "f1": 0.0}


@pytest.mark.realdata
def test_real_dev_v2_answerable_follows_the_answers_list(real_data):
    """Three dev-v2.0 questions have a gold that normalises to nothing ("."): left with
    only that gold they stay answerable, as evaluate-v2.0.py's bool(qa["answers"]) says."""
    ds = _load(real_data, "dev-v2.0.json")
    edited = []
    for article in ds["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                empty = [a for a in qa["answers"] if not m.normalize_answer(a["text"])]
                if empty:
                    qa["answers"] = empty[:1]
                    edited.append(qa["id"])
    assert len(edited) == 3
    preds = {qid: "" for qid in edited}
    r = m.evaluate_v2(ds, preds)
    assert r["HasAns_total"] == 5928 and r["NoAns_total"] == 5945
    # "" matches the empty gold: the three are right, and right as answerable questions
    assert r["HasAns_exact"] == r["HasAns_f1"] == pytest.approx(100 * 3 / 5928)


@pytest.mark.realdata
def test_real_dev_v2_gold_is_perfect(real_data):
    ds = _load(real_data, "dev-v2.0.json")
    preds = {}
    for article in ds["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                preds[qa["id"]] = qa["answers"][0]["text"] if qa["answers"] else ""
    r = m.evaluate_v2(ds, preds)
    assert r["total"] == 11873 and r["HasAns_total"] == 5928 and r["NoAns_total"] == 5945
    assert r["exact"] == r["f1"] == 100.0
    empty = m.evaluate_v2(ds, {qid: "" for qid in preds})
    assert empty["exact"] == pytest.approx(100 * 5945 / 11873)
    assert empty["HasAns_exact"] == 0.0 and empty["NoAns_exact"] == 100.0
