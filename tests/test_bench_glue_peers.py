"""bench/glue_peers.py and bench/peer_glue.py: the peers' GLUE runs over seeds, their
records, and their rows in the GLUE table."""

import json
import sys

import numpy as np
import pytest

from adapter_bert.metrics.classification import compute_metrics
from tests.conftest import bench_module

glue_peers = bench_module("glue_peers")
glue_table = bench_module("glue_table")
peer_glue = bench_module("peer_glue")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_peer_scores_match_the_packages_glue_metrics(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, 200).tolist()
    predictions = [y if rng.random() < 0.7 else 1 - y for y in labels]
    ours = peer_glue.scores(predictions, labels)
    mrpc = compute_metrics("accuracy_f1", predictions, labels)
    assert ours["dev_accuracy"] == pytest.approx(100 * mrpc["accuracy"], rel=1e-12)
    assert ours["dev_f1"] == pytest.approx(100 * mrpc["f1"], rel=1e-12)
    assert ours["dev_mcc"] == pytest.approx(100 * compute_metrics("mcc", predictions, labels)["mcc"],
                                            rel=1e-12)


def test_peer_scores_of_one_class_output_are_mcc_zero():
    labels = [0, 1, 1, 0, 1]
    ours = peer_glue.scores([1] * 5, labels)
    assert ours["dev_mcc"] == 0.0 == 100 * compute_metrics("mcc", [1] * 5, labels)["mcc"]
    assert ours["dev_accuracy"] == 60.0 and ours["dev_f1"] == pytest.approx(75.0)


def test_peer_reads_cola_without_header_and_rte_with_string_labels(tmp_path):
    (tmp_path / "train.tsv").write_text("gj04\t1\t\tThe cat sat.\ngj04\t0\t*\tCat the sat.\n")
    texts, labels = peer_glue.read_split(str(tmp_path), "train", peer_glue.TASKS["cola"])
    assert texts == [("The cat sat.",), ("Cat the sat.",)] and labels == [1, 0]
    (tmp_path / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n"
                                      "0\tA \"quoted\" man.\tA man.\tentailment\n"
                                      "1\tA dog.\tA cat.\tnot_entailment\n")
    texts, labels = peer_glue.read_split(str(tmp_path), "dev", peer_glue.TASKS["rte"])
    assert texts == [('A "quoted" man.', "A man."), ("A dog.", "A cat.")] and labels == [0, 1]


FAKE_PEER = """
import json, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
if args["task"] == "rte":
    sys.exit("boom: no RTE here")
mcc = {"42": 20.0, "43": 24.0, "44": 22.0}[args["seed"]]
print("warming up")
print(json.dumps({"dev_mcc": mcc, "dev_accuracy": 70.0, "dev_f1": 80.0, "task": args["task"],
                  "system": args["system"], "seed": int(args["seed"]), "wall_s": 5.0,
                  "trainable_params": 26, "total_params": 1000}))
"""


def _fake_peer(tmp_path, monkeypatch):
    script = tmp_path / "fake_peer.py"
    script.write_text(FAKE_PEER)
    monkeypatch.setattr(glue_peers, "PEER_SCRIPT", str(script))
    return ["--peer_python=" + sys.executable, "--glue_dir=" + str(tmp_path),
            "--results_dir=" + str(tmp_path / "records"), "--systems=adapterhub"]


def test_suite_writes_one_record_per_seed_and_resumes(tmp_path, monkeypatch):
    flags = _fake_peer(tmp_path, monkeypatch)
    assert glue_peers.main(flags + ["--tasks=cola"]) == 0
    records = glue_peers.read_peer_records(str(tmp_path / "records"))
    assert sorted(records) == [f"cola_adapterhub_1e-3_seed{s}" for s in (42, 43, 44)]
    assert records["cola_adapterhub_1e-3_seed43"]["dev_mcc"] == 24.0
    assert "--data_dir=$GLUE_DIR/CoLA" in records["cola_adapterhub_1e-3_seed43"]["command"]
    # A finished run is not run again: its record stays as it was.
    path = tmp_path / "records" / "cola_adapterhub_1e-3_seed42.json"
    path.write_text(json.dumps({**records["cola_adapterhub_1e-3_seed42"], "dev_mcc": 1.0}))
    assert glue_peers.main(flags + ["--tasks=cola"]) == 0
    assert json.loads(path.read_text())["dev_mcc"] == 1.0


def test_a_failed_peer_run_names_itself_and_writes_nothing(tmp_path, monkeypatch, capsys):
    flags = _fake_peer(tmp_path, monkeypatch)
    assert glue_peers.main(flags + ["--tasks=rte"]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("rte_adapterhub_1e-3_seed42: peer run failed")
    assert "boom: no RTE here" in error[0]
    assert glue_peers.read_peer_records(str(tmp_path / "records")) == {}


def test_unknown_task_is_one_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        glue_peers.main(["--peer_python=x", "--tasks=cola,qnli"])
    assert "--tasks: unknown qnli; expected some of cola, sst-2, mrpc, rte" in capsys.readouterr().err


def test_table_shows_the_peers_over_seeds_beside_the_seed_42_reference(tmp_path, monkeypatch):
    flags = _fake_peer(tmp_path, monkeypatch)
    glue_peers.main(flags + ["--tasks=cola"])
    _, lines = glue_table.table({}, glue_peers.read_peer_records(str(tmp_path / "records")))
    adapterhub = next(line for line in lines if line.startswith(
        "| AdapterHub Houlsby (size 64), 1e-3 x 3, bias-corrected |"))
    # CoLA over seeds 42-44 (20, 24, 22), the other tasks not run, 26 of 1000 weights trained.
    assert adapterhub.split(" | ")[1:3] == ["22.00 ± 2.00", "—"] and adapterhub.endswith("| 2.6% |")
    # Full fine-tuning was not run over seeds: only its seed-42 row.
    assert not [line for line in lines if line.startswith(
        "| PyTorch `transformers` full fine-tuning, 5e-5 x 3 |")]
    assert lines[-2].startswith("| AdapterHub Houlsby (size 64), 1e-3 x 3, bias-corrected, seed 42 | 22.86")
    # The seed-42 runs cover the small tasks: (22.86 + 86.49 + 56.32) / 3.
    assert lines[-2].endswith("| — | 55.22 | 2.6% |")
