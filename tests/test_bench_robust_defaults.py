"""bench/robust_defaults.py: the runs' commands, claims between drivers, resuming, the
--modes flag, and the drivers of tables built on the runs."""

import argparse
import json
import os
import subprocess
import sys

import pytest

from adapter_bert.io_utils import folders
from tests.conftest import bench_module

bench = bench_module("robust_defaults")
suites = bench_module("robust_suites")
tables = bench_module("robust_tables")


def test_commands_carry_no_optimizer_flag_beyond_rate_and_epochs(tmp_path):
    spec = suites.suite_specs("mrpc")[0]
    command = bench.command_for(spec, str(tmp_path / "out"), str(tmp_path))
    optimizer_flags = [a for a in command if a.split("=")[0] in (
        "--adam_bias_correction", "--noadam_bias_correction", "--warmup_proportion",
        "--train_pooler", "--tuning_mode")]
    assert optimizer_flags == []
    assert "--learning_rate=1e-3" in command and "--num_train_epochs=3" in command
    full = bench.command_for(suites.glue_spec("rte", "full", "2e-5", 3, 43),
                             str(tmp_path / "o"), str(tmp_path))
    assert "--tuning_mode=full" in full and "--task_name=RTE" in full


def test_claims_keep_drivers_apart_and_finished_orphans_are_adopted(tmp_path):
    args = argparse.Namespace(work_dir=str(tmp_path / "work"),
                              results_dir=str(tmp_path / "results" / "robust_defaults"))
    os.makedirs(args.work_dir)
    os.makedirs(args.results_dir)
    spec = suites.suite_specs("mrpc")[0]
    claim_path = os.path.join(args.work_dir, suites.run_id(spec) + ".claim")
    # A live process (our parent) holds the run: no claim, nothing to adopt.
    with open(claim_path, "w") as f:
        f.write(f"{os.getppid()} 100.0")
    assert not bench.claim(spec, args) and bench.adopt(spec, args) is None
    # Its process has ended and left its results: the run is recorded, not re-run.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    with open(claim_path, "w") as f:
        f.write(f"{dead} 100.0")
    output_dir = os.path.join(args.work_dir, suites.run_id(spec))
    os.makedirs(output_dir)
    with open(os.path.join(output_dir, "eval_results.txt"), "w") as f:
        f.write("eval_accuracy = 0.8\neval_f1 = 0.86\ntrainable_params = 753794\ntrainable_percent = 3.2339\n")
    with open(os.path.join(output_dir, "run.log"), "w") as f:
        f.write("I1123 common.py:222] Optimizer: bias-corrected AdamW, learning rate 0.001\n")
    bench.adopt_finished([spec], args)
    record = json.loads(open(os.path.join(args.results_dir,
                                          suites.run_id(spec) + ".json")).read())
    assert record["dev_accuracy"] == pytest.approx(80.0) and record["dev_f1"] == 86.0
    assert record["optimizer_log"] == "bias-corrected AdamW, learning rate 0.001"
    assert "--learning_rate=1e-3" in record["command"]
    # A dead claim without results is taken over.
    other = suites.suite_specs("mrpc")[1]
    with open(os.path.join(args.work_dir, suites.run_id(other) + ".claim"), "w") as f:
        f.write(f"{dead} 100.0")
    assert bench.claim(other, args)
    assert bench.read_claim(os.path.join(args.work_dir, suites.run_id(other) + ".claim"))[0] \
        == os.getpid()


def test_modes_flag_runs_only_that_modes_cells(tmp_path, monkeypatch):
    picked = []
    monkeypatch.setattr(bench, "run_pending", lambda specs, args: picked.extend(specs) or True)
    monkeypatch.setattr("sys.argv", ["robust_defaults", "--suites=stability", "--modes=full",
                                     f"--work_dir={tmp_path / 'work'}",
                                     f"--results_dir={tmp_path / 'results'}"])
    bench.main()
    assert {s["mode"] for s in picked} == {"full"}
    assert {(s["task"], s["lr"]) for s in picked} == {(t, lr) for t in ("mrpc", "rte")
                                                      for lr in ("2e-5", "5e-5")}
    assert len(picked) == 12
    monkeypatch.setattr("sys.argv", ["robust_defaults", "--modes=frozen"])
    with pytest.raises(SystemExit):
        bench.main()


