"""MRPC on the embedded MiniLM: adapter tuning vs full fine-tuning with the same budget.

Runs run_classifier.py once per mode and seed (same data, sequence length, batch size,
epochs and seeds; each mode at its own learning rate, --adapter_lr / --full_lr, and Adam
variant, --bias_correction=MODES; see bench/mode_flags.py), times each run, and writes
`<--out>.{json,md}` (default bench/results/mrpc_adapter_vs_full). With several --seeds
the table adds each mode's mean and sample standard deviation: MRPC's 408 dev examples
make one run's accuracy move by a point or more with the seed alone.

Usage (from the repository root):
    python -m bench.mrpc_adapter_vs_full --data_dir=$GLUE_DIR/MRPC --seeds=42,43,44
"""

import argparse
import json
import os

from bench import harness
from bench.mode_flags import (DEFAULT_RATES, add_mode_arguments, check_mode_arguments,
                              mode_flags, modes, optimizer_label, row_fields)


def run_mode(mode, seed, args):
    """Runs run_classifier.py for one mode and seed (afresh); returns its row."""
    output_dir = os.path.join(args.work_dir, f"{mode}_seed{seed}")
    command = harness.runner_command("run_classifier", [
        "--task_name=MRPC", "--do_train", "--do_eval", f"--data_dir={args.data_dir}",
        f"--output_dir={output_dir}", f"--max_seq_length={args.max_seq_length}",
        f"--train_batch_size={args.batch_size}", f"--num_train_epochs={args.epochs}",
        "--eval_batch_size=64", f"--seed={seed}", "--save_checkpoints_steps=100000",
        *mode_flags(mode, args), *args.extra])
    done = harness.run(command, output_dir)
    results = done.results
    return {"mode": mode, "seed": seed, **row_fields(mode, args),
            "command": " ".join(command[1:]), "wall_s": done.wall_s,
            "dev_accuracy": 100 * results["eval_accuracy"], "dev_f1": 100 * results["eval_f1"],
            "trainable_params": int(results["trainable_params"]),
            "all_params": int(results["all_params"]),
            "trainable_percent": float(results["trainable_percent"])}


def row_seed(row) -> int:
    """A row's seed; rows written before the field existed are read from their command."""
    if "seed" in row:
        return int(row["seed"])
    return int(row["command"].split("--seed=")[1].split()[0])


def merge_rows(path, settings, new_rows):
    """Rows of an earlier run with the same settings, with the (mode, seed) runs just done
    replaced.

    Re-running one mode or adding seeds (e.g. after a change that only affects one
    mode) keeps the other rows. Files from before --seeds kept the seed in `settings`.
    """
    old = []
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            previous = json.load(f)
        previous_settings = dict(previous.get("settings", {}))
        previous_settings.pop("seed", None)
        if previous_settings == settings:
            old = previous["runs"]
    done = {(row["mode"], row_seed(row)) for row in new_rows}
    kept = [row for row in old if (row["mode"], row_seed(row)) not in done]
    return sorted(kept + new_rows,
                  key=lambda row: (list(DEFAULT_RATES).index(row["mode"]), row_seed(row)))


def summary(rows):
    """Per mode and optimizer: number of seeds, mean ± sd of dev accuracy and F1."""
    groups = {}
    for row in rows:
        groups.setdefault((row["mode"], optimizer_label(row)), []).append(row)
    lines = ["| mode | learning rate, Adam | seeds | dev acc | dev F1 |", "|---|---|---|---|---|"]
    for (mode, label), group in groups.items():
        seeds = ",".join(str(row_seed(row)) for row in group)
        lines.append(f"| {mode} | {label} | {seeds} | "
                     f"{harness.mean_sd_text([row['dev_accuracy'] for row in group])} | "
                     f"{harness.mean_sd_text([row['dev_f1'] for row in group])} |")
    return lines


def markdown(rows):
    lines = ["| mode | learning rate, Adam | seed | dev acc | dev F1 | trainable / total | "
             "trainable% | wall time |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['mode']} | {optimizer_label(row)} | {row_seed(row)} | "
                     f"{row['dev_accuracy']:.2f} | {row['dev_f1']:.2f} | "
                     f"{row['trainable_params']:,} / {row['all_params']:,} | "
                     f"{row['trainable_percent']:.2f} | {row['wall_s'] / 60:.1f} min |")
    if len({row_seed(row) for row in rows}) > 1:
        lines += ["", "Mean ± sample standard deviation over seeds:", "", *summary(rows)]
    return "\n".join(lines) + "\n"


def parse_seeds(parser, text):
    """`--seeds=42,43` -> [42, 43], or a parser error naming the flag."""
    try:
        seeds = [int(part) for part in text.split(",")]
    except ValueError:
        parser.error(f"--seeds: expected comma-separated integers, got {text!r}")
    if len(set(seeds)) != len(seeds):
        parser.error(f"--seeds: {text!r} repeats a seed")
    return seeds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir",
                        default=os.path.join(harness.REPO, "..", "shared", "data", "glue", "MRPC"))
    parser.add_argument("--work_dir", default="/tmp/adapter_bert_bench_mrpc")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--seeds", default="42",
                        help="comma-separated; each mode runs once per seed")
    add_mode_arguments(parser)
    parser.add_argument("--out", default=os.path.join(harness.RESULTS, "mrpc_adapter_vs_full"),
                        help="results path without extension (.json and .md are written)")
    parser.add_argument("--extra", action="append", default=[],
                        help="one more run_classifier.py flag (repeat for several)")
    args = parser.parse_args()
    check_mode_arguments(parser, args)
    seeds = parse_seeds(parser, args.seeds)
    stem = args.out
    settings = {k: getattr(args, k) for k in ("max_seq_length", "batch_size", "epochs")}
    new_rows = [run_mode(mode, seed, args) for seed in seeds for mode in modes(args)]
    rows = merge_rows(stem + ".json", settings, new_rows)
    table = markdown(rows)
    harness.write_results(stem, {"settings": settings, "runs": rows}, table)
    print(table)


if __name__ == "__main__":
    main()
