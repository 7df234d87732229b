"""Google's released BERT checkpoints by name: `--init_checkpoint=uncased_L-12_H-768_A-12`.

`resolve_backbone` calls `resolve_name`: an existing path always wins; otherwise a name of
`CATALOGUE` (the google-research/bert README's checkpoints; L-12/H-768 means the 2018
BERT-Base) is downloaded once from `ADAPTER_BERT_GOOGLE_BERT_URL` (a mirror or `file://`
works), checked (byte count, the zip's CRCs, the file set, the config against the name and
the embedding table) and unpacked into `$ADAPTER_BERT_CACHE/google_bert/<name>/`.

A cache folder is written whole by `io_utils.folders.replace` (unpacked beside it, then
swapped in; on `gs://` in an order a killed fetch's successor completes) and is complete
when it holds its manifest, which the swap writes last; `PROVENANCE` records where it came
from. A folder holding a file no fetch wrote is refused, never deleted.
"""

import dataclasses
import datetime
import difflib
import hashlib
import http.client
import json
import os
import posixpath
import re
import socket
import sys
import time
import urllib.error
import urllib.request
import zipfile
from typing import Dict, List, Optional, TextIO

from adapter_bert import io_utils
from adapter_bert.io_utils import folders
from adapter_bert.progress import Progress, format_bytes
from adapter_bert.errors import CheckpointError

DEFAULT_BASE_URL = "https://storage.googleapis.com/bert_models"
BASE_URL_ENV = "ADAPTER_BERT_GOOGLE_BERT_URL"
CACHE_ENV = "ADAPTER_BERT_CACHE"
CACHE_SUBDIR = "google_bert"
# In every cache folder: where and when it was downloaded, its size and digest.
PROVENANCE = ".adapter_bert_download.json"
REQUIRED_FILES = ("bert_config.json", "vocab.txt", "bert_model.ckpt.index",
                  "bert_model.ckpt.data-00000-of-00001")
# Seconds without a byte from the server before the download is given up.
TIMEOUT_S = 60
_STALE_PARTIAL_S = 24 * 3600
_SHAPE = re.compile(r"L-(\d+)_H-(\d+)_A-(\d+)$")
_NAME_LIKE = re.compile(r"^[A-Za-z_]*L-\d+_H-\d+_A-\d+$", re.IGNORECASE)


class GoogleCheckpointError(CheckpointError):
    """A Google checkpoint name is unknown, or its download or checks failed."""


@dataclasses.dataclass(frozen=True)
class GoogleCheckpoint:
    """One released checkpoint: where it lives and what its config must say.

    `lower_case` is Google's own classification (its `tokenization.py` lists
    multilingual and Chinese as lower-cased). `sha256` is None for every released
    file: Google publishes no digests.
    """

    name: str
    release: str  # the folder under the base URL, e.g. "2018_10_18"
    num_layers: int
    hidden_size: int
    num_heads: int
    lower_case: bool
    description: str
    sha256: Optional[str] = None

    def url(self, base_url: Optional[str] = None) -> str:
        """The zip's URL under `base_url` (default: the environment's, else Google's)."""
        base = base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
        return f"{base.rstrip('/')}/{self.release}/{self.name}.zip"


def _entry(name: str, release: str, lower_case: bool, description: str) -> GoogleCheckpoint:
    layers, hidden, heads = (int(v) for v in _SHAPE.search(name).groups())
    return GoogleCheckpoint(name, release, layers, hidden, heads, lower_case, description)


