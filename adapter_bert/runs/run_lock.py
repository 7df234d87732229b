"""One writer per run folder: the lock a run holds on its --output_dir.

The chief creates `<output_dir>/.adapter_bert.lock` (a JSON naming host, pid, the
process's start time and a heartbeat renewed every `HEARTBEAT_S`) before writing anything
and deletes it however the run ends; a second run on the folder refuses in one line. A
lock whose holder is gone (same host: its process; another host: a heartbeat `STALE_S`
old) is taken over with a warning, so the same command resumes a killed run. Locally the
lock is created with `O_EXCL`; object stores (`gs://`) lack create-if-absent, so the lock
is written, read back after `SETTLE_S` and kept only if it still holds this run's token
(a loser of a near tie stops at its next heartbeat, before saving its adapter).
"""

import dataclasses
import datetime
import json
import os
import socket
import threading
import time
import uuid
from typing import Optional

from absl import logging

from adapter_bert import io_utils
from adapter_bert.io_utils import folders
from adapter_bert.errors import UserError
from adapter_bert.command_line.flag_checks import FlagError

LOCK_NAME = ".adapter_bert.lock"
HEARTBEAT_S = 30.0
STALE_S = 120.0
SETTLE_S = 1.0

# The folders this process holds a lock on: a lock file naming this process but no
# live RunLock here was left by an earlier run in the same process (a notebook).
_HELD = set()


class LockLost(UserError, RuntimeError):
    """Another run took over this run's lock (only possible on object stores)."""


