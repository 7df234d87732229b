"""A disk cache of tokenised features, so a re-run does not tokenise again.

Entries are keyed by a digest of everything the features depend on (examples or the data
file's bytes, the vocabulary, casing, lengths, labels, `CACHE_VERSION`). They are plain
`.npz` arrays plus JSON, read with `allow_pickle=False`, so a shared `gs://` cache cannot
run code; dicts of arrays (GLUE) or records stacked field by field (SQuAD windows).
Unreadable or inconsistent entries are rebuilt; writes are atomic on any filesystem.
"""

import dataclasses
import hashlib
import io
import json
from typing import Callable, Iterable, Optional, TypeVar

import numpy as np
from absl import logging

from adapter_bert import io_utils
from adapter_bert.errors import UserError

CACHE_VERSION = 3  # 3: .npz + JSON instead of pickles
DISABLED = "none"
_META = "__meta__"  # the JSON description, stored as a uint8 array

T = TypeVar("T")


def records_digest(records: Iterable) -> str:
    """SHA-256 over the `repr` of every record (e.g. InputExample dataclasses), in order."""
    digest = hashlib.sha256()
    for record in records:
        digest.update(repr(record).encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


class CacheFormatError(UserError):
    """A value the cache cannot store as plain arrays, or an entry that does not decode."""


class FeatureCache:
    """Gets features from disk, or builds and stores them, in `directory` (any filesystem;
    None disables caching).

        >>> FeatureCache(None).get_or_build("train", {"k": 1}, lambda: [1, 2])
        [1, 2]
    """

    def __init__(self, directory: Optional[str]):
        self.directory = directory
        self.hits = 0

    @classmethod
    def for_run(cls, cache_dir_flag: Optional[str], output_dir: str) -> "FeatureCache":
        """The cache named by --feature_cache_dir (default output_dir/feature_cache)."""
        if cache_dir_flag and cache_dir_flag.lower() == DISABLED:
            return cls(None)
        return cls(cache_dir_flag or io_utils.join(output_dir, "feature_cache"))

    @staticmethod
    def key(parts: dict) -> str:
        """Digest of the JSON of `parts` plus CACHE_VERSION."""
        text = json.dumps({"version": CACHE_VERSION, **parts}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]

    def path(self, name: str, parts: dict) -> Optional[str]:
        """Where the entry for `name` and `parts` lives (None when disabled)."""
        if self.directory is None:
            return None
        return io_utils.join(self.directory, f"{name}-{self.key(parts)}.npz")

    def get_or_build(self, name: str, parts: dict, build: Callable[[], T]) -> T:
        """The cached value for (name, parts), else `build()` stored for next time.

        A value `encode` cannot store as plain data (e.g. an empty list) is returned
        uncached.
        """
        path = self.path(name, parts)
        if path and io_utils.isfile(path):
            try:
                # Read from the file: the arrays, not the file's bytes beside them.
                with io_utils.open_file(path, "rb") as f:
                    value = decode(f)
                self.hits += 1
                logging.info("Features from cache %s", path)
                return value
            except Exception as e:  # truncated, foreign or planted: rebuild it
                logging.warning("Ignoring unreadable feature cache %s (%s)", path, e)
        value = build()
        if path:
            try:
                arrays = _entry_arrays(value)
            except (ValueError, TypeError) as e:  # ragged fields, attributes not JSON, ...
                logging.info("Features for %s not cached (%s)", name, e)
                return value
            # Written straight to the file: no copy of the entry's bytes in memory.
            io_utils.atomic_write_with(path, lambda tmp: _write_entry(arrays, tmp))
        return value


# ------------------------------------------------------------------------- format

def _record_types():
    """The record types an entry may name (decoding never imports by name)."""
    from adapter_bert.data.squad import SquadFeature, SquadFeatureList
    return {"SquadFeature": (SquadFeature, SquadFeatureList)}


def encode(value) -> bytes:
    """The `.npz` bytes of a dict of arrays or a list of known dataclass records."""
    buffer = io.BytesIO()
    np.savez(buffer, **_entry_arrays(value))
    return buffer.getvalue()


def _write_entry(arrays: dict, path: str) -> None:
    with io_utils.open_file(path, "wb") as f:
        np.savez(f, **arrays)


def _entry_arrays(value) -> dict:
    """The arrays `encode` stores (the description included). Raises CacheFormatError
    (a ValueError) for a value it cannot store as plain numbers."""
    arrays = {}
    if isinstance(value, dict):
        meta = {"kind": "arrays", "keys": sorted(value)}
        for key in value:
            arrays["a/" + key] = _plain(np.asarray(value[key]), key)
    elif isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
        record_type = type(value[0]).__name__
        if record_type not in _record_types():
            raise CacheFormatError(f"cannot cache records of type {record_type}")
        fields = [f.name for f in dataclasses.fields(value[0])]
        meta = {"kind": "records", "type": record_type, "fields": fields,
                "count": len(value), "attributes": dict(vars(value))}
        for name in fields:
            arrays["f/" + name] = _plain(np.stack([np.asarray(getattr(r, name)) for r in value]),
                                         name)
    else:
        raise CacheFormatError(f"cannot cache a {type(value).__name__}")
    arrays[_META] = np.frombuffer(json.dumps(meta).encode("utf-8"), np.uint8)
    return arrays


def _plain(array: np.ndarray, name: str) -> np.ndarray:
    if array.dtype.kind not in "biuf":  # numbers and booleans only: nothing to unpickle
        raise CacheFormatError(f"field {name} has dtype {array.dtype}, not a plain number")
    return array


def decode(data):
    """The value `encode` stored, from its bytes or a seekable binary file. Raises on
    anything but plain numeric arrays."""
    source = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
    with np.load(source, allow_pickle=False) as archive:
        meta = json.loads(bytes(archive[_META]).decode("utf-8"))
        if meta["kind"] == "arrays":
            return {key: archive["a/" + key] for key in meta["keys"]}
        if meta["kind"] != "records":
            raise CacheFormatError(f"unknown entry kind {meta['kind']!r}")
        record_class, list_class = _record_types()[meta["type"]]
        if meta["fields"] != [f.name for f in dataclasses.fields(record_class)]:
            raise CacheFormatError(f"{meta['type']} fields changed")
        columns = {name: archive["f/" + name] for name in meta["fields"]}
    if any(len(column) != meta["count"] for column in columns.values()):
        raise CacheFormatError("columns of different lengths")
    scalars = {name for name, column in columns.items() if column.ndim == 1}
    records = list_class(
        record_class(**{name: (column[i].item() if name in scalars else column[i])
                        for name, column in columns.items()})
        for i in range(meta["count"]))
    for attribute, value in meta["attributes"].items():
        setattr(records, attribute, value)
    return records
