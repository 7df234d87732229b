"""Training and inference speed, memory and FLOP/s of adapter-bert, measured in one run.

Every figure comes from this machine in this invocation; each measurement runs in its
own subprocess so that peak memory is that measurement's alone:

- training examples/s (from the median step time) and peak memory for adapter tuning,
  full fine-tuning and LayerNorm-only (embedded MiniLM, every batch padded to --seq,
  --batch), plus XLA and mixed-precision variants;
- inference examples/s (batch 64, as PEERS.md);
- achieved FLOP/s of training against a float32 matmul roof measured here, and how a
  training step splits into matmul time and the other ops' time (profiler trace);
- an MRPC training epoch with dynamic padding vs padding to 128.

Peak memory is the process's peak resident set (ru_maxrss) and, to separate what
training costs from what loading TensorFlow and the weights costs, the growth of the
peak over the resident set right before the first training step.

Writes bench/results/speed.json and speed.md, and prints the table and the targets
of issue 7.

Usage (from the repository root):
    python -m bench.speed                 # everything (~15 min on 2 cores)
    python -m bench.speed --steps=5 --epoch_fraction=0.1 --rounds=1   # a quick smoke run
    python -m bench.speed --parts=epoch   # re-measure one part, keep the others
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

# Before the workers import TensorFlow: the package sets TensorFlow's CPU options.
import adapter_bert  # noqa: F401
from bench import harness
from bench.harness import REPO, RESULTS

MRPC_DIR = os.path.join(REPO, "..", "shared", "data", "glue", "MRPC")

TRAIN_ROWS = [  # label, tuning mode, dtype, XLA
    ("adapter", "adapter", "float32", False),
    ("full", "full", "float32", False),
    ("layernorm", "layernorm", "float32", False),
    ("adapter + XLA", "adapter", "float32", True),
    ("full + XLA", "full", "float32", True),
    ("adapter, mixed_bfloat16", "adapter", "mixed_bfloat16", False),
    ("full, mixed_bfloat16", "full", "mixed_bfloat16", False),
]


# ----------------------------------------------------------------- arithmetic
def _layer_flops(config, seq: int) -> tuple:
    """(dense, attention) multiply-add FLOPs (2 per MAC) of one example through one layer."""
    h, i = config.hidden_size, config.intermediate_size
    dense = 2 * seq * (4 * h * h + 2 * h * i)    # Q, K, V, output; two FFN matmuls
    attention = 2 * 2 * seq * seq * h            # scores and context
    return dense, attention


def forward_flops(config, seq: int) -> float:
    """Multiply-add FLOPs of one example's encoder forward pass."""
    return config.num_hidden_layers * sum(_layer_flops(config, seq))


def train_flops(config, seq: int, mode: str, adapter_size: int = 0) -> float:
    """Matmul FLOPs of one training example: forward, activation and weight gradients.

    A weight matrix costs 3 forwards when trained (output, input and weight gradients)
    and 2 when frozen (no weight gradient). The attention products multiply two
    activations, so both of their gradients are needed in every mode: 3 forwards, and
    the scores product once more, since the backward pass recomputes the attention
    probabilities rather than keep them (adapter_bert/model/attention_kernel.py).
    Adapters (two per layer, `adapter_size` units) are trained: 3 forwards of their two
    projections.
    """
    dense, attention = _layer_flops(config, seq)
    adapters = 2 * (2 * 2 * seq * config.hidden_size * adapter_size)
    dense_passes = 3 if mode == "full" else 2
    return config.num_hidden_layers * (dense_passes * dense + 3.5 * attention + 3 * adapters)


# ------------------------------------------------------------------- workers
def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _model(mode: str, dtype: str):
    from adapter_bert.adapters.models import load_pretrained
    from adapter_bert.model.config import AdapterConfig
    from adapter_bert.precision import set_dtype_policy
    from adapter_bert.adapters.tuning import apply_tuning
    set_dtype_policy(dtype)
    model = load_pretrained(None, AdapterConfig() if mode == "adapter" else None,
                            head="classifier", num_labels=2)
    apply_tuning(model, mode, train_pooler=mode != "full")
    return model


def _adapter_size(model) -> int:
    """Bottleneck width of the model's adapters (0 without adapters)."""
    config = getattr(model.bert, "adapter_config", None)
    return config.size if config is not None else 0


