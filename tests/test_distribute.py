"""Strategy selection (fast, mocked TPU) and a real 2-replica MirroredStrategy run."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from adapter_bert.errors import UserError
from adapter_bert.training.distribute import (STRATEGIES, get_strategy, is_tpu_strategy, split_cpu,
                                     static_shapes_required)

REPO = Path(__file__).resolve().parents[1]


# --- selection on this (GPU-less) machine -----------------------------------------------

@pytest.mark.parametrize("name", ["auto", "one_device", None])
def test_single_device_choices(name):
    strategy = get_strategy(name)
    assert isinstance(strategy, tf.distribute.OneDeviceStrategy)
    assert strategy.num_replicas_in_sync == 1
    assert "CPU:0" in strategy.extended.worker_devices[0]
    assert not is_tpu_strategy(strategy) and not static_shapes_required(strategy)


def test_mirrored_on_cpu_uses_logical_cpus():
    strategy = get_strategy("mirrored")
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == len(tf.config.list_logical_devices("CPU"))


def test_multi_worker_without_tf_config_is_one_local_worker(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    strategy = get_strategy("multi_worker_mirrored")
    assert isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    assert strategy.num_replicas_in_sync == 1


def test_unknown_strategy_lists_valid_names():
    with pytest.raises(ValueError, match="expected one of auto, tpu, mirrored"):
        get_strategy("parameter_server")
    assert STRATEGIES == ("auto", "tpu", "mirrored", "multi_worker_mirrored", "one_device")


def test_use_tpu_conflicts_with_other_strategies():
    with pytest.raises(ValueError, match="conflicts"):
        get_strategy("mirrored", use_tpu=True)


def test_too_many_gpus():
    with pytest.raises(ValueError, match="num_gpus=2 but only 0"):
        get_strategy("mirrored", num_gpus=2)


def test_split_cpu_too_late_is_a_clear_error():
    tf.config.list_logical_devices()  # make sure this process has initialised TF
    with pytest.raises(RuntimeError, match="before TensorFlow initialises"):
        split_cpu(len(tf.config.list_logical_devices("CPU")) + 1)
    with pytest.raises(ValueError):
        split_cpu(0)


def test_is_tpu_strategy_recognises_tpu_strategies():
    # A TPUStrategy cannot be built without a TPU; an uninitialised instance has its class.
    fake = object.__new__(tf.distribute.TPUStrategy)
    assert is_tpu_strategy(fake) and static_shapes_required(fake)
    assert not is_tpu_strategy(None)


# --- TPU with everything mocked: no network, no TPU -------------------------------------

class _FakeStrategy:
    num_replicas_in_sync = 8


_FAKE_STRATEGY = _FakeStrategy()


class _Recorder:
    """Stands in for the TPU API; records calls, fails where told to."""

    def __init__(self, fail_at=None):
        self.calls, self.fail_at = [], fail_at

    def resolver(self, tpu=None, zone=None, project=None):
        self.calls.append(("resolve", tpu, zone, project))
        if self.fail_at == "resolve":
            raise ValueError("Please provide a TPU Name to connect to.")
        return "RESOLVER"

    def connect(self, resolver):
        self.calls.append(("connect", resolver))

    def initialize(self, resolver):
        self.calls.append(("initialize", resolver))
        if self.fail_at == "initialize":
            raise tf.errors.NotFoundError(None, None, "TPUs not found in the cluster")

    def strategy(self, resolver):
        self.calls.append(("strategy", resolver))
        return _FAKE_STRATEGY


@pytest.fixture
def fake_tpu(monkeypatch):
    def install(fail_at=None):
        rec = _Recorder(fail_at)
        monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", rec.resolver)
        monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", rec.connect)
        monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", rec.initialize)
        monkeypatch.setattr(tf.distribute, "TPUStrategy", rec.strategy)
        monkeypatch.delenv("TPU_NAME", raising=False)
        return rec
    return install


@pytest.mark.parametrize("kwargs, address", [
    (dict(use_tpu=True, tpu_name="my-tpu", tpu_zone="us-central1-b", gcp_project="p"),
     "my-tpu"),
    (dict(distribution_strategy="tpu", master="grpc://10.0.0.2:8470"), "grpc://10.0.0.2:8470"),
    (dict(use_tpu=True), "local"),
])
def test_tpu_wiring(fake_tpu, kwargs, address):
    rec = fake_tpu()
    assert get_strategy(**kwargs) is _FAKE_STRATEGY
    assert rec.calls == [("resolve", address, kwargs.get("tpu_zone"), kwargs.get("gcp_project")),
                         ("connect", "RESOLVER"), ("initialize", "RESOLVER"),
                         ("strategy", "RESOLVER")]


@pytest.mark.parametrize("fail_at", ["resolve", "initialize"])
def test_missing_tpu_is_a_clear_error(fake_tpu, fail_at):
    fake_tpu(fail_at)
    with pytest.raises(UserError, match=r"--use_tpu was given but no TPU was found "
                                           r"\(tpu_name='nope', zone='z'"):
        get_strategy(use_tpu=True, tpu_name="nope", tpu_zone="z")


# --- a real 2-replica run, in a fresh process so the CPU can be split first -------------

_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from adapter_bert.training.distribute import get_strategy, split_cpu
    split_cpu(2)  # before anything initialises TensorFlow's devices
    import tensorflow as tf
    import tf_keras as keras
    from adapter_bert.model.config import AdapterConfig, BertConfig
    from adapter_bert.adapters.models import BertClassifier
    from adapter_bert.training.optimizer import create_optimizer

    rng = np.random.default_rng(0)
    x = {"input_ids": rng.integers(1, 60, size=(8, 6)).astype("int32"),
         "input_mask": np.ones((8, 6), "int32"), "segment_ids": np.zeros((8, 6), "int32")}
    y = np.array([0, 1, 1, 0, 1, 0, 0, 1], "int32")
    config = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

    def train(strategy, weights=None):
        with strategy.scope():
            keras.utils.set_random_seed(0)
            model = BertClassifier(config, 2, AdapterConfig(size=4))
            model({k: v[:1] for k, v in x.items()})
            if weights is not None:
                model.set_weights(weights)
            initial = model.get_weights()
            model.compile(optimizer=create_optimizer(1e-2, 4, 0),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
        return initial, history.history["loss"], model.get_weights()

    mirrored = get_strategy("mirrored")
    assert mirrored.num_replicas_in_sync == 2, mirrored.extended.worker_devices
    init, m_loss, m_weights = train(mirrored)
    _, o_loss, o_weights = train(get_strategy("one_device"), weights=init)
    np.savez(sys.argv[1], m_loss=m_loss, o_loss=o_loss,
             moved=max(np.abs(a - b).max() for a, b in zip(init, m_weights)),
             **{f"m{i}": w for i, w in enumerate(m_weights)},
             **{f"o{i}": w for i, w in enumerate(o_weights)})
""")


