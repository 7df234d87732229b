"""bench/table2.py: the documented split (stratified, fixed, disjoint, a set's own split
kept), the caps (every label kept, proportions by largest remainder), the length choice,
the selection bookkeeping and the table's arithmetic, on tiny sets."""

import collections
import csv
import json
import statistics

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.conftest import bench_module

table2 = bench_module("table2")
table2_table = bench_module("table2_table")


def _labels(counts):
    return [label for label, count in counts.items() for _ in range(count)]


def test_the_split_is_stratified_fixed_and_disjoint():
    labels = _labels({"a": 600, "b": 300, "c": 100})
    parts = table2.split_rows(labels, caps={})
    assert {p: len(v) for p, v in parts.items()} == {"train": 800, "dev": 100, "test": 100}
    for part in ("dev", "test"):
        assert collections.Counter(labels[i] for i in parts[part]) == {"a": 60, "b": 30, "c": 10}
    every = [i for rows in parts.values() for i in rows]
    assert sorted(every) == list(range(1000))
    assert table2.split_rows(labels, caps={}) == parts
    assert table2.split_rows(labels, caps={}, seed=1) != parts


def test_a_sets_own_test_split_is_kept_and_dev_comes_from_its_training_rows():
    labels = _labels({"a": 50, "b": 50}) * 2  # rows 0-99 train, 100-199 test
    own = ["train"] * 100 + ["test"] * 100
    parts = table2.split_rows(labels, own, caps={})
    assert parts["test"] == list(range(100, 200))
    assert len(parts["dev"]) == 10 and max(parts["dev"]) < 100
    assert sorted(parts["train"] + parts["dev"]) == list(range(100))


def test_own_row_ranges_and_a_split_column_name_each_rows_part(tmp_path):
    folder = tmp_path / "news_aggregator"
    folder.mkdir()
    with open(folder / "data.csv", "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["text", "label"]] + [[f"t{i}", "x"] for i in range(13356)])
    _, _, own = table2.read_set(table2.find_sets(str(tmp_path), None)[0])
    assert collections.Counter(own) == {"train": 10684, "dev": 1336, "test": 1336}
    assert own[10683] == "train" and own[10684] == "dev" and own[12020] == "test"
    other = tmp_path / "other"
    other.mkdir()
    with open(other / "data.csv", "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["text", "label", "split"], ["a", "x", "test"],
                                 ["b", "y", "train"]])
    _, labels, own = table2.read_set(table2.DataSet("other", str(other / "data.csv")))
    assert (labels, own) == (["x", "y"], ["test", "train"])


def test_caps_keep_every_label_and_share_the_rest_in_proportion():
    labels = _labels({"big": 970, "mid": 27, "rare": 3})
    kept = table2.stratified_cap(range(1000), labels, 100, np.random.RandomState(0))
    counts = collections.Counter(labels[i] for i in kept)
    # One row each, then 97 shared by (969, 26, 2) / 997 = 94.28, 2.53, 0.19: floors 94, 2, 0
    # and the one row left to the largest remainder (mid).
    assert counts == {"big": 95, "mid": 4, "rare": 1}
    assert len(set(kept)) == 100
    with pytest.raises(ValueError, match="cannot keep each of 3 labels"):
        table2.stratified_cap(range(1000), labels, 2, np.random.RandomState(0))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=6), st.integers(1, 300))
def test_a_cap_is_exact_and_never_takes_more_of_a_label_than_it_has(counts, cap):
    labels = _labels({f"l{i}": c for i, c in enumerate(counts)})
    cap = max(cap, len(counts))
    kept = table2.stratified_cap(range(len(labels)), labels, cap, np.random.RandomState(1))
    assert len(kept) == min(cap, len(labels)) and len(set(kept)) == len(kept)
    got = collections.Counter(labels[i] for i in kept)
    assert set(got) == set(labels)
    for label, count in got.items():
        assert count <= labels.count(label)


