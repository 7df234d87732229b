"""run_classifier.py --export_dir: a SavedModel that takes strings and serves without
adapter_bert (tiny backbone, written MRPC rows; the real-MiniLM check is marked realweights)."""

import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO
from tests.runner_utils import flag_list, read_results, run_in_process

tensorflow_text = pytest.importorskip(
    "tensorflow_text", reason="the [serving] extra (tensorflow-text) is not installed")

MAX_LEN = 32


def read_tsv(path: Path):
    lines = path.read_text(encoding="utf-8-sig").splitlines()[1:]
    return [line.split("\t") for line in lines]


def serve(export_dir: Path, requests, tmp_path: Path):
    """Runs `requests` through tests/serving_client.py (adapter_bert blocked)."""
    requests_path, results_path = tmp_path / "requests.pkl", tmp_path / "results.pkl"
    requests_path.write_bytes(pickle.dumps(requests))
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, str(REPO / "tests/serving_client.py"), str(export_dir),
                           str(requests_path), str(results_path)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return pickle.loads(results_path.read_bytes())


@pytest.fixture(scope="module")
def mrpc_dir(tmp_path_factory, mrpc_dir):
    """MRPC whose test split is the dev split, so --do_predict scores dev rows."""
    data = tmp_path_factory.mktemp("mrpc_data")
    source = mrpc_dir
    for name in ("train.tsv", "dev.tsv"):
        shutil.copy(source / name, data / name)
    shutil.copy(source / "dev.tsv", data / "test.tsv")
    return data


def runner_flags(backbone, output_dir, **overrides):
    values = {"init_checkpoint": backbone / "bert_model.ckpt", "output_dir": output_dir,
              "max_seq_length": MAX_LEN, "train_batch_size": 16, "eval_batch_size": 64,
              "predict_batch_size": 64, "learning_rate": 1e-3, "adapter_size": 8,
              "save_checkpoints_steps": 2, "task_name": "MRPC"}
    return flag_list(values, overrides)


@pytest.fixture(scope="module")
def trained(backbone, mrpc_dir, tmp_path_factory):
    """4 adapter-tuning steps, eval and predict on MRPC dev, then --export_dir."""
    out = tmp_path_factory.mktemp("mrpc_run")
    code, _ = run_in_process("run_classifier", [
        "--do_train", "--do_eval", "--do_predict", "--num_train_epochs=0.02",
        f"--data_dir={mrpc_dir}", f"--export_dir={out / 'export'}", *runner_flags(backbone, out)])
    assert code == 0
    return out


@pytest.mark.slow
def test_export_serves_the_runs_predictions_without_adapter_bert(trained, mrpc_dir, tmp_path):
    rows = read_tsv(mrpc_dir / "dev.tsv")
    results = serve(trained / "export", [("serving_default", {
        "text_a": [r[3] for r in rows], "text_b": [r[4] for r in rows]})], tmp_path)
    status, outputs = results[0]
    assert status == "ok"
    expected = np.loadtxt(trained / "test_results.tsv", ndmin=2)
    assert outputs["probabilities"].shape == (len(rows), 2)
    np.testing.assert_allclose(outputs["probabilities"], expected, atol=1e-5, rtol=0)
    labels = np.array([r[0] for r in rows])
    accuracy = np.mean(outputs["label"].astype(str) == labels)
    assert accuracy == pytest.approx(float(read_results(trained / "eval_results.txt")["eval_accuracy"]),
                                     abs=1e-6)


@pytest.mark.slow
def test_tokenize_signature_gives_the_python_pipelines_features(trained, mrpc_dir, backbone,
                                                              tmp_path):
    from adapter_bert.data.features import convert_examples_to_features
    from adapter_bert.data.glue import get_processor
    from adapter_bert.data.tokenization import load_tokenizer
    processor = get_processor("mrpc")
    examples = processor.get_examples(str(mrpc_dir), "dev")
    expected = convert_examples_to_features(examples, processor.get_labels(), MAX_LEN,
                                            load_tokenizer(str(backbone / "vocab.txt"), True))
    status, features = serve(trained / "export", [("tokenize", {
        "text_a": [e.text_a for e in examples], "text_b": [e.text_b for e in examples]})],
        tmp_path)[0]
    assert status == "ok"
    for key in ("input_ids", "input_mask", "segment_ids"):
        np.testing.assert_array_equal(features[key], expected[key], err_msg=key)


