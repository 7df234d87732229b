"""Adapter tuning at the runners' defaults: the learning-rate robustness benchmarks.

Every run is a plain user command: run_classifier.py / run_squad.py with the task's data,
--learning_rate, --num_train_epochs and a --seed, nothing else about the optimizer (the
tuning mode's default Adam variant applies; eval and predict batch sizes only set speed).
Suites (--suites, run in the order given):

- `mrpc`: MRPC adapters (embedded MiniLM, batch 32, seq 128) at 3e-4 x 5 epochs,
  1e-3 x 3 and 3e-3 x 3; the same on a TF1 checkpoint written from MiniLM
  (`save_tf1_checkpoint`); full fine-tuning at 5e-5 x 3. Seeds 42, 43, 44.
  Target per adapter cell: mean >= 80.0 accuracy and >= 86.0 F1, no seed below 78.0.
- `squad`: SQuAD v1.1 adapters on the first 1,500 questions of train-v1.1-subset.json,
  2 epochs, seq 256, stride 128, batch 16, at 1e-3, 3e-4 and 3e-3, seeds 42-44, scored
  on the first article of dev-v1.1.json. Target: F1 >= 40 at 1e-3, within 3 F1 of it at
  the others.
- `stability`: MRPC and RTE, adapters at {3e-4, 1e-3, 3e-3} and full fine-tuning at
  {2e-5, 5e-5}, 3 epochs, seeds 42-44: mean +- sd per cell.
- `squad_padding`: the `squad` setting at 1e-3, seeds 42-44, with dynamic padding (the
  default) and with `--padding=max_seq_length` (Google's layout: batches padded to
  max_seq_length, so the span softmax covers every position): does the layout change
  what training reaches?
- `squad_optimizer`: the `squad` setting at 1e-3, seeds 42-44, at the default optimizer
  and with `--adam_bias_correction` (plain bias-corrected AdamW, AdapterHub's): which
  serves adapters on a short run?
- `squad_full`: all 11,877 questions of train-v1.1-subset.json, 2 epochs, seq 384,
  adapters (size 64) vs full fine-tuning at their default rates, scored on all of
  dev-v1.1.json.

Each run writes bench/results/robust_defaults/<run>.json as soon as it ends; a run whose
file exists is skipped (runs shared by suites, e.g. MRPC adapters at 1e-3 x 3, run
once), so the script resumes where it stopped; a `squad_full` run that was stopped part
way resumes from its latest checkpoint (one every 100 steps). After every run, and with --tables_only,
the tables bench/results/robust_defaults_<suite>.{json,md} are rewritten from the files
that exist. SQuAD data files are cut into --work_dir, never into the repository.
Several drivers may run at once (e.g. one per suite): a claim file per run in --work_dir
keeps them from running a spec twice, and a run whose driver died but whose process
finished is recorded from its output folder (also by --tables_only).

Usage:
    python -m bench.robust_defaults --suites=mrpc,squad,stability
    python -m bench.robust_defaults --suites=squad_full
    python -m bench.robust_defaults --suites=stability --modes=full   # one mode's cells
    python -m bench.robust_defaults --tables_only
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import threading
import time

from bench.harness import (REPO, listed_choices, start_run_dir, train_loss_per_epoch,
                           write_json)
from bench.harness import read_eval_results as read_results
from bench.squad_adapter_vs_full import first_questions, load_articles, write_squad
from bench.robust_suites import (GLUE_FOLDERS, MODES, OPTIMIZER_FLAGS, SUITES, run_id, suite_specs)
from bench.robust_tables import RESULTS, write_tables
from adapter_bert.io_utils import atomic_write_text, atomic_write_with
from adapter_bert.runs.run_lock import process_alive

SHARED = os.path.join(REPO, "..", "shared", "data")
# ------------------------------------------------------------------------- data, backbone

def tf1_backbone(work_dir) -> str:
    """Writes the embedded MiniLM as a Google TF1 checkpoint folder once; returns its prefix."""
    folder = os.path.join(work_dir, "minilm_tf1")
    prefix = os.path.join(folder, "bert_model.ckpt")
    if not os.path.exists(prefix + ".index"):
        subprocess.run([sys.executable, "-m", "bench.robust_defaults", "--write_tf1", folder],
                       check=True, cwd=REPO)
    return prefix


def write_tf1(folder):
    """Loads the embedded MiniLM and writes bert_model.ckpt, bert_config.json, vocab.txt."""
    import adapter_bert as ab
    from adapter_bert.model.checkpoints import build_model, load_weights, read_weights, \
        resolve_backbone
    from adapter_bert.io_utils import folders
    files = resolve_backbone()
    config = ab.BertConfig.from_json_file(files.config_file)
    bert = ab.BertModel(config)
    build_model(bert)
    load_weights(bert, read_weights(files), source=files.weights)

    def build(staging):
        ab.save_tf1_checkpoint(bert, os.path.join(staging, "bert_model.ckpt"))
        with open(os.path.join(staging, "bert_config.json"), "w", encoding="utf-8") as f:
            f.write(config.to_google_json())
        shutil.copy(files.vocab_file, os.path.join(staging, "vocab.txt"))

    # Built beside the folder and swapped in whole; a folder holding a file the package
    # did not write is refused, never deleted.
    folders.replace(folder, build, "--work_dir")


def squad_files(spec, work_dir):
    """Cuts the run's training and evaluation files into work_dir; returns their paths."""
    name = f"{spec['task']}_{spec['questions']}q"
    train = os.path.join(work_dir, f"{name}-train.json")
    dev = os.path.join(work_dir, f"{name}-dev.json")
    squad = os.path.join(SHARED, "squad")
    if not os.path.exists(train):
        articles = first_questions(load_articles(os.path.join(squad, "train-v1.1-subset.json")),
                                   spec["questions"])
        atomic_write_with(train, lambda tmp: write_squad(tmp, "1.1", articles))
    if not os.path.exists(dev):
        articles = load_articles(os.path.join(squad, "dev-v1.1.json"))
        if spec["eval_articles"]:
            articles = articles[:spec["eval_articles"]]
        atomic_write_with(dev, lambda tmp: write_squad(tmp, "1.1", articles))
    return train, dev


