"""Folders the package writes, and the one way to replace or clear them.

A folder the package writes holds a manifest, `.adapter_bert_files.json`, listing every
file it wrote there (paths relative to the folder). Runs note their writes as they go
(`tracking`, `note_written`); a folder built whole (an export, the sweep's `best/`, a
downloaded checkpoint) gets its manifest when complete (`replace`). Before anything is
replaced or cleared, the folder is checked against its manifest file by file: a file the
manifest does not list (a user's, anywhere inside) stops it with one line naming that file,
and nothing is deleted. A subfolder with a manifest of its own is checked against that one.

`replace(target, build)` builds the new folder beside the target, then swaps:

- where folders are renamed in one step (a local disk, `file://`): the target is renamed
  aside, the new folder renamed into place, the old one deleted;
- on object stores (`gs://`, where TensorFlow renames a folder object by object): a
  journal file beside the target names the complete new folder, then the target's files
  are deleted (its manifest first), the new files copied in (the manifest last), and the
  journal and the staged copy deleted. A complete copy exists at every moment, the staged
  one until the target's manifest is back; a process killed half-way leaves the journal,
  and the next `replace` (or `finish_interrupted`) of that target completes the swap first.

A staged copy's manifest names its builder (machine, process id) from the start, so that a
build killed half-way leaves a copy the next `replace` of that target knows and deletes
(`remove_stale_staging`) once its builder has ended. Symbolic links inside a folder are
entries of their own (`io_utils.files_under`): the package writes none, so a user's link
stops a replace or a clear as a user's file does.
"""

import json
import os
import socket
import threading
from contextlib import contextmanager
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set

from adapter_bert.errors import UserError
from adapter_bert import io_utils
from adapter_bert.io_utils.writes import PACKAGE_TAG

MANIFEST = ".adapter_bert_files.json"
WRITER = "adapter_bert"
# Beside a target `x` (PACKAGE_TAG marks them): `.x.adapter_bert.staging.<hex>` (the new
# folder being built), `.x.adapter_bert.old.<hex>` (the old one, renamed aside) and the
# journal of a swap.


class ForeignFileError(UserError):
    """A folder the package would replace or clear holds a file the package did not write
    there; `path` names it. Nothing was deleted."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path


# ---------------------------------------------------------------- manifests

def _manifest(folder: str) -> Optional[dict]:
    try:
        record = json.loads(io_utils.read_text(io_utils.join(folder, MANIFEST)))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("written_by") == WRITER else None


def read_manifest(folder: str) -> Optional[Set[str]]:
    """The files `folder`'s manifest lists, or None where it has none (or an unreadable
    one: then nothing in the folder counts as the package's)."""
    record = _manifest(folder)
    return None if record is None else {str(name) for name in record.get("files", [])}


def write_manifest(folder: str, names: Iterable[str], builder: Optional[dict] = None) -> None:
    """Writes `folder`'s manifest listing `names` (relative paths with "/"), with an id
    of its own: a swap tells by it whether the target already holds the new copy.
    `builder`: the process building a staged copy (`replace`)."""
    record = {"written_by": WRITER, "id": os.urandom(8).hex(),
              "files": sorted(set(names) - {MANIFEST}), **({"builder": builder} if builder else {})}
    text = json.dumps(record, indent=1) + "\n"
    io_utils.atomic_write_bytes(io_utils.join(folder, MANIFEST), text.encode("utf-8"))


# Folders whose writes this process records as they happen: folder -> the names listed.
_TRACKED: Dict[str, Set[str]] = {}
# Re-entrant: writing a manifest is itself a write that listeners hear of.
_TRACK_LOCK = threading.RLock()


# Tracked folders' files written before tracking began (a run's lock), listed with the
# folder's next manifest write: a run that writes nothing else leaves no manifest behind.
_PENDING: Dict[str, Set[str]] = {}


