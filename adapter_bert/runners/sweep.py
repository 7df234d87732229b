"""A grid of runs, the best point chosen on held-out data, its adapter kept.

`main` runs `run_classifier.py` (or `run_squad.py`) once per point of the `--grid`, each in
its own process and folder, passing every other flag through; writes
`sweep_results.tsv`/`.md`; copies the chosen point's adapter and flags (and with
--do_predict its predictions) into `best/`. `--select_on=dev` selects on dev (then no longer
unbiased); `train_fraction:F` on a stratified held-out part of train, dev evaluated for the
chosen point only. Run again, a sweep continues (finished points kept, a stopped point
resumes, new grid values add points); `sweep.json` refuses other flags or a smaller grid.
"""

import itertools
import json
import re
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from adapter_bert import io_utils
from adapter_bert.io_utils import atomic_write_text, folders
from adapter_bert.runs.epoch_selection import is_better
from adapter_bert.errors import UserError
from adapter_bert.command_line.flag_checks import FlagError

RUNNERS = {"classifier": "run_classifier", "squad": "run_squad"}
# The paper's grid (section 3.1), for adapters.
PAPER_GRID = {"learning_rate": ["3e-5", "3e-4", "3e-3"], "num_train_epochs": ["3", "20"],
              "adapter_size": ["8", "64", "256"]}
# Flags the sweep sets for each point itself.
SWEEP_OWNED = ("output_dir", "do_train", "do_eval", "do_predict", "dev_fraction",
               "load_adapter", "overwrite_output_dir", "export_dir")
RECORD = "sweep.json"
POINT_RECORD = "sweep_point.json"
BEST = "best"


# ----------------------------------------------------------------- parsing
def split_argv(argv: Sequence[str]) -> Tuple[dict, List[str]]:
    """(the sweep's own settings, `settings.SWEEP_SETTINGS`, the flags passed through to
    the runner)."""
    from adapter_bert.command_line.settings import SWEEP_SETTINGS
    rows = {row.name: row for row in SWEEP_SETTINGS}
    own = {name: [] if row.type == "multi" else row.default for name, row in rows.items()}
    passed = []
    for arg in argv:
        name, given, value = arg[2:].partition("=")
        if not arg.startswith("--"):
            raise FlagError(f"{arg}: expected --name=value flags")
        negated = name[2:] if name.startswith("no") and not given else None
        if name in ("do_train", "do_eval") or negated in ("do_train", "do_eval"):
            continue  # every point trains and evaluates
        if negated in rows and rows[negated].type == "bool":
            own[negated] = False
        elif name not in rows:
            passed.append(arg)
        elif rows[name].type == "multi":
            own[name].append(value)
        elif rows[name].type == "bool":
            own[name] = not given or value.lower() not in ("false", "0")
        else:
            own[name] = value
    return own, passed


def parse_grid(specs: Sequence[str]) -> Dict[str, List[str]]:
    """`["learning_rate=3e-4,1e-3", ...]` (or `["paper"]`) -> {flag: values}, in order.

    Raises:
        FlagError: a malformed, repeated or empty entry, or a grid of one point.
    """
    if not specs:
        raise FlagError("--grid is required, e.g. --grid=learning_rate=3e-4,1e-3 "
                        "--grid=num_train_epochs=3,20 (or --grid=paper)")
    grid: Dict[str, List[str]] = {}
    for spec in specs:
        if spec == "paper":
            for name, values in PAPER_GRID.items():
                _add(grid, name, values, "--grid=paper")
            continue
        name, sep, values = spec.partition("=")
        values = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not re.fullmatch(r"[a-z_][a-z0-9_]*", name) or not values:
            raise FlagError(f"--grid={spec}: expected flag=value1,value2,... (e.g. "
                            f"learning_rate=3e-4,1e-3)")
        if name in SWEEP_OWNED:
            raise FlagError(f"--grid={spec}: the sweep sets --{name} for every point itself")
        _add(grid, name, values, f"--grid={spec}")
    if all(len(values) == 1 for values in grid.values()):
        point = ", ".join(f"{k}={v[0]}" for k, v in grid.items())
        raise FlagError(f"--grid: a grid of one point ({point}) is a single run: give two "
                        f"or more values, or run the runner itself")
    return grid