@pytest.mark.slow
def test_mirrored_two_replicas_match_one_device(tmp_path):
    out = tmp_path / "result.npz"
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(out)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = np.load(out)
    assert len(res["m_loss"]) == 3
    np.testing.assert_allclose(res["m_loss"], res["o_loss"], atol=1e-5)
    assert res["m_loss"][2] < res["m_loss"][1] < res["m_loss"][0]  # it did train
    assert res["moved"] > 1e-3
    count = sum(1 for k in res.files if k.startswith("m") and k[1:].isdigit())
    assert count > 0
    for i in range(count):
        np.testing.assert_allclose(res[f"m{i}"], res[f"o{i}"], atol=1e-5, err_msg=f"weight {i}")


def test_use_tpu_without_the_tpu_build_names_tensorflow_tpu(fake_tpu, monkeypatch):
    from adapter_bert import install_check
    fake_tpu("resolve")
    monkeypatch.setattr(install_check, "has_tpu_support", lambda: False)
    with pytest.raises(UserError, match=r"this TensorFlow is not the TPU build: .*pip install "
                                        r"-e \"\.\[tpu\]\"  \(tensorflow-tpu"):
        get_strategy(use_tpu=True)
    monkeypatch.setattr(install_check, "has_tpu_support", lambda: True)
    with pytest.raises(UserError) as error:
        get_strategy(use_tpu=True)
    assert "tensorflow-tpu" not in str(error.value)  # the TPU build: the TPU is what is missing


def test_num_tpu_cores_when_given_is_the_tpus_core_count():
    from types import SimpleNamespace
    from adapter_bert.training.distribute import check_tpu_cores
    eight = SimpleNamespace(num_replicas_in_sync=8)
    check_tpu_cores(None, eight)
    check_tpu_cores(8, eight)
    with pytest.raises(UserError, match=r"^--num_tpu_cores=4: the TPU has 8 cores, and the run "
                                        r"uses them all; leave --num_tpu_cores out$"):
        check_tpu_cores(4, eight)
