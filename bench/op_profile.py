"""Which TensorFlow ops ran, and for how long, from a profiler trace.

A traced `tf.function` graph holds ops that graph pruning removes before they run (a
weight-gradient MatMul for a frozen kernel, for instance), so questions like "does
adapter tuning compute gradients for frozen weights?" or "how much of a step is matmul
time?" are answered from what the profiler saw run, not from the graph.

Used by bench/speed.py (matmul time per training step) and tests/test_tuning.py.
"""

import pathlib
import tempfile
from typing import Callable, List, Tuple

# Kernels that do the matrix products (oneDNN and plain TensorFlow names).
MATMUL_SUFFIXES = ("MatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum")


def op_events(run: Callable[[], None]) -> List[Tuple[str, str, float]]:
    """Runs `run()` under the TensorFlow profiler; returns (op name, op type, ms) per op run.

    Only TensorFlow op events are kept (their trace names are "<op name>:<op type>").
    """
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    with tempfile.TemporaryDirectory() as scratch:
        root = pathlib.Path(scratch)
        tf.profiler.experimental.start(str(root))
        try:
            run()
        finally:
            tf.profiler.experimental.stop()
        events = []
        for path in root.rglob("*.xplane.pb"):
            space = xplane_pb2.XSpace()
            space.ParseFromString(path.read_bytes())
            for plane in space.planes:
                for line in plane.lines:
                    for event in line.events:
                        name, _, op_type = plane.event_metadata[event.metadata_id].name \
                            .rpartition(":")
                        name, op_type = name.strip(), op_type.strip()
                        if _is_op(name, op_type):
                            events.append((name, op_type, event.duration_ps / 1e9))
    return events


def _is_op(name: str, op_type: str) -> bool:
    # Op names never hold a colon (tf.data events, "Iterator::Map", do); the call of a
    # whole tf.function ("EagerLocalExecute: __inference_train_function_123") encloses
    # the ops it runs.
    return (bool(name and op_type) and ":" not in name
            and not op_type.startswith("__inference") and not name.startswith("__inference"))


def is_matmul(op_type: str) -> bool:
    """Whether an op type (e.g. "_MklMatMul", "_MklNativeFusedMatMul") is a matrix product."""
    return op_type.endswith(MATMUL_SUFFIXES)
