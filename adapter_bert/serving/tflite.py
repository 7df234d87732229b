"""The network of a trained classifier as a TFLite model of builtin ops only.

`export_tflite` writes the backbone, adapters and head as a `.tflite` file whose one
signature takes the three int32 features and returns probabilities (`score` for a
regression head). The tokenisation stays outside: it needs ops that TFLite has no
builtin kernel for (see `refused_ops` and docs/serving.md); the SavedModel's `tokenize`
signature, or the Python pipeline, makes the features.

`python -m adapter_bert.serving.tflite_ops EXPORT_DIR` prints, for each signature of a
string-in SavedModel, the ops the converter refuses (`refused_ops`).
"""

import re
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf

from adapter_bert.model.inputs import FEATURE_NAMES
from adapter_bert import io_utils
from adapter_bert.io_utils import atomic_write_bytes
from adapter_bert.model.fast_layers import portable_kernels
from adapter_bert.serving.export import ExportError
from adapter_bert.errors import UserError


def _network_function(model, batch_size: Optional[int], max_seq_length: Optional[int],
                      regression: bool):
    specs = [tf.TensorSpec([batch_size, max_seq_length], tf.int32, name) for name in FEATURE_NAMES]

    def network(input_ids, input_mask, segment_ids):
        logits = model({"input_ids": input_ids, "input_mask": input_mask,
                        "segment_ids": segment_ids}, training=False)
        if regression:
            return {"score": logits[:, 0]}
        return {"probabilities": tf.nn.softmax(logits, -1)}

    # Plain TensorFlow kernels: the CPU training GELU is an XLA function TFLite cannot take.
    with portable_kernels():
        return tf.function(network, input_signature=specs, autograph=False) \
            .get_concrete_function()


def tflite_classifier(model, max_seq_length: Optional[int], batch_size: Optional[int] = 1,
                      regression: bool = False) -> bytes:
    """The flatbuffer of `export_tflite` (same arguments, no file written)."""
    function = _network_function(model, batch_size, max_seq_length, regression)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function], model)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    return converter.convert()


# A TFLite flatbuffer's file identifier, at bytes 4-8.
_TFLITE_IDENTIFIER = b"TFL3"


def check_tflite_target(tflite_file: str) -> None:
    """Refuses a `tflite_file` that holds something other than a TFLite model.

    Raises:
        ExportError: naming the path and what is there.
    """
    if not io_utils.exists(tflite_file):
        return
    if io_utils.isdir(tflite_file):
        raise ExportError(f"{tflite_file} is a folder; nothing was replaced: name a .tflite file")
    with io_utils.open_file(tflite_file, "rb") as f:
        head = f.read(8)
    if head[4:8] != _TFLITE_IDENTIFIER:
        raise ExportError(f"{tflite_file} exists and is not a TFLite model; nothing was "
                          f"replaced: name a new file or an earlier TFLite export")


def export_tflite(model, tflite_file: str, max_seq_length: Optional[int],
                  batch_size: Optional[int] = 1, regression: bool = False) -> str:
    """Writes a sentence (pair) classifier's network as a TFLite model of builtin ops.

    Its `serving_default` takes the three int32 features [batch_size, max_seq_length] (as
    the SavedModel's `tokenize` makes them) and returns `probabilities` [batch_size,
    num_labels], or `score` with `regression`. `max_seq_length` or `batch_size` None stays
    dynamic. An existing `tflite_file` is replaced only if it is a TFLite model. Returns the
    path; raises ExportError for a folder or another file there, and the converter's
    `ConverterError` naming any op without a builtin kernel.
    """
    check_tflite_target(tflite_file)
    atomic_write_bytes(tflite_file, tflite_classifier(model, max_seq_length, batch_size,
                                                      regression))
    return tflite_file


def tflite_interpreter(model_path: Optional[str] = None, model_content: Optional[bytes] = None):
    """A TFLite interpreter: LiteRT's (`ai_edge_litert`) if installed, else `tf.lite`'s."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        Interpreter = tf.lite.Interpreter  # noqa: N806 - deprecated in favour of LiteRT
    return Interpreter(model_path=model_path, model_content=model_content)


def tflite_predict(interpreter, features: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Runs an `export_tflite` model on any number of rows of `FEATURE_NAMES`, in batches of its
    batch size (the last padded with copies of its first row, dropped from the outputs).
    """
    runner = interpreter.get_signature_runner()
    batch = int(runner.get_input_details()["input_ids"]["shape_signature"][0])
    rows = len(features["input_ids"])
    step = rows if batch <= 0 else batch
    parts = []
    for begin in range(0, rows, max(step, 1)):
        part = {name: np.asarray(features[name][begin:begin + step], np.int32)
                for name in FEATURE_NAMES}
        count = len(part["input_ids"])
        if count < step:
            part = {name: np.concatenate([value, np.repeat(value[:1], step - count, 0)])
                    for name, value in part.items()}
        parts.append({key: value[:count] for key, value in runner(**part).items()})
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]} if parts else {}


def tensorflow_text_kernels() -> List[str]:
    """Kernels tensorflow-text's `tflite_registrar` adds to a TFLite interpreter.

    Its `AddX` functions name them (`AddFastWordpieceTokenize`, `AddRaggedTensorToTensor`,
    ...); a TensorFlow op `XWithOffsets` runs on kernel `X`.
    """
    from tensorflow_text import tflite_registrar
    return sorted(name[3:] for name in dir(tflite_registrar) if name.startswith("Add"))


def refused_ops(saved_model_dir: str, signature: str,
                with_tensorflow_text: bool = False) -> List[str]:
    """The op types (sorted) of a SavedModel signature that TFLite has no builtin kernel
    for, as its converter lists them; `with_tensorflow_text` leaves out those
    tensorflow-text's TFLite kernels run. Empty when the signature converts.
    """
    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir,
                                                         signature_keys=[signature])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    try:
        converter.convert()
        return []
    except Exception as error:  # noqa: BLE001 - ConverterError, or others with the same text
        message = str(error)
    found = re.findall(r"(?:TF Select|Custom) ops: ([^\n]*)", message)
    ops = {op.strip() for line in found for op in line.split(",") if op.strip()}
    # Errors raised before the op listing (a TensorArray loop, say) name the op as 'tf.X'.
    ops = ops or set(re.findall(r"'tf\.(\w+)' op", message))
    if not ops:
        raise UserError(f"{signature}: the converter failed without naming an op:\n"
                        f"{message[-2000:]}")
    if with_tensorflow_text:
        kernels = tensorflow_text_kernels()
        ops = {op for op in ops if not any(op.startswith(kernel) for kernel in kernels)}
    return sorted(ops)
