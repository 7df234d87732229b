"""Serving figures: exported SavedModels (tokenisation in the graph) against the Python path.

On the embedded MiniLM (all-MiniLM-L6-v2) with size-64 Houlsby adapters and a 2-way head
(weights as initialised: speed and size do not depend on their values):

1. Speed of one task on the real MRPC dev strings (408 pairs), max_seq_length 128:
   - the exported classifier (`export_classifier`, what `run_classifier.py --export_dir`
     writes), loaded with `tf.saved_model.load`: examples/s at batch 64 (rows in file
     order) and latency p50/p99 at batch 1, strings in, probabilities out;
   - run_classifier.py's own predict path on the same rows: Python tokenisation
     (`convert_examples_to_features`) then `batching.predict_features` (Keras predict,
     rows sorted by length, dynamic padding), at batch 64 and at batch 1.
2. Many tasks: a multi-adapter export of 3 tasks answering batches of 64 rows whose
   tasks are mixed at random, against 3 single-task exports each called on its rows.
3. Size on disk of multi-adapter exports with 1, 2 and 5 adapters, against the backbone
   plus the adapter files.

Writes bench/results/serving.{json,md} and prints the markdown.

Usage:
    python -m bench.serving --data_dir=<glue>/MRPC
"""

import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from bench.harness import RESULTS, write_results  # noqa: E402

flags.DEFINE_string("data_dir", None, "The MRPC folder of glue_data (dev.tsv is read).")
flags.DEFINE_string("work_dir", None, "Where exports are written (default: a temporary dir).")
flags.DEFINE_integer("latency_requests", 200, "Batch-1 requests timed per path.")
flags.DEFINE_integer("repeats", 3, "Passes over the dev set for the batch-64 figures.")
flags.DEFINE_string("out", os.path.join(RESULTS, "serving"),
                    "Output prefix (.json and .md are written).")
FLAGS = flags.FLAGS

BATCH = 64
MAX_LEN = 128
TASKS = ["mrpc", "rte", "qnli", "mnli", "qqp"]


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names)


def percentile_ms(times, q):
    import numpy as np
    return float(np.percentile(np.asarray(times) * 1e3, q))


def best_rate(run, rows, repeats):
    """Examples/s of the fastest of `repeats` passes (the machine is shared)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return rows / best


def latencies(call, count):
    times = []
    for i in range(count):
        start = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - start)
    return times


def python_path(model, tokenizer, examples, labels):
    """run_classifier.py's predict: Python features, then Keras predict (dynamic padding)."""
    from adapter_bert.data.batching import predict_features
    from adapter_bert.data.features import convert_examples_to_features

    def predict(rows, batch):
        features = convert_examples_to_features(rows, labels, MAX_LEN, tokenizer, log_examples=0)
        return predict_features(model, features, ("input_ids", "input_mask", "segment_ids"),
                                batch, dynamic=True, static_shapes=False)
    return predict


def single_task_speed(work, examples, labels):
    import tensorflow as tf
    from adapter_bert.model.checkpoints import default_backbone_dir
    from adapter_bert.adapters.models import load_pretrained
    from adapter_bert.model.config import AdapterConfig
    from adapter_bert.serving import export_classifier
    from adapter_bert.data.tokenization import load_tokenizer
    vocab = os.path.join(default_backbone_dir(), "vocab.txt")
    model = load_pretrained(None, AdapterConfig(size=64), head="classifier", num_labels=2)
    path = export_classifier(model, os.path.join(work, "mrpc"), vocab, True, MAX_LEN, labels,
                             pair=True, task="mrpc")
    serve = tf.saved_model.load(path).signatures["serving_default"]
    text_a = [e.text_a for e in examples]
    text_b = [e.text_b for e in examples]
    n = len(examples)

    def saved_model_pass():
        for begin in range(0, n, BATCH):
            serve(text_a=tf.constant(text_a[begin:begin + BATCH]),
                  text_b=tf.constant(text_b[begin:begin + BATCH]))

    predict = python_path(model, load_tokenizer(vocab, True), examples, labels)
    saved_model_pass()
    predict(examples, BATCH)  # warm-up: tracing
    figures = {
        "saved_model_batch64_examples_per_s": best_rate(saved_model_pass, n, FLAGS.repeats),
        "python_batch64_examples_per_s": best_rate(lambda: predict(examples, BATCH), n,
                                                   FLAGS.repeats),
    }
    count = min(FLAGS.latency_requests, n)
    for name, call in (
            ("saved_model", lambda i: serve(text_a=tf.constant(text_a[i:i + 1]),
                                            text_b=tf.constant(text_b[i:i + 1]))),
            ("python", lambda i: predict(examples[i:i + 1], 1))):
        call(0)
        times = latencies(call, count)
        figures[f"{name}_batch1_p50_ms"] = percentile_ms(times, 50)
        figures[f"{name}_batch1_p99_ms"] = percentile_ms(times, 99)
    return figures, dir_bytes(path)


