"""The TPU path without a TPU: both runners' train and predict steps under XLA with the
static shapes a TPU needs, on CPU.

`TaskRun(..., static_shapes=True)` forces the TPU input path (full training batches,
every batch `max_seq_length` wide, eval/predict sets padded with fake examples to a
multiple of the batch, several steps per execution from --iterations_per_loop) and
`--jit_compile=true` compiles the Keras train and predict steps with XLA, which refuses
any op it cannot compile. The run must match the plain (non-XLA, unpadded) CPU run, and
the step graphs must hold nothing that needs the host: no Python callbacks, no string
ops, no tensor whose shape depends on the data.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.robustness.helpers import classifier_flags, squad_flags, write_mrpc_dir
from tests.conftest import BERT_VOCAB
from tests.runner_utils import write_tiny_backbone

# Ops that call back into Python or print on the host, whatever their dtype.
HOST_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc", "PrintV2", "Print"}
# Ops whose output shape depends on the data (XLA on TPU needs static shapes).
DYNAMIC_SHAPE_OPS = {"Where", "Unique", "UniqueV2", "UniqueWithCounts", "DenseToSparseSetOperation",
                     "RaggedTensorToTensor", "RaggedGather", "BooleanMask", "NonMaxSuppressionV5"}
# Shape arithmetic: BroadcastGradientArgs returns the axes a gradient is summed over, a
# vector whose length TensorFlow's shape inference leaves open but which follows from the
# (static) input shapes alone; XLA folds it to a constant when it compiles the step.
SHAPE_ONLY_OPS = {"BroadcastGradientArgs"}
TOLERANCE = 2e-4
# After the SQuAD runs' training steps. Adam with epsilon 1e-8 (the adapter default) turns
# rounding-level gradient differences between the XLA and plain kernels into steps of the
# full learning rate, and the default's early steps are up to 2x the rate, so the trained
# span logits drift further apart (measured 9.2e-4; 6.5e-4 with plain bias correction)
# than the classifier's; a compile bug (a wrong mask or shape) moves them by whole units.
SQUAD_TOLERANCE = 2e-3


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    """The tiny random BERT without dropout: XLA draws dropout masks from the same
    generators but not the same numbers, so with dropout the runs differ by more than
    rounding."""
    return write_tiny_backbone(tmp_path_factory.mktemp("xla") / "bert",
                               BERT_VOCAB, dropout=0.0)


def parse(module_name: str, argv):
    """The configuration of the runner `adapter_bert.<module_name>` (run_classifier or
    run_squad) parsed from `argv`."""
    from adapter_bert.command_line import run_config
    return run_config.parse(module_name.removeprefix("run_"), argv)


# ------------------------------------------------------------------------ graph checks

def _graphs(concrete):
    """The step's graph and every function graph nested in it (loops, conds, ...)."""
    seen, pending, graphs = set(), [concrete.graph], []
    while pending:
        graph = pending.pop()
        graphs.append(graph)
        for name, function in getattr(graph, "_functions", {}).items():
            if name not in seen and hasattr(function, "graph"):
                seen.add(name)
                pending.append(function.graph)
    return graphs


def host_dependencies(concrete):
    """Problems that would keep the step from running on a TPU without the host."""
    problems = []
    library = concrete.graph.as_graph_def().library
    for function in library.function:
        for node in function.node_def:
            if node.op in HOST_OPS or "String" in node.op or node.op in DYNAMIC_SHAPE_OPS:
                problems.append(f"{function.signature.name}: {node.op}")
    for graph in _graphs(concrete):
        for op in graph.get_operations():
            if op.type in HOST_OPS or op.type in DYNAMIC_SHAPE_OPS:
                problems.append(f"{op.name}: {op.type}")
            for tensor in op.outputs:
                if tensor.dtype == tf.string:
                    problems.append(f"{op.name}: string output")
                elif tensor.dtype != tf.resource and op.type not in SHAPE_ONLY_OPS \
                        and not tensor.shape.is_fully_defined():
                    problems.append(f"{op.name}: shape {tensor.shape}")
    return problems


