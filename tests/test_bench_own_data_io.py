"""bench/own_data_io.py: the file it writes reads back through the runner's path, and a
second run takes the features from the cache."""

import csv

from tests.conftest import bench_module

own_data_io = bench_module("own_data_io")


def test_a_second_run_reads_the_cache(tmp_path):
    path = tmp_path / "news.csv"
    own_data_io.write_file(str(path), 300)
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 300 and {row["label"] for row in rows} == set(own_data_io.TOPICS)
    first = own_data_io.measure(str(path), str(tmp_path / "cache"))
    second = own_data_io.measure(str(path), str(tmp_path / "cache"))
    assert (first["rows"], first["cache_hit"]) == (300, False)
    assert (second["rows"], second["cache_hit"]) == (300, True)
    assert first["feature_bytes"] == second["feature_bytes"] == 300 * (3 * 128 * 4 + 2 * 4)
