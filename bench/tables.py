"""Writes the result tables of README.md and docs/*.md from bench/results/*.json.

A table in a document sits between two markers, for example

    <!-- bench:speed -->
    | training | examples/s | ...
    <!-- /bench:speed -->

and everything between them is replaced by what the section's function below makes
from the committed JSON. The functions call the table writers of the benchmark scripts
that wrote the JSON (`speed.markdown`, `adapter_storage.markdown`, ...), so a
document shows exactly what a benchmark run printed. A table edited by hand is
overwritten here and fails `tests/test_bench_tables.py`.

Usage (from the repository root):
    python -m bench.tables            # rewrite every table
    python -m bench.tables --check    # exit 1, naming each stale table, if any differs
"""

import argparse
import glob
import json
import os
import re
import sys
from typing import Callable, Dict, List

from adapter_bert.io_utils import atomic_write_text
from bench import (adapter_gradients, adapter_storage, adapter_sweeps,
                   airline, dtype_parity, dtype_speed, glue_peers, glue_table,
                   mrpc_adapter_vs_full, own_data_io, resadapter_comparison, robust_suites,
                   robust_tables, speed, squad_adapter_vs_full, table2_table)
from bench.harness import REPO, RESULTS, mean_sd_text
from bench.mode_flags import optimizer_label

MARKER = re.compile(r"(<!-- bench:(?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /bench:(?P=name) -->)",
                    re.DOTALL)
OPENING = re.compile(r"<!-- bench:([\w.-]+) -->")

# What users would otherwise run, measured once each with the same backbone, data and
# budget as the MRPC benchmark (settings in docs/results.md): system, trainable share,
# learning rate and Adam variant, seed, dev accuracy, dev F1.
PEERS = [
    ("PyTorch `transformers`, full fine-tuning", "100%", "5e-5, bias-corrected", "42",
     "80.64", "86.59"),
    ("AdapterHub `adapters`, Houlsby adapters (size 64)", "2.6%", "1e-3, bias-corrected", "42",
     "80.39", "86.49"),
    ("AdapterHub `adapters`, Houlsby adapters (size 64)", "2.6%", "3e-4, bias-corrected", "42",
     "73.77", "83.26"),
]

MRPC_SEEDS = "mrpc_adapter_vs_full_seeds.json"
SQUAD_V2_LARGE = ["squad_v2.0_4k_adapter_vs_full.json", "squad_v2.0_4k_adapter_lr5e-3.json"]


def load(name: str) -> dict:
    """A results file of bench/results/, by its path relative to that folder."""
    with open(os.path.join(RESULTS, name), encoding="utf-8") as f:
        return json.load(f)


def tables_only(text: str) -> str:
    """A benchmark's markdown without its `Settings: {...}` line and `Commands:` list.

    Those name this machine's temporary paths; the documents state the settings and the
    benchmark command in their own words instead.
    """
    lines = text.splitlines()
    if "Commands:" in lines:
        lines = lines[:lines.index("Commands:")]
    lines = [line for line in lines if not line.startswith("Settings: ")]
    return "\n".join(lines).strip("\n") + "\n"


def merged_squad_runs(names: List[str]) -> tuple:
    """(rows, data, settings) of several squad_adapter_vs_full runs at one budget.

    Raises:
        ValueError: the files used different settings or data, so one table would mix
            budgets.
    """
    rows, data, settings = [], None, None
    for name in names:
        result = load(name)
        described = {version: {k: v[k] for k in ("train", "eval")}
                     for version, v in result["data"].items()}
        if settings is None:
            data, settings = described, result["settings"]
        elif (described, result["settings"]) != (data, settings):
            raise ValueError(f"bench/results/{name}: other settings or data than "
                             f"bench/results/{names[0]}; they cannot share a table")
        rows += result["runs"]
    rows.sort(key=lambda row: (row["mode"], float(optimizer_label(row).split(",")[0]),
                               optimizer_label(row)))
    return rows, data, settings


