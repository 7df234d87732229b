"""BERT folders without pooler weights load with a fresh pooler, which adapter runs train.

Sentence-transformers exports and models saved with `add_pooling_layer=False` have no
`pooler.*` tensors (TF1: no `bert/pooler/*`). They load as transformers loads them: a
freshly initialised pooler and a warning naming the missing weights; `--train_pooler=auto`
then trains it with the adapters. Any other missing weight still stops the load.
"""

import logging
import shutil

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

from adapter_bert.model.checkpoints import CheckpointError, read_tf1_checkpoint
from adapter_bert.model.factory import build_pretrained
from adapter_bert.adapters.tuning import pooler_is_untrained
from tests.conftest import BERT_VOCAB, tiny_inputs
from tests.robustness.helpers import assert_one_error_line, classifier_flags, write_mrpc_dir
from tests.runner_utils import read_results, run_subprocess, write_tiny_backbone

POOLER = ["bert/pooler/dense/kernel", "bert/pooler/dense/bias"]
OTHER = "bert/encoder/layer_2/output/dense/kernel"


def hf_folder_without(minilm_dir, target, dropped_prefixes):
    """The MiniLM folder (config, vocab) with safetensors tensors whose names start with
    one of `dropped_prefixes` left out, as an `add_pooling_layer=False` export has."""
    target.mkdir(parents=True)
    for name in ("config.json", "vocab.txt"):
        shutil.copy(minilm_dir / name, target / name)
    state = load_file(str(minilm_dir / "model.safetensors"))
    kept = {k: v for k, v in state.items() if not k.startswith(tuple(dropped_prefixes))}
    assert len(kept) < len(state), "nothing was dropped"
    save_file(kept, str(target / "model.safetensors"))
    return target


def tf1_folder_without_pooler(target, vocab_file):
    """A random 2-layer BERT as a TF1 checkpoint folder with no `bert/pooler/*` variables,
    and the complete model it was cut from."""
    full = write_tiny_backbone(target.parent / (target.name + "_full"), vocab_file)
    weights = {n: v for n, v in read_tf1_checkpoint(str(full / "bert_model.ckpt")).items()
               if not n.startswith("bert/pooler/")}
    target.mkdir(parents=True)
    tf.raw_ops.SaveV2(prefix=str(target / "bert_model.ckpt"), tensor_names=list(weights),
                      shape_and_slices=[""] * len(weights),
                      tensors=[tf.constant(v) for v in weights.values()])
    for name in ("bert_config.json", "vocab.txt"):
        shutil.copy(full / name, target / name)
    return target, build_pretrained(str(full))


@pytest.fixture(scope="module")
def minilm_model(minilm_dir):
    return build_pretrained(str(minilm_dir))


@pytest.fixture(scope="module")
def poolerless_minilm(minilm_dir, tmp_path_factory):
    return hf_folder_without(minilm_dir, tmp_path_factory.mktemp("st") / "minilm", ["pooler."])


@pytest.fixture(scope="module")
def poolerless_tf1(tmp_path_factory):
    vocab = BERT_VOCAB
    return tf1_folder_without_pooler(tmp_path_factory.mktemp("tf1") / "tiny", vocab)


# ------------------------------------------------------------------ load_pretrained

def test_hf_folder_without_pooler_loads_a_fresh_pooler_and_warns(
        poolerless_minilm, minilm_model, caplog):
    with caplog.at_level(logging.WARNING, logger="adapter_bert.model.checkpoints"):
        model = build_pretrained(str(poolerless_minilm))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and all(name in warnings[0] for name in POOLER), warnings
    assert sorted(model.load_report.pooler_missing) == sorted(POOLER)
    assert sorted(model.load_report.missing) == sorted(POOLER)
    # Every other weight is MiniLM's: the encoder's output is unchanged.
    inputs = tiny_inputs(vocab=1000)
    np.testing.assert_array_equal(model(inputs)["sequence_output"],
                                  minilm_model(inputs)["sequence_output"])
    # The pooler is fresh: zero bias (so `--train_pooler=auto` trains it), a kernel that
    # is not MiniLM's but drawn at the config's initializer range.
    assert pooler_is_untrained(model)
    kernel = model.pooler.dense.kernel.numpy()
    assert not np.allclose(kernel, minilm_model.pooler.dense.kernel.numpy())
    assert 0.5 * 0.02 < kernel.std() < 1.5 * 0.02


