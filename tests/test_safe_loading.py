"""Nothing the package loads can run code: planted pickles in the feature cache or a
backbone folder are refused or ignored, never executed."""

import io
import pickle
import sys
import types

import numpy as np
import pytest

from adapter_bert.data.feature_cache import CACHE_VERSION, FeatureCache, decode, encode
from adapter_bert.data.squad import (SquadFeatureList, convert_examples_to_features,
                                     read_squad_examples)
from adapter_bert.model.checkpoints import CheckpointError, read_hf_weights
from tests.test_run_squad import write_slice


class Planted:
    """Unpickling this writes `marker`: what an attacker's file would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def planted_bytes(marker):
    return pickle.dumps({"input_ids": Planted(marker)})


def test_the_planted_pickle_does_run_code_when_unpickled(tmp_path):
    """The attack the other tests defend against is real."""
    pickle.loads(planted_bytes(tmp_path / "ran"))
    assert (tmp_path / "ran").exists()


def build():
    return {"input_ids": np.arange(6, dtype=np.int32).reshape(2, 3),
            "label_ids": np.array([0, 1], dtype=np.int32)}


@pytest.mark.parametrize("plant", ["pickle", "object_array"])
def test_planted_cache_entry_is_rebuilt_not_executed(tmp_path, plant):
    marker = tmp_path / "ran"
    cache = FeatureCache(str(tmp_path / "cache"))
    path = cache.path("MRPC-train", {"k": 1})
    (tmp_path / "cache").mkdir()
    if plant == "pickle":  # a pickle where the .npz entry should be
        (tmp_path / "cache" / path.rsplit("/", 1)[1]).write_bytes(planted_bytes(marker))
    else:  # a real .npz whose array needs unpickling
        with open(path, "wb") as f:
            np.savez(f, **{"a/input_ids": np.array([Planted(marker)], dtype=object)})
    value = cache.get_or_build("MRPC-train", {"k": 1}, build)
    assert not marker.exists()
    assert cache.hits == 0
    np.testing.assert_array_equal(value["input_ids"], build()["input_ids"])
    again = FeatureCache(cache.directory)  # the planted file was replaced by plain data
    np.testing.assert_array_equal(again.get_or_build("MRPC-train", {"k": 1}, None)["label_ids"],
                                  [0, 1])
    assert again.hits == 1


def test_old_pickle_entries_are_never_read(tmp_path):
    """Caches before version 3 were pickles named *.pkl; the key changed with CACHE_VERSION."""
    assert CACHE_VERSION >= 3
    marker = tmp_path / "ran"
    cache = FeatureCache(str(tmp_path))
    (tmp_path / ("MRPC-train-" + cache.key({"k": 1}) + ".pkl")).write_bytes(planted_bytes(marker))
    cache.get_or_build("MRPC-train", {"k": 1}, build)
    assert not marker.exists() and cache.path("MRPC-train", {"k": 1}).endswith(".npz")


def test_squad_features_round_trip_as_plain_arrays(uncased_tokenizer, squad_dir, tmp_path):
    dev = write_slice(squad_dir / "train-v1.1-subset.json", tmp_path / "t.json",
                      paragraphs=2)
    features = convert_examples_to_features(read_squad_examples(str(dev), True),
                                            uncased_tokenizer, 64, 16, 16, True)
    features.inexact_ids.append("q-extra")  # list attributes survive too
    features.num_inexact += 1
    data = encode(features)
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        assert all(archive[name].dtype != object for name in archive.files)
    back = decode(data)
    assert isinstance(back, SquadFeatureList) and len(back) == len(features) > 4
    assert vars(back) == vars(features)
    for a, b in zip(features, back):
        assert type(a) is type(b)
        for name, value in vars(a).items():
            if isinstance(value, np.ndarray):
                assert value.dtype == getattr(b, name).dtype
                np.testing.assert_array_equal(value, getattr(b, name))
            else:
                assert getattr(b, name) == value and type(getattr(b, name)) is type(value)


def test_unplain_values_are_not_cached(tmp_path):
    cache = FeatureCache(str(tmp_path))
    assert cache.get_or_build("x", {}, lambda: {"text": np.array(["a"], dtype=object)})
    assert cache.get_or_build("y", {}, lambda: SquadFeatureList()) == []
    assert not list(tmp_path.iterdir())


def test_planted_pytorch_bin_without_torch_is_refused(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    (tmp_path / "pytorch_model.bin").write_bytes(planted_bytes(marker))
    monkeypatch.setitem(sys.modules, "torch", None)  # as on a machine without PyTorch
    with pytest.raises(CheckpointError, match="needs PyTorch"):
        read_hf_weights(str(tmp_path / "pytorch_model.bin"))
    assert not marker.exists()


class _WeightsOnlyUnpickler(pickle.Unpickler):
    """What torch.load(weights_only=True) does: no globals outside an allow-list."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"Unsupported global: {module}.{name}")


def _stub_torch(calls):
    def load(f, map_location=None, weights_only=None):
        calls.append(weights_only)
        if weights_only:
            return _WeightsOnlyUnpickler(f).load()
        return pickle.load(f)  # torch's full unpickler: runs the planted code
    return types.SimpleNamespace(load=load)


def test_planted_pytorch_bin_is_loaded_weights_only(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    (tmp_path / "pytorch_model.bin").write_bytes(planted_bytes(marker))
    calls = []
    monkeypatch.setitem(sys.modules, "torch", _stub_torch(calls))
    with pytest.raises(CheckpointError, match="refused"):
        read_hf_weights(str(tmp_path / "pytorch_model.bin"))
    assert calls == [True] and not marker.exists()


@pytest.mark.torch
def test_planted_pytorch_bin_with_real_torch(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "pytorch_model.bin").write_bytes(planted_bytes(marker))
    with pytest.raises(CheckpointError, match="refused"):
        read_hf_weights(str(tmp_path / "pytorch_model.bin"))
    assert not marker.exists()