# ------------------------------------------------------------------------------ one run

def command_for(spec, output_dir, work_dir):
    """The run's command line after `python` (a list: `-m adapter_bert.run_classifier ...`):
    the user's command plus seed and output folder."""
    # The dtype is always explicit, so a record means the same on every machine
    # (the runners' default, --dtype=auto, depends on the hardware).
    common = [f"--output_dir={output_dir}", f"--learning_rate={spec['lr']}",
              f"--num_train_epochs={spec['epochs']:g}", f"--seed={spec['seed']}",
              f"--dtype={spec.get('dtype', 'float32')}"]
    if spec["mode"] != "adapter":
        common.append(f"--tuning_mode={spec['mode']}")
    common += OPTIMIZER_FLAGS[spec.get("optimizer")]
    if spec.get("backbone") == "tf1":
        prefix = tf1_backbone(work_dir)
        folder = os.path.dirname(prefix)
        common += [f"--init_checkpoint={prefix}",
                   f"--bert_config_file={os.path.join(folder, 'bert_config.json')}",
                   f"--vocab_file={os.path.join(folder, 'vocab.txt')}"]
    if spec["task"] in GLUE_FOLDERS:
        folder = GLUE_FOLDERS[spec["task"]]
        data_dir = os.path.join(SHARED, "glue", folder)
        return ["-m", "adapter_bert.run_classifier", f"--task_name={folder}",
                "--do_train", "--do_eval", f"--data_dir={data_dir}", "--eval_batch_size=64",
                *common, *([f"--save_checkpoints_steps={spec['save_checkpoints_steps']}"]
                           if "save_checkpoints_steps" in spec else [])]
    train, dev = squad_files(spec, work_dir)
    return ["-m", "adapter_bert.run_squad", "--do_train", "--do_predict",
            f"--train_file={train}", f"--predict_file={dev}",
            f"--max_seq_length={spec['max_seq_length']}", "--doc_stride=128",
            f"--train_batch_size={spec['batch_size']}", "--predict_batch_size=64", *common,
            *([f"--padding={spec['padding']}"] if spec.get("padding") else []),
            *([f"--save_checkpoints_steps={spec['save_checkpoints_steps']}"]
              if "save_checkpoints_steps" in spec else [])]


