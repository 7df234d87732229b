"""Many named adapters on one frozen backbone: API, sharing, mixed batches, no forgetting."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from adapter_bert.adapters.files import load_trained_weights, save_trained_weights
from adapter_bert.model.config import AdapterConfig
from adapter_bert.model.heads import BertClassifierNetwork
from adapter_bert.model.encoder import BertNetwork
from adapter_bert.adapters.multitask import MultiAdapterModel
from adapter_bert.model.naming import tf1_variables
from adapter_bert.adapters.models import BertClassifier
from tests.conftest import WRITTEN_AND_REAL, tiny_inputs

M = 4


def count(variables):
    return sum(int(np.prod(v.shape)) for v in variables)


@pytest.fixture
def bert(tiny_config):
    model = BertNetwork(tiny_config)
    model.build_with_dummy_inputs()
    return model


@pytest.fixture
def multi(bert):
    """Three tasks of different families and head widths; weights moved off identity."""
    model = MultiAdapterModel(bert)
    model.add_adapter("a", AdapterConfig(size=M, init_scale=0.3), num_labels=2,
                      train_pooler=False)
    model.add_adapter("b", AdapterConfig(size=M, adapter_type="lora"), num_labels=3,
                      train_pooler=True)
    model.add_adapter("c", AdapterConfig(size=M, adapter_type="parallel"), num_labels=2,
                      train_pooler=False)
    rng = np.random.default_rng(0)
    for name in model.adapter_names:  # make every task's parameters distinct
        for key, variable in model.adapter_variables(name).items():
            if "LayerNorm" not in key and "pooler" not in key:
                variable.assign(rng.normal(scale=0.2, size=variable.shape).astype("float32"))
    return model


def task_closed_form(cfg, adapter_type, labels, pooler=False):
    """Weights one named adapter adds: adapters, all LayerNorms, head (and pooler)."""
    h, layers = cfg.hidden_size, cfg.num_hidden_layers
    adapters = {"houlsby": 2 * layers * (2 * h * M + M + h), "lora": layers * 4 * h * M,
                "parallel": layers * (2 * h * M + M + h)}[adapter_type]
    return adapters + (1 + 2 * layers) * 2 * h + labels * h + labels + (h * h + h if pooler else 0)


# ----------------------------------------------------------------------- API
def test_add_set_delete_and_active_adapter(bert, tiny_config):
    model = MultiAdapterModel(bert)
    assert model.adapter_names == [] and model.active_adapter is None
    # No active adapter: the backbone's own outputs.
    np.testing.assert_array_equal(model(tiny_inputs())["pooled_output"],
                                  bert(tiny_inputs())["pooled_output"])
    model.add_adapter("mrpc", AdapterConfig(size=M))
    model.add_adapter("sst-2", AdapterConfig(size=M, adapter_type="pfeiffer"), num_labels=2)
    assert model.active_adapter == "mrpc"  # the first one added
    model.set_active_adapters("sst-2")
    assert model(tiny_inputs()).shape == (2, 2)
    with pytest.raises(ValueError, match="already exists"):
        model.add_adapter("mrpc", AdapterConfig(size=M))
    with pytest.raises(KeyError, match="no adapter named 'qqp'"):
        model.set_active_adapters("qqp")
    model.delete_adapter("sst-2")
    assert model.adapter_names == ["mrpc"] and bert.named_adapters == ["mrpc"]
    assert model.active_adapter is None
    assert not any("/sst-2/" in n for n in tf1_variables(model))


@pytest.mark.parametrize("name, message", [
    ("a/b", "must start with a letter"), ("", "must start with a letter"),
    ("LayerNorm", "reserved"), ("bert", "reserved"),
])
def test_bad_adapter_names(bert, name, message):
    with pytest.raises(ValueError, match=message):
        MultiAdapterModel(bert).add_adapter(name, AdapterConfig(size=M))


def test_backbone_is_shared_never_copied(multi, bert, tiny_config):
    assert multi.bert is bert
    backbone_ids = {id(v) for v in bert.weights if "/a/" not in v.name}
    plain = BertNetwork(tiny_config)
    plain.build_with_dummy_inputs()
    added = count(multi.weights) - count(plain.weights)
    assert added == (task_closed_form(tiny_config, "houlsby", 2)
                     + task_closed_form(tiny_config, "lora", 3, pooler=True)
                     + task_closed_form(tiny_config, "parallel", 2))
    # Each backbone variable appears once: no task holds a copy of it.
    ids = [id(v) for v in multi.weights]
    assert len(ids) == len(set(ids)) and backbone_ids <= set(ids)
    names = tf1_variables(multi)
    assert names["bert/encoder/layer_0/attention/self/query/kernel"] is \
        bert.encoder.transformer_layers[0].attention.self_attention.query.kernel
    assert "bert/encoder/layer_1/output/a/LayerNorm/gamma" in names
    assert "bert/pooler/b/dense/kernel" in names and "bert/pooler/a/dense/kernel" not in names
    assert "b/output_weights" in names and names["b/output_weights"].shape == (3, 16)


def test_switching_tasks_swaps_adapters_layernorms_and_heads(multi):
    inputs = tiny_inputs()
    outputs = {}
    for name in multi.adapter_names:
        multi.set_active_adapters(name)
        outputs[name] = multi(inputs).numpy()
    assert outputs["b"].shape == (2, 3)
    assert not np.allclose(outputs["a"], outputs["c"])
    multi.adapter_variables("a")["bert/embeddings/LayerNorm/gamma"].assign(tf.fill([16], 3.0))
    multi.set_active_adapters("a")
    assert not np.allclose(multi(inputs).numpy(), outputs["a"])  # a's own LayerNorm is used
    multi.set_active_adapters("c")
    np.testing.assert_array_equal(multi(inputs).numpy(), outputs["c"])  # c's is untouched


# --------------------------------------------------------------- mixed batches
def test_mixed_batch_gives_each_row_its_own_task_output(multi):
    inputs = tiny_inputs(batch=6, seed=3)
    names = ["a", "b", "c", "b", "a", "a"]
    mixed = multi(inputs, adapter_names=names).numpy()
    assert mixed.shape == (6, 3)  # padded to the widest head
    for task in ("a", "b", "c"):
        rows = [i for i, n in enumerate(names) if n == task]
        multi.set_active_adapters(task)
        alone = multi({k: v[rows] for k, v in inputs.items()}).numpy()
        width = alone.shape[1]
        # Bit-identical to the task run alone on its rows...
        np.testing.assert_array_equal(mixed[rows, :width], alone)
        assert np.all(np.isneginf(mixed[rows, width:]))
        # ...and to the rows of a whole batch run with that task (up to float rounding).
        whole = multi(inputs).numpy()
        np.testing.assert_allclose(mixed[rows, :width], whole[rows], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_mixed_batch_in_a_graph_and_through_predict(multi):
    inputs = tiny_inputs(batch=4, seed=5)
    names = np.array([b"c", b"a", b"b", b"c"])
    eager = multi(inputs, adapter_names=names).numpy()
    graph = tf.function(lambda x, n: multi(x, adapter_names=n))(inputs, tf.constant(names))
    np.testing.assert_allclose(graph.numpy(), eager, atol=1e-6)
    predicted = multi.predict(dict(inputs, adapter_names=names), batch_size=2, verbose=0)
    np.testing.assert_allclose(predicted, eager, atol=1e-6)


@pytest.mark.slow
def test_mixed_batch_rejects_unknown_names(multi):
    with pytest.raises(ValueError) as excinfo:
        multi(tiny_inputs(), adapter_names=["a", "zzz"])
    assert str(excinfo.value) == ("adapter_names must name adapters of the model (a, b, c); "
                                  "unknown: zzz")
    traced = tf.function(lambda x, n: multi(x, adapter_names=n))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"must name adapters of the model \(a, b, c\); unknown:"):
        traced(tiny_inputs(), tf.constant(["a", "zzz"]))


def test_span_adapters_route_start_and_end_logits(bert):
    model = MultiAdapterModel(bert)
    model.add_adapter("squad1", AdapterConfig(size=M, init_scale=0.3), head="span")
    model.add_adapter("squad2", AdapterConfig(size=M, adapter_type="pfeiffer", init_scale=0.3),
                      head="span")
    inputs = tiny_inputs(batch=3)
    mixed = model(inputs, adapter_names=["squad2", "squad1", "squad2"])
    assert set(mixed) == {"start_logits", "end_logits"} and mixed["end_logits"].shape == (3, 7)
    model.set_active_adapters("squad1")
    alone = model({k: v[1:2] for k, v in inputs.items()})
    np.testing.assert_array_equal(mixed["start_logits"][1:2], alone["start_logits"])
    assert "squad1/cls/squad/output_weights" in tf1_variables(model)
    model.add_adapter("mrpc", AdapterConfig(size=M))
    with pytest.raises(ValueError, match="heads are of one kind"):
        model(inputs, adapter_names=["mrpc", "squad1", "squad2"])


def test_get_config_rebuilds_the_backbone_shape_and_the_tasks(multi):
    clone = MultiAdapterModel.from_config(multi.get_config())
    assert clone.bert.config == multi.bert.config
    # The same tasks (fresh weights: Keras loading restores them, tests/test_keras_saving.py).
    assert clone.adapter_names == multi.adapter_names
    assert clone.active_adapter == multi.active_adapter
    assert {n: h.num_outputs for n, h in clone.heads.items()} == \
        {n: h.num_outputs for n, h in multi.heads.items()}


# ---------------------------------------------------- two tasks, no forgetting
def _task_data(seed, num_labels, n=32):
    inputs = tiny_inputs(batch=n, seed=seed, pad_last=0)
    labels = (inputs["input_ids"][:, 1] % num_labels).astype("int32")
    return inputs, labels


def _train(model, name, inputs, labels, epochs=3, batch_size=8, learning_rate=1e-2):
    """Trains only adapter `name`; returns the loss of every epoch."""
    model.train_adapter(name)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(inputs, labels, batch_size=batch_size, epochs=epochs, shuffle=False,
                        verbose=0)
    return history.history["loss"]


@pytest.mark.slow
def test_two_tasks_trained_in_turn_do_not_forget(bert, tiny_config):
    tf.keras.utils.set_random_seed(0)
    model = MultiAdapterModel(bert)
    model.add_adapter("a", AdapterConfig(size=M), num_labels=2)
    model.add_adapter("b", AdapterConfig(size=M, adapter_type="pfeiffer"), num_labels=3)
    backbone = {n: v.numpy().copy() for n, v in tf1_variables(bert).items()
                if "/a/" not in n and "/b/" not in n}
    a_inputs, a_labels = _task_data(1, 2)
    b_inputs, b_labels = _task_data(2, 3)
    a_losses = _train(model, "a", a_inputs, a_labels)
    assert a_losses[-1] < a_losses[0]
    model.set_active_adapters("a")
    after_a = model.predict(a_inputs, verbose=0)
    b_before = {k: v.numpy().copy() for k, v in model.adapter_variables("b").items()}
    b_losses = _train(model, "b", b_inputs, b_labels)
    assert b_losses[-1] < b_losses[0]
    assert any(not np.array_equal(b_before[k], v.numpy())
               for k, v in model.adapter_variables("b").items())
    model.set_active_adapters("a")
    np.testing.assert_array_equal(model.predict(a_inputs, verbose=0), after_a)
    for name, value in backbone.items():  # the shared backbone never moved
        np.testing.assert_array_equal(tf1_variables(bert)[name].numpy(), value, err_msg=name)


# --------------------------------------------------------------------- files
def test_named_adapter_file_loads_into_a_single_adapter_model(multi, tiny_config, tmp_path):
    multi.save_adapter(str(tmp_path / "b"), "b", task="rte")
    single = BertClassifier(tiny_config, 3, AdapterConfig(size=M, adapter_type="lora"))
    single(tiny_inputs())
    for name, variable in tf1_variables(multi.bert).items():  # the same frozen backbone
        if name in tf1_variables(single):
            tf1_variables(single)[name].assign(variable)
    description = load_trained_weights(single, str(tmp_path / "b"))
    assert description["task"] == "rte"
    multi.set_active_adapters("b")
    np.testing.assert_array_equal(single(tiny_inputs(), training=False).numpy(),
                                  multi(tiny_inputs()).numpy())


def test_run_classifier_style_file_loads_as_a_named_adapter(bert, tiny_config, tmp_path):
    single = BertClassifier(tiny_config, 2, AdapterConfig(size=M, adapter_type="parallel"))
    single(tiny_inputs())
    for name, variable in tf1_variables(bert).items():  # the same frozen backbone
        tf1_variables(single)[name].assign(variable)
    from adapter_bert.adapters.tuning import apply_tuning
    apply_tuning(single, "adapter", train_pooler=True)
    rng = np.random.default_rng(4)
    for variable in single.trainable_weights:
        variable.assign(variable + rng.normal(scale=0.1, size=variable.shape).astype("float32"))
    save_trained_weights(single, str(tmp_path / "run"), task="mrpc", labels=["0", "1"])
    model = MultiAdapterModel(bert)
    assert model.load_adapter(str(tmp_path / "run")) == "mrpc"
    assert model.labels["mrpc"] == ["0", "1"]
    assert "bert/pooler/mrpc/dense/kernel" in tf1_variables(model)
    np.testing.assert_array_equal(model(tiny_inputs()).numpy(),
                                  single(tiny_inputs(), training=False).numpy())


def test_loading_a_full_fine_tuning_file_is_refused(bert, tiny_config, tmp_path):
    from adapter_bert.adapters.files import AdapterFileError
    single = BertClassifierNetwork(tiny_config, 2)
    single(tiny_inputs())
    save_trained_weights(single, str(tmp_path / "full"), task="mrpc", tuning_mode="full")
    model = MultiAdapterModel(bert)
    with pytest.raises(AdapterFileError, match="only adapter-mode files load as named adapters"):
        model.load_adapter(str(tmp_path / "full"))
    assert model.adapter_names == [] and bert.named_adapters == []


def test_fusion_task_round_trips_through_its_file(multi, tmp_path, bert):
    multi.add_adapter("d", AdapterConfig(size=M, init_scale=0.3), num_labels=2)
    multi.add_adapter_fusion("f", ["a", "d"], num_labels=2)
    multi.set_active_adapters("f")
    expected = multi(tiny_inputs()).numpy()
    multi.save_adapter(str(tmp_path / "f"), "f")
    assert multi.load_adapter(str(tmp_path / "f"), name="f2") == "f2"
    multi.set_active_adapters("f2")
    np.testing.assert_array_equal(multi(tiny_inputs()).numpy(), expected)
    with pytest.raises(ValueError, match="fused by"):
        multi.delete_adapter("a")


# ------------------------------------------------------- real weights and data
@pytest.mark.slow
@pytest.mark.realweights
@WRITTEN_AND_REAL
def test_minilm_mrpc_then_sst2_keeps_each_dev_metric(minilm_dir, data_root):
    """Two GLUE tasks trained in turn on one frozen MiniLM: A's dev outputs survive B."""
    from adapter_bert.data.features import convert_examples_to_features
    from adapter_bert.data.glue import get_processor
    from adapter_bert.data.tokenization import load_tokenizer

    tf.keras.utils.set_random_seed(1)
    tokenizer = load_tokenizer(str(minilm_dir / "vocab.txt"), True)
    model = MultiAdapterModel.from_pretrained(str(minilm_dir))

    def features(task, split, n):
        processor = get_processor(task)
        examples = processor.get_examples(str(data_root / "glue" / task.upper()), split)[:n]
        converted = convert_examples_to_features(examples, processor.get_labels(), 48, tokenizer)
        inputs = {k: converted[k] for k in ("input_ids", "input_mask", "segment_ids")}
        return inputs, converted["label_ids"], processor.get_labels()

    data = {}
    for task in ("mrpc", "sst-2"):
        train, train_labels, labels = features(task, "train", 128)
        dev, dev_labels, _ = features(task, "dev", 64)
        data[task] = (train, train_labels, dev, dev_labels)
        # MiniLM's pooler was never trained: each task trains its own copy.
        model.add_adapter(task, AdapterConfig(size=16), num_labels=len(labels), labels=labels,
                          train_pooler=True)

    def dev_accuracy(task):
        model.set_active_adapters(task)
        logits = model.predict(data[task][2], batch_size=32, verbose=0)
        return logits, float(np.mean(logits.argmax(-1) == data[task][3]))

    # 3 epochs of 8 steps per task (batch 16).
    losses = _train(model, "mrpc", data["mrpc"][0], data["mrpc"][1], 3, 16, 1e-3)
    mrpc_logits, mrpc_accuracy = dev_accuracy("mrpc")
    losses_b = _train(model, "sst-2", data["sst-2"][0], data["sst-2"][1], 3, 16, 1e-3)
    sst2_logits, sst2_accuracy = dev_accuracy("sst-2")
    print(f"dev accuracy: mrpc {mrpc_accuracy:.4f}, sst-2 {sst2_accuracy:.4f}; losses "
          f"{losses} {losses_b}")
    assert losses[-1] < losses[0] and losses_b[-1] < losses_b[0]
    assert sst2_accuracy > 0.6  # 24 steps already beat chance on SST-2 (0.81 when written)
    again, accuracy_again = dev_accuracy("mrpc")
    np.testing.assert_array_equal(again, mrpc_logits)
    assert accuracy_again == mrpc_accuracy
    # A mixed dev batch gives each task its own predictions.
    mixed = {k: np.concatenate([data["mrpc"][2][k][:8], data["sst-2"][2][k][:8]])
             for k in ("input_ids", "input_mask", "segment_ids")}
    routed = model(mixed, adapter_names=["mrpc"] * 8 + ["sst-2"] * 8).numpy()
    np.testing.assert_allclose(routed[:8], mrpc_logits[:8], atol=1e-5)
    np.testing.assert_allclose(routed[8:], sst2_logits[:8], atol=1e-5)
