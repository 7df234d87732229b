"""Google's released checkpoints by name: the catalogue, and download, checks and cache
against a local HTTP server on 127.0.0.1 serving tiny zips in Google's layouts."""

import http.server
import io
import json
import os
import re
import socket
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from adapter_bert import io_utils
from adapter_bert.io_utils import folders
from adapter_bert import google_checkpoints as gc
from adapter_bert.model.checkpoints import (CheckpointError, read_tf1_checkpoint,
                                            resolve_backbone)
from adapter_bert.model.factory import build_pretrained

# Test-only names: the tiny backbone of tests/runner_utils.py is L-2, H-16, A-2, so the
# names say so and the config check applies to them as to the real ones.
FOLDER = "uncased_L-2_H-16_A-2"  # zip with a top folder named like it (2018 layout)
FLAT = "cased_L-2_H-16_A-2"      # zip with the files at its top level
TRUNCATED = "uncased_L-3_H-16_A-2"
BAD_CRC = "uncased_L-5_H-16_A-2"
MISSING = "uncased_L-7_H-16_A-2"
WRONG_SHAPE = "uncased_L-4_H-16_A-2"
NOT_SERVED = "uncased_L-9_H-16_A-2"
TEST_NAMES = (FOLDER, FLAT, TRUNCATED, BAD_CRC, MISSING, WRONG_SHAPE, NOT_SERVED)


# ---------------------------------------------------------------- the real catalogue

def test_catalogue_has_googles_names_locations_and_shapes():
    names = gc.known_names()
    assert len(names) == len(set(names)) == 9 + 23
    base = "https://storage.googleapis.com/bert_models"
    expected_urls = {
        "uncased_L-12_H-768_A-12": f"{base}/2018_10_18/uncased_L-12_H-768_A-12.zip",
        "uncased_L-24_H-1024_A-16": f"{base}/2018_10_18/uncased_L-24_H-1024_A-16.zip",
        "cased_L-12_H-768_A-12": f"{base}/2018_10_18/cased_L-12_H-768_A-12.zip",
        "cased_L-24_H-1024_A-16": f"{base}/2018_10_18/cased_L-24_H-1024_A-16.zip",
        "wwm_uncased_L-24_H-1024_A-16": f"{base}/2019_05_30/wwm_uncased_L-24_H-1024_A-16.zip",
        "wwm_cased_L-24_H-1024_A-16": f"{base}/2019_05_30/wwm_cased_L-24_H-1024_A-16.zip",
        "multi_cased_L-12_H-768_A-12": f"{base}/2018_11_23/multi_cased_L-12_H-768_A-12.zip",
        "multilingual_L-12_H-768_A-12": f"{base}/2018_11_03/multilingual_L-12_H-768_A-12.zip",
        "chinese_L-12_H-768_A-12": f"{base}/2018_11_03/chinese_L-12_H-768_A-12.zip",
        "uncased_L-2_H-128_A-2": f"{base}/2020_02_20/uncased_L-2_H-128_A-2.zip",
        "uncased_L-4_H-256_A-4": f"{base}/2020_02_20/uncased_L-4_H-256_A-4.zip",
        "uncased_L-12_H-512_A-8": f"{base}/2020_02_20/uncased_L-12_H-512_A-8.zip",
    }
    for name, url in expected_urls.items():
        assert gc.lookup(name).url(base_url=gc.DEFAULT_BASE_URL) == url
    small = [n for n in names if gc.lookup(n).release == "2020_02_20"]
    assert sorted(small) == sorted(
        f"uncased_L-{layers}_H-{h}_A-{h // 64}" for layers in (2, 4, 6, 8, 10, 12)
        for h in (128, 256, 512, 768) if (layers, h) != (12, 768))
    for name in names:
        entry = gc.lookup(name)
        assert name.endswith(f"L-{entry.num_layers}_H-{entry.hidden_size}_A-{entry.num_heads}")
        assert entry.hidden_size == 64 * entry.num_heads  # every release uses 64-wide heads
        assert entry.sha256 is None  # Google publishes no digests
        # Casing as Google's tokenization.py classifies it: multilingual and Chinese lower.
        assert entry.lower_case == ("cased" not in name.replace("uncased", ""))
    assert not gc.lookup("multi_cased_L-12_H-768_A-12").lower_case
    assert gc.lookup("chinese_L-12_H-768_A-12").lower_case


