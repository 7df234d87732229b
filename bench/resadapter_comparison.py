"""Houlsby adapters vs the ResAdapter variants on MRPC and SQuAD v2.0, same data and budget.

Arms (each one `run_classifier.py` / `run_squad.py` command, timed):
- `houlsby`: two bottleneck adapters per layer + LayerNorms + head (+ MiniLM's untrained
  pooler on MRPC, `--train_pooler=auto`), the repository's default adapter tuning;
- `resadapter-pipeline`, `resadapter-resnet`, `resadapter-resnext`: a side network of
  cells beside the frozen backbone (`--adapter_type=resadapter`), feedforward cells by
  default (`--cell=attention` for self-attention cells).

Every arm gets the same data, epochs, batch size, sequence length, seed, adapter size
and learning rate. The data is cut into --work_dir (never into the repository):
- MRPC: the first --mrpc_max_train_examples rows of train.tsv, the first
  --mrpc_max_eval_examples rows of dev.tsv (default: all of both);
- SQuAD v2.0: dev-v2.0.json split by article with `squad_adapter_vs_full.prepare_data`
  (first --v2_train_articles articles train, at most --max_train_questions questions; the
  next --v2_eval_articles articles evaluate; no article in both).

Writes `<results_dir>/resadapter_comparison.{json,md}`: dev metrics, trainable
parameters and wall time (training + evaluation) per arm.

Usage (from the repository root):
    python -m bench.resadapter_comparison                     # the full comparison
    python -m bench.resadapter_comparison --mrpc_max_train_examples=64 --mrpc_epochs=1 \
        --max_train_questions=32 --v2_train_articles=1 --v2_eval_articles=1 \
        --results_dir=/tmp/resadapter_check                   # a quick end-to-end check
"""

import argparse
import copy
import json
import os

from bench import harness
from bench import mrpc_adapter_vs_full as mrpc_bench
from bench import squad_adapter_vs_full as squad_bench

STEM = "resadapter_comparison"
TASKS = ("mrpc", "squad_v2")
ARMS = ("houlsby", "resadapter-pipeline", "resadapter-resnet", "resadapter-resnext")
# Both benchmark modules run mode "adapter" (--tuning_mode=adapter); an arm adds its flags.
BASE_MODE = "adapter"


def arm_flags(arm, args):
    """The flags that make `arm` out of the benchmark modules' "adapter" mode."""
    flags = [f"--adapter_size={args.adapter_size}"]
    if arm.startswith("resadapter-"):
        flags += ["--adapter_type=resadapter",
                  f"--resadapter_variant={arm.split('-', 1)[1]}",
                  f"--resadapter_cell={args.cell}"]
    return flags + list(args.extra)


def _head_lines(path, count):
    """The header plus the first `count` data lines of a TSV file (all when count is None)."""
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    return lines if count is None else lines[:count + 1]


