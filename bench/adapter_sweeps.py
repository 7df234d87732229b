"""Adapter size and init-scale sweeps with the LayerNorm-only and top-k baselines
(Houlsby et al., 2019, Fig. 4 and the initialisation study), on a small CPU budget.

Every point is one `run_classifier.py --do_train --do_eval` run (a subprocess, so each
point starts clean) on the same training subset, sequence length, epochs and seed:

- size sweep: adapter tuning with each `--sizes` value at `--size_init_scale`;
- init-scale sweep: adapter tuning at `--init_scale_size` with each `--init_scales` value;
- baselines: `--tuning_mode=layernorm` and `--tuning_mode=top_k --top_k_layers=k`.

The dev metric and the trainable parameter count are read from each run's
`eval_results.txt`. Results: `<results_dir>/<name>.json` (settings + one row per point),
`<name>.md` (a table) and `<name>.png` (dev metric vs trainable parameters; dev metric vs
init scale). Points already in the JSON with the same settings are not run again, so an
interrupted sweep resumes.

Usage (from the repository root; the small-budget MRPC sweep of docs/ablation-and-sweeps.md):
    python -m bench.adapter_sweeps --task_name=MRPC --data_dir=$GLUE_DIR/MRPC \
        --sizes=8,64,256 --init_scales=1e-4,1e-2,1 --top_k=1,2 \
        --max_train_examples=1000 --epochs=3 --max_seq_length=64
"""

import argparse
import json
import os
import random
import shlex
import shutil
import sys
from typing import Dict, List, Optional

from adapter_bert.io_utils import atomic_write_with
from bench import harness
from bench.harness import read_eval_results  # noqa: F401  (bench.adapter_sweeps API)

# GLUE tasks whose TSVs have no header line (as download_glue_data.py writes them).
_NO_HEADER = {"cola"}

GROUPS = ("size", "init_scale", "baseline")


# ------------------------------------------------------------------ points
def plan_points(sizes, init_scales, size_init_scale, init_scale_size, top_k,
                layernorm=True) -> List[dict]:
    """The runs of a sweep, each a dict with `key`, `groups`, `mode` and its settings.

    A run needed by both sweeps (e.g. the init-scale point at `size_init_scale`) is
    planned once and listed in both groups.
    """
    points: Dict[str, dict] = {}

    def add(group, mode, size=None, scale=None, k=None):
        if mode == "adapter":
            key = f"adapter_s{size}_i{scale:g}"
        elif mode == "top_k":
            key = f"top_k{k}"
        else:
            key = mode
        point = points.setdefault(key, {"key": key, "groups": [], "mode": mode,
                                        "adapter_size": size, "init_scale": scale,
                                        "top_k": k})
        if group not in point["groups"]:
            point["groups"].append(group)

    for size in sizes:
        add("size", "adapter", size=int(size), scale=float(size_init_scale))
    for scale in init_scales:
        add("init_scale", "adapter", size=int(init_scale_size), scale=float(scale))
    if layernorm:
        add("baseline", "layernorm")
    for k in top_k:
        add("baseline", "top_k", k=int(k))
    return list(points.values())


def point_flags(point: dict, learning_rates: Dict[str, float]) -> List[str]:
    """run_classifier.py flags that select a point's tuning mode and adapter settings."""
    mode = point["mode"]
    flags = [f"--tuning_mode={mode}", f"--learning_rate={learning_rates[mode]:g}"]
    if mode == "adapter":
        flags += [f"--adapter_size={point['adapter_size']}",
                  f"--adapter_init_scale={point['init_scale']:g}"]
    elif mode == "top_k":
        flags.append(f"--top_k_layers={point['top_k']}")
    return flags


