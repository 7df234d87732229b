"""export_tflite: the classifier's network as builtin-only TFLite, checked against the
SavedModel's `from_features` on MRPC rows tokenised by its `tokenize` signature
(tiny backbone; the real-MiniLM check on all of MRPC dev is marked realweights)."""

import numpy as np
import pytest

pytest.importorskip("tensorflow_text", reason="the [serving] extra (tensorflow-text) is not installed")

MAX_LEN = 32


def mrpc_dev(mrpc_dir, count=None):
    lines = (mrpc_dir / "dev.tsv").read_text(encoding="utf-8-sig").splitlines()
    rows = [line.split("\t") for line in lines[1:]][:count]
    return [r[3] for r in rows], [r[4] for r in rows]


def saved_model_and_features(model, export_dir, vocab, max_len, texts):
    """The string-in SavedModel of `model` and its `tokenize` features of `texts`."""
    import tensorflow as tf

    from adapter_bert.serving import export_classifier
    export_classifier(model, str(export_dir), vocab, True, max_len, ["0", "1"], pair=True)
    signatures = tf.saved_model.load(str(export_dir)).signatures
    text_a, text_b = texts
    features = signatures["tokenize"](text_a=tf.constant(text_a), text_b=tf.constant(text_b))
    return signatures, {key: value.numpy() for key, value in features.items()}


def tiny_classifier(backbone, num_labels):
    """The tiny backbone with adapters and a head, every weight but the LayerNorms and biases redrawn
    with a large spread from a fixed seed, so that rows' outputs differ by far more than
    the tolerance whatever random weights the session's backbone got (as initialised, the
    model answers about the same for every row)."""
    from adapter_bert.adapters.models import load_pretrained
    from adapter_bert.model.config import AdapterConfig
    from tests.conftest import tiny_inputs
    model = load_pretrained(str(backbone / "bert_model.ckpt"),
                            AdapterConfig(size=4, init_scale=0.2), head="classifier",
                            num_labels=num_labels)
    model(tiny_inputs(), training=False)
    rng = np.random.default_rng(0)
    for variable in model.variables:
        # Everything but the LayerNorms and the (zero-initialised) biases: kernels,
        # embedding tables and the adapters' weights.
        if not any(part in variable.name for part in ("gamma", "beta", "bias")):
            variable.assign(rng.normal(0.0, 0.5, variable.shape).astype("float32"))
    return model


@pytest.fixture(scope="module")
def tiny_export(backbone, mrpc_dir, tmp_path_factory):
    model = tiny_classifier(backbone, 2)
    signatures, features = saved_model_and_features(
        model, tmp_path_factory.mktemp("tflite") / "export", str(backbone / "vocab.txt"),
        MAX_LEN, mrpc_dev(mrpc_dir, 10))
    expected = signatures["from_features"](**features)["probabilities"].numpy()
    return model, features, expected


@pytest.mark.slow
@pytest.mark.parametrize("batch, width", [(4, MAX_LEN), (None, None)])
def test_tflite_probabilities_equal_the_saved_models(tiny_export, tmp_path, batch, width):
    """10 rows through a static [4, 32] model (last batch padded) and a dynamic one."""
    from adapter_bert.serving.tflite import export_tflite, tflite_interpreter, tflite_predict
    model, features, expected = tiny_export
    path = export_tflite(model, str(tmp_path / "model.tflite"), width, batch_size=batch)
    interpreter = tflite_interpreter(path)
    inputs = interpreter.get_signature_runner().get_input_details()
    assert sorted(inputs) == ["input_ids", "input_mask", "segment_ids"]
    assert list(inputs["input_ids"]["shape_signature"]) == [batch or -1, width or -1]
    got = tflite_predict(interpreter, features)["probabilities"]
    assert got.shape == expected.shape == (10, 2)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    # Not a constant model: the rows' probabilities differ.
    assert np.ptp(got[:, 1]) > 1e-2


@pytest.mark.slow
def test_regression_head_returns_score(backbone, tmp_path):
    from adapter_bert.serving.tflite import export_tflite, tflite_interpreter, tflite_predict
    from tests.conftest import tiny_inputs
    model = tiny_classifier(backbone, 1)
    features = tiny_inputs(batch=3, seq=8)
    path = export_tflite(model, str(tmp_path / "stsb.tflite"), 8, batch_size=3, regression=True)
    got = tflite_predict(tflite_interpreter(path), features)
    assert sorted(got) == ["score"]
    np.testing.assert_allclose(got["score"], model(features, training=False).numpy()[:, 0],
                               atol=1e-5)


@pytest.mark.slow
def test_refused_ops_names_the_tokenizers_ops(tiny_export, tmp_path):
    """The tokenizer does not convert to builtins; WordPiece alone has a custom kernel."""
    from adapter_bert.serving import export_classifier
    from adapter_bert.serving.tflite import refused_ops
    from tests.conftest import BERT_VOCAB
    model = tiny_export[0]
    path = export_classifier(model, str(tmp_path / "export"), str(BERT_VOCAB), True, MAX_LEN,
                             ["0", "1"], pair=True)
    builtins_only = refused_ops(path, "tokenize")
    with_text = refused_ops(path, "tokenize", with_tensorflow_text=True)
    assert {"UnicodeDecode", "LowerBound", "FastWordpieceTokenizeWithOffsets",
            "RaggedTensorToTensor"} <= set(builtins_only)
    assert set(with_text) == set(builtins_only) - {"FastWordpieceTokenizeWithOffsets",
                                                   "RaggedTensorToTensor"}


@pytest.mark.slow
@pytest.mark.realweights
def test_minilm_tflite_matches_the_saved_model_on_mrpc_dev(minilm_dir, mrpc_dir, tmp_path):
    """The embedded MiniLM with size-64 adapters as initialised, the first 128 MRPC dev
    pairs tokenised by the SavedModel, through a [8, 128] TFLite model: within 1e-5."""
    from adapter_bert.model.config import AdapterConfig
    from adapter_bert.adapters.models import load_pretrained
    from adapter_bert.serving.tflite import export_tflite, tflite_interpreter, tflite_predict
    model = load_pretrained(None, AdapterConfig(size=64), head="classifier", num_labels=2)
    texts = mrpc_dev(mrpc_dir, count=128)
    signatures, features = saved_model_and_features(
        model, tmp_path / "export", str(minilm_dir / "vocab.txt"), 128, texts)
    expected = signatures["from_features"](**features)["probabilities"].numpy()
    path = export_tflite(model, str(tmp_path / "mrpc.tflite"), 128, batch_size=8)
    got = tflite_predict(tflite_interpreter(path), features)["probabilities"]
    assert got.shape == (128, 2)
    difference = float(np.abs(got - expected).max())
    print(f"max |TFLite - SavedModel| over {len(got)} MRPC dev pairs: {difference:.3g}")
    assert difference <= 1e-5
