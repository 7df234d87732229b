"""The tables of bench.robust_defaults' suites, written from the run records in
bench/results/robust_defaults/ (one JSON file per run): mean ± sd per cell, the MRPC
target's verdict, and the SQuAD settings side by side."""

import json
import os

from adapter_bert.io_utils import atomic_write_text
from bench.harness import mean_sd_text, seed_stats, write_json
from bench.robust_suites import MRPC_TARGET, run_id, suite_specs

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "robust_defaults")


def glue_cells(specs, records):
    """Groups runs by (task, backbone, mode, lr, epochs): per-cell statistics."""
    cells = {}
    for spec in specs:
        key = (spec["task"], spec.get("backbone", "minilm"), spec["mode"], spec["lr"],
               spec["epochs"])
        cell = cells.setdefault(key, {"seeds": [], "acc": [], "f1": [], "wall_s": [],
                                      "expected": 0, "command": None})
        cell["expected"] += 1
        record = records.get(run_id(spec))
        if record:
            cell["seeds"].append(spec["seed"])
            cell["acc"].append(record["dev_accuracy"])
            if record.get("dev_f1") is not None:
                cell["f1"].append(record["dev_f1"])
            cell["wall_s"].append(record["wall_s"])
            cell["command"] = cell["command"] or record["command"]
    return cells


def mrpc_verdict(mode, acc, f1, complete):
    if mode != "adapter" or not acc:
        return ""
    ok = (acc["mean"] >= MRPC_TARGET[0] and f1 and f1["mean"] >= MRPC_TARGET[1]
          and acc["min"] >= MRPC_TARGET[2])
    if not complete:
        return "pending" if ok else "failing so far"
    return "meets target" if ok else "misses target"


def glue_table(suite, specs, records):
    cells = glue_cells(specs, records)
    rows, lines = [], []
    with_target = suite == "mrpc"
    header = "| task | backbone | mode | lr x epochs | seeds done | dev acc | dev F1 | lowest acc |"
    lines += [header + (" target |" if with_target else ""),
              "|" + "---|" * (8 + with_target)]
    for (task, backbone, mode, lr, epochs), cell in cells.items():
        acc, f1 = seed_stats(cell["acc"]), seed_stats(cell["f1"])
        complete = len(cell["acc"]) == cell["expected"]
        verdict = mrpc_verdict(mode, acc, f1, complete) if with_target else ""
        rows.append({"task": task, "backbone": backbone, "mode": mode, "lr": lr,
                     "epochs": epochs, "seeds": cell["seeds"], "expected": cell["expected"],
                     "accuracy": acc, "f1": f1, "verdict": verdict,
                     "wall_s": cell["wall_s"], "example_command": cell["command"]})
        backbone_name = "MiniLM (TF1 ckpt)" if backbone == "tf1" else "MiniLM"
        seeds = ",".join(map(str, cell["seeds"])) or "—"
        lowest = f"{acc['min']:.2f}" if acc else "—"
        lines.append(f"| {task.upper()} | {backbone_name} | {mode} | {lr} x {epochs:g} | "
                     f"{seeds} of {cell['expected']} | {mean_sd_text(cell['acc'])} | "
                     f"{mean_sd_text(cell['f1'])} | {lowest} |")
        if with_target:
            lines[-1] += f" {verdict} |"
    lines += ["", "Mean ± sample standard deviation over the seeds done.", ""]
    per_seed = [f"- `{r['run']}`: " + (f"{r['dev_accuracy']:.2f} / {r['dev_f1']:.2f}"
                                        if r.get("dev_f1") is not None
                                        else f"{r['dev_accuracy']:.2f}")
                + f" ({r['wall_s'] / 60:.1f} min)"
                for r in (records.get(run_id(s)) for s in specs) if r]
    lines += ["Per run (dev accuracy / F1, wall time):", "", *per_seed]
    return rows, lines


