"""Atomic file writes: a reader never sees half a JSON, TSV or weights file.

Each write goes to a temporary file in the same directory, is flushed to disk, then
renamed over the target (`os.replace` is atomic on POSIX and Windows).
"""

import hashlib
import os
import re
import tempfile
from typing import Callable, List

# Names of the temporary files `atomic_write_with` creates: ".<target>.<random>.tmp".
_TEMPORARY = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")


def atomic_write_with(path: str, write: Callable[[str], None]) -> None:
    """Calls `write(tmp_path)` and moves the result to `path` only if it succeeded."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def atomic_write_text(path: str, text: str) -> None:
    """Writes UTF-8 text to `path` atomically."""
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    atomic_write_with(path, write)


def remove_stale_temporaries(directory: str) -> List[str]:
    """Deletes the temporary files that writes killed mid-way left under `directory`.

    A process killed (e.g. `kill -9`) inside `atomic_write_with` never renames its
    temporary file, so the target keeps its previous content and the temporary stays
    behind. A run calls this on its output directory before writing anything.

    Args:
        directory: searched recursively; need not exist.

    Returns:
        The paths removed.
    """
    removed = []
    for root, _, names in os.walk(directory):
        for name in names:
            if _TEMPORARY.match(name):
                path = os.path.join(root, name)
                try:
                    os.remove(path)
                except FileNotFoundError:
                    continue
                removed.append(path)
    return sorted(removed)


def file_digest(path: str) -> str:
    """SHA-256 of a file's bytes (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
