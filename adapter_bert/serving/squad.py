"""SQuAD: export the span model, and answer questions with it as run_squad.py does.

`export_span_model` (what `run_squad.py --export_dir` writes) saves the network with one
signature over Google-named features: `input_ids`, `input_mask`, `segment_ids` int32
[B, T] -> `start_logits`, `end_logits` float32 [B, T]. The run's vocabulary travels in
the SavedModel's assets and its windowing settings in `export_info.json`.

Windowing (a long context becomes overlapping windows) and the choice of the answer
span across windows are Python, as in run_squad.py; `SquadAnswerer` does both with the
package's own code (`data.squad.convert_examples_to_features`,
`data.squad_postprocess.write_predictions`), so its answers are run_squad.py's:

    answerer = SquadAnswerer("export/squad")
    answerer.answer("Who wrote Hamlet?", "Hamlet is a tragedy by William Shakespeare.")
"""

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from adapter_bert.model.inputs import FEATURE_NAMES
from adapter_bert.model.fast_layers import portable_kernels
from adapter_bert.serving.export import INFO_FILE, write_saved_model
from adapter_bert.errors import UserError
from adapter_bert import io_utils

VOCAB_ASSET = "vocab.txt"


class _SpanModule(tf.Module):
    def __init__(self, model, vocab_file: str):
        super().__init__(name="span_export")
        self.model_variables = list(model.variables)
        self.vocab = tf.saved_model.Asset(vocab_file)  # copied to assets/vocab.txt
        self._call = lambda features: model(features, training=False)


def export_span_model(model, export_dir: str, vocab_file: str, do_lower_case: bool,
                      max_seq_length: int, doc_stride: int, max_query_length: int,
                      version_2_with_negative: bool = False, n_best_size: int = 20,
                      max_answer_length: int = 30,
                      null_score_diff_threshold: float = 0.0) -> str:
    """Writes a SavedModel of a trained SQuAD span model (`BertSpanModel`,
    `ResAdapterSpanModel`) with its run's tokenisation, windowing and answer selection (the
    defaults of `SquadAnswerer`); returns its absolute path.
    """
    module = _SpanModule(model, vocab_file)
    specs = [tf.TensorSpec([None, None], tf.int32, name) for name in FEATURE_NAMES]

    def serve(input_ids, input_mask, segment_ids):
        outputs = module._call({"input_ids": input_ids, "input_mask": input_mask,  # noqa: SLF001
                                "segment_ids": segment_ids})
        return {"start_logits": outputs["start_logits"], "end_logits": outputs["end_logits"]}

    with portable_kernels():
        signature = tf.function(serve, input_signature=specs,
                                autograph=False).get_concrete_function()
    info = {"kind": "span", "do_lower_case": bool(do_lower_case),
            "max_seq_length": int(max_seq_length), "doc_stride": int(doc_stride),
            "max_query_length": int(max_query_length),
            "version_2_with_negative": bool(version_2_with_negative),
            "n_best_size": int(n_best_size), "max_answer_length": int(max_answer_length),
            "null_score_diff_threshold": float(null_score_diff_threshold),
            "inputs": list(FEATURE_NAMES), "outputs": ["start_logits", "end_logits"]}
    return write_saved_model(export_dir, module, {"serving_default": signature}, info)


def export_squad_run(run, export_dir: str) -> str:
    """Exports the model of a run_squad.py run (`runners.squad.SquadRun`)."""
    values = run.flags
    return export_span_model(run.model, export_dir, run.backbone.files.vocab_file,
                             values.do_lower_case, values.max_seq_length, values.doc_stride,
                             values.max_query_length, bool(values.version_2_with_negative),
                             values.n_best_size, values.max_answer_length,
                             values.null_score_diff_threshold)


class SquadAnswerer:
    """Answers questions about contexts with an exported span model, as run_squad.py does;
    the run's settings come from the export (`predict`'s keywords override the answer
    selection).
    """

    def __init__(self, export_dir: str, batch_size: int = 64):
        from adapter_bert.data.tokenization import load_tokenizer
        self.info = io_utils.read_json_object(io_utils.join(export_dir, INFO_FILE))
        if self.info.get("kind") != "span":
            raise UserError(f"{export_dir} is a {self.info.get('kind')!r} export, not a SQuAD "
                            f"span model")
        self.tokenizer = load_tokenizer(io_utils.join(export_dir, "assets", VOCAB_ASSET),
                                        self.info["do_lower_case"])
        self._serve = tf.saved_model.load(export_dir).signatures["serving_default"]
        self.batch_size = int(batch_size)

    def _logits(self, arrays: Dict[str, np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
        starts, ends = [], []
        for begin in range(0, len(arrays["input_ids"]), self.batch_size):
            outputs = self._serve(**{k: tf.constant(arrays[k][begin:begin + self.batch_size])
                                     for k in FEATURE_NAMES})
            starts.append(outputs["start_logits"].numpy())
            ends.append(outputs["end_logits"].numpy())
        return np.concatenate(starts), np.concatenate(ends)

    def predict(self, examples: Sequence, **selection) -> Tuple[Dict[str, str],
                                                                 Optional[Dict[str, float]]]:
        """Answers `SquadExample`s; `selection` overrides `n_best_size`,
        `max_answer_length`, `version_2_with_negative` or `null_score_diff_threshold`.
        Returns (id -> answer, id -> null odds or None), as predictions.json and
        null_odds.json.
        """
        from adapter_bert.data.squad import convert_examples_to_features
        from adapter_bert.data.squad_postprocess import RawResult, write_predictions
        settings = {k: self.info[k] for k in ("n_best_size", "max_answer_length",
                                              "version_2_with_negative",
                                              "null_score_diff_threshold")}
        unknown = set(selection) - set(settings)
        if unknown:
            raise TypeError(f"unknown settings {sorted(unknown)}; expected {sorted(settings)}")
        settings.update(selection)
        features = convert_examples_to_features(
            examples, self.tokenizer, self.info["max_seq_length"], self.info["doc_stride"],
            self.info["max_query_length"], is_training=False)
        if not len(features):
            return {e.qas_id: "" for e in examples}, None
        arrays = {k: np.stack([getattr(f, k) for f in features]).astype(np.int32)
                  for k in FEATURE_NAMES}
        start, end = self._logits(arrays)
        results = [RawResult(f.unique_id, start[i], end[i]) for i, f in enumerate(features)]
        # The selection writes run_squad.py's files; here they go to a scratch folder.
        with io_utils.scratch_dir("adapter_bert_squad_") as scratch:
            return write_predictions(examples, features, results, settings["n_best_size"],
                                     settings["max_answer_length"],
                                     settings["version_2_with_negative"],
                                     settings["null_score_diff_threshold"], scratch)

    def answer(self, question: str, context: str) -> str:
        """The answer text to one question about one context ("" for no answer)."""
        return self.answer_all([(question, context)])[0]

    def answer_all(self, pairs: Sequence[Tuple[str, str]]) -> List[str]:
        """Answer texts to (question, context) pairs, in order."""
        from adapter_bert.data.squad import SquadExample
        examples = [SquadExample(str(i), q, c) for i, (q, c) in enumerate(pairs)]
        predictions, _ = self.predict(examples)
        return [predictions[e.qas_id] for e in examples]
