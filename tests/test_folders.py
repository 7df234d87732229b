"""io_utils.folders: manifests, the one way to replace or clear a folder the package wrote.

Local folders take the rename swap; `ram://` (TensorFlow's in-memory filesystem, which has
no folder rename either) takes the object-store order that gs:// takes, so the kill-anywhere
test of that order runs here in milliseconds (tests/gcs kills a real export on the emulator).
"""

import json
import os

import pytest

from adapter_bert import io_utils
from adapter_bert.io_utils import folders


def write_version(version, files=("a.txt", "sub/b.txt", "sub/deeper/c.txt")):
    def build(staging):
        for name in files:
            io_utils.atomic_write_text(io_utils.join(staging, name), f"{version}:{name}")
    return build


def content(folder):
    return {name: io_utils.read_text(io_utils.join(folder, name))
            for name in io_utils.files_under(folder) if name != folders.MANIFEST}


@pytest.fixture(params=["local", "ram"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path)
    return f"ram://folders_{os.getpid()}_{id(request)}"


def test_a_replaced_folder_holds_the_new_files_and_lists_them(root):
    target = io_utils.join(root, "out")
    folders.replace(target, write_version(1), "--export_dir")
    folders.replace(target, write_version(2, ("a.txt", "other.txt")), "--export_dir")
    assert content(target) == {"a.txt": "2:a.txt", "other.txt": "2:other.txt"}
    assert folders.read_manifest(target) == {"a.txt", "other.txt"}
    assert io_utils.listdir(root) == ["out"]  # nothing staged or journalled is left


@pytest.mark.parametrize("intruder", ["notes.txt", "sub/deeper/warmup"])
def test_a_file_added_anywhere_stops_replace_and_clear_and_nothing_is_deleted(root, intruder):
    target = io_utils.join(root, "out")
    folders.replace(target, write_version(1), "--export_dir")
    io_utils.atomic_write_text(io_utils.join(target, intruder), "mine")
    before = content(target)
    with pytest.raises(folders.ForeignFileError) as error:
        folders.replace(target, write_version(2), "--export_dir")
    assert str(error.value) == (f"--export_dir={target} holds {intruder} that adapter_bert did "
                                f"not write; nothing was replaced: move it away or name a new "
                                f"folder")
    with pytest.raises(folders.ForeignFileError, match="nothing was deleted"):
        folders.clear(target, "--overwrite_output_dir: --output_dir")
    assert content(target) == before
    assert io_utils.listdir(root) == ["out"]


def test_a_folder_without_a_manifest_is_not_ours_and_a_missing_one_is_made(root):
    target = io_utils.join(root, "theirs")
    io_utils.atomic_write_text(io_utils.join(target, "model.pb"), "x")
    with pytest.raises(folders.ForeignFileError, match="holds model.pb that adapter_bert"):
        folders.replace(target, write_version(1), "the cache folder")
    folders.replace(io_utils.join(root, "new"), write_version(1), "--export_dir")
    assert content(io_utils.join(root, "new"))["a.txt"] == "1:a.txt"


def test_a_failed_build_leaves_the_old_folder_and_nothing_beside(root):
    target = io_utils.join(root, "out")
    folders.replace(target, write_version(1), "--export_dir")

    def fails(staging):
        write_version(2)(staging)
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError, match="No space"):
        folders.replace(target, fails, "--export_dir")
    assert content(target)["a.txt"] == "1:a.txt"
    assert io_utils.listdir(root) == ["out"]


def test_tracking_lists_what_is_written_and_clear_keeps_the_kept(root):
    run = io_utils.join(root, "run")
    with folders.tracking(run):
        io_utils.atomic_write_text(io_utils.join(run, "eval_results.txt"), "x")
        io_utils.atomic_write_bytes(io_utils.join(run, "adapter", "weights"), b"w")
        io_utils.atomic_write_text(io_utils.join(run, "feature_cache", "e.npz"), "c")
    io_utils.atomic_write_text(io_utils.join(run, "after.txt"), "not tracked any more")
    assert folders.read_manifest(run) == {"eval_results.txt", "adapter/weights",
                                          "feature_cache/e.npz"}
    assert folders.foreign_files(run) == [io_utils.join(run, "after.txt")]
    io_utils.remove(io_utils.join(run, "after.txt"))
    assert folders.clear(run, "--output_dir", keep=("feature_cache",)) == ["adapter",
                                                                             "eval_results.txt"]
    assert io_utils.files_under(run) == [folders.MANIFEST, "feature_cache/e.npz"]
    # The kept file is still listed: a later clear of the whole folder may delete it.
    assert folders.read_manifest(run) == {"feature_cache/e.npz"}
    assert folders.clear(run, "--work_dir") == ["feature_cache"]