def run_one(spec, args):
    """Runs one spec; returns its result record.

    A short run that was killed starts over in a fresh output folder. A long one (a spec
    with `save_checkpoints_steps`, the hours-long `squad_full` runs) resumes from its
    latest checkpoint, as the runner does when run again, and its wall time adds up the
    attempts (kept in the output folder's `bench_wall_s`).
    """
    output_dir = os.path.join(args.work_dir, run_id(spec))
    resumable = "save_checkpoints_steps" in spec
    # The runners keep their checkpoints in <output_dir>/checkpoints.
    spent_path = os.path.join(output_dir, "bench_wall_s")
    if not (resumable and os.path.exists(os.path.join(output_dir, "checkpoints", "checkpoint"))):
        start_run_dir(output_dir, spent_path, os.path.join(output_dir, "run.log"))
    spent = float(open(spent_path).read()) if os.path.exists(spent_path) else 0.0
    command = [sys.executable, *command_for(spec, output_dir, args.work_dir)]
    print("+", " ".join(command), flush=True)
    start = time.time()
    try:
        with open(os.path.join(output_dir, "run.log"), "a", encoding="utf-8") as log:
            subprocess.run(command, check=True, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    finally:
        with open(spent_path, "w", encoding="utf-8") as f:
            f.write(str(spent + time.time() - start))
    return result_record(spec, command, output_dir, spent + time.time() - start)


def result_record(spec, command, output_dir, wall):
    """The run's record, read from the files its command wrote into output_dir."""
    record = {"run": run_id(spec), **spec, "command": " ".join(["python"] + command[1:]).replace(
        REPO + "/", ""), "wall_s": round(wall, 1)}
    if spec["task"] in GLUE_FOLDERS:
        results = read_results(os.path.join(output_dir, "eval_results.txt"))
        # CoLA reports Matthews correlation only.
        record.update(dev_accuracy=(100 * results["eval_accuracy"]
                                    if "eval_accuracy" in results else None),
                      dev_f1=100 * results["eval_f1"] if "eval_f1" in results else None,
                      **({"dev_mcc": 100 * results["eval_mcc"]} if "eval_mcc" in results
                         else {}),
                      trainable_params=int(results["trainable_params"]),
                      trainable_percent=float(results["trainable_percent"]),
                      dev_loss=results.get("eval_loss"))
        curve = train_loss_per_epoch(output_dir, spec["epochs"], results.get("global_step"))
        if curve:
            record["train_loss_per_epoch"] = curve
    else:
        with open(os.path.join(output_dir, "eval_results.json"), encoding="utf-8") as f:
            results = json.load(f)
        record.update(exact_match=results["exact_match"], f1=results["f1"])
    record["optimizer_log"] = _optimizer_line(os.path.join(output_dir, "run.log"))
    return record


# A claim file `<work_dir>/<run>.claim` holds "<pid> <start time>" of the process running
# that run, so that several drivers (or a driver restarted while its runs go on) never run
# the same spec twice.



def read_claim(path):
    """(pid, start time) of a claim file, or None if there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            pid, start = f.read().split()
        return int(pid), float(start)
    except (FileNotFoundError, ValueError):
        return None


def claim(spec, args) -> bool:
    """Claims the spec for this process; False while another live process holds it."""
    path = os.path.join(args.work_dir, run_id(spec) + ".claim")
    held = read_claim(path)
    if held and held[0] != os.getpid() and process_alive(held[0]):
        return False
    atomic_write_text(path, f"{os.getpid()} {time.time()}")
    return True


def adopt(spec, args):
    """The record of a run another process finished (claim dead, results there), or None."""
    held = read_claim(os.path.join(args.work_dir, run_id(spec) + ".claim"))
    output_dir = os.path.join(args.work_dir, run_id(spec))
    done = os.path.join(output_dir, "eval_results.txt" if spec["task"] in GLUE_FOLDERS
                        else "eval_results.json")
    if not held or process_alive(held[0]) or not os.path.exists(done):
        return None
    command = [sys.executable, *command_for(spec, output_dir, args.work_dir)]
    return result_record(spec, command, output_dir, os.path.getmtime(done) - held[1])


def _optimizer_line(log_path):
    """The runner's 'Optimizer: ...' log line (which rate and Adam variant it used)."""
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if "Optimizer: " in line:
                return line.split("Optimizer: ", 1)[1].strip()
    return None


def _unique(specs):
    """Specs in order, each run once (suites share runs)."""
    seen, unique = set(), []
    for spec in specs:
        if run_id(spec) not in seen:
            seen.add(run_id(spec))
            unique.append(spec)
    return unique


def adopt_finished(specs, args):
    """Records the runs that other processes finished since (see `adopt`)."""
    for spec in specs:
        path = os.path.join(args.results_dir, run_id(spec) + ".json")
        if not os.path.exists(path):
            adopted = adopt(spec, args)
            if adopted:
                write_json(path, adopted)


def run_pending(specs, args, write_table=None):
    """Runs the specs whose result file is missing, --jobs at a time, in order.

    After each run is recorded, `write_table(results_dir)` rewrites the driver's table
    (default: every suite table). A spec another live process has claimed is left to it;
    at the end this driver waits for such runs and records them from their output folders.
    """
    write_table = write_table or (lambda results_dir: write_tables(SUITES, results_dir))
    lock = threading.Lock()
    result_path = lambda spec: os.path.join(args.results_dir, run_id(spec) + ".json")  # noqa: E731
    todo = [s for s in specs if not os.path.exists(result_path(s))]
    if any(s.get("backbone") == "tf1" for s in todo):
        tf1_backbone(args.work_dir)  # once, before parallel runs could race to write it
    busy = []

    def record(spec, result):
        with lock:
            write_json(result_path(spec), result)
            write_table(args.results_dir)

    def work(spec):
        with lock:
            if os.path.exists(result_path(spec)):
                return True
            adopted = adopt(spec, args)
            if adopted:
                write_json(result_path(spec), adopted)
                return True
            if not claim(spec, args):
                busy.append(spec)
                return True
        try:
            record(spec, run_one(spec, args))
        except subprocess.CalledProcessError:
            log = os.path.join(args.work_dir, run_id(spec), "run.log")
            print(f"robust_defaults.py: run {run_id(spec)} failed; see {log}", flush=True)
            return False
        return True

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        ok = [future.result() for future in [pool.submit(work, spec) for spec in todo]]
    for spec in busy:
        claim_path = os.path.join(args.work_dir, run_id(spec) + ".claim")
        # Until the run is recorded or its claimant has died (a driver that lives on after
        # the run keeps its claim file).
        while not os.path.exists(result_path(spec)) and (held := read_claim(claim_path)) \
                and process_alive(held[0]) and held[0] != os.getpid():
            time.sleep(30)
        if not os.path.exists(result_path(spec)):
            adopted = adopt(spec, args)
            if adopted:
                record(spec, adopted)
            else:
                ok.append(work(spec))
    return all(ok)


def run_table_suite(specs, args, write_table) -> int:
    """The driver of a table built on these runs (bench.glue_table, bench.dtype_parity):
    runs the missing `specs` one at a time, in order, rewriting the table after each
    (`write_table(results_dir)`), unless `args.tables_only`. Returns the exit status."""
    args.jobs = 1
    os.makedirs(args.results_dir, exist_ok=True)
    os.makedirs(args.work_dir, exist_ok=True)
    failed = not args.tables_only and not run_pending(specs, args, write_table)
    write_table(args.results_dir)
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", default="mrpc,squad,stability")
    parser.add_argument("--work_dir", default="/tmp/adapter_bert_robust_defaults")
    parser.add_argument("--results_dir", default=RESULTS)
    parser.add_argument("--tables_only", action="store_true")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="tuning modes whose runs to run (the tables cover all)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once (each is its own process)")
    parser.add_argument("--write_tf1", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_tf1:
        write_tf1(args.write_tf1)
        return
    suites = listed_choices(parser, "suites", args.suites, SUITES)
    modes = listed_choices(parser, "modes", args.modes, MODES)
    os.makedirs(args.results_dir, exist_ok=True)
    os.makedirs(args.work_dir, exist_ok=True)
    adopt_finished(_unique([s for suite in SUITES for s in suite_specs(suite)]), args)
    if not args.tables_only:
        pending = [spec for suite in suites for spec in suite_specs(suite)
                   if spec["mode"] in modes]
        failed = not run_pending(_unique(pending), args)
        write_tables(SUITES, args.results_dir)
        if failed:
            sys.exit(1)
        return
    write_tables(SUITES, args.results_dir)


if __name__ == "__main__":
    main()
