"""Which default batch size should `TextClassifier.predict` use?

Predicts --texts texts of mixed lengths (the airline tweets with --data, else sentences of
5 to 60 words) with the embedded MiniLM at each batch size, in one process, alternating
the sizes over --rounds rounds so that a slow spell of a shared machine cannot fall on one
size only, and reports each size's median texts per second and its ratio to batch 32
(Keras' default). Each batch is padded to its own longest row, so a larger batch gains
matmul efficiency and loses to padding. Writes bench/results/library_predict.{json,md}
with the CPU it ran on.

Usage:
    python -m bench.library_predict [--data=Tweets.csv]
"""

import argparse
import csv
import random
import statistics
import time

from bench.harness import cpu_description, publish

SIZES = (32, 64, 128, 256, 512)


def texts_for(path, count: int, seed: int = 0):
    """`count` texts: the CSV's `text` column, or generated ones of 5 to 60 words."""
    if path:
        with open(path, encoding="utf-8", newline="") as f:
            return [row["text"] for row in csv.DictReader(f)][:count]
    words = ("the flight was late again and the crew said nothing about the delay "
             "great service thanks for the upgrade my bag never arrived at the gate").split()
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 60)))
            for _ in range(count)]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="a CSV with a text column")
    parser.add_argument("--texts", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    import adapter_bert as ab
    texts = texts_for(args.data, args.texts)
    model = ab.TextClassifier.from_pretrained(labels=["a", "b", "c"], quiet=True)
    rates = {size: [] for size in SIZES}
    for size in SIZES:   # untimed: traces each batch shape family once
        model.predict(texts[:size * 2], batch_size=size, verbose=0)
    for _ in range(args.rounds):
        for size in SIZES:
            start = time.perf_counter()
            model.predict(texts, batch_size=size, verbose=0)
            rates[size].append(len(texts) / (time.perf_counter() - start))
    medians = {size: statistics.median(values) for size, values in rates.items()}
    rows = [{"batch_size": size, "texts_per_s": round(medians[size], 1),
             "vs_32": round(medians[size] / medians[32], 2)} for size in SIZES]
    result = {"cpu": cpu_description(), "texts": len(texts),
              "data": "airline tweets" if args.data else "generated, 5-60 words",
              "rounds": args.rounds, "rows": rows}
    return publish("library_predict", result, {
        "batch size": "batch_size", "texts/s": "texts_per_s", "vs 32": "vs_32"},
        f"{result['cpu'].get('model', '')}, {result['data']}")


if __name__ == "__main__":
    main()
