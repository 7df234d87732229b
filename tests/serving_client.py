"""Serves an exported SavedModel in a process that cannot import adapter_bert.

    python tests/serving_client.py EXPORT_DIR REQUESTS.pkl RESULTS.pkl

REQUESTS.pkl: a list of `(signature name, {input name: list of str/bytes/ints})`.
RESULTS.pkl: per request either `("ok", {output name: numpy array})` or
`("error", the error message)`.

The only imports are TensorFlow and tensorflow_text (which registers its ops): this is
what a model server has. `import adapter_bert` is made to fail first, and the script
checks that it does.
"""

import importlib.abc
import pickle
import sys


class _BlockAdapterBert(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "adapter_bert" or name.startswith("adapter_bert."):
            raise ImportError(f"{name} is blocked: the SavedModel must serve without it")
        return None


def _tensor(values, spec):
    import numpy as np
    import tensorflow as tf
    if spec.shape.rank == 1:  # strings [B]
        return tf.constant(list(values), spec.dtype, shape=[len(values)])
    array = np.asarray(values, spec.dtype.as_numpy_dtype)
    return tf.constant(array.reshape(len(values), -1) if len(values) else np.zeros((0, 1), array.dtype))


def main(export_dir, requests_path, results_path):
    sys.meta_path.insert(0, _BlockAdapterBert())
    try:
        import adapter_bert  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("adapter_bert is importable: the check would prove nothing")
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the WordPiece op)

    model = tf.saved_model.load(export_dir)
    with open(requests_path, "rb") as f:
        requests = pickle.load(f)
    results = []
    for signature, inputs in requests:
        function = model.signatures[signature]
        specs = function.structured_input_signature[1]
        tensors = {name: _tensor(values, specs[name]) for name, values in inputs.items()}
        try:
            outputs = function(**tensors)
            results.append(("ok", {k: v.numpy() for k, v in outputs.items()}))
        except tf.errors.InvalidArgumentError as e:
            results.append(("error", e.message))
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "adapter_bert")
    if loaded:
        raise SystemExit(f"adapter_bert modules were loaded: {loaded}")
    with open(results_path, "wb") as f:
        pickle.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
