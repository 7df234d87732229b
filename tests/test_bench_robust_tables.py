"""bench/robust_tables.py: the suite tables written from the run records, the MRPC
target's verdict and partial cells."""

import json

import pytest

from tests.conftest import bench_module

suites = bench_module("robust_suites")
tables = bench_module("robust_tables")


def _record(spec, acc, f1):
    return {"run": suites.run_id(spec), **spec, "command": "python run_classifier.py ...",
            "wall_s": 60.0, "dev_accuracy": acc, "dev_f1": f1}


@pytest.mark.parametrize("accs, verdict", [
    ((80.0, 81.0, 82.0), "meets target"),
    ((77.9, 81.0, 82.0), "misses target"),   # one seed below 78
    ((79.0, 80.0, 80.5), "misses target"),   # mean 79.8 < 80
])
def test_tables_are_written_from_the_run_files(tmp_path, accs, verdict):
    results = tmp_path / "results" / "robust_defaults"
    results.mkdir(parents=True)
    cell = [s for s in suites.suite_specs("mrpc")
            if s["lr"] == "1e-3" and s["backbone"] == "minilm"]
    for spec, acc in zip(cell, accs):
        (results / f"{suites.run_id(spec)}.json").write_text(json.dumps(_record(spec, acc, 87.0)))
    tables.write_tables(["mrpc"], str(results))
    table = json.loads((tmp_path / "results" / "robust_defaults_mrpc.json").read_text())
    assert table["runs_done"] == 3 and table["runs"] == 21
    row = next(r for r in table["cells"] if r["lr"] == "1e-3" and r["backbone"] == "minilm")
    assert row["accuracy"]["mean"] == pytest.approx(sum(accs) / 3)
    assert row["verdict"] == verdict
    markdown = (tmp_path / "results" / "robust_defaults_mrpc.md").read_text()
    assert f"| {verdict} |" in markdown and "— of 3" in markdown


def test_partial_cell_is_marked(tmp_path):
    results = tmp_path / "robust_defaults"
    results.mkdir()
    spec = suites.suite_specs("mrpc")[1]
    (results / f"{suites.run_id(spec)}.json").write_text(json.dumps(_record(spec, 82.0, 88.0)))
    tables.write_tables(["mrpc"], str(results))
    row = next(r for r in json.loads((tmp_path / "robust_defaults_mrpc.json").read_text())["cells"]
               if r["seeds"])
    assert row["seeds"] == [42] and row["verdict"] == "pending"
