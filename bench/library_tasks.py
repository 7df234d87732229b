"""How much memory does a second task take on one `TextClassifier` backbone?

Each case runs in its own Python process on the embedded MiniLM, predicting 256 texts
per task, and reports the process's resident memory after it (Linux' VmRSS) beside a
process that only imported the library (TensorFlow, tf-keras, tensorflow-text), and the bytes of
the distinct weights the task models hold:

- `one task`: one `TextClassifier.from_pretrained`;
- `two tasks, one backbone`: the second task loaded with `from_adapter(directory,
  backbone=model)`;
- `two models`: two `TextClassifier.from_pretrained`, as without sharing.

Writes bench/results/library_tasks.{json,md} with the CPU it ran on.

Usage:
    python -m bench.library_tasks
"""

import json
import os
import subprocess
import sys
import tempfile

from bench.harness import cpu_description, publish

CASES = ("imported only", "one task", "two tasks, one backbone", "two models")

_CASE = """
import gc, json, sys
import numpy as np
import adapter_bert as ab
import adapter_bert.library.text_classifier  # TensorFlow, tf-keras and tensorflow-text
case, adapter_dir = sys.argv[1], sys.argv[2]
texts = [f"the flight {i} was late and the crew said nothing" for i in range(256)]
models = []
if case != "imported only":
    models.append(ab.TextClassifier.from_pretrained(labels=["a", "b"], quiet=True))
if case == "two tasks, one backbone":
    models.append(ab.TextClassifier.from_adapter(adapter_dir, backbone=models[0]))
elif case == "two models":
    models.append(ab.TextClassifier.from_adapter(adapter_dir))
for model in models:
    model.predict(texts, verbose=0)
distinct = {id(v): v for model in models for v in model.weights}
gc.collect()
with open("/proc/self/status") as status:
    rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
print(json.dumps({"rss_mib": rss / 1024,
                  "weights_mib": sum(int(np.prod(v.shape)) * v.dtype.size
                                     for v in distinct.values()) / 2 ** 20}))
"""


def run_case(case: str, adapter_dir: str) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", _CASE, case, adapter_dir], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    import adapter_bert as ab
    with tempfile.TemporaryDirectory() as scratch:
        adapter_dir = os.path.join(scratch, "second")
        ab.TextClassifier.from_pretrained(labels=["x", "y", "z"], task="second",
                                          quiet=True).save_adapter(adapter_dir)
        measured = {case: run_case(case, adapter_dir) for case in CASES}
    base = measured["imported only"]["rss_mib"]
    rows = [{"case": case, "rss_mib": round(m["rss_mib"], 1),
             "over_import_mib": round(m["rss_mib"] - base, 1),
             "weights_mib": round(m["weights_mib"], 2)}
            for case, m in measured.items() if case != "imported only"]
    result = {"cpu": cpu_description(), "backbone": "embedded MiniLM (all-MiniLM-L6-v2)",
              "texts_per_task": 256, "imported_only_rss_mib": round(base, 1), "rows": rows}
    return publish("library_tasks", result, {
        "case": "case", "resident memory (MiB)": "rss_mib",
        "over the import (MiB)": "over_import_mib", "weights (MiB)": "weights_mib"},
        f"{result['cpu'].get('model', '')}, {result['backbone']}")


if __name__ == "__main__":
    main()
