"""Adapter span ablation: semantics on a tiny model, output files, and the entry point."""

import csv
import dataclasses
import json

import numpy as np
import pytest

from tests.conftest import BERT_VOCAB, tiny_inputs

NUM_LAYERS = 3


@pytest.fixture
def config3(tiny_config):
    return dataclasses.replace(tiny_config, num_hidden_layers=NUM_LAYERS)


def _classifier(config, adapter_config):
    """The runners' model: built with its adapter (a named adapter, active)."""
    import adapter_bert as ab
    from adapter_bert.model.checkpoints import build_model
    model = ab.BertClassifier(config, 2, adapter_config)
    build_model(model)
    return model


def _copy_weights(source, target):
    """Assigns every weight of `target` from the same-named weight of `source`."""
    from adapter_bert.model.naming import tf1_variables
    src = tf1_variables(source)
    for name, variable in tf1_variables(target).items():
        variable.assign(src[name])


@pytest.fixture
def trained_like(config3):
    """A 3-layer classifier whose adapters are far from the identity (init_scale 0.5)."""
    import tensorflow as tf

    from adapter_bert.model.config import AdapterConfig
    import tf_keras as keras
    keras.utils.set_random_seed(3)  # Python, NumPy and TF: the same weights in every run
    adapters = AdapterConfig(size=4, init_scale=0.5)
    model = _classifier(config3, adapters)
    # Pooler and head at scale 1 so that changes in the encoder show in the logits.
    for variable in (model.bert.pooler.dense.kernel, model.head.output_weights):
        variable.assign(tf.random.normal(variable.shape, seed=4))
    return model, adapters


def _evaluator(model, inputs):
    """Metrics = every logit of the batch, computed with Keras' (cached) predict."""
    def evaluate():
        logits = model.predict(inputs, verbose=0)
        return {f"logit_{i}": float(v) for i, v in enumerate(logits.ravel())}
    return evaluate


def _logits(values):
    return np.array([values[f"logit_{i}"] for i in range(len(values))])


def test_layer_spans_are_all_contiguous_spans():
    from adapter_bert.runners.ablation import layer_spans
    assert layer_spans(1) == [(0, 0)]
    spans = layer_spans(6)
    assert len(spans) == 21 == len(set(spans))
    assert all(0 <= i <= j < 6 for i, j in spans)
    with pytest.raises(ValueError):
        layer_spans(0)


@pytest.mark.slow
def test_every_cell_equals_a_model_built_without_those_layers_adapters(trained_like, config3):
    from adapter_bert.runners.ablation import run_ablation
    model, adapters = trained_like
    inputs = tiny_inputs()
    result = run_ablation(model, _evaluator(model, inputs))
    assert sorted(result.cells) == [(i, j) for i in range(3) for j in range(i, 3)]
    baseline = _logits(result.baseline)
    for (first, last), values in result.cells.items():
        reference = _classifier(config3, dataclasses.replace(
            adapters, leave_out=list(range(first, last + 1))))
        _copy_weights(model, reference)
        expected = reference(inputs, training=False).numpy().ravel()
        np.testing.assert_allclose(_logits(values), expected, atol=1e-6,
                                   err_msg=f"span {first}..{last}")
        # The adapters are far from the identity: removing any of them changes the output.
        assert np.abs(_logits(values) - baseline).max() > 1e-3, (first, last)


def test_all_removed_cell_equals_the_model_without_adapters(trained_like, config3):
    from adapter_bert.runners.ablation import run_ablation
    model, _ = trained_like
    inputs = tiny_inputs(seed=5)
    result = run_ablation(model, _evaluator(model, inputs), spans=[(0, NUM_LAYERS - 1)])
    plain = _classifier(config3, None)
    _copy_weights(model, plain)
    np.testing.assert_allclose(_logits(result.cells[(0, NUM_LAYERS - 1)]),
                               plain(inputs, training=False).numpy().ravel(), atol=1e-6)


