"""adapter_bert.sweep: a 4-point grid runs, a sweep killed in the middle of a point resumes
to the same results, the best point is selected and kept, on your own file and on a GLUE
task; bad grids are one line before anything runs."""

import json
import os
import subprocess
import sys

import pytest

from adapter_bert.adapters.files import read_adapter_weights
from adapter_bert.io_utils.folders import ForeignFileError
from adapter_bert.runners import sweep
from adapter_bert.command_line.flag_checks import FlagError
from tests.conftest import REPO
from tests.fixtures import write_mrpc
from tests.runner_utils import read_results, run_in_process
from tests.test_epoch_selection import write_moods

GRID = ["--grid=learning_rate=1e-3,3e-3", "--grid=num_train_epochs=1,2"]
# The tests that read the module's one sweep (`whole`) run on one worker (make test's
# --dist loadgroup), which builds it once.
SHARES_THE_SWEEP = pytest.mark.xdist_group("test_sweep_whole")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("moods")
    return write_moods(folder / "train.csv", 64), write_moods(folder / "dev.csv", 30, 500)


def common(backbone, files, out):
    train, dev = files
    return [f"--init_checkpoint={backbone / 'bert_model.ckpt'}", f"--train_file={train}",
            f"--dev_file={dev}", "--max_seq_length=32", "--adapter_size=8",
            "--train_batch_size=16", "--eval_batch_size=64", "--save_checkpoints_steps=2",
            "--select_metric=loss", f"--output_dir={out}"]


