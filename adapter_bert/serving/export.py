"""Export a trained classifier as a SavedModel that takes raw strings.

The SavedModel holds the network and the run's tokenisation (`tokenizer.BertInputEncoder`);
serving needs TensorFlow and `import tensorflow_text`, not this package. Signatures:
`serving_default` (`text_a`, optional `text_b` [B] strings -> `probabilities` and `label`,
or `score` for regression), `tokenize` (-> the runner's three int32 features) and
`from_features`. Rows run in groups of `ROWS_PER_GROUP` of similar length, each padded to
its own longest row; outputs come back in the request's order.
"""

import json
from typing import Callable, Dict, Optional, Sequence

import tensorflow as tf

from adapter_bert.model.inputs import FEATURE_NAMES
from adapter_bert.io_utils import as_write_error
from adapter_bert.model.fast_layers import portable_kernels
from adapter_bert.serving.tokenizer import BertInputEncoder
from adapter_bert.errors import UserError
from adapter_bert import io_utils
from adapter_bert.io_utils import folders

INFO_FILE = "export_info.json"
# Rows per network call inside a serving signature. A batch padded to its longest row
# wastes the padding of all its shorter rows; groups of 8 rows of similar length waste
# almost none and still give the matmuls hundreds of rows.
ROWS_PER_GROUP = 8


class ExportError(UserError):
    """The model or its settings cannot be exported as asked."""