def make_adapters(work):
    """Five adapter directories on the MiniLM (size 64, 2- or 3-way heads)."""
    from adapter_bert.model.config import AdapterConfig
    from adapter_bert.adapters.multitask import MultiAdapterModel
    model = MultiAdapterModel.from_pretrained()
    dirs = []
    for task in TASKS:
        labels = ["contradiction", "entailment", "neutral"] if task == "mnli" else ["0", "1"]
        model.add_adapter(task, AdapterConfig(size=64), num_labels=len(labels), labels=labels)
        dirs.append(os.path.join(work, "adapters", task))
        model.save_adapter(dirs[-1], task)
    return dirs


def multi_task(work, examples, adapter_dirs):
    import numpy as np
    import tensorflow as tf
    from adapter_bert.adapters.files import adapter_config_of, load_trained_weights
    from adapter_bert.model.checkpoints import default_backbone_dir
    from adapter_bert.adapters.models import load_pretrained
    from adapter_bert.serving import export_classifier, export_multi_adapter
    vocab = os.path.join(default_backbone_dir(), "vocab.txt")
    backbone = os.path.join(default_backbone_dir(), "model.safetensors")
    sizes = []
    for count in (1, 2, 5):
        path = export_multi_adapter(adapter_dirs[:count], os.path.join(work, f"multi{count}"),
                                    max_seq_length=MAX_LEN)
        adapters = sum(dir_bytes(d) for d in adapter_dirs[:count])
        sizes.append({"adapters": count, "export_bytes": dir_bytes(path),
                      "variables_bytes": dir_bytes(os.path.join(path, "variables")),
                      "backbone_plus_adapters_bytes": os.path.getsize(backbone) + adapters})
    # Speed: 3 tasks mixed per batch in one model, against one model per task.
    tasks = TASKS[:3]
    multi = export_multi_adapter(adapter_dirs[:3], os.path.join(work, "multi3"),
                                 max_seq_length=MAX_LEN)
    singles = {}
    for task, directory in zip(tasks, adapter_dirs[:3]):
        model = load_pretrained(None, adapter_config_of(directory), head="classifier",
                                num_labels=3 if task == "mnli" else 2)
        load_trained_weights(model, directory)
        labels = ["contradiction", "entailment", "neutral"] if task == "mnli" else ["0", "1"]
        path = export_classifier(model, os.path.join(work, f"single_{task}"), vocab, True,
                                 MAX_LEN, labels, pair=True, task=task)
        singles[task] = tf.saved_model.load(path).signatures["serving_default"]
    serve_multi = tf.saved_model.load(multi).signatures["serving_default"]
    rng = np.random.default_rng(0)
    row_tasks = np.asarray(tasks)[rng.integers(0, len(tasks), len(examples))]
    text_a = np.asarray([e.text_a for e in examples], object)
    text_b = np.asarray([e.text_b for e in examples], object)
    n = len(examples)

    def mixed():
        for begin in range(0, n, BATCH):
            part = slice(begin, begin + BATCH)
            serve_multi(task=tf.constant(row_tasks[part].tolist()),
                        text_a=tf.constant(text_a[part].tolist()),
                        text_b=tf.constant(text_b[part].tolist()))

    def per_task():
        for begin in range(0, n, BATCH):
            part = slice(begin, begin + BATCH)
            for task in tasks:
                rows = row_tasks[part] == task
                if rows.any():
                    singles[task](text_a=tf.constant(text_a[part][rows].tolist()),
                                  text_b=tf.constant(text_b[part][rows].tolist()))

    mixed()
    per_task()
    speed = {"multi_adapter_mixed_examples_per_s": best_rate(mixed, n, FLAGS.repeats),
             "one_model_per_task_examples_per_s": best_rate(per_task, n, FLAGS.repeats),
             "tasks": tasks}
    return sizes, speed


