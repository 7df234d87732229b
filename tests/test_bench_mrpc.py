"""bench/mrpc_adapter_vs_full.py: seeds, merging with earlier results, the summary table."""

import argparse
import json

import pytest

from tests.conftest import bench_module

bench = bench_module("mrpc_adapter_vs_full")


def row(mode, seed, acc, f1, with_seed_field=True):
    command = (f"run_classifier.py --seed={seed} --tuning_mode={mode} "
               f"--learning_rate={'1e-3' if mode == 'adapter' else '5e-5'}")
    fields = {"mode": mode, "command": command, "wall_s": 60.0, "dev_accuracy": acc,
              "dev_f1": f1, "trainable_params": 1, "all_params": 2, "trainable_percent": 50.0}
    return {**fields, "seed": seed} if with_seed_field else fields


def test_rows_from_before_seeds_merge_by_mode_and_seed(tmp_path):
    path = tmp_path / "r.json"
    settings = {"max_seq_length": 128, "batch_size": 32, "epochs": 3.0}
    path.write_text(json.dumps({"settings": {**settings, "seed": 42},
                                "runs": [row("adapter", 42, 70.0, 80.0, False),
                                         row("full", 42, 75.0, 85.0, False)]}))
    merged = bench.merge_rows(str(path), settings, [row("adapter", 43, 72.0, 81.0),
                                                    row("full", 42, 76.0, 86.0)])
    assert [(r["mode"], bench.row_seed(r), r["dev_accuracy"]) for r in merged] == [
        ("adapter", 42, 70.0), ("adapter", 43, 72.0), ("full", 42, 76.0)]


def test_other_settings_drop_earlier_rows(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"settings": {"epochs": 10.0}, "runs": [row("full", 42, 1, 2)]}))
    assert bench.merge_rows(str(path), {"epochs": 3.0}, [row("adapter", 42, 3, 4)]) == [
        row("adapter", 42, 3, 4)]


def test_summary_is_mean_and_sample_sd_per_mode():
    rows = [row("adapter", 42, 78.0, 85.0), row("adapter", 43, 80.0, 86.0),
            row("adapter", 44, 82.0, 87.5), row("full", 42, 83.0, 88.0)]
    table = bench.markdown(rows)
    # mean 80, sample sd sqrt(((-2)^2 + 0 + 2^2) / 2) = 2; F1 mean 86.17, sd 1.26
    assert ("| adapter | 1e-3, Google (uncorrected) | 42,43,44 | 80.00 ± 2.00 | 86.17 ± 1.26 |"
            in table)
    assert "| full | 5e-5, Google (uncorrected) | 42 | 83.00 | 88.00 |" in table
    assert "Mean ± sample standard deviation" not in bench.markdown(rows[:1] + rows[3:])


@pytest.mark.parametrize("text, error", [("42,x", "comma-separated integers"),
                                         ("42,42", "repeats a seed")])
def test_bad_seeds_name_the_flag(text, error, capsys):
    parser = argparse.ArgumentParser(prog="bench")
    with pytest.raises(SystemExit):
        bench.parse_seeds(parser, text)
    err = capsys.readouterr().err
    assert "--seeds: " in err and error in err
    assert bench.parse_seeds(parser, "7,3") == [7, 3]