def test_the_split_is_capped_per_part():
    labels = _labels({"a": 900, "b": 100})
    parts = table2.split_rows(labels, caps={"train": 80, "dev": 20, "test": 50})
    assert {p: len(v) for p, v in parts.items()} == {"train": 80, "dev": 20, "test": 50}
    assert collections.Counter(labels[i] for i in parts["test"]) == {"a": 45, "b": 5}


@pytest.mark.parametrize("lengths, expected", [
    ([10] * 100, 64), ([70] * 100, 96), ([1000] * 100, 128), (list(range(1, 101)), 96)])
def test_max_seq_length_is_the_95th_percentile_rounded_up(lengths, expected):
    assert table2.sequence_length(lengths) == expected


def test_the_written_split_has_a_fixed_digest(tmp_path):
    source = tmp_path / "s" / "data.csv"
    source.parent.mkdir()
    with open(source, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for i in range(200):
            writer.writerow([f'text {i}, "quoted"\nsecond line', "yes" if i % 4 else "no"])
    data = table2.DataSet("s", str(source))
    first = table2.write_split(data, str(tmp_path / "a"))
    again = table2.write_split(data, str(tmp_path / "b"))
    assert first["split_digest"] == again["split_digest"] == table2.split_digest(
        str(tmp_path / "a"))
    assert first["rows"] == {"train": 160, "dev": 20, "test": 20}
    assert first["majority_test_accuracy"] == 75.0 and first["labels"] == 2
    with open(tmp_path / "a" / "test.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 20 and rows[0]["text"].endswith("second line")


def test_the_plan_runs_seed_42_then_the_defaults_seeds_then_sweeps_then_the_peer_then_full():
    order = table2.plan(["s1", "s2"])
    assert order[:6] == [("s1", "tfidf", 42), ("s1", "adapters", 42), ("s1", "full", 42),
                         ("s2", "tfidf", 42), ("s2", "adapters", 42), ("s2", "full", 42)]
    assert order[6:14] == [("s1", "adapters", 43), ("s1", "full", 43),
                           ("s1", "adapters", 44), ("s1", "full", 44),
                           ("s2", "adapters", 43), ("s2", "full", 43),
                           ("s2", "adapters", 44), ("s2", "full", 44)]
    assert order[14:18] == [("s1", "adapters_selected", 42), ("s1", "variable", 42),
                            ("s2", "adapters_selected", 42), ("s2", "variable", 42)]
    assert order[18] == ("s1", "adapters_selected", 43)
    assert order[26:32] == [(s, "adapterhub", seed) for s in ("s1", "s2") for seed in (42, 43, 44)]
    assert order[32:] == [("s1", "full_selected", 42), ("s2", "full_selected", 42),
                          ("s1", "full_selected", 43), ("s1", "full_selected", 44),
                          ("s2", "full_selected", 43), ("s2", "full_selected", 44)]
    assert len(order) == 2 * (3 + 2 + 8 + 3 + 3)
    assert not any(c == "adapterhub" for _, c, _ in
                   table2.plan(["s1"], [c for c in table2.CELLS if c != "adapterhub"]))
    assert table2.plan(["s1", "s2"], ["tfidf", "full"]) == [
        ("s1", "tfidf", 42), ("s1", "full", 42), ("s2", "tfidf", 42), ("s2", "full", 42),
        ("s1", "full", 43), ("s1", "full", 44), ("s2", "full", 43), ("s2", "full", 44)]


@pytest.mark.parametrize("cell, default_cell, rate, mode", [
    ("adapters_selected", "adapters", "0.001", []),
    ("full_selected", "full", "5e-05", ["--tuning_mode=full"])])
def test_a_chosen_default_point_reuses_the_default_runs(monkeypatch, cell, default_cell, rate,
                                                        mode):
    ran = []
    monkeypatch.setattr(table2, "run_ours", lambda *a: ran.append(a[1]) or {"flags": a[1]})
    default = {"test_accuracy": 80.0, "flags": mode}
    records = {f"{cell}_seed42": {"chosen": {"learning_rate": rate, "num_train_epochs": "3"},
                                  "flags": [*mode, f"--learning_rate={rate}",
                                            "--num_train_epochs=3"]},
               f"{default_cell}_seed43": default,
               "adapters_seed43" if cell == "full_selected" else "full_seed43": {"flags": []}}
    got = table2.run_cell("s", cell, 43, "w", {}, records, None)
    assert got == {**default, "same_run_as": f"{default_cell}_seed43"} and ran == []
    # Another chosen point trains with its own flags.
    records[f"{cell}_seed42"]["chosen"]["num_train_epochs"] = "10"
    records[f"{cell}_seed42"]["flags"][-1] = "--num_train_epochs=10"
    table2.run_cell("s", cell, 43, "w", {}, records, None)
    assert ran == [[*mode, f"--learning_rate={rate}", "--num_train_epochs=10"]]
    # Before seed 42's selection there is nothing to run.
    assert table2.run_cell("s", "variable", 43, "w", {}, {}, None) is None


def test_a_sweeps_points_are_read_with_their_dev_accuracy(tmp_path):
    path = tmp_path / "sweep_results.tsv"
    path.write_text("learning_rate\tnum_train_epochs\teval_accuracy\teval_loss\twall_s\t"
                    "trainable_params\tselected\n3e-4\t3\t0.8\t0.5\t10\t100\t\n"
                    "1e-3\t3\t0.85\t0.4\t10\t100\tyes\n", encoding="utf-8")
    assert table2.read_sweep_points(str(path)) == [
        {"learning_rate": "3e-4", "num_train_epochs": "3", "dev_accuracy": 80.0,
         "selected": False},
        {"learning_rate": "1e-3", "num_train_epochs": "3", "dev_accuracy": 85.0,
         "selected": True}]


def test_a_records_figures_come_from_the_runners_two_results_files(tmp_path):
    (tmp_path / "eval_results.txt").write_text(
        "all_params = 1000\neval_accuracy = 0.75\neval_macro_f1 = 0.5\n"
        "trainable_params = 30\n")
    (tmp_path / "test_eval_results.txt").write_text(
        "test_accuracy = 0.8\ntest_loss = 0.6\ntest_macro_f1 = 0.7\n")
    read = table2.read_eval_results
    assert table2.scores(read(str(tmp_path / "eval_results.txt")),
                         read(str(tmp_path / "test_eval_results.txt"))) == {
        "dev_accuracy": 75.0, "test_accuracy": 80.0, "test_macro_f1": 70.0,
        "trainable_params": 30, "all_params": 1000}


def _record(accuracy, trainable=100, total=1000):
    return {"test_accuracy": accuracy, "trainable_params": trainable, "all_params": total,
            "chosen": {"top_k_layers": "2"}}


def test_the_table_gives_mean_and_sem_and_averages_complete_sets_only():
    full_seeds = {f"{cell}_seed{s}": _record(a + offset)
                  for cell, offset in (("full", 0), ("full_selected", 0.5), ("variable", 1),
                                       ("adapters", 2), ("adapters_selected", 3))
                  for s, a in zip(table2.SEEDS, (80.0, 82.0, 84.0))}
    full_seeds["full_selected_seed42"]["chosen"] = {"learning_rate": "5e-5",
                                                    "num_train_epochs": "10"}
    full_seeds["adapters_selected_seed42"]["chosen"] = {"learning_rate": "1e-3",
                                                        "num_train_epochs": "3"}
    by_set = {"news_aggregator": {"tfidf": {"test_accuracy": 70.0, "trainable_params": 5},
                                  **full_seeds},
              "other": {"tfidf": {"test_accuracy": 10.0, "trainable_params": 5},
                        "full_seed42": _record(50.0)}}
    infos = {"news_aggregator": {"rows": {"train": 10, "dev": 2, "test": 3},
                                 "max_seq_length": 64}}
    markdown = table2_table.table(by_set, infos)
    sem = statistics.stdev([80.0, 82.0, 84.0]) / 3 ** 0.5
    assert f"| news_aggregator | 10/2/3 | 64 | 70.0 | 82.0 ± {sem:.1f} | 82.5 ± {sem:.1f} | " \
           f"83.0 ± {sem:.1f} | 85.0 ± {sem:.1f} | 84.0 ± {sem:.1f} | — | " \
           "95.2 / 96.3 / 96.5 / 96.2 |" in markdown
    # `other` has one seed of one cell: shown, but not in the average.
    assert "| other | ?/?/? | ? | 10.0 | 50.0 (1) | — | — | — | — | — | — |" in markdown
    assert "| average over 1 complete sets | | | 70.00 | 82.00 | 82.50 | 83.00 | 85.00 | " \
        "84.00 | — |" in markdown
    assert "each selected on dev, as the paper compares them, averaged over the 1 sets where " \
        "both have all 3 seeds: 85.00 against 82.50 (+2.50)." in markdown
    assert "| trained parameters per task | | | — | 10.0% |" in markdown
    assert "| set | full fine-tuning, selected | variable fine-tuning (top k) | adapters, " \
        "selected |" in markdown
    assert "| news_aggregator | 5e-5, 10 epochs | top 2 | 1e-3, 3 epochs |" in markdown
    assert "| other |" not in markdown.split("Chosen on dev")[1]  # nothing chosen there
    assert "| ? / 73.7 / 74.0 / 73.3 (17 sets) |" in markdown  # no source here gives the first
    assert "| ? / 100% / ? / 1.14% |" in markdown


def test_a_cell_short_of_its_seeds_shows_how_many_it_has():
    assert table2_table.cell_text([_record(80.0), _record(82.0)]) == "81.0 ± 1.0 (2)"
    assert table2_table.cell_text([_record(80.0)]) == "80.0 (1)"
    assert table2_table.cell_text([_record(80.0)], expected=1) == "80.0"  # TF-IDF: one run
    assert table2_table.cell_text([]) == "—"


def test_the_records_round_trip_through_the_table_file(tmp_path):
    folder = tmp_path / "results" / "news_aggregator"
    folder.mkdir(parents=True)
    (folder / "tfidf.json").write_text(json.dumps({"test_accuracy": 91.0,
                                                   "trainable_params": 3}))
    markdown = table2_table.write_table(str(tmp_path / "results"), {"news_aggregator": {
        "rows": {"train": 1, "dev": 1, "test": 1}, "max_seq_length": 64}})
    assert "| 91.0 |" in markdown
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["records"]["news_aggregator"]["tfidf"]["test_accuracy"] == 91.0


def test_adapters_and_full_are_averaged_over_the_sets_both_finished():
    finished = {f"{cell}_seed{s}": _record(a + (5.0 if cell == "adapters" else 0.0))
                for cell in ("adapters", "full") for s, a in zip(table2.SEEDS, (60.0, 61.0, 65.0))}
    half = {"adapters_seed42": _record(10.0), "full_seed42": _record(90.0),
            "full_seed43": _record(90.0), "full_seed44": _record(90.0)}
    count, (adapters, full) = table2_table.paired_average({"a": finished, "b": half},
                                                    ("adapters", "full"))
    assert (count, adapters, full) == (1, 67.0, 62.0)
    assert table2_table.paired_average({"b": half}, ("adapters", "full")) is None
    markdown = table2_table.table({"a": finished, "b": half}, {})
    assert "Adapters against full fine-tuning, at their defaults, averaged over the 1 sets " \
        "where both have all 3 seeds: 67.00 against 62.00 (+5.00)." in markdown
    assert "selected on dev" not in markdown  # no selected cell has all its seeds


def test_run_time_is_summed_by_cpu_and_a_reused_run_counts_once():
    zen3 = {"model": "AMD EPYC", "cores": 2, "avx512": False, "bf16_flags": []}
    xeon = {"model": "Xeon", "cores": 2, "avx512": True, "bf16_flags": ["amx_bf16", "avx512_bf16"]}
    by_set = {"a": {"full_seed42": {"wall_s": 5400, "cpu": zen3},
                    "adapters_seed42": {"wall_s": 1800, "cpu": zen3},
                    "adapters_selected_seed43": {"wall_s": 1800, "cpu": zen3,
                                                 "same_run_as": "adapters_seed43"}},
              "b": {"tfidf": {"wall_s": 360, "cpu": xeon}, "split": {"rows": {}}}}
    assert table2_table.compute_text(by_set) == (
        "Run time: 2.0 h on 2 AMD EPYC cores (without AVX-512); "
        "0.1 h on 2 Xeon cores (AVX-512, amx_bf16, avx512_bf16).")
    assert table2_table.compute_text({}) == "Run time: none yet."


def test_the_committed_table_reads_every_set_folder_with_a_split(tmp_path):
    for name, accuracy in (("news_aggregator", 91.0), ("crowdflower_disasters", 80.0)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "split.json").write_text(json.dumps({"rows": {"train": 4, "dev": 2, "test": 2},
                                                       "max_seq_length": 64}))
        (folder / "tfidf.json").write_text(json.dumps({"test_accuracy": accuracy,
                                                       "trainable_params": 3}))
    (tmp_path / "stray").mkdir()  # no split.json: not a set
    markdown = table2_table.committed_table(str(tmp_path))
    rows = [line.split(" | ")[0] for line in markdown.splitlines() if "4/2/2" in line]
    assert rows == ["| crowdflower_disasters", "| news_aggregator"]
    assert "| 91.0 |" in markdown and "| 80.0 |" in markdown and "stray" not in markdown


def test_runs_made_side_by_side_count_for_their_share_of_the_time():
    cpu = {"model": "X", "cores": 2, "avx512": False, "bf16_flags": []}
    by_set = {"a": {"full_seed42": {"wall_s": 7200, "cpu": cpu, "jobs": 2},
                    "full_seed43": {"wall_s": 3600, "cpu": cpu}}}
    assert table2_table.compute_text(by_set) == "Run time: 2.0 h on 2 X cores (without AVX-512)."


def _plan_log(jobs, fail=None):
    import threading
    import time
    events, lock = [], threading.Lock()
    together = threading.Barrier(2, timeout=10)
    todo = table2.plan(["a", "b"], [c for c in table2.CELLS if c != "adapterhub"])
    first_two = set(todo[:2])

    def run_item(item):
        with lock:
            events.append(("start", item))
        if jobs > 1 and item in first_two:
            together.wait()  # breaks (fails the test) unless both run at once
        time.sleep(0.002)
        if item == fail:
            raise RuntimeError(f"{item} failed")
        with lock:
            events.append(("end", item))
    return todo, events, run_item


def test_one_job_runs_the_plan_in_its_order():
    todo, events, run_item = _plan_log(1)
    table2.run_plan(todo, run_item, 1)
    assert [item for kind, item in events if kind == "start"] == todo


def test_two_jobs_overlap_and_a_chosen_point_waits_for_its_sweep():
    todo, events, run_item = _plan_log(2)
    table2.run_plan(todo, run_item, 2)
    assert sorted(item for kind, item in events if kind == "end") == sorted(todo)
    waiting = [item for item in todo if table2.waits_for(item)]
    assert waiting  # the plan has chosen points at seeds 43 and 44
    for item in waiting:
        assert events.index(("start", item)) > events.index(("end", table2.waits_for(item)))


def test_a_failure_starts_nothing_new_and_is_raised():
    todo, events, run_item = _plan_log(1, fail=("a", "full", 42))
    with pytest.raises(RuntimeError, match="failed"):
        table2.run_plan(todo, run_item, 1)
    started = [item for kind, item in events if kind == "start"]
    assert started[-1] == ("a", "full", 42) and len(started) < len(todo)


def _sweep_record(values, chosen):
    return {"points": [{"top_k_layers": v, "dev_accuracy": 50.0, "selected": v == chosen}
                       for v in values],
            "chosen": {"top_k_layers": chosen},
            "flags": ["--tuning_mode=top_k", f"--top_k_layers={chosen}"]}


def test_a_sweep_over_a_narrower_grid_runs_again_and_its_seeds_with_it():
    grid = sorted({value for point in table2.grid_points(table2_table.VARIABLE_GRID)
                   for _, value in point})
    assert grid == ["1", "2", "3", "4", "5"]
    narrow = {"variable_seed42": _sweep_record(["1", "2", "3"], "3"),
              "variable_seed43": {"flags": ["--tuning_mode=top_k", "--top_k_layers=3"]}}
    assert not table2.record_stands("variable", 42, narrow)
    assert not table2.record_stands("variable", 43, narrow)  # its sweep no longer stands
    wide = {"variable_seed42": _sweep_record(grid, "5"),
            "variable_seed43": {"flags": ["--tuning_mode=top_k", "--top_k_layers=3"]},
            "variable_seed44": {"flags": ["--tuning_mode=top_k", "--top_k_layers=5"]}}
    assert table2.record_stands("variable", 42, wide)
    assert not table2.record_stands("variable", 43, wide)  # trained another point
    assert table2.record_stands("variable", 44, wide)
    assert not table2.record_stands("variable", 44, {})


def test_a_seed_reusing_the_default_run_stands_while_the_default_point_is_chosen():
    points = [{"learning_rate": lr, "num_train_epochs": e, "dev_accuracy": 1.0}
              for lr in ("3e-4", "1e-3") for e in ("3", "10")]
    selected = {"points": points, "chosen": {"learning_rate": "1e-3", "num_train_epochs": "3"},
                "flags": ["--learning_rate=1e-3", "--num_train_epochs=3"]}
    records = {"adapters_selected_seed42": selected,
               "adapters_selected_seed43": {"flags": [], "same_run_as": "adapters_seed43"}}
    assert table2.record_stands("adapters_selected", 42, records)
    assert table2.record_stands("adapters_selected", 43, records)
    selected["chosen"] = {"learning_rate": "3e-4", "num_train_epochs": "10"}
    assert not table2.record_stands("adapters_selected", 43, records)
    full_points = [{"learning_rate": lr, "num_train_epochs": e, "dev_accuracy": 1.0}
                   for lr in ("5e-5", "1e-4") for e in ("3", "10")]
    full = {"full_selected_seed42": {"points": full_points, "chosen": {
        "learning_rate": "5e-05", "num_train_epochs": "3"}, "flags": []},
            "full_selected_seed44": {"flags": [], "same_run_as": "full_seed44"}}
    assert table2.record_stands("full_selected", 44, full)
    full["full_selected_seed42"]["chosen"]["num_train_epochs"] = "10"
    assert not table2.record_stands("full_selected", 44, full)
    assert table2.record_stands("full", 42, {"full_seed42": {}})
    assert table2.record_stands("tfidf", 42, {"tfidf": {}})


def test_cells_runs_only_the_columns_named(tmp_path):
    set_dir = tmp_path / "sets" / "tiny"
    set_dir.mkdir(parents=True)
    words = {"pos": "good fine great", "neg": "bad awful poor"}
    with open(set_dir / "data.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for i in range(60):
            label = ("pos", "neg")[i % 2]
            writer.writerow([f"{words[label]} item {i}", label])
    results = tmp_path / "results"
    assert table2.main([f"--sets_dir={tmp_path / 'sets'}", "--airline=", "--cells=tfidf",
                        f"--work_dir={tmp_path / 'work'}", f"--results_dir={results}"]) == 0
    assert sorted(p.name for p in (results / "tiny").iterdir()) == ["split.json", "tfidf.json"]
    markdown = (tmp_path / "results.md").read_text(encoding="utf-8")
    # The cells left out do not keep the set out of the average.
    assert "| average over 1 complete sets | | | 100.00 | — |" in markdown


@pytest.mark.parametrize("cells, message", [
    ("tfidf,adapter", "--cells=tfidf,adapter: no cell 'adapter'; expected some of tfidf, "),
    ("adapters,adapterhub", "--cells=adapters,adapterhub names adapterhub, which needs "
                            "--peer_python")])
def test_cells_names_a_bad_column_in_one_line(tmp_path, capsys, cells, message):
    with pytest.raises(SystemExit) as stop:
        table2.main([f"--sets_dir={tmp_path}", f"--cells={cells}"])
    assert stop.value.code == 2 and message in capsys.readouterr().err