def test_long_runs_resume_from_their_checkpoint_and_add_up_wall_time(tmp_path, monkeypatch):
    """A squad_full run killed mid-way keeps its folder; a short run starts over."""
    script = tmp_path / "fake_runner.py"
    script.write_text("import json, os, sys, time\n"
                      "time.sleep(0.3)  # so the added time survives rounding to 0.1 s\n"
                      "out = sys.argv[1]\n"
                      "json.dump({'exact_match': 1.0, 'f1': 2.0},"
                      " open(os.path.join(out, 'eval_results.json'), 'w'))\n")
    monkeypatch.setattr(bench, "command_for", lambda spec, out, work: [str(script), out])
    args = type("Args", (), {"work_dir": str(tmp_path)})()
    long_spec = suites.suite_specs("squad_full")[0]
    short_spec = suites.suite_specs("squad")[0]
    assert long_spec["save_checkpoints_steps"] == 100 and "save_checkpoints_steps" not in short_spec
    for spec in (long_spec, short_spec):
        folder = tmp_path / suites.run_id(spec)
        (folder / "checkpoints").mkdir(parents=True)  # where the runners keep them
        (folder / "checkpoints" / "checkpoint").write_text("model_checkpoint_path: 'ckpt-3'\n")
        (folder / "bench_wall_s").write_text("3600.0")
        # As the run and the benchmark list them.
        folders.write_manifest(str(folder), ["checkpoints/checkpoint", "bench_wall_s"])
    long_record = bench.run_one(long_spec, args)
    short_record = bench.run_one(short_spec, args)
    assert (tmp_path / suites.run_id(long_spec) / "checkpoints" / "checkpoint").exists()
    assert not (tmp_path / suites.run_id(short_spec) / "checkpoints").exists()
    assert 3600.2 <= long_record["wall_s"] < 3700.0
    assert 0.2 <= short_record["wall_s"] < 100.0
    assert long_record["f1"] == 2.0


@pytest.mark.parametrize("suite,tag,flag,default,variant", [
    ("squad_padding", "fixedpad", "--padding=max_seq_length", "dynamic", "max_seq_length"),
    ("squad_optimizer", "corrected", "--adam_bias_correction", "default", "bias-corrected"),
])
def test_squad_variant_suites_pair_each_seed_and_share_the_default_run(
        tmp_path, written_data, monkeypatch, suite, tag, flag, default, variant):
    # The suite's commands cut their SQuAD files from the data folder: the written one here.
    monkeypatch.setattr(bench, "SHARED", str(written_data))
    specs = suites.suite_specs(suite)
    ids = [suites.run_id(s) for s in specs]
    assert len(set(ids)) == 6
    assert "squad_minilm_adapter_1e-3_2ep_1500q_seed42" in ids  # the squad suite's run
    assert f"squad_minilm_adapter_1e-3_2ep_1500q_{tag}_seed42" in ids
    plain, other = (bench.command_for(s, str(tmp_path / "o"), str(tmp_path)) for s in specs[:2])
    assert flag in other and flag not in plain
    assert [a for a in plain if a.startswith(flag.split("=")[0])] == []
    records = {suites.run_id(s): {"exact_match": 30.0 + i, "f1": 40.0 + 2 * i, "wall_s": 600.0,
                                 "command": "python run_squad.py ..."}
               for i, s in enumerate(specs[:3])}
    lines = tables.suite_table(suite, records)["lines"]
    # Seeds 42 and 43 of the default done (F1 40 and 44), seed 42 of the variant (F1 42).
    assert f"| 1e-3 x 2 | {default} | 2 | 31.00 ± 1.41 | 42.00 ± 2.83 |" in lines
    assert f"| 1e-3 x 2 | {variant} | 1 | 31.00 | 42.00 |" in lines
    assert any(f"| {variant} | 43 | — | — | not run yet |" in line for line in lines)


def test_table_driver_rewrites_its_own_table_after_each_run_and_not_the_suites(
        tmp_path, monkeypatch):
    specs = suites.suite_specs("mrpc")[:2]
    done, rewritten = [], []
    monkeypatch.setattr(bench, "run_one", lambda spec, args: done.append(spec) or _result(spec))
    monkeypatch.setattr(bench, "write_tables", lambda *a: pytest.fail("suite tables rewritten"))

    def write_table(results_dir):
        # What the table sees: every run recorded so far.
        rewritten.append(sorted(p.name for p in (tmp_path / "results").iterdir()))

    args = argparse.Namespace(work_dir=str(tmp_path / "work"),
                              results_dir=str(tmp_path / "results"), tables_only=False)
    assert bench.run_table_suite(specs, args, write_table) == 0
    assert done == specs
    first, second = (suites.run_id(s) + ".json" for s in specs)
    assert rewritten == [[first], sorted([first, second]), sorted([first, second])]
    # Run again: nothing left to run, the table is written once.
    assert bench.run_table_suite(specs, args, write_table) == 0
    assert len(done) == 2 and len(rewritten) == 4


def _result(spec):
    return {"run": suites.run_id(spec), **spec, "command": "python run_classifier.py ...",
            "wall_s": 60.0, "dev_accuracy": 80.0, "dev_f1": 86.0}


def test_the_tf1_backbone_folder_is_replaced_only_when_it_holds_its_own_files(tmp_path):
    folder = tmp_path / "minilm_tf1"
    bench.write_tf1(str(folder))
    written = {"bert_config.json", "vocab.txt", "bert_model.ckpt.index",
               "bert_model.ckpt.data-00000-of-00001"}
    assert folders.read_manifest(str(folder)) == written
    bench.write_tf1(str(folder))  # its own folder: replaced
    assert folders.read_manifest(str(folder)) == written
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(folders.ForeignFileError, match="notes.txt that adapter_bert did not "
                                                       "write; nothing was replaced"):
        bench.write_tf1(str(folder))
    assert (folder / "notes.txt").exists() and (folder / "vocab.txt").exists()
