"""ResAdapters: cell wiring of every variant, freezing, gradients, BatchNorm masking and
replicas, adapter files, flag checks, and run_classifier / run_squad end to end."""

import json
import os
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

import adapter_bert as ab
from adapter_bert.adapters.files import read_adapter_config
from adapter_bert.model.config import BertConfig, ConfigError
from adapter_bert.model.naming import tf1_variables
from adapter_bert.adapters.resadapter import (CELLS, VARIANTS, ResAdapterCell, ResAdapterClassifier,
                                     ResAdapterConfig, ResAdapterNetwork, ResAdapterSpanModel,
                                     resnext_groups)
from adapter_bert.training.loop import TrainingCheckpoints
from adapter_bert.adapters.tuning import apply_tuning, parameter_summary, trained_weights
from tests.conftest import REPO, tiny_inputs
from tests.runner_utils import python_output, read_results, run_in_process, run_subprocess

H, M = 16, 8  # tiny hidden size and bottleneck


def config(layers=2):
    return BertConfig(vocab_size=60, hidden_size=H, num_hidden_layers=layers,
                      num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)


def tuned(model):
    model(tiny_inputs(), training=False)
    apply_tuning(model, "adapter")
    return model


def layer_outputs(layers, seed=0, batch=2, seq=5):
    rng = np.random.default_rng(seed)
    return [tf.constant(rng.normal(size=(batch, seq, H)), tf.float32) for _ in range(layers)]


# --- structure ---------------------------------------------------------------------------

@pytest.mark.parametrize("layers, groups", [
    (2, [[0], [1]]),
    (4, [[0], [1], [2], [3]]),
    (6, [[0, 1], [2, 3], [4, 5]]),
    (12, [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]),
    (10, [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]),
    (1, [[0]]),
])
def test_resnext_groups(layers, groups):
    assert resnext_groups(layers) == groups


@pytest.mark.parametrize("layers", range(1, 30))
def test_resnext_groups_partition_the_layers_evenly(layers):
    groups = resnext_groups(layers, max_groups=4)
    assert [k for g in groups for k in g] == list(range(layers))
    assert 1 <= len(groups) <= 4
    assert max(map(len, groups)) - min(map(len, groups)) <= 1
    with pytest.raises(ValueError):
        resnext_groups(0)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("cell", CELLS)
def test_output_shapes(variant, cell):
    cfg = ResAdapterConfig(size=M, variant=variant, cell=cell)
    inputs = tiny_inputs(batch=3, seq=7)
    logits = ResAdapterClassifier(config(4), 5, cfg)(inputs, training=True)
    assert logits.shape == (3, 5) and logits.dtype == tf.float32
    spans = ResAdapterSpanModel(config(4), cfg)(inputs, training=False)
    assert sorted(spans) == ["end_logits", "start_logits"]
    assert spans["start_logits"].shape == spans["end_logits"].shape == (3, 7)
    network = ResAdapterNetwork(config(4), cfg)
    assert network(layer_outputs(4), tf.ones([2, 5])).shape == (2, 5, H)


def _reference(variant, cells, h):
    """The variants' wiring written out by hand (inference mode, mask of ones)."""
    mask = tf.ones(h[0].shape[:2])
    c = [lambda x, k=k: cells[k](x, mask, training=False) for k in range(len(cells))]
    if variant == "pipeline":  # 4 layers
        return c[3](h[3] + c[2](h[2] + c[1](h[1] + c[0](h[0]))))
    if variant == "resnet":  # 4 layers: stages (0, 1, 2) and (3)
        stage0 = c[2](h[2] + c[1](h[1] + c[0](h[0]))) + h[0]
        x3 = h[3] + stage0
        return c[3](x3) + x3
    # resnext, 6 layers: groups (0, 1), (2, 3), (4, 5) plus the first layer's state
    return h[0] + c[1](h[1] + c[0](h[0])) + c[3](h[3] + c[2](h[2])) + c[5](h[5] + c[4](h[4]))


@pytest.mark.parametrize("variant, layers", [("pipeline", 4), ("resnet", 4), ("resnext", 6)])
def test_variants_wire_the_cells_as_documented(variant, layers):
    network = ResAdapterNetwork(config(layers), ResAdapterConfig(size=M, variant=variant))
    h = layer_outputs(layers)
    got = network(h, tf.ones([2, 5]), training=False)
    np.testing.assert_allclose(got, _reference(variant, network.cells, h), atol=1e-5)


