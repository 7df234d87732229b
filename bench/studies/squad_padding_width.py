"""Does the padded width change SQuAD predictions? Dynamic padding vs Google's fixed width.

Google's run_squad.py pads every window to --max_seq_length and never masks the span
logits: padding positions get real logits, take part in the training softmax, and can
occupy some of the `n_best_size` best start/end positions that post-processing scans.
With --padding=dynamic (the CPU/GPU default here) a batch is as wide as its longest
window and the positions beyond it are filled with a logit far below any real one.

This script loads one trained model, computes the span logits of --predict_file both
ways (same weights, same windows), writes both sets of prediction files and reports:
questions whose predicted text differs, n-best lists that differ, the largest n-best
probability and (v2.0) null-odds difference, the scores, how many windows have a
padding position among Google's 20 best start/end logits, and the softmax mass Google's
span softmax gives to padding positions (what its training loss also pushes down).

Usage (run_squad.py flags; a trained --load_adapter or checkpoint in --output_dir):
    python -m bench.studies.squad_padding_width --predict_file=dev.json --load_adapter=RUN/adapter \
        --max_seq_length=256 --output_dir=/tmp/width [--version_2_with_negative]
Writes <output_dir>/{dynamic,max_seq_length}/ prediction files and
<output_dir>/padding_width.json.
"""

import json
import os
import sys

import numpy as np
from absl import app, flags

from adapter_bert.command_line import flags as adapter_flags

adapter_flags.define_squad_flags()
FLAGS = flags.FLAGS


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _padding_in_top(logits, lengths, n_best):
    """Windows with a padding position among their `n_best` largest logits."""
    top = np.argsort(-logits, axis=1, kind="stable")[:, :n_best]
    return int((top >= lengths[:, None]).any(axis=1).sum())


def _nbest_differences(a_dir, b_dir):
    with open(os.path.join(a_dir, "nbest_predictions.json")) as f:
        a = json.load(f)
    with open(os.path.join(b_dir, "nbest_predictions.json")) as f:
        b = json.load(f)
    lists, top_prob = 0, 0.0
    for qid, entries in a.items():
        texts_a = [e["text"] for e in entries]
        texts_b = [e["text"] for e in b[qid]]
        lists += texts_a != texts_b
        if texts_a[0] == texts_b[0]:
            top_prob = max(top_prob, abs(entries[0]["probability"] - b[qid][0]["probability"]))
    return lists, top_prob


def measure(values):
    """Predicts twice (dynamic, fixed width) with one model; returns the comparison."""
    from adapter_bert.data.squad_postprocess import RawResult, write_predictions
    from adapter_bert.runners import squad
    run = squad.SquadRun(values)
    run.restore_trained_weights()
    features = run._features(run.predict_examples, False)
    logits, dirs, predictions, odds, scores = {}, {}, {}, {}, {}
    for mode, dynamic in (("dynamic", True), ("max_seq_length", False)):
        run.pipeline.dynamic = dynamic
        logits[mode] = run.span_logits(features)
        dirs[mode] = os.path.join(values.output_dir, mode)
        results = [RawResult(f.unique_id, logits[mode]["start_logits"][i],
                             logits[mode]["end_logits"][i]) for i, f in enumerate(features)]
        predictions[mode], odds[mode] = write_predictions(
            run.predict_examples, features, results, values.n_best_size,
            values.max_answer_length, run.version_2, values.null_score_diff_threshold,
            dirs[mode])
        scores[mode] = squad.score_predictions(run.predict_examples.dataset, predictions[mode],
                                               odds[mode], run.version_2,
                                               values.null_score_diff_threshold)
    lengths = np.asarray([int(f.input_mask.sum()) for f in features])
    real = np.arange(values.max_seq_length)[None, :] < lengths[:, None]
    fixed = logits["max_seq_length"]
    report = {
        "predict_file": values.predict_file, "max_seq_length": values.max_seq_length,
        "questions": len(run.predict_examples), "windows": len(features),
        "mean_window_length": float(lengths.mean()),
        "predictions_differing": sum(predictions["dynamic"][q] != predictions["max_seq_length"][q]
                                     for q in predictions["dynamic"]),
        "scores": scores,
        "max_real_token_logit_difference": max(
            float(np.abs(logits["dynamic"][k] - fixed[k])[real].max()) for k in fixed),
    }
    report["nbest_lists_differing"], report["max_top_probability_difference"] = \
        _nbest_differences(dirs["dynamic"], dirs["max_seq_length"])
    for key in ("start_logits", "end_logits"):
        name = key.split("_")[0]
        report[f"windows_with_padding_in_google_top{values.n_best_size}_{name}"] = \
            _padding_in_top(fixed[key], lengths, values.n_best_size)
        mass = (_softmax(fixed[key]) * ~real).sum(1)
        report[f"google_softmax_mass_on_padding_{name}_mean"] = float(mass.mean())
        report[f"google_softmax_mass_on_padding_{name}_max"] = float(mass.max())
    if run.version_2:
        report["max_null_odds_difference"] = max(
            abs(odds["dynamic"][q] - odds["max_seq_length"][q]) for q in odds["dynamic"])
    return report


def main(argv):
    del argv
    from adapter_bert.command_line import run_config
    report = measure(run_config.from_flags("squad", FLAGS))
    path = os.path.join(FLAGS.output_dir, "padding_width.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(app.run(main))
