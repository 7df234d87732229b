"""Does a bottleneck adapter keep its precision under mixed_bfloat16?

A near-identity adapter adds `B(x)`, a small fraction of `x`, to its input `x`. bfloat16
has 8 bits of mantissa (0.4% relative resolution), so a sum computed in bfloat16 can lose
much of a small `B(x)`. This script measures it on the embedded MiniLM with Houlsby
adapters (size 64), on the sentence pairs of MRPC's dev set, for new adapters (the
initialisation every run starts from) and, with --adapter_dir, trained ones:

- per adapter slot, the size of the adapter's output relative to its input, |B(x)|/|x|
  (over the real tokens);
- the relative error of what the adapter adds, |computed - exact| / |B(x)|, when `B` runs
  in bfloat16 and the skip sum `x + B(x)` is rounded to bfloat16, against the same with
  the sum kept in float32 (what the adapter layers do: model/adapter_layers.py `skip_sum`);
- the whole model: largest logit difference from float32 and the share of dev pairs whose
  prediction agrees with float32's, for mixed_bfloat16 with the float32 sum (the package)
  and with a bfloat16 sum.

Writes bench/results/adapter_precision.{json,md}.

Usage:
    python -m bench.studies.adapter_precision --data_dir=<glue_data>/MRPC [--adapter_dir=<run>/adapter]
"""

import argparse
import csv
import os
import sys

import numpy as np

import adapter_bert as ab
from bench.harness import REPO, RESULTS, write_results

MRPC_DIR = os.path.join(REPO, "..", "shared", "data", "glue", "MRPC")
SEQ = 128


def dev_features(data_dir, tokenizer):
    """MRPC dev pairs as padded input arrays (every row padded to SEQ)."""
    with open(os.path.join(data_dir, "dev.tsv"), encoding="utf-8-sig") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    encoded = tokenizer([r[3] for r in rows], [r[4] for r in rows])

    def pad(lists):
        return np.array([v[:SEQ] + [0] * (SEQ - len(v[:SEQ])) for v in lists], np.int32)
    return {"input_ids": pad(encoded["input_ids"]), "input_mask": pad(encoded["attention_mask"]),
            "segment_ids": pad(encoded["token_type_ids"])}


def build(policy, adapter_dir):
    """The MiniLM classifier with Houlsby adapters under `policy` (trained ones if given)."""
    import tf_keras as keras
    keras.mixed_precision.set_global_policy(policy)
    model = ab.load_pretrained(adapter_config=ab.AdapterConfig(size=64), head="classifier",
                               num_labels=2)
    if adapter_dir:
        from adapter_bert.adapters.files import load_trained_weights
        load_trained_weights(model, adapter_dir)
    return model


def logits(model, features, batch=64):
    n = len(features["input_ids"])
    return np.concatenate([
        model({k: v[i:i + batch] for k, v in features.items()}, training=False).numpy()
        .astype(np.float32) for i in range(0, n, batch)])


def adapter_inputs(model, features, count=64):
    """(adapter layer, its input [tokens, d] over real tokens) for every Houlsby slot,
    from a float32 forward pass over the first `count` pairs."""
    from adapter_bert.model import adapter_layers as layers
    seen, original = [], layers.HoulsbyAdapter.call

    def record(self, inputs, residual=None, layer_norm=None):
        seen.append((self, inputs))
        return original(self, inputs, residual, layer_norm)
    layers.HoulsbyAdapter.call = record
    try:
        model({k: v[:count] for k, v in features.items()}, training=False)
    finally:
        layers.HoulsbyAdapter.call = original
    mask = features["input_mask"][:count].astype(bool)
    return [(layer, x.numpy()[mask]) for layer, x in seen]


def slot_errors(layer, x):
    """(|B(x)|/|x|, error with a bfloat16 sum, error with a float32 sum) for one slot."""
    import tensorflow as tf
    exact = layer.bottleneck(tf.constant(x)).numpy()
    x16 = tf.cast(x, tf.bfloat16)
    delta16 = _bottleneck_bf16(layer, x16)
    base = tf.cast(x16, tf.float32).numpy()
    summed16 = tf.cast(x16 + delta16, tf.float32).numpy() - base
    summed32 = tf.cast(delta16, tf.float32).numpy()
    norm = np.linalg.norm(exact)
    return (norm / np.linalg.norm(x), np.linalg.norm(summed16 - exact) / norm,
            np.linalg.norm(summed32 - exact) / norm)


