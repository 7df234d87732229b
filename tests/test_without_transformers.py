"""The package needs no transformers: run_classifier tokenises, trains and evaluates with
`import transformers` failing, and the transformers bridge says in one line what to install
when transformers is missing or is 5.x (which has no TF models)."""

import importlib
import importlib.abc
import importlib.metadata
import os
import subprocess
import sys
import types

import pytest

from tests.conftest import REPO
from tests.runner_utils import flag_list, read_results

BRIDGE = "adapter_bert.adapters.hf_bridge"
NEEDED = ('adapter_bert.adapters.hf_bridge needs transformers 4.x with its TF models '
          '(transformers 5 removed them): pip install "transformers>=4.57,<5"')

# Run first in a fresh interpreter: importing transformers or huggingface_hub (or any of
# their submodules) fails as if they were not installed, whatever the environment holds.
BLOCK_TRANSFORMERS = '''
import atexit, sys

class NoTransformers:
    attempts = []

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("transformers", "huggingface_hub"):
            self.attempts.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None

sys.meta_path.insert(0, NoTransformers())
atexit.register(lambda: print("blocked imports:", sorted(set(NoTransformers.attempts)),
                              "loaded:", sorted(m for m in sys.modules
                                                if m.split(".")[0] == "transformers"),
                              file=sys.stderr))
'''


def run_blocked(code: str, timeout=600) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh Python with transformers and huggingface_hub unimportable."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", BLOCK_TRANSFORMERS + code], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=env)


def write_mrpc(folder):
    """A small MRPC folder: 32 training and 8 dev pairs."""
    folder.mkdir(parents=True, exist_ok=True)
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    words = ["guitar", "piano", "café", "naïve", "東京", "drums", "violin", "singer"]
    rows = [f"{i % 2}\t{i}\t{i + 100}\tA man plays the {w}.\tThe {w} is played by a man, {i}.\n"
            for i, w in enumerate(words * 4)]
    (folder / "train.tsv").write_text(header + "".join(rows), encoding="utf-8")
    (folder / "dev.tsv").write_text(header + "".join(rows[:8]), encoding="utf-8")
    return folder


@pytest.mark.slow
def test_run_classifier_trains_and_evaluates_without_transformers(backbone, tmp_path):
    """Tokenisation and the whole training run work with transformers unimportable."""
    data, out = write_mrpc(tmp_path / "MRPC"), tmp_path / "out"
    argv = [str(REPO / "run_classifier.py"), "--task_name=MRPC", "--do_train", "--do_eval",
            *flag_list({"data_dir": data, "init_checkpoint": backbone / "bert_model.ckpt",
                        "output_dir": out, "max_seq_length": 32, "train_batch_size": 16,
                        "eval_batch_size": 8, "learning_rate": 1e-3, "adapter_size": 8,
                        "num_train_epochs": 1}, {})]
    result = run_blocked(
        "import runpy\n"
        "try:\n"
        "    import transformers\n"
        "except ImportError:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit('transformers was importable')\n"
        f"sys.argv = {argv!r}\n"
        f"runpy.run_path({argv[0]!r}, run_name='__main__')\n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "loaded: []" in result.stderr, result.stderr[-1000:]
    results = read_results(out / "eval_results.txt")
    assert {"eval_accuracy", "global_step"} <= set(results)
    assert int(results["global_step"]) == 2


def test_package_and_tokenizer_never_try_transformers(minilm_dir):
    """load_tokenizer, the package's exports, both tasks and serving do not even try to
    import transformers or huggingface_hub."""
    result = run_blocked(
        "import adapter_bert as ab\n"
        "import adapter_bert.runners.classifier, adapter_bert.runners.squad, adapter_bert.serving\n"
        "for name in ab.__all__:\n"
        "    getattr(ab, name)\n"
        "from adapter_bert.data.tokenization import load_tokenizer\n"
        f"tokenizer = load_tokenizer({str(minilm_dir / 'vocab.txt')!r}, True)\n"
        "print(tokenizer.tokenize('Adapters tune BERT cheaply.'))\n", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "['adapt', '##ers', 'tune', 'bert', 'cheap', '##ly', '.']"
    assert "blocked imports: [] loaded: []" in result.stderr, result.stderr[-1000:]


def fresh_bridge_import(monkeypatch, transformers_module):
    """Imports the bridge anew with sys.modules['transformers'] faked (None: not installed)."""
    monkeypatch.setitem(sys.modules, "transformers", transformers_module)
    monkeypatch.delitem(sys.modules, BRIDGE, raising=False)
    return importlib.import_module(BRIDGE)


def test_bridge_without_transformers_names_what_to_install(monkeypatch):
    with pytest.raises(ImportError) as error:
        fresh_bridge_import(monkeypatch, None)
    assert str(error.value) == f"{NEEDED} (transformers is not installed)"


def test_bridge_with_transformers_5_names_what_to_install(monkeypatch):
    five = types.ModuleType("transformers")
    five.__version__ = "5.24.0"
    with pytest.raises(ImportError) as error:
        fresh_bridge_import(monkeypatch, five)
    assert str(error.value) == f"{NEEDED} (found transformers 5.24.0)"


def test_bridge_with_a_broken_transformers_says_why(monkeypatch):
    """transformers that fails to import (e.g. a huggingface_hub it does not accept)."""
    class Broken(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "transformers":
                raise ImportError("huggingface-hub>=0.34.0,<1.0 is required", name="huggingface_hub")
            return None

    monkeypatch.delitem(sys.modules, "transformers", raising=False)
    monkeypatch.delitem(sys.modules, BRIDGE, raising=False)
    monkeypatch.setattr(sys, "meta_path", [Broken(), *sys.meta_path])
    with pytest.raises(ImportError) as error:
        importlib.import_module(BRIDGE)
    assert str(error.value) == (f"{NEEDED} (importing transformers failed: "
                                f"huggingface-hub>=0.34.0,<1.0 is required)")


def test_bridge_imports_exactly_with_transformers_4():
    """In this environment as it is: transformers 4.x (make test) imports the bridge;
    transformers 5 (make test-tf220) or none gives the one line."""
    try:
        version = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        version = None
    if version and version.startswith("4."):
        assert hasattr(importlib.import_module(BRIDGE), "add_adapters")
    else:
        with pytest.raises(ImportError, match=r"^adapter_bert\.adapters\.hf_bridge needs "
                                              r"transformers 4\.x .*transformers>=4\.57,<5"):
            importlib.import_module(BRIDGE)
