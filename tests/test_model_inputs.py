"""The input features every model takes: names, aliases, and the errors for the rest."""

import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.adapters.multitask import MultiAdapterModel
from adapter_bert.adapters.resadapter import ResAdapterClassifier, ResAdapterConfig
from adapter_bert.model.config import AdapterConfig, BertConfig
from adapter_bert.model.encoder import BertNetwork
from adapter_bert.model.heads import BertSpanNetwork
from adapter_bert.model.inputs import model_features
from adapter_bert.adapters.models import BertClassifier
from tests.conftest import tiny_inputs


def _classifier(config):
    model = BertClassifier(config, 3, AdapterConfig(size=4))
    model(tiny_inputs(), training=False)
    return model


def _models(config):
    """One of each model kind, built on the tiny config."""
    multi = MultiAdapterModel(BertNetwork(config))
    multi.add_adapter("a", AdapterConfig(size=4), num_labels=3)
    models = {"BertNetwork": BertNetwork(config), "BertClassifier": _classifier(config),
              "BertSpanNetwork": BertSpanNetwork(config), "MultiAdapterModel": multi,
              "ResAdapterClassifier": ResAdapterClassifier(config, 2, ResAdapterConfig(size=4))}
    for model in models.values():
        model(tiny_inputs(), training=False)
    return models


def _one_line(excinfo):
    message = str(excinfo.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("bad, hint", [
    ({"input_masks": 1}, "'input_masks' -> 'input_mask'"),
    ({"token_ids": 1}, "'token_ids' -> 'input_ids'"),
    ({"padding_mask": 1}, "'padding_mask' -> 'input_mask'"),
    ({"label_ids": 1}, "unknown input key(s) ['label_ids']"),
])
def test_unknown_keys_fail_in_one_line_naming_the_expected_ones(tiny_config, bad, hint):
    features = tiny_inputs()
    if "token_ids" in bad:
        features["token_ids"] = features.pop("input_ids")
    else:
        features.update(bad)
    for name, model in _models(tiny_config).items():
        with pytest.raises(ValueError) as excinfo:
            model(features, training=False)
        message = _one_line(excinfo)
        assert message.startswith(name), message
        assert hint in message and "input_ids, input_mask, segment_ids" in message, message
        assert "attention_mask (= input_mask)" in message, message


def test_a_bare_tensor_or_no_input_ids_fails(tiny_config):
    model = _classifier(tiny_config)
    with pytest.raises(ValueError) as excinfo:
        model(tf.ones([2, 5], tf.int32))
    assert "takes a dict of features" in _one_line(excinfo)
    with pytest.raises(ValueError) as excinfo:
        model({"input_mask": tf.ones([2, 5], tf.int32)})
    assert "needs 'input_ids'" in _one_line(excinfo)
    with pytest.raises(ValueError) as excinfo:
        model({"input_ids": tf.ones([2, 5], tf.float32)})
    assert "input_ids must be integers, got float32" in _one_line(excinfo)


def test_a_feature_under_both_names_fails(tiny_config):
    features = tiny_inputs()
    features["attention_mask"] = features["input_mask"]
    with pytest.raises(ValueError) as excinfo:
        _classifier(tiny_config)(features)
    assert "both 'input_mask' and its alias 'attention_mask'" in _one_line(excinfo)


def test_hugging_face_names_are_aliases_in_every_model(tiny_config):
    google = tiny_inputs()
    hf = {"input_ids": google["input_ids"], "attention_mask": google["input_mask"],
          "token_type_ids": google["segment_ids"]}
    for name, model in _models(tiny_config).items():
        expected, got = model(google, training=False), model(hf, training=False)
        tf.nest.map_structure(lambda a, b: np.testing.assert_array_equal(a, b), expected, got)


def test_multi_adapter_model_takes_adapter_names_as_a_feature(tiny_config):
    multi = _models(tiny_config)["MultiAdapterModel"]
    features = tiny_inputs()
    mixed = multi({**features, "adapter_names": tf.constant(["a", "a"])}, training=False)
    np.testing.assert_array_equal(mixed, multi(features, training=False))
    assert model_features(dict(features, adapter_names=1), extra=("adapter_names",))


def test_omitted_mask_and_segments_mean_all_attended_and_segment_zero(tiny_config):
    model = _classifier(tiny_config)
    features = tiny_inputs(pad_last=0)
    features["segment_ids"][:] = 0
    np.testing.assert_array_equal(model({"input_ids": features["input_ids"]}, training=False),
                                  model(features, training=False))


@pytest.fixture(scope="module")
def minilm_tokenizer():
    from transformers import BertTokenizerFast

    from adapter_bert.model.checkpoints import CheckpointError, default_backbone_dir
    try:
        vocab = f"{default_backbone_dir()}/vocab.txt"
    except CheckpointError as e:
        pytest.skip(str(e))
    return BertTokenizerFast(vocab_file=vocab, do_lower_case=True)


def test_a_hugging_face_tokenizers_output_is_masked_and_segmented(minilm_tokenizer):
    """A tokenizer's padded batch goes in as it is: the padding is masked (a padded row's
    logits equal the unpadded row's) and the second sentence gets segment 1."""
    tokenizer = minilm_tokenizer
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                        type_vocab_size=2)
    model = BertClassifier(config, 2, AdapterConfig(size=4))
    firsts, seconds = ["a short one", "a much longer first sentence"], ["yes", "and its second"]
    batch = tokenizer(firsts, seconds, padding=True, return_tensors="np")
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids"}
    assert batch["attention_mask"][0].min() == 0  # row 0 is padded
    logits = model(dict(batch), training=False).numpy()
    for row in range(2):
        alone = tokenizer(firsts[row], seconds[row], return_tensors="np")
        np.testing.assert_allclose(model(dict(alone), training=False)[0], logits[row],
                                   rtol=1e-5, atol=1e-6)
    unmasked = model({"input_ids": batch["input_ids"],
                      "token_type_ids": batch["token_type_ids"]}, training=False).numpy()
    assert not np.allclose(unmasked[0], logits[0])  # the mask matters for the padded row
    one_segment = model({"input_ids": batch["input_ids"],
                         "attention_mask": batch["attention_mask"]}, training=False).numpy()
    assert not np.allclose(one_segment, logits)  # so do the segments


