"""Names and queries of paths on any filesystem: joining, parents, existence, listings,
and whether a local folder can be written.
"""

import os
import posixpath
import tempfile
from typing import Iterator, List, Optional, Tuple

from adapter_bert.io_utils.store import (StorageError, WriteError, ask, gfile, is_local,
                                         local_equivalent, scheme)


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


def dirname(path: str) -> str:
    """The parent of `path` (works on URLs: `gs://b/x/y` -> `gs://b/x`)."""
    return os.path.dirname(path) if is_local(path) else posixpath.dirname(path)


def is_link(path: str) -> bool:
    """Whether the local `path` is a symbolic link (URLs have none)."""
    return is_local(path) and os.path.islink(path)


def exists(path: str) -> bool:
    """Whether a file or directory exists at `path`."""
    if is_local(path):
        return os.path.exists(path)
    return ask(path, lambda: gfile().exists(path)) and _listed(path)


def isdir(path: str) -> bool:
    """Whether `path` is a directory."""
    if is_local(path):
        return os.path.isdir(path)
    # gfile.isdir answers False for any failure: asking whether it exists first tells an
    # unreachable store from a missing directory.
    return exists(path) and gfile().isdir(path)


def _listed(path: str) -> bool:
    """Whether `path`'s parent lists its name. TensorFlow's `ram://` filesystem matches
    any string prefix (`ram://d/model.ckpt` "is a directory" when `ram://d/model.ckpt.index`
    exists), so there the name is checked against the parent's listing."""
    if scheme(path) != "ram":
        return True
    parent, _, name = path.rstrip("/").rpartition("/")
    if parent.endswith(":/"):  # a top-level name: nothing to compare with
        return True
    return name in {entry.rstrip("/") for entry in gfile().listdir(parent)}


def isfile(path: str) -> bool:
    """Whether `path` is an existing file (not a directory)."""
    if is_local(path):
        return os.path.isfile(path)
    return ask(path, lambda: gfile().exists(path)) and not gfile().isdir(path)


def makedirs(path: str) -> None:
    """Creates `path` and its parents; no error if it exists. WriteError, in one line, for
    a missing bucket (where TensorFlow's own call would loop instead of failing)."""
    if is_local(path):
        os.makedirs(path, exist_ok=True)
        return
    problem = bucket_problem(path)
    if problem:
        raise WriteError(path, problem)
    ask(path, lambda: gfile().makedirs(path))


def listdir(path: str) -> List[str]:
    """Names in the directory `path` (sorted)."""
    names = os.listdir(path) if is_local(path) else ask(path, lambda: gfile().listdir(path))
    return sorted(name.rstrip("/") for name in names)


def glob(pattern: str) -> List[str]:
    """Paths matching a shell pattern (sorted)."""
    if is_local(pattern):
        import glob as _glob
        return sorted(_glob.glob(pattern))
    return sorted(gfile().glob(pattern))


def walk(top: str) -> Iterator[Tuple[str, List[str], List[str]]]:
    """(directory, subdirectories, files) for `top` and everything below it."""
    if is_local(top):
        return os.walk(top)
    return gfile().walk(top)


def relative(path: str, top: str) -> str:
    """`path` relative to `top` ("" for `top` itself), with "/" between parts."""
    rest = str(path)[len(str(top).rstrip("/").rstrip(os.sep)):].strip("/").strip(os.sep)
    return rest.replace(os.sep, "/")


def files_under(top: str) -> List[str]:
    """Every file below the folder `top`, and every symbolic link there (to a file or a
    folder, never followed), as paths relative to it with "/" (sorted): a walk lists a
    link to a folder among the folders, and a check of what a folder holds must see it."""
    found = []
    for root, folders, names in walk(top):
        folder = relative(root, top)
        links = [name for name in folders if is_link(os.path.join(root, name))]
        found.extend(f"{folder}/{name}" if folder else name for name in [*names, *links])
    return sorted(found)


# Stores whose first path part is a bucket that must exist before anything is written in it
# (TensorFlow's recursive folder creation loops on a missing one instead of failing), and
# the command that makes one.
BUCKET_SCHEMES = {"gs": "gcloud storage buckets create", "s3": "aws s3 mb"}


def write_problem(path: str) -> Optional[str]:
    """Why nothing can be written at the folder or file `path`, or None: on a local disk
    (and `file://`, the same disk), `local_write_problem` of its folder; on a bucket store
    (`gs://`, `s3://`), a missing bucket; any other store is asked whether `path` exists,
    so that one that does not answer (or that TensorFlow lacks) raises its StorageError."""
    local = path if is_local(path) else local_equivalent(path)
    if local is not None:
        return local_write_problem(absolute(local))
    exists(path)
    return bucket_problem(path)


# Buckets this process found: a run makes many folders in one, and each question is a
# round trip to the store.
_BUCKETS_FOUND: set = set()


def bucket_problem(path: str) -> Optional[str]:
    """Why nothing can be written under the URL `path` of a bucket store: its bucket is
    missing (or not visible to these credentials); None otherwise, and for other paths."""
    kind = scheme(path)
    if kind not in BUCKET_SCHEMES:
        return None
    bucket = f"{kind}://{str(path)[len(kind) + 3:].split('/', 1)[0]}"
    if bucket in _BUCKETS_FOUND:
        return None
    try:
        if isdir(bucket):
            _BUCKETS_FOUND.add(bucket)
            return None
    except StorageError as e:  # named by the path asked about, as every store error is
        raise StorageError(path, e.reason) from None
    return (f"the bucket {bucket} does not exist, or these credentials cannot see it: "
            f"create it ({BUCKET_SCHEMES[kind]} {bucket}) or fix the name")


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
