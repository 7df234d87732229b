"""bench/own_data_io.py: the file it writes trains through run_classifier.py, the second
run takes the features from the cache, and the table measures runs above the loaded model."""

import csv

import pytest

from tests.conftest import bench_module

own_data_io = bench_module("own_data_io")


@pytest.mark.slow
def test_a_second_run_reads_the_cache(tmp_path):
    path = tmp_path / "news.csv"
    own_data_io.write_file(str(path), 300)
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 300 and {row["label"] for row in rows} == set(own_data_io.TOPICS)
    runs = [own_data_io.run_once(str(path), 300, str(tmp_path), str(tmp_path / "cache"))
            for _ in range(2)]
    assert [run["cache_hit"] for run in runs] == [False, True]
    assert list((tmp_path / "cache").glob("news-train-*.npz"))
    # One chunk of rows: no tokenising progress line to read.
    assert all(run["tokenise_s"] is None and run["peak_rss_bytes"] > 10**8 for run in runs)


def test_the_table_measures_each_run_above_the_loaded_model():
    result = {"cpu": "a CPU", "baseline": {"wall_s": 20.0, "peak_rss_bytes": 10**9},
              "runs": [{"rows": 400000, "run": "first", "wall_s": 40.0, "tokenise_s": 12,
                        "cache_hit": False, "peak_rss_bytes": 1.6 * 10**9},
                       {"rows": 400000, "run": "second", "wall_s": 30.0, "tokenise_s": None,
                        "cache_hit": True, "peak_rss_bytes": 1.8 * 10**9}]}
    lines = own_data_io.markdown(result).splitlines()
    assert lines[2] == "| 400 | the loaded model | 20.0 | - | 1000 | 0 |"
    assert lines[3] == "| 400,000 | first | 40.0 | 12 | 1600 | 600 |"
    assert lines[4] == "| 400,000 | second (cache) | 30.0 | - | 1800 | 800 |"
    assert lines[-1] == "CPU: a CPU."
