"""One SavedModel, one frozen backbone, many adapters: each row says which task it is.

`export_multi_adapter` loads adapter directories as named adapters on one
`MultiAdapterModel` and exports it with the in-graph tokenizer; the backbone is stored
once. `serving_default`: `task`, `text_a`, `text_b` [B] strings -> `probabilities` [B, W]
(zero past the task's label count; W the most labels of any task), `label` [B] and
`score` [B] (a regression task's prediction, else the label's probability). An unknown
`task` fails the request listing the tasks. `tokenize` and `from_features` are as in the
single-task export.
"""

from typing import Dict, List, Optional, Sequence

import tensorflow as tf

from adapter_bert.model.inputs import FEATURE_NAMES
from adapter_bert import io_utils
from adapter_bert.model.fast_layers import portable_kernels
from adapter_bert.serving.export import (ExportError, in_length_groups,
                                         write_saved_model)
from adapter_bert.serving.tokenizer import BertInputEncoder


class _MultiTaskModule(tf.Module):
    """Tracks the encoder, every variable of the multi-adapter model and the task tables."""

    def __init__(self, model, encoder: BertInputEncoder, tasks: List[str],
                 labels: Dict[str, Optional[List[str]]]):
        super().__init__(name="multi_adapter_export")
        self.encoder = encoder
        self.model_variables = list(model.variables)
        self._call = lambda features, names: model(features, training=False,
                                                   adapter_names=names)
        self.tasks = list(tasks)
        width = max(len(labels[t] or [""]) for t in tasks)
        table = [(labels[t] or []) + [""] * (width - len(labels[t] or [])) for t in tasks]
        self.label_table = tf.constant(table, tf.string)          # [T, W]
        self.regression = tf.constant([not labels[t] for t in tasks])
        self.task_names = tf.constant(tasks, tf.string)

    def task_index(self, task: tf.Tensor) -> tf.Tensor:
        """[B] task names -> [B] positions in `tasks`; an unknown name fails the call."""
        matches = tf.equal(task[:, tf.newaxis], self.task_names[tf.newaxis, :])
        known = tf.reduce_any(matches, 1)
        check = tf.debugging.Assert(
            tf.reduce_all(known),
            [f"unknown task: the task of each row must be one of {', '.join(self.tasks)}; got",
             tf.boolean_mask(task, tf.logical_not(known))], summarize=10)
        with tf.control_dependencies([check]):
            return tf.argmax(tf.cast(matches, tf.int32), 1, output_type=tf.int32)

    def outputs(self, task, features):
        index = self.task_index(task)
        logits = in_length_groups(self._call, features, tf.gather(self.task_names, index))
        regression = tf.gather(self.regression, index)
        probabilities = tf.nn.softmax(logits, -1)
        best = tf.argmax(logits, -1, output_type=tf.int32)
        label = tf.gather_nd(self.label_table, tf.stack([index, best], 1))
        zeros = tf.zeros_like(probabilities)
        return {"probabilities": tf.where(regression[:, tf.newaxis], zeros, probabilities),
                "label": tf.where(regression, tf.constant(""), label),
                "score": tf.where(regression, logits[:, 0], tf.reduce_max(probabilities, -1))}


def _signatures(module: _MultiTaskModule):
    text = [tf.TensorSpec([None], tf.string, name) for name in ("task", "text_a", "text_b")]
    features = [tf.TensorSpec([None], tf.string, "task")] + [
        tf.TensorSpec([None, None], tf.int32, name) for name in FEATURE_NAMES]

    def serve(task, text_a, text_b):
        return module.outputs(task, module.encoder.encode(text_a, text_b))

    def tokenize(text_a, text_b):
        return module.encoder.encode(text_a, text_b)

    def from_features(task, input_ids, input_mask, segment_ids):
        return module.outputs(task, {"input_ids": input_ids, "input_mask": input_mask,
                                     "segment_ids": segment_ids})

    return {"serving_default": tf.function(serve, input_signature=text,
                                           autograph=False).get_concrete_function(),
            "tokenize": tf.function(tokenize, input_signature=text[1:],
                                    autograph=False).get_concrete_function(),
            "from_features": tf.function(from_features, input_signature=features,
                                         autograph=False).get_concrete_function()}


def export_multi_adapter(adapter_dirs: Sequence[str], export_dir: str,
                         init_checkpoint: Optional[str] = None,
                         bert_config_file: Optional[str] = None,
                         vocab_file: Optional[str] = None, do_lower_case: bool = True,
                         max_seq_length: int = 128,
                         names: Optional[Sequence[str]] = None) -> str:
    """Exports one backbone with several classifier adapters as one string-in SavedModel.

    `adapter_dirs` were trained on the backbone (`init_checkpoint`, `bert_config_file`;
    None: the embedded MiniLM) in adapter mode; `names` default to the tasks the files
    record. Returns the SavedModel's absolute path; raises ExportError for no adapters, two
    of one name, a span head or no vocabulary, and AdapterFileError for an adapter that does
    not fit.
    """
    from adapter_bert.model.checkpoints import resolve_backbone
    from adapter_bert.adapters.multitask import MultiAdapterModel
    from adapter_bert.model.heads import ClassifierHead
    from adapter_bert.data.tokenization import validate_case_matches_checkpoint
    if not adapter_dirs:
        raise ExportError("no adapters to export (--adapters)")
    if names is not None and len(names) != len(adapter_dirs):
        raise ExportError(f"{len(names)} names for {len(adapter_dirs)} adapter directories")
    files = resolve_backbone(init_checkpoint, bert_config_file, vocab_file)
    if files.vocab_file is None:
        raise ExportError(f"no vocab.txt beside {files.weights}; pass --vocab_file")
    validate_case_matches_checkpoint(do_lower_case, files.weights)
    model = MultiAdapterModel.from_pretrained(init_checkpoint, config_file=bert_config_file)
    tasks = []
    for i, directory in enumerate(adapter_dirs):
        wanted = names[i] if names is not None else None
        try:
            name = model.load_adapter(directory, name=wanted)
        except ValueError as e:
            if "already exists" not in str(e):
                raise
            raise ExportError(f"{directory}: task {wanted or 'name'} is taken by an earlier "
                              f"adapter ({e}); give each one its own name") from None
        if not isinstance(model.heads[name], ClassifierHead):
            raise ExportError(f"{directory} has a {type(model.heads[name]).__name__}; only "
                              f"classifier tasks are served from strings")
        tasks.append(name)
    labels = {t: (model.labels[t] if model.heads[t].num_outputs > 1 else None) for t in tasks}
    for task in tasks:
        if labels[task] is None and model.heads[task].num_outputs > 1:
            labels[task] = [str(i) for i in range(model.heads[task].num_outputs)]
    encoder = BertInputEncoder(files.vocab_file, do_lower_case, max_seq_length)
    module = _MultiTaskModule(model, encoder, tasks, labels)
    with portable_kernels():
        signatures = _signatures(module)
    info = {"kind": "multi_adapter", "tasks": tasks, "labels": labels,
            "adapters": [io_utils.absolute(d) for d in adapter_dirs],
            "max_seq_length": max_seq_length, "do_lower_case": bool(do_lower_case),
            "inputs": ["task", "text_a", "text_b"],
            "outputs": ["probabilities", "label", "score"]}
    return write_saved_model(export_dir, module, signatures, info)
