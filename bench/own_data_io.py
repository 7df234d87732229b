"""Training on a large file of your own: the runner's peak memory above the loaded model,
first run (read, tokenise, write the feature cache) and second run (cache hit).

The paper's text sets reach hundreds of thousands of rows (its news-aggregator set about
420,000). This writes a CSV of --rows news-like headlines (4 topics, 8-20 words, quoted
commas in some) and runs `run_classifier.py --do_train` on it as a user would (the
embedded MiniLM, max_seq_length 128, default flags), for 5 training steps, each run in a
fresh process: twice on the same feature cache, for --rows/4 and --rows rows. A run on a
400-row file of the same kind gives the loaded model's own peak (backbone, TensorFlow,
a training step), which the other runs are measured above. Each run prints one JSON line:
wall seconds, seconds tokenising (from the runner's progress line), peak resident memory
(`ru_maxrss` of the runner's process) and its growth over the loaded model.

Usage:
    python -m bench.own_data_io --rows=400000
"""

import argparse
import csv
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

from bench.harness import RESULTS, runner_command, write_results

STEPS = 5
BATCH = 32  # run_classifier.py's default --train_batch_size
BASELINE_ROWS = 400

TOPICS = {"World": "minister talks border election summit treaty protest capital",
          "Sports": "match season coach striker final league injury record",
          "Business": "shares profit market bank merger quarter inflation deal",
          "Sci/Tech": "software chip launch research phone network satellite data"}


def write_file(path: str, rows: int) -> None:
    """A CSV of `rows` headlines (`text,label`), the same for a given count."""
    import numpy as np
    generator = np.random.RandomState(rows)
    names = list(TOPICS)
    words = {name: TOPICS[name].split() + "the a of in on for new after says".split()
             for name in names}
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for i in range(rows):
            topic = names[i % 4]
            count = generator.randint(8, 21)
            text = " ".join(generator.choice(words[topic], count))
            if i % 7 == 0:
                text = text.replace(" ", ", ", 1)
            writer.writerow([f"{text} {i}", topic])


def measure(command) -> dict:
    """Runs `command` in a child process; its wall time, tokenising time and peak RSS."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    tokenise = re.findall(r"tokenise train: \d+/\d+ rows \(100%\), (\d+):(\d+)", done.stderr)
    return {"wall_s": round(wall, 1),
            "tokenise_s": int(tokenise[-1][0]) * 60 + int(tokenise[-1][1]) if tokenise else None,
            "cache_hit": "Features from cache" in done.stderr,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}


def run_once(path: str, rows: int, work: str, cache: str) -> dict:
    """One `run_classifier.py --do_train` of STEPS steps on `path`, in a fresh process
    (`--measure` keeps each run's peak apart from the others')."""
    output = tempfile.mkdtemp(dir=work)
    command = runner_command("run_classifier", [
        "--do_train", f"--train_file={path}", f"--output_dir={output}",
        f"--feature_cache_dir={cache}", f"--num_train_epochs={STEPS * BATCH / rows:.10g}"])
    done = subprocess.run([sys.executable, "-m", "bench.own_data_io", "--measure",
                           json.dumps(command)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def markdown(result: dict) -> str:
    """The table of a result (`{"cpu": ..., "baseline": ..., "runs": [...]}`), with the CPU."""
    base = result["baseline"]["peak_rss_bytes"]
    lines = ["| rows | run | wall (s) | tokenising (s) | peak RSS (MB) | above the loaded "
             "model (MB) |", "|---|---|---|---|---|---|",
             f"| {BASELINE_ROWS} | the loaded model | {result['baseline']['wall_s']} | - | "
             f"{base / 1e6:.0f} | 0 |"]
    for run in result["runs"]:
        tokenise = "-" if run["tokenise_s"] is None else run["tokenise_s"]
        lines.append(f"| {run['rows']:,} | {run['run']}{' (cache)' if run['cache_hit'] else ''}"
                     f" | {run['wall_s']} | {tokenise} | {run['peak_rss_bytes'] / 1e6:.0f} | "
                     f"{(run['peak_rss_bytes'] - base) / 1e6:.0f} |")
    lines.append(f"\nCPU: {result['cpu']}.")
    return "\n".join(lines) + "\n"


def _cpu() -> str:
    """The CPU, as the table names it: model, cores and the vector extensions that matter."""
    from adapter_bert.precision import cpu_flags
    from bench.dtype_speed import cpu_description
    described, flags = cpu_description(), cpu_flags()
    extras = [flag for flag in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if flag in flags]
    return f"{described['model']} ({described['cores']} cores; {', '.join(extras)})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return 0
    runs = []
    with tempfile.TemporaryDirectory() as work:
        baseline = None
        for rows in [BASELINE_ROWS, *sorted({args.rows // 4, args.rows})]:
            path = os.path.join(work, f"news_{rows}.csv")
            write_file(path, rows)
            cache = os.path.join(work, f"cache_{rows}")
            for attempt in ("first", "second"):
                run = dict(run_once(path, rows, work, cache), rows=rows, run=attempt)
                print(json.dumps(run), flush=True)
                if rows == BASELINE_ROWS:
                    baseline = baseline or run
                    break
                runs.append(run)
    result = {"cpu": _cpu(), "steps": STEPS, "baseline": baseline, "runs": runs}
    table = markdown(result)
    write_results(os.path.join(RESULTS, "own_data_io"), result, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
