"""What the optimizer does to MRPC adapter tuning in its first steps: the figures behind
docs/results.md, "Learning rates, seeds and the optimizer".

Each variant is one run_classifier.py configuration (flags), trained with the schedule
of a full --epochs run (warmup and decay as the real run) but stopped after --steps
updates, then scored on the whole MRPC dev set. Every step it records, per group of
trained weights (adapters, LayerNorms, pooler, head), the update size relative to the
weights (||w_after - w_before|| / ||w_before||), the training loss and the learning
rate; every --probe_every steps it runs 64 fixed dev examples in inference mode and
records the pooler's tanh saturation (share of pooled outputs with |tanh| > 0.99), the
mean |pre-activation| of the pooler, the spread of the [CLS] vector across examples, the
logit gap between the classes and the share predicted "paraphrase".

Writes bench/results/optimizer_dynamics/<variant>.json as soon as a variant ends, and
bench/results/optimizer_dynamics.{json,md} (one summary row per variant) from the
files that exist. A variant whose file exists is skipped.

Usage:
    python -m bench.studies.optimizer_dynamics --variants=google_1e-3,corrected_1e-3
    python -m bench.studies.optimizer_dynamics            # every variant, each in its own process
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench.harness import REPO, listed_choices, write_json, write_results
from bench.harness import RESULTS as ALL_RESULTS

RESULTS = os.path.join(ALL_RESULTS, "optimizer_dynamics")
DATA = os.path.join(REPO, "..", "shared", "data", "glue", "MRPC")

# name -> run_classifier.py flags beyond the common ones (task, data, seed, epochs).
# "google" is the uncorrected Adam of Google's BERT, "corrected" Keras/PyTorch AdamW.
VARIANTS = {
    "google_1e-3": ["--learning_rate=1e-3", "--adam_bias_correction=false"],
    "google_3e-4": ["--learning_rate=3e-4", "--adam_bias_correction=false"],
    "google_1e-3_frozen_pooler": ["--learning_rate=1e-3", "--adam_bias_correction=false",
                                  "--train_pooler=false"],
    "google_1e-3_warmup_0.3": ["--learning_rate=1e-3", "--adam_bias_correction=false",
                               "--warmup_proportion=0.3"],
    "corrected_1e-3": ["--learning_rate=1e-3", "--adam_bias_correction=true"],
    "corrected_3e-3": ["--learning_rate=3e-3", "--adam_bias_correction=true"],
    "corrected_3e-4": ["--learning_rate=3e-4", "--adam_bias_correction=true"],
    "corrected_1e-3_frozen_pooler": ["--learning_rate=1e-3", "--adam_bias_correction=true",
                                     "--train_pooler=false"],
}

# Every variant starts the adapters as Google's code does (stddev 1e-3) and keeps Google's
# epsilon, so that the variants differ in the Adam variant, rate and pooler alone.
PINNED = ["--adapter_init_scale=1e-3", "--adam_epsilon=1e-6"]

GROUPS = ("adapters", "layer_norms", "pooler", "head")


def _group(name: str) -> str:
    if "adapters" in name:
        return "adapters"
    if "LayerNorm" in name or "layer_norm" in name:
        return "layer_norms"
    if "pooler" in name:
        return "pooler"
    return "head"


class DynamicsProbe:
    """Keras callback recording the per-step figures described in the module docstring."""

    def __init__(self, model, optimizer, schedule, probe_inputs, probe_every: int):
        import tf_keras as keras

        class _Callback(keras.callbacks.Callback):
            pass

        self.model, self.optimizer, self.schedule = model, optimizer, schedule
        self.inputs, self.every = probe_inputs, probe_every
        self.records, self.probes = [], []
        self.callback = _Callback()
        self.callback.on_train_batch_begin = self._begin
        self.callback.on_train_batch_end = self._end
        self.before = None

    def _weights(self):
        return {v.name: v.numpy().copy() for v in self.model.trainable_variables}

    def _begin(self, batch, logs=None):
        step = int(self.optimizer.iterations.numpy())
        if step % self.every == 0:
            self.probes.append(self.probe(step))
        self.before = self._weights()

    def _end(self, batch, logs=None):
        import numpy as np
        after = self._weights()
        step = int(self.optimizer.iterations.numpy())
        ratio = {}
        for group in GROUPS:
            names = [n for n in after if _group(n) == group]
            if not names:
                continue
            delta = sum(float(np.sum((after[n] - self.before[n]) ** 2)) for n in names)
            norm = sum(float(np.sum(self.before[n] ** 2)) for n in names)
            ratio[group] = (delta ** 0.5) / max(norm ** 0.5, 1e-12)
        rate = float(self.schedule(step - 1))
        self.records.append({"step": step, "loss": float((logs or {}).get("loss", float("nan"))),
                             "learning_rate": rate, "update_ratio": ratio})

    def probe(self, step: int) -> dict:
        """Inference-mode figures on the fixed probe batch."""
        import numpy as np
        import tensorflow as tf
        out = self.model.bert(self.inputs, training=False)
        pooled = out["pooled_output"].numpy()
        cls = out["sequence_output"][:, 0].numpy()
        logits = self.model.head(out["pooled_output"], training=False).numpy()
        pre = np.arctanh(np.clip(pooled, -0.999999, 0.999999))
        gap = logits[:, 1] - logits[:, 0]
        del tf
        return {"step": step,
                "pooler_saturated": float(np.mean(np.abs(pooled) > 0.99)),
                "pooler_preact_mean_abs": float(np.mean(np.abs(pre))),
                "pooled_spread": float(np.mean(np.std(pooled, axis=0))),
                "cls_spread": float(np.mean(np.std(cls, axis=0))),
                "cls_mean_abs": float(np.mean(np.abs(cls))),
                "logit_gap_mean": float(np.mean(gap)), "logit_gap_sd": float(np.std(gap)),
                "predicted_positive": float(np.mean(gap > 0))}


def run_variant(name: str, args) -> dict:
    """Trains one variant in this process; returns its record."""
    from adapter_bert.command_line import run_config
    work = tempfile.mkdtemp(prefix=f"dynamics_{name}_", dir=args.work_dir)
    argv = ["--task_name=MRPC", "--do_train", "--do_eval",
            f"--data_dir={args.data_dir}", f"--output_dir={work}",
            f"--num_train_epochs={args.epochs}", f"--seed={args.seed}",
            f"--feature_cache_dir={args.work_dir}/feature_cache", *PINNED, *VARIANTS[name]]
    values = run_config.parse("classifier", argv)
    import numpy as np
    from adapter_bert.runners import base
    from adapter_bert.model.inputs import FEATURE_NAMES
    from adapter_bert.runners.classifier import ClassifierRun
    run = ClassifierRun(values)
    features, count = run.features("train")
    schedule, _ = base.training_schedule(values, count, run.static_shapes)
    dev, _ = run.features("dev")
    probe_inputs = {k: dev[k][:64] for k in FEATURE_NAMES}
    with run.strategy.scope():
        optimizer = base.run_optimizer(values, schedule)
        run.model.compile(optimizer=optimizer, loss=run._loss(), jit_compile=False)  # noqa: SLF001
    probe = DynamicsProbe(run.model, optimizer, optimizer._learning_rate,  # noqa: SLF001
                          probe_inputs, args.probe_every)
    dataset = run.pipeline.training_data(features, FEATURE_NAMES, ["label_ids"],
                                         values.train_batch_size, schedule.num_train_steps,
                                         values.seed)()
    steps = min(args.steps, schedule.num_train_steps)
    start = time.time()
    run.model.fit(dataset, steps_per_epoch=steps, epochs=1, callbacks=[probe.callback],
                  verbose=0)
    wall = time.time() - start
    probe.probes.append(probe.probe(int(optimizer.iterations.numpy())))
    results = run.evaluate(int(optimizer.iterations.numpy()))
    del np
    return {"variant": name, "flags": VARIANTS[name], "seed": args.seed, "epochs": args.epochs,
            "schedule_steps": schedule.num_train_steps,
            "warmup_steps": schedule.num_warmup_steps, "steps_run": steps,
            "train_wall_s": round(wall, 1),
            "dev_accuracy": 100 * float(results["eval_accuracy"]),
            "dev_f1": 100 * float(results["eval_f1"]),
            "records": probe.records, "probes": probe.probes}


def _max_ratio(record, group, upto=None):
    values = [r["update_ratio"].get(group, 0.0) for r in record["records"]
              if upto is None or r["step"] <= upto]
    return max(values) if values else float("nan")


def summary_rows(records):
    rows = []
    for rec in records:
        probes = rec["probes"]
        peak_sat = max(p["pooler_saturated"] for p in probes)
        last = probes[-1]
        losses = [r["loss"] for r in rec["records"]]
        rows.append({
            "variant": rec["variant"], "steps": rec["steps_run"], "seed": rec["seed"],
            "max_update_ratio": {g: _max_ratio(rec, g) for g in GROUPS},
            "peak_pooler_saturated": peak_sat, "final_pooler_saturated": last["pooler_saturated"],
            "final_pooled_spread": last["pooled_spread"],
            "final_predicted_positive": last["predicted_positive"],
            "final_logit_gap_sd": last["logit_gap_sd"],
            "last_10_loss": sum(losses[-10:]) / max(len(losses[-10:]), 1),
            "dev_accuracy": rec["dev_accuracy"], "dev_f1": rec["dev_f1"]})
    return rows


def markdown(rows):
    lines = ["| variant | steps | max update/weight: adapters, LayerNorms, pooler, head | "
             "peak / final pooler saturated | final pooled spread | final predicted positive | "
             "final logit-gap sd | loss, last 10 steps | dev acc | dev F1 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratios = ", ".join(f"{r['max_update_ratio'][g]:.3g}" for g in GROUPS)
        lines.append(f"| {r['variant']} | {r['steps']} | {ratios} | "
                     f"{100 * r['peak_pooler_saturated']:.0f}% / "
                     f"{100 * r['final_pooler_saturated']:.0f}% | {r['final_pooled_spread']:.3f} | "
                     f"{100 * r['final_predicted_positive']:.0f}% | {r['final_logit_gap_sd']:.2f} | "
                     f"{r['last_10_loss']:.3f} | {r['dev_accuracy']:.2f} | {r['dev_f1']:.2f} |")
    return "\n".join(lines) + "\n"


def write_tables(results_dir):
    """Writes the summary .json/.md next to results_dir from the variant files present."""
    records = []
    for name in sorted(os.listdir(results_dir)):
        if name.endswith(".json"):
            with open(os.path.join(results_dir, name), encoding="utf-8") as f:
                records.append(json.load(f))
    rows = summary_rows(records)
    write_results(results_dir, rows, markdown(rows))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--steps", type=int, default=115, help="updates run (1 MRPC epoch)")
    parser.add_argument("--epochs", type=float, default=3.0,
                        help="the run whose schedule (warmup, decay) the steps follow")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--probe_every", type=int, default=5)
    parser.add_argument("--data_dir", default=DATA)
    parser.add_argument("--work_dir", default="/tmp/adapter_bert_dynamics")
    parser.add_argument("--results_dir", default=RESULTS)
    parser.add_argument("--in_process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = listed_choices(parser, "variants", args.variants, sorted(VARIANTS))
    os.makedirs(args.results_dir, exist_ok=True)
    os.makedirs(args.work_dir, exist_ok=True)
    suffix = "" if args.seed == 42 else f"_seed{args.seed}"
    if args.in_process:
        (name,) = names
        record = run_variant(name, args)
        write_json(os.path.join(args.results_dir, f"{name}{suffix}.json"), record, indent=1)
        return
    for name in names:
        path = os.path.join(args.results_dir, f"{name}{suffix}.json")
        if os.path.exists(path):
            print(f"skip {name}: {path} exists", flush=True)
            continue
        command = [sys.executable, "-m", "bench.studies.optimizer_dynamics", "--in_process",
                   f"--variants={name}", f"--steps={args.steps}", f"--epochs={args.epochs}",
                   f"--seed={args.seed}", f"--probe_every={args.probe_every}",
                   f"--data_dir={args.data_dir}", f"--work_dir={args.work_dir}",
                   f"--results_dir={args.results_dir}"]
        print("+", " ".join(command), flush=True)
        subprocess.run(command, check=True, cwd=REPO)
        print(markdown(write_tables(args.results_dir)), flush=True)


if __name__ == "__main__":
    main()