def test_a_subfolder_with_its_own_manifest_is_checked_against_it(tmp_path):
    sweep = str(tmp_path / "sweep")
    with folders.tracking(sweep):
        io_utils.atomic_write_text(io_utils.join(sweep, "sweep.json"), "{}")
    folders.replace(io_utils.join(sweep, "best"), write_version(1), "best")
    assert folders.foreign_files(sweep) == []
    (tmp_path / "sweep" / "best" / "mine.txt").write_text("x")
    assert folders.foreign_files(sweep) == [io_utils.join(sweep, "best", "mine.txt")]


def _copies_of_a_swap(root):
    """How many files the object-store swap of version 2 over version 1 copies."""
    target = io_utils.join(root, "count")
    folders.replace(target, write_version(1), "x")
    copied = []
    copy = io_utils.copy_file
    io_utils.copy_file = lambda s, t: (copied.append(t), copy(s, t))
    try:
        folders.replace(target, write_version(2), "x")
    finally:
        io_utils.copy_file = copy
    return len(copied)


def test_an_object_store_swap_killed_at_any_copy_keeps_a_whole_copy_and_is_completed(
        monkeypatch):
    """On ram:// (as on gs://): killed before each copy of the swap, and while deleting
    the staged copy. At each point one whole copy exists, and the next replace completes
    the interrupted one first, then makes its own."""
    base = f"ram://swap_{os.getpid()}"
    copies = _copies_of_a_swap(base)
    assert copies == 4  # three files and the manifest, last
    copy, remove_tree = io_utils.copy_file, io_utils.remove_tree
    for kill_at in range(copies + 1):
        root = f"{base}/kill_{kill_at}"
        target = io_utils.join(root, "out")
        folders.replace(target, write_version(1), "x")
        count = [0]

        def killed(source, destination):
            if ".adapter_bert.staging." in source and count[0] == kill_at:
                raise KeyboardInterrupt  # no line of the swap runs after a SIGKILL
            count[0] += 1
            copy(source, destination)

        def killed_deleting(folder):
            if ".adapter_bert.staging." in folder and kill_at == copies:
                raise KeyboardInterrupt
            remove_tree(folder)
        monkeypatch.setattr(io_utils, "copy_file", killed)
        monkeypatch.setattr(io_utils, "remove_tree", killed_deleting)
        with pytest.raises(KeyboardInterrupt):
            folders.replace(target, write_version(2), "x")
        monkeypatch.setattr(io_utils, "copy_file", copy)
        monkeypatch.setattr(io_utils, "remove_tree", remove_tree)
        whole = [folder for folder in [target] + [io_utils.join(root, n) for n in
                                                   io_utils.listdir(root) if "staging" in n]
                 if folders.read_manifest(folder) is not None
                 and folders.read_manifest(folder) == set(content(folder))]
        assert whole, f"no whole copy after a kill at copy {kill_at}"
        assert any(".replacing.json" in n for n in io_utils.listdir(root))
        assert folders.finish_interrupted(target, "x")
        assert content(target) == {n: f"2:{n}" for n in ("a.txt", "sub/b.txt",
                                                          "sub/deeper/c.txt")}
        assert io_utils.listdir(root) == ["out"]


def test_a_journal_that_is_not_ours_is_one_line(tmp_path):
    target = tmp_path / "out"
    (tmp_path / ".out.adapter_bert.replacing.json").write_text("{not json")
    with pytest.raises(folders.UserError, match=r"replacing.json: not a journal adapter_bert "
                                                r"wrote; --export_dir: move it away"):
        folders.replace(str(target), write_version(1), "--export_dir")