def squad_table(specs, records):
    """Per-run rows, then (when the suite has several seeds) mean ± sd per setting."""
    rows = []
    with_padding = any(s.get("padding") for s in specs)
    with_adam = any(s.get("optimizer") for s in specs)
    with_seeds = len({s["seed"] for s in specs}) > 1
    padding = lambda spec: spec.get("padding", "dynamic")  # noqa: E731
    adam = lambda spec: ("bias-corrected" if spec.get("optimizer") == "corrected"  # noqa: E731
                         else "default")
    setting = lambda spec: (f"{spec['lr']} x {spec['epochs']}", padding(spec),  # noqa: E731
                            adam(spec))
    lines = ["| mode | lr x epochs | questions | " + ("padding | " if with_padding else "")
             + ("Adam | " if with_adam else "")
             + ("seed | " if with_seeds else "") + "EM | F1 | wall time |",
             "|---|---|---|" + "---|" * (3 + with_padding + with_adam + with_seeds)]
    for spec in specs:
        record = records.get(run_id(spec))
        rows.append({**spec, "run": run_id(spec), "result": record})
        cells = [spec["mode"], setting(spec)[0], str(spec["questions"])]
        cells += [padding(spec)] if with_padding else []
        cells += [adam(spec)] if with_adam else []
        cells += [str(spec["seed"])] if with_seeds else []
        cells += ([f"{record['exact_match']:.2f}", f"{record['f1']:.2f}",
                   f"{record['wall_s'] / 60:.1f} min"] if record else ["—", "—", "not run yet"])
        lines.append("| " + " | ".join(cells) + " |")
    if with_seeds:
        lines += ["", "| lr x epochs | " + ("padding | " if with_padding else "")
                  + ("Adam | " if with_adam else "") + "seeds done | EM | F1 |",
                  "|---|---|---|---|" + "---|" * (with_padding + with_adam)]
        for key in dict.fromkeys(setting(s) for s in specs):
            done = [records[run_id(s)] for s in specs
                    if setting(s) == key and run_id(s) in records]
            lines.append(f"| {key[0]} | " + (f"{key[1]} | " if with_padding else "")
                         + (f"{key[2]} | " if with_adam else "")
                         + f"{len(done)} | {mean_sd_text([r['exact_match'] for r in done])} | "
                         f"{mean_sd_text([r['f1'] for r in done])} |")
        lines += ["", "Mean ± sample standard deviation over the seeds done."]
    return rows, lines


def read_records(results_dir=RESULTS) -> dict:
    """Every run file of `results_dir`, by run id."""
    records = {}
    if os.path.isdir(results_dir):
        for name in os.listdir(results_dir):
            if name.endswith(".json"):
                with open(os.path.join(results_dir, name), encoding="utf-8") as f:
                    records[name[:-5]] = json.load(f)
    return records


def suite_table(suite, records) -> dict:
    """One suite from the run records: its cell rows, markdown lines, commands and counts."""
    specs = suite_specs(suite)
    if suite.startswith("squad"):
        rows, lines = squad_table(specs, records)
    else:
        rows, lines = glue_table(suite, specs, records)
    done = [s for s in specs if run_id(s) in records]
    title = [f"Suite `{suite}`: {len(done)} of {len(specs)} runs done.", ""]
    return {"rows": rows, "lines": title + lines, "runs_done": len(done), "runs": len(specs),
            "commands": sorted({records[run_id(s)]["command"] for s in done})}


def write_tables(suites, results_dir=RESULTS):
    """Rewrites bench/results/robust_defaults_<suite>.{json,md} from the run files."""
    records = read_records(results_dir)
    for suite in suites:
        table = suite_table(suite, records)
        lines = table["lines"] + ["", "Commands:", ""] + [f"    {c}" for c in table["commands"]]
        stem = os.path.join(os.path.dirname(results_dir), f"robust_defaults_{suite}")
        write_json(stem + ".json", {"suite": suite, "runs_done": table["runs_done"],
                                    "runs": table["runs"], "cells": table["rows"]})
        atomic_write_text(stem + ".md", "\n".join(lines) + "\n")