@pytest.mark.slow
def test_switches_and_predictions_are_restored(trained_like):
    from adapter_bert.runners.ablation import adapter_blocks_by_layer, adapters_disabled, run_ablation
    model, _ = trained_like
    inputs = tiny_inputs()
    evaluate = _evaluator(model, inputs)
    before = _logits(evaluate())
    run_ablation(model, evaluate)
    assert all(b.adapter_enabled for blocks in adapter_blocks_by_layer(model) for b in blocks)
    np.testing.assert_array_equal(_logits(evaluate()), before)
    with pytest.raises(RuntimeError):
        with adapters_disabled(model, [1]):
            assert not any(b.adapter_enabled for b in adapter_blocks_by_layer(model)[1])
            raise RuntimeError("boom")
    assert all(b.adapter_enabled for blocks in adapter_blocks_by_layer(model) for b in blocks)
    np.testing.assert_array_equal(_logits(evaluate()), before)


def test_bad_spans_and_models_without_adapters_are_refused(trained_like, config3):
    from adapter_bert.runners.ablation import adapters_disabled, run_ablation
    model, _ = trained_like
    with pytest.raises(ValueError, match="layers \\[3\\]"):
        with adapters_disabled(model, [3]):
            pass
    with pytest.raises(ValueError, match="span"):
        run_ablation(model, lambda: {"x": 0.0}, spans=[(2, 1)])
    with pytest.raises(ValueError, match="no adapters"):
        run_ablation(_classifier(config3, None), lambda: {"x": 0.0})


def _fabricated_result():
    from adapter_bert.runners.ablation import AblationResult, layer_spans
    cells = {(i, j): {"eval_accuracy": 0.8 - 0.05 * (j - i + 1) - 0.01 * i, "eval_loss": 0.5}
             for i, j in layer_spans(4)}
    return AblationResult(4, {"eval_accuracy": 0.8, "eval_loss": 0.4, "task": "mrpc"}, cells)


def test_matrix_is_upper_triangular_with_the_cell_values():
    result = _fabricated_result()
    matrix = result.matrix("eval_accuracy")
    assert matrix.shape == (4, 4)
    assert np.isnan(matrix[np.tril_indices(4, -1)]).all()
    assert matrix[0, 3] == pytest.approx(0.6)
    assert matrix[2, 2] == pytest.approx(0.73)
    assert result.delta("eval_accuracy")[0, 0] == pytest.approx(-0.05)
    assert result.metric_names() == ["eval_accuracy", "eval_loss"]


