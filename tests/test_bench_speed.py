"""bench/speed.py arithmetic: epoch extrapolation and the targets table."""

import argparse
import json
import os

import pytest

from tests.conftest import REPO, bench_module

speed = bench_module("speed")


def test_epoch_time_leaves_the_tracing_step_out_and_scales_the_rest():
    # 3 steady steps of 0.5 s after a 20 s first step; a 115-step epoch.
    timed = speed.epoch_seconds([20.0, 0.5, 0.4, 0.6], 115)
    assert timed["epoch_seconds"] == 115 * 0.5
    assert timed["first_step_seconds"] == 20.0 and timed["timed_steps"] == 4


def test_targets_compare_fixed_and_dynamic_epochs_from_the_stored_results():
    results = json.loads((REPO / "bench/results/speed.json").read_text())
    results["epoch"] = {"max_seq_length": {"epoch_seconds": 200.0, "first_step_seconds": 9.0},
                        "dynamic": {"epoch_seconds": 80.0}}
    rows = {name: (value, met) for name, value, _, met, _ in speed.targets(results)}
    assert rows["MRPC epoch: fixed 128 / dynamic padding time"] == (2.5, True)
    table = speed.markdown(results)
    assert "| padding: max_seq_length | 200 | 9.0 |" in table
    assert "| padding: dynamic | 80 | n/a |" in table


def test_train_flops_count_both_attention_gradients_in_every_mode():
    from adapter_bert.model.config import BertConfig
    minilm = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                        num_attention_heads=12, intermediate_size=1536)
    # Per example and layer at seq 128, by hand: dense 2*128*(4*384^2 + 2*384*1536)
    # = 452,984,832; attention 4*128^2*384 = 25,165,824; two 64-unit adapters
    # 2 * 4*128*384*64 = 25,165,824. Training adds half of the attention FLOPs again:
    # the scores product recomputed for the softmax gradient.
    dense, attention, adapters = 452_984_832, 25_165_824, 25_165_824
    assert speed.forward_flops(minilm, 128) == 6 * (dense + attention)
    assert speed.train_flops(minilm, 128, "full") == 6 * (3 * dense + 3.5 * attention)
    assert speed.train_flops(minilm, 128, "layernorm") == 6 * (2 * dense + 3.5 * attention)
    assert speed.train_flops(minilm, 128, "adapter", 64) == \
        6 * (2 * dense + 3.5 * attention + 3 * adapters)
    bound = speed.train_flops(minilm, 128, "full") / speed.train_flops(minilm, 128, "adapter", 64)
    assert 1.35 < bound < 1.36                 # the ceiling on adapter tuning's speed-up


def _args(**overrides):
    values = dict(seq=128, batch=32, steps=20, warmup=5, epoch_fraction=0.5, rounds=3)
    values.update(overrides)
    return argparse.Namespace(**values)


def test_parts_not_measured_come_from_the_earlier_results(tmp_path, monkeypatch):
    earlier = {"settings": {"seq": 128, "batch": 32, "cpu_count": os.cpu_count()},
               "roof": {"r": 1}, "train": {"t": 2}, "infer": {"i": 3}, "epoch": {"old": 4}}
    path = tmp_path / "speed.json"
    path.write_text(json.dumps(earlier))
    previous = speed.previous_results(str(path), _args(), ["epoch"])
    monkeypatch.setattr(speed, "run_worker", lambda kind, args, **options: {kind: options})
    results = speed.measure(_args(), ["epoch"], previous)
    assert results["train"] == {"t": 2} and results["roof"] == {"r": 1}
    assert results["epoch"] == {"max_seq_length": {"epoch": {"padding": "max_seq_length"}},
                                "dynamic": {"epoch": {"padding": "dynamic"}}}


def test_parts_refuse_earlier_results_of_another_shape_or_none(tmp_path):
    path = tmp_path / "speed.json"
    with pytest.raises(ValueError, match="does not exist"):
        speed.previous_results(str(path), _args(), ["epoch"])
    path.write_text(json.dumps({"settings": {"seq": 64, "batch": 32}}))
    with pytest.raises(ValueError, match="seq=64, this run has seq=128"):
        speed.previous_results(str(path), _args(), ["train"])
    assert speed.previous_results(str(path), _args(), list(speed.PARTS)) == {}


def test_target_rows_alternate_and_report_their_median_run(monkeypatch):
    calls = []
    step_ms = {"adapter": iter([800.0, 760.0, 790.0]), "full": iter([990.0, 1000.0, 950.0])}

    def worker(kind, args, mode, dtype, xla):
        label = mode if (dtype, xla) == ("float32", False) else f"{mode} {dtype} {xla}"
        calls.append(label)
        ms = next(step_ms[label]) if label in step_ms else 500.0
        return {"step_ms": ms, "examples_per_s": 32000 / ms, "train_flops_per_example": 1e9}
    monkeypatch.setattr(speed, "run_worker", worker)
    train = speed._measure_train(_args())
    assert calls[:6] == ["adapter", "full"] * 3
    assert len(calls) == 6 + len(speed.TRAIN_ROWS) - 2     # the other rows run once
    assert train["adapter"]["step_ms"] == 790.0 and train["full"]["step_ms"] == 990.0
    assert train["adapter"]["round_step_ms"] == [800.0, 760.0, 790.0]
    assert "round_step_ms" not in train["layernorm"]
    assert speed._rounds_note(train)[1] == (
        "Rows adapter and full: the run with the median step time of 3 alternating runs "
        "(step times: adapter 800, 760, 790 ms; full 990, 1000, 950 ms).")
