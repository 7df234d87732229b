"""Which ops of a string-in SavedModel TFLite's converter refuses, signature by signature.

Usage:
    python -m adapter_bert.serving.tflite_ops EXPORT_DIR

For each signature it prints the ops without a TFLite builtin kernel, then those left
when the interpreter also has tensorflow-text's TFLite kernels (`tflite_registrar`).
"""

import sys
from typing import List

import tensorflow as tf

from adapter_bert.serving.tflite import refused_ops


def main(argv: List[str]) -> int:
    """Prints the refused ops of each signature of a string-in SavedModel.

    Usage: python -m adapter_bert.serving.tflite_ops EXPORT_DIR
    """
    if len(argv) != 2:
        print(main.__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    import tensorflow_text  # noqa: F401 - registers the WordPiece op the SavedModel holds
    signatures = tf.saved_model.load(argv[1]).signatures
    for name in sorted(signatures):
        for text_kernels in (False, True):
            ops = refused_ops(argv[1], name, with_tensorflow_text=text_kernels)
            mode = "builtins + tensorflow-text kernels" if text_kernels else "builtins only"
            print(f"{name} ({mode}): {', '.join(ops) if ops else 'converts'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