def _build_catalogue() -> Dict[str, GoogleCheckpoint]:
    entries = [
        _entry("uncased_L-12_H-768_A-12", "2018_10_18", True, "BERT-Base, Uncased"),
        _entry("uncased_L-24_H-1024_A-16", "2018_10_18", True, "BERT-Large, Uncased"),
        _entry("cased_L-12_H-768_A-12", "2018_10_18", False, "BERT-Base, Cased"),
        _entry("cased_L-24_H-1024_A-16", "2018_10_18", False, "BERT-Large, Cased"),
        _entry("wwm_uncased_L-24_H-1024_A-16", "2019_05_30", True,
               "BERT-Large, Uncased (Whole Word Masking)"),
        _entry("wwm_cased_L-24_H-1024_A-16", "2019_05_30", False,
               "BERT-Large, Cased (Whole Word Masking)"),
        _entry("multi_cased_L-12_H-768_A-12", "2018_11_23", False,
               "BERT-Base, Multilingual Cased (104 languages)"),
        _entry("multilingual_L-12_H-768_A-12", "2018_11_03", True,
               "BERT-Base, Multilingual Uncased (102 languages; Google recommends the cased one)"),
        _entry("chinese_L-12_H-768_A-12", "2018_11_03", True,
               "BERT-Base, Chinese (Simplified and Traditional)"),
    ]
    nicknames = {(2, 128): "BERT-Tiny", (4, 256): "BERT-Mini", (4, 512): "BERT-Small",
                 (8, 512): "BERT-Medium"}
    for layers in (2, 4, 6, 8, 10, 12):
        for hidden in (128, 256, 512, 768):
            if (layers, hidden) == (12, 768):
                continue  # same name as the original BERT-Base, which the name keeps
            nickname = nicknames.get((layers, hidden))
            description = f"Small BERT {layers}/{hidden}" + (f" ({nickname})" if nickname else "")
            entries.append(_entry(f"uncased_L-{layers}_H-{hidden}_A-{hidden // 64}",
                                  "2020_02_20", True, description))
    return {e.name: e for e in entries}


# Name -> entry. Tests add entries of their own (served from 127.0.0.1).
CATALOGUE: Dict[str, GoogleCheckpoint] = _build_catalogue()


def known_names() -> List[str]:
    """Every name `resolve_name` downloads, in catalogue order."""
    return list(CATALOGUE)


def lookup(name: str) -> Optional[GoogleCheckpoint]:
    """The catalogue entry of `name` (exact spelling), or None."""
    return CATALOGUE.get(name)


def close_matches(text: str, n: int = 3) -> List[str]:
    """Known names spelled like `text` (difflib), best first."""
    return difflib.get_close_matches(text, known_names(), n=n, cutoff=0.6)


def looks_like_name(text: str) -> bool:
    """Whether `text` reads as a Google checkpoint name rather than a path.

    True for `<something>L-<n>_H-<n>_A-<n>` and for near-misspellings of a known name;
    never for text with a directory separator or a URL scheme.
    """
    if not text or "/" in text or os.sep in text or io_utils.scheme(text):
        return False
    return bool(_NAME_LIKE.match(text)) or bool(
        difflib.get_close_matches(text, known_names(), n=1, cutoff=0.8))


def cache_root(cache_dir: Optional[str] = None) -> str:
    """Where downloaded checkpoints live: `<cache_dir or $ADAPTER_BERT_CACHE or
    $XDG_CACHE_HOME/adapter_bert or ~/.cache/adapter_bert>/google_bert`."""
    base = cache_dir or os.environ.get(CACHE_ENV)
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or io_utils.join("~", ".cache")
        base = io_utils.join(xdg, "adapter_bert")
    return io_utils.join(io_utils.expand(base).rstrip("/"), CACHE_SUBDIR)


def cached_path(name: str, cache_dir: Optional[str] = None) -> Optional[str]:
    """The complete cache folder of `name` (its manifest present), or None."""
    folder = io_utils.join(cache_root(cache_dir), name)
    return folder if io_utils.isfile(io_utils.join(folder, folders.MANIFEST)) else None