@pytest.mark.parametrize("kind", ["BertClassifier", "MultiAdapterModel"])
def test_fit_traces_its_train_function_once_and_draws_as_the_step_would(tiny_config, kind,
                                                                      monkeypatch):
    """Keras traces the train step once (tf.function traces a function that creates
    variables twice): the optimizer's slots exist before, and so do the generators the
    attention dropout makes at its first draw (variables under the package's `set_seed`,
    Keras' "tf random generator"), made by a traced forward pass in the order the step
    would make them. The run is the one the step's own generators give."""
    import tf_keras as keras

    from adapter_bert.model.fast_layers import Dropout
    from adapter_bert.training.loop import set_seed

    def trained(generators_first: bool):
        set_seed(5)
        model = _models(tiny_config)[kind]
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        with monkeypatch.context() as patch:
            if not generators_first:  # as before: the train step makes them
                patch.setattr(Dropout, "generators_pending", staticmethod(lambda model: False))
            features = tiny_inputs(batch=4)
            model.fit(tf.data.Dataset.from_tensors((features, np.array([0, 1, 2, 1]))).repeat(3),
                      epochs=1, verbose=0)
        return model

    enabled = keras.backend.experimental.is_tf_random_generator_enabled()
    try:
        model, by_the_step = trained(True), trained(False)
    finally:
        if not enabled:
            keras.backend.experimental.disable_tf_random_generator()
    assert by_the_step.train_function.experimental_get_tracing_count() == 2
    assert model.train_function.experimental_get_tracing_count() == 1
    assert model.optimizer.iterations.numpy() == 3
    for ours, theirs in zip(model.weights, by_the_step.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), ours.name)
