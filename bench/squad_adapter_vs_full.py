"""SQuAD v1.1 and v2.0 on the embedded MiniLM: adapter tuning vs full fine-tuning.

Both modes get the same budget (training questions, epochs, batch size, sequence length,
seed); each runs at its own learning rate (--adapter_lr, --full_lr) and Adam variant
(--bias_correction=MODES: which modes use bias-corrected Adam; see bench/mode_flags.py).
The data is cut from ../shared/data/squad into --work_dir (never into the repository):

- v1.1: train on the first --max_train_questions questions of train-v1.1-subset.json,
  evaluate on the first --eval_articles articles of the official dev-v1.1.json;
- v2.0: there is no train-v2.0 here, so dev-v2.0.json is split by article: its first
  --v2_train_articles articles train (at most --max_train_questions questions), the next
  --v2_eval_articles articles evaluate. Train and evaluation share no article.

Each run is one `run_squad.py` command, timed; the scores come from its eval_results.json.
Writes `<--out>.{json,md}` (default bench/results/squad_adapter_vs_full).

Usage (from the repository root):
    python -m bench.squad_adapter_vs_full --squad_dir=$SQUAD_DIR
    python -m bench.squad_adapter_vs_full --squad_dir=$SQUAD_DIR --bias_correction=adapter \
        --adapter_lr=2e-3
"""

import argparse
import json
import os

from bench import harness
from bench.mode_flags import (add_mode_arguments, check_mode_arguments, mode_flags, modes,
                              optimizer_label, row_fields)

STEM = "squad_adapter_vs_full"


def load_articles(path):
    """The "data" list of a SQuAD JSON file."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)["data"]


def first_questions(articles, limit):
    """The articles cut after `limit` questions (article and paragraph order kept)."""
    kept, count = [], 0
    for article in articles:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            if count >= limit:
                break
            qas = paragraph["qas"][:limit - count]
            count += len(qas)
            paragraphs.append(dict(paragraph, qas=qas))
        if paragraphs:
            kept.append(dict(article, paragraphs=paragraphs))
        if count >= limit:
            break
    return kept


def count_questions(articles):
    return sum(len(p["qas"]) for a in articles for p in a["paragraphs"])


def write_squad(path, version, articles):
    """Writes a SQuAD JSON file; returns a one-line description of what it holds."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": version, "data": articles}, f)
    titles = [a.get("title", "?") for a in articles]
    plural = "s" if len(articles) != 1 else ""
    return (f"{count_questions(articles)} questions, {len(articles)} article{plural} "
            f"({titles[0]} .. {titles[-1]})")


def prepare_data(args):
    """Writes the train/eval files of each version into work_dir; returns their description."""
    os.makedirs(args.work_dir, exist_ok=True)
    data = {}
    if "v1.1" in args.versions:
        source = os.path.join(args.squad_dir, "train-v1.1-subset.json")
        train = first_questions(load_articles(source), args.max_train_questions)
        dev = load_articles(os.path.join(args.squad_dir, "dev-v1.1.json"))[:args.eval_articles]
        data["v1.1"] = _files(args, "v1.1", "1.1", train, dev,
                              f"first {args.max_train_questions} questions of "
                              "train-v1.1-subset.json",
                              f"first {args.eval_articles} articles of dev-v1.1.json")
    if "v2.0" in args.versions:
        articles = load_articles(os.path.join(args.squad_dir, "dev-v2.0.json"))
        k, e = args.v2_train_articles, args.v2_eval_articles
        train = first_questions(articles[:k], args.max_train_questions)
        dev = articles[k:k + e]
        data["v2.0"] = _files(args, "v2.0", "v2.0", train, dev,
                              f"dev-v2.0.json articles 1-{k} (at most {args.max_train_questions} "
                              "questions)", f"dev-v2.0.json articles {k + 1}-{k + len(dev)}")
    return data


def _files(args, name, version, train, dev, train_source, eval_source):
    paths = {split: os.path.join(args.work_dir, f"{name}-{split}.json")
             for split in ("train", "eval")}
    return {
        "train_file": paths["train"], "predict_file": paths["eval"],
        "train": f"{train_source}: " + write_squad(paths["train"], version, train),
        "eval": f"{eval_source}: " + write_squad(paths["eval"], version, dev),
    }


def run_one(version, mode, files, args):
    """Runs run_squad.py for one (version, mode), afresh; returns its row of results."""
    output_dir = os.path.join(args.work_dir, f"{version}-{mode}")
    command = harness.runner_command("run_squad", [
        "--do_train", "--do_predict",
        f"--train_file={files['train_file']}", f"--predict_file={files['predict_file']}",
        f"--output_dir={output_dir}", f"--max_seq_length={args.max_seq_length}",
        f"--doc_stride={args.doc_stride}", f"--max_query_length={args.max_query_length}",
        f"--train_batch_size={args.batch_size}", f"--num_train_epochs={args.epochs}",
        "--predict_batch_size=64", f"--seed={args.seed}", "--save_checkpoints_steps=100000",
        *(["--version_2_with_negative"] if version == "v2.0" else []),
        *([f"--init_checkpoint={args.init_checkpoint}"] if args.init_checkpoint else []),
        *mode_flags(mode, args), *args.extra])
    done = harness.run(command, output_dir)
    return {"version": version, "mode": mode, **row_fields(mode, args),
            "command": " ".join(command[1:]), "wall_s": done.wall_s, "results": done.results}


