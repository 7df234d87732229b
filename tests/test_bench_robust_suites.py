"""bench/robust_suites.py: each suite's runs, their order and their unique ids."""

from tests.conftest import bench_module

bench = bench_module("robust_defaults")
suites = bench_module("robust_suites")
tables = bench_module("robust_tables")


def test_mrpc_suite_is_the_three_settings_on_two_backbones_plus_full():
    specs = suites.suite_specs("mrpc")
    cells = {(s.get("backbone"), s["mode"], s["lr"], s["epochs"]) for s in specs}
    assert cells == {(b, "adapter", lr, ep) for b in ("minilm", "tf1")
                     for lr, ep in (("3e-4", 5), ("1e-3", 3), ("3e-3", 3))} | \
        {("minilm", "full", "5e-5", 3)}
    assert len(specs) == 21 and {s["seed"] for s in specs} == {42, 43, 44}
    # Seed 42 of every MiniLM adapter setting runs first.
    assert [(s["lr"], s["seed"]) for s in specs[:3]] == [("1e-3", 42), ("3e-3", 42),
                                                         ("3e-4", 42)]


def test_run_ids_are_unique_and_shared_between_suites():
    all_specs = [s for suite in suites.SUITES for s in suites.suite_specs(suite)]
    unique = bench._unique(all_specs)
    assert len({suites.run_id(s) for s in unique}) == len(unique)
    stability = {suites.run_id(s) for s in suites.suite_specs("stability")}
    mrpc = {suites.run_id(s) for s in suites.suite_specs("mrpc")}
    assert len(stability) == 30
    # MRPC adapters at 1e-3 and 3e-3 and full at 5e-5, 3 epochs, run once for both suites.
    assert len(stability & mrpc) == 9
    assert "mrpc_minilm_adapter_1e-3_3ep_seed42" in stability & mrpc


def test_squad_suite_runs_three_seeds_per_rate_and_summarises_each_rate():
    specs = suites.suite_specs("squad")
    assert sorted((s["lr"], s["seed"]) for s in specs) == sorted(
        (lr, seed) for lr in ("1e-3", "3e-4", "3e-3") for seed in (42, 43, 44))
    assert [s["seed"] for s in specs[:3]] == [42, 42, 42]  # every rate's seed 42 first
    # F1 at 1e-3: 50 and 54; at 3e-4: only seed 42 done, 40.
    f1 = {("1e-3", 42): 50.0, ("1e-3", 43): 54.0, ("3e-4", 42): 40.0}
    records = {suites.run_id(s): {"exact_match": f1[s["lr"], s["seed"]] - 10, "f1": f1[s["lr"], s["seed"]],
                                 "wall_s": 600.0, "command": "python run_squad.py ..."}
               for s in specs if (s["lr"], s["seed"]) in f1}
    lines = tables.suite_table("squad", records)["lines"]
    assert "| 1e-3 x 2 | 2 | 42.00 ± 2.83 | 52.00 ± 2.83 |" in lines
    assert any(line.startswith("| 3e-4 x 2 | 1 | 30.00") and "| 40.00" in line for line in lines)
    assert any(line.startswith("| 3e-3 x 2 | 0 |") for line in lines)
    assert "| adapter | 3e-4 x 2 | 1500 | 43 | — | — | not run yet |" in lines
