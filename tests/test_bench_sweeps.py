"""bench/adapter_sweeps.py: planning, data subsets, aggregation and plotting on fabricated
results, and one tiny end-to-end sweep on a random 2-layer backbone."""

import json

import pytest

from tests.conftest import BERT_VOCAB, bench_module


@pytest.fixture(scope="module")
def sweeps():
    return bench_module("adapter_sweeps")


def test_plan_runs_shared_points_once(sweeps):
    points = sweeps.plan_points([8, 64], [1e-3, 1e-1], size_init_scale=1e-3, init_scale_size=64,
                                top_k=[1, 2])
    keys = [p["key"] for p in points]
    assert keys == ["adapter_s8_i0.001", "adapter_s64_i0.001", "adapter_s64_i0.1", "layernorm",
                    "top_k1", "top_k2"]
    shared = points[1]
    assert shared["groups"] == ["size", "init_scale"]
    rates = {"adapter": 1e-3, "layernorm": 2e-3, "top_k": 1e-4}
    assert sweeps.point_flags(shared, rates) == [
        "--tuning_mode=adapter", "--learning_rate=0.001", "--adapter_size=64",
        "--adapter_init_scale=0.001"]
    assert sweeps.point_flags(points[-1], rates) == [
        "--tuning_mode=top_k", "--learning_rate=0.0001", "--top_k_layers=2"]
    assert sweeps.point_flags(points[3], rates)[1] == "--learning_rate=0.002"


def test_subset_keeps_header_other_files_and_a_seeded_sample(sweeps, tmp_path):
    data = tmp_path / "MRPC"
    data.mkdir()
    rows = [f"{i % 2}\t{i}\t{i}\tsentence a {i}\tsentence b {i}\n" for i in range(50)]
    (data / "train.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n" + "".join(rows))
    (data / "dev.tsv").write_text("header\nrow\n")
    out = sweeps.subset_task_dir(str(data), "MRPC", 10, str(tmp_path / "sub"), seed=1)
    lines = (tmp_path / "sub" / "train.tsv").read_text().splitlines(keepends=True)
    assert lines[0].startswith("Quality") and len(lines) == 11
    assert set(lines[1:]) <= set(rows)
    ids = [int(line.split("\t")[1]) for line in lines[1:]]
    assert ids == sorted(ids)  # file order kept
    assert (tmp_path / "sub" / "dev.tsv").read_text() == "header\nrow\n"
    again = sweeps.subset_task_dir(str(data), "MRPC", 10, str(tmp_path / "sub2"), seed=1)
    assert (tmp_path / "sub2" / "train.tsv").read_text() == "".join(lines)
    assert out == str(tmp_path / "sub") and again == str(tmp_path / "sub2")
    assert sweeps.subset_task_dir(str(data), "MRPC", 500, str(tmp_path / "x")) == str(data)
    # CoLA files have no header: every line is an example.
    (data / "train.tsv").write_text("".join(rows))
    sweeps.subset_task_dir(str(data), "CoLA", 10, str(tmp_path / "cola"))
    assert len((tmp_path / "cola" / "train.tsv").read_text().splitlines()) == 10


def _fabricated_rows(sweeps):
    points = sweeps.plan_points([8, 64, 256], [1e-4, 1e-2, 1.0], 1e-3, 64, [1, 2])
    values = {"adapter_s8_i0.001": (0.70, 237026), "adapter_s64_i0.001": (0.75, 753794),
              "adapter_s256_i0.001": (0.77, 2525570), "adapter_s64_i0.0001": (0.74, 753794),
              "adapter_s64_i0.01": (0.76, 753794), "adapter_s64_i1": (0.60, 753794),
              "layernorm": (0.69, 158594), "top_k1": (0.72, 1921922), "top_k2": (0.73, 3694850)}
    rows = []
    for point in points:
        accuracy, trainable = values[point["key"]]
        results = {"eval_accuracy": accuracy, "eval_f1": accuracy + 0.1, "eval_loss": 0.5,
                   "global_step": 93.0, "trainable_params": float(trainable),
                   "all_params": 23309186.0, "loss": 0.5}
        rows.append(sweeps.make_row(point, results, 61.0, "run_classifier.py ..."))
    return rows