def _add(grid: dict, name: str, values: List[str], where: str) -> None:
    if name in grid:
        raise FlagError(f"{where}: --{name} is in the grid twice")
    if len(set(values)) != len(values):
        raise FlagError(f"{where}: a value is given twice")
    grid[name] = values


def points(grid: Dict[str, List[str]]) -> List[Dict[str, str]]:
    """Every combination of the grid's values, the first flag varying slowest."""
    names = list(grid)
    return [dict(zip(names, combo)) for combo in itertools.product(*grid.values())]


def point_name(point: Dict[str, str]) -> str:
    """The point's folder name: `learning_rate_3e-4__num_train_epochs_20`."""
    return "__".join(f"{k}_{re.sub(r'[^A-Za-z0-9.+-]', '-', v)}" for k, v in point.items())


def selection(spec: str, runner: str) -> Optional[float]:
    """`--select_on`: None for dev, else the held-out training fraction."""
    if spec == "dev":
        return None
    match = re.fullmatch(r"train_fraction:([0-9.]+)", spec)
    fraction = float(match.group(1)) if match else -1.0
    if not 0 < fraction < 1:
        raise FlagError(f"--select_on={spec}: expected dev or train_fraction:F with 0 < F "
                        f"< 1 (e.g. train_fraction:0.1)")
    if runner != "classifier":
        raise FlagError("--select_on=train_fraction applies to run_classifier.py; SQuAD "
                        "points are selected on --predict_file (--select_on=dev)")
    return fraction


# ---------------------------------------------------------------- checking
def check_points(runner: str, passed: List[str], grid: Dict[str, List[str]],
                 fraction: Optional[float], output_dir: str, predict: bool = False) -> str:
    """Checks every point's flags as the runner would, before anything runs: parsed,
    validated, and against the backbone (its config, vocabulary and casing); with
    `predict` (the sweep's --do_predict), also as the chosen point's prediction run.
    Returns the selection metric (--select_metric, else the task's main one). Raises
    FlagError (naming the point), or the backbone's error, for the first refusal.
    """
    from absl import flags as absl_flags

    from adapter_bert.command_line import run_config, settings
    for name in grid:
        if name not in settings.by_name() or not settings.by_name()[name].applies_to(runner):
            raise FlagError(f"--grid: {name} is not a flag of {RUNNERS[runner]}.py")
    given = {arg.lstrip("-").partition("=")[0] for arg in passed}
    for name in grid:
        if name in given:
            raise FlagError(f"--{name} is given on its own and in --grid: pass it once")
    metric = None
    backbones: Dict[tuple, None] = {}
    data: Dict[tuple, object] = {}
    for point in points(grid):
        argv = point_argv(runner, passed, point, io_utils.join(output_dir, point_name(point)),
                          fraction)
        if predict and runner == "classifier":
            argv.append("--do_predict")  # what the chosen point's prediction run needs
        try:
            values = run_config.parse(runner, argv)
            metric = _validate(runner, values, data)
            _check_backbone(values, backbones)
        except (absl_flags.Error, UserError) as e:
            where = ", ".join(f"{k}={v}" for k, v in point.items())
            raise FlagError(f"grid point {where}: {str(e).splitlines()[0]}") from None
    return metric


def _check_backbone(values, checked: Dict[tuple, None]) -> None:
    """The point's backbone takes its sequence length, casing and vocabulary, as the
    runner checks it after loading (`base.load_backbone`); each combination once."""
    from adapter_bert.data.backbone import load_backbone
    key = (values.init_checkpoint, values.bert_config_file, values.vocab_file,
           values.do_lower_case, values.max_seq_length)
    if key not in checked:
        load_backbone(*key)
        checked[key] = None


# The classifier's flags that say what data a point reads: points equal in these share one
# reading of the data.
DATA_FLAGS = ("task_name", "data_dir", "data_source", "train_file", "dev_file", "test_file",
              "file_format", "text_column", "text_pair_column", "label_column", "header",
              "labels", "task_type", "dev_fraction", "keep_columns", "seed", "tfds_name",
              "tfds_train_split", "tfds_dev_split", "tfds_test_split")


