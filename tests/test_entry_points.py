"""The command-line entry points explain themselves: --helpshort and the docstring example.

`--helpshort` lists the key flags of the main module; the flags are defined in
adapter_bert/command_line/flags.py (and runners/ablation.py), so each runner (adapter_bert/
run_classifier.py, ...) adopts them, and its help shows the same whether it is started as
`python -m adapter_bert.run_classifier` or as the clone's root script run_classifier.py.
Each entry point's docstring shows an example command: it must pass the runner's flag
validation with nothing but the data paths swapped for real files (no flag beyond
--learning_rate needed to make it work).
"""

import importlib
import shlex

import pytest

from tests.runner_utils import run_subprocess

# (entry point, flags --helpshort must list, a help text it must show)
HELP_CASES = [
    ("run_classifier.py", ["--task_name", "--data_dir", "--learning_rate", "--adapter_size",
                           "--tuning_mode", "--output_dir", "--train_file", "--text_column",
                           "--label_column", "--dev_fraction", "--tfds_name"],
     "The name of the task to train: a GLUE task"),
    ("run_squad.py", ["--train_file", "--predict_file", "--doc_stride", "--adapter_size",
                      "--version_2_with_negative", "--learning_rate"],
     "When splitting up a long document into chunks"),
    ("ablate_adapters.py", ["--ablation_metric", "--task_name", "--load_adapter",
                            "--eval_batch_size"], "Heatmap title"),
]


@pytest.mark.parametrize("launch", ["root script", "-m"])
@pytest.mark.parametrize("script,names,help_text", HELP_CASES, ids=[c[0] for c in HELP_CASES])
def test_helpshort_lists_the_runners_flags(script, names, help_text, launch):
    if launch == "-m":
        script = "-m adapter_bert." + script.removesuffix(".py")
    result = run_subprocess(script, ["--helpshort"], timeout=300)
    # absl's help flags print and exit with status 1.
    assert result.returncode == 1 and result.stdout, result.stderr[-2000:]
    listed = {line.split(":")[0].strip().replace("--[no]", "--")
              for line in result.stdout.splitlines() if line.startswith("  --")}
    assert set(names) <= listed, sorted(set(names) - listed)
    assert help_text in result.stdout
    # The docstring example keeps its line continuations.
    assert "\\\n" in result.stdout


def _example_argv(module) -> list:
    """The flags of the `python -m adapter_bert.<runner> ...` command in the module's
    docstring."""
    text = module.__doc__.replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.strip().startswith("python "))
    words = shlex.split(line)
    assert words[1:3] == ["-m", module.__name__], words[:3]
    return words[3:]


RUNNERS = {"run_classifier": "classifier", "run_squad": "squad", "ablate_adapters": "ablation"}


def _parse(script: str, argv):
    from adapter_bert.command_line import run_config
    return importlib.import_module("adapter_bert." + script), run_config.parse(RUNNERS[script], argv)


def _swap(argv, old: str, new: str) -> list:
    swapped = [arg.replace(old, new) for arg in argv]
    assert swapped != argv, f"{old} not in the example {argv}"
    return swapped


def test_run_classifier_example_passes_validation(mrpc_dir, tmp_path):
    from adapter_bert.command_line import flag_checks
    module = importlib.import_module("adapter_bert.run_classifier")
    argv = _swap(_example_argv(module), "glue_data/MRPC", str(mrpc_dir))
    argv = _swap(argv, "/tmp/mrpc", str(tmp_path / "mrpc"))
    _, values = _parse("run_classifier", argv)
    assert flag_checks.validate_classifier(values) == "mrpc"
    assert values.tuning_mode == "adapter" and values.do_train and values.do_eval


def test_run_squad_example_passes_validation(squad_dir, tmp_path):
    from adapter_bert.command_line import flag_checks
    module = importlib.import_module("adapter_bert.run_squad")
    squad = squad_dir
    argv = _swap(_example_argv(module), "squad/train-v1.1.json",
                 str(squad / "train-v1.1-subset.json"))
    argv = _swap(argv, "squad/dev-v1.1.json", str(squad / "dev-v1.1.json"))
    argv = _swap(argv, "/tmp/squad", str(tmp_path / "squad"))
    _, values = _parse("run_squad", argv)
    flag_checks.validate_squad(values)
    assert values.tuning_mode == "adapter" and values.do_train and values.do_predict


def test_ablate_adapters_example_passes_validation(mrpc_dir, tmp_path):
    from adapter_bert.command_line import flag_checks
    module = importlib.import_module("adapter_bert.ablate_adapters")
    (tmp_path / "mrpc" / "adapter").mkdir(parents=True)
    argv = _swap(_example_argv(module), "glue_data/MRPC", str(mrpc_dir))
    argv = _swap(argv, "/tmp/mrpc", str(tmp_path / "mrpc"))
    _, values = _parse("ablate_adapters", argv)
    # The ablation evaluates a trained adapter: --do_eval is implied, not needed.
    assert flag_checks.validate_ablation(values) == "mrpc"


def test_each_runner_of_the_settings_table_has_its_main():
    from adapter_bert import cli
    from adapter_bert.command_line import settings
    runners = [r for r in settings.SCRIPTS if r != settings.SWEEP]
    modules = {r: cli.runner_main(r).__module__ for r in runners}
    assert modules == {"classifier": "adapter_bert.runners.classifier",
                       "squad": "adapter_bert.runners.squad",
                       "ablation": "adapter_bert.runners.ablation",
                       "export": "adapter_bert.runners.export"}
    with pytest.raises(KeyError, match="no runner 'sweep'"):
        cli.runner_main(settings.SWEEP)
