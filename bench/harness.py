"""What every benchmark does with a runner: run it afresh, time it, read and write results.

A benchmark builds a `run_classifier.py` / `run_squad.py` command, hands it to `run`
(which empties the output directory first, so a finished run left there is not resumed
instead of trained, times the command and reads the `eval_results.json` or
`eval_results.txt` it wrote), turns the results into rows, and writes them with
`write_results` (`<stem>.json` and `<stem>.md`, each atomically: an interrupted benchmark
never leaves half a results file). `train_loss_per_epoch` reads how fast a run fitted its
training set from its TensorBoard log.

Example:
    done = harness.run(harness.runner_command("run_classifier", flags), output_dir)
    done.wall_s, done.results["eval_accuracy"]
"""

import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from adapter_bert.io_utils import atomic_write_text
from adapter_bert.io_utils import read_key_values

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "bench", "results")


class RunFailed(RuntimeError):
    """A runner command exited with a non-zero status."""


def start_run_dir(output_dir: str, *bench_files: str) -> None:
    """Empties the run folder `output_dir` and lists the benchmark's own files there
    (`bench_files`, a log, a wall-time file) as written by the package, the runners' own
    way (`adapter_bert.io_utils.folders`): a file that neither a run nor a benchmark wrote,
    a user's, stops it with one line naming it, and nothing is deleted.

    Raises:
        RunFailed: `output_dir` is not a folder, or holds what no run or benchmark wrote.
    """
    # Imported here: the package loads TensorFlow, which a benchmark's start need not.
    from adapter_bert.io_utils import folders
    try:
        folders.clear(output_dir, "--work_dir")
    except folders.ForeignFileError as e:
        raise RunFailed(str(e)) from None
    os.makedirs(output_dir, exist_ok=True)
    with folders.tracking(output_dir):
        folders.note_written(*bench_files)


@dataclass
class Run:
    """One finished runner command: what ran, how long it took, what it reported."""
    command: List[str]
    wall_s: float
    results: Dict[str, object]


def runner_command(runner: str, flags: Sequence[str]) -> List[str]:
    """`python -m adapter_bert.<runner> <flags>` (run_classifier, run_squad) with this
    interpreter."""
    return [sys.executable, "-m", f"adapter_bert.{runner}", *flags]


def read_eval_results(path: str) -> Dict[str, object]:
    """Parses an eval_results file: JSON as it is, or the runner's `key = value` lines
    (`io_utils.read_key_values`), numbers as floats and other values as strings."""
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    return {key: _number_or_text(value) for key, value in read_key_values(path).items()}


def _number_or_text(value: str):
    try:
        return float(value)
    except ValueError:
        return value


def collect_results(output_dir: str) -> Dict[str, object]:
    """The results a runner left in `output_dir`: eval_results.json when it wrote one
    (run_squad.py), else eval_results.txt (run_classifier.py).

    Raises:
        FileNotFoundError: neither file is there.
    """
    for name in ("eval_results.json", "eval_results.txt"):
        path = os.path.join(output_dir, name)
        if os.path.isfile(path):
            return read_eval_results(path)
    raise FileNotFoundError(f"{output_dir}: no eval_results.json or eval_results.txt; "
                            "did the command evaluate (--do_eval / --do_predict)?")


