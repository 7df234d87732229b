"""The table of bench/table2.py: its columns (the cells, their seeds and grids), the
paper's figures beside them, and the markdown made from the records.

Cells read test accuracy, mean ± standard error of the mean over the seeds; the average row
counts the sets where every cell that ran anywhere has all its seeds; under the table, what
the sweep chose on dev at the first seed, the adapters-against-full averages at the
defaults and selected, and the hours the runs took on each CPU.
"""

import collections
import dataclasses
import json
import math
import os
import statistics
from typing import Dict, List, Optional, Sequence

from bench.harness import RESULTS, write_results
from bench.robust_tables import read_records
from bench.table2_sets import PARTS

RECORDS = os.path.join(RESULTS, "table2")
SEEDS = (42, 43, 44)
ADAPTER_GRID = ("learning_rate=3e-4,1e-3", "num_train_epochs=3,10")
# Google's rate and twice it, for Google's 3 epochs or 10 (3 epochs of 1,000 rows are 96
# steps).
FULL_GRID = ("learning_rate=5e-5,1e-4", "num_train_epochs=3,10")
# Every k short of full fine-tuning (MiniLM has 6 layers): a narrower grid had its edge,
# 3, chosen on every set.
VARIABLE_GRID = ("top_k_layers=1,2,3,4,5",)


@dataclasses.dataclass(frozen=True)
class Cell:
    """One column of the table: how its runs are made."""
    title: str
    flags: tuple = ()          # the runner's flags beyond the data (ours)
    grid: tuple = ()           # a sweep's --grid values: seed 42 selects the point
    kind: str = "ours"         # ours, tfidf or peer
    # A selected cell's grid point that is the runner's defaults, and the cell that trains
    # it: where the sweep chooses that point, its other seeds are that cell's runs.
    default_point: Optional[dict] = None
    default_cell: str = ""


CELLS = {
    "tfidf": Cell("TF-IDF + logistic regression", kind="tfidf"),
    "full": Cell("full fine-tuning, defaults", ("--tuning_mode=full",)),
    "full_selected": Cell("full fine-tuning, selected", ("--tuning_mode=full",), FULL_GRID,
                          default_point={"learning_rate": 5e-5, "num_train_epochs": 3.0},
                          default_cell="full"),
    "variable": Cell("variable fine-tuning (top k)", ("--tuning_mode=top_k",), VARIABLE_GRID),
    "adapters": Cell("adapters, defaults"),
    "adapters_selected": Cell("adapters, selected", (), ADAPTER_GRID,
                              default_point={"learning_rate": 1e-3, "num_train_epochs": 3.0},
                              default_cell="adapters"),
    "adapterhub": Cell("AdapterHub Houlsby", kind="peer"),
}
# The paper's Table 2 (BERT-Base, test accuracy): no-BERT baseline, full fine-tuning,
# variable fine-tuning, adapters; keyed by our set names (the shared folder's README, and
# bench/airline.py's row for airline); None where no source here gives the figure.
PAPER = {
    "20newsgroups": (91.1, 92.8, 92.8, 91.7),
    "crowdflower_airline": (84.5, 83.6, None, 84.5),
    "crowdflower_corporate_messaging": (91.9, 92.5, 92.4, 92.9),
    "crowdflower_disasters": (84.9, 85.3, 85.3, 84.1),
    "crowdflower_global_warming": (82.7, 84.2, 81.9, 82.7),
    "crowdflower_political_audience": (81.0, 80.9, 80.7, 79.0),
    "crowdflower_political_bias": (76.8, 75.2, 76.5, 75.9),
    "crowdflower_political_message": (43.8, 38.9, 44.9, 44.1),
    "crowdflower_primary_emotions": (33.5, 36.9, 38.2, 33.9),
    "crowdflower_progressive_opinion": (70.6, 71.6, 75.9, 71.7),
    "crowdflower_progressive_stance": (54.3, 63.8, 61.5, 60.6),
    "crowdflower_us_economic_performance": (75.6, 75.3, 76.5, 77.3),
    "customer_complaint_database": (54.5, 55.9, 56.4, 55.4),
    "news_aggregator": (95.2, 96.3, 96.5, 96.2),
}
# The paper's averages over its seventeen sets, and its trained parameters per task.
PAPER_AVERAGE = (None, 73.7, 74.0, 73.3)
PAPER_TRAINED = (None, "100%", None, "1.14%")