@pytest.mark.parametrize("text, expected", [
    ("uncased_L-12_H-768_A-12", True), ("uncased_L-12_H-768_A12", True),
    ("Uncased_L-12_H-768_A-12", True), ("cased_L-2_H-999_A-3", True),
    ("bert_model.ckpt", False), ("out/uncased_L-12_H-768_A-12", False),
    ("gs://b/uncased_L-12_H-768_A-12", False), ("bert-base-uncased", False), ("", False),
])
def test_what_reads_as_a_checkpoint_name(text, expected):
    assert gc.looks_like_name(text) is expected


def test_an_unknown_name_is_one_line_with_close_matches(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError) as error:
        resolve_backbone("uncased_L-12_H-768_A12")
    message = str(error.value)
    assert "\n" not in message
    assert "neither an existing path nor a known Google BERT checkpoint name" in message
    assert "did you mean uncased_L-12_H-768_A-12" in message


def test_a_path_that_is_not_name_like_keeps_its_own_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match="no checkpoint found"):
        resolve_backbone("my_model")


# ---------------------------------------------------------------- served zips

def _zip(files: dict, folder: str = "", stored: bool = False) -> bytes:
    buffer = io.BytesIO()
    method = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(buffer, "w", method) as archive:
        if folder:
            archive.writestr(folder + "/", b"")
        for name, data in files.items():
            archive.writestr(f"{folder}/{name}" if folder else name, data)
    return buffer.getvalue()


