"""bench/harness.py: a runner command runs in an emptied output directory, its results are
read back, a failure is reported, results files are written whole, and figures over
seeds are summarised one way."""

import json
import statistics
import sys

import pytest

from adapter_bert.io_utils import folders
from tests.conftest import bench_module

harness = bench_module("harness")


def fake_runner(output_dir, body):
    """A command that writes `body` (Python) into output_dir, as a runner would."""
    code = (f"import os, sys; os.makedirs({str(output_dir)!r}, exist_ok=True); "
            f"os.chdir({str(output_dir)!r}); {body}")
    return [sys.executable, "-c", code]


def test_run_starts_clean_times_and_reads_eval_results_txt(tmp_path):
    output_dir = tmp_path / "run"
    output_dir.mkdir()
    (output_dir / "eval_results.txt").write_text("eval_accuracy = 0.1\n")
    (output_dir / "checkpoints").mkdir()
    (output_dir / "checkpoints" / "checkpoint").write_text("left by an earlier run")
    folders.write_manifest(str(output_dir), ["eval_results.txt", "checkpoints/checkpoint"])
    command = fake_runner(output_dir, "import time; time.sleep(0.2); open('eval_results.txt', "
                                      "'w').write('eval_accuracy = 0.75\\nglobal_step = 93\\n"
                                      "note = text\\n\\n')")
    done = harness.run(command, str(output_dir))
    assert done.results == {"eval_accuracy": 0.75, "global_step": 93.0, "note": "text"}
    assert not (output_dir / "checkpoints").exists()  # emptied before the command ran
    assert 0.2 <= done.wall_s < 30
    assert done.command == command


def test_eval_results_json_is_preferred(tmp_path):
    body = ("import json; open('eval_results.txt', 'w').write('f1 = 1.0\\n'); "
            "json.dump({'f1': 81.5, 'HasAns_f1': 80.0}, open('eval_results.json', 'w'))")
    done = harness.run(fake_runner(tmp_path / "squad", body), str(tmp_path / "squad"),
                       log_path=str(tmp_path / "logs" / "squad.log"))
    assert done.results == {"f1": 81.5, "HasAns_f1": 80.0}
    assert (tmp_path / "logs" / "squad.log").is_file()


def test_failed_command_and_missing_results_are_reported(tmp_path):
    log = tmp_path / "fail.log"
    with pytest.raises(harness.RunFailed, match=r"exited with status 3; log: .*fail\.log"):
        harness.run(fake_runner(tmp_path / "a", "print('boom'); sys.exit(3)"),
                    str(tmp_path / "a"), log_path=str(log))
    assert "boom" in log.read_text()
    with pytest.raises(FileNotFoundError, match="no eval_results.json or eval_results.txt"):
        harness.run(fake_runner(tmp_path / "b", "pass"), str(tmp_path / "b"))


def test_write_results_writes_both_files_whole(tmp_path):
    stem = tmp_path / "out" / "bench"
    paths = harness.write_results(str(stem), {"runs": [{"wall_s": 1.5}]}, "| a |\n")
    assert json.loads((tmp_path / "out" / "bench.json").read_text()) == {
        "runs": [{"wall_s": 1.5}]}
    assert (tmp_path / "out" / "bench.md").read_text() == "| a |\n"
    assert paths == {"json": str(stem) + ".json", "markdown": str(stem) + ".md"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["bench.json", "bench.md"]
    # A result that cannot be written as JSON leaves the earlier files as they were.
    with pytest.raises(TypeError):
        harness.write_results(str(stem), {"runs": object()}, "| b |\n")
    assert (tmp_path / "out" / "bench.md").read_text() == "| a |\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["bench.json", "bench.md"]


def test_seed_stats_and_text_match_the_statistics_module():
    values = [81.37, 82.84, 81.86]
    stats = harness.seed_stats(values)
    assert stats["mean"] == pytest.approx(statistics.mean(values))
    assert stats["sd"] == pytest.approx(statistics.stdev(values))
    assert (stats["min"], stats["n"], stats["values"]) == (81.37, 3, values)
    assert harness.mean_sd_text(values) == "82.02 ± 0.75"
    # One run has no spread to show; no runs is a dash, not an error.
    assert harness.seed_stats([84.5])["sd"] == 0.0
    assert harness.mean_sd_text([84.5]) == "84.50"
    assert harness.seed_stats([]) is None and harness.mean_sd_text([]) == "—"


def test_a_folder_holding_what_no_run_writes_is_never_deleted_nor_run_in(tmp_path):
    """A --work_dir pointed at a user's folder: the run is refused, every file kept."""
    user = tmp_path / "thesis"
    (user / "logs").mkdir(parents=True)
    (user / "chapter1.tex").write_text("mine")
    marker = tmp_path / "ran"
    with pytest.raises(harness.RunFailed, match=r"--work_dir=.*thesis holds chapter1.tex that "
                                                r"adapter_bert did not write; nothing was "
                                                r"deleted"):
        harness.run(fake_runner(user, f"open({str(marker)!r}, 'w')"), str(user))
    assert (user / "chapter1.tex").read_text() == "mine" and (user / "logs").is_dir()
    assert not marker.exists()
    # A symbolic link is not followed into what it points at.
    link = tmp_path / "link"
    link.symlink_to(user)
    with pytest.raises(harness.RunFailed, match="is a symbolic link, not a folder"):
        harness.start_run_dir(str(link))
    assert (user / "chapter1.tex").exists()


def test_a_run_folder_is_emptied_with_the_benchmarks_own_files(tmp_path):
    run_dir = tmp_path / "run"
    log, spent = run_dir / "run.log", run_dir / "bench_wall_s"
    harness.start_run_dir(str(run_dir), str(log), str(spent))  # a missing folder is made
    assert folders.read_manifest(str(run_dir)) == {"run.log", "bench_wall_s"}
    # The run adds its files to the manifest, which keeps the benchmark's.
    (run_dir / "checkpoints").mkdir()
    written = ["run.log", "bench_wall_s", "eval_results.txt", "checkpoints/ckpt-1.index"]
    for name in written:
        (run_dir / name).write_text("x")
    folders.write_manifest(str(run_dir), written)
    (run_dir / "notes.txt").write_text("mine")
    with pytest.raises(harness.RunFailed, match="holds notes.txt that adapter_bert did not "
                                                "write; nothing was deleted"):
        harness.start_run_dir(str(run_dir), str(log))
    assert all((run_dir / name).exists() for name in written)
    (run_dir / "notes.txt").unlink()
    harness.start_run_dir(str(run_dir), str(log))
    assert sorted(p.name for p in run_dir.iterdir()) == [folders.MANIFEST]
    assert folders.read_manifest(str(run_dir)) == {"run.log"}
