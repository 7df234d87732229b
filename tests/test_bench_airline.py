"""bench/airline.py: the documented split (stratified, fixed, never the same row twice),
the table over seeds, and the peers' multi-class scores against scikit-learn."""

import collections
import csv

import numpy as np
import pytest

from tests.conftest import bench_module

airline = bench_module("airline")
peer_glue = bench_module("peer_glue")


def _tweets(path, counts):
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["tweet_id", "airline_sentiment", "text"])
        row = 0
        for label, count in counts.items():
            for _ in range(count):
                writer.writerow([row, label, f'tweet {row}, "{label}"\nsecond line'])
                row += 1


def _read(path):
    with open(path, encoding="utf-8", newline="") as f:
        return [(row["text"], row["label"]) for row in csv.DictReader(f)]


def test_the_split_is_stratified_fixed_and_disjoint(tmp_path):
    source = tmp_path / "Tweets.csv"
    _tweets(source, {"negative": 627, "neutral": 211, "positive": 162})
    digest = airline.write_split(str(source), str(tmp_path / "a"))
    parts = {name: _read(tmp_path / "a" / f"{name}.csv") for name in ("train", "dev", "test")}
    assert {k: len(v) for k, v in parts.items()} == {"train": 800, "dev": 100, "test": 100}
    for name in ("dev", "test"):
        assert collections.Counter(label for _, label in parts[name]) == {
            "negative": 63, "neutral": 21, "positive": 16}
    texts = [text for rows in parts.values() for text, _ in rows]
    assert len(set(texts)) == 1000
    assert airline.write_split(str(source), str(tmp_path / "b")) == digest
    assert _read(tmp_path / "b" / "test.csv") == parts["test"]


def test_the_table_averages_each_systems_seeds():
    records = {f"adapters_seed{s}": {"system": "adapters", "seed": s, "test_accuracy": a,
                                     "test_macro_f1": 70.0, "dev_accuracy": 80.0,
                                     "trainable_params": 755331, "wall_s": 100.0}
               for s, a in ((42, 80.0), (43, 82.0), (44, 84.0))}
    table = airline.table(records, 62.7)
    assert "| adapter-bert, Houlsby adapters (size 64), defaults | 42, 43, 44 | 82.00 ± 2.00 | " \
           "70.00 ± 0.00 | 80.00 ± 0.00 | 755,331 |" in table
    assert "Majority class (negative) on test: 62.70" in table
    assert "every seed run" not in table


def test_seeds_beyond_42_44_are_a_line_of_their_own():
    def record(system, seed, accuracy):
        return {"system": system, "seed": seed, "test_accuracy": accuracy,
                "test_macro_f1": 70.0, "dev_accuracy": 80.0, "trainable_params": 1000}
    records = {f"{system}_seed{s}": record(system, s, a)
               for system, runs in (("adapters", ((42, 80.0), (43, 82.0), (44, 84.0),
                                                  (45, 86.0))),
                                    ("full", ((42, 81.0), (43, 81.0), (44, 81.0))))
               for s, a in runs}
    table = airline.table(records, 62.7)
    # The rows compare the seeds every system ran; the extra seed is reported apart.
    assert "| 42, 43, 44 | 82.00 ± 2.00 |" in table
    assert "Test accuracy over every seed run: adapter-bert, Houlsby adapters (size 64), " \
           "defaults 83.00 ± 2.58 (seeds 42, 43, 44, 45)." in table
    assert "full fine-tuning (`--tuning_mode=full`) 81" not in table


@pytest.mark.parametrize("seed", [0, 1])
def test_the_peers_multiclass_scores_equal_scikit_learn(seed):
    from sklearn import metrics
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, 300).tolist()
    predictions = [y if rng.random() < 0.7 else int(rng.integers(0, 3)) for y in labels]
    scores = peer_glue.multiclass_scores(predictions, labels, 3, "test")
    assert scores["test_accuracy"] == pytest.approx(
        100 * metrics.accuracy_score(labels, predictions), rel=1e-12)
    assert scores["test_macro_f1"] == pytest.approx(
        100 * metrics.f1_score(labels, predictions, average="macro"), rel=1e-12)


def test_our_runs_name_their_dtype_so_a_record_means_the_same_on_every_cpu(
        tmp_path, monkeypatch):
    # --dtype=auto (the runners' default) is bfloat16 on some CPUs and float32 on others.
    commands = []
    monkeypatch.setattr(airline, "_run", commands.append)
    monkeypatch.setattr(airline, "read_eval_results", lambda path: {
        "eval_accuracy": 0.8, "eval_macro_f1": 0.7, "trainable_params": 1.0,
        "all_params": 2.0})
    record = airline._ours("full", 42, str(tmp_path))
    assert len(commands) == 2  # train and dev, then test
    for command in commands:
        assert "--dtype=float32" in command and "--tuning_mode=full" in command
    assert record["command"].endswith("--seed=42 --dtype=float32 --tuning_mode=full")
