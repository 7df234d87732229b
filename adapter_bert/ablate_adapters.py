r"""Adapter ablation (Houlsby et al., 2019, Fig. 6): remove the adapters of every span of
layers i..j from a trained GLUE adapter model and re-evaluate on dev.

Takes run_classifier.py's flags (task, data, backbone, sequence length, batch sizes, ...)
plus --ablation_metric, and writes into --output_dir: ablation_matrix.csv,
ablation_results.csv, ablation.json and ablation_heatmap.png.

Example (after `run_classifier.py --task_name=MRPC --do_train ... --output_dir=/tmp/mrpc`):

    python -m adapter_bert.ablate_adapters --task_name=MRPC --data_dir=glue_data/MRPC \
        --load_adapter=/tmp/mrpc/adapter --output_dir=/tmp/mrpc_ablation \
        --eval_batch_size=64

Installed, `adapter-bert-ablate` runs the same; in a clone of the repository,
`python ablate_adapters.py` does.
"""

import sys

from absl import flags

from adapter_bert import cli

# Before any import of TensorFlow (cli.start checks the install).
PROGRAM = cli.start("ablate_adapters.py", "adapter-bert-ablate")

from adapter_bert.tasks import ablation  # noqa: E402
from adapter_bert.tasks import flags as adapter_flags  # noqa: E402

ablation.define_flags()
# --helpshort lists the flags of the modules that define them: adopt them here.
flags.adopt_module_key_flags(adapter_flags)
flags.adopt_module_key_flags(ablation)
FLAGS = flags.FLAGS


def main(argv=None) -> int:
    """Runs the parsed flags' ablation; input errors become one `<program>: error:` line."""
    del argv  # unused: everything comes from flags
    from adapter_bert.tasks import base
    return base.run_cli(PROGRAM, lambda: ablation.classifier_main(FLAGS))


def run() -> None:
    """The command line: parses sys.argv with absl and exits with main's status."""
    cli.run(sys.modules[__name__], main)


if __name__ == "__main__":
    run()