def sem(values: Sequence[float]) -> float:
    """The standard error of the mean (0 for one value)."""
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0


def cell_runs(records: dict, cell: str) -> List[dict]:
    if CELLS[cell].kind == "tfidf":
        return [records["tfidf"]] if "tfidf" in records else []
    return [records[f"{cell}_seed{s}"] for s in SEEDS if f"{cell}_seed{s}" in records]


def cell_text(runs: List[dict], expected: int = len(SEEDS)) -> str:
    """`mean ± s.e.m.` of the test accuracy, with the number of runs in brackets while it
    is below the `expected` number."""
    if not runs:
        return "—"
    values = [r["test_accuracy"] for r in runs]
    text = f"{statistics.mean(values):.1f}"
    if len(values) > 1:
        text += f" ± {sem(values):.1f}"
    return text + (f" ({len(values)})" if len(values) < expected else "")


SHOWN = ("tfidf", "full", "full_selected", "variable", "adapters_selected", "adapters",
         "adapterhub")


def table(by_set: Dict[str, dict], infos: Dict[str, dict]) -> str:
    """The markdown table: one row per set, ours beside the paper's; the average over the
    sets where every cell that ran anywhere finished all its seeds; trained parameters per
    task."""
    header = ["set", "rows (train/dev/test)", "max_seq_length",
              *(CELLS[c].title for c in SHOWN), "paper: baseline / full / variable / adapters"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    complete = []
    # A cell left out of the run (--cells, or AdapterHub without --peer_python) does not
    # keep every set out of the average.
    ran = [c for c in SHOWN if any(cell_runs(records, c) for records in by_set.values())]
    for name in sorted(by_set):
        records, info = by_set[name], infos.get(name, {})
        runs = {c: cell_runs(records, c) for c in SHOWN}
        rows = info.get("rows", {})
        paper = paper_text(PAPER[name]) if name in PAPER else "—"
        lines.append("| " + " | ".join([
            name, "/".join(str(rows.get(p, "?")) for p in PARTS),
            str(info.get("max_seq_length", "?")),
            *(cell_text(runs[c], 1 if c == "tfidf" else len(SEEDS)) for c in SHOWN),
            paper]) + " |")
        if all(len(runs[c]) == (1 if c == "tfidf" else len(SEEDS)) for c in ran):
            complete.append({c: statistics.mean(r["test_accuracy"] for r in runs[c])
                             for c in SHOWN if runs[c]})
    lines.append("| average over " + f"{len(complete)} complete sets | | | " + " | ".join(
        f"{statistics.mean(m[c] for m in complete):.2f}" if complete and all(c in m for m in complete)
        else "—" for c in SHOWN) + " | " + paper_text(PAPER_AVERAGE) + " (17 sets) |")
    lines.append("| trained parameters per task | | | " + " | ".join(
        trained_text(by_set, c) for c in SHOWN) + " | " + paper_text(PAPER_TRAINED) + " |")
    lines += chosen_table(by_set)
    for cells, what in ((("adapters", "full"), "at their defaults"),
                        (("adapters_selected", "full_selected"),
                         "each selected on dev, as the paper compares them")):
        paired = paired_average(by_set, cells)
        if paired:
            count, (adapters, full) = paired
            lines += ["", f"Adapters against full fine-tuning, {what}, averaged over the "
                          f"{count} sets where both have all {len(SEEDS)} seeds: {adapters:.2f} "
                          f"against {full:.2f} ({adapters - full:+.2f})."]
    lines += ["", compute_text(by_set)]
    return "\n".join(lines) + "\n"


# How a chosen point's settings read in the table of chosen points.
POINT_TEXT = {"learning_rate": "{}", "num_train_epochs": "{} epochs", "top_k_layers": "top {}"}


def chosen_table(by_set: Dict[str, dict]) -> List[str]:
    """The lines of the table of what the sweep chose on dev at the first seed, one row
    per set that has a chosen point and one column per selected cell ("—" where none
    was chosen yet); no lines where nothing was chosen."""
    grid_cells = [c for c in SHOWN if CELLS[c].grid]
    key = f"_seed{SEEDS[0]}"
    rows = [(name, [by_set[name].get(c + key, {}).get("chosen") for c in grid_cells])
            for name in sorted(by_set)]
    rows = [(name, points) for name, points in rows if any(points)]
    if not rows:
        return []
    lines = ["", f"Chosen on dev at seed {SEEDS[0]}, then run at every seed:", "",
             "| set | " + " | ".join(CELLS[c].title for c in grid_cells) + " |",
             "|" + "---|" * (len(grid_cells) + 1)]
    for name, points in rows:
        lines.append("| " + " | ".join([name, *(", ".join(
            POINT_TEXT.get(k, k + "={}").format(v) for k, v in point.items()) if point
            else "—" for point in points)]) + " |")
    return lines


def paired_average(by_set: Dict[str, dict], cells: Sequence[str]):
    """(the number of sets where every one of `cells` has all its seeds, each cell's mean
    test accuracy over those sets), or None where no set has."""
    sets = [records for records in by_set.values()
            if all(len(cell_runs(records, c)) == len(SEEDS) for c in cells)]
    if not sets:
        return None
    return len(sets), [statistics.mean(statistics.mean(r["test_accuracy"]
                                                       for r in cell_runs(records, c))
                                       for records in sets) for c in cells]


def cpu_label(cpu: dict) -> str:
    """`2 AMD EPYC cores (AVX-512, avx512_bf16)`: the CPU a record's run took its time on."""
    extras = ", ".join(["AVX-512", *cpu.get("bf16_flags", [])]) if cpu.get("avx512") \
        else "without AVX-512"
    return f"{cpu.get('cores', '?')} {cpu.get('model') or 'unknown'} cores ({extras})"


def compute_text(by_set: Dict[str, dict]) -> str:
    """The hours the runs took (their records' wall time; runs made `--jobs` at a time
    count for their share), by the CPU they ran on."""
    hours = collections.Counter()
    for records in by_set.values():
        for record in records.values():
            if "wall_s" in record and "same_run_as" not in record:  # a run beside others
                hours[cpu_label(record.get("cpu", {}))] += \
                    record["wall_s"] / record.get("jobs", 1) / 3600  # counts its share
    return "Run time: " + ("; ".join(f"{h:.1f} h on {label}" for label, h in hours.most_common())
                           or "none yet") + "."


def paper_text(values) -> str:
    """The paper's four figures, "?" where no source here gives one."""
    return " / ".join("?" if v is None else v if isinstance(v, str) else f"{v:.1f}"
                      for v in values)


def trained_text(by_set: Dict[str, dict], cell: str) -> str:
    """The share of the model's weights a cell trains, over the sets it ran on."""
    shares = [r["trainable_params"] / r["all_params"] for records in by_set.values()
              for r in cell_runs(records, cell) if r.get("all_params")]
    if not shares:
        return "—"
    low, high = min(shares), max(shares)
    return f"{100 * low:.1f}%" if high - low < 5e-4 else f"{100 * low:.1f}-{100 * high:.1f}%"


def records_by_set(results_dir: str, infos: Dict[str, dict]) -> Dict[str, dict]:
    return {name: read_records(os.path.join(results_dir, name)) for name in infos}


def committed_table(results_dir: str = RECORDS) -> str:
    """The table of the records in `results_dir` (every set folder with its split.json),
    running and writing nothing: what docs/results.md shows."""
    infos = {}
    for name in sorted(os.listdir(results_dir)):
        path = os.path.join(results_dir, name, "split.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                infos[name] = json.load(f)
    return table(records_by_set(results_dir, infos), infos)


def write_table(results_dir: str, infos: Dict[str, dict]) -> str:
    by_set = records_by_set(results_dir, infos)
    markdown = table(by_set, infos)
    write_results(results_dir.rstrip("/"), {"sets": infos, "records": by_set}, markdown)
    return markdown