def _validate(runner: str, values, data: Dict[tuple, object]) -> str:
    """The point's flags checked as the runner checks them, and for the classifier against
    its data (`data` holds each reading, keyed by DATA_FLAGS' values, so every distinct
    data is read once); returns the selection metric."""
    if runner == "squad":
        from adapter_bert.command_line.flag_checks import validate_squad
        validate_squad(values)
        return values.select_metric or "f1"
    from adapter_bert.runners.classifier import ClassifierRun
    run = object.__new__(ClassifierRun)  # the runner's flag checks, without loading
    run.flags = values
    ClassifierRun.validate_flags(run, values)
    key = tuple(str(values[name]) for name in DATA_FLAGS)
    if key in data:
        run.processor, run._examples = data[key]
        run.check_data()
    else:
        run.read_data()
        data[key] = (run.processor, run._examples)
    return run.select_metric


def point_argv(runner: str, passed: List[str], point: Dict[str, str], out: str,
               fraction: Optional[float]) -> List[str]:
    """The runner's flags for one point: train and evaluate into `out`."""
    argv = [*passed, *(f"--{k}={v}" for k, v in point.items()), f"--output_dir={out}",
            "--do_train"]
    if runner == "classifier":
        argv.append("--do_eval")
        if fraction is not None:
            argv = [a for a in argv if not a.startswith("--dev_file=")]
            argv.append(f"--dev_fraction={fraction}")
    else:
        argv.append("--do_predict")  # SQuAD scores its --predict_file
    return argv


# ----------------------------------------------------------------- the record
def check_record(output_dir: str, settings: dict, grid: Dict[str, List[str]]) -> None:
    """Refuses to continue a sweep of `output_dir` whose finished points were trained with
    other flags, or that the new grid leaves out (points that never finished may change or
    go); then records this one (`sweep.json`, trusted only where the sweep's own manifest
    lists it: `io_utils.folders`)."""
    earlier = _read_record(output_dir)
    if earlier is not None:
        finished = [point_name(p) for p in points(earlier["grid"])
                    if _finished(io_utils.join(output_dir, point_name(p)))]
        changed = [k for k in settings if earlier.get(k) != settings[k]]
        if changed and finished:
            raise FlagError(f"{output_dir} holds a sweep with other {', '.join(changed)} "
                            f"({_describe(earlier, changed)}) whose points "
                            f"{', '.join(finished[:3])} finished: pass the same flags to "
                            f"continue it, or another --output_dir")
        new = {point_name(p) for p in points(grid)}
        dropped = [name for name in finished if name not in new]
        if dropped:
            raise FlagError(f"--grid leaves out {len(dropped)} finished point(s) of "
                            f"{output_dir} ({', '.join(dropped[:3])}): a grid may add values, "
                            f"and drop only points that never finished; use another "
                            f"--output_dir for another grid")
    io_utils.makedirs(output_dir)
    atomic_write_text(io_utils.join(output_dir, RECORD),
                      json.dumps({**settings, "grid": grid}, indent=2) + "\n")


def _read_record(output_dir: str) -> Optional[dict]:
    """The sweep record of `output_dir`, None where there is none; FlagError (one line)
    for a file of that name the sweep did not write, or one it cannot read."""
    path = io_utils.join(output_dir, RECORD)
    if not io_utils.exists(path):
        return None
    if RECORD not in (folders.read_manifest(output_dir) or ()):
        raise FlagError(f"{path} was not written by a sweep: move it away, or use another "
                        f"--output_dir")
    try:
        record = io_utils.read_json_object(path)
        points(record["grid"])
        return record
    except (UserError, KeyError, TypeError, AttributeError):
        raise FlagError(f"{path}: not a sweep record this version reads; use another "
                        f"--output_dir") from None


def _finished(folder: str) -> bool:
    path = io_utils.join(folder, POINT_RECORD)
    try:
        return bool(io_utils.read_json_object(path).get("done"))
    except UserError:  # absent or half-written: the point has not finished
        return False


def _describe(record: dict, keys: List[str]) -> str:
    return "; ".join(f"{k}: {record.get(k)}" for k in keys)


