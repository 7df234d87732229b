"""Installing beside any TensorFlow: the version check, its one-line messages, and the
quickstart's messages without GLUE data, on data written here (no shared data folder
needed, so CI runs these on TensorFlow 2.20 and 2.21 alike). Each root script's whole
run: tests/test_console.py."""

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

from adapter_bert import install_check
from adapter_bert.install_check import TensorFlowInstallError, check_tensorflow, find_problem
from tests.conftest import REPO
from tests.runner_utils import flag_list, write_tiny_backbone


@pytest.fixture
def installed(monkeypatch):
    """Pretends exactly the given distributions are installed: installed(name=version, ...)
    (underscores in names stand for dashes); no `tensorflow` module without metadata."""
    def pretend(**versions):
        versions = {name.replace("_", "-"): v for name, v in versions.items()}

        def version(name):
            if name not in versions:
                raise importlib.metadata.PackageNotFoundError(name)
            return versions[name]
        monkeypatch.setattr(importlib.metadata, "version", version)
        monkeypatch.setattr(install_check, "_module_exists", lambda name: False)
    monkeypatch.delenv(install_check.SKIP_VARIABLE, raising=False)
    return pretend


@pytest.mark.parametrize("versions", [
    {"tensorflow": "2.21.0", "tf_keras": "2.21.0"},
    {"tensorflow": "2.20.0", "tf_keras": "2.20.1"},
    # pip install tensorflow-cpu tf-keras: tf-keras brings `tensorflow` of the same minor.
    {"tensorflow_cpu": "2.20.0", "tensorflow": "2.20.0", "tf_keras": "2.20.1"},
    # tensorflow-cpu alone, tf-keras installed with --no-deps.
    {"tensorflow_cpu": "2.20.0", "tf_keras": "2.20.1"},
    {"tensorflow_tpu": "2.20.0", "tf_keras": "2.20.1"},
    {"tf_nightly": "2.22.0.dev20260101", "tf_keras_nightly": "2.22.0.dev20260101"},
])
def test_matching_installs_pass(installed, versions):
    installed(**versions)
    assert find_problem() is None


@pytest.mark.parametrize("versions, message", [
    ({}, 'adapter_bert needs TensorFlow 2.20 or 2.21 with the matching tf-keras and no TensorFlow '
         'is installed: run  pip install "tensorflow==2.21.*" "tf-keras==2.21.*"  (NVIDIA GPU: '
         'tensorflow[and-cuda]; TPU: see docs/install.md)'),
    ({"tf_keras": "2.20.1"},
     'adapter_bert needs TensorFlow and none is installed (tf-keras 2.20.1 is): run  pip install '
     '"tensorflow==2.20.*"  (NVIDIA GPU: pip install "tensorflow[and-cuda]==2.20.*"; TPU: see '
     'docs/install.md)'),
    ({"tensorflow_cpu": "2.20.0", "tf_keras": "2.21.0"},
     'adapter_bert needs tf-keras 2.20 to match tensorflow-cpu 2.20.0 (tf-keras 2.21.0 is '
     'installed): run  pip install --no-deps "tf-keras==2.20.*"'),
    ({"tensorflow_tpu": "2.20.0"},
     'adapter_bert needs tf-keras 2.20 to match tensorflow-tpu 2.20.0 (tf-keras is not '
     'installed): run  pip install --no-deps "tf-keras==2.20.*"'),
    ({"tensorflow": "2.21.0", "tf_keras": "2.20.1"},
     'adapter_bert needs tf-keras 2.21 to match tensorflow 2.21.0 (tf-keras 2.20.1 is '
     'installed): run  pip install --no-deps "tf-keras==2.21.*"'),
    # What `pip install -e .` did on Colab TPU when the package required `tensorflow`.
    ({"tensorflow_tpu": "2.20.0", "tensorflow": "2.21.0", "tf_keras": "2.21.0"},
     'tensorflow-tpu 2.20.0, tensorflow 2.21.0 are all installed and overwrite one another\'s '
     '`tensorflow` module: run  pip uninstall -y tensorflow && pip install --force-reinstall '
     '--no-deps "tensorflow-tpu==2.20.0"'),
    ({"tensorflow_tpu": "2.20.0", "tensorflow": "2.20.0", "tf_keras": "2.20.1"},
     "tensorflow-tpu 2.20.0, tensorflow 2.20.0 are all installed"),
    ({"tensorflow_cpu": "2.20.0", "tensorflow": "2.21.0", "tf_keras": "2.21.0"},
     'tensorflow-cpu 2.20.0, tensorflow 2.21.0 are all installed and overwrite one another\'s '
     '`tensorflow` module: run  pip uninstall -y tensorflow && pip install --force-reinstall '
     '--no-deps "tensorflow-cpu==2.20.0"'),
])
def test_missing_or_mismatched_installs_name_the_command(installed, versions, message):
    installed(**versions)
    problem = find_problem()
    assert problem is not None and "\n" not in problem
    assert problem.startswith(message), problem
    with pytest.raises(TensorFlowInstallError) as raised:
        check_tensorflow()
    assert str(raised.value) == problem
    assert isinstance(raised.value, ImportError)


