"""Tests for adapter_bert.data.squad (reading, windowing) and squad_postprocess."""

import json
import os
from dataclasses import replace as dataclasses_replace

import numpy as np
import pytest

from adapter_bert.data import squad as sq
from adapter_bert.data.squad_postprocess import RawResult, write_predictions
from adapter_bert.metrics.squad import evaluate_v1, evaluate_v2, exact_match_score, metric_max_over_ground_truths

from tests.conftest import WRITTEN_AND_REAL, real_file

# Tests marked WRITTEN_AND_REAL run on the written SQuAD files and, in the realdata group,
# on the real ones (dev-v1.1.json, dev-v2.0.json, the first 44 articles of train-v1.1.json).


def _path(data_root, name):
    return str(real_file(data_root, f"squad/{name}"))


def _questions(path, articles=None):
    """The number of questions in the first `articles` articles of a SQuAD file."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"][:articles]
    return sum(len(p["qas"]) for a in data for p in a["paragraphs"])


@pytest.fixture(scope="module")
def tokenizer(uncased_tokenizer):
    return uncased_tokenizer


@pytest.fixture
def dev_v1(data_root):
    return sq.read_squad_examples(_path(data_root, "dev-v1.1.json"), is_training=False)


def _first_articles(examples, path, n):
    """The examples of the first ``n`` articles of the SQuAD file at ``path``."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"][:n]
    ids = {qa["id"] for a in data for p in a["paragraphs"] for qa in p["qas"]}
    return [e for e in examples if e.qas_id in ids], {"data": data}


def _write(tmp_path, obj_or_text, name="d.json"):
    path = tmp_path / name
    if isinstance(obj_or_text, bytes):
        path.write_bytes(obj_or_text)
    elif isinstance(obj_or_text, str):
        path.write_text(obj_or_text, encoding="utf-8")
    else:
        path.write_text(json.dumps(obj_or_text), encoding="utf-8")
    return str(path)


def _one(context="Denver won.", qa=None):
    qa = qa if qa is not None else {"id": "q1", "question": "Who won?",
                                    "answers": [{"text": "Denver", "answer_start": 0}]}
    return {"data": [{"title": "T", "paragraphs": [{"context": context, "qas": [qa]}]}]}


# ---------------------------------------------------------------- reading


@pytest.mark.parametrize("data_source", ["written"])
def test_read_written_files(dev_v1, data_root):
    path = _path(data_root, "dev-v1.1.json")
    assert len(dev_v1) == _questions(path) and dev_v1.num_answer_mismatches == 0
    with open(path, encoding="utf-8") as f:
        first = json.load(f)["data"][0]["paragraphs"][0]["qas"][0]
    e = dev_v1[0]
    assert e.qas_id == first["id"] and e.all_answers == [a["text"] for a in first["answers"]]
    assert e.context_text[e.start_char:e.start_char + len(e.answer_text)] == e.answer_text
    assert len(e.all_answers) == 3
    path = _path(data_root, "dev-v2.0.json")
    v2 = sq.read_squad_examples(path, is_training=True, version_2_with_negative=True)
    with open(path, encoding="utf-8") as f:
        impossible = sum(q["is_impossible"] for a in json.load(f)["data"]
                         for p in a["paragraphs"] for q in p["qas"])
    assert len(v2) == _questions(path) and sum(e.is_impossible for e in v2) == impossible > 0
    assert v2.num_answer_mismatches == 0
    assert all(e.answer_text == "" and e.start_char == -1 for e in v2 if e.is_impossible)


@pytest.mark.realdata
@pytest.mark.parametrize("data_source", ["real"])
def test_read_real_files(dev_v1, data_root):
    assert len(dev_v1) == 10570 and dev_v1.num_answer_mismatches == 0
    e = dev_v1[0]
    assert e.qas_id == "56be4db0acb8001400a502ec"
    assert e.context_text[e.start_char:e.start_char + len(e.answer_text)] == e.answer_text
    assert len(e.all_answers) == 3
    v2 = sq.read_squad_examples(_path(data_root, "dev-v2.0.json"), is_training=True,
                                version_2_with_negative=True)
    assert len(v2) == 11873 and sum(e.is_impossible for e in v2) == 5945
    assert all(e.answer_text == "" and e.start_char == -1 for e in v2 if e.is_impossible)


