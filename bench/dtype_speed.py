"""Speed per dtype, side by side with AdapterHub at the same dtype, measured in one run.

Rows (embedded MiniLM, every batch padded to --seq; each measurement its own process):

- adapter-bert adapter training (batch 32) and inference (batch 64) in float32 and in
  mixed_bfloat16 (bench.speed's workers);
- AdapterHub `adapters` Houlsby training and inference in float32 and under
  `torch.autocast` bfloat16 (bench/peer_adapterhub.py, run with --peer_python: a Python
  with torch, transformers 4.57 and adapters 1.3).

Training: median step of --steps after --warmup untimed ones; inference: median of
--steps batches. All rows run --rounds times, alternating, so that a slow spell of a
shared machine cannot fall on one row only; each row reports its median round.

It prints which dtype `--dtype=auto` picks on this machine and the ratios issue targets
use: training at the default against AdapterHub at the same dtype and against our
float32, inference at the default against AdapterHub at the same dtype. Writes
bench/results/dtype_speed.{json,md} with the CPU model and flags it ran on.

Usage:
    python -m bench.dtype_speed --peer_python=/path/to/venv/bin/python
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import adapter_bert  # noqa: F401  (TensorFlow's CPU settings, before the workers)
from bench import speed
from bench.harness import REPO, RESULTS, cpu_description, write_results

OURS = {"float32": "float32", "bfloat16": "mixed_bfloat16"}
PEER_SCRIPT = os.path.join(REPO, "bench", "peer_adapterhub.py")


def ours(kind, dtype, args) -> dict:
    worker_args = argparse.Namespace(seq=args.seq, batch=args.batch, steps=args.steps,
                                     warmup=args.warmup, epoch_fraction=1.0,
                                     profile_steps=0, data_dir=speed.MRPC_DIR)
    options = {"dtype": OURS[dtype], "xla": False}
    if kind == "train":
        options["mode"] = "adapter"
    return speed.run_worker(kind, worker_args, **options)


def peer(kind, dtype, args) -> dict:
    from adapter_bert.model.checkpoints import default_backbone_dir
    command = [args.peer_python, PEER_SCRIPT, f"--worker={kind}", f"--dtype={dtype}",
               f"--model_dir={default_backbone_dir()}", f"--seq={args.seq}",
               f"--batch={args.batch}", f"--steps={args.steps}", f"--warmup={args.warmup}"]
    print("running: AdapterHub", kind, dtype, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"AdapterHub {kind} {dtype} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


ROWS = [(system, kind, dtype) for kind in ("train", "infer")
        for dtype in ("float32", "bfloat16") for system in ("adapter-bert", "AdapterHub")]


def measure(args) -> dict:
    rounds = {row: [] for row in ROWS}
    for _ in range(args.rounds):
        for system, kind, dtype in ROWS:
            run = ours if system == "adapter-bert" else peer
            rounds[(system, kind, dtype)].append(run(kind, dtype, args)["examples_per_s"])
    return {f"{system} {kind} {dtype}": {"examples_per_s": statistics.median(values),
                                         "rounds": values}
            for (system, kind, dtype), values in rounds.items()}


def ratios(rows: dict, default: str) -> dict:
    """The targets' ratios, with our rows at `default` ("float32" or "bfloat16")."""
    def rate(system, kind, dtype):
        return rows[f"{system} {kind} {dtype}"]["examples_per_s"]
    return {
        "train: default / AdapterHub same dtype": rate("adapter-bert", "train", default)
        / rate("AdapterHub", "train", default),
        "train: default / our float32": rate("adapter-bert", "train", default)
        / rate("adapter-bert", "train", "float32"),
        "infer: default / AdapterHub same dtype": rate("adapter-bert", "infer", default)
        / rate("AdapterHub", "infer", default),
        "infer: default / our float32": rate("adapter-bert", "infer", default)
        / rate("adapter-bert", "infer", "float32"),
    }


def markdown(results: dict) -> str:
    cpu, rows = results["cpu"], results["rows"]
    lines = [f"CPU: {cpu['model']} ({cpu['vendor']}), {cpu['cores']} cores, bfloat16 flags: "
             f"{', '.join(cpu['bf16_flags']) or 'none'}. `--dtype=auto` picks "
             f"{results['auto'][0]} ({results['auto'][1]}).", "",
             f"Examples/s, median of {results['settings']['rounds']} alternating rounds "
             "(each round's figure in brackets); training batch "
             f"{results['settings']['batch']}, inference batch 64, seq "
             f"{results['settings']['seq']}.", "",
             "| | adapter-bert | AdapterHub | adapter-bert / AdapterHub |", "|---|---|---|---|"]
    for kind, name in (("train", "training"), ("infer", "inference")):
        for dtype in ("float32", "bfloat16"):
            ours_row = rows[f"adapter-bert {kind} {dtype}"]
            peer_row = rows[f"AdapterHub {kind} {dtype}"]
            label = {"float32": "float32", "bfloat16": "bfloat16 (mixed_bfloat16 / "
                     "torch.autocast)"}[dtype]

            def cell(row):
                return (f"{row['examples_per_s']:.1f} ("
                        + " / ".join(f"{v:.1f}" for v in row["rounds"]) + ")")
            lines.append(f"| {name}, {label} | {cell(ours_row)} | {cell(peer_row)} | "
                         f"{ours_row['examples_per_s'] / peer_row['examples_per_s']:.2f}x |")
    lines += ["", "Ratios at the default dtype:", ""]
    lines += [f"- {name}: {value:.2f}x" for name, value in results["ratios"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer_python", required=True,
                        help="a Python with torch, transformers 4.57 and adapters 1.3")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(RESULTS, "dtype_speed"))
    args = parser.parse_args(argv)
    from adapter_bert.precision import choose_dtype, describe_hardware
    auto = choose_dtype(describe_hardware())
    rows = measure(args)
    default = "bfloat16" if auto[0] == "mixed_bfloat16" else "float32"
    results = {"settings": {k: getattr(args, k) for k in ("seq", "batch", "steps", "warmup",
                                                          "rounds")},
               "cpu": cpu_description(), "auto": list(auto), "rows": rows,
               "ratios": ratios(rows, default)}
    table = markdown(results)
    write_results(args.out, results, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
