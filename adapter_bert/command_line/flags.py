"""The runners' absl flags, defined from the settings table (`command_line.settings`).

Every flag of Google's BERT scripts keeps its name, meaning and default; the flags this
port adds (adapters, tuning mode, distribution, dtype, seed, ...) are rows of the same
table, so both entry points read the same way. What their values must be, and each
runner's validation of them: `command_line.flag_checks`.
"""

from absl import flags

from adapter_bert.command_line import settings
from adapter_bert.command_line.settings import CLASSIFIER, SQUAD

FLAGS = flags.FLAGS

_DEFINE = {"string": flags.DEFINE_string, "bool": flags.DEFINE_bool,
           "integer": flags.DEFINE_integer, "float": flags.DEFINE_float,
           "list": flags.DEFINE_list}


def define(runner: str, flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines `runner`'s flags (`settings.SCRIPTS` names the runners) from the settings
    table in `flag_values` (absl's global FLAGS unless given). A flag already defined there
    (by another runner) is kept as it is: its `--help` default may be the other runner's,
    but the run's configuration (`command_line.run_config`) takes this runner's."""
    for setting in settings.all_settings():
        if setting.applies_to(runner) and setting.name not in flag_values:
            _define_one(setting, runner, flag_values)


def _define_one(setting: settings.Setting, runner: str, flag_values: flags.FlagValues) -> None:
    default = setting.default_for(runner)
    if setting.type == "enum":
        flags.DEFINE_enum(setting.name, default, setting.choices, setting.help,
                          flag_values=flag_values)
    else:
        _DEFINE[setting.type](setting.name, default, setting.help, flag_values=flag_values)


def define_classifier_flags() -> None:
    """Defines the flags of run_classifier.py (a second call does nothing)."""
    define(CLASSIFIER)


def define_squad_flags() -> None:
    """Defines the flags of run_squad.py (a second call does nothing)."""
    define(SQUAD)
