"""The GLUE table's peer rows over seeds: AdapterHub Houlsby (1e-3) and PyTorch
`transformers` full fine-tuning (5e-5) on the same MiniLM and data, 3 epochs, seeds 42-44.

Each run is bench/peer_glue.py in its own process, under --peer_python (a Python with
PyTorch, transformers 4.57 and `adapters` 1.3). Its JSON line becomes
bench/results/glue_peers/<task>_<system>_<lr>_seed<N>.json, written atomically when the
run ends; a run whose record exists is not run again, so a stopped suite resumes where it
stopped. bench.glue_table reads these records for its peer rows.

Order: AdapterHub on CoLA, RTE, MRPC (seeds 42-44), then full fine-tuning likewise.

Usage:
    python -m bench.glue_peers --peer_python=/path/to/venv/bin/python
    python -m bench.glue_peers --peer_python=... --tasks=cola --systems=adapterhub
"""

import argparse
import json
import os
import subprocess
import sys

from bench.harness import REPO, RESULTS, write_json
from bench.robust_tables import read_records
from adapter_bert.model.checkpoints import default_backbone_dir

PEER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer_glue.py")
PEER_RESULTS = os.path.join(RESULTS, "glue_peers")
GLUE_DIR = os.path.join(REPO, "..", "shared", "data", "glue")
FOLDERS = {"cola": "CoLA", "sst-2": "SST-2", "mrpc": "MRPC", "rte": "RTE"}
SYSTEMS = {"adapterhub": "1e-3", "full": "5e-5"}  # the learning rate each peer row uses
SEEDS = (42, 43, 44)


def record_name(task: str, system: str, seed: int) -> str:
    return f"{task}_{system}_{SYSTEMS[system]}_seed{seed}"


def read_peer_records(results_dir: str = PEER_RESULTS) -> dict:
    """{record name: record} for every finished peer run."""
    return read_records(results_dir)


def run_one(task: str, system: str, seed: int, args) -> dict:
    """Runs one peer training; returns its record (raises on a failed run)."""
    command = [args.peer_python, PEER_SCRIPT, f"--system={system}", f"--task={task}",
               f"--data_dir={os.path.join(args.glue_dir, FOLDERS[task])}",
               f"--model_dir={default_backbone_dir()}",
               f"--learning_rate={SYSTEMS[system]}", f"--seed={seed}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no error output"])[-1]
        raise RuntimeError(f"{record_name(task, system, seed)}: peer run failed "
                           f"(exit {done.returncode}): {last}")
    record = json.loads(done.stdout.strip().splitlines()[-1])
    record["command"] = " ".join(["python", "bench/peer_glue.py"] + command[2:4]
                                 + [f"--data_dir=$GLUE_DIR/{FOLDERS[task]}",
                                    "--model_dir=<MiniLM>"] + command[6:])
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer_python", required=True)
    parser.add_argument("--glue_dir", default=os.path.normpath(GLUE_DIR))
    parser.add_argument("--results_dir", default=PEER_RESULTS)
    parser.add_argument("--tasks", default="cola,rte,mrpc")
    parser.add_argument("--systems", default="adapterhub,full")
    args = parser.parse_args(argv)
    tasks = args.tasks.split(",")
    systems = args.systems.split(",")
    for name, given, allowed in (("tasks", tasks, FOLDERS), ("systems", systems, SYSTEMS)):
        unknown = [x for x in given if x not in allowed]
        if unknown:
            parser.error(f"--{name}: unknown {', '.join(unknown)}; expected some of "
                         f"{', '.join(allowed)}")
    os.makedirs(args.results_dir, exist_ok=True)
    for system in systems:
        for task in tasks:
            for seed in SEEDS:
                path = os.path.join(args.results_dir, record_name(task, system, seed) + ".json")
                if os.path.exists(path):
                    continue
                try:
                    record = run_one(task, system, seed, args)
                except RuntimeError as failure:
                    print(failure, file=sys.stderr)
                    return 1
                write_json(path, record)
                print(f"{record_name(task, system, seed)}: MCC {record['dev_mcc']:.2f}, "
                      f"acc {record['dev_accuracy']:.2f}, F1 {record['dev_f1']:.2f}, "
                      f"{record['wall_s']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
