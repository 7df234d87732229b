"""What the command-line entry points share: `entry_point` makes a runner's module (its
program name, flags from the settings table, `main` and `run` around absl's `app.run`).

Each runner lives in the package (`python -m adapter_bert.run_classifier`); a clone's
root scripts (`python run_classifier.py`, as in Google's repository) and the installed
console scripts (`adapter-bert-classifier`) start the same module. Whichever started it,
the error lines and `--helpshort` read the same.

At import this module loads neither TensorFlow nor the runners' flags: `entry_point`
calls `start` (the install check) before it defines the flags, which loads TensorFlow.
"""

import sys

from absl import app, flags
from adapter_bert import io_utils


def program_name(script: str, command: str) -> str:
    """The name a runner's error lines begin with (`<name>: error: ...`): its console
    script `command` when that is what was run, else its `script` name (run_classifier.py:
    the root script, `python -m adapter_bert.run_classifier`, or a test calling `main`)."""
    invoked = io_utils.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if invoked.lower().endswith(".exe"):  # console scripts on Windows
        invoked = invoked[:-len(".exe")]
    return command if invoked == command else script


def start(script: str, command: str) -> str:
    """An entry point's first step, before any import of TensorFlow: a missing or
    mismatched TensorFlow/tf-keras stops with one line naming the fix, then TensorFlow
    loads without its start-up probe lines (console.py). Returns `program_name`'s name."""
    from adapter_bert.install_check import require_tensorflow
    program = program_name(script, command)
    require_tensorflow(program)
    from adapter_bert.console import quiet_tensorflow_startup
    quiet_tensorflow_startup()
    return program


def runner_main(runner: str):
    """The `main` of `runner`'s module in runners/, which takes the run's configuration
    and returns the exit status. Imported when the run starts, after `start` has checked
    the install: runners/ loads TensorFlow."""
    if runner == "classifier":
        from adapter_bert.runners.classifier import main
    elif runner == "squad":
        from adapter_bert.runners.squad import main
    elif runner == "ablation":
        from adapter_bert.runners.ablation import classifier_main as main
    elif runner == "export":
        from adapter_bert.runners.export import main
    else:
        raise KeyError(f"no runner {runner!r}")
    return main


def entry_point(module_name: str, script: str, command: str, runner: str):
    """What a runner's module holds, made in one place: `start`s (before TensorFlow loads),
    defines `runner`'s flags from the settings table (`command_line.settings`) and returns
    (program, FLAGS, main, run). `main` runs `runner_main(runner)` on the run's
    configuration (`RunConfig`, made once from the parsed flags); the input errors it
    raises become one `<program>: error:` line and exit status 1."""
    program = start(script, command)
    module = sys.modules[module_name]
    module.__doc__ = (module.__doc__ or "").rstrip() + (
        f"\n\nInstalled, `{command}` runs the same; in a clone of the repository,\n"
        f"`python {script}` takes the same flags.\n")
    from adapter_bert.command_line import flags as runner_flags
    runner_flags.define(runner)
    # --helpshort lists the key flags of the module Python started: the runner's module.
    key_module = sys.argv[0] if module_name == "__main__" else module_name
    for flag in flags.FLAGS.get_key_flags_for_module(runner_flags.__name__):
        flags.FLAGS.register_key_flag_for_module(key_module, flag)

    def main(argv=None) -> int:
        del argv  # everything comes from flags
        from adapter_bert.command_line import run_config, settings
        from adapter_bert.runners import base
        config = run_config.from_flags(runner, flags.FLAGS)
        return base.run_cli(program, lambda: runner_main(runner)(config),
                            lambda: settings.path_values(config.as_dict(), runner))

    def run_main() -> None:
        """The command line: parses sys.argv with absl and exits with main's status."""
        run(sys.modules[module_name], main)

    return program, flags.FLAGS, main, run_main


def run(module, main) -> None:
    """`app.run(main)` for the runner `module`, then exits with main's status.

    absl's `--helpshort` lists the key flags of the file Python started (sys.argv[0]) under
    the docstring of `__main__`. When that file is not the runner itself (a root script,
    a console script), the runner's key flags are registered for it and, if it has no
    docstring of its own, the runner's docstring (with its example command) is shown.
    """
    main_module = sys.modules["__main__"]
    if main_module is not module:
        if not getattr(main_module, "__doc__", None):
            main_module.__doc__ = module.__doc__
        for flag in flags.FLAGS.get_key_flags_for_module(module):
            flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
    sys.exit(app.run(main))