def start_tracking(folder: str, written: Sequence[str] = ()) -> bool:
    """From now on, every file this process writes below `folder` through `io_utils` (or
    names to `note_written`) is added to `folder`'s manifest, with what it listed before.
    `written`: names in `folder` this process wrote already, listed from the next write
    on. Whether tracking started (False: it already was)."""
    key = _key(folder)
    with _TRACK_LOCK:
        if key in _TRACKED:
            return False
        _TRACKED[key] = set(read_manifest(folder) or ())
        _PENDING[key] = set(written)
    return True


def stop_tracking(folder: str) -> None:
    """Ends `start_tracking(folder)` (nothing if it was not tracked)."""
    with _TRACK_LOCK:
        _TRACKED.pop(_key(folder), None)
        _PENDING.pop(_key(folder), None)


@contextmanager
def tracking(folder: str) -> Iterator[None]:
    """`start_tracking(folder)` for the length of a `with` block."""
    started = start_tracking(folder)
    try:
        yield
    finally:
        if started:
            stop_tracking(folder)


def note_written(*paths: str) -> None:
    """Adds the files `paths` to the manifest of the innermost tracked folder holding
    each (nothing for a path outside every tracked folder)."""
    with _TRACK_LOCK:  # held while writing: a manifest never goes back to fewer names
        changed = set()
        for path in paths:
            root = _tracked_root(path)
            if root is None:
                continue
            name = _relative_name(path, root)
            if name and name != MANIFEST and name not in _TRACKED[root]:
                _TRACKED[root].add(name)
                changed.add(root)
        for root in changed:
            _TRACKED[root] |= _PENDING.pop(root, set())
            write_manifest(root, _TRACKED[root])


io_utils.WRITE_LISTENERS.append(note_written)


def note_written_under(folder: str, match: Callable[[str], bool]) -> None:
    """Notes the files under `folder` whose name `match` accepts: the files TensorFlow
    itself writes there (event files, checkpoint shards), whose names it chooses."""
    if io_utils.isdir(folder):
        note_written(*(io_utils.join(folder, name) for name in io_utils.files_under(folder)
                       if match(name.rsplit("/", 1)[-1])))


def _key(folder: str) -> str:
    return io_utils.absolute(str(folder)).rstrip("/").rstrip(os.sep)


def _tracked_root(path: str) -> Optional[str]:
    path = _key(path)
    roots = [root for root in _TRACKED if path != root and io_utils.is_within(path, root)]
    return max(roots, key=len) if roots else None


def _relative_name(path: str, root: str) -> str:
    return _key(path)[len(root):].strip("/").strip(os.sep).replace(os.sep, "/")


# ---------------------------------------------------------------- checking

def foreign_files(folder: str, keep: Sequence[str] = ()) -> List[str]:
    """The files below `folder` that no manifest lists (each checked against the manifest
    of the innermost folder holding one), as paths; names in `keep` (top-level entries the
    caller leaves in place) are not looked at."""
    if not io_utils.isdir(folder):
        return []
    names = [name for name in io_utils.files_under(folder)
             if name.split("/", 1)[0] not in keep and not io_utils.is_temporary(name)]
    manifests = {"": read_manifest(folder)}
    for name in names:
        if name.endswith("/" + MANIFEST):
            manifests[name[:-len(MANIFEST) - 1]] = read_manifest(
                io_utils.join(folder, name[:-len(MANIFEST) - 1]))
    foreign = []
    for name in names:
        if name == MANIFEST or name.endswith("/" + MANIFEST):
            continue
        owner = max((prefix for prefix in manifests
                     if not prefix or name.startswith(prefix + "/")), key=len)
        listed = manifests[owner] or set()
        if (name[len(owner) + 1:] if owner else name) not in listed:
            foreign.append(io_utils.join(folder, name))
    return foreign