@pytest.mark.slow
def test_export_of_load_adapter_and_of_the_latest_checkpoint(trained, backbone, tmp_path):
    """The two other ways to export give the same model as exporting after training; the
    adapter alone needs no --task_name: it records MRPC, whose pairs the export takes."""
    texts = {"text_a": ["The cat sat on the mat.", "Stocks fell sharply on Monday."],
             "text_b": ["A cat was sitting on the mat.", "Shares rose on Monday."]}
    exports = {}
    code, _ = run_in_process("run_classifier", [
        f"--load_adapter={trained / 'adapter'}", f"--export_dir={tmp_path / 'from_adapter'}",
        *runner_flags(backbone, tmp_path / "out1")])
    assert code == 0
    exports["adapter"] = tmp_path / "from_adapter"
    code, _ = run_in_process("run_classifier", [
        f"--load_adapter={trained / 'adapter'}", f"--export_dir={tmp_path / 'adapter_alone'}",
        *runner_flags(backbone, tmp_path / "out3", task_name=None)])
    assert code == 0
    exports["adapter alone"] = tmp_path / "adapter_alone"
    code, _ = run_in_process("run_classifier", [
        f"--export_dir={tmp_path / 'from_checkpoint'}", *runner_flags(backbone, trained)])
    assert code == 0
    exports["checkpoint"] = tmp_path / "from_checkpoint"
    reference = serve(trained / "export", [("serving_default", texts)], tmp_path)[0][1]
    for kind, path in exports.items():
        status, outputs = serve(path, [("serving_default", texts)], tmp_path)[0]
        assert status == "ok", kind
        np.testing.assert_allclose(outputs["probabilities"], reference["probabilities"],
                                   atol=1e-6, err_msg=kind)


@pytest.mark.slow
def test_bad_input_at_serving_time(trained, tmp_path):
    """Empty, overlong and non-UTF-8 texts and an empty batch: defined results; rows of
    text_a and text_b that do not pair up: a clear error."""
    long_text = "word " * 1000
    requests = [
        ("serving_default", {"text_a": ["", "a b"], "text_b": ["", ""]}),
        ("tokenize", {"text_a": ["", "a b"], "text_b": ["", ""]}),
        ("serving_default", {"text_a": [long_text], "text_b": [long_text]}),
        ("tokenize", {"text_a": [long_text], "text_b": ["short"]}),
        ("tokenize", {"text_a": [b"caf\xc3\xa9 \xff\xfeok \xe2\x82"], "text_b": [b"\x80"]}),
        ("tokenize", {"text_a": ["cafe ok"], "text_b": [""]}),
        ("serving_default", {"text_a": [], "text_b": []}),
        ("serving_default", {"text_a": ["one", "two"], "text_b": ["one"]}),
    ]
    results = serve(trained / "export", requests, tmp_path)
    (s0, empty), (s1, empty_features), (s2, long_out), (s3, long_features), \
        (s4, bad_bytes), (s5, clean), (s6, no_rows), (s7, mismatch) = results
    assert [s0, s1, s2, s3, s4, s5, s6] == ["ok"] * 7
    # An empty text is "[CLS] [SEP]": a valid row with a valid prediction.
    np.testing.assert_array_equal(empty_features["input_mask"].sum(1), [2, 4])
    np.testing.assert_allclose(empty["probabilities"].sum(1), 1.0, atol=1e-6)
    # A text far over max_seq_length is truncated as Google truncates (b shorter: a cut).
    assert long_features["input_mask"].sum() == MAX_LEN
    assert long_features["segment_ids"].sum() == 2 and long_out["probabilities"].shape == (1, 2)
    # Bytes that are not UTF-8 are dropped, as Google's decode("utf-8", "ignore") drops them
    # ("café" lower-cased and accent-stripped is "cafe").
    # text_b is not empty (one invalid byte): the row is a pair with an empty b.
    shown = int(clean["input_mask"].sum())  # [CLS] cafe ok [SEP]
    np.testing.assert_array_equal(bad_bytes["input_ids"][0, :shown], clean["input_ids"][0, :shown])
    assert bad_bytes["input_mask"].sum() == shown + 1 and bad_bytes["segment_ids"].sum() == 1
    assert no_rows["probabilities"].shape == (0, 2) and no_rows["label"].shape == (0,)
    assert s7 == "error" and "text_a and text_b must have the same number of rows" in mismatch


