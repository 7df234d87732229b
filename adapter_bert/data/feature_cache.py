"""A disk cache of tokenised features, so a re-run does not tokenise again.

Entries are keyed by a digest of everything the features depend on: the examples (or
the data file's bytes), the vocabulary file's bytes, lower-casing, the sequence limits,
the labels and `CACHE_VERSION` (bumped whenever feature conversion changes). A changed
input therefore misses the cache instead of reading stale features.

Entries are pickles written atomically by this package into a directory the user
chose (`--feature_cache_dir`, default `<output_dir>/feature_cache`); an unreadable
entry is rebuilt, never trusted. Like any pickle, only point the cache at a directory
you trust.
"""

import hashlib
import json
import os
import pickle
from typing import Callable, Iterable, Optional, TypeVar

from absl import logging

from adapter_bert.io_utils import atomic_write_with

CACHE_VERSION = 2
DISABLED = "none"

T = TypeVar("T")


def records_digest(records: Iterable) -> str:
    """SHA-256 over the `repr` of every record (e.g. InputExample dataclasses), in order."""
    digest = hashlib.sha256()
    for record in records:
        digest.update(repr(record).encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


class FeatureCache:
    """Gets features from disk, or builds and stores them.

    Args:
        directory: cache directory, created on first write; None disables caching.

    Examples:
        >>> cache = FeatureCache(None)  # disabled: always builds
        >>> cache.get_or_build("train", {"k": 1}, lambda: [1, 2])
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
        return cls(cache_dir_flag or os.path.join(output_dir, "feature_cache"))

    @staticmethod
    def key(parts: dict) -> str:
        """Digest of the JSON of `parts` plus CACHE_VERSION."""
        text = json.dumps({"version": CACHE_VERSION, **parts}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]

    def path(self, name: str, parts: dict) -> Optional[str]:
        """Where the entry for `name` and `parts` lives (None when disabled)."""
        if self.directory is None:
            return None
        return os.path.join(self.directory, f"{name}-{self.key(parts)}.pkl")

    def get_or_build(self, name: str, parts: dict, build: Callable[[], T]) -> T:
        """The cached value for (name, parts), else `build()` stored for next time."""
        path = self.path(name, parts)
        if path and os.path.isfile(path):
            try:
                with open(path, "rb") as f:
                    value = pickle.load(f)
                self.hits += 1
                logging.info("Features from cache %s", path)
                return value
            except Exception as e:  # a truncated or foreign file: rebuild it
                logging.warning("Ignoring unreadable feature cache %s (%s)", path, e)
        value = build()
        if path:
            os.makedirs(self.directory, exist_ok=True)
            atomic_write_with(path, lambda tmp: _dump(value, tmp))
        return value


def _dump(value, path: str) -> None:
    with open(path, "wb") as f:
        pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
