"""bench/dtype_parity.py and bench/dtype_speed.py: run ids, the parity verdicts, the speed ratios."""

import pytest

from tests.conftest import bench_module

dtype_parity = bench_module("dtype_parity")
dtype_speed = bench_module("dtype_speed")
robust_defaults = bench_module("robust_defaults")
robust_suites = bench_module("robust_suites")
harness = bench_module("harness")


def test_bfloat16_runs_have_their_own_ids_and_float32_ones_share_the_suites():
    fp32 = dtype_parity.spec("mrpc", "adapter", "1e-3", 3, 43)
    bf16 = dtype_parity.spec("mrpc", "adapter", "1e-3", 3, 43, "mixed_bfloat16")
    assert robust_suites.run_id(fp32) == "mrpc_minilm_adapter_1e-3_3ep_seed43"
    assert robust_suites.run_id(bf16) == "mrpc_minilm_adapter_1e-3_3ep_bf16_seed43"
    squad = dtype_parity.spec("squad", "adapter", "1e-3", 2, 42, "mixed_bfloat16")
    assert robust_suites.run_id(squad) == "squad_minilm_adapter_1e-3_2ep_1500q_bf16_seed42"
    ids = [robust_suites.run_id(s) for s in dtype_parity.specs()]
    assert len(ids) == len(set(ids)) == 4 * 3 * 2


def test_commands_name_their_dtype_whatever_the_default(tmp_path):
    for dtype in ("float32", "mixed_bfloat16"):
        run = dtype_parity.spec("mrpc", "full", "5e-5", 3, 42, dtype)
        command = robust_defaults.command_for(run, str(tmp_path / "out"), str(tmp_path))
        assert f"--dtype={dtype}" in command and "--tuning_mode=full" in command


def _cell(values, f1=None):
    return {"seeds": [42, 43, 44][:len(values)],
            "dev_accuracy": harness.seed_stats(values),
            "dev_f1": harness.seed_stats(f1 or [v + 5 for v in values])}


@pytest.mark.parametrize("bf16,verdict", [
    ([82.0, 81.5, 82.5], "pass"),                     # equal means
    ([81.6, 81.1, 82.1], "pass"),                     # 0.4 lower: within 0.5
    ([81.2, 80.7, 81.7], "miss: accuracy -0.80, f1 -0.80"),
    ([84.0, 83.5, 77.5], "miss: a seed at 77.50"),    # mean higher, one seed below 78
    ([82.0, 81.5], "pending"),                        # a seed missing
])
def test_mrpc_verdicts(bf16, verdict):
    assert dtype_parity.verdict("mrpc", _cell([82.0, 81.5, 82.5]), _cell(bf16)) == verdict


def test_squad_verdict_allows_one_f1():
    def cell(f1):
        return {"seeds": [42, 43, 44], "f1": harness.seed_stats(f1)}
    assert dtype_parity.verdict("squad", cell([50.0, 50, 50]), cell([49.1, 49.1, 49.1])) == "pass"
    assert dtype_parity.verdict("squad", cell([50.0, 50, 50]), cell([48.5, 48.5, 48.5])) \
        == "miss: F1 -1.50"


def test_speed_ratios_compare_the_default_dtype():
    rows = {f"{system} {kind} {dtype}": {"examples_per_s": rate}
            for (system, kind, dtype), rate in {
                ("adapter-bert", "train", "float32"): 40.0,
                ("adapter-bert", "train", "bfloat16"): 60.0,
                ("AdapterHub", "train", "float32"): 20.0,
                ("AdapterHub", "train", "bfloat16"): 30.0,
                ("adapter-bert", "infer", "float32"): 100.0,
                ("adapter-bert", "infer", "bfloat16"): 150.0,
                ("AdapterHub", "infer", "float32"): 50.0,
                ("AdapterHub", "infer", "bfloat16"): 120.0}.items()}
    bf16 = dtype_speed.ratios(rows, "bfloat16")
    assert bf16["train: default / AdapterHub same dtype"] == 2.0
    assert bf16["train: default / our float32"] == 1.5
    assert bf16["infer: default / AdapterHub same dtype"] == 1.25
    fp32 = dtype_speed.ratios(rows, "float32")
    assert fp32["train: default / our float32"] == 1.0
    assert fp32["infer: default / AdapterHub same dtype"] == 2.0
