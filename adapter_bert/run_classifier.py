r"""BERT + adapters fine-tuning runner for GLUE, flag-compatible with Google's run_classifier.py.

Example (adapter-tune MRPC on the embedded MiniLM backbone):

    python -m adapter_bert.run_classifier --task_name=MRPC --do_train --do_eval \
        --data_dir=glue_data/MRPC --output_dir=/tmp/mrpc \
        --learning_rate=1e-3

Installed, `adapter-bert-classifier` runs the same; in a clone of the repository,
`python run_classifier.py` takes the same flags, as Google's script does.
"""

import sys

from absl import flags

from adapter_bert import cli

# Before any import of TensorFlow (cli.start checks the install).
PROGRAM = cli.start("run_classifier.py", "adapter-bert-classifier")

from adapter_bert.tasks import flags as adapter_flags  # noqa: E402

adapter_flags.define_classifier_flags()
# --helpshort lists the flags of the module that defines them: adopt them here.
flags.adopt_module_key_flags(adapter_flags)
FLAGS = flags.FLAGS


def main(argv=None) -> int:
    """Runs the parsed flags' job; input errors become one `<program>: error:` line, exit 1."""
    del argv  # unused: everything comes from flags
    from adapter_bert.tasks import base, classifier
    return base.run_cli(PROGRAM, lambda: classifier.main(FLAGS))


def run() -> None:
    """The command line: parses sys.argv with absl and exits with main's status."""
    cli.run(sys.modules[__name__], main)


if __name__ == "__main__":
    run()