def check_step_compiles(step, batch):
    """`step` (train_step or predict_step) traced on `batch`: XLA compiles it to HLO and
    its graph needs nothing from the host."""
    function = tf.function(step, jit_compile=True)
    concrete = function.get_concrete_function(batch)
    assert host_dependencies(concrete) == []
    hlo = function.experimental_get_compiler_ir(batch)(stage="hlo")
    assert "ENTRY" in hlo


def test_the_graph_check_finds_host_callbacks_string_ops_and_data_dependent_shapes():
    spec = tf.TensorSpec([4], tf.float32)

    def problems_of(function):
        return host_dependencies(tf.function(function).get_concrete_function(spec))

    assert problems_of(lambda x: tf.nn.relu(x) * 2.0) == []
    assert any("EagerPyFunc" in p for p in problems_of(
        lambda x: tf.py_function(lambda v: v, [x], tf.float32)))
    assert any("PyFunc" in p for p in problems_of(
        lambda x: tf.numpy_function(lambda v: v, [x], tf.float32)))
    assert any("string" in p for p in problems_of(lambda x: tf.strings.as_string(x)))
    assert any("Where" in p for p in problems_of(lambda x: tf.where(x > 0)))
    assert any("shape (None,)" in p for p in problems_of(lambda x: tf.boolean_mask(x, x > 0)))


def first_batch(dataset):
    return next(iter(dataset.take(1)))


# --------------------------------------------------------------------------- classifier

@pytest.fixture(scope="module")
def mrpc(tmp_path_factory, mrpc_dir):
    """96 train, 40 dev, 8 test examples: dev and test are not multiples of the batch."""
    source = mrpc_dir

    def read(name, count):
        return (source / name).read_text(encoding="utf-8-sig").splitlines()[:count]
    return write_mrpc_dir(tmp_path_factory.mktemp("xla_mrpc"),
                          (read("train.tsv", 97), read("dev.tsv", 41), read("test.tsv", 9)))


def run_classifier_steps(backbone, data, out: Path, xla: bool):
    """Train (6 steps), eval and predict; returns (run, eval results, test probabilities)."""
    from adapter_bert.runners.classifier import ClassifierRun
    values = parse("run_classifier", [
        "--do_train", "--do_eval", "--do_predict", "--padding=max_seq_length",
        f"--jit_compile={'true' if xla else 'false'}",
        *classifier_flags(backbone, out, data, eval_batch_size=16, predict_batch_size=16,
                          iterations_per_loop=2)])
    run = ClassifierRun(values, static_shapes=xla or None)
    try:
        step = int(run.train()["global_step"])
        results = run.evaluate(step)
        run.predict()
    finally:
        run.close()
    probabilities = np.loadtxt(out / "test_results.tsv", delimiter="\t")
    return run, results, probabilities


@pytest.mark.slow
def test_classifier_compiles_with_xla_on_static_shapes_and_matches_the_plain_run(
        backbone, mrpc, tmp_path):
    plain, plain_results, plain_probabilities = run_classifier_steps(
        backbone, mrpc, tmp_path / "plain", xla=False)
    run, results, probabilities = run_classifier_steps(backbone, mrpc, tmp_path / "xla", xla=True)
    assert run.static_shapes and not run.pipeline.dynamic and run.pipeline.jit_compile
    assert run.model._jit_compile and not plain.model._jit_compile
    # Two training steps per execution, as --iterations_per_loop asks on a TPU.
    assert run.model._steps_per_execution.numpy() == 2
    assert results["global_step"] == plain_results["global_step"] == 6
    differences = {key: abs(results[key] - plain_results[key])
                   for key in ("eval_loss", "eval_accuracy", "eval_f1")}
    print("classifier, XLA + static shapes vs plain, |difference|:", differences,
          "max |probability difference|:", np.abs(probabilities - plain_probabilities).max())
    assert max(differences.values()) <= TOLERANCE, differences
    assert probabilities.shape == plain_probabilities.shape == (8, 2)
    np.testing.assert_allclose(probabilities, plain_probabilities, atol=TOLERANCE)
    for a, b in zip(run.model.trainable_weights, plain.model.trainable_weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=TOLERANCE, err_msg=a.name)

    # The steps themselves: fixed shapes [16, 32], no host op, XLA compiles them.
    features, _ = run.features("dev")
    batch = first_batch(run.pipeline.training_data(features, ["input_ids", "input_mask",
                                                               "segment_ids"], ["label_ids"],
                                                   16, 1, 0)())
    assert batch[0]["input_ids"].shape == (16, 32)
    check_step_compiles(run.model.train_step, batch)
    check_step_compiles(run.model.predict_step, (batch[0],))