def test_a_tensorflow_without_metadata_is_not_refused(installed, monkeypatch):
    installed()
    monkeypatch.setattr(install_check, "_module_exists", lambda name: name == "tensorflow")
    assert find_problem() is None


@pytest.mark.parametrize("version, warns", [("2.19.0", True), ("2.22.0rc1", True),
                                            ("2.20.0", False), ("2.21.3", False)])
def test_untested_versions_warn_and_run(installed, recwarn, version, warns):
    installed(tensorflow=version, tf_keras=version)
    check_tensorflow()
    messages = [str(w.message) for w in recwarn]
    assert bool(messages) == warns
    if warns:
        assert messages == [f"adapter_bert is tested on TensorFlow 2.20 and 2.21, not tensorflow "
                            f"{version}; if it fails, install one of those (see docs/install.md)"]


def test_the_check_can_be_switched_off(installed, monkeypatch):
    installed(tensorflow="2.21.0")
    monkeypatch.setenv(install_check.SKIP_VARIABLE, "1")
    check_tensorflow()


def test_module_entry_point_reports_the_install(installed, capsys):
    installed(tensorflow_cpu="2.20.0", tf_keras="2.20.1")
    assert install_check.main() == 0
    assert capsys.readouterr().out == "tensorflow-cpu 2.20.0, tf-keras 2.20.1: OK\n"
    installed(tensorflow_cpu="2.20.0")
    assert install_check.main() == 1
    assert capsys.readouterr().err.startswith("adapter_bert needs tf-keras 2.20 to match")


# A process in which importlib.metadata reports tensorflow 2.21.0 with tf-keras 2.20.1.
MISMATCHED = """
import importlib.metadata, sys
real = importlib.metadata.version
fake = {"tensorflow": "2.21.0", "tf-keras": "2.20.1"}
def version(name):
    if name in fake:
        return fake[name]
    if name.startswith(("tensorflow", "tf-")):
        raise importlib.metadata.PackageNotFoundError(name)
    return real(name)
importlib.metadata.version = version
"""


def _python(code, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop(install_check.SKIP_VARIABLE, None)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)


def test_package_import_is_cheap_and_the_first_tensorflow_import_checks():
    result = _python(MISMATCHED + """
import adapter_bert
assert "tensorflow" not in sys.modules and "tf_keras" not in sys.modules
try:
    import adapter_bert.model.encoder
except ImportError as e:
    print(type(e).__name__, e)
""")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == ('TensorFlowInstallError adapter_bert needs tf-keras 2.21 to match '
                             'tensorflow 2.21.0 (tf-keras 2.20.1 is installed): run  pip install '
                             '--no-deps "tf-keras==2.21.*"\n')


def test_one_import_hook_checks_once_registers_the_keras_classes_and_leaves():
    result = _python("""
import sys
from adapter_bert import install_check
calls = []
check = install_check.check_tensorflow
install_check.check_tensorflow = lambda: calls.append(1) or check()
import adapter_bert
hooks = [f for f in sys.meta_path if type(f).__module__ == "adapter_bert"]
import tensorflow, tf_keras
print(len(hooks), len(calls), hooks[0] in sys.meta_path,
      "adapter_bert>TextClassifier" in tf_keras.utils.get_custom_objects())
""")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["1", "1", "False", "True"]


