"""The paper's Table 2 (Houlsby et al. 2019): ordinary text-classification sets, adapters
against full and variable fine-tuning, AdapterHub and a no-BERT reference, on the
embedded MiniLM.

The sets: every `<set>/data.csv` (`text,label`) under --sets_dir, and the Crowdflower
airline tweets (`text`, `airline_sentiment`) given by --airline. A set's own split is kept
where it has one: a `split` column (train/dev/test), or the row ranges in OWN_SPLITS.

The sets, their split, caps and `max_seq_length`: bench/table2_sets.py. The cells' seeds
and grids, the paper's figures and the table: bench/table2_table.py.

The cells, each through the user's path (`run_classifier.py --train_file ...` and
`adapter_bert.sweep`), float32 (`--dtype=float32`: every record means the same on every
CPU), seeds 42-44, each scored on dev and test:
- tfidf: TF-IDF (words and word pairs, sublinear) with scikit-learn's logistic regression,
  C chosen on dev from TFIDF_C (deterministic: one run);
- adapters: `run_classifier.py` at its defaults (Houlsby adapters, size 64, lr 1e-3,
  3 epochs);
- adapters_selected: the paper's selection: `adapter_bert.sweep` over ADAPTER_GRID on
  seed 42, chosen on dev; seeds 43 and 44 train the chosen point;
- full: `--tuning_mode=full` (Google's 5e-5, 3 epochs);
- full_selected: full fine-tuning selected as the paper selects every method's
  hyperparameters, over FULL_GRID (the paper compares the selected cells);
- variable: `--tuning_mode=top_k`, the number of top layers trained chosen on dev from
  VARIABLE_GRID by the sweep on seed 42 (MiniLM has 6 layers; 6 is full fine-tuning);
  a record made over another grid than the cell's now runs again;
- adapterhub: bench/peer_glue.py's AdapterHub Houlsby adapters (1e-3, 3 epochs) under
  --peer_python, with the same split and max_seq_length.

Each result is bench/results/table2/<set>/<cell>_seed<N>.json, written when its run ends;
a cell with a record is not run again (a sweep stopped half-way continues from its
finished points). Runs go breadth-first (every set's seed-42 cells, then the defaults'
other seeds, then the sweeps, then their chosen points' other seeds, then the peer, then
full fine-tuning's selection), the smallest sets first, so a table over every set comes
early; with --jobs=N, N at a time, a chosen point's other seeds once its sweep has
finished. The table is
bench/results/table2.md (and .json), rewritten after every record.

Usage:
    python -m bench.table2 --sets_dir=<folder of <set>/data.csv> --airline=<Tweets.csv>
    python -m bench.table2 ... --peer_python=/path/to/venv/bin/python   # AdapterHub too
    python -m bench.table2 ... --jobs=2     # two runs at a time, each on half the cores
    python -m bench.table2 ... --cells=tfidf,adapters,full   # only these columns
"""

import argparse
import concurrent.futures
import csv
import json
import math
import os
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence


from bench.harness import (REPO, cpu_description, read_eval_results, run, runner_command,
                           write_json)
from bench.robust_tables import read_records
from bench.table2_sets import (AIRLINE, PARTS, SETS_DIR, DataSet, find_sets,  # noqa: F401
                               read_set, sequence_length, split_digest, split_rows,
                               stratified_cap, wordpiece_lengths, write_split)
from bench.table2_table import CELLS, RECORDS, SEEDS, write_table

TFIDF_C = (0.1, 1.0, 10.0, 100.0)


# ------------------------------------------------------------------- the runs
def data_flags(name: str, work_dir: str, max_seq_length: int, seed: int) -> List[str]:
    return [f"--train_file={work_dir}/train.csv", f"--dev_file={work_dir}/dev.csv",
            f"--test_file={work_dir}/test.csv", f"--task_name={name}",
            f"--max_seq_length={max_seq_length}", f"--seed={seed}", "--dtype=float32"]


