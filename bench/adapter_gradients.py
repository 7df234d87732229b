"""How large the adapters' gradients are next to Adam's epsilon, per initial stddev.

Adam divides each weight's first moment by `sqrt(v) + epsilon`. Where a weight's gradient
is much smaller than epsilon (Google's BERT optimizer: 1e-6), the step is no longer about
the learning rate but `learning_rate * |g| / epsilon`: the weight trains at a fraction of
the rate. An adapter's gradient scales with the other projection's weights, so with
adapters initialised at stddev `s` both projections get gradients proportional to `s`.

For each --init_scales value this builds the embedded MiniLM with size-64 Houlsby
adapters (seed 42), takes one batch of the first --batch MRPC training pairs (padded to
128) in inference mode, and reports per group of trained weights the median |gradient|
of the mean cross-entropy and the share of weights whose |gradient| is below epsilon.

Writes bench/results/adapter_gradients.{json,md} and prints the markdown.

Usage:
    python -m bench.adapter_gradients --data_dir=<glue>/MRPC
"""

import argparse
import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench.harness import RESULTS, write_results  # noqa: E402

# Google's epsilon (`training.optimizer.GOOGLE_EPSILON`, which the test checks); repeated
# here so that writing the table (bench.tables) needs no TensorFlow.
EPSILON = 1e-6
GROUPS = ("adapter weights", "adapter biases", "layer_norms", "pooler", "head")


def group_of(variable, component: str) -> str:
    """The report group of a trained variable: its tuning component, adapters split."""
    if component == "adapters":
        return "adapter biases" if "biases" in variable.name else "adapter weights"
    return component


def batch(data_dir: str, size: int):
    """The first `size` MRPC training pairs as Google's features, and their labels."""
    import tensorflow as tf
    from adapter_bert.data.features import convert_examples_to_features
    from adapter_bert.data.glue import MrpcProcessor
    from adapter_bert.data.tokenization import load_tokenizer
    from adapter_bert.model.checkpoints import resolve_backbone

    processor = MrpcProcessor()
    examples = processor.get_train_examples(data_dir)[:size]
    tokenizer = load_tokenizer(resolve_backbone().vocab_file, True)
    features = convert_examples_to_features(examples, processor.get_labels(), 128, tokenizer,
                                            log_examples=0)
    inputs = {k: tf.constant(features[k]) for k in ("input_ids", "input_mask", "segment_ids")}
    return inputs, tf.constant(features["label_ids"])


def gradient_stats(init_scale: float, inputs, labels) -> dict:
    """Per group: median |gradient| and the share of weights below EPSILON."""
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras
    import adapter_bert as ab
    from adapter_bert.adapters.tuning import parameter_components

    keras.utils.set_random_seed(42)
    model = ab.load_pretrained(adapter_config=ab.AdapterConfig(size=64, init_scale=init_scale),
                               head="classifier", num_labels=2)
    ab.apply_tuning(model, "adapter", train_pooler=True)
    with tf.GradientTape() as tape:
        logits = model(inputs, training=False)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    grads = tape.gradient(loss, model.trainable_variables)
    groups = {id(v): group_of(v, component) for v, component in parameter_components(model)}
    magnitudes = collections.defaultdict(list)
    for variable, grad in zip(model.trainable_variables, grads):
        magnitudes[groups[id(variable)]].append(np.abs(grad.numpy()).ravel())
    stats = {}
    for group in GROUPS:
        values = np.concatenate(magnitudes[group])
        stats[group] = {"median_abs_grad": float(np.median(values)),
                        "share_below_epsilon": float(np.mean(values < EPSILON))}
    return stats


def markdown(rows) -> str:
    lines = ["| adapter init stddev | " + " | ".join(GROUPS) + " |",
             "|---|" + "---|" * len(GROUPS)]
    for row in rows:
        cells = [f"{row['stats'][g]['median_abs_grad']:.1e} ({100 * row['stats'][g]['share_below_epsilon']:.0f}%)"
                 for g in GROUPS]
        lines.append(f"| {row['init_scale']:g} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Median |gradient| (share of weights with |gradient| < epsilon = {EPSILON:g}).")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True, help="The MRPC folder of glue_data.")
    parser.add_argument("--init_scales", default="1e-3,1e-2,3e-2")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", default=os.path.join(RESULTS, "adapter_gradients"))
    args = parser.parse_args()
    inputs, labels = batch(args.data_dir, args.batch)
    rows = [{"init_scale": float(s), "stats": gradient_stats(float(s), inputs, labels)}
            for s in args.init_scales.split(",")]
    table = markdown(rows)
    write_results(args.out, {"epsilon": EPSILON, "batch": args.batch, "seed": 42, "rows": rows},
                  table)
    print(table)


if __name__ == "__main__":
    main()