def test_outputs_csv_json_png_are_written(tmp_path):
    from adapter_bert.runners.ablation import AblationResult, write_outputs
    result = _fabricated_result()
    paths = write_outputs(result, str(tmp_path / "out"), "eval_accuracy")
    with open(paths["matrix"], newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][1:] == ["0", "1", "2", "3"]
    assert len(rows) == 5
    assert rows[3][1:3] == ["", ""]  # below the diagonal of row 2
    assert float(rows[1][4]) == pytest.approx(0.6)
    with open(paths["cells"], newline="") as f:
        cells = list(csv.DictReader(f))
    assert len(cells) == 1 + 10 and cells[0]["layers_ablated"] == "0"
    with open(paths["json"]) as f:
        stored = json.load(f)
    assert stored["metric"] == "eval_accuracy"
    again = AblationResult.from_json(stored)
    np.testing.assert_array_equal(again.matrix("eval_accuracy"), result.matrix("eval_accuracy"))
    with open(paths["heatmap"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(KeyError, match="eval_f1"):
        write_outputs(result, str(tmp_path / "bad"), "eval_f1")


# ---------------------------------------------------------------- entry point
@pytest.fixture(scope="module")
def tiny_mrpc_adapter(tmp_path_factory, mrpc_dir):
    """A tiny backbone and an adapter trained on a few MRPC batches by run_classifier.py."""
    from tests.runner_utils import run_in_process, write_tiny_backbone
    backbone = write_tiny_backbone(tmp_path_factory.mktemp("tiny_bert"),
                                   BERT_VOCAB)
    out = tmp_path_factory.mktemp("mrpc_run")
    code, _ = run_in_process("run_classifier", [
        "--task_name=MRPC", "--do_train", "--do_eval",
        f"--data_dir={mrpc_dir}", "--num_train_epochs=0.02",
        f"--init_checkpoint={backbone / 'bert_model.ckpt'}", f"--output_dir={out}",
        "--max_seq_length=32", "--train_batch_size=16", "--eval_batch_size=128",
        "--learning_rate=1e-2", "--adapter_size=8", "--adapter_init_scale=0.1"])
    assert code == 0
    return backbone, out


def _run_ablation_cli(argv):
    from absl import flags

    from adapter_bert import ablate_adapters  # defines the flags
    values = flags.FLAGS
    values.unparse_flags()
    values(["ablate_adapters.py", *argv])
    return ablate_adapters.main()


@pytest.mark.slow
def test_entry_point_ablates_a_trained_run(tiny_mrpc_adapter, mrpc_dir, tmp_path, capsys):
    from tests.runner_utils import read_results
    backbone, run_dir = tiny_mrpc_adapter
    out = tmp_path / "ablation"
    code = _run_ablation_cli([
        "--task_name=MRPC", f"--data_dir={mrpc_dir}",
        f"--init_checkpoint={backbone / 'bert_model.ckpt'}", f"--load_adapter={run_dir / 'adapter'}",
        f"--output_dir={out}", "--max_seq_length=32", "--eval_batch_size=128",
        "--ablation_metric=eval_loss"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "layers 0..1 removed: eval_loss" in printed
    with open(out / "ablation.json") as f:
        stored = json.load(f)
    assert stored["metric"] == "eval_loss" and stored["num_layers"] == 2
    assert [(c["first"], c["last"]) for c in stored["cells"]] == [(0, 0), (0, 1), (1, 1)]
    # The unablated evaluation reproduces the training run's own dev evaluation.
    trained = read_results(run_dir / "eval_results.txt")
    assert stored["baseline"]["eval_loss"] == pytest.approx(float(trained["eval_loss"]), abs=1e-6)
    # Removing trained adapters changes the dev loss.
    assert all(c["eval_loss"] != stored["baseline"]["eval_loss"] for c in stored["cells"])
    for name in ("ablation_matrix.csv", "ablation_results.csv", "ablation_heatmap.png"):
        assert (out / name).is_file()


def test_entry_point_refuses_training_and_missing_weights(tiny_mrpc_adapter, mrpc_dir,
                                                         tmp_path, capsys):
    backbone, _ = tiny_mrpc_adapter
    common = ["--task_name=MRPC", f"--data_dir={mrpc_dir}",
              f"--init_checkpoint={backbone / 'bert_model.ckpt'}", "--max_seq_length=32"]
    assert _run_ablation_cli([*common, "--do_train", f"--output_dir={tmp_path / 'a'}"]) == 1
    assert "drop --do_train" in capsys.readouterr().err
    assert _run_ablation_cli([*common, f"--output_dir={tmp_path / 'b'}"]) == 1
    assert "no trained weights" in capsys.readouterr().err


def test_an_unknown_ablation_metric_is_refused_before_anything_loads(tiny_mrpc_adapter,
                                                                     mrpc_dir, tmp_path,
                                                                     capsys, monkeypatch):
    from adapter_bert.runners import base
    backbone, run_dir = tiny_mrpc_adapter
    monkeypatch.setattr(base, "prepare_backbone", lambda *a, **k: pytest.fail("loaded"))
    code = _run_ablation_cli(["--task_name=MRPC", f"--data_dir={mrpc_dir}",
                              f"--init_checkpoint={backbone / 'bert_model.ckpt'}",
                              "--max_seq_length=32", f"--output_dir={tmp_path / 'a'}",
                              f"--load_adapter={run_dir / 'adapter'}",
                              "--ablation_metric=eval_bleu"])
    assert code == 1
    assert ("--ablation_metric=eval_bleu: the evaluation reports eval_loss, eval_accuracy, "
            "eval_f1") in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