def test_series_group_and_sort_the_points(sweeps):
    rows = _fabricated_rows(sweeps)
    data = sweeps.series(rows, "eval_accuracy")
    assert [size for _, _, size in data["size"]] == [8, 64, 256]
    assert [x for x, _, _ in data["size"]] == [237026, 753794, 2525570]
    assert [(x, y) for x, y, _ in data["init_scale"]] == [(1e-4, 0.74), (1e-2, 0.76), (1.0, 0.60)]
    assert data["layernorm"] == [(158594, 0.69, None)]
    assert [k for _, _, k in data["top_k"]] == [1, 2]
    assert sweeps.series(rows, "eval_mcc") == {"size": [], "init_scale": [], "layernorm": [],
                                              "top_k": []}


def test_outputs_json_markdown_and_plot(sweeps, tmp_path):
    rows = _fabricated_rows(sweeps)
    rows[0]["eval_accuracy"] = 0.7012
    paths = sweeps.write_outputs({"settings": {"epochs": 3}, "rows": rows},
                                 str(tmp_path / "res" / "sweep"), "eval_accuracy", "title")
    stored = json.loads(open(paths["json"]).read())
    assert len(stored["rows"]) == 9 and stored["settings"] == {"epochs": 3}
    table = open(paths["markdown"]).read().splitlines()
    assert table[0] == ("| run | sweep | trainable params | trainable% | dev accuracy | dev f1 "
                        "| wall time |")
    assert len(table) == 2 + 9
    assert "| adapter 8 (init 1e-03) | size | 237,026 | 1.02 | 70.12 | 80.00 | 1.0 min |" in table
    assert table[2].startswith("| adapter 8")  # size sweep first, by trainable params
    assert table[-1].startswith("| top-2")
    with open(paths["plot"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # Resuming: same settings -> the rows come back by key; other settings -> nothing.
    assert set(sweeps.previous_rows(paths["json"], {"epochs": 3})) == {r["key"] for r in rows}
    assert sweeps.previous_rows(paths["json"], {"epochs": 4}) == {}


def test_eval_results_are_parsed(sweeps, tmp_path):
    path = tmp_path / "eval_results.txt"
    path.write_text("eval_accuracy = 0.75\neval_f1 = 0.8\nglobal_step = 93\nnote = text\n")
    assert sweeps.read_eval_results(str(path)) == {"eval_accuracy": 0.75, "eval_f1": 0.8,
                                                   "global_step": 93.0, "note": "text"}


@pytest.mark.slow
def test_tiny_sweep_end_to_end(sweeps, mrpc_dir, tmp_path):
    """Two real points (adapter size 4, LayerNorm only) on a random 2-layer backbone."""
    from tests.runner_utils import write_tiny_backbone
    backbone = write_tiny_backbone(tmp_path / "tiny", BERT_VOCAB)
    argv = ["--task_name=MRPC", f"--data_dir={mrpc_dir}", "--sizes=4",
            "--init_scales=", "--top_k=", "--max_train_examples=64", "--epochs=1",
            "--max_seq_length=32", "--train_batch_size=16", "--eval_batch_size=128",
            f"--work_dir={tmp_path / 'work'}", f"--results_dir={tmp_path / 'results'}",
            "--name=tiny", f"--extra=--init_checkpoint={backbone / 'bert_model.ckpt'}"]
    result = sweeps.main(argv)
    assert [row["key"] for row in result["rows"]] == ["adapter_s4_i0.001", "layernorm"]
    adapter, layernorm = result["rows"]
    assert 0.0 <= adapter["eval_accuracy"] <= 1.0 and "eval_f1" in adapter
    # Tiny backbone (hidden 16, 2 layers): the adapter run trains its 4 adapters on top of
    # what the LayerNorm-only run trains.
    assert adapter["trainable_params"] - layernorm["trainable_params"] == 4 * (2 * 16 * 4 + 4 + 16)
    train_lines = (tmp_path / "work" / "data" / "train.tsv").read_text().splitlines()
    assert len(train_lines) == 65
    for suffix in (".json", ".md", ".png"):
        assert (tmp_path / "results" / f"tiny{suffix}").is_file()
    # A second call finds both points done and runs nothing.
    again = sweeps.main(argv)
    assert again["rows"] == result["rows"]