def resolve_name(path: str, cache_dir: Optional[str] = None) -> str:
    """`path` itself (an existing path, or anything that does not read as a checkpoint
    name), or the cache folder of the Google checkpoint it names, fetched once. Raises
    GoogleCheckpointError for an unknown name (listing close matches) or a failed fetch.
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not path or "/" in path or os.sep in path or io_utils.scheme(path):
        return path
    if io_utils.exists(path) or io_utils.exists(path + ".index"):
        return path
    if lookup(path) is not None:
        return fetch(path, cache_dir)
    if looks_like_name(path):
        matches = close_matches(path)
        hint = (f"did you mean {', '.join(matches)}?" if matches
                else "run `python -m adapter_bert.model.google_checkpoints` for the list")
        raise GoogleCheckpointError(
            f"{path}: neither an existing path nor a known Google BERT checkpoint name; {hint}")
    return path


def fetch(name: str, cache_dir: Optional[str] = None, base_url: Optional[str] = None,
          stream: Optional[TextIO] = None) -> str:
    """The cache folder of checkpoint `name`, downloaded and checked if absent.

    `cache_dir` and `base_url` override `$ADAPTER_BERT_CACHE` and
    `$ADAPTER_BERT_GOOGLE_BERT_URL`; progress goes to `stream` (default stderr). The folder
    holds `bert_config.json`, `vocab.txt`, `bert_model.ckpt.*` and a `tokenizer_config.json`
    with Google's casing. Raises GoogleCheckpointError in one line naming the checkpoint,
    the URL and what failed, leaving nothing in the cache.
    """
    entry = lookup(name)
    if entry is None:
        raise GoogleCheckpointError(f"{name}: not a known Google BERT checkpoint name")
    root = cache_root(cache_dir)
    final = io_utils.join(root, name)
    refused = f"the cache folder of {name}"
    try:
        folders.finish_interrupted(final, refused)  # a fetch killed while swapping
        if cached_path(name, cache_dir):
            return final
        io_utils.makedirs(root)
        _remove_stale_partials(root, name)
    except OSError as e:
        raise GoogleCheckpointError(f"{name}: cannot create a folder in the cache {root} ({e}); "
                                    f"set {CACHE_ENV} to a writable folder") from None
    url = entry.url(base_url)
    stream = stream if stream is not None else sys.stderr

    def build(staging: str) -> None:
        # The zip beside the cache when it is local (one disk), else in a local scratch.
        work = io_utils.make_scratch_dir(f".{name}.partial.",
                                         root if io_utils.is_local(root) else None)
        try:
            zip_path = io_utils.join(work, f"{name}.zip")
            size, digest = _download(url, zip_path, entry, stream)
            # Checked where TensorFlow reads a checkpoint prefix reliably (a local disk),
            # then copied to a `tf.io.gfile` cache.
            unpacked = staging if io_utils.is_local(staging) else io_utils.join(work, name)
            _unpack(zip_path, unpacked, entry)
            if unpacked != staging:
                io_utils.copy_tree(unpacked, staging)
        finally:
            io_utils.remove_tree(work)
        io_utils.atomic_write_text(io_utils.join(staging, PROVENANCE), json.dumps(
            {"name": name, "url": url, "bytes": size, "sha256": digest,
             "downloaded": datetime.datetime.now(datetime.timezone.utc)
             .isoformat(timespec="seconds")}, indent=2) + "\n")

    try:
        folders.replace(final, build, refused)
    except folders.ForeignFileError as e:
        raise GoogleCheckpointError(f"{name}: {e} (or set {CACHE_ENV} to another "
                                    f"folder)") from None
    except _Failure as e:
        raise GoogleCheckpointError(
            f"{name}: {e} ({url}); nothing was cached. To get it by hand, download that zip, "
            f"unzip it and pass the folder to --init_checkpoint (or set {BASE_URL_ENV} to a "
            f"mirror)") from None
    except OSError as e:  # writing into the cache itself
        raise GoogleCheckpointError(f"{name}: cannot write into the cache {root} ({e}); "
                                    f"nothing was cached") from None
    print(f"{name}: checked and cached in {final}", file=stream, flush=True)
    return final


class _Failure(Exception):
    """What went wrong, in a few words; `fetch` adds the name, URL and remedy."""


def _remove_stale_partials(root: str, name: str) -> None:
    """Deletes the download folders (`.<name>.partial.*`) and staged copies of `name`
    that a killed process left a day ago or more (younger ones may belong to a download
    running in another process)."""
    now = time.time()
    for entry in io_utils.listdir(root):
        if entry.startswith((f".{name}.partial.", f".{name}.adapter_bert.staging.")):
            path = io_utils.join(root, entry)
            try:
                if now - _newest_change(path) > _STALE_PARTIAL_S:
                    io_utils.remove_tree(path)
            except OSError:
                continue


def _newest_change(folder: str) -> float:
    """When `folder` last changed: its own time locally (a file added or removed), the
    newest file's on object stores (which keep no time for folders)."""
    if io_utils.is_local(folder):
        return io_utils.modified_time(folder)
    return max((io_utils.modified_time(io_utils.join(folder, name))
                for name in io_utils.files_under(folder)), default=0.0)