# ---------------------------------------------------------------- running
def run_point(runner: str, argv: List[str], out: str, label: str) -> dict:
    """Runs (or resumes) one point in a process of its own, unless it finished; returns
    its record: wall time and the eval_results.txt figures."""
    record_path = io_utils.join(out, POINT_RECORD)
    record = io_utils.read_json_object(record_path) if io_utils.exists(record_path) \
        else {"wall_s": 0.0, "done": False}
    if not record["done"]:
        print(f"sweep: {label}: running", flush=True)
        start = time.time()
        done = subprocess.run([sys.executable, "-m", f"adapter_bert.{RUNNERS[runner]}", *argv],
                              check=False)
        record["wall_s"] += time.time() - start
        record["done"] = done.returncode == 0
        io_utils.makedirs(out)
        atomic_write_text(record_path, json.dumps(record, indent=2) + "\n")
        if done.returncode != 0:
            raise SweepStopped(f"{label} stopped (exit {done.returncode}); the lines above say "
                               f"why. Run the same command again to continue the sweep",
                               done.returncode)
    record["results"] = io_utils.read_key_values(io_utils.join(out, "eval_results.txt"))
    return record


class SweepStopped(Exception):
    """A point's run failed or was stopped; the sweep stops with its exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def result_key(runner: str, metric: str) -> str:
    """The eval_results.txt key of the selection metric."""
    return f"eval_{metric}" if runner == "classifier" else metric


def choose(rows: List[dict], key: str, metric: str) -> int:
    """The index of the best row by `metric` (the first of equal scores)."""
    best = None
    for i, row in enumerate(rows):
        value = float(row["results"][key])
        if best is None or is_better(metric, value, best[1]):
            best = (i, value)
    return best[0]


# ---------------------------------------------------------------- outputs
def write_tables(output_dir: str, grid: Dict[str, List[str]], rows: List[dict], chosen: int,
                 key: str, protocol: str) -> None:
    """sweep_results.tsv (every figure) and sweep_results.md (the table and protocol)."""
    metrics = sorted({k for row in rows for k in row["results"]
                      if k.startswith("eval_") or k in ("f1", "exact_match", "exact")})
    header = [*grid, *metrics, "wall_s", "trainable_params", "selected"]
    lines = ["\t".join(header)]
    table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for i, row in enumerate(rows):
        cells = [*row["point"].values(), *(row["results"].get(m, "") for m in metrics),
                 f"{row['wall_s']:.0f}", row["results"].get("trainable_params", ""),
                 "yes" if i == chosen else ""]
        lines.append("\t".join(map(str, cells)))
        shown = [_short(c) for c in cells]
        if i == chosen:
            shown = [f"**{c}**" if c else c for c in shown]
        table.append("| " + " | ".join(shown) + " |")
    atomic_write_text(io_utils.join(output_dir, "sweep_results.tsv"), "\n".join(lines) + "\n")
    text = "\n".join([f"# Sweep: {len(rows)} points, selected by {key}", "", protocol, "",
                      *table, ""])
    atomic_write_text(io_utils.join(output_dir, "sweep_results.md"), text)


def _short(value) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return str(value) if float(number).is_integer() or "e" in str(value) else f"{number:.4f}"


def keep_best(output_dir: str, point_dir: str, point: Dict[str, str], argv: List[str]) -> str:
    """best/: the chosen point's adapter directory, flags and dev figures, replacing an
    earlier selection (`io_utils.folders.replace`: a file of the user's inside stops it)."""
    def build(staging: str) -> None:
        io_utils.copy_tree(io_utils.join(point_dir, "adapter"), io_utils.join(staging, "adapter"))
        io_utils.copy_file(io_utils.join(point_dir, "eval_results.txt"),
                           io_utils.join(staging, "eval_results.txt"))
        atomic_write_text(io_utils.join(staging, "best_point.json"),
                          json.dumps({"point": point, "folder": point_dir, "flags": argv},
                                     indent=2) + "\n")

    return folders.replace(io_utils.join(output_dir, BEST), build,
                           "the sweep's folder of the best point")


def protocol_text(fraction: Optional[float], seed: str, key: str,
                  best_dev: Optional[Dict[str, str]]) -> str:
    """What the selection did, for the report: on dev (`fraction` None), or on `fraction`
    of the training data held out (`best_dev`: the chosen point's dev figures)."""
    if fraction is None:
        return (f"Selected on the dev set by {key}: the chosen point's dev figures are then no "
                f"longer an unbiased estimate of its quality (the dev set chose it).")
    dev = ", ".join(f"{k} = {v}" for k, v in sorted((best_dev or {}).items())
                    if k.startswith("eval_"))
    return (f"Selected by {key} on {fraction:g} of the training data held out (stratified "
            f"by label, seed {seed}); each point trained on the rest. The dev set was not "
            f"used to choose: the chosen point on dev: {dev or 'not evaluated'}.")


# ------------------------------------------------------------------- main
def main(argv: Sequence[str]) -> int:
    """Runs the sweep `argv` describes (see the module doc); returns the exit status."""
    own, passed = split_argv(argv)
    if not own["output_dir"]:
        raise FlagError("--output_dir is required: every point runs in a folder under it")
    runner = own["runner"]
    if runner not in RUNNERS:
        raise FlagError(f"--runner={runner}: expected {' or '.join(RUNNERS)}")
    grid = parse_grid(own["grid"])
    fraction = selection(own["select_on"], runner)
    output_dir = own["output_dir"]
    with folders.tracking(output_dir):  # what the sweep writes there is listed as its own
        return _sweep(own, runner, passed, grid, fraction, output_dir)


def _sweep(own: dict, runner: str, passed: List[str], grid: Dict[str, List[str]],
           fraction: Optional[float], output_dir: str) -> int:
    metric = check_points(runner, passed, grid, fraction, output_dir, own["do_predict"])
    key = result_key(runner, metric)
    check_record(output_dir, {"runner": runner, "passed": sorted(passed),
                              "select_on": own["select_on"]}, grid)
    rows = []
    grid_points = points(grid)
    for number, point in enumerate(grid_points, 1):
        folder = io_utils.join(output_dir, point_name(point))
        label = f"point {number}/{len(grid_points)} " + \
            ", ".join(f"{k}={v}" for k, v in point.items())
        point_args = point_argv(runner, passed, point, folder, fraction)
        row = run_point(runner, point_args, folder, label)
        row.update(point=point, folder=folder, argv=point_args)
        print(f"sweep: {label}: {key} = {row['results'].get(key)}", flush=True)
        rows.append(row)
    chosen = choose(rows, key, metric)
    best = keep_best(output_dir, rows[chosen]["folder"], rows[chosen]["point"],
                     rows[chosen]["argv"])
    best_dev = None
    if fraction is not None:  # the untouched dev set, for the chosen point only
        best_dev = _run_best(runner, passed, rows[chosen]["point"], best, "--do_eval")
    seed = next((a.split("=", 1)[1] for a in passed if a.startswith("--seed=")), "42")
    write_tables(output_dir, grid, rows, chosen, key,
                 protocol_text(fraction, seed, key, best_dev))
    if own["do_predict"]:
        _predict_best(runner, passed, rows[chosen]["point"], best, rows[chosen]["folder"])
    print(f"sweep: selected {', '.join(f'{k}={v}' for k, v in rows[chosen]['point'].items())} "
          f"({key} = {rows[chosen]['results'][key]}); adapter: {io_utils.join(best, 'adapter')}; "
          f"table: {io_utils.join(output_dir, 'sweep_results.md')}", flush=True)
    return 0


def _run_best(runner: str, passed: List[str], point: Dict[str, str], best: str,
              action: str) -> Dict[str, str]:
    """Runs the runner with the chosen adapter into best/ (`action`: --do_eval on the dev
    set, --do_predict on the test set), with the chosen point's values (a grid over
    --top_k_layers is what a top_k model needs to be built)."""
    training_only = ("--eval_every_epoch", "--noeval_every_epoch")
    argv = [*(a for a in passed if a.split("=", 1)[0] not in training_only),
            *(f"--{k}={v}" for k, v in point.items()),
            f"--load_adapter={io_utils.join(best, 'adapter')}", f"--output_dir={best}", action]
    done = subprocess.run([sys.executable, "-m", f"adapter_bert.{RUNNERS[runner]}", *argv],
                          check=False)
    if done.returncode != 0:
        raise SweepStopped(f"the chosen point's {action[5:]} run stopped (exit "
                           f"{done.returncode}); the lines above say why", done.returncode)
    path = io_utils.join(best, "eval_results.txt")
    return io_utils.read_key_values(path) if action == "--do_eval" else {}


def _predict_best(runner: str, passed: List[str], point: Dict[str, str], best: str,
                  folder: str) -> None:
    if runner == "squad":  # its points predicted --predict_file already
        with folders.tracking(best):
            for name in ("predictions.json", "nbest_predictions.json", "null_odds.json"):
                if io_utils.exists(io_utils.join(folder, name)):
                    io_utils.copy_file(io_utils.join(folder, name), io_utils.join(best, name))
        return
    _run_best(runner, passed, point, best, "--do_predict")