def _corrupt_member(data: bytes, member: str) -> bytes:
    """Flips a byte inside a stored member's data: its CRC no longer matches."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.getinfo(member)
    # The local header: 30 bytes + file name + extra field, then the data.
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    damaged = bytearray(data)
    damaged[start + info.file_size // 2] ^= 0xFF
    return bytes(damaged)


class Server:
    """http.server on 127.0.0.1 in a thread: serves `files` by URL path, counts requests,
    and sends half the body of paths in `truncated` (with the full Content-Length)."""

    def __init__(self):
        self.files, self.truncated, self.requests = {}, set(), []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append(self.path)
                data = outer.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.path in outer.truncated:
                    self.wfile.write(data[:len(data) // 2])
                    self.close_connection = True
                    return
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory, minilm_dir):
    """A random L-2/H-16/A-2 BERT as Google's files, with the MiniLM's (uncased) vocab."""
    from tests.runner_utils import write_tiny_backbone
    folder = write_tiny_backbone(tmp_path_factory.mktemp("tiny_google"), minilm_dir / "vocab.txt")
    return {name: (folder / name).read_bytes() for name in gc.REQUIRED_FILES}


@pytest.fixture(scope="module")
def server(tiny_files):
    server = Server()
    good_folder = _zip(tiny_files, folder=FOLDER)
    server.files[f"/test/{FOLDER}.zip"] = good_folder
    server.files[f"/test/{FLAT}.zip"] = _zip(tiny_files)
    server.files[f"/test/{TRUNCATED}.zip"] = _zip(tiny_files, folder=TRUNCATED)
    server.truncated.add(f"/test/{TRUNCATED}.zip")
    stored = _zip(tiny_files, folder=BAD_CRC, stored=True)
    server.files[f"/test/{BAD_CRC}.zip"] = _corrupt_member(
        stored, f"{BAD_CRC}/bert_model.ckpt.data-00000-of-00001")
    server.files[f"/test/{MISSING}.zip"] = _zip(
        {k: v for k, v in tiny_files.items() if k != "vocab.txt"}, folder=MISSING)
    server.files[f"/test/{WRONG_SHAPE}.zip"] = _zip(tiny_files, folder=WRONG_SHAPE)
    yield server
    server.close()


@pytest.fixture
def google(server, tmp_path, monkeypatch):
    """The test names in the catalogue, the server as base URL, a fresh cache; the
    working directory is elsewhere so that no folder there shadows a name."""
    for name in TEST_NAMES:
        layers, hidden, heads = (int(v) for v in gc._SHAPE.search(name).groups())
        monkeypatch.setitem(gc.CATALOGUE, name, gc.GoogleCheckpoint(
            name, "test", layers, hidden, heads, not name.startswith("cased"), "test"))
    monkeypatch.setenv(gc.BASE_URL_ENV, server.url)
    for proxy in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                  "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)  # 127.0.0.1 directly, never via a proxy
    cache = tmp_path / "cache"
    monkeypatch.setenv(gc.CACHE_ENV, str(cache))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    server.requests.clear()
    return cache / gc.CACHE_SUBDIR


@pytest.mark.parametrize("name", [FOLDER, FLAT])
def test_download_checks_caches_and_reuses(google, server, tiny_files, name, capsys):
    files = resolve_backbone(name)
    folder = google / name
    assert files.format == "tf1"
    assert files.weights == str(folder / "bert_model.ckpt")
    assert files.config_file == str(folder / "bert_config.json")
    assert files.vocab_file == str(folder / "vocab.txt")
    for base in gc.REQUIRED_FILES:
        assert (folder / base).read_bytes() == tiny_files[base]
    marker = json.loads((folder / gc.PROVENANCE).read_text())
    assert marker["url"] == f"{server.url}/test/{name}.zip"
    assert marker["bytes"] == len(server.files[f"/test/{name}.zip"])
    assert json.loads((folder / "tokenizer_config.json").read_text()) == {
        "do_lower_case": name == FOLDER}
    assert sorted(os.listdir(google)) == [name]  # no temporary folder left beside it
    assert server.requests == [f"/test/{name}.zip"]
    err = capsys.readouterr().err
    assert f"{name}: downloading {server.url}/test/{name}.zip" in err
    # Not a terminal: plain progress lines (no \r), the last at 100%.
    assert re.search(rf"^{name}: .*\(100%\)", err, re.MULTILINE) and "\r" not in err

    again = resolve_backbone(name)  # and load_pretrained: from the cache, no request
    model = build_pretrained(name)
    assert again == files and len(server.requests) == 1
    assert not model.load_report.unexpected
    saved = read_tf1_checkpoint(files.weights)
    table = [v for v in model.weights if "word_embeddings" in v.name][0]
    np.testing.assert_array_equal(table.numpy(), saved["bert/embeddings/word_embeddings"])


def _assert_nothing_cached(cache: Path):
    assert not cache.exists() or os.listdir(cache) == []


@pytest.mark.parametrize("name, failure", [
    (TRUNCATED, "download cut short"),
    (BAD_CRC, "damaged download: CRC check failed for "
              f"{BAD_CRC}/bert_model.ckpt.data-00000-of-00001"),
    (MISSING, "the zip lacks vocab.txt"),
    (WRONG_SHAPE, "bert_config.json does not describe uncased_L-4_H-16_A-2: "
                  "num_hidden_layers=2 (expected 4)"),
    (NOT_SERVED, "download failed: HTTP 404"),
])
def test_a_bad_download_is_one_line_and_leaves_nothing(google, server, name, failure):
    with pytest.raises(gc.GoogleCheckpointError) as error:
        resolve_backbone(name)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{name}: {failure}"), message
    assert f"({server.url}/test/{name}.zip)" in message
    assert "nothing was cached" in message and "by hand" in message
    _assert_nothing_cached(google)


def test_an_unreachable_server_is_one_line_and_leaves_nothing(google, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(gc.BASE_URL_ENV, f"http://127.0.0.1:{port}")
    with pytest.raises(CheckpointError) as error:
        build_pretrained(FOLDER)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{FOLDER}: cannot reach the server (")
    assert f"http://127.0.0.1:{port}/test/{FOLDER}.zip" in message
    _assert_nothing_cached(google)


def test_a_cache_folder_no_download_wrote_is_refused_and_kept(google, server):
    foreign = google / FOLDER
    foreign.mkdir(parents=True)
    (foreign / "bert_config.json").write_text("{}")  # no marker: put there by hand
    with pytest.raises(CheckpointError) as error:
        resolve_backbone(FOLDER)
    assert str(error.value) == (
        f"{FOLDER}: the cache folder of {FOLDER} {foreign} holds bert_config.json that "
        f"adapter_bert did not write; nothing was replaced: move it away or name a new folder "
        f"(or set {gc.CACHE_ENV} to another folder)")
    assert server.requests == []
    assert (foreign / "bert_config.json").read_text() == "{}"


def test_an_empty_cache_folder_is_filled(google, server):
    (google / FOLDER).mkdir(parents=True)
    files = resolve_backbone(FOLDER)
    assert len(server.requests) == 1
    assert json.loads(Path(files.config_file).read_text())["num_hidden_layers"] == 2


def test_an_existing_path_wins_over_the_name(google, server, tiny_files):
    local = Path.cwd() / FOLDER
    local.mkdir()
    for base, data in tiny_files.items():
        (local / base).write_bytes(data)
    files = resolve_backbone(FOLDER)
    assert files.weights == os.path.join(FOLDER, "bert_model.ckpt")
    assert server.requests == []


def test_a_filesystem_cache_is_complete_with_its_marker_and_manifest(google, server, tiny_files,
                                                                     monkeypatch):
    """Any tf.io.gfile cache (here ram://, copied object by object as on gs://)."""
    import tensorflow as tf
    cache = f"ram://google_cache_{os.getpid()}"
    monkeypatch.setenv(gc.CACHE_ENV, cache)
    files = resolve_backbone(FOLDER)
    folder = f"{cache}/{gc.CACHE_SUBDIR}/{FOLDER}"
    assert files.weights == f"{folder}/bert_model.ckpt"
    assert tf.io.gfile.exists(f"{folder}/{gc.PROVENANCE}")
    assert tf.io.gfile.exists(f"{folder}/{folders.MANIFEST}")
    with tf.io.gfile.GFile(f"{folder}/vocab.txt", "rb") as f:
        assert f.read() == tiny_files["vocab.txt"]
    assert resolve_backbone(FOLDER) == files and len(server.requests) == 1
    assert tf.io.gfile.listdir(f"{cache}/{gc.CACHE_SUBDIR}") == [FOLDER]  # nothing staged left


def test_a_filesystem_cache_copy_killed_half_way_is_completed(google, server, monkeypatch):
    """A gs:// swap killed between two copied files leaves its journal and the complete
    staged copy: the folder is not taken for complete, and the next fetch completes the swap
    without downloading again."""
    import tensorflow as tf
    cache = f"ram://google_half_{os.getpid()}"
    monkeypatch.setenv(gc.CACHE_ENV, cache)
    folder = f"{cache}/{gc.CACHE_SUBDIR}/{FOLDER}"
    copy_file, copied = io_utils.copy_file, []

    def killed_after_two(source, target):
        if target.startswith(folder + "/"):  # the swap's copies, not the staging's
            if len(copied) == 2:
                raise KeyboardInterrupt  # as a SIGKILL would stop it: nothing runs after
            copied.append(target)
        copy_file(source, target)
    monkeypatch.setattr(io_utils, "copy_file", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        resolve_backbone(FOLDER)
    assert gc.cached_path(FOLDER) is None and len(tf.io.gfile.listdir(folder)) == 2
    monkeypatch.setattr(io_utils, "copy_file", copy_file)
    files = resolve_backbone(FOLDER)
    assert len(server.requests) == 1
    assert json.loads(tf.io.gfile.GFile(files.config_file).read())["num_hidden_layers"] == 2
    assert sorted(tf.io.gfile.listdir(folder)) == sorted(
        [gc.PROVENANCE, folders.MANIFEST, "bert_config.json", "bert_model.ckpt.data-00000-of-00001",
         "bert_model.ckpt.index", "tokenizer_config.json", "vocab.txt"])
    assert tf.io.gfile.listdir(f"{cache}/{gc.CACHE_SUBDIR}") == [FOLDER]


def test_an_interrupted_download_leaves_nothing(google, server, monkeypatch):
    def interrupt(self, done):
        raise KeyboardInterrupt
    monkeypatch.setattr(gc.Progress, "update", interrupt)  # adapter_bert.progress.Progress
    with pytest.raises(KeyboardInterrupt):
        resolve_backbone(FOLDER)
    _assert_nothing_cached(google)


def test_an_unwritable_cache_is_one_line(google, server, tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    monkeypatch.setenv(gc.CACHE_ENV, str(blocker))
    with pytest.raises(gc.GoogleCheckpointError,
                       match=f"^{FOLDER}: cannot create a folder in the cache .*ADAPTER_BERT_CACHE"):
        resolve_backbone(FOLDER)
    assert server.requests == []


def test_a_day_old_partial_folder_is_removed(google, server):
    google.mkdir(parents=True)
    old = google / f".{FOLDER}.partial.killed"
    young = google / f".{FOLDER}.partial.running"
    for folder in (old, young):
        folder.mkdir()
        (folder / f"{FOLDER}.zip").write_bytes(b"part")
    os.utime(old, (1, 1))
    resolve_backbone(FOLDER)
    assert sorted(os.listdir(google)) == sorted([FOLDER, young.name])


def test_a_file_url_mirror_and_a_path_object(google, server, tmp_path, monkeypatch):
    mirror = tmp_path / "mirror" / "test"
    mirror.mkdir(parents=True)
    (mirror / f"{FOLDER}.zip").write_bytes(server.files[f"/test/{FOLDER}.zip"])
    monkeypatch.setenv(gc.BASE_URL_ENV, (tmp_path / "mirror").as_uri())
    files = resolve_backbone(Path(FOLDER))
    assert files.weights == str(google / FOLDER / "bert_model.ckpt")
    assert server.requests == []


# ---------------------------------------------------------------- the runners

def _write_mrpc(directory: Path) -> Path:
    """A few MRPC rows in GLUE's layout (train/dev with labels, test with an index)."""
    directory.mkdir(parents=True)
    pairs = [("the cat sat on the mat", "a cat was sitting on the mat", 1),
             ("stocks fell sharply today", "the market dropped a lot today", 1),
             ("he plays the piano", "the weather is cold in winter", 0),
             ("she reads many books", "trains leave from the station", 0)] * 2
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    rows = "".join(f"{label}\t{i}\t{i + 100}\t{a}\t{b}\n" for i, (a, b, label) in enumerate(pairs))
    (directory / "train.tsv").write_text(header + rows)
    (directory / "dev.tsv").write_text(header + rows)
    test_rows = "".join(f"{i}\t{i}\t{i + 100}\t{a}\t{b}\n" for i, (a, b, _) in enumerate(pairs))
    (directory / "test.tsv").write_text("index\t#1 ID\t#2 ID\t#1 String\t#2 String\n" + test_rows)
    return directory


def _runner_flags(data_dir, output_dir, name):
    return ["--task_name=MRPC", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
            f"--init_checkpoint={name}", "--max_seq_length=32", "--train_batch_size=4",
            "--eval_batch_size=8", "--learning_rate=1e-3", "--adapter_size=8",
            "--num_train_epochs=1", "--save_checkpoints_steps=100"]


@pytest.mark.slow
def test_run_classifier_trains_from_a_name(google, server, tmp_path):
    from tests.runner_utils import read_results, run_in_process
    data = _write_mrpc(tmp_path / "MRPC")
    code, _ = run_in_process("run_classifier", [
        "--do_train", "--do_eval", *_runner_flags(data, tmp_path / "out", FOLDER)])
    assert code == 0
    assert server.requests == [f"/test/{FOLDER}.zip"]
    results = read_results(tmp_path / "out" / "eval_results.txt")
    assert int(results["global_step"]) == 2


def test_run_classifier_names_a_failed_download_in_one_line(google, server, tmp_path, capsys):
    from tests.runner_utils import run_in_process
    data = _write_mrpc(tmp_path / "MRPC")
    code, _ = run_in_process("run_classifier", [
        "--do_train", *_runner_flags(data, tmp_path / "out", BAD_CRC)])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"run_classifier.py: error: {BAD_CRC}: damaged download: CRC")
    _assert_nothing_cached(google)


def test_run_classifier_checks_the_case_of_a_cased_name(google, server, tmp_path, capsys):
    from tests.runner_utils import run_in_process
    data = _write_mrpc(tmp_path / "MRPC")
    code, _ = run_in_process("run_classifier", [
        "--do_eval", *_runner_flags(data, tmp_path / "out", FLAT)])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--do_lower_case=True but" in err and "pass --do_lower_case=False" in err