def test_tf1_checkpoint_without_pooler_loads_with_a_warning(poolerless_tf1, caplog):
    folder, source = poolerless_tf1
    with caplog.at_level(logging.WARNING, logger="adapter_bert.model.checkpoints"):
        model = build_pretrained(str(folder), head="classifier")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and all(name in warnings[0] for name in POOLER), warnings
    assert model.backbone_files.format == "tf1"
    assert sorted(model.load_report.pooler_missing) == sorted(POOLER)
    inputs = tiny_inputs()
    np.testing.assert_array_equal(model.bert(inputs)["sequence_output"],
                                  source(inputs)["sequence_output"])


def test_other_missing_weights_still_stop_the_load(minilm_dir, tmp_path):
    folder = hf_folder_without(minilm_dir, tmp_path / "broken",
                               ["pooler.", "encoder.layer.2.output.dense.weight"])
    with pytest.raises(CheckpointError) as error:
        build_pretrained(str(folder))
    message = str(error.value)
    assert "\n" not in message
    assert message == f"{folder / 'model.safetensors'}: 1 backbone weight(s) missing, e.g. {OTHER}"


# -------------------------------------------------------------------- run_classifier

@pytest.fixture(scope="module")
def mrpc(mrpc_dir, tmp_path_factory):
    source = mrpc_dir

    def read(name, count):
        return (source / name).read_text(encoding="utf-8-sig").splitlines()[:count]
    return write_mrpc_dir(tmp_path_factory.mktemp("mrpc"),
                          (read("train.tsv", 97), read("dev.tsv", 41), read("test.tsv", 9)))


def classifier_argv(folder, out, data, *extra):
    return ["--do_train", "--do_eval", "--tuning_mode=adapter", *extra,
            *classifier_flags(folder, out, data, init_checkpoint=folder, num_train_epochs=0.5)]


@pytest.mark.slow
@pytest.mark.parametrize("backbone", ["hf", "tf1"])
def test_adapter_run_trains_the_fresh_pooler(backbone, poolerless_minilm, poolerless_tf1,
                                             mrpc, tmp_path):
    folder = poolerless_minilm if backbone == "hf" else poolerless_tf1[0]
    out = tmp_path / "out"
    result = run_subprocess("run_classifier.py", classifier_argv(folder, out, mrpc))
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if "has no pooler weights" in line]
    assert len(warnings) == 1 and all(name in warnings[0] for name in POOLER), result.stderr
    assert "pooler was never trained (absent): training it with the adapter weights" \
        in result.stderr
    assert read_results(out / "eval_results.txt")["global_step"] == "3"
    trained = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    assert set(POOLER) <= set(trained)          # the pooler trained with the adapters ...
    assert np.any(trained["bert/pooler/dense/bias"])   # ... away from its zero start


@pytest.mark.slow
def test_train_pooler_false_keeps_the_fresh_pooler_frozen(poolerless_tf1, mrpc, tmp_path):
    out = tmp_path / "out"
    result = run_subprocess("run_classifier.py", classifier_argv(
        poolerless_tf1[0], out, mrpc, "--train_pooler=false"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "has no pooler weights" in result.stderr
    trained = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    assert not set(POOLER) & set(trained)


@pytest.mark.slow
def test_run_classifier_stops_with_one_line_on_other_missing_weights(minilm_dir, mrpc,
                                                                      tmp_path):
    folder = hf_folder_without(minilm_dir, tmp_path / "broken",
                               ["pooler.", "encoder.layer.2.output.dense.weight"])
    result = run_subprocess("run_classifier.py", classifier_argv(folder, tmp_path / "out", mrpc))
    assert result.returncode == 1
    assert_one_error_line(result.stderr, "run_classifier.py",
                          rf"1 backbone weight\(s\) missing, e\.g\. {OTHER}$")
