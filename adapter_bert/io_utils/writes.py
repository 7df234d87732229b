"""Writing, copying, renaming and deleting on any filesystem.

Writes are atomic: a temporary file renamed over the target where rename exists, one
upload on object stores; a failed write raises `WriteError` naming the path and leaves the
old content.
"""

import contextlib
import os
import re
import shutil
import tempfile
from typing import Callable, Iterator, List, Optional

from adapter_bert.io_utils.paths import (basename, dirname, exists, join, listdir, makedirs,
                                         relative, walk)
from adapter_bert.io_utils.reads import read_bytes
from adapter_bert.io_utils.store import as_write_error, ask, gfile, is_local, scheme


# The mark in the name of every file or folder the package writes beside a target and
# removes again: temporary files (".<target>.adapter_bert.<random>.tmp", which
# `remove_stale_temporaries` deletes) and folders.py's staging and old folders. The
# package's name in it is what keeps a user's file from being taken for one.
PACKAGE_TAG = ".adapter_bert."


_TEMPORARY = re.compile(r"^\..+" + re.escape(PACKAGE_TAG) + r"[a-z0-9_]{8}\.tmp$")


def is_temporary(name: str) -> bool:
    """Whether the file name (or the last part of a path) is that of a temporary file an
    atomic write makes: the package's own, never a user's."""
    return bool(_TEMPORARY.match(name.rsplit("/", 1)[-1]))


# Filesystems whose rename is a copy + delete: written in one go instead.
OBJECT_STORES = frozenset({"gs", "s3"})


def renames_folders_atomically(path: str) -> bool:
    """Whether `path`'s filesystem moves a folder in one step (a local disk, `file://`);
    object stores copy it object by object."""
    return scheme(path) in ("", "file")


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
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + PACKAGE_TAG,
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
    store = gfile()
    directory = dirname(path)
    if directory and not store.exists(directory):
        store.makedirs(directory)
    if scheme(path) in OBJECT_STORES:
        with store.GFile(path, "wb") as f:  # one upload: the object appears whole
            f.write(data)
        return
    tmp = f"{directory}/.{basename(path)}{PACKAGE_TAG}{os.urandom(6).hex()[:8]}.tmp"
    try:
        with store.GFile(tmp, "wb") as f:
            f.write(data)
        store.rename(tmp, path, overwrite=True)
    except BaseException:
        if store.exists(tmp):
            store.remove(tmp)
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
            if is_temporary(name):
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
        folder = relative(root, source)
        for name in sorted(names):
            destination = join(target, folder, name) if folder else join(target, name)
            copy_file(join(root, name), destination)
            written.append(destination)
    makedirs(target)
    return written


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


def rename(source: str, target: str) -> None:
    """Moves `source` over `target` (atomic locally; a copy + delete on object stores)."""
    if is_local(source) and is_local(target):
        os.replace(source, target)
    else:
        gfile().rename(source, target, overwrite=True)


def remove(path: str) -> None:
    """Deletes the file `path` (FileNotFoundError if missing, on every filesystem)."""
    if is_local(path):
        os.remove(path)
        return
    import tensorflow as tf
    try:
        gfile().remove(path)
    except tf.errors.NotFoundError:
        raise FileNotFoundError(path) from None


def remove_tree(path: str) -> None:
    """Deletes the directory `path` and everything in it; nothing if it is missing."""
    if is_local(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    import tensorflow as tf
    try:
        if gfile().isdir(path):
            gfile().rmtree(path)
    except tf.errors.OpError:
        pass


def remove_empty_folders(top: str, keep=()) -> None:
    """Deletes the folders below `top` that hold nothing (deepest first), then `top` if
    empty; the top-level entries in `keep` are left alone."""
    for root, dirs, names in sorted(walk(top), key=lambda entry: -len(str(entry[0]))):
        folder = relative(root, top)
        if names or (folder and folder.split("/", 1)[0] in keep):
            continue
        if listdir(root):
            continue
        if is_local(root):
            os.rmdir(root)
        else:
            ask(root, lambda: gfile().rmtree(root))


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