def check_ours(folder: str, flag: str, action: str = "replaced",
               keep: Sequence[str] = ()) -> None:
    """Raises ForeignFileError where `folder` is not a folder or holds a file the package
    did not write there, in one line naming `flag` (the flag or role that named the
    folder), the first such file and that nothing was `action` ("replaced", "deleted");
    a missing folder passes."""
    named = f"{flag}={folder}" if flag.startswith("--") else f"{flag} {folder}"
    if io_utils.is_link(folder) or (io_utils.exists(folder) and not io_utils.isdir(folder)):
        kind = "a symbolic link" if io_utils.is_link(folder) else "a file"
        raise ForeignFileError(folder, f"{named} is {kind}, not a folder; nothing was "
                                       f"{action}: name a new folder")
    foreign = foreign_files(folder, keep)
    if foreign:
        first = foreign[0][len(folder.rstrip("/")) + 1:]
        more = f" and {len(foreign) - 1} other file{'s' if len(foreign) > 2 else ''}" \
            if len(foreign) > 1 else ""
        raise ForeignFileError(foreign[0], f"{named} holds {first}{more} that adapter_bert "
                                           f"did not write; nothing was {action}: move "
                                           f"{'them' if more else 'it'} away or name a new "
                                           f"folder")


# ---------------------------------------------------------------- clearing

def clear(folder: str, flag: str, keep: Sequence[str] = ()) -> List[str]:
    """Deletes everything the package wrote in `folder` but the top-level entries `keep`,
    after `check_ours` (which raises, deleting nothing, for any other file; `flag` names
    the flag asking); the folder's manifest then lists what it wrote of the kept entries.
    Returns the top-level names deleted."""
    check_ours(folder, flag, "deleted", keep)
    if not io_utils.isdir(folder):
        return []
    deleted = set()
    every = io_utils.files_under(folder)
    names = [name for name in every if name.split("/", 1)[0] not in keep]
    # What the package wrote among the kept entries stays listed: a cleared folder's
    # files are all still the package's.
    kept = sorted((read_manifest(folder) or set()) & set(every) - set(names))
    # The manifests go last, the folder's own very last: a clear killed half-way leaves
    # a folder whose remaining files are still listed.
    for name in sorted(names, key=lambda n: (n.endswith(MANIFEST), -n.count("/"), n)):
        try:
            io_utils.remove(io_utils.join(folder, name))
        except FileNotFoundError:
            pass
        deleted.add(name.split("/", 1)[0])
    io_utils.remove_empty_folders(folder, keep)
    with _TRACK_LOCK:
        if kept:
            write_manifest(folder, kept)
        if _key(folder) in _TRACKED:
            _TRACKED[_key(folder)] = set(kept)
    return sorted(deleted - {MANIFEST})


# ---------------------------------------------------------------- replacing

def replace(target: str, build: Callable[[str], None], flag: str) -> str:
    """Makes `target` the folder `build(staging)` writes, replacing only a folder the
    package wrote (see the module docstring for the order on each filesystem); `flag`
    names the flag or role that named it, for the refusal (`check_ours`). Returns `target`
    (made absolute where local)."""
    target = io_utils.absolute(target)
    finish_interrupted(target, flag)
    check_ours(target, flag)
    remove_stale_staging(target)
    staging = _beside(target, "staging")
    try:
        io_utils.makedirs(staging)
        # First, so that a staged copy whose builder was killed is known as one.
        write_manifest(staging, (), _this_process())
        build(staging)
        write_manifest(staging, io_utils.files_under(staging), _this_process())
    except BaseException:
        io_utils.remove_tree(staging)
        raise
    try:
        check_ours(target, flag)  # again: something may have been put there meanwhile
    except ForeignFileError:
        io_utils.remove_tree(staging)
        raise
    old = _beside(target, "old")
    old_files = sorted(read_manifest(target) or ()) if io_utils.isdir(target) else []
    journal = {"staging": staging, "old": old, "old_files": old_files}
    io_utils.atomic_write_text(_journal_path(target), json.dumps(journal) + "\n")
    _complete(target, journal, flag)
    return target