def _shown(flags: Sequence[str], work_dir: str) -> str:
    """A command as the docs show it: the split's files by name, no output folder."""
    return " ".join(f.replace(f"{work_dir}/", "") for f in flags
                    if not f.startswith("--output_dir="))


def run_ours(name: str, flags: Sequence[str], seed: int, work_dir: str, info: dict) -> dict:
    """One `run_classifier.py` run of `flags`, trained, scored on dev and test."""
    out = os.path.join(work_dir, "runs", f"{'_'.join(f.strip('-') for f in flags) or 'defaults'}"
                       f"_seed{seed}".replace("=", "-"))
    argv = ["--do_train", "--do_eval", "--do_predict",
            *data_flags(name, work_dir, info["max_seq_length"], seed), *flags,
            f"--output_dir={out}"]
    done = run(runner_command("run_classifier", argv), out, os.path.join(out, "run.log"))
    test = read_eval_results(os.path.join(out, "test_eval_results.txt"))
    return {"wall_s": done.wall_s, "flags": list(flags),
            "command": "python -m adapter_bert.run_classifier " + _shown(argv, work_dir),
            **scores(done.results, test)}


def scores(dev: dict, test: dict) -> dict:
    """The record's figures from a run's eval_results.txt and test_eval_results.txt."""
    return {"dev_accuracy": 100 * dev["eval_accuracy"],
            "test_accuracy": 100 * test["test_accuracy"],
            "test_macro_f1": 100 * test["test_macro_f1"],
            "trainable_params": int(dev["trainable_params"]),
            "all_params": int(dev["all_params"])}


def run_sweep(name: str, cell_name: str, work_dir: str, info: dict) -> dict:
    """`adapter_bert.sweep` over the cell's grid on seed 42, chosen on dev; the chosen
    point scored on test. A stopped sweep continues where it was."""
    cell, out = CELLS[cell_name], os.path.join(work_dir, "sweeps", cell_name)
    argv = [*data_flags(name, work_dir, info["max_seq_length"], SEEDS[0]), *cell.flags,
            *(f"--grid={g}" for g in cell.grid), "--do_predict", f"--output_dir={out}"]
    start = time.time()
    _call([sys.executable, "-m", "adapter_bert.sweep", *argv], os.path.join(work_dir,
                                                                         "sweep.log"))
    best = os.path.join(out, "best")
    with open(os.path.join(best, "best_point.json"), encoding="utf-8") as f:
        chosen = json.load(f)["point"]
    dev = read_eval_results(os.path.join(best, "eval_results.txt"))
    test = read_eval_results(os.path.join(best, "test_eval_results.txt"))
    return {"wall_s": round(time.time() - start, 1), "chosen": chosen,
            "points": read_sweep_points(os.path.join(out, "sweep_results.tsv")),
            "flags": [*cell.flags, *point_flags(chosen)],
            "command": "python -m adapter_bert.sweep " + _shown(argv, work_dir),
            **scores(dev, test)}