def trim_to_longest(features: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """Cuts the padding columns that no row of the batch uses (keeps at least one)."""
    width = tf.reduce_max(tf.concat([[1], tf.reduce_sum(features["input_mask"], 1)], 0))
    return {key: value[:, :width] for key, value in features.items()}


def in_length_groups(call: Callable[..., tf.Tensor], features: Dict[str, tf.Tensor],
                     *row_values: tf.Tensor, dtype=tf.float32) -> tf.Tensor:
    """`call(features, *row_values)` run on groups of `ROWS_PER_GROUP` rows sorted by
    `input_mask` length, each trimmed to its longest row (`trim_to_longest`), with the same
    rows of `row_values`; the outputs (`dtype`) come back in the order of `features`, row
    by row what `call` returns on the whole batch.
    """
    lengths = tf.reduce_sum(features["input_mask"], 1)
    order = tf.argsort(lengths, stable=True)
    rows = tf.size(order)
    # One group at least: an empty batch goes through `call` as it is.
    groups = tf.maximum(1, (rows + ROWS_PER_GROUP - 1) // ROWS_PER_GROUP)

    group_shapes = []   # the static shape of `call`'s output, seen when the body is traced

    def body(i, results):
        take = order[i * ROWS_PER_GROUP:(i + 1) * ROWS_PER_GROUP]
        part = {key: tf.gather(value, take) for key, value in features.items()}
        values = [tf.gather(value, take) for value in row_values]
        output = call(trim_to_longest(part), *values)
        group_shapes.append(output.shape)
        return i + 1, results.write(i, output)

    results = tf.TensorArray(dtype, size=groups, infer_shape=False)
    # One group at a time: each group's matmuls already use every intra-op thread.
    _, results = tf.while_loop(lambda i, _: i < groups, body, [tf.constant(0), results],
                               parallel_iterations=1)
    outputs = tf.gather(results.concat(), tf.argsort(order))
    # Keeps the signature's output shapes as specific as a call on the whole batch makes them.
    outputs.set_shape(tf.TensorShape([None]).concatenate(group_shapes[0][1:]))
    return outputs


def _feature_specs():
    return [tf.TensorSpec([None, None], tf.int32, name) for name in FEATURE_NAMES]


def _text_specs(pair: bool):
    specs = [tf.TensorSpec([None], tf.string, "text_a")]
    return specs + [tf.TensorSpec([None], tf.string, "text_b")] if pair else specs


class _ClassifierModule(tf.Module):
    """What the SavedModel tracks: the encoder, the model's variables, the labels."""

    def __init__(self, model, encoder: BertInputEncoder, labels: Sequence[str]):
        super().__init__(name="classifier_export")
        self.encoder = encoder
        # The variables, not the Keras model (kept out of tracking in a closure): the
        # SavedModel then holds the serving functions only and needs no Keras classes.
        self.model_variables = list(model.variables)
        self._call = lambda features: model(features, training=False)
        self.regression = not labels
        self.labels = tf.constant(list(labels) or [""], tf.string)

    def outputs(self, features: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        logits = in_length_groups(self._call, features)
        if self.regression:
            return {"score": logits[:, 0]}
        return {"probabilities": tf.nn.softmax(logits, -1),
                "label": tf.gather(self.labels, tf.argmax(logits, -1, output_type=tf.int32))}


def _signatures(module: _ClassifierModule, pair: bool) -> Dict[str, Callable]:
    def encode(text_a, text_b=None):
        return module.encoder.encode(text_a, text_b)

    if pair:
        serve = tf.function(lambda text_a, text_b: module.outputs(encode(text_a, text_b)),
                            input_signature=_text_specs(True), autograph=False)
        tokenize = tf.function(encode, input_signature=_text_specs(True), autograph=False)
    else:
        serve = tf.function(lambda text_a: module.outputs(encode(text_a)),
                            input_signature=_text_specs(False), autograph=False)
        tokenize = tf.function(lambda text_a: encode(text_a), input_signature=_text_specs(False), autograph=False)
    from_features = tf.function(
        lambda input_ids, input_mask, segment_ids: module.outputs(
            {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}),
        input_signature=_feature_specs(), autograph=False)
    return {"serving_default": serve.get_concrete_function(),
            "tokenize": tokenize.get_concrete_function(),
            "from_features": from_features.get_concrete_function()}


def check_export_dir(export_dir: str) -> None:
    """Refuses (ForeignFileError, a UserError naming the file) an `export_dir` an export
    may not replace: only a missing folder, or one holding nothing but what an export of
    this package wrote (its manifest, `io_utils.folders`), may be replaced.
    """
    folders.check_ours(export_dir, "--export_dir")


def write_saved_model(export_dir: str, module: tf.Module, signatures: Dict[str, Callable],
                      info: dict) -> str:
    """Saves `module` with `signatures` and `export_info.json` to `export_dir` whole
    (`io_utils.folders.replace`: built beside it and swapped in when complete, so an
    interrupted export leaves the earlier one as it was). Raises ForeignFileError for a
    file no export wrote there, and WriteError (naming `export_dir` and the reason; what
    was staged is removed). Returns `export_dir` (absolute where local).
    """
    def build(staging: str) -> None:
        tf.saved_model.save(module, staging, signatures=signatures)
        io_utils.atomic_write_text(io_utils.join(staging, INFO_FILE),
                                   json.dumps(info, indent=2) + "\n")

    try:
        return folders.replace(export_dir, build, "--export_dir")
    except (tf.errors.OpError, OSError) as e:
        raise as_write_error(export_dir, e) from e


def export_classifier(model, export_dir: str, vocab_file: str, do_lower_case: bool,
                      max_seq_length: int, labels: Optional[Sequence[str]],
                      pair: bool, task: Optional[str] = None) -> str:
    """Writes a string-in SavedModel of a trained sentence (pair) classifier.

    `model` maps Google-named int32 features to float32 logits (`BertClassifier`,
    `ResAdapterClassifier`); `vocab_file` (or its {token: id}), `do_lower_case`,
    `max_seq_length` are the run's tokenisation; `labels` in logit order (None or empty: regression); `pair` adds `text_b`;
    `task` is recorded. Returns the SavedModel's absolute path; raises ExportError for
    labels that do not match the outputs and VocabularyError for an unusable vocabulary.
    """
    labels = list(labels or [])
    num_outputs = int(model(_dummy_features(), training=False).shape[-1])
    if labels and num_outputs != len(labels):
        raise ExportError(f"the model has {num_outputs} outputs but {len(labels)} labels "
                          f"{labels}")
    if not labels and num_outputs != 1:
        raise ExportError(f"a regression export needs one output; the model has {num_outputs}")
    encoder = BertInputEncoder(vocab_file, do_lower_case, max_seq_length)
    module = _ClassifierModule(model, encoder, labels)
    with portable_kernels():
        signatures = _signatures(module, pair)
    info = {"kind": "classifier", "task": task, "labels": labels or None,
            "regression": not labels, "pair": bool(pair), "max_seq_length": max_seq_length,
            "do_lower_case": bool(do_lower_case),
            "inputs": [s.name for s in _text_specs(pair)],
            "outputs": ["score"] if not labels else ["probabilities", "label"]}
    return write_saved_model(export_dir, module, signatures, info)


def _dummy_features():
    return {name: tf.ones([1, 2], tf.int32) if name != "segment_ids" else tf.zeros([1, 2], tf.int32)
            for name in FEATURE_NAMES}


def require_serving_extra(what: str = "--export_dir") -> None:
    """Raises ExportError, naming the fix, when tensorflow-text (which `what` needs) is not
    installed."""
    try:
        import tensorflow_text  # noqa: F401
    except ImportError:
        from adapter_bert.install_check import add_on_install
        raise ExportError(f"{what} needs tensorflow-text: run  "
                          f"{add_on_install('tensorflow-text')}") from None


def export_classifier_run(run, export_dir: str) -> str:
    """Exports the model of a run_classifier.py run (`runners.classifier.ClassifierRun`).

    Returns:
        The absolute path of the SavedModel.
    """
    pair = run.processor.pair
    return export_classifier(run.model, export_dir, run.backbone.files.vocab_file,
                             run.flags.do_lower_case, run.flags.max_seq_length,
                             None if run.is_regression else run.labels, pair, task=run.task)