def _process_start(pid: int) -> Optional[str]:
    """The start time of process `pid` in clock ticks since boot (Linux), else None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            # The command name (field 2) may hold spaces: count from its closing ')'.
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (owned by anyone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    except OSError:
        return False
    return True


def _now() -> float:
    return time.time()


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat(
        timespec="seconds")


@dataclasses.dataclass
class Holder:
    """What a lock file says of the run that holds it."""

    host: str
    pid: int
    process_start: Optional[str]
    started: float
    heartbeat: float
    token: str

    @classmethod
    def this_process(cls) -> "Holder":
        now = _now()
        return cls(socket.gethostname(), os.getpid(), _process_start(os.getpid()), now, now,
                   uuid.uuid4().hex)

    @classmethod
    def parse(cls, text: str) -> Optional["Holder"]:
        """The holder a lock file names; None for a file that does not parse (a lock
        whose writer was killed mid-write)."""
        try:
            data = json.loads(text)
            return cls(str(data["host"]), int(data["pid"]), data.get("process_start"),
                       float(data["started"]), float(data["heartbeat"]), str(data["token"]))
        except (ValueError, TypeError, KeyError):
            return None

    def text(self) -> str:
        return json.dumps({**dataclasses.asdict(self), "started_utc": _iso(self.started),
                           "heartbeat_utc": _iso(self.heartbeat)}, indent=2) + "\n"

    def describe(self) -> str:
        return f"host {self.host}, process {self.pid}, started {_iso(self.started)}"

    def gone_because(self, lock_path: str) -> Optional[str]:
        """Why this holder no longer runs (a phrase), or None while it may still run."""
        if self.host == socket.gethostname():
            if self.pid == os.getpid():
                return None if lock_path in _HELD else "an earlier run in this process"
            if not process_alive(self.pid):
                return f"process {self.pid} no longer exists"
            start = _process_start(self.pid)
            if self.process_start and start:
                # The same process still runs: it holds the lock, beating or not.
                return None if start == self.process_start else \
                    f"process {self.pid} is another process now"
        age = _now() - self.heartbeat
        if age > STALE_S:
            return f"its heartbeat is {age:.0f} s old"
        return None


class RunLock:
    """The lock this run holds on `output_dir`; `release()` it when the run ends."""

    def __init__(self, output_dir: str, holder: Holder):
        self.output_dir = output_dir
        self.path = io_utils.join(output_dir, LOCK_NAME)
        self.holder = holder
        self.lost: Optional[str] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="run-lock-heartbeat",
                                        daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            current = _read_holder(self.path)
            if current is None or current.token != self.holder.token:
                self.lost = current.describe() if current else "nobody (the lock is gone)"
                logging.warning("The lock on %s is now held by %s", self.output_dir, self.lost)
                return
            self.holder.heartbeat = _now()
            try:
                io_utils.atomic_write_text(self.path, self.holder.text())
            except OSError as e:  # a full disk: the next beat tries again
                logging.warning("Could not renew the lock %s: %s", self.path, e)

    def check(self) -> None:
        """Raises LockLost if another run has taken this run's lock."""
        if self.lost:
            raise LockLost(f"--output_dir={self.output_dir}: another run ({self.lost}) took "
                           f"over this run's lock; stopping so that only one writes there")

    def release(self) -> None:
        """Stops the heartbeat and deletes the lock if it is still this run's."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        _HELD.discard(self.path)
        folders.stop_tracking(self.output_dir)
        if _still_ours(self.path, self.holder):
            try:
                io_utils.remove(self.path)
            except OSError:  # gone already, or the store refused: nothing of ours is lost
                pass


def acquire(output_dir: str) -> RunLock:
    """Takes the lock on `output_dir` (which must exist) for this process.

    Raises:
        FlagError: another run holds it; the line names the holder and what to do.
    """
    path = io_utils.join(output_dir, LOCK_NAME)
    holder = Holder.this_process()
    if not _create(path, holder):
        _take_over(path, holder, output_dir)
    lock = RunLock(output_dir, holder)
    # The run that holds the lock records every file it writes there: what
    # --overwrite_output_dir may later delete (`io_utils.folders`). The lock is listed
    # with the first of them, so a run killed without releasing it leaves a folder whose
    # every file is the package's.
    folders.start_tracking(output_dir, written=[LOCK_NAME])
    _HELD.add(path)
    lock._thread.start()
    return lock


def _create(path: str, holder: Holder) -> bool:
    """Creates the lock file if none exists; whether it did."""
    if not io_utils.create_exclusive(path, holder.text()):
        return False
    if io_utils.is_local(path):
        return True
    # An object store has no exclusive create: two runs may both have written; the one
    # whose token is there after the pause holds the lock.
    time.sleep(SETTLE_S)
    return _still_ours(path, holder)


def _still_ours(path: str, holder: Holder) -> bool:
    current = _read_holder(path)
    return current is not None and current.token == holder.token


def _read_holder(path: str) -> Optional[Holder]:
    """The holder the lock file at `path` names; None if it is missing or unreadable."""
    try:
        return Holder.parse(io_utils.read_text(path))
    except (OSError, UnicodeDecodeError):  # StorageError (gs:// unreachable) is an OSError
        return None


def _take_over(path: str, holder: Holder, output_dir: str) -> None:
    """Takes a lock whose holder is gone, or raises FlagError naming the live holder."""
    current = _read_holder(path)
    if current is None:
        reason = _unreadable_lock_reason(path)
        if reason is None:
            raise FlagError(f"--output_dir={output_dir} is being locked by another run that "
                            f"is starting; run one command per --output_dir")
    else:
        reason = current.gone_because(path)
        if reason is None:
            stale_at = _iso(current.heartbeat + STALE_S)
            raise FlagError(
                f"--output_dir={output_dir} is in use by another run ({current.describe()}); "
                f"wait for it to finish or use another --output_dir (if that run is gone, its "
                f"lock {path} is taken over from {stale_at}, or at once on its own host)")
    logging.warning("Taking over the lock on %s: %s", output_dir,
                    f"{current.describe()}: {reason}" if current else reason)
    io_utils.atomic_write_text(path, holder.text())
    if not io_utils.is_local(path):
        time.sleep(SETTLE_S)
    if not _still_ours(path, holder):
        raise FlagError(f"--output_dir={output_dir}: another run took its lock at the same "
                        f"moment; run one command per --output_dir")


def _unreadable_lock_reason(path: str) -> Optional[str]:
    """A lock file that does not parse: its writer was killed between creating and
    writing it (then it is old) or is writing it now (None: wait and see)."""
    try:
        modified = io_utils.modified_time(path)
    except OSError:
        modified = None
    if modified is None or _now() - modified > SETTLE_S * 5:
        return "its lock file is unreadable (a run killed while taking it)"
    return None