def test_read_errors(tmp_path):
    with pytest.raises(sq.SquadDataError, match="not found"):
        sq.read_squad_examples(str(tmp_path / "nope.json"), True)
    bad = _write(tmp_path, '{"data": [\n  {"title": "x",, }\n]}')
    with pytest.raises(sq.SquadDataError, match=r"d\.json: malformed JSON at line 2, column 17"):
        sq.read_squad_examples(bad, True)
    latin = _write(tmp_path, '{"data": "caf\xe9"}'.encode("latin-1"))
    with pytest.raises(sq.SquadDataError, match=r"d\.json line 1: not valid UTF-8 \(byte 0xe9 at byte column 14\)"):
        sq.read_squad_examples(latin, True)
    with pytest.raises(sq.SquadDataError, match=r"top level: missing key 'data'"):
        sq.read_squad_examples(_write(tmp_path, {"version": "1.1"}), True)
    no_ctx = _one()
    del no_ctx["data"][0]["paragraphs"][0]["context"]
    with pytest.raises(sq.SquadDataError, match=r"data\[0\]\.paragraphs\[0\]: missing key 'context'"):
        sq.read_squad_examples(_write(tmp_path, no_ctx), True)
    no_q = _one(qa={"id": "abc", "answers": []})
    with pytest.raises(sq.SquadDataError, match=r"qas\[0\] \(question id 'abc'\): missing key 'question'"):
        sq.read_squad_examples(_write(tmp_path, no_q), True)
    no_start = _one(qa={"id": "abc", "question": "?", "answers": [{"text": "Denver"}]})
    with pytest.raises(sq.SquadDataError, match=r"answers\[0\] \(question id 'abc'\): missing key 'answer_start'"):
        sq.read_squad_examples(_write(tmp_path, no_start), True)
    str_start = _one(qa={"id": "abc", "question": "?", "answers": [{"text": "D", "answer_start": "0"}]})
    with pytest.raises(sq.SquadDataError, match=r"answers\[0\]\.answer_start \(question id 'abc'\): expected int, got str"):
        sq.read_squad_examples(_write(tmp_path, str_start), True)
    with pytest.raises(sq.SquadDataError, match="missing key 'is_impossible'"):
        sq.read_squad_examples(_write(tmp_path, _one()), True, version_2_with_negative=True)
    no_answer = _one(qa={"id": "abc", "question": "?", "answers": []})
    with pytest.raises(sq.SquadDataError, match="needs at least one answer"):
        sq.read_squad_examples(_write(tmp_path, no_answer), True)
    # evaluation mode: answers may be absent (test files)
    assert len(sq.read_squad_examples(_write(tmp_path, _one(qa={"id": "a", "question": "?"})), False)) == 1
    assert issubclass(sq.SquadDataError, ValueError)


def test_mismatched_answer_start_is_counted_not_fatal(tmp_path):
    data = _one(context="Denver won. Carolina lost.")
    data["data"][0]["paragraphs"][0]["qas"].append(
        {"id": "q2", "question": "Who lost?", "answers": [{"text": "Carolina", "answer_start": 3}]})
    path = _write(tmp_path, data)
    train = sq.read_squad_examples(path, is_training=True)
    assert [e.qas_id for e in train] == ["q1"]
    assert train.num_answer_mismatches == 1 and train.mismatched_ids == ["q2"]
    evaluation = sq.read_squad_examples(path, is_training=False)
    assert len(evaluation) == 2 and evaluation.num_answer_mismatches == 1


# ---------------------------------------------------------------- features


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_seq_length=64, doc_stride=8, max_query_length=61), "greater than max_query_length"),
    (dict(max_seq_length=64, doc_stride=8, max_query_length=70), "greater than max_query_length"),
    (dict(max_seq_length=64, doc_stride=0, max_query_length=16), "positive"),
])
def test_convert_argument_checks(tokenizer, kwargs, message):
    with pytest.raises(ValueError, match=message):
        sq.convert_examples_to_features([], tokenizer, is_training=False, **kwargs)


def test_convert_needs_fast_tokenizer():
    class Slow:
        is_fast = False
    with pytest.raises(ValueError, match="fast tokenizer"):
        sq.convert_examples_to_features([], Slow(), 64, 32, 16, False)


