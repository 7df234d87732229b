r"""BERT + adapters fine-tuning runner for GLUE, flag-compatible with Google's run_classifier.py.

Example (adapter-tune MRPC on the embedded MiniLM backbone):

    python run_classifier.py --task_name=MRPC --do_train --do_eval \
        --data_dir=glue_data/MRPC --output_dir=/tmp/mrpc \
        --learning_rate=1e-3
"""

import sys

from absl import app, flags

from adapter_bert.install_check import require_tensorflow

# A missing or mismatched TensorFlow/tf-keras: one line naming the fix, before any import of it.
require_tensorflow("run_classifier.py")
# TensorFlow loads without its start-up probe lines (see adapter_bert/console.py).
from adapter_bert.console import quiet_tensorflow_startup  # noqa: E402

quiet_tensorflow_startup()

from adapter_bert.tasks import flags as adapter_flags  # noqa: E402

adapter_flags.define_classifier_flags()
# --helpshort lists the flags of the module that defines them: adopt them here.
flags.adopt_module_key_flags(adapter_flags)
FLAGS = flags.FLAGS


def main(argv):
    del argv  # unused: everything comes from flags
    from adapter_bert.tasks import base, classifier
    return base.run_cli("run_classifier.py", lambda: classifier.main(FLAGS))


if __name__ == "__main__":
    sys.exit(app.run(main))
