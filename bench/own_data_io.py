"""Reading, tokenising and caching a large file of your own: rows per second and peak
memory, first run (read, tokenise, write the cache) and second run (read, cache hit).

The paper's text sets reach hundreds of thousands of rows (its news-aggregator set about
420,000). This writes a CSV of --rows news-like headlines (4 topics, 8-20 words, quoted
commas in some) and runs, each in a fresh process, the runner's own path for a training
file: `TextTask` reads it, `convert_examples_to_features` tokenises it with the embedded
MiniLM's vocabulary at max_seq_length 128, the feature cache stores it (the key holds a
digest of every example). Each process prints one JSON line: seconds per stage, rows per
second, the feature arrays' bytes and the peak resident memory (`ru_maxrss`). Sizes run
from --rows/4 to --rows, so the table shows whether memory grows with the file beyond the
features.

Usage:
    python -m bench.own_data_io --rows=400000
"""

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from bench.harness import RESULTS, write_results

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


def measure(path: str, cache_dir: str) -> dict:
    """One run of the training file's path: read, features (cache hit or build)."""
    from adapter_bert.data.feature_cache import FeatureCache, records_digest
    from adapter_bert.data.features import convert_examples_to_features
    from adapter_bert.data.text_task import Columns, TextTask
    from adapter_bert.data.tokenization import load_tokenizer
    from adapter_bert.model.checkpoints import default_backbone_dir
    tokenizer = load_tokenizer(os.path.join(default_backbone_dir(), "vocab.txt"))
    start = time.perf_counter()
    task = TextTask("news", {"train": path}, Columns())
    examples = task.get_examples(None, "train")
    read = time.perf_counter()
    cache = FeatureCache(cache_dir)
    key = {"examples": records_digest(examples), "labels": task.get_labels(),
           "max_seq_length": 128}
    features = cache.get_or_build("news-train", key, lambda: convert_examples_to_features(
        examples, task.get_labels(), 128, tokenizer))
    done = time.perf_counter()
    rows = len(examples)
    return {"rows": rows, "cache_hit": bool(cache.hits), "read_s": round(read - start, 2),
            "features_s": round(done - read, 2), "total_s": round(done - start, 2),
            "rows_per_s": round(rows / (done - start)),
            "feature_bytes": int(sum(v.nbytes for v in features.values())),
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def markdown(result: dict) -> str:
    """The table of a result (`{"cpu": ..., "runs": [...]}`), with the CPU it ran on."""
    lines = ["| rows | run | read (s) | features (s) | rows/s | feature arrays (MB) | "
             "peak RSS (MB) |", "|---|---|---|---|---|---|---|"]
    for run in result["runs"]:
        lines.append(f"| {run['rows']:,} | {run['run']}{' (cache)' if run['cache_hit'] else ''}"
                     f" | {run['read_s']} | {run['features_s']} | {run['rows_per_s']:,} | "
                     f"{run['feature_bytes'] / 1e6:.0f} | {run['peak_rss_bytes'] / 1e6:.0f} |")
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
    parser.add_argument("--measure", nargs=2, metavar=("FILE", "CACHE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return 0
    runs = []
    with tempfile.TemporaryDirectory() as work:
        for rows in sorted({args.rows // 4, args.rows}):
            path = os.path.join(work, f"news_{rows}.csv")
            write_file(path, rows)
            cache = os.path.join(work, f"cache_{rows}")
            for attempt in ("first", "second"):
                done = subprocess.run([sys.executable, "-m", "bench.own_data_io", "--measure",
                                       path, cache], capture_output=True, text=True,
                                      check=True)
                run = json.loads(done.stdout.strip().splitlines()[-1])
                run.update(run=attempt, file_bytes=os.path.getsize(path))
                runs.append(run)
                print(json.dumps(run), flush=True)
    table = markdown({"cpu": _cpu(), "runs": runs})
    write_results(os.path.join(RESULTS, "own_data_io"), {"cpu": _cpu(), "runs": runs}, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
