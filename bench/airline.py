"""The paper's "Crowdflower airline" row (its Table 2) on the embedded MiniLM: Twitter US
Airline Sentiment, 14,640 tweets, 3 classes (62.7% negative).

The split (the paper's is not published): the tweets are grouped by `airline_sentiment`,
each group's row order shuffled with NumPy's RandomState(20190201), and of each group the
first 10% (rounded) are test, the next 10% dev, the rest train: 11,712 / 1,464 / 1,464.
The split is written as `text,label` CSV files into --work_dir (never committed);
`split_digest` in every record fixes which split a run saw.

Systems, 3 epochs, seeds 42-44, each run evaluated on dev and on test:
- adapters: `run_classifier.py` at its defaults (Houlsby adapters, size 64, lr 1e-3),
  float32 (`--dtype=float32` given: the default, `--dtype=auto`, depends on the CPU, and
  every record must mean the same on every machine);
- adapters_corrected: the same with `--adam_bias_correction` (plain bias-corrected AdamW,
  AdapterHub's optimizer), to tell the default optimizer's part in the adapters' spread;
- full: `run_classifier.py --tuning_mode=full` (lr 5e-5);
- adapterhub, hf_full: bench/peer_glue.py's AdapterHub Houlsby adapters (1e-3) and
  PyTorch `transformers` full fine-tuning (5e-5), under --peer_python.

Each run's record is bench/results/airline/<system>_seed<N>.json, written when it ends; a
run with a record is not run again, and a stopped run of this package resumes from its
checkpoint in --work_dir. The table is bench/results/airline.md (and .json).

Usage:
    python -m bench.airline --data=<Tweets.csv>                # this package's rows
    python -m bench.airline --data=<Tweets.csv> --systems=adapterhub,hf_full \
        --peer_python=/path/to/venv/bin/python
"""

import argparse
import collections
import csv
import hashlib
import json
import os
import subprocess
import sys
import time

import numpy as np

from bench.harness import (REPO, RESULTS, mean_sd_text, read_eval_results, runner_command,
                           write_json, write_results)
from bench.robust_tables import read_records

RECORDS = os.path.join(RESULTS, "airline")
DATA = os.path.join(REPO, "..", "shared", "data", "classification", "airline", "Tweets.csv")
SPLIT_SEED = 20190201
LABELS = ("negative", "neutral", "positive")
SEEDS = (42, 43, 44)
SYSTEMS = {"adapters": [], "adapters_corrected": ["--adam_bias_correction"],
           "full": ["--tuning_mode=full"], "adapterhub": "1e-3", "hf_full": "5e-5"}
PEERS = {"adapterhub": "adapterhub", "hf_full": "full"}
NAMES = {"adapters": "adapter-bert, Houlsby adapters (size 64), defaults",
         "adapters_corrected": "adapter-bert, Houlsby adapters (size 64), "
                               "`--adam_bias_correction`",
         "full": "adapter-bert, full fine-tuning (`--tuning_mode=full`)",
         "adapterhub": "AdapterHub `adapters`, Houlsby adapters (size 64), 1e-3",
         "hf_full": "PyTorch `transformers`, full fine-tuning, 5e-5"}
# The paper's row (BERT-Base, test accuracy): adapters, full fine-tuning, no-BERT baseline.
PAPER = {"adapters": "84.5 ± 0.2", "full": "83.6 ± 0.3", "baseline": "84.5"}