def prepare_mrpc(args):
    """Writes the MRPC train/dev subsets into work_dir; returns (data_dir, description)."""
    target = os.path.join(args.work_dir, "mrpc_data")
    os.makedirs(target, exist_ok=True)
    counts = {}
    for split, limit in (("train", args.mrpc_max_train_examples),
                         ("dev", args.mrpc_max_eval_examples)):
        lines = _head_lines(os.path.join(args.mrpc_dir, f"{split}.tsv"), limit)
        with open(os.path.join(target, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.writelines(lines)
        counts[split] = len(lines) - 1
    return target, f"{counts['train']} train / {counts['dev']} dev examples of GLUE MRPC"


def run_mrpc(arm, data_dir, args):
    """One run_classifier.py run of `arm`; returns its row."""
    arm_args = copy.copy(args)
    arm_args.work_dir = os.path.join(args.work_dir, "mrpc", arm)
    arm_args.data_dir, arm_args.epochs = data_dir, args.mrpc_epochs
    arm_args.max_seq_length = args.mrpc_max_seq_length
    pooling = [f"--resadapter_pooling={args.pooling}"] if arm.startswith("resadapter-") else []
    arm_args.extra = arm_flags(arm, args) + pooling + _backbone_flag(args)
    row = mrpc_bench.run_mode(BASE_MODE, args.seed, arm_args)  # it starts from a clean directory
    return {"task": "mrpc", "arm": arm, "command": row["command"], "wall_s": row["wall_s"],
            "metrics": {"accuracy": row["dev_accuracy"], "f1": row["dev_f1"]},
            "trainable_params": row["trainable_params"], "all_params": row["all_params"],
            "trainable_percent": row["trainable_percent"]}


def run_squad_v2(arm, files, args):
    """One run_squad.py run of `arm` on the v2.0 split; returns its row."""
    arm_args = copy.copy(args)
    arm_args.work_dir = os.path.join(args.work_dir, "squad_v2", arm)
    os.makedirs(arm_args.work_dir, exist_ok=True)
    arm_args.epochs, arm_args.max_seq_length = args.squad_epochs, args.squad_max_seq_length
    arm_args.extra = arm_flags(arm, args)
    row = squad_bench.run_one("v2.0", BASE_MODE, files, arm_args)
    results = row["results"]
    metrics = {key: results[key] for key in ("exact", "f1", "HasAns_f1", "NoAns_f1",
                                             "best_exact", "best_f1") if key in results}
    return {"task": "squad_v2", "arm": arm, "command": row["command"], "wall_s": row["wall_s"],
            "metrics": metrics, "trainable_params": results["trainable_params"],
            "all_params": results["all_params"],
            "trainable_percent": results["trainable_percent"]}


def _backbone_flag(args):
    # squad_bench.run_one passes args.init_checkpoint itself; run_mode takes it as a flag.
    return [f"--init_checkpoint={args.init_checkpoint}"] if args.init_checkpoint else []


def _metric(metrics, key):
    return f"{metrics[key]:.2f}" if key in metrics else "n/a"


def markdown(rows, data, settings):
    """The results as one markdown table per task, with the data each task used."""
    lines = [f"Settings: {json.dumps(settings)}", ""]
    columns = {"mrpc": [("dev acc", "accuracy"), ("dev F1", "f1")],
               "squad_v2": [("EM", "exact"), ("F1", "f1"), ("HasAns F1", "HasAns_f1"),
                            ("NoAns F1", "NoAns_f1"), ("best F1", "best_f1")]}
    titles = {"mrpc": "MRPC", "squad_v2": "SQuAD v2.0 (dev-v2.0 split by article)"}
    for task in TASKS:
        task_rows = [row for row in rows if row["task"] == task]
        if not task_rows:
            continue
        lines += [f"**{titles[task]}.** {data[task]}", "",
                  "| arm | " + " | ".join(name for name, _ in columns[task])
                  + " | trainable / total | trainable% | wall time (train + eval) |",
                  "|---|" + "---|" * (len(columns[task]) + 3)]
        for row in task_rows:
            values = " | ".join(_metric(row["metrics"], key) for _, key in columns[task])
            lines.append(f"| {row['arm']} | {values} | {row['trainable_params']:,} / "
                         f"{row['all_params']:,} | {row['trainable_percent']:.2f} | "
                         f"{row['wall_s'] / 60:.1f} min |")
        lines.append("")
    lines += ["Commands:", ""] + [f"    python {row['command']}" for row in rows]
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = os.path.join(harness.REPO, "..", "shared", "data")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--cell", default="feedforward", choices=("feedforward", "attention"),
                        help="ResAdapter cell of every resadapter arm")
    parser.add_argument("--pooling", default="cls", choices=("cls", "mean"),
                        help="what the ResAdapter arms' MRPC classification head reads")
    parser.add_argument("--adapter_size", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--mrpc_dir", default=os.path.join(shared, "glue", "MRPC"))
    parser.add_argument("--mrpc_max_train_examples", type=int, default=None,
                        help="first N rows of train.tsv (default: all 3,668)")
    parser.add_argument("--mrpc_max_eval_examples", type=int, default=None,
                        help="first N rows of dev.tsv (default: all 408)")
    parser.add_argument("--mrpc_epochs", type=float, default=3.0)
    parser.add_argument("--mrpc_max_seq_length", type=int, default=128)
    parser.add_argument("--squad_dir", default=os.path.join(shared, "squad"))
    parser.add_argument("--max_train_questions", type=int, default=2000)
    parser.add_argument("--v2_train_articles", type=int, default=12)
    parser.add_argument("--v2_eval_articles", type=int, default=4)
    parser.add_argument("--squad_epochs", type=float, default=1.0)
    parser.add_argument("--squad_max_seq_length", type=int, default=256)
    parser.add_argument("--doc_stride", type=int, default=128)
    parser.add_argument("--max_query_length", type=int, default=64)
    parser.add_argument("--init_checkpoint", default=None,
                        help="backbone for a quick check; default: the embedded MiniLM")
    parser.add_argument("--work_dir", default="/tmp/adapter_bert_bench_resadapter")
    parser.add_argument("--results_dir", default=harness.RESULTS)
    parser.add_argument("--extra", nargs="*", default=[], help="more flags for every run")
    args = parser.parse_args(argv)
    args.tasks, args.arms = args.tasks.split(","), args.arms.split(",")
    unknown = sorted(set(args.tasks) - set(TASKS)) + sorted(set(args.arms) - set(ARMS))
    if unknown:
        parser.error(f"unknown --tasks/--arms value(s): {unknown}")
    # What squad_adapter_vs_full.prepare_data and run_one, and mode_flags.mode_flags, read.
    args.versions, args.eval_articles = ["v2.0"], 0
    args.adapter_lr, args.bias_correction = args.learning_rate, ""
    return args


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.work_dir, exist_ok=True)
    rows, data = [], {}
    if "mrpc" in args.tasks:
        mrpc_dir, data["mrpc"] = prepare_mrpc(args)
        rows += [run_mrpc(arm, mrpc_dir, args) for arm in args.arms]
    if "squad_v2" in args.tasks:
        files = squad_bench.prepare_data(args)["v2.0"]
        data["squad_v2"] = f"Train: {files['train']}. Evaluate: {files['eval']}."
        rows += [run_squad_v2(arm, files, args) for arm in args.arms]
    settings = {k: getattr(args, k) for k in (
        "cell", "pooling", "adapter_size", "learning_rate", "batch_size", "seed",
        "mrpc_max_train_examples",
        "mrpc_max_eval_examples", "mrpc_epochs", "mrpc_max_seq_length", "max_train_questions",
        "v2_train_articles", "v2_eval_articles", "squad_epochs", "squad_max_seq_length",
        "doc_stride", "max_query_length")}
    settings["backbone"] = args.init_checkpoint or "embedded all-MiniLM-L6-v2"
    table = markdown(rows, data, settings)
    harness.write_results(os.path.join(args.results_dir, STEM),
                          {"settings": settings, "data": data, "runs": rows}, table)
    print(table)


if __name__ == "__main__":
    main()