def _check_windows(examples, features, tokenizer, max_seq_length, max_query_length):
    """Every context token is in some window and max-context in exactly one."""
    by_example = {}
    for f in features:
        by_example.setdefault(f.example_index, []).append(f)
    assert sorted(by_example) == list(range(len(examples)))
    for ex_i, example in enumerate(examples):
        offsets = tokenizer(example.context_text, add_special_tokens=False,
                            return_offsets_mapping=True)["offset_mapping"]
        seen, max_ctx = set(), {}
        for d_i, f in enumerate(by_example[ex_i]):
            assert f.doc_span_index == d_i
            for arr in (f.input_ids, f.input_mask, f.segment_ids):
                assert arr.dtype == np.int32 and arr.shape == (max_seq_length,)
            assert f.input_ids[0] == tokenizer.cls_token_id
            n = int(f.input_mask.sum())
            assert f.input_ids[n - 1] == tokenizer.sep_token_id and not f.input_ids[n:].any()
            ctx = np.flatnonzero(f.token_to_orig[:, 0] >= 0)
            assert ctx[0] <= max_query_length + 2 and ctx[-1] == n - 2
            assert (f.segment_ids[ctx] == 1).all() and f.segment_ids[:ctx[0]].sum() == 0
            assert not f.token_is_max_context[f.token_to_orig[:, 0] < 0].any()
            for pos in ctx:
                key = tuple(f.token_to_orig[pos])
                seen.add(key)
                max_ctx[key] = max_ctx.get(key, 0) + int(f.token_is_max_context[pos])
        assert seen == {tuple(o) for o in offsets}
        assert all(v == 1 for v in max_ctx.values())


@WRITTEN_AND_REAL
def test_windows_cover_context_dev_v1(tokenizer, dev_v1, data_root):
    examples, _ = _first_articles(dev_v1, _path(data_root, "dev-v1.1.json"), 1)
    features = sq.convert_examples_to_features(examples, tokenizer, 64, 32, 16, is_training=False)
    assert len(features) > 3 * len(examples)  # the small windows really split contexts
    assert len({f.unique_id for f in features}) == len(features)
    assert features[0].unique_id == sq.FIRST_UNIQUE_ID
    _check_windows(examples, features, tokenizer, 64, 16)


@WRITTEN_AND_REAL
def test_windows_dev_v2_and_impossible(tokenizer, data_root):
    path = _path(data_root, "dev-v2.0.json")
    examples, _ = _first_articles(sq.read_squad_examples(path, True, True), path, 1)
    assert any(e.is_impossible for e in examples) and not all(e.is_impossible for e in examples)
    features = sq.convert_examples_to_features(examples, tokenizer, 64, 32, 16, is_training=True)
    _check_windows(examples, features, tokenizer, 64, 16)
    for f in features:
        example = examples[f.example_index]
        if example.is_impossible:
            assert f.is_impossible and f.start_position == f.end_position == 0
        elif f.start_position:
            text = example.context_text[f.token_to_orig[f.start_position, 0]:f.token_to_orig[f.end_position, 1]]
            assert text == example.answer_text or example.qas_id in features.inexact_ids


def _google_doc_spans(num_tokens, max_tokens_for_doc, doc_stride):
    """google-research/bert run_squad.py's window loop, written out as it is there."""
    spans, start_offset = [], 0
    while start_offset < num_tokens:
        length = num_tokens - start_offset
        if length > max_tokens_for_doc:
            length = max_tokens_for_doc
        spans.append((start_offset, length))
        if start_offset + length == num_tokens:
            break
        start_offset += min(length, doc_stride)
    return spans


def _google_is_max_context(spans, span_index, position):
    """google-research/bert's _check_is_max_context."""
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return span_index == best_index


