r"""A grid of run_classifier.py (or run_squad.py) runs, the best point kept.

Example (the paper's protocol on CoLA: four points, selected on dev):

    python -m adapter_bert.sweep --task_name=CoLA --data_dir=glue_data/CoLA \
        --grid=learning_rate=3e-4,1e-3 --grid=num_train_epochs=3,20 \
        --output_dir=/tmp/cola_sweep

Every flag but --grid, --select_on, --runner and --output_dir goes to the runner
unchanged; --select_metric and --eval_every_epoch are the runner's own. Installed,
`adapter-bert-sweep` runs the same. See adapter_bert/tasks/sweep.py.
"""

import sys
import types

from adapter_bert import cli

SCRIPT, COMMAND = "adapter_bert.sweep", "adapter-bert-sweep"
PROGRAM = cli.program_name(SCRIPT, COMMAND)
USAGE = """usage: python -m adapter_bert.sweep --grid=FLAG=V1,V2 [--grid=...] --output_dir=DIR
           [--select_on=dev|train_fraction:F] [--runner=classifier|squad]
           [--do_predict] [the runner's flags...]
"""


def main(argv=None) -> int:
    """Runs the sweep; bad input is one `<program>: error:` line and exit status 1."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "--helpshort"):
        print(__doc__.strip() + "\n\n" + USAGE)
        return 0
    cli.start(SCRIPT, COMMAND)
    from adapter_bert.command_line import settings
    from adapter_bert.tasks import base, sweep

    def body() -> int:
        try:
            return sweep.main(argv)
        except sweep.SweepStopped as e:
            print(f"{PROGRAM}: {e}", file=sys.stderr, flush=True)
            return e.exit_code or 1

    # The runner's path flags the command line names (an OSError about them is the user's).
    given = types.SimpleNamespace(**dict(arg[2:].split("=", 1) for arg in argv
                                         if arg.startswith("--") and "=" in arg))
    return base.run_cli(PROGRAM, body, lambda: settings.path_values(given, settings.CLASSIFIER)
                        + settings.path_values(given, settings.SQUAD))


def run() -> None:
    """The console script."""
    sys.exit(main())


if __name__ == "__main__":
    run()
