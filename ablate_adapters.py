r"""Adapter ablation (Houlsby et al., 2019, Fig. 6): remove the adapters of every span of
layers i..j from a trained GLUE adapter model and re-evaluate on dev.

Takes run_classifier.py's flags (task, data, backbone, sequence length, batch sizes, ...)
plus --ablation_metric, and writes into --output_dir: ablation_matrix.csv,
ablation_results.csv, ablation.json and ablation_heatmap.png.

Example (after `run_classifier.py --task_name=MRPC --do_train ... --output_dir=/tmp/mrpc`):

    python ablate_adapters.py --task_name=MRPC --data_dir=glue_data/MRPC \
        --load_adapter=/tmp/mrpc/adapter --output_dir=/tmp/mrpc_ablation \
        --eval_batch_size=64
"""

import sys

from absl import app, flags

from adapter_bert.install_check import require_tensorflow

# A missing or mismatched TensorFlow/tf-keras: one line naming the fix, before any import of it.
require_tensorflow("ablate_adapters.py")
# TensorFlow loads without its start-up probe lines (see adapter_bert/console.py).
from adapter_bert.console import quiet_tensorflow_startup  # noqa: E402

quiet_tensorflow_startup()

from adapter_bert.tasks import ablation  # noqa: E402
from adapter_bert.tasks import flags as adapter_flags  # noqa: E402

ablation.define_flags()
# --helpshort lists the flags of the modules that define them: adopt them here.
flags.adopt_module_key_flags(adapter_flags)
flags.adopt_module_key_flags(ablation)
FLAGS = flags.FLAGS


def main(argv):
    del argv  # unused: everything comes from flags
    from adapter_bert.tasks import base
    return base.run_cli("ablate_adapters.py", lambda: ablation.classifier_main(FLAGS))


if __name__ == "__main__":
    sys.exit(app.run(main))