@WRITTEN_AND_REAL
@pytest.mark.parametrize("max_seq_length, doc_stride, max_query_length", [
    (128, 128, 64),  # run_squad.py --max_seq_length=128 at the default stride
    (128, 100, 64),  # stride longer than the 61-token window of a 64-token question
    (96, 200, 16),   # stride longer than the whole sequence
    (64, 32, 16),    # the usual overlapping case
])
def test_windows_equal_googles_loop_dev_v1(tokenizer, dev_v1, data_root, max_seq_length,
                                           doc_stride, max_query_length):
    examples, _ = _first_articles(dev_v1, _path(data_root, "dev-v1.1.json"), 1)
    examples = examples[::8]  # one question in eight: every paragraph of the article
    features = sq.convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                               max_query_length, is_training=False)
    by_example = {}
    for f in features:
        by_example.setdefault(f.example_index, []).append(f)
    for ex_i, example in enumerate(examples):
        offsets = np.asarray(tokenizer(example.context_text, add_special_tokens=False,
                                       return_offsets_mapping=True)["offset_mapping"])
        query = tokenizer(example.question_text, add_special_tokens=False)["input_ids"]
        query_len = min(len(query), max_query_length)
        spans = _google_doc_spans(len(offsets), max_seq_length - query_len - 3, doc_stride)
        ours = by_example[ex_i]
        assert len(ours) == len(spans), example.qas_id
        for s_i, (feature, (start, length)) in enumerate(zip(ours, spans)):
            ctx = np.flatnonzero(feature.token_to_orig[:, 0] >= 0)
            assert ctx[0] == query_len + 2 and len(ctx) == length
            np.testing.assert_array_equal(feature.token_to_orig[ctx], offsets[start:start + length])
            expected = [_google_is_max_context(spans, s_i, start + i) for i in range(length)]
            assert feature.token_is_max_context[ctx].tolist() == expected
        _check_windows([example], [dataclasses_replace(f, example_index=0) for f in ours],
                       tokenizer, max_seq_length, max_query_length)
    if doc_stride >= max_seq_length - max_query_length - 3:
        assert len(features) > len(examples)  # some contexts really needed several windows


def test_long_question_is_truncated(tokenizer):
    long_q = " ".join(["word"] * 50) + "?"
    example = sq.SquadExample("q", long_q, "Denver won the game.", "Denver", 0)
    [f] = sq.convert_examples_to_features([example], tokenizer, 64, 16, 10, is_training=True)
    assert f.segment_ids[:12].sum() == 0 and f.input_ids[11] == tokenizer.sep_token_id
    assert (f.start_position, f.end_position) == (12, 12)


@WRITTEN_AND_REAL
@pytest.mark.parametrize("sizes", [(384, 128, 64), (64, 32, 16)])
def test_gold_answers_decode_exactly_train_subset(tokenizer, data_root, data_source, sizes):
    path = _path(data_root, "train-v1.1-subset.json")
    examples, _ = _first_articles(sq.read_squad_examples(path, is_training=True), path, 2)
    assert len(examples) == _questions(path, 2)
    assert len(examples) > (400 if data_source == "real" else 50)
    features = sq.convert_examples_to_features(examples, tokenizer, *sizes, is_training=True)
    found = {}
    for f in features:
        if f.start_position == 0:
            assert f.end_position == 0
            continue
        e = examples[f.example_index]
        offsets = f.token_to_orig
        assert offsets[f.start_position, 0] >= 0 and offsets[f.end_position, 0] >= 0
        text = e.context_text[offsets[f.start_position, 0]:offsets[f.end_position, 1]]
        found[e.qas_id] = text == e.answer_text
    assert features.num_unalignable == 0
    assert len(found) == len(examples)  # every answer sits whole in at least one window
    inexact = sorted(q for q, ok in found.items() if not ok)
    assert inexact == sorted(features.inexact_ids)
    # Word pieces cannot split "Beyoncé's sixth" into "six": a handful only.
    assert len(inexact) <= 0.02 * len(examples), inexact


# ---------------------------------------------------------------- postprocessing


CONTEXT = "The Denver Broncos beat the Carolina Panthers 24–10 in Super Bowl 50 at Levi's Stadium."


def _toy_features(tokenizer, max_seq_length=64, doc_stride=32, context=CONTEXT):
    example = sq.SquadExample("q1", "Who won Super Bowl 50?", context)
    return [example], sq.convert_examples_to_features([example], tokenizer, max_seq_length, doc_stride, 16, False)


def _pos(feature, context, text, occurrence=0):
    """Window positions (first, last) of the word pieces covering ``text``."""
    start = -1
    for _ in range(occurrence + 1):
        start = context.index(text, start + 1)
    end = start + len(text)
    offs = feature.token_to_orig
    hits = np.flatnonzero((offs[:, 0] >= start) & (offs[:, 1] <= end) & (offs[:, 0] >= 0))
    return int(hits[0]), int(hits[-1])


