"""Reading files on any filesystem: whole files as bytes, text or one JSON object (each
failure one line naming the file), file objects, modification times and digests.
"""

import hashlib
import io
import json
import os
from typing import Callable, Dict

from adapter_bert.errors import UserError
from adapter_bert.io_utils.store import ask, error_reason, gfile, is_local


def open_file(path: str, mode: str = "r", encoding: str = "utf-8"):
    """A file object for `path` (`open` locally, `tf.io.gfile.GFile` elsewhere).

    Text modes decode/encode with `encoding` on every filesystem.
    """
    if is_local(path):
        if "b" in mode:
            return open(path, mode)
        return open(path, mode, encoding=encoding, newline="" if "w" in mode else None)
    handle = gfile().GFile(path, mode.replace("t", "").replace("b", "") + "b")
    if "b" in mode:
        return handle
    if "r" in mode:
        return io.StringIO(handle.read().decode(encoding))
    return _TextUpload(handle, encoding)


class _TextUpload(io.StringIO):
    """Text written in memory, uploaded in one binary write on close."""

    def __init__(self, handle, encoding: str):
        super().__init__()
        self._handle, self._encoding = handle, encoding

    def close(self):
        if not self.closed:
            with self._handle:
                self._handle.write(self.getvalue().encode(self._encoding))
        super().close()


def read_bytes(path: str) -> bytes:
    """The whole content of the file `path`.

    Raises:
        OSError: as `open` does on every filesystem (FileNotFoundError when missing,
            IsADirectoryError for a directory, PermissionError, ...).
    """
    if is_local(path):
        with open(path, "rb") as f:
            return f.read()
    import tensorflow as tf
    if gfile().isdir(path):
        raise IsADirectoryError(21, "Is a directory", path)
    try:
        with gfile().GFile(path, "rb") as f:
            return ask(path, f.read)
    except tf.errors.NotFoundError:
        raise FileNotFoundError(2, "No such file or directory", path) from None


def decode_utf8(data: bytes, where: str, error=UserError) -> str:
    """`data` (a file's bytes) as text, a leading byte-order mark dropped.

    Raises:
        error: a byte that is not UTF-8, in one line naming `where`, its line and column.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise error(f"{where} line {line}: not valid UTF-8 (byte 0x{data[e.start]:02x} at "
                    f"byte column {column}); save the file as UTF-8") from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path: str, encoding: str = "utf-8") -> str:
    """The whole file decoded (raises UnicodeDecodeError like `open`)."""
    return read_bytes(path).decode(encoding)


def read_key_values(path: str) -> Dict[str, str]:
    """The `key = value` lines of a results file (`eval_results.txt`), as {key: value}
    strings; other lines are skipped. The one reader of that format."""
    pairs = (line.split(" = ", 1) for line in read_text(path).splitlines() if " = " in line)
    return {key.strip(): value.strip() for key, value in pairs}


def read_json_object(path: str, error: Callable[[str], Exception] = UserError) -> dict:
    """The JSON object in the file `path`: the one reader of the package's JSON files.

    Raises:
        `error` (UserError by default), one line naming the file and what was expected:
        missing or unreadable, not UTF-8, not JSON, or not an object at the top level.
    """
    try:
        value = json.loads(decode_utf8(read_bytes(path), path, error))
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: "
                    f"{e.msg})") from None
    except RecursionError:
        raise error(f"{path}: JSON nested too deeply") from None
    except OSError as e:
        raise error(f"{path}: cannot read it ({error_reason(e)})") from None
    if not isinstance(value, dict):
        raise error(f"{path}: expected a JSON object at the top level, got "
                    f"{type(value).__name__}")
    return value


def modified_time(path: str) -> float:
    """When the file `path` was last written, in seconds since the epoch (any filesystem;
    FileNotFoundError if missing)."""
    if is_local(path):
        return os.path.getmtime(path)
    import tensorflow as tf
    try:
        return gfile().stat(path).mtime_nsec / 1e9
    except tf.errors.NotFoundError:
        raise FileNotFoundError(2, "No such file or directory", path) from None


def file_digest(path: str) -> str:
    """SHA-256 of a file's bytes (hex), on any filesystem."""
    digest = hashlib.sha256()
    with open_file(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