def _this_process() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _is_dead(builder) -> bool:
    """Whether the process a staged copy names is known to have ended: one of this
    machine's, no longer running (another machine's cannot be told, and is left)."""
    if not isinstance(builder, dict) or builder.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(builder["pid"]), 0)
    except ProcessLookupError:
        return True
    except (OSError, KeyError, TypeError, ValueError):
        return False
    return False


def remove_stale_staging(target: str) -> List[str]:
    """Deletes the staged copies of `target` whose builder was killed (their manifest
    names a process of this machine that has ended); returns their paths. A staged copy
    of a build still running, or of another machine's, is left."""
    parent, prefix = io_utils.dirname(target.rstrip("/")), \
        f".{io_utils.basename(target)}{PACKAGE_TAG}staging."
    if not io_utils.isdir(parent):
        return []
    removed = []
    for name in io_utils.listdir(parent):
        path = io_utils.join(parent, name.rstrip("/"))
        if name.startswith(prefix) and _is_dead((_manifest(path) or {}).get("builder")):
            io_utils.remove_tree(path)
            removed.append(path)
    return removed


def finish_interrupted(target: str, flag: str) -> bool:
    """Completes a `replace` of `target` that a killed process left half-way (its journal
    beside the target); whether there was one. `flag` as for `replace`."""
    path = _journal_path(io_utils.absolute(target))
    try:
        journal = json.loads(io_utils.read_text(path))
    except FileNotFoundError:
        return False
    except ValueError:  # a journal is written whole or not at all; this one is not ours
        raise UserError(f"{path}: not a journal adapter_bert wrote; {flag}: move it away") \
            from None
    _complete(io_utils.absolute(target), journal, flag)
    return True


def _complete(target: str, journal: dict, flag: str) -> None:
    staging, old = journal["staging"], journal["old"]
    if io_utils.renames_folders_atomically(target):
        if io_utils.isdir(staging):
            if io_utils.isdir(target):
                io_utils.rename(target, old)
            io_utils.rename(staging, target)
        io_utils.remove_tree(old)
    elif io_utils.isdir(staging):
        new = _manifest(staging)  # None: the staged copy was being deleted, the swap done
        if new is not None and (_manifest(target) or {}).get("id") != new.get("id"):
            _copy_over(target, staging, set(journal.get("old_files", [])) | set(new["files"]),
                       flag)
        if new is not None:
            io_utils.remove(io_utils.join(staging, MANIFEST))
        io_utils.remove_tree(staging)
    io_utils.remove(_journal_path(target))


def _copy_over(target: str, staging: str, ours: Set[str], flag: str) -> None:
    """The object-store swap: the target's files deleted (its manifest first), the staged
    ones copied in (the manifest last). `ours`: what the target may hold."""
    present = io_utils.files_under(target) if io_utils.isdir(target) else []
    strangers = [n for n in present if n not in ours and n != MANIFEST]
    if strangers:
        raise ForeignFileError(io_utils.join(target, strangers[0]),
                               f"{flag} {target} holds {strangers[0]}, which adapter_bert did "
                               f"not write, beside a replacement left half-way; nothing was "
                               f"replaced: move it away")
    for name in sorted(present, key=lambda n: n != MANIFEST):
        io_utils.remove(io_utils.join(target, name))
    for name in io_utils.files_under(staging):
        if name != MANIFEST:
            io_utils.copy_file(io_utils.join(staging, name), io_utils.join(target, name))
    io_utils.copy_file(io_utils.join(staging, MANIFEST), io_utils.join(target, MANIFEST))


def _beside(target: str, kind: str) -> str:
    name = f".{io_utils.basename(target)}{PACKAGE_TAG}{kind}.{os.urandom(4).hex()}"
    return io_utils.join(io_utils.dirname(target.rstrip("/")), name)


def _journal_path(target: str) -> str:
    target = target.rstrip("/")
    return io_utils.join(io_utils.dirname(target),
                         f".{io_utils.basename(target)}{PACKAGE_TAG}replacing.json")