@pytest.mark.slow
def test_single_sentence_and_regression_exports(backbone, tmp_path):
    """A single-sentence task takes text_a only; a regression head returns `score`."""
    import tensorflow as tf

    from adapter_bert.adapters.models import load_pretrained
    from adapter_bert.model.config import AdapterConfig
    from adapter_bert.serving.export import ExportError, export_classifier
    from adapter_bert.serving.tokenizer import BertInputEncoder
    vocab = str(backbone / "vocab.txt")
    regression = load_pretrained(str(backbone / "bert_model.ckpt"), AdapterConfig(size=4),
                                 head="classifier", num_labels=1)
    texts = ["A man is playing a guitar.", ""]
    features = BertInputEncoder(vocab, True, MAX_LEN).encode(tf.constant(texts))
    expected = regression(features, training=False).numpy()[:, 0]
    export_classifier(regression, str(tmp_path / "stsb"), vocab, True, MAX_LEN, None, pair=False)
    with pytest.raises(ExportError, match="has 1 outputs but 2 labels"):
        export_classifier(regression, str(tmp_path / "bad"), vocab, True, MAX_LEN, ["0", "1"],
                          pair=False)
    assert not (tmp_path / "bad").exists()
    status, outputs = serve(tmp_path / "stsb", [("serving_default", {"text_a": texts})],
                            tmp_path)[0]
    assert status == "ok" and sorted(outputs) == ["score"]
    np.testing.assert_allclose(outputs["score"], expected, atol=1e-6)


def test_export_without_tensorflow_text_is_one_clear_line(backbone, tmp_path, monkeypatch,
                                                          capsys):
    monkeypatch.setitem(sys.modules, "tensorflow_text", None)  # import fails
    code, _ = run_in_process("run_classifier", [
        "--do_train", "--data_dir=/nonexistent", f"--export_dir={tmp_path / 'e'}",
        *runner_flags(backbone, tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and "--export_dir needs tensorflow-text" in err[-1]
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.realweights
def test_minilm_export_matches_run_classifier_on_mrpc_dev(minilm_dir, mrpc_dir, tmp_path):
    """The real MiniLM (adapters untrained, head as initialised): the SavedModel's
    probabilities on every MRPC dev row equal run_classifier.py's within 1e-5."""
    out = tmp_path / "run"
    code, _ = run_in_process("run_classifier", [
        "--task_name=MRPC", "--do_eval", "--do_predict", f"--data_dir={mrpc_dir}",
        f"--output_dir={out}", "--max_seq_length=128", "--eval_batch_size=64",
        "--predict_batch_size=64", f"--export_dir={out / 'export'}"])
    assert code == 0
    rows = read_tsv(mrpc_dir / "dev.tsv")
    status, outputs = serve(out / "export", [("serving_default", {
        "text_a": [r[3] for r in rows], "text_b": [r[4] for r in rows]})], tmp_path)[0]
    assert status == "ok"
    np.testing.assert_allclose(outputs["probabilities"], np.loadtxt(out / "test_results.tsv"),
                               atol=1e-5, rtol=0)
    accuracy = np.mean(outputs["label"].astype(str) == np.array([r[0] for r in rows]))
    assert accuracy == pytest.approx(float(read_results(out / "eval_results.txt")["eval_accuracy"]),
                                     abs=1e-6)


def test_length_groups_give_each_row_its_own_output(tiny_config):
    """A batch of rows of mixed lengths, run in sorted groups inside a traced function:
    each row's probabilities equal those of the row run alone, in request order."""
    import tensorflow as tf

    from adapter_bert.model.config import AdapterConfig
    from adapter_bert.adapters.models import BertClassifier
    from adapter_bert.serving.export import ROWS_PER_GROUP, in_length_groups
    model = BertClassifier(tiny_config, 3, AdapterConfig(size=4, init_scale=0.2))
    rng = np.random.default_rng(1)
    rows, width = 2 * ROWS_PER_GROUP + 3, 20
    lengths = rng.permutation(np.arange(rows) % (width - 2) + 2)
    positions = np.arange(width)[None, :]
    mask = (positions < lengths[:, None]).astype("int32")
    features = {"input_ids": (rng.integers(1, 60, (rows, width)) * mask).astype("int32"),
                "input_mask": mask, "segment_ids": (positions >= 3).astype("int32") * mask}
    grouped = tf.function(lambda f: in_length_groups(
        lambda part: model(part, training=False), f))(features).numpy()
    assert grouped.shape == (rows, 3)
    for row in range(rows):
        alone = {key: value[row:row + 1, :lengths[row]] for key, value in features.items()}
        np.testing.assert_allclose(grouped[row], model(alone, training=False).numpy()[0],
                                   atol=1e-6, err_msg=f"row {row}")
