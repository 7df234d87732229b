"""io_utils on local paths and on TensorFlow filesystems (ram:// stands in for gs://)."""

import hashlib
import uuid

import pytest
import tensorflow as tf

from adapter_bert import io_utils
from adapter_bert.data.tokenization import load_tokenizer
from tests.conftest import BERT_VOCAB


@pytest.fixture(params=["local", "ram"])
def root(request, tmp_path):
    """A fresh directory on local disk or on ram://."""
    return str(tmp_path) if request.param == "local" else f"ram://{uuid.uuid4().hex}"


def test_helpers_agree_on_local_and_remote(root):
    io_utils.makedirs(root + "/a/b")
    io_utils.atomic_write_text(root + "/a/b/x.txt", "héllo\n")
    io_utils.atomic_write_bytes(root + "/a/y.bin", b"\0\1")
    assert io_utils.read_text(root + "/a/b/x.txt") == "héllo\n"
    assert io_utils.isdir(root + "/a") and not io_utils.isfile(root + "/a")
    assert io_utils.isfile(root + "/a/y.bin") and not io_utils.isdir(root + "/a/y.bin")
    assert not io_utils.exists(root + "/a/y") and not io_utils.exists(root + "/a/b/x")
    assert io_utils.listdir(root + "/a") == ["b", "y.bin"]
    assert io_utils.glob(root + "/a/*.bin") == [root + "/a/y.bin"]
    with io_utils.open_file(root + "/a/z.tsv", "w") as f:
        f.write("1\t2\n")
    with io_utils.open_file(root + "/a/z.tsv") as f:
        assert f.read() == "1\t2\n"
    io_utils.rename(root + "/a/z.tsv", root + "/a/w.tsv")
    assert not io_utils.exists(root + "/a/z.tsv") and io_utils.exists(root + "/a/w.tsv")
    io_utils.remove(root + "/a/w.tsv")
    with pytest.raises(FileNotFoundError):
        io_utils.remove(root + "/a/w.tsv")
    with pytest.raises(FileNotFoundError):
        io_utils.read_bytes(root + "/missing")
    with pytest.raises(IsADirectoryError):
        io_utils.read_bytes(root + "/a")
    assert io_utils.file_digest(root + "/a/y.bin") == hashlib.sha256(b"\0\1").hexdigest()


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(root):
    target = root + "/out/results.txt"
    io_utils.atomic_write_text(target, "old\n")

    def fail(tmp):
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("killed")
    with pytest.raises(RuntimeError):
        io_utils.atomic_write_with(target, fail)
    assert io_utils.read_text(target) == "old\n"
    assert io_utils.listdir(root + "/out") == ["results.txt"]


def test_stale_temporaries_are_removed_on_any_filesystem(root):
    io_utils.makedirs(root + "/run/adapter")
    stale = root + "/run/adapter/.adapter_config.json.adapter_bert.ab12cd34.tmp"
    io_utils.atomic_write_bytes(stale, b"half")
    io_utils.atomic_write_bytes(root + "/run/keep.txt", b"x")
    assert io_utils.remove_stale_temporaries(root + "/run") == [stale]
    assert io_utils.listdir(root + "/run/adapter") == []
    assert io_utils.remove_stale_temporaries(root + "/absent") == []


def test_object_stores_get_one_write_and_no_rename(monkeypatch):
    """On gs:// (copy+delete rename) the final object is written once, directly."""
    monkeypatch.setattr(io_utils.writes, "OBJECT_STORES", frozenset({"ram"}))
    renames = []
    monkeypatch.setattr(tf.io.gfile, "rename", lambda *a, **k: renames.append(a))
    path = f"ram://{uuid.uuid4().hex}/eval_results.txt"
    io_utils.atomic_write_text(path, "a = 1\n")
    io_utils.atomic_write_with(path + ".bin", lambda tmp: open(tmp, "wb").write(b"w"))
    assert renames == []
    assert io_utils.read_text(path) == "a = 1\n" and io_utils.read_bytes(path + ".bin") == b"w"


def test_rename_filesystems_write_a_temporary_then_rename(monkeypatch):
    renames = []
    rename = tf.io.gfile.rename
    monkeypatch.setattr(tf.io.gfile, "rename",
                        lambda a, b, overwrite: renames.append((a, b)) or rename(a, b, overwrite))
    path = f"ram://{uuid.uuid4().hex}/x.json"
    io_utils.atomic_write_text(path, "{}")
    [(tmp, target)] = renames
    assert target == path and io_utils.is_temporary(tmp)


def test_tokenizer_from_a_remote_vocab_equals_the_local_one():
    remote = f"ram://{uuid.uuid4().hex}/vocab.txt"
    io_utils.atomic_write_bytes(remote, BERT_VOCAB.read_bytes())
    texts = ["Naïve café, 中文 don't\u00a0stop!", "The QUICK brown fox jumped over the dog."]
    for lower in (True, False):
        local, far = load_tokenizer(str(BERT_VOCAB), lower), load_tokenizer(remote, lower)
        assert far.backend_tokenizer.to_str() == local.backend_tokenizer.to_str()
        assert far(*texts, return_offsets_mapping=True) == local(*texts, return_offsets_mapping=True)
        assert (far.cls_token_id, far.sep_token_id, far.pad_token_id, far.unk_token_id) == \
            (local.cls_token_id, local.sep_token_id, local.pad_token_id, local.unk_token_id)


