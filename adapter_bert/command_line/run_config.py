"""One run's configuration: every setting of the table, typed and frozen, for one runner.

An entry point parses its command line once (absl) and makes a `RunConfig` of it
(`from_flags`); the runner, its checks and its bookkeeping read that object and nothing
global. Each row of `command_line.settings` is an attribute: the value the user gave, else
the row's default for this runner (so run_squad.py's --max_seq_length is 384 whichever
runner defined the flag first in the process). A row that is not this runner's reads as
None (`name in config` says whether the runner has it). Changing a value makes a new
configuration (`replace`); nothing can be set on one.
"""

from typing import Any, Dict, Iterable, Sequence

from adapter_bert.command_line import settings


class RunConfig:
    """The settings of one run of `runner` (a key of `settings.SCRIPTS`)."""

    __slots__ = ("runner", "_values", "_given")

    def __init__(self, runner: str, values: Dict[str, Any], given: Iterable[str] = ()):
        object.__setattr__(self, "runner", runner)
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_given", frozenset(given))

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            pass
        if name in settings.by_name():  # a row of another runner (or added since)
            return None
        raise AttributeError(f"no setting --{name} in the settings table")

    def __getitem__(self, name: str):
        """The setting `name`'s value, for code that holds the name (`config[name]`, as
        `config.name`)."""
        if name not in self._values and name not in settings.by_name():
            raise KeyError(f"no setting --{name} in the settings table")
        return self._values.get(name)

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"a run's configuration is frozen: use replace({name}=...)")

    def __contains__(self, name: str) -> bool:
        """Whether this runner has the setting `name`."""
        return name in self._values

    def __eq__(self, other) -> bool:
        return isinstance(other, RunConfig) and (self.runner, self._values, self._given) == (
            other.runner, other._values, other._given)

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={self._values[k]!r}" for k in sorted(self._given))
        return f"RunConfig({self.runner}: {given})"

    def was_set(self, name: str) -> bool:
        """Whether the user gave --name (on the command line or by `replace`)."""
        return name in self._given

    def replace(self, **changes) -> "RunConfig":
        """A copy with `changes` (each a setting of this runner) given."""
        unknown = [name for name in changes if name not in self._values]
        if unknown:
            raise AttributeError(f"{settings.SCRIPTS[self.runner]} has no setting "
                                 f"--{unknown[0]}")
        return RunConfig(self.runner, {**self._values, **changes}, self._given | set(changes))

    def as_dict(self) -> Dict[str, Any]:
        """{name: value} of this runner's settings, in table order."""
        return dict(self._values)


def from_flags(runner: str, flag_values) -> RunConfig:
    """`runner`'s configuration from parsed absl `flag_values`: a flag the user set keeps
    its value; every other setting takes the table's default for `runner`."""
    values, given = {}, set()
    for setting in settings.all_settings():
        if not setting.applies_to(runner):
            continue
        flag = flag_values[setting.name] if setting.name in flag_values else None
        if flag is not None and not flag.using_default_value:
            values[setting.name] = flag.value
            given.add(setting.name)
        else:
            values[setting.name] = setting.default_for(runner)
    return RunConfig(runner, values, given)


def of(values, runner: str) -> RunConfig:
    """`values` itself when it is a `RunConfig`, else `runner`'s configuration made from
    `values`, parsed absl flags (what a notebook that parsed absl's FLAGS passes)."""
    return values if isinstance(values, RunConfig) else from_flags(runner, values)


def parse(runner: str, argv: Sequence[str]) -> RunConfig:
    """`runner`'s configuration from command-line flags `argv` (without the program name),
    parsed by absl into flags of their own: the process's global FLAGS are not touched.

    Raises:
        absl.flags.Error: a flag that is not `runner`'s, or a value of the wrong type.
    """
    from absl import flags

    from adapter_bert.command_line.flags import define
    values = flags.FlagValues()
    define(runner, values)
    values([settings.SCRIPTS[runner], *argv])
    return from_flags(runner, values)