def test_an_interpreter_without_tensorflow_gets_the_install_line():
    """No mocks: an interpreter that sees no site-packages finds no TensorFlow at all."""
    no_site = ("import sys; sys.path[:] = [p for p in sys.path if 'site-packages' not in p "
               "and 'dist-packages' not in p]; sys.path.insert(0, sys.argv[1]); ")
    expected = ('adapter_bert needs TensorFlow 2.20 or 2.21 with the matching tf-keras and no '
                'TensorFlow is installed: run  pip install "tensorflow==2.21.*" '
                '"tf-keras==2.21.*"  (NVIDIA GPU: tensorflow[and-cuda]; TPU: see docs/install.md)')
    report = subprocess.run([sys.executable, "-I", "-c", no_site + "import runpy; "
                             "runpy.run_module('adapter_bert', run_name='__main__')", str(REPO)],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 1 and report.stderr.splitlines() == [expected]
    first_import = subprocess.run([sys.executable, "-I", "-c", no_site + (
        "import adapter_bert\ntry:\n    import tensorflow\nexcept ImportError as e:\n"
        "    print(type(e).__name__, e)"), str(REPO)], capture_output=True, text=True, timeout=120)
    assert first_import.stdout == f"TensorFlowInstallError {expected}\n", first_import.stderr


@pytest.mark.parametrize("launch", ["root script", "-m"])
@pytest.mark.parametrize("script", ["run_classifier.py", "run_squad.py", "ablate_adapters.py",
                                    "export_model.py"])
def test_entry_points_print_one_line_and_exit_1(script, launch):
    if launch == "-m":  # python -m adapter_bert.<runner>
        start = (f"runpy.run_module('adapter_bert.{script.removesuffix('.py')}', "
                 "run_name='__main__', alter_sys=True)")
    else:
        start = "runpy.run_path(sys.argv[0], run_name='__main__')"
    result = _python(MISMATCHED + "import runpy; sys.argv = sys.argv[1:]; " + start,
                     str(REPO / script), "--help")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f'{script}: error: adapter_bert needs tf-keras 2.21 to match tensorflow 2.21.0 '
        f'(tf-keras 2.20.1 is installed): run  pip install --no-deps "tf-keras==2.21.*"']


# ----------------------------------------------- one short run of each entry point
WORDS = ("the a man woman dog cat sat ran on in park house red blue big small quickly said "
         "who where what is was did john mary paris london").split()


@pytest.fixture(scope="module")
def made_up(tmp_path_factory):
    """A tiny random backbone over a small vocabulary, MRPC-format TSVs and a SQuAD file."""
    import random
    root = tmp_path_factory.mktemp("made_up")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?", *WORDS])
                     + "\n", encoding="utf-8")
    backbone = write_tiny_backbone(root / "backbone", vocab)
    rng = random.Random(0)

    def sentence(n):
        return " ".join(rng.choice(WORDS) for _ in range(n)) + " ."
    mrpc = root / "MRPC"
    mrpc.mkdir()
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    for split, count in (("train", 48), ("dev", 20)):
        rows = "".join(f"{i % 2}\t{i}\t{i + 1000}\t{sentence(6)}\t{sentence(5)}\n"
                       for i in range(count))
        (mrpc / f"{split}.tsv").write_text(header + rows, encoding="utf-8")
    (mrpc / "test.tsv").write_text("index\t#1 ID\t#2 ID\t#1 String\t#2 String\n" + "".join(
        f"{i}\t{i}\t{i + 1000}\t{sentence(6)}\t{sentence(5)}\n" for i in range(7)),
        encoding="utf-8")
    squad = root / "squad.json"
    paragraphs = []
    for p in range(6):
        context = f"john sat in the park . mary ran in {('paris', 'london')[p % 2]} ."
        qas = [{"id": f"q{p}a", "question": "who sat in the park ?",
                "answers": [{"text": "john", "answer_start": 0}]},
               {"id": f"q{p}b", "question": "where did mary run ?",
                "answers": [{"text": ("paris", "london")[p % 2],
                             "answer_start": context.index(("paris", "london")[p % 2])}]}]
        paragraphs.append({"context": context, "qas": qas})
    squad.write_text(json.dumps({"version": "1.1", "data": [
        {"title": "made up", "paragraphs": paragraphs}]}), encoding="utf-8")
    return backbone, mrpc, squad


def _flags(backbone, output_dir, **overrides):
    return flag_list({"init_checkpoint": backbone / "bert_model.ckpt", "output_dir": output_dir,
                      "max_seq_length": 32, "train_batch_size": 8, "eval_batch_size": 16,
                      "predict_batch_size": 16, "learning_rate": 1e-2, "adapter_size": 4,
                      "save_checkpoints_steps": 3}, overrides)