def test_every_cell_is_used_and_named_after_its_layer():
    for variant in VARIANTS:
        model = tuned(ResAdapterClassifier(config(4), 2, ResAdapterConfig(size=M, variant=variant)))
        cells = {n.split("/")[1] for n in tf1_variables(model) if n.startswith("resadapter/")}
        assert cells == {"cell_0", "cell_1", "cell_2", "cell_3"}


def test_config_validation_and_round_trip():
    cfg = ResAdapterConfig(size=12, variant="resnext", cell="attention", num_heads=3)
    assert ResAdapterConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="variant"):
        ResAdapterConfig(variant="densenet")
    with pytest.raises(ConfigError, match="multiple"):
        ResAdapterConfig(size=10, cell="attention", num_heads=4)
    with pytest.raises(ConfigError, match="unknown"):
        ResAdapterConfig.from_dict({"size": 4, "depth": 2})
    with pytest.raises(ConfigError, match="pooling"):
        ResAdapterConfig(pooling="max")
    # Files written before pooling existed read as [CLS] pooling.
    old = {k: v for k, v in ResAdapterConfig().to_dict().items() if k != "pooling"}
    assert ResAdapterConfig.from_dict(old).pooling == "cls"


def test_mean_pooling_averages_real_tokens_only():
    model = tuned(ResAdapterClassifier(config(), 3, ResAdapterConfig(size=M, pooling="mean")))
    inputs = tiny_inputs(batch=2, seq=7, pad_last=2)
    side = model.side_output(inputs, training=False).numpy()
    expected_pooled = np.stack([side[0, :5].mean(axis=0), side[1].mean(axis=0)])
    expected = model.head(tf.constant(expected_pooled), training=False).numpy()
    np.testing.assert_allclose(model(inputs, training=False).numpy(), expected, atol=1e-6)
    # More padding changes nothing: the side network and the mean both mask it.
    padded = {k: np.pad(v, [(0, 0), (0, 3)]) for k, v in inputs.items()}
    np.testing.assert_allclose(model(padded, training=False).numpy(), expected, atol=1e-5)
    cls_model = tuned(ResAdapterClassifier(config(), 3, ResAdapterConfig(size=M)))
    cls_model.set_weights(model.get_weights())
    assert not np.allclose(cls_model(inputs, training=False).numpy(), expected, atol=1e-3)


@pytest.mark.parametrize("cell", CELLS)
def test_get_config_rebuilds_the_same_layers(cell):
    cfg = ResAdapterConfig(size=M, variant="resnet", cell=cell)
    layer = ResAdapterCell(H, M, cell=cell, name="cell_0")
    assert ResAdapterCell.from_config(layer.get_config()).get_config() == layer.get_config()
    network = ResAdapterNetwork(config(), cfg)
    assert ResAdapterNetwork.from_config(network.get_config()).get_config() == \
        network.get_config()
    for model in (ResAdapterClassifier(config(), 3, cfg), ResAdapterSpanModel(config(), cfg)):
        model(tiny_inputs(), training=False)
        clone = type(model).from_config(model.get_config())
        clone(tiny_inputs(), training=False)
        assert sorted(tf1_variables(clone)) == sorted(tf1_variables(model))


# --- what trains ---------------------------------------------------------------------------

@pytest.mark.parametrize("cell", CELLS)
def test_bert_is_frozen_and_exactly_cells_and_head_train(cell):
    model = tuned(ResAdapterClassifier(config(2), 3, ResAdapterConfig(size=M, cell=cell)))
    trainable = {id(v) for v in model.trainable_weights}
    names = tf1_variables(model)
    trained = {n for n, v in names.items() if id(v) in trainable}
    per_cell = ["down/kernel", "batch_norm/gamma", "batch_norm/beta", "up/kernel", "up/bias",
                "LayerNorm/gamma", "LayerNorm/beta"]
    if cell == "attention":
        per_cell += [f"attention/{p}/kernel" for p in ("query", "key", "value", "attention_output")]
    expected = {f"resadapter/cell_{k}/{p}" for k in range(2) for p in per_cell}
    assert trained == expected | {"output_weights", "output_bias"}
    assert not any(n.startswith("bert/") for n in trained)  # LayerNorms and pooler too
    # Moving statistics: not trainable, but saved with what training changes.
    stats = {n for n in names if "moving_" in n}
    assert len(stats) == 4 and not stats & trained
    assert {id(names[n]) for n in stats} <= {id(v) for v in trained_weights(model)}


