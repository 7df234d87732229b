"""Models and comparisons shared by the adapter API tests (test_adapter_api*.py)."""

import numpy as np
import pytest
import tensorflow as tf

import adapter_bert as ab
from adapter_bert.adapters.multitask import MultiAdapterModel
from adapter_bert.model import encoder, heads
from adapter_bert.model.checkpoints import save_tf1_checkpoint
from adapter_bert.model.naming import tf1_variables
from tests.conftest import tiny_inputs

M = 4
KINDS = ("backbone", "classifier", "span", "multi")
# What each kind gives an adapter (num_labels 3 for classifiers).
HEAD_SIZES = {"backbone": 0, "classifier": 3 * 16 + 3, "span": 2 * 16 + 2, "multi": 3 * 16 + 3}


def count(variables):
    return sum(int(np.prod(v.shape)) for v in variables)


def base_backbone(config, seed=0):
    """A built plain BertModel with random weights (pooler bias never trained: zero)."""
    tf.keras.utils.set_random_seed(seed)
    bert = encoder.BertNetwork(config)
    bert.build_with_dummy_inputs()
    return bert


def copy_weights(source, target):
    """Assigns every weight of `target` that `source` has under the same TF1 name."""
    names = tf1_variables(source)
    for name, variable in tf1_variables(target).items():
        if name in names:
            variable.assign(names[name])


def make(kind, config, source):
    """A model of `kind` with the adapter API on the weights of backbone `source`."""
    if kind == "multi":
        bert = encoder.BertNetwork(config)
        bert.build_with_dummy_inputs()
        copy_weights(source, bert)
        return MultiAdapterModel(bert)
    model = {"backbone": lambda: ab.BertModel(config),
             "classifier": lambda: ab.BertClassifier(config, 3),
             "span": lambda: ab.BertSpanModel(config)}[kind]()
    model.build_with_dummy_inputs()
    copy_weights(source, model)
    return model


def plain_twin(kind, model):
    """The same network without the adapter API or any adapter, on `model`'s weights."""
    config = (model if kind == "backbone" else model.bert).config
    twin = {"backbone": lambda: encoder.BertNetwork(config),
            "multi": lambda: encoder.BertNetwork(config),
            "classifier": lambda: heads.BertClassifierNetwork(config, 3),
            "span": lambda: heads.BertSpanNetwork(config)}[kind]()
    twin.build_with_dummy_inputs()
    copy_weights(model, twin)
    return twin


def perturb(model, name, seed=1):
    """Moves adapter `name`'s weights off their start (adapters near identity otherwise)."""
    rng = np.random.default_rng(seed)
    for variable in model.adapter_variables(name).values():
        variable.assign_add(rng.normal(0, 0.2, variable.shape).astype("float32"))


def same(a, b):
    tf.nest.map_structure(lambda x, y: np.testing.assert_array_equal(np.asarray(x),
                                                                     np.asarray(y)), a, b)


def differ(a, b):
    flat_a, flat_b = tf.nest.flatten(a), tf.nest.flatten(b)
    return any(not np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(flat_a, flat_b))


@pytest.fixture(name="source")
def source_fixture(tiny_config):
    return base_backbone(tiny_config)


def run(model):
    return model(tiny_inputs(), training=False)


def write_backbone(bert, folder):
    """`bert`'s weights as a TF1 checkpoint folder `load_pretrained` reads."""
    folder.mkdir(parents=True, exist_ok=True)
    save_tf1_checkpoint(bert, str(folder / "bert_model.ckpt"))
    (folder / "bert_config.json").write_text(bert.config.to_google_json())
    return folder


def fit_briefly(model, learning_rate, examples, epochs):
    """Fits `model` on `examples` tiny inputs labelled by token parity; returns the losses."""
    import tf_keras
    model.compile(optimizer=tf_keras.optimizers.Adam(learning_rate),
                  loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    inputs = tiny_inputs(batch=examples, seed=4, pad_last=0)
    labels = (inputs["input_ids"][:, 1] % 2).astype("int32")
    return model.fit(inputs, labels, epochs=epochs, batch_size=8, verbose=0).history["loss"]


def assert_unchanged(model, expected):
    """Every TF1-named weight in `expected` still has its value."""
    for name, value in expected.items():
        np.testing.assert_array_equal(tf1_variables(model)[name].numpy(), value, err_msg=name)
