"""File helpers for every path the package reads or writes, on any TensorFlow filesystem.

The one storage layer: every path a user gives (flags, arguments, caches) is joined,
read, written, listed, renamed and deleted here and nowhere else
(tests/test_storage_layer.py holds the rest of the package to it). Local paths use
Python's `os`/`open`; URLs (`gs://`, `file://`, `ram://`, ...) use `tf.io.gfile`. Callers
use the names below as `io_utils.<name>`; they live in `store` (which filesystem, its
errors), `paths` (names and queries), `reads` and `writes`. Folders the package writes
and may later replace or clear are handled by `io_utils.folders`.

Writes are atomic: a temporary file renamed over the target where rename exists, one
upload on object stores; a failed write raises `WriteError` naming the path and leaves the
old content. A store that cannot be reached raises `StorageError` (one
line); "not found" stays False or FileNotFoundError.
"""

# The storage layer's names, re-exported from where they live.
# ruff: noqa: F401
from adapter_bert.io_utils.store import (StorageError, WriteError, error_reason,
                                         as_write_error, scheme, is_local,
                                         local_equivalent, store_advice)
from adapter_bert.io_utils.paths import (expand, absolute, join, is_within, basename,
                                         dirname, is_link, exists, isdir, isfile,
                                         makedirs, listdir, glob, walk, files_under,
                                         local_write_problem, write_problem)
from adapter_bert.io_utils.reads import (open_file, read_bytes, decode_utf8,
                                         read_text, read_key_values, read_json_object,
                                         modified_time,
                                         file_digest)
from adapter_bert.io_utils.writes import (OBJECT_STORES, is_temporary,
                                          renames_folders_atomically, WRITE_LISTENERS,
                                          atomic_write_with, atomic_write_bytes,
                                          atomic_write_text, remove_stale_temporaries,
                                          copy_file, copy_tree, create_exclusive,
                                          rename, remove, remove_tree,
                                          remove_empty_folders, make_scratch_dir,
                                          scratch_dir)
