"""bfloat16 against float32 on real data: does `--dtype=mixed_bfloat16` train as well?

Each cell runs the same user command twice, once with `--dtype=float32` and once with
`--dtype=mixed_bfloat16`, on the embedded MiniLM, seeds 42-44:

- MRPC adapters at the default 1e-3 x 3 epochs and at the original's 3e-4 x 5 epochs;
- MRPC full fine-tuning at Google's 5e-5 x 3 epochs;
- SQuAD v1.1 adapters, the `squad` setting of bench.robust_defaults (the first 1,500
  training questions, 2 epochs, seq 256, batch 16, 1e-3), scored on the first article of
  dev-v1.1.json.

Targets (the bar `--dtype=auto` must clear before it picks bfloat16): per MRPC cell the
bfloat16 mean within 0.5 point of float32's (accuracy and F1) and no bfloat16 seed
below 78 accuracy; SQuAD mean F1 within 1 point.

Runs are bench.robust_defaults' (same records in bench/results/robust_defaults/, same
claims and resuming); the float32 runs are the ones its suites already recorded. The
table bench/results/dtype_parity.{json,md} is rewritten after every run.

Usage:
    python -m bench.dtype_parity                 # run what is missing, in order
    python -m bench.dtype_parity --tables_only   # rewrite the table from the records
"""

import argparse
import os
import statistics
import sys

from bench import robust_defaults, robust_suites, robust_tables
from bench.harness import RESULTS, mean_sd_text, seed_stats, write_json
from adapter_bert.io_utils import atomic_write_text

SEEDS = robust_suites.SEEDS
BF16 = "mixed_bfloat16"
# (cell name, task, mode, lr, epochs)
CELLS = (
    ("MRPC adapters, 1e-3 x 3 (default)", "mrpc", "adapter", "1e-3", 3),
    ("MRPC adapters, 3e-4 x 5 (original)", "mrpc", "adapter", "3e-4", 5),
    ("MRPC full fine-tuning, 5e-5 x 3", "mrpc", "full", "5e-5", 3),
    ("SQuAD v1.1 adapters, 1,500 questions, 1e-3 x 2", "squad", "adapter", "1e-3", 2),
)
MRPC_TOLERANCE, MRPC_FLOOR, SQUAD_TOLERANCE = 0.5, 78.0, 1.0


def spec(task, mode, lr, epochs, seed, dtype="float32"):
    """One run; float32 specs carry no dtype key, as the records they share do."""
    if task == "squad":
        run = robust_suites.squad_spec(lr, seed)
    else:
        run = robust_suites.glue_spec(task, mode, lr, epochs, seed)
    return run if dtype == "float32" else {**run, "dtype": dtype}


def specs():
    """Every run, seed 42 of each cell first (float32 before bfloat16)."""
    return [spec(task, mode, lr, epochs, seed, dtype) for seed in SEEDS
            for _, task, mode, lr, epochs in CELLS for dtype in ("float32", BF16)]


def _metrics(task):
    return ("f1", "exact_match") if task == "squad" else ("dev_accuracy", "dev_f1")


def cell_rows(records):
    """Per cell and dtype: the metrics over the seeds recorded, and the verdict."""
    rows = []
    for name, task, mode, lr, epochs in CELLS:
        row = {"cell": name, "task": task, "mode": mode, "lr": lr, "epochs": epochs}
        for dtype in ("float32", BF16):
            runs = [records[i] for i in (robust_suites.run_id(spec(task, mode, lr, epochs, s, dtype))
                                         for s in SEEDS) if i in records]
            row[dtype] = {"seeds": [r["seed"] for r in runs],
                          "wall_s": [r["wall_s"] for r in runs],
                          "command": runs[0]["command"] if runs else None,
                          **{key: seed_stats([r[key] for r in runs]) for key in _metrics(task)}}
        row["verdict"] = verdict(task, row["float32"], row[BF16])
        rows.append(row)
    return rows


def verdict(task, fp32, bf16):
    """"pass"/"miss" (with the reason) once both dtypes have every seed, else "pending"."""
    if len(fp32["seeds"]) < len(SEEDS) or len(bf16["seeds"]) < len(SEEDS):
        return "pending"
    if task == "squad":
        gap = bf16["f1"]["mean"] - fp32["f1"]["mean"]
        return "pass" if gap >= -SQUAD_TOLERANCE else f"miss: F1 {gap:+.2f}"
    misses = [f"{key[4:]} {bf16[key]['mean'] - fp32[key]['mean']:+.2f}"
              for key in ("dev_accuracy", "dev_f1")
              if abs(bf16[key]["mean"] - fp32[key]["mean"]) > MRPC_TOLERANCE
              and bf16[key]["mean"] < fp32[key]["mean"]]
    low = min(bf16["dev_accuracy"]["values"])
    if low < MRPC_FLOOR:
        misses.append(f"a seed at {low:.2f}")
    return "pass" if not misses else "miss: " + ", ".join(misses)


def _text(stats):
    if stats is None:
        return "—"
    n = len(stats["values"])
    return mean_sd_text(stats["values"]) + ("" if n == len(SEEDS) else f" ({n})")


def markdown(rows):
    lines = ["| cell | metric | float32 | mixed_bfloat16 | bf16 − fp32 | wall s (fp32 / bf16) "
             "| verdict |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        fp32, bf16 = row["float32"], row[BF16]
        wall = " / ".join(f"{statistics.mean(d['wall_s']):.0f}" if d["wall_s"] else "—"
                          for d in (fp32, bf16))
        for i, key in enumerate(_metrics(row["task"])):
            gap = (f"{bf16[key]['mean'] - fp32[key]['mean']:+.2f}"
                   if fp32[key] and bf16[key] else "—")
            metric = {"dev_accuracy": "accuracy", "dev_f1": "F1", "f1": "F1",
                      "exact_match": "EM"}[key]
            lines.append(f"| {row['cell'] if i == 0 else ''} | {metric} | {_text(fp32[key])} "
                         f"| {_text(bf16[key])} | {gap} | {wall if i == 0 else ''} "
                         f"| {row['verdict'] if i == 0 else ''} |")
    return lines


def write_table(results_dir):
    """Rewrites bench/results/dtype_parity.{json,md} from the run records."""
    records = robust_tables.read_records(results_dir)
    rows = cell_rows(records)
    all_specs = specs()
    done = [s for s in all_specs if robust_suites.run_id(s) in records]
    commands = sorted({records[robust_suites.run_id(s)]["command"] for s in done
                       if s.get("dtype") == BF16})
    stem = os.path.join(os.path.dirname(results_dir), "dtype_parity")
    write_json(stem + ".json", {"runs_done": len(done), "runs": len(all_specs), "cells": rows})
    text = [f"{len(done)} of {len(all_specs)} runs done.", "", *markdown(rows), "",
            "bfloat16 commands (the float32 ones are the same with --dtype=float32):", "",
            *[f"    {c}" for c in commands]]
    atomic_write_text(stem + ".md", "\n".join(text) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default="/tmp/adapter_bert_robust_defaults")
    parser.add_argument("--results_dir", default=os.path.join(RESULTS, "robust_defaults"))
    parser.add_argument("--modes", default="adapter,full",
                        help="tuning modes whose runs to run (the table covers all)")
    parser.add_argument("--tables_only", action="store_true")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    return robust_defaults.run_table_suite([run for run in specs() if run["mode"] in modes],
                                           args, write_table)

if __name__ == "__main__":
    sys.exit(main())