def squad_table(names: List[str]) -> str:
    """One SQuAD table from several runs at one budget.

    The benchmark's "Adapter F1 minus full fine-tuning F1" line compares one run per
    mode, so it is left out when a mode has several (a learning-rate sweep).
    """
    rows, data, settings = merged_squad_runs(names)
    text = tables_only(squad_adapter_vs_full.markdown(rows, data, settings))
    modes = [(row["version"], row["mode"]) for row in rows]
    if len(set(modes)) < len(modes):
        text = "\n".join(line for line in text.splitlines()
                         if not line.startswith("Adapter F1 minus full")).strip("\n") + "\n"
    return text


def resadapter_table(name: str) -> str:
    result = load(name)
    return tables_only(resadapter_comparison.markdown(result["runs"], result["data"],
                                                      result["settings"]))


# The README's adapter row: the quickstart's own command (adapter tuning at the runner's
# defaults, 1e-3 x 3 epochs) over the robust-defaults benchmark's seeds.
DEFAULTS_CELL = {"task": "mrpc", "backbone": "minilm", "mode": "adapter", "lr": "1e-3",
                 "epochs": 3}


def _seed_range(seeds) -> str:
    return f"{min(seeds)}-{max(seeds)}" if len(seeds) > 1 else str(seeds[0])


def _ceiling(record) -> str:
    """The step ceiling a run's optimizer log names, written as in the docs ("2e-3")."""
    found = re.search(r"held to a rate of ([0-9.e+-]+)", record["optimizer_log"] or "")
    if not found:
        raise ValueError(f"{record['run']}: its optimizer log names no step ceiling")
    mantissa, exponent = f"{float(found.group(1)):.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def headline() -> str:
    """README's table: adapters at the runner's defaults and full fine-tuning (mean ± sd
    over seeds) on MRPC, beside what users would otherwise run (`PEERS`)."""
    cells = load("robust_defaults_mrpc.json")["cells"]
    cell = next(c for c in cells if all(c[k] == v for k, v in DEFAULTS_CELL.items()))
    adapters = load(f"robust_defaults/{robust_suites.run_id({**DEFAULTS_CELL, 'seed': cell['seeds'][0]})}.json")
    lines = ["| system | trains | learning rate, Adam | seeds | MRPC dev acc | MRPC dev F1 |",
             "|---|---|---|---|---|---|",
             f"| adapter-bert, Houlsby adapters (size 64), defaults | "
             f"{round(adapters['trainable_percent'], 1):g}% | "
             f"1e-3, uncorrected, held to {_ceiling(adapters)} | {_seed_range(cell['seeds'])} | "
             f"{mean_sd_text(cell['accuracy']['values'])} | "
             f"{mean_sd_text(cell['f1']['values'])} |"]
    full = [row for row in load(MRPC_SEEDS)["runs"] if row["mode"] == "full"]
    seeds = [mrpc_adapter_vs_full.row_seed(row) for row in full]
    lines.append(
        f"| adapter-bert, full fine-tuning | {round(full[0]['trainable_percent'], 1):g}% | "
        f"{optimizer_label(full[0])} | {_seed_range(seeds)} | "
        f"{mean_sd_text([row['dev_accuracy'] for row in full])} | "
        f"{mean_sd_text([row['dev_f1'] for row in full])} |")
    lines += ["| " + " | ".join(peer) + " |" for peer in PEERS]
    return "\n".join(lines) + "\n"


PER_RUN = "Per run (dev accuracy / F1, wall time):"


def robust_defaults_table(suite: str) -> str:
    """One suite of the robust-defaults benchmark, from its run files (no commands)."""
    lines = robust_tables.suite_table(suite, robust_tables.read_records())["lines"]
    # The per-run lists stay in bench/results/robust_defaults_<suite>.md: the docs show
    # the mean over seeds where the suite has one.
    if PER_RUN in lines:
        lines = lines[:lines.index(PER_RUN)]
    summary = next((i for i, line in enumerate(lines) if line.startswith("| lr x epochs |")),
                   None)
    if summary is not None:
        lines = lines[:lines.index("") + 1] + lines[summary:]
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines) + "\n"