def _logits(n, spots, base=-5.0):
    x = np.full(n, base, dtype=np.float32)
    for pos, value in spots.items():
        x[pos] = value
    return x


def test_postprocess_picks_span_with_original_text(tokenizer, tmp_path):
    examples, features = _toy_features(tokenizer)
    [f] = features
    s1, e1 = _pos(f, CONTEXT, "Denver Broncos")
    s2, e2 = _pos(f, CONTEXT, "Levi's Stadium")
    start = _logits(64, {s1: 6.0, s2: 4.0})
    end = _logits(64, {e1: 5.0, e2: 3.0})
    preds, odds = write_predictions(examples, features, [RawResult(f.unique_id, start, end)],
                                    n_best_size=5, max_answer_length=30, version_2_with_negative=False,
                                    null_score_diff_threshold=0.0, output_dir=str(tmp_path / "out"))
    assert preds == {"q1": "Denver Broncos"} and odds is None
    with open(tmp_path / "out" / "predictions.json", encoding="utf-8") as fh:
        assert json.load(fh) == {"q1": "Denver Broncos"}
    with open(tmp_path / "out" / "nbest_predictions.json", encoding="utf-8") as fh:
        nbest = json.load(fh)["q1"]
    assert not (tmp_path / "out" / "null_odds.json").exists()
    assert [set(e) for e in nbest] == [{"text", "probability", "start_logit", "end_logit"}] * len(nbest)
    assert len(nbest) <= 5 and len({e["text"] for e in nbest}) == len(nbest)
    totals = [e["start_logit"] + e["end_logit"] for e in nbest]
    assert totals == sorted(totals, reverse=True)
    probs = [e["probability"] for e in nbest]
    assert sum(probs) == pytest.approx(1.0) and probs == sorted(probs, reverse=True)
    assert "Levi's Stadium" in [e["text"] for e in nbest]  # punctuation and case exact
    assert [p for p in os.listdir(tmp_path / "out") if p.endswith(".tmp")] == []


def test_postprocess_respects_max_answer_length_and_order(tokenizer, tmp_path):
    examples, features = _toy_features(tokenizer)
    [f] = features
    s1, _ = _pos(f, CONTEXT, "Denver")
    _, e_far = _pos(f, CONTEXT, "Stadium")
    s2, e2 = _pos(f, CONTEXT, "Carolina Panthers")
    start = _logits(64, {s1: 9.0, s2: 1.0, 0: 20.0})        # [CLS] is never a v1.1 answer
    end = _logits(64, {e_far: 9.0, e2: 3.0, s1 - 1: 15.0})  # end before start is invalid
    results = [RawResult(f.unique_id, start, end)]
    out = str(tmp_path)
    long_span = e_far - s1 + 1
    preds, _ = write_predictions(examples, features, results, 3, long_span, False, 0.0, out)
    assert preds["q1"] == CONTEXT[CONTEXT.index("Denver"):CONTEXT.index("Stadium") + 7]
    preds, _ = write_predictions(examples, features, results, 3, long_span - 1, False, 0.0, out)
    # (Denver, Panthers) = 12 beats (Carolina, Stadium) = 10 and (Carolina, Panthers) = 4
    assert preds["q1"] == CONTEXT[CONTEXT.index("Denver"):CONTEXT.index("Panthers") + 8]


def test_postprocess_uses_max_context_window(tokenizer, tmp_path):
    context = " ".join(f"w{i}" for i in range(60)) + " Denver Broncos " + " ".join(f"v{i}" for i in range(60))
    examples, features = _toy_features(tokenizer, 48, 8, context)
    assert len(features) > 3
    results = []
    for f in features:
        start, end = _logits(48, {}), _logits(48, {})
        if (f.token_to_orig[:, 0] == context.index("Denver")).any():
            s, e = _pos(f, context, "Denver Broncos")
            # only the max-context window of "Denver" may answer; others carry a fake better span
            bonus = 0.0 if f.token_is_max_context[s] else 5.0
            start[s], end[e] = 3.0 + bonus, 3.0 + bonus
        results.append(RawResult(f.unique_id, start, end))
    preds, _ = write_predictions(examples, features, results, 5, 10, False, 0.0, str(tmp_path))
    assert preds["q1"] == "Denver Broncos"
    with pytest.raises(ValueError, match="no result"):
        write_predictions(examples, features, results[1:], 5, 10, False, 0.0, str(tmp_path))