def read_sweep_points(path: str) -> List[dict]:
    """Each point of a sweep's sweep_results.tsv: its values and dev accuracy."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return [{**{k: v for k, v in row.items() if k not in ("selected", "wall_s")
                and not k.startswith("eval_") and k != "trainable_params"},
             "dev_accuracy": 100 * float(row["eval_accuracy"]),
             "selected": row["selected"] == "yes"} for row in rows]


def point_flags(point: Dict[str, str]) -> List[str]:
    return [f"--{key}={value}" for key, value in point.items()]


def same_point(a: Dict[str, object], b: Dict[str, object]) -> bool:
    """Whether two grid points name the same values (1e-3 and 0.001 are one rate)."""
    return a.keys() == b.keys() and all(math.isclose(float(a[k]), float(b[k])) for k in a)


def run_tfidf(work_dir: str) -> dict:
    """TF-IDF and logistic regression on the split, C chosen on dev."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score
    parts = {}
    for part in PARTS:
        with open(os.path.join(work_dir, f"{part}.csv"), encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        parts[part] = ([r["text"] for r in rows], [r["label"] for r in rows])
    start = time.time()
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1)
    train = vectorizer.fit_transform(parts["train"][0])
    dev, test = (vectorizer.transform(parts[p][0]) for p in ("dev", "test"))
    fitted = {c: LogisticRegression(C=c, max_iter=5000).fit(train, parts["train"][1])
              for c in TFIDF_C}
    dev_scores = {c: accuracy_score(parts["dev"][1], m.predict(dev)) for c, m in fitted.items()}
    chosen = max(TFIDF_C, key=lambda c: (dev_scores[c], -c))
    predicted = fitted[chosen].predict(test)
    return {"wall_s": round(time.time() - start, 1), "chosen": {"C": chosen},
            "dev_accuracy": 100 * dev_scores[chosen],
            "test_accuracy": 100 * accuracy_score(parts["test"][1], predicted),
            "test_macro_f1": 100 * f1_score(parts["test"][1], predicted, average="macro"),
            "trainable_params": int(train.shape[1] * len(fitted[chosen].classes_)),
            "command": f"TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True) + "
                       f"LogisticRegression(C in {list(TFIDF_C)}), chosen on dev"}


def run_peer(seed: int, work_dir: str, info: dict, peer_python: str) -> dict:
    from adapter_bert.model.checkpoints import default_backbone_dir
    command = [peer_python, os.path.join(REPO, "bench", "peer_glue.py"), "--system=adapterhub",
               "--task=table2", f"--data_dir={work_dir}", f"--model_dir={default_backbone_dir()}",
               "--learning_rate=1e-3", f"--seed={seed}", "--eval_splits=dev,test",
               f"--max_seq_length={info['max_seq_length']}"]
    done = _call(command)
    record = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall_s": record["wall_s"],
            "command": " ".join(["python", "bench/peer_glue.py", *command[2:4],
                                 "--data_dir=<split>", "--model_dir=<MiniLM>", *command[6:]]),
            **{key: record[key] for key in ("dev_accuracy", "test_accuracy", "test_macro_f1",
                                            "trainable_params")}}


def _call(command: List[str], log_path: Optional[str] = None):
    with open(log_path or os.devnull, "a", encoding="utf-8") as log:
        done = subprocess.run(command, stdout=subprocess.PIPE,
                              stderr=log if log_path else subprocess.PIPE, text=True,
                              check=False, cwd=REPO)
    if done.returncode != 0:
        last = ((done.stderr or "").strip().splitlines() or [f"see {log_path}"])[-1]
        raise RuntimeError(f"{' '.join(command[1:4])}...: exit {done.returncode}: {last}")
    return done


# ------------------------------------------------------------------- the plan
def plan(sets: Sequence[str], cells: Sequence[str] = tuple(CELLS)) -> List[tuple]:
    """(set, cell, seed) of `cells` in the order they run: every set's seed-42 cells, the
    other seeds of the defaults (adapters against full fine-tuning, the comparison a user's
    first run makes), the sweeps, their chosen points' other seeds, the peer, then full
    fine-tuning's selection and its chosen points."""
    def selection(names):
        return [(s, c, SEEDS[0]) for s in sets for c in names] + \
            [(s, c, seed) for s in sets for seed in SEEDS[1:] for c in names]

    first = [(s, c, SEEDS[0]) for s in sets for c in ("tfidf", "adapters", "full")]
    defaults = [(s, c, seed) for s in sets for seed in SEEDS[1:] for c in ("adapters", "full")]
    peers = [(s, "adapterhub", seed) for s in sets for seed in SEEDS]
    return [item for item in first + defaults + selection(("adapters_selected", "variable"))
            + peers + selection(("full_selected",)) if item[1] in cells]


