"""One base class for what the user can fix; the runners print those in one line and
anything else as a bug with its traceback (adapter_bert/errors.py, runners/base.run_cli)."""

import pytest

import adapter_bert as ab
from adapter_bert.adapters.files import AdapterFileError
from adapter_bert.data.glue import GlueDataError
from adapter_bert.data.squad import SquadDataError
from adapter_bert.data.text_files import DataFileError
from adapter_bert.data.tokenization import TokenizerError
from adapter_bert.errors import MissingDependency, UserError
from adapter_bert.io_utils import StorageError, WriteError
from adapter_bert.model.checkpoints import CheckpointError
from adapter_bert.model.config import ConfigError
from adapter_bert.runners.base import run_cli
from adapter_bert.command_line.flag_checks import FlagError
from adapter_bert.runs.run_lock import LockLost
from adapter_bert.training.loop import TrainingError


@pytest.mark.parametrize("error", [AdapterFileError, GlueDataError, SquadDataError,
                                   DataFileError, TokenizerError, StorageError, WriteError,
                                   CheckpointError, ConfigError, FlagError, LockLost,
                                   TrainingError, MissingDependency])
def test_every_input_error_is_a_user_error_and_a_value_error(error):
    assert issubclass(error, UserError) and issubclass(UserError, ValueError)
    assert ab.UserError is UserError


def test_file_system_errors_keep_their_fields():
    error = WriteError("/out/adapter", "No space left on device", 28)
    assert isinstance(error, OSError) and error.errno == 28
    assert str(error) == "cannot write /out/adapter: No space left on device"
    assert issubclass(MissingDependency, ImportError)


def _fails_with(error):
    def main():
        raise error
    return main


def test_a_user_error_is_one_line_and_status_1(capsys):
    assert run_cli("prog", _fails_with(FlagError("--learning_rate must be > 0, got -1"))) == 1
    err = capsys.readouterr().err
    assert err == "prog: error: --learning_rate must be > 0, got -1\n"


def test_the_file_systems_refusal_of_a_users_path_is_one_line_naming_it(capsys, tmp_path,
                                                                        monkeypatch):
    error = IsADirectoryError(21, "Is a directory", "/data/train.tsv")
    assert run_cli("prog", _fails_with(error), lambda: ["/elsewhere", "/data"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "prog: error: [Errno 21] Is a directory: '/data/train.tsv'"]
    cache = tmp_path / "cache"
    monkeypatch.setenv("ADAPTER_BERT_CACHE", str(cache))
    in_cache = NotADirectoryError(20, "Not a directory", str(cache / "google_bert" / "x"))
    assert run_cli("prog", _fails_with(in_cache)) == 1  # a folder the environment names
    assert capsys.readouterr().err.startswith("prog: error: [Errno 20] Not a directory")
    full = OSError(28, "No space left on device", "/tmp/adapter_bert_scratch/x")
    assert run_cli("prog", _fails_with(full)) == 1  # the machine's state, wherever it is
    assert capsys.readouterr().err.startswith("prog: error: [Errno 28] No space left")


@pytest.mark.parametrize("error", [
    FileNotFoundError(2, "No such file or directory", "/site-packages/adapter_bert/x.json"),
    IsADirectoryError(21, "Is a directory", "/data-other/train.tsv"),
    OSError("a socket closed")])
def test_an_os_error_about_the_packages_own_paths_is_a_bug(capsys, error):
    assert run_cli("prog", _fails_with(error), lambda: ["/data"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "internal error" in err


@pytest.mark.parametrize("bug", [KeyError("input_ids"), ValueError("shapes (2,) and (3,)"),
                                 TypeError("unsupported operand")])
def test_anything_else_is_a_bug_with_its_traceback(capsys, bug):
    assert run_cli("prog", _fails_with(bug)) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert f"{type(bug).__name__}: " in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("prog: internal error: this is a bug in adapter-bert")
    assert "report it with the traceback above" in last
