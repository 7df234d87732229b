"""What the runners show on the console, and what they keep for `--verbosity=1`.

`quiet_tensorflow_startup` imports TensorFlow without its start-up chatter, which it prints
from C++ before reading `TF_CPP_MIN_LOG_LEVEL`: it captures file descriptor 2 while
TensorFlow loads and writes back every line but a known few (absl's pre-init notice, the
oneDNN and CPU-instruction notices and, with no GPU visible, the CUDA/TensorRT probes; a
cuInit failure is kept where an NVIDIA driver exists). `TF_CPP_MIN_LOG_LEVEL` is 1 while
loading unless the user set it. `configure_logging` sets a run's log levels.
ADAPTER_BERT_RAW_TF_LOG=1 turns the filtering off.
"""

import contextlib
import faulthandler
import logging as std_logging
import os
import re
import sys
import tempfile

RAW_VARIABLE = "ADAPTER_BERT_RAW_TF_LOG"

# Python code whose INFO log records are hidden at the default verbosity.
LIBRARY_PATHS = ("/tensorflow/", "/tf_keras/", "/keras/")

# absl/TensorFlow C++ log line prefix: severity, date or 0000, time, thread id, file:line.
_CPP = r"^[IWE]\d{4} [\d:.]+ +\d+ "

ALWAYS_DROPPED = (
    re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called are "
               r"written to STDERR$"),
    re.compile(_CPP + r"port\.cc:\d+\] oneDNN custom operations are on\."),
    re.compile(_CPP + r"cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized"),
    # The second line of the CPU-instructions notice.
    re.compile(r"^To enable the following instructions: .* rebuild TensorFlow with the "
               r"appropriate compiler flags\.$"),
)
DROPPED_WITHOUT_GPU = (
    re.compile(_CPP + r"cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine, "
               r"GPU will not be used\.$"),
    re.compile(r"TF-TRT Warning: Could not find TensorRT$"),
)
# Dropped only where there is no NVIDIA driver at all (see the module docstring).
DROPPED_WITHOUT_DRIVER = (
    re.compile(_CPP + r"cuda_(platform|executor|diagnostics)\.cc:\d+\] failed call to cuInit: "),
)


def nvidia_driver_present() -> bool:
    """Whether the NVIDIA kernel driver is loaded on this machine."""
    return os.path.exists("/proc/driver/nvidia/version")


def dropped_patterns(gpu_visible: bool, driver_present: bool):
    """The start-up line patterns `quiet_tensorflow_startup` drops on this machine."""
    patterns = list(ALWAYS_DROPPED)
    if not gpu_visible:
        patterns += DROPPED_WITHOUT_GPU
        if not driver_present:
            patterns += DROPPED_WITHOUT_DRIVER
    return patterns


def filter_startup_lines(text: str, patterns) -> str:
    """`text` without the lines matching one of `patterns` (line endings kept)."""
    kept = [line for line in text.splitlines(keepends=True)
            if not any(p.search(line.rstrip("\r\n")) for p in patterns)]
    return "".join(kept)


@contextlib.contextmanager
def _captured_stderr_fd():
    """Redirects file descriptor 2 into a temporary file; yields a dict whose "text" is
    what was written, filled in on exit, after fd 2 is restored. The caller writes back
    what it keeps (`quiet_tensorflow_startup`); on an exception everything is written
    back."""
    sys.stderr.flush()
    saved = os.dup(2)
    real_stderr = os.fdopen(os.dup(saved), "w", buffering=1)
    was_enabled = faulthandler.is_enabled()
    captured = {"text": ""}
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        # A crash while loading TensorFlow is reported on the real stderr.
        faulthandler.enable(file=real_stderr)
        try:
            yield captured
        except BaseException:
            captured["failed"] = True
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if was_enabled:
                faulthandler.enable(file=sys.stderr)
            else:
                faulthandler.disable()
            real_stderr.close()
            capture.seek(0)
            captured["text"] = capture.read().decode("utf-8", errors="replace")
            if captured.get("failed"):
                sys.stderr.write(captured["text"])
                sys.stderr.flush()


def quiet_tensorflow_startup() -> None:
    """Imports TensorFlow (and lists its GPUs) without its known start-up lines, with
    `tf.keras` as tf-keras (TF_USE_LEGACY_KERAS=1 unless set).

    Call it in an entry point before anything imports TensorFlow; it does nothing if
    TensorFlow is already imported or ADAPTER_BERT_RAW_TF_LOG=1. See the module
    docstring for what is dropped and why.
    """
    if "tensorflow" in sys.modules:
        return
    # The package is tf-keras throughout; telling TensorFlow so before it loads makes
    # `tf.keras` the same tf-keras and spares importing Keras 3 (about a third of
    # TensorFlow's import time). A value the user set is kept.
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    if os.environ.get(RAW_VARIABLE) == "1":
        return
    try:
        os.fstat(2)
    except OSError:  # no stderr to filter (closed): nothing to quiet
        return
    level_was_set = "TF_CPP_MIN_LOG_LEVEL" in os.environ
    if not level_was_set:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
    try:
        with _captured_stderr_fd() as captured:
            import tensorflow as tf
            # The GPU probe, where the cuInit failure is logged, runs now rather than
            # at the strategy's first device listing.
            gpu_visible = bool(tf.config.list_physical_devices("GPU"))
    finally:
        if not level_was_set:
            os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
    kept = filter_startup_lines(captured["text"],
                                dropped_patterns(gpu_visible, nvidia_driver_present()))
    if kept:
        sys.stderr.write(kept)
        sys.stderr.flush()


class _HideLibraryInfo(std_logging.Filter):
    """Drops INFO (and lower) records logged by TensorFlow's or tf-keras' own Python code."""

    def filter(self, record: std_logging.LogRecord) -> bool:
        if record.levelno >= std_logging.WARNING:
            return True
        path = record.pathname.replace(os.sep, "/")
        return not any(part in path for part in LIBRARY_PATHS)


def configure_logging() -> None:
    """Log levels and handlers of a run, after absl has parsed --verbosity.

    - TensorFlow's Python logger gets its own stderr handler when TensorFlow is imported
      before absl's handler is installed (the runners import it first), so each of its
      warnings was printed twice, once in each format: that handler is removed where the
      root logger already has one (absl's), which then prints every record once.
    - At the default verbosity, INFO lines from TensorFlow's and tf-keras' Python code
      (checkpoint sharding timings and the like) are hidden; their warnings stay.
      `--verbosity=1` (debug) shows them, with this package's debug lines (example
      dumps, the parameter table, the optimizer's flags, every results line).
    Calling it again (tests run several runs in one process) changes nothing more.
    """
    from absl import logging
    root = std_logging.getLogger()
    tf_logger = std_logging.getLogger("tensorflow")
    if root.handlers:
        for handler in list(tf_logger.handlers):
            if type(handler) is std_logging.StreamHandler:  # TensorFlow's own
                tf_logger.removeHandler(handler)
    debug = logging.get_absl_logger().isEnabledFor(std_logging.DEBUG)
    for handler in root.handlers:
        hiding = [f for f in handler.filters if isinstance(f, _HideLibraryInfo)]
        if debug:
            for f in hiding:
                handler.removeFilter(f)
        elif not hiding:
            handler.addFilter(_HideLibraryInfo())