# ------------------------------------------ the quickstart without a GLUE folder at hand
@pytest.mark.parametrize("data_dir, message", [
    (None, "--data_dir is required: pass --data_dir=<glue_data>/MRPC, the task's folder in a "
           "glue_data folder as download_glue_data.py writes it (train.tsv, ...), or "
           "--data_source=tfds to download GLUE with tensorflow-datasets (needs internet)"),
    ("{tmp}/nowhere", "--data_dir={tmp}/nowhere: directory not found; pass "
                      "--data_dir=<glue_data>/MRPC, the task's folder"),
    ("{tmp}/empty", "MRPC: data file not found: {tmp}/empty/train.tsv; pass "
                    "--data_dir=<glue_data>/MRPC, the task's folder in a glue_data folder as "
                    "download_glue_data.py writes it (train.tsv, ...), or --data_source=tfds"),
    ("{tmp}/glue_data", "MRPC: data file not found: {tmp}/glue_data/train.tsv; did you mean "
                        "--data_dir={tmp}/glue_data/MRPC?"),
])
def test_missing_glue_data_says_how_to_get_it(made_up, tmp_path, capsys, data_dir, message):
    from tests.runner_utils import run_in_process
    backbone, mrpc, _ = made_up
    (tmp_path / "empty").mkdir()
    (tmp_path / "glue_data").mkdir()
    (tmp_path / "glue_data" / "MRPC").symlink_to(mrpc)
    argv = ["--task_name=MRPC", "--do_train", *_flags(backbone, tmp_path / "out")]
    if data_dir:
        argv.append("--data_dir=" + data_dir.format(tmp=tmp_path))
    code, _ = run_in_process("run_classifier", argv)
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("run_classifier.py: error: " + message.format(tmp=tmp_path)), err[-1]
    assert not (tmp_path / "out" / "eval_results.txt").exists()


def test_make_demo_says_how_to_get_glue_data_before_installing(tmp_path):
    result = subprocess.run(["make", "-s", "demo", f"GLUE_DIR={tmp_path}", "PYTHON=false"],
                            capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == (
        f"make demo: no MRPC data in {tmp_path}/MRPC: pass GLUE_DIR=<folder> naming a glue_data "
        f"folder as download_glue_data.py writes it (with MRPC/train.tsv), or leave GLUE_DIR "
        f"out to download MRPC with tensorflow-datasets (needs internet)")


def test_make_demo_without_glue_dir_reads_mrpc_through_tfds(tmp_path):
    """No default points outside the repository: the clone alone runs the quickstart."""
    tfds = subprocess.run(["make", "-n", "demo"], capture_output=True, text=True, cwd=REPO,
                          timeout=60)
    assert "-m adapter_bert.run_classifier --task_name=MRPC --do_train --do_eval --data_source=tfds" \
        in tfds.stdout
    assert "../" not in tfds.stdout
    mrpc = tmp_path / "MRPC"
    mrpc.mkdir()
    (mrpc / "train.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
    local = subprocess.run(["make", "-n", "demo", f"GLUE_DIR={tmp_path}"], capture_output=True,
                           text=True, cwd=REPO, timeout=60)
    assert f"--data_dir={tmp_path}/MRPC" in local.stdout and "tfds" not in local.stdout


@pytest.mark.parametrize("versions, expected", [
    ({"tensorflow_tpu": "2.20.0"}, 'pip install --no-deps "tensorflow-text==2.20.*"'),
    ({"tensorflow_cpu": "2.20.1"}, 'pip install --no-deps "tensorflow-text==2.20.*"'),
    ({"tensorflow": "2.21.0"}, 'pip install --no-deps "tensorflow-text==2.21.*"'),
    ({}, 'pip install "tensorflow-text"'),
])
def test_advice_to_add_a_tensorflow_package_keeps_the_installed_build(installed, versions,
                                                                      expected):
    """tensorflow-text requires the `tensorflow` distribution: the advice installs it at
    TensorFlow's minor version without its dependencies, so tensorflow-tpu stays alone."""
    installed(**versions)
    assert install_check.add_on_install("tensorflow-text") == expected
    assert install_check.has_tpu_support() == ("tensorflow_tpu" in versions)