def test_a_manifest_names_its_writer_and_an_id_per_writing(tmp_path):
    folders.write_manifest(str(tmp_path), ["b", "a", folders.MANIFEST])
    record = json.loads((tmp_path / folders.MANIFEST).read_text())
    assert record["written_by"] == "adapter_bert" and record["files"] == ["a", "b"]
    folders.write_manifest(str(tmp_path), ["a", "b"])
    assert json.loads((tmp_path / folders.MANIFEST).read_text())["id"] != record["id"]


@pytest.mark.parametrize("scheme", ["", "file://"])
@pytest.mark.parametrize("kind", ["folder", "file"])
def test_a_users_link_inside_stops_replace_and_clear_and_survives(tmp_path, scheme, kind):
    """A link (to a folder or a file) the package did not write is a file it did not
    write: replacing or clearing refuses, and the link and what it points to stay."""
    target = f"{scheme}{tmp_path / 'out'}"
    folders.replace(target, write_version(1), "--export_dir")
    pointed = tmp_path / "mine"
    if kind == "folder":
        pointed.mkdir()
        (pointed / "notes.txt").write_text("mine")
    else:
        pointed.write_text("mine")
    os.symlink(pointed, tmp_path / "out" / "sub" / "link")
    for attempt in (lambda: folders.replace(target, write_version(2), "--export_dir"),
                    lambda: folders.clear(target, "--overwrite_output_dir: --output_dir")):
        # (TensorFlow's file:// walk follows the link and names the file inside)
        with pytest.raises(folders.ForeignFileError,
                           match="holds sub/link(/notes.txt)? that adapter_bert"):
            attempt()
        assert os.path.islink(tmp_path / "out" / "sub" / "link")
    assert (pointed / "notes.txt" if kind == "folder" else pointed).read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["mine", "out"]


def test_a_build_killed_half_way_leaves_a_staged_copy_the_next_replace_removes(tmp_path):
    """SIGKILL while building: the staged copy names its dead builder; the next replace of
    that target deletes it and swaps as usual."""
    import signal
    import subprocess
    import sys
    target = tmp_path / "out"
    folders.replace(str(target), write_version(1), "--export_dir")
    script = ("import sys, time\n"
              "from adapter_bert import io_utils\n"
              "from adapter_bert.io_utils import folders\n"
              "def build(staging):\n"
              "    io_utils.atomic_write_text(io_utils.join(staging, 'half.txt'), 'x')\n"
              "    print('building', flush=True)\n"
              "    time.sleep(60)\n"
              "folders.replace(sys.argv[1], build, '--export_dir')\n")
    child = subprocess.Popen([sys.executable, "-c", script, str(target)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "building"
    child.send_signal(signal.SIGKILL)
    child.wait()
    staged = [n for n in os.listdir(tmp_path) if ".adapter_bert.staging." in n]
    assert len(staged) == 1 and (tmp_path / staged[0] / "half.txt").is_file()
    folders.replace(str(target), write_version(2), "--export_dir")
    assert sorted(os.listdir(tmp_path)) == ["out"]
    assert content(str(target))["a.txt"] == "2:a.txt"


def test_only_a_dead_builders_staged_copy_is_removed(root):
    """On ram:// too (whose files die with their process, so the dead builder is written
    here): a staged copy of a running build, or of another machine's, is left."""
    import subprocess
    import sys
    target = io_utils.join(root, "out")
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    here = folders._this_process()
    builders = {"dead": {**here, "pid": int(ended)}, "running": here,
                "elsewhere": {"host": here["host"] + "-other", "pid": int(ended)}}
    for name, builder in builders.items():
        staged = io_utils.join(root, f".out.adapter_bert.staging.{name}")
        io_utils.atomic_write_text(io_utils.join(staged, "a.txt"), "half")
        folders.write_manifest(staged, ["a.txt"], builder)
    folders.replace(target, write_version(1), "--export_dir")
    assert io_utils.listdir(root) == [".out.adapter_bert.staging.elsewhere",
                                      ".out.adapter_bert.staging.running", "out"]