def _download(url: str, target: str, entry: GoogleCheckpoint, stream: TextIO):
    """Writes the body of `url` to `target`; returns (bytes, sha256 hex)."""
    request = urllib.request.Request(url, headers={"User-Agent": "adapter-bert"})
    digest = hashlib.sha256()
    size = 0
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            print(f"{entry.name}: downloading {url}"
                  + (f" ({format_bytes(total)})" if total is not None else ""),
                  file=stream, flush=True)
            progress = Progress(entry.name, total, unit="bytes", stream=stream)
            with io_utils.open_file(target, "wb") as out:
                while True:
                    chunk = response.read(1 << 20)
                    if not chunk:
                        break
                    out.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
                    progress.update(size)
            progress.finish()
    except urllib.error.HTTPError as e:
        raise _Failure(f"download failed: HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise _Failure(f"cannot reach the server ({e.reason})") from None
    except http.client.IncompleteRead as e:
        raise _Failure(f"download cut short: {size + len(e.partial)} of "
                       f"{size + len(e.partial) + (e.expected or 0)} bytes") from None
    except (http.client.HTTPException, socket.timeout, OSError) as e:
        raise _Failure(f"download failed after {size} bytes ({e or type(e).__name__})") from None
    if total is not None and size != total:
        raise _Failure(f"download cut short: {size} of {total} bytes (Content-Length)")
    if entry.sha256 and digest.hexdigest() != entry.sha256:
        raise _Failure(f"SHA-256 {digest.hexdigest()} differs from the expected {entry.sha256}")
    return size, digest.hexdigest()


def _unpack(zip_path: str, target: str, entry: GoogleCheckpoint) -> None:
    """Checks the zip and extracts the checkpoint's files, flat, into `target`."""
    try:
        with zipfile.ZipFile(zip_path) as archive:
            bad = archive.testzip()
            if bad is not None:
                raise _Failure(f"damaged download: CRC check failed for {bad} in the zip")
            members = [m for m in archive.infolist() if not m.is_dir()]
            configs = [m.filename for m in members
                       if posixpath.basename(m.filename) == "bert_config.json"]
            if len(configs) != 1:
                raise _Failure(f"the zip holds {len(configs)} bert_config.json files, expected 1")
            folder = posixpath.dirname(configs[0])
            files = {posixpath.basename(m.filename): m for m in members
                     if posixpath.dirname(m.filename) == folder}
            missing = [f for f in REQUIRED_FILES if f not in files]
            if missing:
                raise _Failure(f"the zip lacks {', '.join(missing)}")
            io_utils.makedirs(target)
            for base, member in files.items():
                if base.startswith("."):
                    continue
                with archive.open(member) as src, \
                        io_utils.open_file(io_utils.join(target, base), "wb") as dst:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        dst.write(block)
    except zipfile.BadZipFile as e:
        raise _Failure(f"damaged download: not a readable zip ({e})") from None
    except OSError as e:
        raise _Failure(f"cannot unpack the zip ({e})") from None
    _check_config(target, entry)
    io_utils.atomic_write_text(io_utils.join(target, "tokenizer_config.json"),
                               json.dumps({"do_lower_case": entry.lower_case}) + "\n")


def _check_config(folder: str, entry: GoogleCheckpoint) -> None:
    """The config says what the name says, and the weights agree with the config."""
    config = io_utils.read_json_object(io_utils.join(folder, "bert_config.json"), _Failure)
    expected = {"num_hidden_layers": entry.num_layers, "hidden_size": entry.hidden_size,
                "num_attention_heads": entry.num_heads}
    wrong = [f"{key}={config.get(key)} (expected {value})" for key, value in expected.items()
             if config.get(key) != value]
    if wrong:
        raise _Failure(f"bert_config.json does not describe {entry.name}: {', '.join(wrong)}")
    import tensorflow as tf
    try:
        shapes = dict(tf.train.list_variables(io_utils.join(folder, "bert_model.ckpt")))
    except (tf.errors.OpError, ValueError) as e:
        raise _Failure(f"unreadable bert_model.ckpt ({str(e).splitlines()[0]})") from None
    table = shapes.get("bert/embeddings/word_embeddings")
    wanted = [config.get("vocab_size"), entry.hidden_size]
    if table != wanted:
        raise _Failure(f"bert_model.ckpt's bert/embeddings/word_embeddings is {table}, the "
                       f"config says {wanted}")


def main() -> int:
    """Prints the catalogue: name, what it is, URL; and the cache folder."""
    for entry in CATALOGUE.values():
        cached = " (cached)" if cached_path(entry.name) else ""
        print(f"{entry.name:30} {entry.description}{cached}\n{'':30} {entry.url()}")
    print(f"cache: {cache_root()}  (${CACHE_ENV}; mirror: ${BASE_URL_ENV})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
