"""The run's configuration (command_line/run_config.py): made once from the parsed flags,
typed by the settings table, frozen, and each runner's own defaults."""

import pytest

from adapter_bert.command_line import run_config, settings
from tests.runner_utils import python_output


def test_each_runner_takes_its_own_defaults_whichever_defined_the_flag_first():
    # One process imports run_classifier.py (--max_seq_length default 128) before
    # run_squad.py (384): absl keeps the first definition, the configuration does not.
    script = ("import adapter_bert.run_classifier, adapter_bert.run_squad\n"
              "from absl import flags\n"
              "from adapter_bert.command_line import run_config\n"
              "flags.FLAGS(['run_squad.py', '--do_train'])\n"
              "print(flags.FLAGS.max_seq_length,"
              " run_config.from_flags('squad', flags.FLAGS).max_seq_length,"
              " run_config.from_flags('classifier', flags.FLAGS).max_seq_length)\n")
    assert python_output(script).split()[-3:] == ["128", "384", "128"]


def test_values_are_the_given_ones_else_the_table_defaults_for_the_runner():
    config = run_config.parse("squad", ["--do_train", "--doc_stride=64"])
    assert config.doc_stride == 64 and config.was_set("doc_stride")
    assert config.max_seq_length == settings.default("max_seq_length", settings.SQUAD) == 384
    assert not config.was_set("max_seq_length")
    assert config["doc_stride"] == 64 and config["task_name"] is None  # read by name too
    with pytest.raises(KeyError, match="no setting --no_such_flag"):
        config["no_such_flag"]  # noqa: B018
    assert config.learning_rate == settings.default("learning_rate", settings.SQUAD)
    assert isinstance(config.num_train_epochs, float) and isinstance(config.seed, int)


def test_another_runners_setting_reads_as_none_and_is_not_in_the_config():
    config = run_config.parse("squad", [])
    assert "task_name" not in config and config.task_name is None
    assert "doc_stride" in config
    with pytest.raises(AttributeError, match="no setting --no_such_flag"):
        config.no_such_flag  # noqa: B018


def test_the_configuration_is_frozen_and_replace_makes_a_new_one():
    config = run_config.parse("classifier", ["--task_name=MRPC"])
    with pytest.raises(AttributeError, match="frozen"):
        config.do_eval = True
    changed = config.replace(do_eval=True)
    assert changed.do_eval and changed.was_set("do_eval") and changed.task_name == "MRPC"
    assert not config.do_eval and config != changed
    with pytest.raises(AttributeError, match="run_classifier.py has no setting --doc_stride"):
        config.replace(doc_stride=64)


def test_the_ablation_has_the_classifiers_settings():
    config = run_config.parse("ablation", ["--task_name=MRPC", "--ablation_metric=eval_loss"])
    assert config.ablation_metric == "eval_loss" and config.max_seq_length == 128
    assert "do_eval" in config and "doc_stride" not in config


def test_parsing_leaves_the_global_flags_alone():
    from absl import flags
    before = {name: flags.FLAGS[name].value for name in flags.FLAGS}
    run_config.parse("classifier", ["--learning_rate=0.5"])
    assert {name: flags.FLAGS[name].value for name in flags.FLAGS} == before


def test_a_flag_of_another_runner_is_refused_by_the_parser():
    from absl import flags
    with pytest.raises(flags.Error, match="doc_stride"):
        run_config.parse("classifier", ["--doc_stride=64"])


def test_parsed_absl_flags_are_made_into_the_runners_configuration_once():
    from absl import flags

    from adapter_bert.command_line.flags import define
    values = flags.FlagValues()
    define("squad", values)
    values(["run_squad.py", "--doc_stride=32"])
    config = run_config.of(values, "squad")
    assert config == run_config.parse("squad", ["--doc_stride=32"])
    assert run_config.of(config, "classifier") is config