# ------------------------------------------------------------------ data
def subset_task_dir(data_dir: str, task: str, max_train_examples: Optional[int], out_dir: str,
                    seed: int = 0) -> str:
    """A copy of a glue_data task folder whose train.tsv keeps `max_train_examples` rows.

    The rows are a seeded random sample kept in file order; the header (when the task
    has one) and every other file are kept as they are. None or a number at least the
    file's size returns `data_dir` itself.
    """
    train = os.path.join(data_dir, "train.tsv")
    with open(train, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    header = [] if task.lower() in _NO_HEADER else lines[:1]
    rows = lines[len(header):]
    if max_train_examples is None or max_train_examples >= len(rows):
        return data_dir
    keep = sorted(random.Random(seed).sample(range(len(rows)), max_train_examples))
    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(data_dir):
        if name != "train.tsv" and os.path.isfile(os.path.join(data_dir, name)):
            shutil.copy(os.path.join(data_dir, name), os.path.join(out_dir, name))
    with open(os.path.join(out_dir, "train.tsv"), "w", encoding="utf-8") as f:
        f.writelines(header + [rows[i] for i in keep])
    return out_dir


# ------------------------------------------------------------------ results
def make_row(point: dict, results: Dict[str, object], wall_s: float, command: str) -> dict:
    """One result row: the point's settings, its eval metrics and parameter counts."""
    row = {k: point[k] for k in ("key", "groups", "mode", "adapter_size", "init_scale", "top_k")}
    row.update({k: v for k, v in results.items() if k.startswith("eval_")})
    row["trainable_params"] = int(results["trainable_params"])
    row["all_params"] = int(results["all_params"])
    row["wall_s"] = round(float(wall_s), 1)
    row["command"] = command
    return row


def label(row: dict) -> str:
    """Short human label of a row: `adapter 64 (init 1e-03)`, `layernorm`, `top-2`."""
    if row["mode"] == "adapter":
        return f"adapter {row['adapter_size']} (init {row['init_scale']:.0e})"
    if row["mode"] == "top_k":
        return f"top-{row['top_k']}"
    return row["mode"]


def series(rows: List[dict], metric: str) -> Dict[str, List[tuple]]:
    """The plotted series, each sorted along its x axis.

    Returns:
        {"size": [(trainable, metric, size)], "init_scale": [(scale, metric, size)],
         "layernorm": [(trainable, metric, None)], "top_k": [(trainable, metric, k)]}.
    """
    out = {"size": [], "init_scale": [], "layernorm": [], "top_k": []}
    for row in rows:
        if metric not in row:
            continue
        value = float(row[metric])
        if "size" in row["groups"]:
            out["size"].append((row["trainable_params"], value, row["adapter_size"]))
        if "init_scale" in row["groups"]:
            out["init_scale"].append((row["init_scale"], value, row["adapter_size"]))
        if row["mode"] == "layernorm":
            out["layernorm"].append((row["trainable_params"], value, None))
        if row["mode"] == "top_k":
            out["top_k"].append((row["trainable_params"], value, row["top_k"]))
    return {k: sorted(v, key=lambda t: t[0]) for k, v in out.items()}


def plot(rows: List[dict], path: str, metric: str, title: str = "") -> None:
    """Two panels: dev metric vs trainable parameters (size sweep and baselines, log x),
    and dev metric vs adapter init scale (log x). Values are shown x100."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import FuncFormatter, LogLocator

    data = series(rows, metric)
    name = metric[5:] if metric.startswith("eval_") else metric
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    if data["size"]:
        xs, ys, sizes = zip(*data["size"])
        left.plot(xs, [100 * y for y in ys], "o-", label="adapters (size sweep)")
        for x, y, size in data["size"]:
            left.annotate(str(size), (x, 100 * y), textcoords="offset points", xytext=(4, 4),
                          fontsize=8)
    if data["top_k"]:
        xs, ys, ks = zip(*data["top_k"])
        left.plot(xs, [100 * y for y in ys], "s--", label="fine-tune top k layers")
        for x, y, k in data["top_k"]:
            left.annotate(f"k={k}", (x, 100 * y), textcoords="offset points", xytext=(4, -10),
                          fontsize=8)
    if data["layernorm"]:
        xs, ys, _ = zip(*data["layernorm"])
        left.plot(xs, [100 * y for y in ys], "^", markersize=9, label="LayerNorm only")
    left.set_xscale("log")
    left.set_xlabel("trainable parameters")
    left.set_ylabel(f"dev {name} (%)")
    # Ticks at 1, 2 and 5 x 10^n, written 200k / 1M: readable on a short log axis.
    count_format = FuncFormatter(
        lambda x, _: f"{x / 1e6:g}M" if x >= 1e6 else f"{x / 1e3:g}k" if x >= 1e3 else f"{x:g}")
    left.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    left.xaxis.set_major_formatter(count_format)
    left.xaxis.set_minor_locator(LogLocator(subs="auto"))
    left.xaxis.set_minor_formatter(FuncFormatter(lambda x, _: ""))
    left.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    if data["init_scale"]:
        xs, ys, sizes = zip(*data["init_scale"])
        right.plot(xs, [100 * y for y in ys], "o-",
                   label=f"adapters, size {sorted(set(sizes))[0]}" if len(set(sizes)) == 1
                   else "adapters")
        right.legend(fontsize=8)
    right.set_xscale("log")
    right.set_xlabel("adapter init scale (stddev)")
    right.set_ylabel(f"dev {name} (%)")
    right.grid(True, alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    atomic_write_with(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)


def markdown(rows: List[dict], metrics: List[str]) -> str:
    """A table: run, sweep groups, trainable params, the metrics (x100), wall time."""
    head = ["run", "sweep", "trainable params", "trainable%"] + [f"dev {m[5:]}" for m in metrics] \
        + ["wall time"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = {g: i for i, g in enumerate(GROUPS)}
    for row in sorted(rows, key=lambda r: (min(order[g] for g in r["groups"]),
                                           r["trainable_params"], r["init_scale"] or 0)):
        cells = [label(row), ", ".join(row["groups"]), f"{row['trainable_params']:,}",
                 f"{100 * row['trainable_params'] / row['all_params']:.2f}"]
        cells += [f"{100 * float(row[m]):.2f}" if m in row else "—" for m in metrics]
        cells.append(f"{row['wall_s'] / 60:.1f} min")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(result: dict, stem: str, metric: str, title: str = "") -> Dict[str, str]:
    """Writes `<stem>.json`, `<stem>.md` and `<stem>.png`; returns their paths."""
    metrics = sorted({k for row in result["rows"] for k in row
                      if k.startswith("eval_") and k != "eval_loss"})
    paths = harness.write_results(stem, result, markdown(result["rows"], metrics))
    plot(result["rows"], stem + ".png", metric, title)
    return {**paths, "plot": stem + ".png"}


def previous_rows(path: str, settings: dict) -> Dict[str, dict]:
    """Rows of an earlier sweep with identical settings, by point key (for resuming)."""
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        previous = json.load(f)
    if previous.get("settings") != settings:
        return {}
    return {row["key"]: row for row in previous.get("rows", [])}


# ------------------------------------------------------------------ running
def run_point(point: dict, args, data_dir: str, learning_rates: Dict[str, float]) -> dict:
    """Runs run_classifier.py for one point (afresh; its output goes to
    `<work_dir>/<key>.log`) and returns its row."""
    output_dir = os.path.join(args.work_dir, point["key"])
    command = [sys.executable, "-m", "adapter_bert.run_classifier",
               f"--task_name={args.task_name}", "--do_train", "--do_eval",
               f"--data_dir={data_dir}", f"--output_dir={output_dir}",
               f"--max_seq_length={args.max_seq_length}",
               f"--train_batch_size={args.train_batch_size}",
               f"--num_train_epochs={args.epochs:g}", f"--eval_batch_size={args.eval_batch_size}",
               f"--seed={args.seed}", "--save_checkpoints_steps=1000000",
               *point_flags(point, learning_rates), *args.extra]
    done = harness.run(command, output_dir,
                       log_path=os.path.join(args.work_dir, point["key"] + ".log"))
    shown = " ".join(command[1:]).replace(data_dir, "<data>")
    return make_row(point, done.results, done.wall_s, shown)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task_name", default="MRPC")
    parser.add_argument("--data_dir",
                        default=os.path.join(harness.REPO, "..", "shared", "data", "glue", "MRPC"))
    parser.add_argument("--sizes", default="8,64,256", help="adapter sizes (size sweep)")
    parser.add_argument("--size_init_scale", type=float, default=1e-3,
                        help="init scale of the size sweep")
    parser.add_argument("--init_scales", default="1e-4,1e-2,1",
                        help="adapter init scales (init-scale sweep); empty to skip")
    parser.add_argument("--init_scale_size", type=int, default=64,
                        help="adapter size of the init-scale sweep")
    parser.add_argument("--top_k", default="1,2", help="top-k baselines; empty to skip")
    parser.add_argument("--no_layernorm", action="store_true",
                        help="skip the LayerNorm-only baseline")
    parser.add_argument("--max_train_examples", type=int, default=1000,
                        help="training examples (seeded random subset); 0 = all")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--max_seq_length", type=int, default=64)
    parser.add_argument("--train_batch_size", type=int, default=32)
    parser.add_argument("--eval_batch_size", type=int, default=64)
    parser.add_argument("--adapter_learning_rate", type=float, default=1e-3)
    parser.add_argument("--layernorm_learning_rate", type=float, default=1e-3)
    parser.add_argument("--top_k_learning_rate", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--metric", default="eval_accuracy", help="metric on the plot's y axis")
    parser.add_argument("--work_dir", default="/tmp/adapter_bert_sweeps")
    parser.add_argument("--results_dir", default=harness.RESULTS)
    parser.add_argument("--name", default=None,
                        help="results file stem (default: <task>_adapter_sweeps)")
    parser.add_argument("--extra", default="",
                        help="more run_classifier.py flags, as one string: "
                             "--extra='--init_checkpoint=... --padding=dynamic'")
    args = parser.parse_args(argv)
    args.extra = shlex.split(args.extra)
    return args


def _floats(text):
    return [float(x) for x in text.split(",") if x.strip()]


def main(argv=None) -> dict:
    """Runs the sweep (skipping points already done) and writes JSON, markdown and plot."""
    args = parse_args(argv)
    points = plan_points([int(x) for x in _floats(args.sizes)], _floats(args.init_scales),
                         args.size_init_scale, args.init_scale_size,
                         [int(x) for x in _floats(args.top_k)], not args.no_layernorm)
    if not points:
        raise SystemExit("nothing to run: give --sizes, --init_scales, --top_k or the "
                         "LayerNorm baseline")
    learning_rates = {"adapter": args.adapter_learning_rate,
                      "layernorm": args.layernorm_learning_rate,
                      "top_k": args.top_k_learning_rate}
    settings = {"task": args.task_name, "max_train_examples": args.max_train_examples,
                "epochs": args.epochs, "max_seq_length": args.max_seq_length,
                "train_batch_size": args.train_batch_size, "seed": args.seed,
                "learning_rates": learning_rates, "extra": args.extra}
    stem = os.path.join(args.results_dir, args.name or f"{args.task_name.lower()}_adapter_sweeps")
    done = previous_rows(stem + ".json", settings)
    data_dir = subset_task_dir(args.data_dir, args.task_name, args.max_train_examples or None,
                               os.path.join(args.work_dir, "data"), seed=args.seed)
    rows = []
    title = (f"{args.task_name}: {args.max_train_examples or 'all'} train examples, "
             f"{args.epochs:g} epochs, seq {args.max_seq_length}, seed {args.seed}")
    for point in points:
        if point["key"] in done:
            row = done[point["key"]]
            row["groups"] = point["groups"]
            print(f"= {point['key']}: already done", flush=True)
        else:
            row = run_point(point, args, data_dir, learning_rates)
        rows.append(row)
        print(f"{label(row)}: {args.metric} = {row.get(args.metric)} "
              f"({row['trainable_params']:,} trainable, {row['wall_s']:.0f} s)", flush=True)
        # Written after every point, so an interrupted sweep keeps what it finished.
        paths = write_outputs({"settings": settings, "rows": rows}, stem, args.metric, title)
    for kind, path in paths.items():
        print(f"{kind}: {path}", flush=True)
    return {"settings": settings, "rows": rows}


if __name__ == "__main__":
    main()