def _bottleneck_bf16(layer, x16):
    """The adapter's bottleneck computed in bfloat16, as under mixed_bfloat16."""
    import tensorflow as tf
    cast = lambda v: tf.cast(v, tf.bfloat16)  # noqa: E731
    hidden = tf.tensordot(x16, cast(layer.weights1), 1) + cast(layer.biases1)
    hidden = layer._act(hidden)  # the layer's activation function
    return tf.tensordot(hidden, cast(layer.weights2), 1) + cast(layer.biases2)


def measure(data_dir, adapter_dir):
    """The figures above for one set of adapter weights."""
    import tensorflow as tf
    from adapter_bert.model import adapter_layers as layers
    from adapter_bert.data.tokenization import load_tokenizer
    from adapter_bert.model.checkpoints import default_backbone_dir
    tokenizer = load_tokenizer(os.path.join(default_backbone_dir(), "vocab.txt"))
    features = dev_features(data_dir, tokenizer)
    fp32 = build("float32", adapter_dir)
    reference = logits(fp32, features)
    slots = np.array([slot_errors(layer, x) for layer, x in adapter_inputs(fp32, features)])
    bf16 = build("mixed_bfloat16", adapter_dir)
    whole = {"float32 sum (the package)": logits(bf16, features)}
    original = layers.skip_sum
    layers.skip_sum = lambda inputs, delta: inputs + tf.cast(delta, inputs.dtype)
    try:
        bf16 = build("mixed_bfloat16", adapter_dir)
        whole["bfloat16 sum"] = logits(bf16, features)
    finally:
        layers.skip_sum = original
        import tf_keras as keras
        keras.mixed_precision.set_global_policy("float32")

    def spread(column):
        return {"median": float(np.median(column)), "min": float(column.min()),
                "max": float(column.max())}
    return {"adapters": adapter_dir or "new (initialisation)", "slots": len(slots),
            "output_over_input": spread(slots[:, 0]),
            "error_bf16_sum": spread(slots[:, 1]), "error_f32_sum": spread(slots[:, 2]),
            "model": {name: {"max_logit_diff": float(np.abs(out - reference).max()),
                             "agreement": float((out.argmax(-1) == reference.argmax(-1)).mean())}
                      for name, out in whole.items()},
            "dev_pairs": int(len(reference))}


def markdown(results):
    lines = ["| adapters | slots | \\|B(x)\\|/\\|x\\| median (min-max) "
             "| error of B(x), bf16 sum: median (max) | float32 sum: median (max) "
             "| model vs float32, bf16 sum: max logit diff / agreement "
             "| float32 sum: max logit diff / agreement |", "|---" * 7 + "|"]
    for r in results:
        ratio, e16, e32 = r["output_over_input"], r["error_bf16_sum"], r["error_f32_sum"]
        m16, m32 = r["model"]["bfloat16 sum"], r["model"]["float32 sum (the package)"]
        adapters = r["adapters"]
        if adapters != "new (initialisation)":  # a run's adapter folder: name the run
            adapters = "trained: " + os.path.basename(os.path.dirname(os.path.abspath(adapters)))
        lines.append(
            f"| {adapters} | {r['slots']} | {ratio['median']:.4f} ({ratio['min']:.4f}-"
            f"{ratio['max']:.4f}) | {100 * e16['median']:.1f}% ({100 * e16['max']:.1f}%) "
            f"| {100 * e32['median']:.2f}% ({100 * e32['max']:.2f}%) "
            f"| {m16['max_logit_diff']:.4f} / {100 * m16['agreement']:.1f}% "
            f"| {m32['max_logit_diff']:.4f} / {100 * m32['agreement']:.1f}% |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default=MRPC_DIR, help="GLUE MRPC folder (dev.tsv)")
    parser.add_argument("--adapter_dir", help="trained adapters of the embedded MiniLM "
                        "(size 64, Houlsby) to measure as well")
    args = parser.parse_args(argv)
    results = [measure(args.data_dir, None)]
    if args.adapter_dir:
        results.append(measure(args.data_dir, args.adapter_dir))
    table = markdown(results)
    write_results(os.path.join(RESULTS, "adapter_precision"), {"results": results}, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