def _random_batch(config, batch: int, seq: int):
    import numpy as np
    rng = np.random.default_rng(0)
    inputs = {"input_ids": rng.integers(1000, config.vocab_size, (batch, seq)).astype("int32"),
              "input_mask": np.ones((batch, seq), "int32"),
              "segment_ids": (np.arange(seq)[None, :] >= seq // 2).repeat(batch, 0)
              .astype("int32")}
    return inputs, rng.integers(0, 2, batch).astype("int32")


class _StepTimer:
    """Keras callback recording each training step's duration.

    The median is reported: on a shared 2-core machine a few steps can stall for
    reasons outside the process (other tenants, CPU quota), and one stall must not
    decide a ratio.
    """

    def __init__(self):
        import tf_keras as keras
        outer = self

        class Callback(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                outer.start = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                outer.durations.append(time.perf_counter() - outer.start)

        self.durations, self.start, self.callback = [], 0.0, Callback()

    def median_seconds(self) -> float:
        ordered = sorted(self.durations)
        return ordered[len(ordered) // 2]


def worker_train(args) -> dict:
    """Times `args.steps` training steps after `args.warmup` untimed ones."""
    import tensorflow as tf
    import tf_keras as keras
    from adapter_bert.training.optimizer import create_optimizer
    model = _model(args.mode, args.dtype)
    inputs, labels = _random_batch(model.bert.config, args.batch, args.seq)
    dataset = tf.data.Dataset.from_tensors((inputs, labels)).repeat()
    model.compile(optimizer=create_optimizer(2e-5, 10_000, 100),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=args.xla)
    before = _current_rss_mb()
    model.fit(dataset, steps_per_epoch=args.warmup, epochs=1, verbose=0)
    timer = _StepTimer()
    model.fit(dataset, steps_per_epoch=args.steps, epochs=1, verbose=0,
              callbacks=[timer.callback])
    step = timer.median_seconds()
    # Under XLA a step runs as one compiled cluster: the trace has no per-op split.
    profile = {} if args.xla else _profile_steps(model, dataset, args.profile_steps)
    slots = [v for v in model.optimizer.variables if v is not model.optimizer.iterations]
    return {"examples_per_s": args.batch / step,
            "step_ms": 1000 * step, "step_ms_min": 1000 * min(timer.durations),
            "step_ms_max": 1000 * max(timer.durations),
            "peak_rss_mb": _peak_rss_mb(), "rss_before_training_mb": before,
            "optimizer_slot_params": int(sum(v.shape.num_elements() for v in slots)),
            "trainable_params": int(sum(v.shape.num_elements() for v in model.trainable_weights)),
            "train_flops_per_example": train_flops(model.bert.config, args.seq, args.mode,
                                                   _adapter_size(model)),
            **profile}


def _profile_steps(model, dataset, steps: int) -> dict:
    """Matmul and all-op time per training step, from a profiler trace of `steps` steps.

    Op times are summed over the threads that ran them, so with inter-op parallelism
    their sum can exceed the step time; the split is what the table is for.
    """
    from bench.op_profile import is_matmul, op_events
    if steps <= 0:
        return {}
    events = op_events(lambda: model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0))
    matmul = sum(ms for _, op_type, ms in events if is_matmul(op_type))
    return {"matmul_ms_per_step": matmul / steps,
            "op_ms_per_step": sum(ms for _, _, ms in events) / steps}


def worker_infer(args) -> dict:
    """Times prediction over `args.steps` batches of 64."""
    import tensorflow as tf
    model = _model("adapter", args.dtype)
    inputs, _ = _random_batch(model.bert.config, 64, args.seq)
    predict = tf.function(lambda x: model(x, training=False), jit_compile=args.xla)
    for _ in range(2):
        predict(inputs).numpy()
    durations = []
    for _ in range(args.steps):
        start = time.perf_counter()
        predict(inputs).numpy()
        durations.append(time.perf_counter() - start)
    median = sorted(durations)[len(durations) // 2]
    return {"examples_per_s": 64 / median, "peak_rss_mb": _peak_rss_mb(),
            "forward_flops_per_example": forward_flops(model.bert.config, args.seq)}


def worker_roof(args) -> dict:
    """Float32 (and bfloat16) matmul GFLOP/s at sizes like the model's largest matmuls."""
    import tensorflow as tf
    results = {}
    for dtype in ("float32", "bfloat16"):
        a = tf.random.normal([4096, 384], dtype=tf.float32)
        b = tf.random.normal([384, 1536], dtype=tf.float32)
        a, b = tf.cast(a, dtype), tf.cast(b, dtype)
        matmul = tf.function(lambda x, y: tf.reduce_sum(tf.matmul(x, y)))
        matmul(a, b).numpy()
        best = 0.0
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(10):
                matmul(a, b).numpy()
            best = max(best, 10 * 2 * 4096 * 384 * 1536 / (time.perf_counter() - start))
        results[f"matmul_{dtype}_gflops"] = best / 1e9
    return results


def epoch_seconds(durations, epoch_steps: int) -> dict:
    """A full epoch's time from the step durations of a (partial) epoch.

    The first step traces and optimizes the training graph: a one-off cost that a run
    pays once, not once per epoch, so it is reported apart and the epoch time is
    extrapolated from the steps after it. (Scaling the whole timed span by
    1 / epoch_fraction would count that cost several times over.)
    """
    steady = durations[1:] or durations
    return {"epoch_seconds": sum(steady) / len(steady) * epoch_steps,
            "first_step_seconds": durations[0], "timed_steps": len(durations)}


def worker_epoch(args) -> dict:
    """One MRPC training epoch (adapter tuning, seq 128) with the given padding."""
    import tf_keras as keras
    from adapter_bert.data.features import convert_examples_to_features
    from adapter_bert.data.glue import get_processor
    from adapter_bert.training.optimizer import create_optimizer
    from adapter_bert.runners.pipeline import InputPipeline
    from adapter_bert.data.feature_cache import FeatureCache
    from adapter_bert.data.tokenization import load_tokenizer
    model = _model("adapter", "float32")
    processor = get_processor("mrpc")
    examples = processor.get_examples(args.data_dir, "train")
    tokenizer = load_tokenizer(model.backbone_files.vocab_file, True)
    features = convert_examples_to_features(examples, processor.get_labels(), 128, tokenizer)
    epoch_steps = -(-len(examples) // args.batch)
    steps = max(2, int(epoch_steps * args.epoch_fraction))
    pipeline = InputPipeline(dynamic=args.padding == "dynamic", static_shapes=False,
                             cache=FeatureCache(None), vocab_file="", do_lower_case=True)
    dataset = pipeline.training_data(features, ("input_ids", "input_mask", "segment_ids"),
                                     ["label_ids"], args.batch, steps, seed=42)()
    model.compile(optimizer=create_optimizer(1e-3, steps, steps // 10),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    timer = _StepTimer()
    start = time.perf_counter()
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[timer.callback])
    return {"seconds": time.perf_counter() - start, "steps": steps, "epoch_steps": epoch_steps,
            **epoch_seconds(timer.durations, epoch_steps), "peak_rss_mb": _peak_rss_mb()}


WORKERS = {"train": worker_train, "infer": worker_infer, "roof": worker_roof,
           "epoch": worker_epoch}


# -------------------------------------------------------------------- driver
def run_worker(kind: str, args, **options) -> dict:
    """Runs one measurement in a fresh Python process; returns its JSON result."""
    command = [sys.executable, "-m", "bench.speed", f"--worker={kind}",
               f"--seq={args.seq}", f"--batch={args.batch}", f"--steps={args.steps}",
               f"--warmup={args.warmup}", f"--epoch_fraction={args.epoch_fraction}",
               f"--profile_steps={args.profile_steps}",
               f"--data_dir={args.data_dir}"]
    command += [f"--{k}={v}" for k, v in options.items()]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    print("running:", kind, options, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} {options} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


PARTS = ("roof", "train", "infer", "epoch")


# The rows the speed and memory targets compare: run `--rounds` times, alternating, so
# that a slow spell of this shared machine cannot fall on one mode only.
TARGET_ROWS = ("adapter", "full")


def median_round(rounds: list) -> dict:
    """The run with the median step time (the lower one of an even count), with every
    run's step time attached as `round_step_ms`."""
    ordered = sorted(rounds, key=lambda row: row["step_ms"])
    row = dict(ordered[(len(ordered) - 1) // 2])
    row["round_step_ms"] = [r["step_ms"] for r in rounds]
    return row


def _measure_train(args) -> dict:
    options = {label: dict(mode=mode, dtype=dtype, xla=xla)
               for label, mode, dtype, xla in TRAIN_ROWS}
    rounds = {label: [] for label in TARGET_ROWS}
    for _ in range(args.rounds):
        for label in TARGET_ROWS:
            rounds[label].append(run_worker("train", args, **options[label]))
    train = {}
    for label in options:
        row = median_round(rounds[label]) if label in rounds \
            else run_worker("train", args, **options[label])
        row["achieved_gflops"] = row["examples_per_s"] * row["train_flops_per_example"] / 1e9
        train[label] = row
    return train


def _measure_infer(args) -> dict:
    return {"float32": run_worker("infer", args, dtype="float32", xla=False),
            "float32 + XLA": run_worker("infer", args, dtype="float32", xla=True),
            "mixed_bfloat16": run_worker("infer", args, dtype="mixed_bfloat16", xla=False)}


def _measure_epoch(args) -> dict:
    return {p: run_worker("epoch", args, padding=p) for p in ("max_seq_length", "dynamic")}


def measure(args, parts=PARTS, previous=None) -> dict:
    """Runs the measurements of `parts`; the others are taken from `previous`.

    Every ratio the targets use compares rows of one part, so each stays a
    measurement of a single run even when parts come from different runs.
    """
    settings = {"seq": args.seq, "batch": args.batch, "steps": args.steps,
                "warmup": args.warmup, "epoch_fraction": args.epoch_fraction,
                "rounds": args.rounds,
                "cpu_count": os.cpu_count()}
    measurers = {"roof": lambda: run_worker("roof", args), "train": lambda: _measure_train(args),
                 "infer": lambda: _measure_infer(args), "epoch": lambda: _measure_epoch(args)}
    results = {"settings": settings}
    for part in PARTS:
        results[part] = measurers[part]() if part in parts else previous[part]
    return results


def previous_results(path: str, args, parts) -> dict:
    """The earlier results that the parts not re-measured come from (--parts).

    Raises:
        ValueError: they are missing or were measured at another shape or CPU count.
    """
    if set(parts) == set(PARTS):
        return {}
    if not os.path.isfile(path):
        raise ValueError(f"--parts={','.join(parts)} takes the other parts from {path}, "
                         f"which does not exist; run without --parts first")
    with open(path, encoding="utf-8") as f:
        previous = json.load(f)
    before = previous["settings"]
    for key, now in (("seq", args.seq), ("batch", args.batch), ("cpu_count", os.cpu_count())):
        if before.get(key) != now:
            raise ValueError(f"{path} was measured with {key}={before.get(key)}, this run has "
                             f"{key}={now}; re-measure every part (leave out --parts)")
    return previous


def targets(results: dict) -> list:
    """Issue 7's targets: (name, measured, goal, met)."""
    train, roof = results["train"], results["roof"]
    adapter, full = train["adapter"], train["full"]
    growth = lambda r: r["peak_rss_mb"] - r["rss_before_training_mb"]  # noqa: E731
    rows = [
        ("adapter / full training examples/s",
         adapter["examples_per_s"] / full["examples_per_s"], 1.3, ">="),
        ("adapter / full peak memory (whole process)",
         adapter["peak_rss_mb"] / full["peak_rss_mb"], 0.8, "<="),
        ("adapter / full training memory (peak growth over loaded model)",
         growth(adapter) / growth(full), 0.8, "<="),
        ("MRPC epoch: fixed 128 / dynamic padding time",
         results["epoch"]["max_seq_length"]["epoch_seconds"]
         / results["epoch"]["dynamic"]["epoch_seconds"], 2.0, ">="),
        ("full fine-tuning FLOP/s / float32 matmul roof",
         full["achieved_gflops"] / roof["matmul_float32_gflops"], 0.4, ">="),
    ]
    return [(name, value, goal, value >= goal if op == ">=" else value <= goal, op)
            for name, value, goal, op in rows]


def _ms(row: dict, key: str, digits: int = 0) -> str:
    # Results written before a field existed show "n/a".
    return f"{row[key]:.{digits}f}" if key in row else "n/a"


def _other_ms(row: dict) -> str:
    if "op_ms_per_step" not in row:
        return "n/a"
    return f"{row['op_ms_per_step'] - row['matmul_ms_per_step']:.0f}"


def _rounds_note(train: dict) -> list:
    """A sentence listing the step times of the alternating runs of the target rows."""
    runs = {label: train[label].get("round_step_ms") for label in TARGET_ROWS}
    if not all(runs.values()):
        return []
    listed = "; ".join(f"{label} {', '.join(f'{ms:.0f}' for ms in steps)} ms"
                       for label, steps in runs.items())
    return ["", f"Rows {' and '.join(TARGET_ROWS)}: the run with the median step time of "
                f"{len(runs[TARGET_ROWS[0]])} alternating runs (step times: {listed})."]


def _matmul_split(train: dict) -> list:
    """A sentence comparing adapter and full fine-tuning step time, matmuls vs the rest."""
    adapter, full = train["adapter"], train["full"]
    if "matmul_ms_per_step" not in adapter or "matmul_ms_per_step" not in full:
        return []
    a_mm, f_mm = adapter["matmul_ms_per_step"], full["matmul_ms_per_step"]
    a_other = adapter["op_ms_per_step"] - a_mm
    f_other = full["op_ms_per_step"] - f_mm
    bound = full["train_flops_per_example"] / adapter["train_flops_per_example"]
    return ["", f"Matmul time per step: full fine-tuning {f_mm:.0f} ms, adapter tuning "
                f"{a_mm:.0f} ms ({f_mm / a_mm:.2f}x less). Adapter tuning does {bound:.2f}x fewer "
                f"matmul FLOPs per example (frozen kernels skip their weight gradients; the "
                f"attention products and the adapters still need both gradients): the most it "
                f"could gain if every other op were free. The other ops (softmax, GELU, "
                f"LayerNorm, dropout, optimizer) take {f_other:.0f} vs {a_other:.0f} ms: work "
                f"adapter tuning cannot skip, since gradients flow through every layer to "
                f"the adapters of layer 0."]


def markdown(results: dict) -> str:
    roof = results["roof"]
    lines = [f"Float32 matmul roof: {roof['matmul_float32_gflops']:.0f} GFLOP/s "
             f"(bfloat16: {roof['matmul_bfloat16_gflops']:.0f}); seq {results['settings']['seq']}, "
             f"batch {results['settings']['batch']}, {results['settings']['cpu_count']} CPUs.",
             "", "| training | examples/s | step ms | matmul ms | other ops ms | GFLOP/s | "
             "% of roof | peak RSS MB | growth MB | optimizer slots |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for label, row in results["train"].items():
        lines.append(
            f"| {label} | {row['examples_per_s']:.1f} | {row['step_ms']:.0f} | "
            f"{_ms(row, 'matmul_ms_per_step')} | {_other_ms(row)} | {row['achieved_gflops']:.0f} | "
            f"{100 * row['achieved_gflops'] / roof['matmul_float32_gflops']:.0f} | "
            f"{row['peak_rss_mb']:.0f} | {row['peak_rss_mb'] - row['rss_before_training_mb']:.0f}"
            f" | {row['optimizer_slot_params']:,} |")
    lines += _rounds_note(results["train"])
    lines += _matmul_split(results["train"])
    lines += ["", "| inference (batch 64) | examples/s |", "|---|---|"]
    lines += [f"| {k} | {v['examples_per_s']:.1f} |" for k, v in results["infer"].items()]
    epoch = results["epoch"]
    lines += ["", "| MRPC epoch, adapter tuning | seconds per epoch | first step (tracing) s |",
              "|---|---|---|"]
    lines += [f"| padding: {k} | {v['epoch_seconds']:.0f} | "
              f"{_ms(v, 'first_step_seconds', 1)} |" for k, v in epoch.items()]
    lines += ["", "| target | measured | goal | met |", "|---|---|---|---|"]
    lines += [f"| {name} | {value:.2f} | {op} {goal} | {'yes' if met else 'no'} |"
              for name, value, goal, met, op in targets(results)]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="adapter", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--xla", default="False", help=argparse.SUPPRESS)
    parser.add_argument("--padding", default="dynamic", help=argparse.SUPPRESS)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per row")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of the adapter and full rows, alternating; each reports "
                             "its run with the median step time")
    parser.add_argument("--profile_steps", type=int, default=3,
                        help="steps traced by the profiler after the timed ones, for the "
                             "matmul / other-ops split (0: none)")
    parser.add_argument("--epoch_fraction", type=float, default=1.0,
                        help="part of an MRPC epoch to time (its steps after the first, "
                             "which traces the graph, are scaled to a full epoch)")
    parser.add_argument("--data_dir", default=MRPC_DIR)
    parser.add_argument("--out", default=os.path.join(RESULTS, "speed"))
    parser.add_argument("--parts", default=",".join(PARTS),
                        help="measurements to run (some of roof,train,infer,epoch); the others "
                             "are kept from the earlier results at --out")
    args = parser.parse_args()
    if args.worker:
        args.xla = args.xla == "True"
        print(json.dumps(WORKERS[args.worker](args)))
        return
    parts = args.parts.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown part(s) {unknown}; expected some of {list(PARTS)}")
    try:
        previous = previous_results(args.out + ".json", args, parts)
    except ValueError as error:
        parser.error(str(error))
    results = measure(args, parts, previous)
    table = markdown(results)
    harness.write_results(args.out, results, table)
    print(table)


if __name__ == "__main__":
    main()
