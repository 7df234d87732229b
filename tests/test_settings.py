"""The settings table (adapter_bert/command_line/settings.py) is the one place a setting is
defined: its flag, bounds check, resume comparison, docs lines and TextClassifier's
defaults are made from its row."""

import json

from adapter_bert.command_line import settings
from tests.conftest import REPO
from tests.runner_utils import python_output

# A new row, as a contributor adds one, then everything that must follow from it.
ADD_A_ROW = r"""
import json, sys
from adapter_bert.model.families import Bounds
from adapter_bert.command_line import settings
settings.EXTRA = (settings.Setting(
    "label_smoothing", "float", 0.0, "Label smoothing of the classification loss.",
    runners=("classifier",), bounds=Bounds(0, 1, high_open=True), resume=True,
    added=True, see="own-data.md"),)
from absl import flags
from adapter_bert.command_line import flags as runner_flags, run_config
from adapter_bert.command_line.flag_checks import FlagError, check_numeric_flags
from adapter_bert.runs.run_record import training_record
runner_flags.define_classifier_flags()
FLAGS = flags.FLAGS
report = {"help": FLAGS["label_smoothing"].help, "default": FLAGS["label_smoothing"].default}
try:
    check_numeric_flags(run_config.parse("classifier", ["--label_smoothing=1.5"]))
except FlagError as e:
    report["refused"] = str(e)
config = run_config.parse("classifier", ["--label_smoothing=0.1"])
check_numeric_flags(config)
report["recorded"] = training_record(config, "classifier").get("label_smoothing")
report["added_table"] = [l for l in settings.docs_table("added").splitlines() if "label_smoothing" in l]
report["all_table"] = [l for l in settings.docs_table("all").splitlines() if "label_smoothing" in l]
print(json.dumps(report))
"""


def test_a_new_row_brings_its_flag_bounds_check_resume_comparison_and_docs_lines():
    report = json.loads(python_output(ADD_A_ROW).strip().splitlines()[-1])
    assert report["help"] == "Label smoothing of the classification loss."
    assert report["default"] == 0.0
    assert report["refused"] == "--label_smoothing must be a finite number in [0, 1), got 1.5"
    assert report["recorded"] == 0.1
    assert report["added_table"] == ["| `--label_smoothing` | 0 | Label smoothing of the "
                                     "classification loss. (see [own-data.md](own-data.md)) |"]
    assert report["all_table"] == ["| `--label_smoothing` | run_classifier.py | float | 0 | "
                                   "a finite number in [0, 1) | yes |"]


def test_docs_cli_md_tables_are_made_from_the_table():
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert settings.rewrite_tables(text) == text, (
        "docs/cli.md's settings tables are stale: python -m adapter_bert.command_line.settings "
        "docs/cli.md")
    assert "<!-- settings:added -->" in text and "<!-- settings:all -->" in text


def test_every_adapter_family_option_is_a_setting_from_its_declaration():
    from adapter_bert.model.config import adapter_families
    rows = settings.by_name()
    for family in adapter_families():
        for name, option in family.options.items():
            row = rows[name]
            assert row.help.endswith(option.help) and row.resume and row.bounds == option.bounds
    assert rows["parallel_scaling"].default == 4.0 and rows["lora_targets"].type == "list"


def test_every_setting_names_its_runners_and_a_valid_default():
    for row in settings.all_settings():
        assert set(row.runners) <= set(settings.SCRIPTS) and row.help
        for runner in row.runners:
            value = row.default_for(runner)
            if row.choices and value is not None:
                assert value in row.choices, row.name
            if row.bounds and value is not None:
                assert row.bounds.admits(value), row.name


def test_text_classifier_starts_from_the_runners_defaults():
    import inspect

    from adapter_bert.library import text_classifier
    fit = inspect.signature(text_classifier.TextClassifier.fit).parameters
    built = inspect.signature(text_classifier.TextClassifier.from_pretrained).parameters
    # Keras' batch_size=None is the runner's default; Keras' epochs are whole.
    assert fit["batch_size"].default is None
    assert text_classifier.BATCH_SIZE == settings.default("train_batch_size") == 32
    assert fit["epochs"].default == settings.default("num_train_epochs") == 3.0
    assert built["warmup_proportion"].default == settings.default("warmup_proportion")
    assert built["seed"].default == settings.default("seed")
    assert text_classifier.MAX_SEQ_LENGTH == settings.default("max_seq_length") == 128
    assert settings.default("max_seq_length", settings.SQUAD) == 384


def test_no_two_rows_share_a_name():
    names = [row.name for row in settings.all_settings()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
