"""File helpers for every path the package reads or writes, on any TensorFlow filesystem.

The one storage layer: every path a user gives (flags, arguments, caches) is joined,
read, written, listed, renamed and deleted here and nowhere else
(tests/test_storage_layer.py holds the rest of the package to it). Local paths use
Python's `os`/`open`; URLs (`gs://`, `file://`, `ram://`, ...) use `tf.io.gfile`. Folders
the package writes and may later replace or clear are handled by `io_utils.folders`.

Writes are atomic: a temporary file renamed over the target where rename exists, one
upload on object stores; a failed write raises `WriteError` naming the path and leaves the
old content. A store that cannot be reached raises `StorageError` (one
line); "not found" stays False or FileNotFoundError.
"""

import contextlib
import errno
import hashlib
import io
import json
import os
import posixpath
import re
import shutil
import tempfile
from typing import Callable, Iterator, List, Optional, Tuple

from adapter_bert.errors import UserError

# Names of the temporary files `atomic_write_with` creates:
# ".<target>.adapter_bert.<random>.tmp". The package's name in it is the mark that lets
# `remove_stale_temporaries` delete such a file: a user's file is never taken for one.
_TEMPORARY_TAG = ".adapter_bert."
_TEMPORARY = re.compile(r"^\..+\.adapter_bert\.[a-z0-9_]{8}\.tmp$")
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
# Filesystems whose rename is a copy + delete: written in one go instead.
OBJECT_STORES = frozenset({"gs", "s3"})


class StorageError(OSError, UserError):
    """The store of a URL path (`gs://`, `s3://`, ...) did not answer or refused: no
    network, no credentials, no permission. `str()` is one line: the path, the store's
    reason and what to check."""

    def __init__(self, path: str, reason: str):
        super().__init__(errno.EIO, reason, path)
        self.path, self.reason = path, reason

    def __str__(self) -> str:
        login = " (gcloud auth application-default login)" if scheme(self.path) == "gs" else ""
        return (f"{self.path}: cannot access it ({self.reason}); check the network and the "
                f"credentials{login}")


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


def _gfile():
    import tensorflow as tf
    return tf.io.gfile


def _ask(path: str, query: Callable[[], object]):
    """`query()`, a `tf.io.gfile` call about the URL `path`; the store's failures other than
    "not found" become a `StorageError` (TensorFlow's own message spans several lines)."""
    import tensorflow as tf
    try:
        return query()
    except tf.errors.NotFoundError:
        raise
    except tf.errors.OpError as e:
        reason = (e.message or type(e).__name__).strip().splitlines()[0]
        raise StorageError(path, reason) from None


def scheme(path: str) -> str:
    """The URL scheme of `path` ("gs", "ram", "file", ...), "" for a local path."""
    match = _URL.match(str(path))
    return match.group(1).lower() if match else ""


def is_local(path: str) -> bool:
    """Whether `path` is a plain local path (handled by `os`, not `tf.io.gfile`)."""
    return not scheme(path)


def expand(path: str) -> str:
    """`~` expanded for local paths; URLs unchanged."""
    return os.path.expanduser(path) if is_local(path) else path


def absolute(path: str) -> str:
    """`path` made absolute (`~` expanded) if local; a URL unchanged (`os.path.abspath`
    would turn `gs://b/x` into `<cwd>/gs:/b/x`)."""
    return os.path.abspath(os.path.expanduser(path)) if is_local(path) else path


def join(base: str, *names: str) -> str:
    """`base` and `names` joined with the separator of `base`'s filesystem: the local one,
    or "/" for a URL on every OS."""
    if is_local(base):
        return os.path.join(base, *names)
    return posixpath.join(base, *names)


