"""Per-mode training flags shared by the adapter-vs-full benchmarks (MRPC and SQuAD).

Both benchmarks give every mode the same data and budget; only the optimizer settings
differ by mode: a learning rate each (adapters want a larger one; the paper searched
1e-4..1e-3, full fine-tuning uses BERT's 5e-5) and, per mode, Google's Adam without bias
correction (the original's) or bias-corrected Adam (`--adam_bias_correction`). The Adam
variant is always passed explicitly (`--noadam_bias_correction` for Google's), so a row
means the same whatever the runner's per-mode default is.
"""

DEFAULT_RATES = {"adapter": "1e-3", "full": "5e-5"}


def add_mode_arguments(parser):
    """Adds --modes, --<mode>_lr and --bias_correction to an argparse parser."""
    parser.add_argument("--modes", default=",".join(DEFAULT_RATES))
    for mode, rate in DEFAULT_RATES.items():
        parser.add_argument(f"--{mode}_lr", default=rate, help=f"default {rate}")
    parser.add_argument("--bias_correction", nargs="?", const=",".join(DEFAULT_RATES),
                        default="", metavar="MODES",
                        help="modes that get --adam_bias_correction (comma-separated); "
                             "the bare flag means every mode, leaving it out none")


def check_mode_arguments(parser, args):
    """Exits through parser.error on a mode name that is not adapter or full."""
    for flag in ("modes", "bias_correction"):
        unknown = set(filter(None, getattr(args, flag).split(","))) - set(DEFAULT_RATES)
        if unknown:
            parser.error(f"--{flag}: unknown mode(s) {sorted(unknown)}; "
                         f"expected some of {sorted(DEFAULT_RATES)}")


def modes(args):
    """The modes to run, in the order given."""
    return args.modes.split(",")


def bias_corrected(mode, args) -> bool:
    return mode in args.bias_correction.split(",")


def learning_rate(mode, args) -> str:
    return getattr(args, f"{mode}_lr")


def mode_flags(mode, args):
    """The runner flags that make one mode: tuning mode, learning rate, Adam variant."""
    return [f"--tuning_mode={mode}", f"--learning_rate={learning_rate(mode, args)}",
            "--adam_bias_correction" if bias_corrected(mode, args) else "--noadam_bias_correction"]


def optimizer_label(row) -> str:
    """A results row's optimizer, for tables: learning rate and Adam variant.

    Rows written before the fields existed are read from their recorded command.
    """
    command = row.get("command", "")
    rate = row.get("learning_rate") or command.split("--learning_rate=")[-1].split()[0]
    corrected = row.get("bias_correction", "--adam_bias_correction" in command.split())
    return f"{rate}, {'bias-corrected' if corrected else 'Google (uncorrected)'}"


def row_fields(mode, args):
    """What a results row records about the mode's optimizer."""
    return {"learning_rate": learning_rate(mode, args),
            "bias_correction": bias_corrected(mode, args)}