def record_name(cell: str, seed: int) -> str:
    return "tfidf" if CELLS[cell].kind == "tfidf" else f"{cell}_seed{seed}"


def grid_points(grid: Sequence[str]) -> set:
    """The points the sweep makes of its --grid values, each as a tuple of (flag, value)."""
    from adapter_bert.runners.sweep import parse_grid, points
    return {tuple(point.items()) for point in points(parse_grid(grid))}


def record_stands(cell_name: str, seed: int, records: dict) -> bool:
    """Whether the cell has a record at `seed` that still holds: a sweep's was made over
    the cell's grid as it is now (a grid widened since runs again, its sweep keeping the
    points it has), and a chosen point's other seed trained the point its sweep chose."""
    record, cell = records.get(record_name(cell_name, seed)), CELLS[cell_name]
    if record is None or not cell.grid:
        return record is not None
    if seed == SEEDS[0]:
        wanted = grid_points(cell.grid)
        names = [name for name, _ in next(iter(wanted))]
        return {tuple((n, p[n]) for n in names) for p in record["points"]} == wanted
    selected = records.get(record_name(cell_name, SEEDS[0]))
    if selected is None or not record_stands(cell_name, SEEDS[0], records):
        return False
    if "same_run_as" in record:
        return same_point(selected["chosen"], cell.default_point)
    return record.get("flags") == selected["flags"]


def run_cell(name: str, cell_name: str, seed: int, work_dir: str, info: dict,
             records: dict, peer_python: Optional[str]) -> Optional[dict]:
    """The record of one cell's run, or None where it waits for its selection."""
    cell = CELLS[cell_name]
    if cell.kind == "tfidf":
        return run_tfidf(work_dir)
    if cell.kind == "peer":
        return run_peer(seed, work_dir, info, peer_python)
    if not cell.grid:
        return run_ours(name, cell.flags, seed, work_dir, info)
    if seed == SEEDS[0]:
        return run_sweep(name, cell_name, work_dir, info)
    selected = records.get(f"{cell_name}_seed{SEEDS[0]}")
    if selected is None:
        return None
    default = cell.default_cell and records.get(f"{cell.default_cell}_seed{seed}")
    if default and same_point(selected["chosen"], cell.default_point):
        return {**default, "same_run_as": f"{cell.default_cell}_seed{seed}"}
    return run_ours(name, selected["flags"], seed, work_dir, info)