def is_within(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or lies below it (both absolute, or both URLs)."""
    path, folder = (str(p).rstrip("/").rstrip(os.sep) for p in (path, folder))
    return path == folder or path.startswith(folder + "/") or path.startswith(folder + os.sep)


def basename(path: str) -> str:
    """The last part of `path` (`gs://b/x/y` -> `y`; a trailing separator ignored)."""
    path = str(path)
    return posixpath.basename(path.rstrip("/")) if not is_local(path) else \
        os.path.basename(os.path.normpath(path)) if path else ""


def is_link(path: str) -> bool:
    """Whether the local `path` is a symbolic link (URLs have none)."""
    return is_local(path) and os.path.islink(path)


def renames_folders_atomically(path: str) -> bool:
    """Whether `path`'s filesystem moves a folder in one step (a local disk, `file://`);
    object stores copy it object by object."""
    return scheme(path) in ("", "file")


def exists(path: str) -> bool:
    """Whether a file or directory exists at `path`."""
    if is_local(path):
        return os.path.exists(path)
    return _ask(path, lambda: _gfile().exists(path)) and _listed(path)


def isdir(path: str) -> bool:
    """Whether `path` is a directory."""
    if is_local(path):
        return os.path.isdir(path)
    # gfile.isdir answers False for any failure: asking whether it exists first tells an
    # unreachable store from a missing directory.
    return exists(path) and _gfile().isdir(path)


def _listed(path: str) -> bool:
    """Whether `path`'s parent lists its name. TensorFlow's `ram://` filesystem matches
    any string prefix (`ram://d/model.ckpt` "is a directory" when `ram://d/model.ckpt.index`
    exists), so there the name is checked against the parent's listing."""
    if scheme(path) != "ram":
        return True
    parent, _, name = path.rstrip("/").rpartition("/")
    if parent.endswith(":/"):  # a top-level name: nothing to compare with
        return True
    return name in {entry.rstrip("/") for entry in _gfile().listdir(parent)}


def isfile(path: str) -> bool:
    """Whether `path` is an existing file (not a directory)."""
    if is_local(path):
        return os.path.isfile(path)
    return _ask(path, lambda: _gfile().exists(path)) and not _gfile().isdir(path)


def dirname(path: str) -> str:
    """The parent of `path` (works on URLs: `gs://b/x/y` -> `gs://b/x`)."""
    return os.path.dirname(path) if is_local(path) else posixpath.dirname(path)


def makedirs(path: str) -> None:
    """Creates `path` and its parents; no error if it exists."""
    if is_local(path):
        os.makedirs(path, exist_ok=True)
    else:
        _ask(path, lambda: _gfile().makedirs(path))


def listdir(path: str) -> List[str]:
    """Names in the directory `path` (sorted)."""
    names = os.listdir(path) if is_local(path) else _ask(path, lambda: _gfile().listdir(path))
    return sorted(name.rstrip("/") for name in names)


def glob(pattern: str) -> List[str]:
    """Paths matching a shell pattern (sorted)."""
    if is_local(pattern):
        import glob as _glob
        return sorted(_glob.glob(pattern))
    return sorted(_gfile().glob(pattern))


def walk(top: str) -> Iterator[Tuple[str, List[str], List[str]]]:
    """(directory, subdirectories, files) for `top` and everything below it."""
    if is_local(top):
        return os.walk(top)
    return _gfile().walk(top)


def open_file(path: str, mode: str = "r", encoding: str = "utf-8"):
    """A file object for `path` (`open` locally, `tf.io.gfile.GFile` elsewhere).

    Text modes decode/encode with `encoding` on every filesystem.
    """
    if is_local(path):
        if "b" in mode:
            return open(path, mode)
        return open(path, mode, encoding=encoding, newline="" if "w" in mode else None)
    handle = _gfile().GFile(path, mode.replace("t", "").replace("b", "") + "b")
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
    if _gfile().isdir(path):
        raise IsADirectoryError(21, "Is a directory", path)
    try:
        with _gfile().GFile(path, "rb") as f:
            return _ask(path, f.read)
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


def read_json_object(path: str, error: Callable[[str], Exception] = UserError) -> dict:
    """The JSON object in the file `path`: the one reader of the package's JSON files.

    Raises:
        `error` (UserError by default), one line naming the file and what was expected:
        missing or unreadable, not UTF-8, not JSON, or not an object at the top level.
    """
    try:
        value = json.loads(read_text(path))
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
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
        return _gfile().stat(path).mtime_nsec / 1e9
    except tf.errors.NotFoundError:
        raise FileNotFoundError(2, "No such file or directory", path) from None


def remove(path: str) -> None:
    """Deletes the file `path` (FileNotFoundError if missing, on every filesystem)."""
    if is_local(path):
        os.remove(path)
        return
    import tensorflow as tf
    try:
        _gfile().remove(path)
    except tf.errors.NotFoundError:
        raise FileNotFoundError(path) from None


def remove_tree(path: str) -> None:
    """Deletes the directory `path` and everything in it; nothing if it is missing."""
    if is_local(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    import tensorflow as tf
    try:
        if _gfile().isdir(path):
            _gfile().rmtree(path)
    except tf.errors.OpError:
        pass


def remove_empty_folders(top: str, keep=()) -> None:
    """Deletes the folders below `top` that hold nothing (deepest first), then `top` if
    empty; the top-level entries in `keep` are left alone."""
    for root, dirs, names in sorted(walk(top), key=lambda entry: -len(str(entry[0]))):
        relative = _relative(root, top)
        if names or (relative and relative.split("/", 1)[0] in keep):
            continue
        if listdir(root):
            continue
        if is_local(root):
            os.rmdir(root)
        else:
            _ask(root, lambda: _gfile().rmtree(root))


def rename(source: str, target: str) -> None:
    """Moves `source` over `target` (atomic locally; a copy + delete on object stores)."""
    if is_local(source) and is_local(target):
        os.replace(source, target)
    else:
        _gfile().rename(source, target, overwrite=True)


# Called with each path a write here completed: `folders` records the files written into
# the folders it tracks (it adds itself when imported; nothing is tracked before).
WRITE_LISTENERS: List[Callable[[str], None]] = []


def _written(path: str) -> None:
    for listener in WRITE_LISTENERS:
        listener(path)


def atomic_write_with(path: str, write: Callable[[str], None]) -> None:
    """Calls `write(tmp_path)` (a local file) and moves the result to `path` only if it
    succeeded. `path` may be on any filesystem; see the module docstring for what
    "atomic" means on each."""
    if is_local(path):
        _atomic_local(path, write)
        return
    directory = tempfile.mkdtemp(prefix="adapter_bert_write_")
    try:
        local = os.path.join(directory, os.path.basename(path) or "file")
        write(local)
        with open(local, "rb") as f:
            data = f.read()
        atomic_write_bytes(path, data)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _atomic_local(path: str, write: Callable[[str], None]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + _TEMPORARY_TAG,
                                   suffix=".tmp",
                                   dir=directory)
        os.close(fd)
    except OSError as e:
        raise as_write_error(path, e) from e
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
        _written(path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        # The kernel's error names the temporary file, or nothing: name the target.
        if isinstance(e, OSError):
            raise as_write_error(path, e) from e
        raise


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Writes `data` to `path` atomically (see the module docstring)."""
    if is_local(path):
        def write(tmp):
            with open(tmp, "wb") as f:
                f.write(data)
        _atomic_local(path, write)
        return
    import tensorflow as tf
    try:
        _atomic_remote(path, data)
    except tf.errors.OpError as e:
        raise as_write_error(path, e) from None
    _written(path)


def _atomic_remote(path: str, data: bytes) -> None:
    gfile = _gfile()
    directory = dirname(path)
    if directory and not gfile.exists(directory):
        gfile.makedirs(directory)
    if scheme(path) in OBJECT_STORES:
        with gfile.GFile(path, "wb") as f:  # one upload: the object appears whole
            f.write(data)
        return
    tmp = f"{directory}/.{basename(path)}{_TEMPORARY_TAG}{os.urandom(6).hex()[:8]}.tmp"
    try:
        with gfile.GFile(tmp, "wb") as f:
            f.write(data)
        gfile.rename(tmp, path, overwrite=True)
    except BaseException:
        if gfile.exists(tmp):
            gfile.remove(tmp)
        raise


def atomic_write_text(path: str, text: str) -> None:
    """Writes UTF-8 text to `path` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def remove_stale_temporaries(directory: str) -> List[str]:
    """Deletes (and returns) the temporary files that writes killed inside
    `atomic_write_with` left anywhere under `directory` (which need not exist); runs call it
    before writing.
    """
    if not exists(directory):
        return []
    removed = []
    for root, _, names in walk(directory):
        for name in names:
            if _TEMPORARY.match(name):
                path = join(root, name)
                try:
                    remove(path)
                except FileNotFoundError:
                    continue
                removed.append(path)
    return sorted(removed)


def copy_file(source: str, target: str) -> None:
    """Copies the file `source` over `target` (any filesystems; the target written whole
    as `atomic_write_bytes` does)."""
    atomic_write_bytes(target, read_bytes(source))


def copy_tree(source: str, target: str) -> List[str]:
    """Copies every file under the folder `source` to the same place under `target`
    (made if missing); returns the targets written, in the order written."""
    written = []
    for root, _, names in walk(source):
        relative = _relative(root, source)
        for name in sorted(names):
            destination = join(target, relative, name) if relative else join(target, name)
            copy_file(join(root, name), destination)
            written.append(destination)
    makedirs(target)
    return written


def _relative(path: str, top: str) -> str:
    """`path` relative to `top` ("" for `top` itself), with "/" between parts."""
    rest = str(path)[len(str(top).rstrip("/").rstrip(os.sep)):].strip("/").strip(os.sep)
    return rest.replace(os.sep, "/")


def files_under(top: str) -> List[str]:
    """Every file below the folder `top`, as paths relative to it with "/" (sorted)."""
    found = []
    for root, _, names in walk(top):
        relative = _relative(root, top)
        found.extend(f"{relative}/{name}" if relative else name for name in names)
    return sorted(found)


def make_scratch_dir(prefix: str, parent: Optional[str] = None) -> str:
    """A new private local folder for the package's own work files (downloads being
    unpacked, a fit's checkpoints, a worker's copies): under `parent` (a local folder) or
    the system's temporary folder. The caller deletes it with `remove_tree`."""
    return tempfile.mkdtemp(prefix=prefix, dir=parent)


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[str]:
    """`make_scratch_dir` for the length of a `with` block, deleted after it."""
    directory = make_scratch_dir(prefix)
    try:
        yield directory
    finally:
        remove_tree(directory)


def local_write_problem(path: str) -> Optional[str]:
    """Why nothing can be written in the local folder `path` (or, if it does not exist,
    made in its nearest existing parent), or None. Tried with a temporary folder removed
    at once: permission bits do not stop root, while /proc or a read-only mount do."""
    path = absolute(path)
    parent = path
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"cannot create it, {parent} is a file"
    try:
        probe = tempfile.mkdtemp(prefix=".adapter_bert_probe_", dir=parent)
    except OSError as e:
        where = "directory is not writable" if parent == path else \
            f"cannot create it in {parent}"
        return f"{where} ({e.strerror or e})"
    os.rmdir(probe)
    return None


def create_exclusive(path: str, text: str) -> bool:
    """Creates the file `path` holding `text` unless something exists there; whether it
    did. Exclusive on a local disk (O_EXCL); on object stores, which have no exclusive
    create through `tf.io.gfile`, a check then a whole upload: the caller confirms by
    reading back after a pause (`tasks.run_lock`)."""
    if is_local(path):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return True
    if exists(path):
        return False
    atomic_write_text(path, text)
    return True


def file_digest(path: str) -> str:
    """SHA-256 of a file's bytes (hex), on any filesystem."""
    digest = hashlib.sha256()
    with open_file(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