def markdown(results):
    s = results["single_task"]
    m = results["multi_task_speed"]
    mb = 1024 * 1024
    lines = [
        "| MRPC dev, MiniLM + adapters, max_seq_length 128 | examples/s at batch 64 | "
        "p50 ms at batch 1 | p99 ms at batch 1 |",
        "|---|---|---|---|",
        f"| SavedModel, strings in (tokenisation in the graph) | "
        f"{s['saved_model_batch64_examples_per_s']:.1f} | {s['saved_model_batch1_p50_ms']:.1f} | "
        f"{s['saved_model_batch1_p99_ms']:.1f} |",
        f"| run_classifier.py's predict path (Python tokenizer + Keras predict) | "
        f"{s['python_batch64_examples_per_s']:.1f} | {s['python_batch1_p50_ms']:.1f} | "
        f"{s['python_batch1_p99_ms']:.1f} |",
        "",
        f"| {len(m['tasks'])} tasks mixed at random, batches of 64 | examples/s |",
        "|---|---|",
        f"| one multi-adapter SavedModel, one call per batch | "
        f"{m['multi_adapter_mixed_examples_per_s']:.1f} |",
        f"| one SavedModel per task, one call per task per batch | "
        f"{m['one_model_per_task_examples_per_s']:.1f} |",
        "",
        "| adapters | SavedModel on disk (MiB) | its variables (MiB) | "
        "backbone + adapter files (MiB) |",
        "|---|---|---|---|",
    ]
    for row in results["multi_adapter_sizes"]:
        lines.append(f"| {row['adapters']} | {row['export_bytes'] / mb:.1f} | "
                     f"{row['variables_bytes'] / mb:.1f} | "
                     f"{row['backbone_plus_adapters_bytes'] / mb:.1f} |")
    lines.append(f"\nSingle-task SavedModel: {results['single_task_export_bytes'] / mb:.1f} MiB.")
    return "\n".join(lines) + "\n"


def main(argv):
    del argv
    import adapter_bert  # noqa: F401  (CPU settings before TensorFlow loads)
    import tensorflow as tf
    from adapter_bert.data.glue import get_processor
    if not FLAGS.data_dir:
        raise app.UsageError("--data_dir is required (the MRPC folder)")
    processor = get_processor("mrpc")
    examples = processor.get_examples(FLAGS.data_dir, "dev")
    work = FLAGS.work_dir or tempfile.mkdtemp(prefix="serving_bench_")
    single, single_bytes = single_task_speed(work, examples, processor.get_labels())
    sizes, speed = multi_task(work, examples, make_adapters(work))
    results = {"single_task": single, "single_task_export_bytes": single_bytes,
               "multi_adapter_sizes": sizes, "multi_task_speed": speed,
               "rows": len(examples), "batch": BATCH, "max_seq_length": MAX_LEN,
               "tensorflow": tf.__version__, "cpu_count": os.cpu_count()}
    text = markdown(results)
    write_results(FLAGS.out, results, text)
    print(text)


if __name__ == "__main__":
    app.run(main)