def table(out):
    lines = (out / "sweep_results.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1:]]


@pytest.fixture(scope="module")
def whole(backbone, files, tmp_path_factory):
    """A 4-point sweep killed in the middle of its second point, then run to its end."""
    out = tmp_path_factory.mktemp("whole") / "sweep"
    argv = [*common(backbone, files, out), *GRID]
    real_run = subprocess.run
    started = []

    def kill_the_second_point(command, **kwargs):
        started.append(command)
        if len(started) == 2:  # point 2 runs under tests/killer.py, killed after step 2's checkpoint
            command = [sys.executable, str(REPO / "tests" / "killer.py"), *command[2:]]
            kwargs["env"] = {**os.environ, "KILL_AFTER_CHECKPOINT": "2", "PYTHONPATH": str(REPO)}
        return real_run(command, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep.subprocess, "run", kill_the_second_point)
        with pytest.raises(sweep.SweepStopped, match="point 2/4 .* stopped"):
            sweep.main(argv)
    second = out / "learning_rate_1e-3__num_train_epochs_2"
    killed = {"half_way": bool(list((second / "checkpoints").glob("ckpt-2.index"))),
              "results_before": (second / "eval_results.txt").exists()}
    first_results = out / "learning_rate_1e-3__num_train_epochs_1" / "eval_results.txt"
    stamp = first_results.stat().st_mtime_ns
    assert sweep.main(argv) == 0
    killed["first_rerun"] = first_results.stat().st_mtime_ns != stamp
    return out, killed


@pytest.mark.slow
@SHARES_THE_SWEEP
def test_a_four_point_grid_runs_and_the_best_point_is_kept(whole):
    whole, _ = whole
    rows = table(whole)
    assert [(r["learning_rate"], r["num_train_epochs"]) for r in rows] == [
        ("1e-3", "1"), ("1e-3", "2"), ("3e-3", "1"), ("3e-3", "2")]
    losses = [float(r["eval_loss"]) for r in rows]
    chosen = losses.index(min(losses))   # --select_metric=loss: the lowest wins
    assert [r["selected"] for r in rows] == ["yes" if i == chosen else "" for i in range(4)]
    best = json.loads((whole / "best" / "best_point.json").read_text())
    assert best["point"] == {"learning_rate": rows[chosen]["learning_rate"],
                             "num_train_epochs": rows[chosen]["num_train_epochs"]}
    kept = read_adapter_weights(str(whole / "best" / "adapter"))
    source = read_adapter_weights(best["folder"] + "/adapter")
    assert all((kept[k] == source[k]).all() for k in source)
    assert "Selected on the dev set by eval_loss" in (whole / "sweep_results.md").read_text()
    assert all(int(r["trainable_params"]) > 0 and float(r["wall_s"]) > 0 for r in rows)


@pytest.mark.slow
@SHARES_THE_SWEEP
def test_a_point_killed_half_way_resumes_to_an_uninterrupted_runs_results(whole, tmp_path):
    whole, killed = whole
    assert killed == {"half_way": True, "results_before": False, "first_rerun": False}
    point = whole / "learning_rate_1e-3__num_train_epochs_2"
    argv = sweep.point_argv("classifier", json.loads((whole / "sweep.json").read_text())
                            ["passed"], {"learning_rate": "1e-3", "num_train_epochs": "2"},
                            str(tmp_path / "direct"), None)
    code, _ = run_in_process("run_classifier", argv)
    assert code == 0
    direct = read_results(tmp_path / "direct" / "eval_results.txt")
    resumed = read_results(point / "eval_results.txt")
    assert {k: v for k, v in resumed.items() if k.startswith("eval_")} == \
        {k: v for k, v in direct.items() if k.startswith("eval_")}


@pytest.mark.slow
@SHARES_THE_SWEEP
def test_a_wider_grid_adds_points_without_redoing_the_others(whole, backbone, files,
                                                             tmp_path):
    import shutil
    out = tmp_path / "sweep"
    shutil.copytree(whole[0], out)
    stamps = {p.name: (p / "eval_results.txt").stat().st_mtime_ns
              for p in out.iterdir() if (p / "sweep_point.json").exists()}
    # The folders hold absolute paths of the copy's origin only in best/: re-selected here.
    argv = [*common(backbone, files, out), "--grid=learning_rate=1e-3,3e-3,1e-2",
            "--grid=num_train_epochs=1,2"]
    assert sweep.main(argv) == 0
    rows = table(out)
    assert len(rows) == 6
    for name, stamp in stamps.items():
        assert (out / name / "eval_results.txt").stat().st_mtime_ns == stamp


@pytest.mark.slow
def test_a_glue_task_selects_on_held_out_training_rows_and_predicts(backbone, tmp_path):
    data = write_mrpc(tmp_path / "glue", rows={"train": 200, "dev": 40, "test": 30})
    out = tmp_path / "sweep"
    argv = ["--task_name=MRPC", f"--data_dir={data}",
            f"--init_checkpoint={backbone / 'bert_model.ckpt'}", "--max_seq_length=32",
            "--adapter_size=8", "--train_batch_size=16", "--num_train_epochs=2",
            "--eval_batch_size=64", "--predict_batch_size=64", "--eval_every_epoch",
            "--grid=learning_rate=1e-3,3e-3", "--select_on=train_fraction:0.2", "--do_predict",
            f"--output_dir={out}"]
    assert sweep.main(argv) == 0
    rows = table(out)
    assert len(rows) == 2 and "eval_f1" in rows[0]
    point = out / "learning_rate_1e-3"
    held = (point / "dev_fraction_rows.txt").read_text().split()
    assert held[0].startswith("train-") and abs(len(held) - 40) <= 1  # 20%, by label
    assert "kept_epoch = " in (point / "eval_results.txt").read_text()
    # The chosen point alone is evaluated on MRPC's dev set, and predicts its test set.
    dev = (out / "best" / "eval_results.txt").read_text()
    assert "eval_f1" in dev and "kept_epoch" not in dev
    text = (out / "sweep_results.md").read_text()
    assert "held out (stratified by label, seed 42)" in text and "the chosen point on dev" in text
    assert len((out / "best" / "test_results.tsv").read_text().splitlines()) == 30


@pytest.mark.slow
def test_a_top_k_sweep_evaluates_and_predicts_with_the_chosen_layer_count(backbone, tmp_path):
    data = write_mrpc(tmp_path / "glue", rows={"train": 60, "dev": 20, "test": 12})
    out = tmp_path / "sweep"
    argv = ["--task_name=MRPC", f"--data_dir={data}",
            f"--init_checkpoint={backbone / 'bert_model.ckpt'}", "--max_seq_length=32",
            "--tuning_mode=top_k", "--train_batch_size=16", "--num_train_epochs=1",
            "--eval_batch_size=64", "--predict_batch_size=64", "--grid=top_k_layers=1,2",
            "--select_on=train_fraction:0.2", "--do_predict", f"--output_dir={out}"]
    assert sweep.main(argv) == 0
    assert [row["top_k_layers"] for row in table(out)] == ["1", "2"]
    assert "eval_accuracy" in (out / "best" / "eval_results.txt").read_text()
    assert len((out / "best" / "test_results.tsv").read_text().splitlines()) == 12


@pytest.mark.parametrize("extra, message", [
    (["--grid=learnin_rate=1e-3,3e-3"], "--grid: learnin_rate is not a flag of run_classifier.py"),
    (["--grid=learning_rate=-1,1e-3"],
     r"grid point learning_rate=-1: --learning_rate must be a finite number > 0, got -1.0"),
    (["--grid=learning_rate=1e-3"], r"a grid of one point \(learning_rate=1e-3\) is a single run"),
    (["--grid=learning_rate=1e-3,3e-3", "--learning_rate=1e-3"],
     "--learning_rate is given on its own and in --grid"),
    (["--grid=output_dir=a,b"], "the sweep sets --output_dir for every point itself"),
    (["--grid=learning_rate=1e-3,3e-3", "--select_on=train_fraction:2"],
     r"--select_on=train_fraction:2: expected dev or train_fraction:F"),
    (["--grid=learning_rate=1e-3,3e-3", "--select_metric=bleu"], r"--select_metric=bleu"),
    ([], "--grid is required"),
    # Checks that need the backbone, and the sweep's own --do_predict, before any point.
    (["--grid=learning_rate=1e-3,3e-3", "--do_predict"],
     r"grid point learning_rate=1e-3: --do_predict on your own data needs --test_file"),
    # Checks against the data, read once: the second point weighs a label the data lacks.
    (["--grid=class_weights=balanced,angry:2"],
     r"grid point class_weights=angry:2: --class_weights=angry:2: 'angry' is not a label of "
     r"the task"),
])
def test_bad_grids_are_one_line_before_anything_runs(backbone, files, tmp_path, extra,
                                                     message):
    out = tmp_path / "sweep"
    with pytest.raises(FlagError, match=message):
        sweep.main([*common(backbone, files, out), *extra])
    assert not out.exists()


@pytest.mark.slow
@SHARES_THE_SWEEP
@pytest.mark.parametrize("extra, message", [
    (["--grid=learning_rate=1e-3,3e-3", "--grid=num_train_epochs=1"],
     r"--grid leaves out 2 finished point\(s\)"),
    ([*GRID, "--seed=7"], "holds a sweep with other passed"),
])
def test_a_finished_sweep_refuses_another_grid_or_other_flags(whole, backbone, files, extra,
                                                              message):
    whole, _ = whole
    before = sorted(p.name for p in whole.iterdir())
    with pytest.raises(FlagError, match=message):
        sweep.main([*common(backbone, files, whole), *extra])
    assert sorted(p.name for p in whole.iterdir()) == before


def test_the_command_line_says_bad_input_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "adapter_bert.sweep", "--task_name=MRPC",
                           f"--output_dir={tmp_path / 'o'}", "--grid=learning_rate=1e-3"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert errors == ["adapter_bert.sweep: error: --grid: a grid of one point "
                      "(learning_rate=1e-3) is a single run: give two or more values, or run "
                      "the runner itself"]


def test_the_sweeps_own_flags_are_its_rows_of_the_settings_table():
    from adapter_bert.command_line.settings import SWEEP_SETTINGS
    own, passed = sweep.split_argv([
        "--grid=learning_rate=1e-3,3e-3", "--grid=adapter_size=8,64", "--select_on=dev",
        "--runner=squad", "--output_dir=out", "--do_predict", "--do_train", "--nodo_eval",
        "--seed=3", "--nodo_lower_case"])
    assert set(own) == {row.name for row in SWEEP_SETTINGS}
    assert own == {"grid": ["learning_rate=1e-3,3e-3", "adapter_size=8,64"],
                   "select_on": "dev", "runner": "squad", "output_dir": "out",
                   "do_predict": True}
    assert passed == ["--seed=3", "--nodo_lower_case"]
    assert sweep.split_argv(["--do_predict=false"])[0]["do_predict"] is False
    assert sweep.split_argv(["--nodo_predict"])[0]["do_predict"] is False
    defaults, _ = sweep.split_argv([])
    assert defaults == {row.name: [] if row.type == "multi" else row.default
                        for row in SWEEP_SETTINGS}


def test_the_sweeps_help_lists_its_rows():
    done = subprocess.run([sys.executable, "-m", "adapter_bert.sweep", "--help"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0
    from adapter_bert.command_line.settings import SWEEP_SETTINGS
    for row in SWEEP_SETTINGS:
        assert f"  --{row.name} (" in done.stdout


def test_the_papers_grid_has_its_eighteen_points():
    grid = sweep.parse_grid(["paper"])
    assert grid == {"learning_rate": ["3e-5", "3e-4", "3e-3"], "num_train_epochs": ["3", "20"],
                    "adapter_size": ["8", "64", "256"]}
    assert len(sweep.points(grid)) == 18
    assert sweep.point_name(sweep.points(grid)[0]) == \
        "learning_rate_3e-5__num_train_epochs_3__adapter_size_8"


def test_a_value_the_backbone_refuses_is_named_before_anything_runs(backbone, files,
                                                                     tmp_path):
    out = tmp_path / "sweep"
    argv = [a for a in common(backbone, files, out) if not a.startswith("--max_seq_length")]
    with pytest.raises(FlagError, match=r"grid point max_seq_length=600: Cannot use sequence "
                                        r"length 600 because the BERT model was only trained "
                                        r"up to sequence length 64"):
        sweep.main([*argv, "--grid=max_seq_length=32,600"])
    assert not out.exists()


def test_a_sweep_stopped_before_any_point_finished_continues_with_fixed_flags(
        backbone, files, tmp_path, monkeypatch):
    """A point that fails (here: its runner exits 1) stops the sweep with nothing finished;
    the same folder then takes a corrected command and another grid."""
    out = tmp_path / "sweep"
    monkeypatch.setattr(sweep.subprocess, "run",
                        lambda *a, **k: type("Done", (), {"returncode": 1})())
    with pytest.raises(sweep.SweepStopped, match="point 1/2 .* stopped"):
        sweep.main([*common(backbone, files, out), "--grid=learning_rate=1e-3,3e-3"])
    assert not sweep._finished(str(out / "learning_rate_1e-3"))
    sweep.check_record(str(out), {"runner": "classifier", "passed": ["--seed=7"],
                                  "select_on": "dev"}, {"adapter_size": ["4", "8"]})


def test_a_sweep_record_the_sweep_did_not_write_is_one_line(tmp_path):
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.json").write_text('{"mine": true}')
    with pytest.raises(FlagError, match=r"sweep.json was not written by a sweep: move it "
                                        r"away, or use another --output_dir"):
        sweep.check_record(str(out), {"runner": "classifier"}, {"learning_rate": ["1", "2"]})
    assert (out / "sweep.json").read_text() == '{"mine": true}'


def test_a_best_folder_the_sweep_did_not_write_is_left_alone(tmp_path):
    point = tmp_path / "sweep" / "learning_rate_1e-3"
    (point / "adapter").mkdir(parents=True)
    (point / "adapter" / "adapter_config.json").write_text("{}")
    (point / "eval_results.txt").write_text("eval_accuracy = 0.5\n")
    (tmp_path / "sweep" / "best").mkdir()
    (tmp_path / "sweep" / "best" / "notes.txt").write_text("mine")
    with pytest.raises(ForeignFileError, match="the sweep's folder of the best point .*best "
                                               "holds notes.txt that adapter_bert did not write"):
        sweep.keep_best(str(tmp_path / "sweep"), str(point), {"learning_rate": "1e-3"}, [])
    assert sorted(p.name for p in (tmp_path / "sweep" / "best").iterdir()) == ["notes.txt"]
    # Its own best/ it replaces: the adapter is the newly chosen point's.
    (tmp_path / "sweep" / "best" / "notes.txt").unlink()
    (tmp_path / "sweep" / "best").rmdir()
    sweep.keep_best(str(tmp_path / "sweep"), str(point), {"learning_rate": "1e-3"}, [])
    (point / "adapter" / "adapter_config.json").write_text('{"second": 1}')
    sweep.keep_best(str(tmp_path / "sweep"), str(point), {"learning_rate": "1e-3"}, [])
    assert (tmp_path / "sweep" / "best" / "adapter" / "adapter_config.json").read_text() == \
        '{"second": 1}'
    # A file of the user's put inside the kept adapter stops the next selection, kept.
    (tmp_path / "sweep" / "best" / "adapter" / "README.md").write_text("mine")
    with pytest.raises(ForeignFileError, match="holds adapter/README.md that adapter_bert"):
        sweep.keep_best(str(tmp_path / "sweep"), str(point), {"learning_rate": "1e-3"}, [])
    assert (tmp_path / "sweep" / "best" / "adapter" / "README.md").read_text() == "mine"


@pytest.mark.slow
def test_a_squad_sweep_selects_on_the_predict_files_f1(backbone, squad_dir, tmp_path):
    from tests.robustness.helpers import squad_flags
    from tests.test_run_squad import write_slice
    train = write_slice(squad_dir / "train-v1.1-subset.json", tmp_path / "train.json",
                        paragraphs=2)
    dev = write_slice(squad_dir / "dev-v1.1.json", tmp_path / "dev.json", paragraphs=2)
    out = tmp_path / "sweep"
    flags = [f for f in squad_flags(backbone, out) if not f.startswith("--learning_rate=")]
    argv = ["--runner=squad", f"--train_file={train}", f"--predict_file={dev}", *flags,
            "--grid=learning_rate=1e-3,3e-3", "--do_predict"]
    assert sweep.main(argv) == 0
    rows = table(out)
    f1 = [float(r["f1"]) for r in rows]
    assert [r["selected"] for r in rows] == ["yes" if i == f1.index(max(f1)) else ""
                                             for i in range(2)]
    chosen = json.loads((out / "best" / "best_point.json").read_text())["folder"]
    assert (out / "best" / "predictions.json").read_text() == \
        (tmp_path / "sweep" / chosen.rsplit("/", 1)[1] / "predictions.json").read_text()
    assert (out / "best" / "adapter" / "adapter_config.json").is_file()
