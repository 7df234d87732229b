"""Every operation that deletes or replaces deletes only what this package wrote.

The export replaces a folder only when it is empty or holds nothing but what an earlier
export wrote (its manifest, `io_utils.folders`, lists every file); the TFLite export
replaces only a TFLite model. A run's --output_dir, a parent of other files and anything unknown are
refused in one line, before any training, and left as they were. (The other guarded
places have their tests beside their code: --overwrite_output_dir in
test_reused_output_dir.py, the Google-checkpoint cache in test_google_checkpoints.py,
killed writes' temporaries in test_interruption.py.)
"""

import json

import pytest
import tensorflow as tf

from adapter_bert.io_utils import folders
from adapter_bert.serving import export
from adapter_bert.serving.tflite import check_tflite_target
from tests.robustness.helpers import (assert_one_error_line, classifier_flags, snapshot,
                                      write_mrpc_dir)
from tests.runner_utils import run_in_process


class _Constant(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def double(self, x):
        return {"y": 2 * x}


def _export(folder, info=None):
    module = _Constant()
    return export.write_saved_model(str(folder), module, {"serving_default": module.double},
                                    info or {"kind": "test"})


def _refuse_loading(monkeypatch):
    from adapter_bert.runners import base

    def boom(*args, **kwargs):
        raise AssertionError("the backbone was loaded: the refusal came too late")
    monkeypatch.setattr(base, "prepare_backbone", boom)


def test_an_export_replaces_an_earlier_export(tmp_path):
    folder = tmp_path / "model"
    _export(folder)
    info = json.loads((folder / export.INFO_FILE).read_text())
    assert info["kind"] == "test"
    _export(folder, {"kind": "second"})
    assert json.loads((folder / export.INFO_FILE).read_text())["kind"] == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # nothing staged left


def test_a_file_added_inside_an_export_stops_the_next_one_and_is_kept(tmp_path):
    """TF Serving's warm-up file, put into an export by hand, is not deleted by the next
    export: it stops it, naming the file."""
    folder = tmp_path / "model"
    _export(folder)
    warmup = folder / "assets.extra" / "tf_serving_warmup_requests"
    warmup.parent.mkdir()
    warmup.write_bytes(b"requests")
    before = snapshot(folder)
    with pytest.raises(folders.ForeignFileError) as error:
        _export(folder, {"kind": "second"})
    assert str(error.value) == (
        f"--export_dir={folder} holds assets.extra/tf_serving_warmup_requests that "
        f"adapter_bert did not write; nothing was replaced: move it away or name a new folder")
    assert snapshot(folder) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_an_empty_folder_takes_the_export(tmp_path):
    (tmp_path / "model").mkdir()
    _export(tmp_path / "model")
    assert (tmp_path / "model" / "saved_model.pb").is_file()


@pytest.mark.parametrize("layout, named", [
    ({"other_model/saved_model.pb": "x", "notes.txt": "mine"}, "notes.txt and 1 other file"),
    ({"saved_model.pb": "someone else's", "variables/v": "x"}, "saved_model.pb and 1 other file"),
    ({"export_info.json": "{not json"}, "export_info.json"),
])
def test_a_folder_no_export_wrote_is_refused_and_kept(layout, named, tmp_path):
    folder = tmp_path / "models"
    for name, text in layout.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    before = snapshot(folder)
    with pytest.raises(folders.ForeignFileError) as error:
        _export(folder)
    them = "them" if "other" in named else "it"
    assert str(error.value) == (
        f"--export_dir={folder} holds {named} that adapter_bert did not write; nothing was "
        f"replaced: move {them} away or name a new folder")
    assert snapshot(folder) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]


def test_a_file_or_link_as_export_dir_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    for name, kind in (("file", "a file"), ("link", "a symbolic link")):
        with pytest.raises(folders.ForeignFileError, match=f"is {kind}, not a folder; nothing "
                                                           f"was replaced"):
            export.check_export_dir(str(tmp_path / name))
    assert (tmp_path / "file").read_text() == "x"


def test_export_dir_equal_to_the_output_dir_is_refused_before_training(
        backbone, mrpc_lines, tmp_path, capfd, monkeypatch):
    data = write_mrpc_dir(tmp_path / "glue", mrpc_lines)
    out = tmp_path / "out"
    out.mkdir()
    (out / "run_flags.json").write_text("{}")
    before = snapshot(out)
    _refuse_loading(monkeypatch)
    code, _ = run_in_process("run_classifier", ["--do_train", f"--export_dir={out}",
                                                *classifier_flags(backbone, out, data)])
    assert code == 1
    line = assert_one_error_line(capfd.readouterr().err, "run_classifier.py", "")
    assert line == (f"run_classifier.py: error: --export_dir={out} holds --output_dir={out}: "
                    f"an export replaces its folder whole; name a folder of its own "
                    f"(e.g. {out / 'export'})")
    assert snapshot(out) == before


def test_export_dir_naming_a_parent_of_other_files_is_refused_before_training(
        backbone, mrpc_lines, tmp_path, capfd, monkeypatch):
    data = write_mrpc_dir(tmp_path / "glue", mrpc_lines)
    models = tmp_path / "models"
    (models / "other_model").mkdir(parents=True)
    (models / "other_model" / "saved_model.pb").write_bytes(b"another model")
    (models / "notes.txt").write_text("notes")
    before = snapshot(models)
    _refuse_loading(monkeypatch)
    code, _ = run_in_process("run_classifier", ["--do_train", f"--export_dir={models}",
                                                *classifier_flags(backbone, tmp_path / "out",
                                                                  data)])
    assert code == 1
    assert_one_error_line(capfd.readouterr().err, "run_classifier.py",
                          rf"error: --export_dir={models} holds notes\.txt and 1 other file "
                          rf"that adapter_bert did not write; nothing was replaced")
    assert snapshot(models) == before
    assert not (tmp_path / "out").exists()


def test_the_tflite_export_replaces_only_a_tflite_model(tmp_path):
    model = tmp_path / "model.tflite"
    model.write_bytes(b"\x1c\x00\x00\x00TFL3" + b"\x00" * 8)
    check_tflite_target(str(model))  # an earlier TFLite export: may be replaced
    check_tflite_target(str(tmp_path / "new.tflite"))
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model")
    with pytest.raises(export.ExportError, match=r"notes\.txt exists and is not a TFLite "
                                                 r"model; nothing was replaced"):
        check_tflite_target(str(notes))
    with pytest.raises(export.ExportError, match=r"is a folder; nothing was replaced"):
        check_tflite_target(str(tmp_path))
    assert notes.read_text() == "not a model"