def _gap_line(rows, version):
    gap = f1_gap(rows, version)
    return ["", f"Adapter F1 minus full fine-tuning F1: {gap:+.2f}", ""] if gap is not None \
        else [""]


def _params(r):
    return (f"{r['trainable_params']:,} / {r['all_params']:,} | {r['trainable_percent']:.2f}")


def f1_gap(rows, version):
    """Adapter F1 minus full fine-tuning F1 for one version, or None if a mode is missing."""
    f1 = {row["mode"]: row["results"]["f1"] for row in rows if row["version"] == version}
    return f1["adapter"] - f1["full"] if {"adapter", "full"} <= set(f1) else None


def markdown(rows, data, settings):
    """The results as markdown tables, with the data each version used."""
    lines = [f"Settings: {json.dumps(settings)}", ""]
    v1 = [row for row in rows if row["version"] == "v1.1"]
    if v1:
        lines += [f"**SQuAD v1.1.** Train: {data['v1.1']['train']}. "
                  f"Evaluate: {data['v1.1']['eval']}.", "",
                  "| mode | learning rate, Adam | EM | F1 | trainable / total | trainable% | "
                  "wall time (train + predict) |", "|---|---|---|---|---|---|---|"]
        for row in v1:
            r = row["results"]
            lines.append(f"| {row['mode']} | {optimizer_label(row)} | {r['exact_match']:.2f} | "
                         f"{r['f1']:.2f} | {_params(r)} | {row['wall_s'] / 60:.1f} min |")
        lines += _gap_line(rows, "v1.1")
    v2 = [row for row in rows if row["version"] == "v2.0"]
    if v2:
        lines += [f"**SQuAD v2.0** (dev-v2.0 split by article; no train-v2.0 here). "
                  f"Train: {data['v2.0']['train']}. Evaluate: {data['v2.0']['eval']}.", "",
                  "| mode | learning rate, Adam | EM | F1 | HasAns F1 | NoAns F1 | best EM (thresh) | "
                  "best F1 (thresh) | trainable / total | trainable% | "
                  "wall time (train + predict) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in v2:
            r = row["results"]
            lines.append(
                f"| {row['mode']} | {optimizer_label(row)} | {r['exact']:.2f} | {r['f1']:.2f} | "
                f"{r.get('HasAns_f1', float('nan')):.2f} | {r.get('NoAns_f1', float('nan')):.2f} | "
                f"{r['best_exact']:.2f} ({r['best_exact_thresh']:.3f}) | "
                f"{r['best_f1']:.2f} ({r['best_f1_thresh']:.3f}) | {_params(r)} | "
                f"{row['wall_s'] / 60:.1f} min |")
        lines += _gap_line(rows, "v2.0")
    lines += ["Commands:", ""] + [f"    python {row['command']}" for row in rows]
    return "\n".join(lines) + "\n"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--squad_dir",
                        default=os.path.join(harness.REPO, "..", "shared", "data", "squad"))
    parser.add_argument("--work_dir", default="/tmp/adapter_bert_bench_squad")
    parser.add_argument("--versions", default="v1.1,v2.0")
    add_mode_arguments(parser)
    parser.add_argument("--max_train_questions", type=int, default=3500,
                        help="training questions per version (about 4,100 windows at 256/128)")
    parser.add_argument("--eval_articles", type=int, default=8, help="dev-v1.1 articles scored")
    parser.add_argument("--v2_train_articles", type=int, default=12)
    parser.add_argument("--v2_eval_articles", type=int, default=8)
    parser.add_argument("--max_seq_length", type=int, default=256)
    parser.add_argument("--doc_stride", type=int, default=128)
    parser.add_argument("--max_query_length", type=int, default=64)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--init_checkpoint", default=None,
                        help="backbone for a quick check; default: the embedded MiniLM")
    parser.add_argument("--out", default=os.path.join(harness.RESULTS, STEM),
                        help="results path without extension (.json and .md are written)")
    parser.add_argument("--extra", nargs="*", default=[], help="more run_squad.py flags")
    args = parser.parse_args()
    check_mode_arguments(parser, args)
    args.versions = args.versions.split(",")
    unknown = set(args.versions) - {"v1.1", "v2.0"}
    if unknown:
        parser.error(f"--versions: unknown version(s) {sorted(unknown)}; expected v1.1, v2.0")
    return args


def main():
    args = parse_args()
    data = prepare_data(args)
    rows = [run_one(version, mode, data[version], args)
            for version in args.versions for mode in modes(args)]
    settings = {k: getattr(args, k) for k in (
        "max_train_questions", "max_seq_length", "doc_stride", "max_query_length", "batch_size",
        "epochs", "seed")}
    settings["backbone"] = args.init_checkpoint or "embedded all-MiniLM-L6-v2"
    gaps = {version: f1_gap(rows, version) for version in args.versions}
    table = markdown(rows, data, settings)
    harness.write_results(args.out, {"settings": settings, "data": data, "runs": rows,
                                     "adapter_minus_full_f1": gaps}, table)
    print(table)


if __name__ == "__main__":
    main()
