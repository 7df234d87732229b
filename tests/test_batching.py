"""Batch plans, dynamic padding, length-sorted inference and the feature cache."""

import os

import numpy as np
import pytest

from adapter_bert.data import batching
from adapter_bert.data.feature_cache import FeatureCache, records_digest
from tests.conftest import tiny_inputs

KEYS = ("input_ids", "input_mask", "segment_ids")


def ragged_features(count=13, seq=24, seed=0):
    """Features whose real lengths vary from 3 to `seq` tokens, zero-padded after."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, seq + 1, size=count)
    lengths[0] = seq  # at least one full-width row
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(1, 60, size=(count, seq)).astype(np.int32) * mask
    segments = ((np.arange(seq)[None, :] >= lengths[:, None] // 2) * mask).astype(np.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments,
            "label_ids": rng.integers(0, 2, size=count).astype(np.int32),
            "is_real_example": np.ones(count, np.int32)}, lengths


def test_padded_widths_round_up_to_the_multiple_and_cap_at_max():
    widths = batching.padded_widths(np.array([0, 1, 8, 9, 17, 30]), max_seq_length=24)
    assert widths.tolist() == [8, 8, 8, 16, 24, 24]


def test_plan_without_lengths_is_one_seeded_permutation_per_epoch():
    plan = batching.training_batch_plan(12, 4, num_steps=6, seed=3)
    assert plan.shape == (6, 4)
    for epoch in (plan[:3].ravel(), plan[3:].ravel()):
        assert sorted(epoch.tolist()) == list(range(12))
    assert not np.array_equal(plan[:3], plan[3:])
    np.testing.assert_array_equal(plan, batching.training_batch_plan(12, 4, 6, seed=3))
    assert not np.array_equal(plan, batching.training_batch_plan(12, 4, 6, seed=4))


def test_bucketed_plan_groups_similar_lengths_and_covers_every_example():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 128, size=2000)
    steps = 2000 // 20
    plan = batching.training_batch_plan(2000, 20, steps, seed=1, lengths=lengths,
                                        pool_batches=10)
    random = batching.training_batch_plan(2000, 20, steps, seed=1)
    spread = lambda p: np.mean(lengths[p].max(1) - lengths[p].min(1))  # noqa: E731
    assert spread(plan) < spread(random) / 5
    # One epoch of batches (pools end on epoch boundaries here) holds every example once.
    assert sorted(plan.ravel().tolist()) == list(range(2000))
    # Batch order is shuffled, not sorted by length across the epoch.
    assert not np.all(np.diff(lengths[plan].max(1)) >= 0)


def test_plan_rejects_an_empty_set():
    with pytest.raises(ValueError, match="0 examples"):
        batching.training_batch_plan(0, 4, 2, seed=0)


def test_dynamic_training_batches_are_cut_to_their_widest_example():
    features, lengths = ragged_features()
    plan = batching.training_batch_plan(13, 4, num_steps=5, seed=0, lengths=lengths)
    dynamic = list(batching.training_dataset(features, plan, KEYS, ["label_ids"], True))
    fixed = list(batching.training_dataset(features, plan, KEYS, ["label_ids"], False))
    assert len(dynamic) == len(fixed) == 5
    for rows, (inputs, labels), (full, _) in zip(plan, dynamic, fixed):
        width = batching.padded_widths(lengths[rows].max(keepdims=True), 24)[0]
        assert inputs["input_ids"].shape == (4, width)
        assert full["input_ids"].shape == (4, 24)
        np.testing.assert_array_equal(inputs["input_ids"], features["input_ids"][rows, :width])
        np.testing.assert_array_equal(labels, features["label_ids"][rows])
        # Nothing real was cut off.
        assert full["input_mask"].numpy()[:, width:].sum() == 0


def test_fixed_training_batches_have_static_shapes():
    features, _ = ragged_features()
    plan = batching.training_batch_plan(13, 4, num_steps=2, seed=0)
    spec = batching.training_dataset(features, plan, KEYS, ["label_ids"], False).element_spec
    assert spec[0]["input_ids"].shape.as_list() == [4, 24]


@pytest.fixture
def span_model(tiny_config):
    from adapter_bert.model.heads import BertSpanNetwork
    model = BertSpanNetwork(tiny_config)
    model(tiny_inputs(batch=1, seq=4), training=False)
    return model


@pytest.mark.parametrize("dynamic,static", [(True, False), (False, True)])
def test_predictions_match_fixed_padding_in_the_original_order(span_model, dynamic, static):
    features, lengths = ragged_features()
    reference = batching.predict_features(span_model, features, KEYS, 4, dynamic=False,
                                          static_shapes=False,
                                          per_token_outputs=("start_logits", "end_logits"))
    outputs = batching.predict_features(span_model, features, KEYS, 4, dynamic=dynamic,
                                        static_shapes=static,
                                        per_token_outputs=("start_logits", "end_logits"))
    for key in ("start_logits", "end_logits"):
        assert outputs[key].shape == (13, 24)
        real = features["input_mask"].astype(bool)
        np.testing.assert_allclose(outputs[key][real], reference[key][real], atol=1e-5)
    if dynamic:
        # Positions beyond a batch's width are filled far below any real logit.
        short = int(np.argmin(lengths))
        width = batching.padded_widths(lengths[short:short + 1], 24)[0]
        if width < 24:
            assert np.all(outputs["start_logits"][short, width:] == batching.OUTPUT_FILL)


def test_classifier_predictions_keep_their_order(tiny_config):
    from adapter_bert.model.heads import BertClassifierNetwork
    model = BertClassifierNetwork(tiny_config, num_labels=3)
    features, _ = ragged_features(count=9)
    fixed = batching.predict_features(model, features, KEYS, 4, dynamic=False,
                                      static_shapes=False)
    dynamic = batching.predict_features(model, features, KEYS, 4, dynamic=True,
                                        static_shapes=False)
    assert dynamic.shape == (9, 3)
    np.testing.assert_allclose(dynamic, fixed, atol=1e-5)


def test_feature_cache_hits_misses_and_rebuilds(tmp_path):
    cache = FeatureCache(str(tmp_path / "cache"))
    calls = []

    def build():
        calls.append(1)
        return {"x": np.arange(3)}

    first = cache.get_or_build("train", {"a": 1}, build)
    second = cache.get_or_build("train", {"a": 1}, build)
    np.testing.assert_array_equal(first["x"], second["x"])
    assert len(calls) == 1 and cache.hits == 1
    cache.get_or_build("train", {"a": 2}, build)  # another key: built again
    assert len(calls) == 2
    path = cache.path("train", {"a": 1})
    with open(path, "wb") as f:
        f.write(b"truncated")
    np.testing.assert_array_equal(cache.get_or_build("train", {"a": 1}, build)["x"], np.arange(3))
    assert len(calls) == 3
    assert not [n for n in os.listdir(tmp_path / "cache") if n.endswith(".tmp")]


def test_feature_cache_location_from_the_flag(tmp_path):
    assert FeatureCache.for_run("none", str(tmp_path)).directory is None
    assert FeatureCache.for_run(None, str(tmp_path)).directory == str(tmp_path / "feature_cache")
    assert FeatureCache.for_run(str(tmp_path / "c"), "out").directory == str(tmp_path / "c")


def test_records_digest_sees_every_field():
    from adapter_bert.data.glue import InputExample
    a = [InputExample("1", "a b", "c", "0")]
    assert records_digest(a) == records_digest([InputExample("1", "a b", "c", "0")])
    assert records_digest(a) != records_digest([InputExample("1", "a b", "c", "1")])