def sweeps() -> str:
    rows = load("mrpc_adapter_sweeps.json")["rows"]
    # The metrics adapter_sweeps.write_outputs puts in its table.
    metrics = sorted({k for row in rows for k in row
                      if k.startswith("eval_") and k != "eval_loss"})
    return adapter_sweeps.markdown(rows, metrics)


SECTIONS: Dict[str, Callable[[], str]] = {
    "headline": headline,
    "speed": lambda: speed.markdown(load("speed.json")),
    "squad-v2.0-4k": lambda: squad_table(SQUAD_V2_LARGE),
    "resadapter": lambda: resadapter_table("resadapter_comparison.json"),
    "resadapter-squad-4k": lambda: resadapter_table(
        "resadapter_squad_v2_4k/resadapter_comparison.json"),
    "storage": lambda: adapter_storage.markdown(load("adapter_storage.json")),
    "sweeps": sweeps,
    "robust-defaults-squad": lambda: robust_defaults_table("squad"),
    "robust-defaults-squad-padding": lambda: robust_defaults_table("squad_padding"),
    "robust-defaults-stability": lambda: robust_defaults_table("stability"),
    "robust-defaults-squad-full": lambda: robust_defaults_table("squad_full"),
    "adapter-gradients": lambda: adapter_gradients.markdown(load("adapter_gradients.json")["rows"]),
    "dtype-parity": lambda: "\n".join(dtype_parity.markdown(
        dtype_parity.cell_rows(robust_tables.read_records()))) + "\n",
    "dtype-speed": lambda: dtype_speed.markdown(load("dtype_speed.json")),
    "own-data-io": lambda: own_data_io.markdown(load("own_data_io.json")),
    "airline": lambda: airline.table(load("airline.json")["records"],
                                     load("airline.json")["majority_test_accuracy"]),
    "table2": table2_table.committed_table,
    "glue-table": lambda: "\n".join(glue_table.table(
        robust_tables.read_records(), glue_peers.read_peer_records())[1]) + "\n",
}


def documents(root: str = REPO) -> List[str]:
    """README.md and every docs/*.md under `root`."""
    return [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))


def render(text: str, tables: Dict[str, str], source: str = "") -> str:
    """`text` with the body of every marked table replaced by `tables[name]`.

    Raises:
        ValueError: a marker names no section, or an opening marker has no closing one.
    """
    opened = OPENING.findall(text)
    closed = [m.group("name") for m in MARKER.finditer(text)]
    if opened != closed:
        unclosed = sorted(set(opened) - set(closed)) or opened
        raise ValueError(f"{source}: marker <!-- bench:{unclosed[0]} --> has no matching "
                         f"<!-- /bench:{unclosed[0]} -->")
    unknown = sorted(set(opened) - set(tables))
    if unknown:
        raise ValueError(f"{source}: unknown table <!-- bench:{unknown[0]} -->; "
                         f"known: {', '.join(sorted(tables))}")
    return MARKER.sub(lambda m: m.group(1) + tables[m.group("name")] + m.group(4), text)


def update(paths: List[str], check: bool = False) -> List[str]:
    """Renders every table of `paths` from the results; rewrites the files that changed
    (or, with `check`, only reports them). Returns the paths that were (or would be)
    rewritten.

    Raises:
        ValueError: a bad marker, or a section no document shows (a table was dropped).
    """
    tables = {name: make() for name, make in SECTIONS.items()}
    stale, shown = [], set()
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        shown.update(OPENING.findall(text))
        new = render(text, tables, os.path.relpath(path, REPO))
        if new != text:
            stale.append(path)
            if not check:
                atomic_write_text(path, new)
    missing = sorted(set(SECTIONS) - shown)
    if missing:
        raise ValueError(f"no document shows the table(s) {', '.join(missing)}; add "
                         f"<!-- bench:{missing[0]} --> ... <!-- /bench:{missing[0]} -->")
    return stale


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a table differs from the results")
    args = parser.parse_args(argv)
    try:
        stale = update(documents(), check=args.check)
    except (OSError, ValueError) as error:
        print(f"bench.tables: error: {error}", file=sys.stderr)
        return 1
    for path in stale:
        verb = "out of date" if args.check else "rewritten"
        print(f"{os.path.relpath(path, REPO)}: {verb}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