# ------------------------------------------------------------------- the command
def parse_args(argv=None):
    """(the arguments, the sets, the cells to run), a bad flag ending the program in one
    line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets_dir", default=os.path.normpath(SETS_DIR))
    parser.add_argument("--airline", default=os.path.normpath(AIRLINE),
                        help="the airline tweets' CSV file; empty to leave the set out")
    parser.add_argument("--sets", default="", help="only these sets (comma-separated)")
    parser.add_argument("--work_dir", default=os.path.join("/tmp", "adapter_bert_table2"))
    parser.add_argument("--results_dir", default=RECORDS)
    parser.add_argument("--peer_python")
    parser.add_argument("--cells", default="",
                        help="only these cells (comma-separated): " + ", ".join(CELLS))
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at a time, each with its share of the cores")
    parser.add_argument("--table_only", action="store_true",
                        help="rewrite the table from the records, running nothing")
    args = parser.parse_args(argv)
    # By default every cell, AdapterHub only where its Python is given.
    cells = args.cells.split(",") if args.cells else \
        [c for c in CELLS if c != "adapterhub" or args.peer_python]
    unknown = [c for c in cells if c not in CELLS]
    if unknown:
        parser.error(f"--cells={args.cells}: no cell {unknown[0]!r}; expected some of "
                     + ", ".join(CELLS))
    if args.cells and "adapterhub" in cells and not args.peer_python:
        parser.error(f"--cells={args.cells} names adapterhub, which needs --peer_python")
    sets = find_sets(args.sets_dir if os.path.isdir(args.sets_dir) else None,
                     args.airline if args.airline and os.path.isfile(args.airline) else None)
    if args.sets:
        sets = [s for s in sets if s.name in args.sets.split(",")]
    if not sets:
        parser.error(f"no <set>/data.csv under --sets_dir={args.sets_dir} and no --airline file")
    return args, sets, cells


def main(argv=None) -> int:
    args, sets, cells = parse_args(argv)
    infos = {}
    for data in sets:
        info_path = os.path.join(args.results_dir, data.name, "split.json")
        if not os.path.isfile(info_path):
            info = write_split(data, os.path.join(args.work_dir, data.name))
            write_json(info_path, info)
        with open(info_path, encoding="utf-8") as f:
            infos[data.name] = json.load(f)
    if args.table_only:
        print(write_table(args.results_dir, infos))
        return 0
    order = sorted(infos, key=lambda n: infos[n]["rows"]["train"] * infos[n]["max_seq_length"])
    if args.jobs > 1:  # each run's TensorFlow (and the peer's torch) gets its share of cores
        threads = str(max(1, (os.cpu_count() or 1) // args.jobs))
        for variable in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
            os.environ[variable] = threads
    cpu, lock = cpu_description(), threading.Lock()

    def run_item(item) -> None:
        name, cell, seed = item
        work_dir, info = os.path.join(args.work_dir, name), infos[name]
        folder = os.path.join(args.results_dir, name)
        record_id = record_name(cell, seed)
        print(f"table2: {name} {record_id} ...", flush=True)
        record = run_cell(name, cell, seed, work_dir, info, read_records(folder),
                          args.peer_python)
        if record is None:
            return
        record.update(set=name, cell=cell, seed=seed, split_digest=info["split_digest"],
                      cpu=cpu, **({"jobs": args.jobs} if args.jobs > 1 else {}))
        with lock:
            write_json(os.path.join(folder, record_id + ".json"), record)
            print(f"table2: {name} {record_id}: test accuracy {record['test_accuracy']:.2f}",
                  flush=True)
            write_table(args.results_dir, infos)

    for data in sets:  # before any run, so that concurrent runs never write a split
        work_dir = os.path.join(args.work_dir, data.name)
        if not os.path.isfile(os.path.join(work_dir, "test.csv")) or \
                split_digest(work_dir) != infos[data.name]["split_digest"]:
            write_split(data, work_dir)
    recorded = {name: read_records(os.path.join(args.results_dir, name)) for name in infos}
    todo = [item for item in plan(order, cells)
            if not record_stands(item[1], item[2], recorded[item[0]])]
    run_plan(todo, run_item, args.jobs)
    print(write_table(args.results_dir, infos))
    return 0


def waits_for(item: tuple) -> Optional[tuple]:
    """The run an item needs first: a sweep's chosen point at another seed needs the
    sweep (seed 42) of its set and cell."""
    name, cell, seed = item
    return (name, cell, SEEDS[0]) if CELLS[cell].grid and seed != SEEDS[0] else None


def run_plan(todo: List[tuple], run_item, jobs: int) -> None:
    """Runs `run_item` on every item of `todo`, `jobs` at a time, in the plan's order but
    each only once the item it `waits_for` has finished (an item whose prerequisite is
    neither done nor to be run runs at once: `run_cell` then finds its record or none).
    The first failure stops the starting of new items and is raised once the running
    ones end."""
    pending, running = list(todo), {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        while pending or running:
            busy = set(running.values())
            for item in list(pending):
                if len(running) >= jobs:
                    break
                if waits_for(item) in busy or waits_for(item) in pending:
                    continue
                pending.remove(item)
                running[pool.submit(run_item, item)] = item
                busy.add(item)
            done, _ = concurrent.futures.wait(running,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                del running[future]
                if future.exception() is not None:
                    pending.clear()
                    concurrent.futures.wait(running)
                    raise future.exception()


if __name__ == "__main__":
    sys.exit(main())