def test_parameter_counts_follow_the_formula():
    model = tuned(ResAdapterClassifier(config(2), 3, ResAdapterConfig(size=M)))
    summary = parameter_summary(model)
    # down (no bias) + BatchNorm gamma/beta + up + LayerNorm; moving statistics are not counted.
    per_cell = H * M + 2 * M + M * H + H + 2 * H
    assert summary["adapters"] == (2 * per_cell, 2 * per_cell)
    assert summary["head"] == (3 * H + 3, 3 * H + 3)
    assert summary["layer_norms"] == (0, 5 * 2 * H)  # embedding + 2 per layer, all frozen
    assert summary["pooler"][0] == summary["embeddings"][0] == summary["transformer"][0] == 0


def test_other_tuning_modes_are_refused():
    model = tuned(ResAdapterSpanModel(config(2), ResAdapterConfig(size=M)))
    for mode in ("full", "layernorm"):
        with pytest.raises(ValueError, match="frozen"):
            apply_tuning(model, mode)
    with pytest.raises(ValueError, match="train_pooler"):
        apply_tuning(model, "adapter", train_pooler=True)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("cell", CELLS)
def test_one_step_gives_every_trainable_variable_a_gradient(variant, cell):
    model = tuned(ResAdapterClassifier(config(4), 2, ResAdapterConfig(size=M, variant=variant,
                                                                      cell=cell)))
    inputs, labels = tiny_inputs(batch=4, seq=9), tf.constant([0, 1, 1, 0])
    frozen_before = [v.numpy() for v in model.bert.weights]
    with tf.GradientTape() as tape:
        logits = model(inputs, training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    grads = tape.gradient(loss, model.trainable_weights)
    for variable, grad in zip(model.trainable_weights, grads):
        assert grad is not None and float(tf.norm(grad)) > 0, variable.name
    keras.optimizers.SGD(0.1).apply_gradients(zip(grads, model.trainable_weights))
    for before, variable in zip(frozen_before, model.bert.weights):
        np.testing.assert_array_equal(before, variable.numpy())


# --- BatchNorm: padding mask, train vs inference, replicas -----------------------------------

def test_batch_norm_ignores_padding_and_moving_stats_follow_real_tokens():
    mask = np.ones((2, 6), "float32")
    mask[0, 3:] = 0
    h = layer_outputs(1, batch=2, seq=6)[0].numpy()
    junk = h.copy()
    junk[0, 3:] = 1e3  # wild values where the mask is 0
    cell = ResAdapterCell(H, M, dropout_rate=0.0, name="cell_0")
    cell(tf.constant(h), tf.constant(mask), training=False)  # builds; statistics unchanged
    initial = cell.get_weights()
    outputs = []
    for values in (h, junk):
        cell.set_weights(initial)  # moving mean back to zero
        outputs.append(cell(tf.constant(values), tf.constant(mask), training=True).numpy())
        real = cell.down(tf.constant(values)).numpy()[mask.astype(bool)]
        # momentum 0.9 from zero: moving mean = 0.1 * mean over the real tokens only
        np.testing.assert_allclose(cell.batch_norm.moving_mean.numpy(), 0.1 * real.mean(0),
                                   rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(outputs[0][mask.astype(bool)], outputs[1][mask.astype(bool)],
                               atol=1e-5)


def test_inference_uses_moving_statistics():
    cell = ResAdapterCell(H, M, dropout_rate=0.0, name="cell_0")
    x, mask = layer_outputs(1, batch=4, seq=5)[0], tf.ones([4, 5])
    before = cell(x, mask, training=False).numpy()
    np.testing.assert_allclose(cell(x, mask, training=False), before)  # no update
    trained = cell(x, mask, training=True).numpy()
    after = cell(x, mask, training=False).numpy()
    assert not np.allclose(before, after)   # the moving statistics moved
    assert not np.allclose(trained, after)  # batch statistics differ from moving ones


def test_mirrored_replicas_share_global_batch_statistics():
    """Two CPU replicas, padding on one only: statistics equal one device's on the whole batch."""
    script = textwrap.dedent("""
        import numpy as np, tensorflow as tf
        from adapter_bert.training.distribute import split_cpu
        split_cpu(2)
        from adapter_bert.adapters.resadapter import ResAdapterCell
        rng = np.random.default_rng(0)
        x = rng.normal(size=(4, 6, 16)).astype("float32")
        mask = np.ones((4, 6), "float32"); mask[:2, 2:] = 0   # padding in replica 0's half
        single = ResAdapterCell(16, 8, dropout_rate=0.0, name="cell_0")
        single(x, mask, training=True)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            mirrored = ResAdapterCell(16, 8, dropout_rate=0.0, name="cell_0")
            mirrored(x, mask, training=False)
        mirrored.down.kernel.assign(single.down.kernel)
        data = strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((x, mask)).batch(4))
        @tf.function
        def step(batch):
            return strategy.run(lambda b, m: mirrored(b, m, training=True), args=batch)
        step(next(iter(data)))
        for name in ("moving_mean", "moving_variance"):
            a = getattr(single.batch_norm, name).numpy()
            b = getattr(mirrored.batch_norm, name).read_value().numpy()
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
        print("OK", strategy.num_replicas_in_sync)
    """)
    assert "OK 2" in python_output(script, env=dict(os.environ, PYTHONPATH=str(REPO),
                                                    TF_CPP_MIN_LOG_LEVEL="2"))


# --- files and checkpoints -----------------------------------------------------------------

def test_adapter_file_round_trip_includes_moving_statistics(tmp_path):
    cfg = ResAdapterConfig(size=M, variant="resnext", cell="attention")
    model = tuned(ResAdapterSpanModel(config(4), cfg))
    model(tiny_inputs(batch=4), training=True)  # moves the BatchNorm statistics
    with pytest.raises(ValueError, match="ResAdapterSpanModel has no named adapters"):
        ab.save_adapter(model, str(tmp_path / "named"), name="squad")
    assert not (tmp_path / "named").exists()
    ab.save_adapter(model, str(tmp_path), task="squad_v2.0")  # the model's method
    description = read_adapter_config(str(tmp_path))
    assert description["resadapter"] == cfg.to_dict() and description["adapter_config"] is None
    assert description["head"] == "SpanHead"
    assert "resadapter/cell_2/batch_norm/moving_variance" in description["weights"]
    assert not any(n.startswith("bert/") for n in description["weights"])
    fresh = tuned(ResAdapterSpanModel(config(4), ResAdapterConfig.from_dict(
        description["resadapter"])))
    fresh.bert.set_weights(model.bert.get_weights())  # the same pretrained backbone
    assert fresh.load_adapter(str(tmp_path))["task"] == "squad_v2.0"
    inputs = tiny_inputs(batch=3)
    for key, value in model(inputs, training=False).items():
        np.testing.assert_allclose(fresh(inputs, training=False)[key], value, atol=1e-6)


def test_training_checkpoints_hold_the_moving_statistics(tmp_path):
    model = tuned(ResAdapterClassifier(config(2), 2, ResAdapterConfig(size=M)))
    model(tiny_inputs(batch=4), training=True)
    TrainingCheckpoints(model, None, str(tmp_path)).save(1)
    fresh = tuned(ResAdapterClassifier(config(2), 2, ResAdapterConfig(size=M)))
    restore = TrainingCheckpoints(fresh, None, str(tmp_path))
    assert restore.restore_latest()
    np.testing.assert_allclose(fresh.resadapter.cells[1].batch_norm.moving_mean,
                               model.resadapter.cells[1].batch_norm.moving_mean)


# --- runners -----------------------------------------------------------------------------------

def runner_flags(backbone, output_dir, **overrides):
    values = {"init_checkpoint": backbone / "bert_model.ckpt", "output_dir": output_dir,
              "max_seq_length": 32, "train_batch_size": 16, "eval_batch_size": 64,
              "predict_batch_size": 64, "learning_rate": 1e-3, "adapter_size": M,
              "save_checkpoints_steps": 1000}
    values.update(overrides)  # None drops a flag
    return [f"--{k}={v}" for k, v in values.items() if v is not None]


def mrpc(mrpc_dir, backbone, output_dir, *extra, **overrides):
    return run_in_process("run_classifier", [
        "--task_name=MRPC", f"--data_dir={mrpc_dir}", *extra,
        *runner_flags(backbone, output_dir, **overrides)])[0]


@pytest.fixture(scope="module")
def mrpc_run(backbone, mrpc_dir, tmp_path_factory):
    """ResNeXt ResAdapter on written MRPC: 4 training steps, then eval."""
    out = tmp_path_factory.mktemp("mrpc_resadapter")
    code = mrpc(mrpc_dir, backbone, out, "--do_train", "--do_eval", "--num_train_epochs=0.02",
                "--adapter_type=resadapter", "--resadapter_variant=resnext")
    assert code == 0
    return out


def test_run_classifier_trains_only_the_side_network(mrpc_run):
    results = read_results(mrpc_run / "eval_results.txt")
    assert results["global_step"] == str(int(3668 / 16 * 0.02))
    per_cell = H * M + 2 * M + M * H + H + 2 * H
    assert results["trainable_params"] == str(2 * per_cell + 2 * H + 2)
    assert 0.0 <= float(results["eval_accuracy"]) <= 1.0
    description = json.loads((mrpc_run / "adapter" / "adapter_config.json").read_text())
    assert description["resadapter"]["variant"] == "resnext"
    assert description["resadapter"]["size"] == M


def test_load_adapter_reproduces_the_classifier_metrics(mrpc_run, backbone, mrpc_dir, tmp_path):
    # No architecture flags: the adapter directory says it is a ResNeXt ResAdapter.
    code = mrpc(mrpc_dir, backbone, tmp_path / "eval", "--do_eval",
                f"--load_adapter={mrpc_run / 'adapter'}")
    assert code == 0
    original = read_results(mrpc_run / "eval_results.txt")
    again = read_results(tmp_path / "eval" / "eval_results.txt")
    for key in ("eval_accuracy", "eval_f1", "eval_loss", "trainable_params"):
        assert float(again[key]) == pytest.approx(float(original[key]), abs=1e-6), key


@pytest.mark.parametrize("extra, message", [
    (["--tuning_mode=full"], "needs --tuning_mode=adapter"),
    (["--train_pooler=true"], "--train_pooler=true does not apply"),
    (["--adapter_leave_out=0"], "--adapter_leave_out"),
    (["--resadapter_cell=attention", "--adapter_activation=relu"], "--adapter_activation"),
])
def test_meaningless_combinations_are_flag_errors(extra, message, backbone, mrpc_dir, tmp_path,
                                                  capsys):
    code = mrpc(mrpc_dir, backbone, tmp_path / "out", "--do_eval",
                "--adapter_type=resadapter", *extra)
    assert code == 1
    assert message in capsys.readouterr().err


def test_resadapter_flags_need_the_resadapter_type(backbone, mrpc_dir, tmp_path, capsys):
    code = mrpc(mrpc_dir, backbone, tmp_path / "out", "--do_eval",
                "--resadapter_variant=resnet")
    assert code == 1
    assert "only apply with --adapter_type=resadapter" in capsys.readouterr().err
    code = mrpc(mrpc_dir, backbone, tmp_path / "out", "--do_eval", "--resadapter_pooling=mean")
    assert code == 1
    assert "--resadapter_pooling" in capsys.readouterr().err


def test_pooling_is_refused_for_the_span_head(backbone, squad_dir, tmp_path, capsys):
    squad = squad_dir / "dev-v2.0.json"
    code, _ = run_in_process("run_squad", [
        "--do_predict", "--version_2_with_negative", f"--predict_file={squad}",
        *runner_flags(backbone, tmp_path / "out", max_seq_length=64, doc_stride=16,
                      max_query_length=16, eval_batch_size=None),
        "--adapter_type=resadapter", "--resadapter_pooling=mean"])
    assert code == 1
    assert "--resadapter_pooling chooses a classification head's input" in capsys.readouterr().err


@pytest.mark.slow
def test_run_squad_smoke_and_load_adapter(backbone, squad_dir, tmp_path):
    """v2.0 slice, attention cells in a ResNet: trains, scores, and the file reproduces it."""
    data = json.loads((squad_dir / "dev-v2.0.json").read_text(encoding="utf-8"))
    sliced = {"version": "v2.0", "data": [dict(data["data"][0],
                                               paragraphs=data["data"][0]["paragraphs"][:2])]}
    squad_file = tmp_path / "slice.json"
    squad_file.write_text(json.dumps(sliced), encoding="utf-8")
    squad_flags = dict(max_seq_length=64, doc_stride=16, max_query_length=16,
                       eval_batch_size=None)  # run_squad.py has no eval_batch_size
    flags = runner_flags(backbone, tmp_path / "train", **squad_flags)
    common = ["--version_2_with_negative", f"--predict_file={squad_file}"]
    result = run_subprocess("run_squad.py", [
        "--do_train", "--do_predict", f"--train_file={squad_file}", *common, *flags,
        "--adapter_type=resadapter", "--resadapter_variant=resnet",
        "--resadapter_cell=attention"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "trainable params:" in result.stdout
    trained = json.loads((tmp_path / "train" / "eval_results.json").read_text())
    assert {"exact", "f1", "HasAns_f1", "NoAns_f1"} <= set(trained)
    flags = runner_flags(backbone, tmp_path / "again", **squad_flags)
    result = run_subprocess("run_squad.py", [
        "--do_predict", *common, *flags, f"--load_adapter={tmp_path / 'train' / 'adapter'}"])
    assert result.returncode == 0, result.stderr[-3000:]
    again = json.loads((tmp_path / "again" / "eval_results.json").read_text())
    for key in ("exact", "f1", "best_f1", "trainable_params"):
        assert again[key] == pytest.approx(trained[key], abs=1e-6), key
    predictions = [json.loads((tmp_path / d / "predictions.json").read_text())
                   for d in ("train", "again")]
    assert predictions[0] == predictions[1]
