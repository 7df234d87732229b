"""Which filesystem a path is on, and the errors of its store.

A local path is handled with Python's `os`; a URL (`gs://`, `file://`, `ram://`, ...) with
`tf.io.gfile`, whose failures other than "not found" become one-line `StorageError`s
(`ask`). A write that fails is one `WriteError` naming the target.
"""

import errno
import re
import threading
from typing import Callable, Optional

from adapter_bert.errors import UserError


_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


class StorageError(OSError, UserError):
    """The store of a URL path (`gs://`, `s3://`, ...) did not answer or refused: no
    network, no credentials, no permission. `str()` is one line: the path, the store's
    reason and what to check."""

    def __init__(self, path: str, reason: str):
        super().__init__(errno.EIO, reason, path)
        self.path, self.reason = path, reason

    def __str__(self) -> str:
        return f"{self.path}: cannot access it ({self.reason}){store_advice(self.path, self.reason)}"


# Stores on this machine: their failures are the machine's (a path, a permission), never the
# network's or the credentials'.
LOCAL_SCHEMES = ("file", "ram")


def store_advice(path: str, reason: str) -> str:
    """What to do when the store of `path` failed with `reason`: "" for a store on this
    machine (the reason says it), a name of the stores TensorFlow has for a scheme it
    lacks, how to sign in where GCS refused an anonymous caller, else the network and
    the credentials (gs://: how to sign in)."""
    kind = scheme(path)
    if "not implemented" in reason:
        return (f"; TensorFlow has no {kind}:// filesystem: name a local path, file://, gs:// "
                f"or another store TensorFlow reads")
    if kind in LOCAL_SCHEMES:
        return ""
    if kind == "gs" and ("response code 401" in reason or "Anonymous caller" in reason):
        return ("; not signed in to Google Cloud: run  gcloud auth application-default login  "
                "(on Colab: from google.colab import auth; auth.authenticate_user())")
    login = " (gcloud auth application-default login)" if kind == "gs" else ""
    return f"; check the network and the credentials{login}"


class WriteError(OSError, UserError):
    """A file or checkpoint could not be written: `filename` is the target, `strerror`
    the reason ("No space left on device", "Permission denied", ...), `note` what the
    user may do (optional)."""

    def __init__(self, path: str, reason: str, errno_code: Optional[int] = None,
                 note: str = ""):
        super().__init__(errno_code, reason, path)
        self.note = note

    def __str__(self) -> str:
        note = f"; {self.note}" if self.note else ""
        return f"cannot write {self.filename}: {self.strerror}{note}"


# TensorFlow's file-system errors end "<path>; <reason>", an op's also " [Op:SaveV2]".
_TF_FUNCTION_PREFIX = re.compile(r"^\{\{function_node [^}]*\}\}\s*")


_TF_OP_SUFFIX = re.compile(r"\s*\[Op:[^\]]*\]\s*$")


def error_reason(error: BaseException) -> str:
    """The reason a read or write failed, without the path: `OSError.strerror`
    ("No space left on device"), or the last part of a TensorFlow error's message."""
    if isinstance(error, OSError) and error.strerror:
        return str(error.strerror)
    message = str(getattr(error, "message", None) or error).strip()
    message = _TF_OP_SUFFIX.sub("", _TF_FUNCTION_PREFIX.sub("", message.splitlines()[0]
                                                             if message else ""))
    return message.rsplit("; ", 1)[-1] if "; " in message else (message or type(error).__name__)


def as_write_error(path: str, error: BaseException) -> OSError:
    """`error` (an OSError or a TensorFlow error) as a `WriteError` naming `path` (a
    `StorageError`, which says what to check, stays as it is)."""
    if isinstance(error, (WriteError, StorageError)):
        return error
    return WriteError(path, error_reason(error), getattr(error, "errno", None))


def gfile():
    import tensorflow as tf
    return tf.io.gfile


def ask(path: str, query: Callable[[], object]):
    """`query()`, a `tf.io.gfile` call about the URL `path`; the store's failures other than
    "not found" become a `StorageError` (TensorFlow's own message spans several lines).
    On a remote store the main thread waits for it interruptibly (`interruptible`), so
    that SIGINT and SIGTERM reach their handlers while a slow store answers."""
    import tensorflow as tf
    try:
        return query() if scheme(path) in LOCAL_SCHEMES else interruptible(query)
    except tf.errors.NotFoundError:
        raise
    except tf.errors.OpError as e:
        reason = (e.message or type(e).__name__).strip().splitlines()[0]
        raise StorageError(path, reason) from None


def interruptible(call: Callable[[], object]):
    """`call()`; on the main thread, run on a helper thread while the main thread waits on
    a lock, which a signal interrupts (a call into TensorFlow's C++ is not: a handler would
    wait for the store to answer, forever where the store's client loops). A handler that
    raises leaves the helper thread to finish or hang on its own."""
    if threading.current_thread() is not threading.main_thread():
        return call()
    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread as it is
            outcome["error"] = e
    helper = threading.Thread(target=run, name="adapter_bert store call", daemon=True)
    helper.start()
    helper.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def scheme(path: str) -> str:
    """The URL scheme of `path` ("gs", "ram", "file", ...), "" for a local path."""
    match = _URL.match(str(path))
    return match.group(1).lower() if match else ""


def is_local(path: str) -> bool:
    """Whether `path` is a plain local path (handled by `os`, not `tf.io.gfile`)."""
    return not scheme(path)


def local_equivalent(path: str) -> Optional[str]:
    """The local path a `file://` URL names (None for any other URL or a local path)."""
    return str(path)[len("file://"):] if scheme(path) == "file" else None
