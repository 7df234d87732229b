r"""BERT + adapters for SQuAD v1.1 / v2.0, flag-compatible with Google's run_squad.py.

Example (adapter-tune SQuAD v1.1 on the embedded MiniLM backbone, then score dev):

    python -m adapter_bert.run_squad --do_train --do_predict \
        --train_file=squad/train-v1.1.json \
        --predict_file=squad/dev-v1.1.json \
        --max_seq_length=256 --doc_stride=128 --learning_rate=1e-3 \
        --output_dir=/tmp/squad

For SQuAD 2.0 add --version_2_with_negative; null_odds.json is written beside
predictions.json and the best no-answer threshold is reported.

Installed, `adapter-bert-squad` runs the same; in a clone of the repository,
`python run_squad.py` takes the same flags, as Google's script does.
"""

import sys

from absl import flags

from adapter_bert import cli

# Before any import of TensorFlow (cli.start checks the install).
PROGRAM = cli.start("run_squad.py", "adapter-bert-squad")

from adapter_bert.tasks import flags as adapter_flags  # noqa: E402

adapter_flags.define_squad_flags()
# --helpshort lists the flags of the module that defines them: adopt them here.
flags.adopt_module_key_flags(adapter_flags)
FLAGS = flags.FLAGS


def main(argv=None) -> int:
    """Runs the parsed flags' job; input errors become one `<program>: error:` line, exit 1."""
    del argv  # unused: everything comes from flags
    from adapter_bert.tasks import base, squad
    return base.run_cli(PROGRAM, lambda: squad.main(FLAGS))


def run() -> None:
    """The command line: parses sys.argv with absl and exits with main's status."""
    cli.run(sys.modules[__name__], main)


if __name__ == "__main__":
    run()