def train_loss_per_epoch(output_dir: str, epochs: int,
                         total_steps: Optional[int] = None) -> List[Optional[float]]:
    """The mean training loss of each epoch, from the batch losses the runner's
    TensorBoard log keeps every 10 steps (`<output_dir>/logs/train`), the epochs counted
    by `total_steps` (default: the last step logged): None for an epoch with no loss
    logged, [] without a log.
    How fast a run fits its training set is what tells a step size that is too large
    (the loss stays near the class prior's) from one that overfits (it falls far below)."""
    from tensorflow.core.util import event_pb2
    import tensorflow as tf
    losses = {}
    for path in glob.glob(os.path.join(output_dir, "logs", "train", "events*")):
        for raw in tf.data.TFRecordDataset(path):
            event = event_pb2.Event.FromString(raw.numpy())
            for value in event.summary.value:
                if value.tag == "batch_loss":
                    losses[event.step] = float(tf.make_ndarray(value.tensor))
    if not losses:
        return []
    total_steps = int(total_steps or max(losses))
    by_epoch = [[] for _ in range(epochs)]
    for step, loss in losses.items():  # steps count from 1
        by_epoch[min(epochs - 1, (step - 1) * epochs // total_steps)].append(loss)
    return [round(sum(v) / len(v), 4) if v else None for v in by_epoch]


# A claim file `<work_dir>/<run>.claim` holds "<pid> <start time>" of the process running
# that run, so that several drivers (or a driver restarted while its runs go on) never run
# the same spec twice.


def run(command: Sequence[str], output_dir: str, log_path: Optional[str] = None) -> Run:
    """Runs `command` from the repository root in an emptied `output_dir`; returns its
    wall time and results.

    The command's output goes to `log_path` when given, else to this process's. The
    child imports this checkout's `adapter_bert` (the repository root leads PYTHONPATH).

    Raises:
        RunFailed: the command exited with a non-zero status, or `output_dir` holds what
            no run writes (nothing deleted, nothing run).
        FileNotFoundError: it wrote no eval_results file.
    """
    # A finished run left here would be resumed (evaluated without training): start clean.
    start_run_dir(output_dir, *([log_path] if log_path else []))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    print("+", " ".join(command), flush=True)
    start = time.time()
    if log_path:
        os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
        with open(log_path, "w", encoding="utf-8") as log:
            code = subprocess.run(command, cwd=REPO, env=env, stdout=log,
                                  stderr=subprocess.STDOUT).returncode
    else:
        code = subprocess.run(command, cwd=REPO, env=env).returncode
    wall = time.time() - start
    if code != 0:
        where = f"; log: {log_path}" if log_path else ""
        runner = command[2] if command[1] == "-m" else os.path.basename(command[1])
        raise RunFailed(f"{runner} exited with status {code}{where}")
    return Run(list(command), round(wall, 1), collect_results(output_dir))


def cpu_description() -> dict:
    """The CPU's model name, vendor and bfloat16-related flags (from /proc/cpuinfo): a
    benchmark's figures belong to the CPU that made them."""
    from adapter_bert.precision import cpu_flags, cpu_vendor
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), "")
    except OSError:
        pass
    flags = cpu_flags()
    return {"model": model or platform.processor(), "vendor": cpu_vendor(),
            "cores": os.cpu_count(),
            "bf16_flags": sorted(f for f in flags if "bf16" in f or f.startswith("amx")),
            "avx512": "avx512f" in flags}


def listed_choices(parser, flag: str, value: str, allowed) -> List[str]:
    """The comma-separated names of `--flag`; an unknown one stops with `parser.error`."""
    names = value.split(",")
    unknown = [n for n in names if n not in allowed]
    if unknown:
        parser.error(f"--{flag}: unknown {unknown}; expected some of {', '.join(allowed)}")
    return names


def seed_stats(values) -> Optional[Dict[str, object]]:
    """Mean, sample sd (0 for one value), lowest value and count of a metric over seeds;
    None for no values."""
    if not values:
        return None
    return {"mean": statistics.mean(values),
            "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "n": len(values), "values": list(values)}


def mean_sd_text(values) -> str:
    """`mean ± sd` to two decimals over seeds: the value alone for one run, "—" for none."""
    stats = seed_stats(values)
    if stats is None:
        return "—"
    if stats["n"] == 1:
        return f"{stats['mean']:.2f}"
    return f"{stats['mean']:.2f} ± {stats['sd']:.2f}"


def write_json(path: str, payload, indent: int = 2) -> None:
    """Writes `payload` as JSON to `path` atomically (a reader never sees half a file)."""
    atomic_write_text(path, json.dumps(payload, indent=indent))


def markdown_table(header: Sequence[str], rows: Sequence[Sequence], note: str) -> str:
    """A Markdown table of `rows` under `header`, then `note` (what it ran on)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + f"\n\n{note}\n"


def publish(name: str, result: dict, columns: Dict[str, str], note: str) -> dict:
    """Writes bench/results/<name>.{json,md}: `result`, and the table of its "rows" with
    `columns` ({header: row key}) and `note`; prints the table and returns `result`."""
    table = markdown_table(list(columns), [[row[key] for key in columns.values()]
                                           for row in result["rows"]], note)
    write_results(os.path.join(RESULTS, name), result, table)
    print(table)
    return result


def write_results(stem: str, result: dict, table: str) -> Dict[str, str]:
    """Writes `<stem>.json` (`result`) and `<stem>.md` (`table`), each atomically;
    returns their paths."""
    paths = {"json": stem + ".json", "markdown": stem + ".md"}
    atomic_write_text(paths["json"], json.dumps(result, indent=2))
    atomic_write_text(paths["markdown"], table)
    return paths