# -------------------------------------------------------------------------------- squad

@pytest.fixture(scope="module")
def squad_file(tmp_path_factory, squad_dir):
    """Two SQuAD v1.1 dev paragraphs, used to train and to predict; the last question is
    left out so that the predict windows (7 a question) do not fill the last batch of 8."""
    data = json.loads((squad_dir / "dev-v1.1.json").read_text(encoding="utf-8"))
    article = data["data"][0]
    article["paragraphs"][1]["qas"].pop()
    path = tmp_path_factory.mktemp("xla_squad") / "squad.json"
    path.write_text(json.dumps({"version": "1.1", "data": [
        dict(article, paragraphs=article["paragraphs"][:2])]}))
    return path


def run_squad_steps(backbone, squad_file, out: Path, xla: bool):
    from adapter_bert.runners.squad import SquadRun
    values = parse("run_squad", [
        "--do_train", "--do_predict", "--padding=max_seq_length",
        f"--train_file={squad_file}", f"--predict_file={squad_file}",
        f"--jit_compile={'true' if xla else 'false'}",
        *squad_flags(backbone, out, predict_batch_size=8, iterations_per_loop=2,
                     num_train_epochs=0.25)])
    run = SquadRun(values, static_shapes=xla or None)
    try:
        run.train()
        features = run._features(run.predict_examples, False)
        logits = run.span_logits(features)
        figures = run.predict()
    finally:
        run.close()
    return run, logits, figures, json.loads((out / "predictions.json").read_text())


@pytest.mark.slow
def test_squad_compiles_with_xla_on_static_shapes_and_matches_the_plain_run(
        backbone, squad_file, tmp_path):
    plain, plain_logits, plain_figures, plain_predictions = run_squad_steps(
        backbone, squad_file, tmp_path / "plain", xla=False)
    run, logits, figures, predictions = run_squad_steps(backbone, squad_file, tmp_path / "xla",
                                                        xla=True)
    assert run.static_shapes and run.pipeline.jit_compile and run.model._jit_compile
    windows = len(logits["start_logits"])
    assert windows % 8, "the predict set should not fill its last batch"
    print("squad, XLA + static shapes vs plain: max |logit difference|",
          max(np.abs(logits[k] - plain_logits[k]).max() for k in logits),
          "exact/f1", figures["exact_match"], plain_figures["exact_match"], figures["f1"],
          plain_figures["f1"])
    for key in ("start_logits", "end_logits"):
        assert logits[key].shape == plain_logits[key].shape == (windows, 64)
        np.testing.assert_allclose(logits[key], plain_logits[key], atol=SQUAD_TOLERANCE,
                                   err_msg=key)
    for key in ("exact_match", "f1"):
        assert abs(figures[key] - plain_figures[key]) <= 100 * TOLERANCE, key
    assert predictions.keys() == plain_predictions.keys()
    for a, b in zip(run.model.trainable_weights, plain.model.trainable_weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=SQUAD_TOLERANCE, err_msg=a.name)

    from adapter_bert.model.inputs import FEATURE_NAMES
    from adapter_bert.runners.squad import LABEL_KEYS, _labels_by_output_name, \
        feature_arrays
    arrays = feature_arrays(run._features(run.train_examples, True), with_labels=True)
    batch = first_batch(run.pipeline.training_data(arrays, FEATURE_NAMES, LABEL_KEYS, 8, 1, 0)()
                        .map(_labels_by_output_name))
    assert batch[0]["input_ids"].shape == (8, 64)
    check_step_compiles(run.model.train_step, batch)
    check_step_compiles(run.model.predict_step, (batch[0],))