def write_split(source: str, work_dir: str) -> str:
    """Writes train/dev/test.csv (`text,label`) of the documented split; returns the
    digest of the three files."""
    with open(source, encoding="utf-8", newline="") as f:
        rows = [(row["text"], row["airline_sentiment"]) for row in csv.DictReader(f)]
    groups = collections.defaultdict(list)
    for i, (_, label) in enumerate(rows):
        groups[label].append(i)
    generator = np.random.RandomState(SPLIT_SEED)
    parts = {"train": [], "dev": [], "test": []}
    for label in sorted(groups):
        order = generator.permutation(groups[label]).tolist()
        tenth = int(round(0.1 * len(order)))
        parts["test"] += order[:tenth]
        parts["dev"] += order[tenth:2 * tenth]
        parts["train"] += order[2 * tenth:]
    os.makedirs(work_dir, exist_ok=True)
    digest = hashlib.sha256()
    for name, indices in parts.items():
        path = os.path.join(work_dir, f"{name}.csv")
        with open(path, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            for i in sorted(indices):
                writer.writerow(rows[i])
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def _ours(system: str, seed: int, work_dir: str) -> dict:
    out = os.path.join(work_dir, "runs", f"{system}_seed{seed}")
    data = [f"--train_file={work_dir}/train.csv", f"--dev_file={work_dir}/dev.csv",
            "--task_name=airline", f"--output_dir={out}", f"--seed={seed}", "--dtype=float32"]
    flags = ["--do_train", "--do_eval", *data, *SYSTEMS[system]]
    start = time.time()
    _run(runner_command("run_classifier", flags))
    wall = time.time() - start
    dev = read_eval_results(os.path.join(out, "eval_results.txt"))
    _run(runner_command("run_classifier", [
        "--do_eval", *[d.replace("dev.csv", "test.csv") for d in data], *SYSTEMS[system]]))
    test = read_eval_results(os.path.join(out, "eval_results.txt"))
    # The record's command is the one run, without the work folder and the output folder.
    command = " ".join(["python -m adapter_bert.run_classifier"]
                       + [f.replace(f"{work_dir}/", "") for f in flags
                          if not f.startswith("--output_dir=")])
    return {"system": system, "seed": seed, "wall_s": round(wall, 1), "command": command,
            "dev_accuracy": 100 * dev["eval_accuracy"], "dev_macro_f1": 100 * dev["eval_macro_f1"],
            "test_accuracy": 100 * test["eval_accuracy"],
            "test_macro_f1": 100 * test["eval_macro_f1"],
            "trainable_params": int(dev["trainable_params"]), "all_params": int(dev["all_params"])}


def _peer(system: str, seed: int, work_dir: str, peer_python: str) -> dict:
    from adapter_bert.model.checkpoints import default_backbone_dir
    command = [peer_python, os.path.join(REPO, "bench", "peer_glue.py"),
               f"--system={PEERS[system]}", "--task=airline", f"--data_dir={work_dir}",
               f"--model_dir={default_backbone_dir()}", f"--learning_rate={SYSTEMS[system]}",
               f"--seed={seed}", "--eval_splits=dev,test"]
    done = _run(command)
    record = json.loads(done.stdout.strip().splitlines()[-1])
    return {"system": system, "seed": seed, "wall_s": record["wall_s"],
            "command": " ".join(["python", "bench/peer_glue.py"] + command[2:4]
                                + ["--data_dir=<split>", "--model_dir=<MiniLM>"] + command[6:]),
            **{key: record[key] for key in ("dev_accuracy", "dev_macro_f1", "test_accuracy",
                                            "test_macro_f1", "trainable_params")}}


def _run(command):
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no error output"])[-1]
        raise RuntimeError(f"{' '.join(command[:4])}...: exit {done.returncode}: {last}")
    return done


def table(records: dict, majority: float) -> str:
    """The markdown table: mean ± sample std over seeds 42-44 (`SEEDS`), which every
    system ran, so that the rows compare like with like; a line after it gives the test
    accuracy over every seed for the systems run on more. (Wall times stay in the
    records only: these runs shared the CPU with other work.)"""
    lines = ["| system | seeds | test accuracy | test macro-F1 | dev accuracy | trained "
             "parameters |", "|---|---|---|---|---|---|"]
    more = []
    for system in SYSTEMS:
        every = sorted((r for r in records.values() if r.get("system") == system),
                       key=lambda r: r["seed"])
        runs = [r for r in every if r["seed"] in SEEDS]
        if not runs:
            continue
        cells = [mean_sd_text([r[k] for r in runs]) for k in ("test_accuracy", "test_macro_f1",
                                                            "dev_accuracy")]
        lines.append(f"| {NAMES[system]} | {', '.join(str(r['seed']) for r in runs)} | "
                     + " | ".join(cells) + f" | {int(runs[0]['trainable_params']):,} |")
        if len(every) > len(runs):
            more.append(f"{NAMES[system]} {mean_sd_text([r['test_accuracy'] for r in every])} "
                        f"(seeds {', '.join(str(r['seed']) for r in every)})")
    lines.append("")
    if more:
        lines.append("Test accuracy over every seed run: " + "; ".join(more) + ".")
        lines.append("")
    lines.append(f"Majority class (negative) on test: {majority:.2f}. The paper (BERT-Base): "
                 f"adapters {PAPER['adapters']}, full fine-tuning {PAPER['full']}, no-BERT "
                 f"baseline {PAPER['baseline']}.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.normpath(DATA))
    parser.add_argument("--work_dir", default=os.path.join("/tmp", "adapter_bert_airline"))
    parser.add_argument("--systems", default="adapters,full")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument("--peer_python")
    parser.add_argument("--results_dir", default=RECORDS)
    args = parser.parse_args(argv)
    systems = args.systems.split(",")
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        parser.error(f"--systems: unknown {', '.join(unknown)}; expected some of "
                     f"{', '.join(SYSTEMS)}")
    if any(s in PEERS for s in systems) and not args.peer_python:
        parser.error("--peer_python is needed for the adapterhub and hf_full rows")
    digest = write_split(args.data, args.work_dir)
    os.makedirs(args.results_dir, exist_ok=True)
    for system in systems:
        for seed in map(int, args.seeds.split(",")):
            name = f"{system}_seed{seed}"
            if name in read_records(args.results_dir):
                continue
            print(f"airline: {name} ...", flush=True)
            record = _peer(system, seed, args.work_dir, args.peer_python) if system in PEERS \
                else _ours(system, seed, args.work_dir)
            record["split_digest"] = digest
            write_json(os.path.join(args.results_dir, name + ".json"), record)
            print(f"airline: {name}: test accuracy {record['test_accuracy']:.2f}", flush=True)
    with open(os.path.join(args.work_dir, "test.csv"), encoding="utf-8", newline="") as f:
        test_labels = [row["label"] for row in csv.DictReader(f)]
    majority = 100 * test_labels.count("negative") / len(test_labels)
    records = read_records(args.results_dir)
    markdown = table(records, majority)
    write_results(os.path.join(RESULTS, "airline"), {"majority_test_accuracy": majority,
                                                     "split_digest": digest,
                                                     "records": records}, markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
