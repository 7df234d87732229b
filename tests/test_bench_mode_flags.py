"""The per-mode optimizer flags of the adapter-vs-full benchmarks (bench/mode_flags.py)."""

import argparse

import pytest

from tests.conftest import bench_module

mode_flags = bench_module("mode_flags")


def parse(argv):
    parser = argparse.ArgumentParser(prog="bench")
    mode_flags.add_mode_arguments(parser)
    args = parser.parse_args(argv)
    mode_flags.check_mode_arguments(parser, args)
    return args


def test_defaults_are_each_modes_usual_rate_and_googles_adam_passed_explicitly():
    args = parse([])
    assert mode_flags.modes(args) == ["adapter", "full"]
    assert mode_flags.mode_flags("adapter", args) == [
        "--tuning_mode=adapter", "--learning_rate=1e-3", "--noadam_bias_correction"]
    assert mode_flags.mode_flags("full", args) == [
        "--tuning_mode=full", "--learning_rate=5e-5", "--noadam_bias_correction"]


@pytest.mark.parametrize("argv, corrected", [
    (["--bias_correction"], {"adapter", "full"}),
    (["--bias_correction=adapter"], {"adapter"}),
    (["--bias_correction=full,adapter"], {"adapter", "full"}),
    ([], set()),
])
def test_bias_correction_is_chosen_per_mode(argv, corrected):
    args = parse(argv + ["--adapter_lr=2e-3"])
    for mode in ("adapter", "full"):
        flags = mode_flags.mode_flags(mode, args)
        assert ("--adam_bias_correction" in flags) == (mode in corrected)
        assert ("--noadam_bias_correction" in flags) == (mode not in corrected)
        row = mode_flags.row_fields(mode, args)
        assert row["bias_correction"] == (mode in corrected)
        label = mode_flags.optimizer_label(row)
        assert label.endswith("bias-corrected" if mode in corrected else "Google (uncorrected)")
    assert "--learning_rate=2e-3" in mode_flags.mode_flags("adapter", args)


@pytest.mark.parametrize("argv, flag", [(["--modes=adapter,lora"], "--modes"),
                                        (["--bias_correction=adaptr"], "--bias_correction")])
def test_unknown_modes_are_refused_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse(argv)
    assert exit_info.value.code == 2
    assert f"{flag}: unknown mode(s)" in capsys.readouterr().err


def test_rows_of_older_results_are_read_from_their_command():
    old = "run_classifier.py --tuning_mode=adapter --learning_rate=1e-3 --seed=42"
    assert mode_flags.optimizer_label({"command": old}) == "1e-3, Google (uncorrected)"
    corrected = {"command": old + " --adam_bias_correction"}
    assert mode_flags.optimizer_label(corrected) == "1e-3, bias-corrected"
