"""bench/tables.py: the result tables of README.md and docs/ are what the benchmarks'
table writers make from the committed bench/results/*.json, and a pasted edit fails."""

import glob
import json
import os
import pathlib
import shutil
import statistics

import pytest

from bench import tables


def _copy_documents(root):
    """README.md and docs/*.md copied under `root`, in the same layout; their paths."""
    os.makedirs(os.path.join(root, "docs"))
    copies = []
    for path in tables.documents():
        target = os.path.join(root, os.path.relpath(path, tables.REPO))
        shutil.copyfile(path, target)
        copies.append(target)
    return copies


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _tamper(path, name):
    """Edits one cell of table `name` in `path` by hand, as a pasted figure would."""
    text = _read(path)
    match = next(m for m in tables.MARKER.finditer(text) if m.group("name") == name)
    row = next(line for line in match.group("body").splitlines()
               if line.startswith("| ") and not line.startswith("|---"))
    cells = row.split(" | ")
    cells[-2] = cells[-2] + "0"  # one more digit in the second-to-last cell
    edited = " | ".join(cells)
    start = match.start("body")
    body = match.group("body").replace(row, edited, 1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:start] + body + text[match.end("body"):])
    return edited


def test_documents_show_the_committed_results():
    stale = tables.update(tables.documents(), check=True)
    assert stale == [], (f"{[os.path.relpath(p, tables.REPO) for p in stale]} differ from "
                         "bench/results/*.json; run `python -m bench.tables`")


def test_every_table_is_filled():
    """Each marked table has a body (a table row) in some document."""
    text = "".join(_read(path) for path in tables.documents())
    bodies = {m.group("name"): m.group("body") for m in tables.MARKER.finditer(text)}
    assert set(bodies) == set(tables.SECTIONS)
    for name, body in bodies.items():
        assert "\n|---" in body, name


def test_a_pasted_edit_is_found_and_rewritten(tmp_path):
    copies = _copy_documents(str(tmp_path))
    results = os.path.join(str(tmp_path), "docs", "results.md")
    original = _read(results)
    edited = _tamper(results, "robust-defaults-stability")

    assert tables.update(copies, check=True) == [results]
    assert edited in _read(results)  # --check changes nothing
    assert tables.update(copies) == [results]
    assert _read(results) == original
    assert tables.update(copies, check=True) == []


def test_check_exits_nonzero_on_a_stale_table(tmp_path, monkeypatch, capsys):
    copies = _copy_documents(str(tmp_path))
    readme = copies[0]
    text = _read(readme)
    _tamper(readme, "headline")
    monkeypatch.setattr(tables, "documents", lambda: copies)
    assert tables.main(["--check"]) == 1
    assert "README.md: out of date" in capsys.readouterr().out
    assert tables.main([]) == 0
    assert tables.main(["--check"]) == 0
    assert _read(readme) == text


def _mean_sd(values):
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def test_headline_means_are_those_of_the_seed_runs():
    headline = tables.headline().splitlines()
    # Adapters: the quickstart's command (defaults, 1e-3 x 3) over the seeds run so far.
    runs = glob.glob(os.path.join(tables.RESULTS, "robust_defaults",
                                  "mrpc_minilm_adapter_1e-3_3ep_seed*.json"))
    records = []
    for path in runs:
        with open(path, encoding="utf-8") as f:
            records.append(json.load(f))
    assert records
    adapter_row = next(line for line in headline if "Houlsby adapters (size 64), defaults" in line)
    assert adapter_row.endswith(f"| {_mean_sd([r['dev_accuracy'] for r in records])} | "
                                f"{_mean_sd([r['dev_f1'] for r in records])} |")
    with open(os.path.join(tables.RESULTS, tables.MRPC_SEEDS), encoding="utf-8") as f:
        full = [r for r in json.load(f)["runs"] if r["mode"] == "full"]
    full_row = next(line for line in headline if "full fine-tuning" in line and "adapter-bert" in line)
    assert len(full) >= 2 and full_row.endswith(
        f"| {_mean_sd([r['dev_accuracy'] for r in full])} | {_mean_sd([r['dev_f1'] for r in full])} |")
    headline = "\n".join(headline)
    assert "| 80.64 | 86.59 |" in headline and "| 80.39 | 86.49 |" in headline
    assert "| 73.77 | 83.26 |" in headline


@pytest.mark.parametrize("text, message", [
    ("<!-- bench:nosuch -->\nx\n<!-- /bench:nosuch -->\n", "unknown table"),
    ("<!-- bench:speed -->\nx\n", "has no matching"),
])
def test_bad_markers_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        tables.render(text, {"speed": "| a |\n"}, "doc.md")


def test_a_dropped_table_is_refused(tmp_path):
    copies = _copy_documents(str(tmp_path))
    performance = os.path.join(str(tmp_path), "docs", "performance.md")
    text = _read(performance)
    start = text.index("<!-- bench:speed -->")
    end = text.index("<!-- /bench:speed -->") + len("<!-- /bench:speed -->")
    with open(performance, "w", encoding="utf-8") as f:
        f.write(text[:start] + text[end:])
    with pytest.raises(ValueError, match="no document shows the table.*speed"):
        tables.update(copies, check=True)


def test_tables_only_drops_settings_and_commands():
    text = "Settings: {\"seed\": 42}\n\n| a |\n|---|\n| 1 |\n\nCommands:\n\n    python x.py\n"
    assert tables.tables_only(text) == "| a |\n|---|\n| 1 |\n"


def test_runs_of_other_budgets_do_not_share_a_table():
    with pytest.raises(ValueError, match="other settings or data"):
        tables.merged_squad_runs(["squad_v2.0_adapter_vs_full.json",
                                  "squad_v2.0_4k_adapter_vs_full.json"])


def test_bench_readme_names_every_benchmark_module():
    """bench/README.md is the index: every module of bench/ and bench/studies/ is in it,
    and every benchmark row gives a time."""
    bench = pathlib.Path(tables.REPO) / "bench"
    readme = (bench / "README.md").read_text(encoding="utf-8")
    modules = [p.stem for p in bench.glob("*.py") if p.stem != "__init__"]
    modules += [f"studies.{p.stem}" for p in (bench / "studies").glob("*.py")
                if p.stem != "__init__"]
    assert [m for m in modules if f"`{m}`" not in readme] == []
    rows = [line for line in readme.splitlines() if line.startswith("| `")]
    assert rows and all(line.rstrip(" |").rsplit("|", 1)[1].strip() for line in rows)