def test_postprocess_v2_null_threshold(tokenizer, tmp_path):
    examples, features = _toy_features(tokenizer)
    [f] = features
    s, e = _pos(f, CONTEXT, "Denver Broncos")
    start = _logits(64, {s: 4.0, 0: 3.0})
    end = _logits(64, {e: 4.0, 0: 2.0})
    results = [RawResult(f.unique_id, start, end)]
    # null 5.0 vs span 8.0: diff -3
    preds, odds = write_predictions(examples, features, results, 5, 30, True, 0.0, str(tmp_path))
    assert preds["q1"] == "Denver Broncos" and odds["q1"] == pytest.approx(-3.0)
    preds, _ = write_predictions(examples, features, results, 5, 30, True, -3.5, str(tmp_path))
    assert preds["q1"] == ""
    with open(tmp_path / "null_odds.json", encoding="utf-8") as fh:
        assert json.load(fh)["q1"] == pytest.approx(-3.0)
    with open(tmp_path / "nbest_predictions.json", encoding="utf-8") as fh:
        nbest = json.load(fh)["q1"]
    assert "" in [x["text"] for x in nbest]
    # a dominant [CLS] predicts "" with the default threshold
    results = [RawResult(f.unique_id, _logits(64, {s: 1.0, 0: 9.0}), _logits(64, {e: 1.0, 0: 9.0}))]
    preds, odds = write_predictions(examples, features, results, 5, 30, True, 0.0, str(tmp_path))
    assert preds["q1"] == "" and odds["q1"] == pytest.approx(16.0)


# ---------------------------------------------------------------- end to end


def _oracle_results(features, seq_len):
    results = []
    for f in features:
        start, end = _logits(seq_len, {f.start_position: 10.0}), _logits(seq_len, {f.end_position: 10.0})
        results.append(RawResult(f.unique_id, start, end))
    return results


@WRITTEN_AND_REAL
def test_oracle_end_to_end_dev_v1(tokenizer, data_root, data_source, tmp_path):
    path = _path(data_root, "dev-v1.1.json")
    examples, dataset = _first_articles(sq.read_squad_examples(path, is_training=True), path, 1)
    features = sq.convert_examples_to_features(examples, tokenizer, 384, 128, 64, is_training=True)
    preds, _ = write_predictions(examples, features, _oracle_results(features, 384), 20, 30, False, 0.0,
                                 str(tmp_path))
    score = evaluate_v1(dataset, preds)
    print(f"\noracle dev-v1.1 article 1 ({len(examples)} q): {score}, inexact spans {features.num_inexact}")
    total = _questions(path, 1)
    assert len(preds) == len(examples) == total == (810 if data_source == "real" else total)
    # Every miss is a question whose first gold is part of a word piece ("8" in "20–18",
    # "gold" in "golden"): the oracle can only point at whole word pieces.
    misses = [e.qas_id for e in examples
              if not metric_max_over_ground_truths(exact_match_score, preds[e.qas_id], e.all_answers)]
    assert set(misses) <= set(features.inexact_ids)
    assert score["exact_match"] == pytest.approx(100.0 * (total - len(misses)) / total)
    assert score["exact_match"] >= 97.5 and score["f1"] >= 97.5


@WRITTEN_AND_REAL
def test_oracle_end_to_end_dev_v2(tokenizer, data_root, tmp_path):
    path = _path(data_root, "dev-v2.0.json")
    examples, dataset = _first_articles(sq.read_squad_examples(path, True, True), path, 1)
    features = sq.convert_examples_to_features(examples, tokenizer, 384, 128, 64, is_training=True)
    preds, odds = write_predictions(examples, features, _oracle_results(features, 384), 20, 30, True, 0.0,
                                    str(tmp_path))
    score = evaluate_v2(dataset, preds, na_probs=odds)
    print(f"\noracle dev-v2.0 article 1 ({len(examples)} q): {dict(score)}")
    assert score["NoAns_exact"] == 100.0
    assert score["exact"] >= 99.0
