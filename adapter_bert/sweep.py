r"""A grid of run_classifier.py (or run_squad.py) runs, the best point kept.

Example (the paper's protocol on CoLA: four points, selected on dev):

    python -m adapter_bert.sweep --task_name=CoLA --data_dir=glue_data/CoLA \
        --grid=learning_rate=3e-4,1e-3 --grid=num_train_epochs=3,20 \
        --output_dir=/tmp/cola_sweep

Every flag but the sweep's own (listed below) goes to the runner unchanged;
--select_metric and --eval_every_epoch are the runner's own. Installed,
`adapter-bert-sweep` runs the same. See adapter_bert/runners/sweep.py.
"""

import sys

from adapter_bert import cli

SCRIPT, COMMAND = "adapter_bert.sweep", "adapter-bert-sweep"
PROGRAM = cli.program_name(SCRIPT, COMMAND)


def usage() -> str:
    """The sweep's flags, from their rows of the settings table (`SWEEP_SETTINGS`)."""
    import textwrap

    from adapter_bert.command_line.settings import SWEEP_SETTINGS
    lines = [f"usage: python -m {SCRIPT} --grid=FLAG=V1,V2 [--grid=...] --output_dir=DIR "
             f"[the runner's flags...]", "", "The sweep's flags:"]
    for row in SWEEP_SETTINGS:
        default = row.doc_default or f"default: {row.default}"
        lines += [f"  --{row.name} ({default})",
                  textwrap.fill(row.help, 88, initial_indent=" " * 4, subsequent_indent=" " * 4)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """Runs the sweep; bad input is one `<program>: error:` line and exit status 1."""
    argv = sys.argv[1:] if argv is None else list(argv)
    cli.start(SCRIPT, COMMAND)
    if not argv or argv[0] in ("-h", "--help", "--helpshort"):
        print(__doc__.strip() + "\n\n" + usage())
        return 0
    from adapter_bert.command_line import settings
    from adapter_bert.runners import base, sweep

    def body() -> int:
        try:
            return sweep.main(argv)
        except sweep.SweepStopped as e:
            print(f"{PROGRAM}: {e}", file=sys.stderr, flush=True)
            return e.exit_code or 1

    # The runner's path flags the command line names (an OSError about them is the user's).
    given = dict(arg[2:].split("=", 1) for arg in argv if arg.startswith("--") and "=" in arg)
    return base.run_cli(PROGRAM, body, lambda: settings.path_values(given, settings.CLASSIFIER)
                        + settings.path_values(given, settings.SQUAD))


def run() -> None:
    """The console script."""
    sys.exit(main())


if __name__ == "__main__":
    run()