def test_an_unreachable_store_is_one_line_naming_the_path(monkeypatch):
    """gs:// without network: a StorageError (an OSError) naming the path and the reason,
    never TensorFlow's multi-line error, and never a plain "not found"."""
    from tests.remote_utils import UNREACHABLE_GS_ENV
    for name, value in UNREACHABLE_GS_ENV.items():
        monkeypatch.setenv(name, value)
    path = "gs://adapter-bert-offline-test/glue/MRPC/train.tsv"
    for query in (io_utils.exists, io_utils.isdir, io_utils.isfile, io_utils.read_bytes,
                  io_utils.makedirs):
        with pytest.raises(io_utils.StorageError) as error:
            query(path)
        message = str(error.value)
        assert "\n" not in message and error.value.path == path, query
        assert message.startswith(f"{path}: cannot access it ("), message
        assert message.endswith("; check the network and the credentials (gcloud auth "
                                "application-default login)"), message
    # A store that answers "not found" still says so plainly.
    missing = f"ram://{uuid.uuid4().hex}/missing"
    assert not io_utils.exists(missing) and not io_utils.isdir(missing)
    assert not io_utils.isfile(missing)
    with pytest.raises(FileNotFoundError):
        io_utils.read_bytes(missing)


@pytest.mark.parametrize("path, reason, advice", [
    ("gs://b/x", "timed out", "; check the network and the credentials (gcloud auth "
                              "application-default login)"),
    ("s3://b/x", "timed out", "; check the network and the credentials"),
    ("gs://b/x", "HTTP response code 401 with body '{\"message\": \"Anonymous caller ...\"}'",
     "; not signed in to Google Cloud: run  gcloud auth application-default login  (on "
     "Colab: from google.colab import auth; auth.authenticate_user())"),
    ("file:///proc/x", "Permission denied", ""),
    ("ram://x", "Permission denied", ""),
    ("https://host/x", "File system scheme 'https' not implemented",
     "; TensorFlow has no https:// filesystem: name a local path, file://, gs:// or another "
     "store TensorFlow reads"),
])
def test_a_stores_advice_fits_its_scheme(path, reason, advice):
    """No network advice for a store on this machine, nor for a scheme TensorFlow lacks."""
    assert str(io_utils.StorageError(path, reason)) == \
        f"{path}: cannot access it ({reason}){advice}"


@pytest.mark.parametrize("flag, path, expected", [
    ("output_dir", "file:///proc/adapter_out",
     "--output_dir=file:///proc/adapter_out: cannot create it in /proc"),
    ("export_dir", "/proc/adapter_export", "--export_dir=/proc/adapter_export: cannot create "
                                           "it in /proc"),
    ("output_dir", "https://example.invalid/out", "--output_dir=https://example.invalid/out: "
                                                  "cannot access it (File system scheme"),
])
def test_an_output_root_that_cannot_be_written_is_one_line_on_every_scheme(flag, path,
                                                                           expected):
    from adapter_bert.command_line.flag_checks import FlagError, check_writable_dir
    with pytest.raises(FlagError) as error:
        check_writable_dir(flag, path)
    assert str(error.value).startswith(expected) and "\n" not in str(error.value)
    assert ("network" in str(error.value)) is False
    check_writable_dir(flag, f"ram://{uuid.uuid4().hex}/out")  # writable: no error


@pytest.mark.parametrize("content, message", [
    (None, r"x\.json: file not found"),
    (b"{not json", r"x\.json: not valid JSON \(line 1, column 2: "),
    (b"\xff\xfe{}", r"x\.json line 1: not valid UTF-8"),
    (b"[1, 2]", r"x\.json: expected a JSON object at the top level, got list"),
    (b"[" * 100000 + b"]" * 100000, r"x\.json: (JSON nested too deeply|not valid JSON)"),
])
def test_the_json_reader_names_the_file_and_what_was_expected(tmp_path, content, message):
    class Refused(ValueError):
        pass

    path = tmp_path / "x.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(Refused, match=message):
        io_utils.read_json_object(str(path), Refused)
    path.write_text('{"a": [1, 2]}')
    assert io_utils.read_json_object(str(path)) == {"a": [1, 2]}


def test_read_key_values_is_the_one_reader_of_eval_results(tmp_path):
    from adapter_bert.io_utils import read_key_values
    path = tmp_path / "eval_results.txt"
    path.write_text("eval_accuracy = 0.8137254901960784\nnot a pair\nrun = a = b\n\n")
    assert read_key_values(str(path)) == {"eval_accuracy": "0.8137254901960784",
                                          "run": "a = b"}
