"""The one base class of the errors a user can fix: `UserError`.

Everything this package raises about its input (a flag, a file, a checkpoint, an adapter
directory, a library argument) is a `UserError` or a subclass naming the kind of input.
The command-line runners print such an error as one line, `<program>: error: <message>`,
and exit with status 1; any other exception is a bug of the package, and they print its
traceback and a line asking for a report (`runners.base.run_cli`).

`UserError` is a `ValueError`, so library callers' `except ValueError` keeps working, as
with Keras' and TensorFlow's argument errors. `CheckpointError` is here, below every
folder, because the checkpoint readers (`model.checkpoints`, `training.loop`) and the
downloader of Google's checkpoints (`google_checkpoints`) all raise it.
"""


class UserError(ValueError):
    """Bad input, or a run that failed for a reason its message tells the user to fix."""


class MissingDependency(ImportError, UserError):
    """An optional package a feature needs is not installed (or is another version); the
    message names the `pip install` that fixes it. Also an `ImportError`."""


class CheckpointError(UserError):
    """A checkpoint cannot be found, fetched, read or fitted to the model."""


def describe_read_error(error: BaseException) -> str:
    """Why a TensorFlow checkpoint did not read, in a few words, from the error its reader
    raised (TensorFlow's checkpoint reader reports a short read as a bare `IndexError`)."""
    message = str(getattr(error, "message", None) or error).strip()
    first = message.splitlines()[0] if message else type(error).__name__
    if isinstance(error, IndexError) or "Read less bytes than requested" in message:
        return "data file truncated, shorter than its index says"
    if "sstable" in message or ("Unable to read file" in message and ".index" in message):
        return "index file damaged"
    if "Checksum does not match" in message:
        return "data file damaged, checksum mismatch"
    if "No such file or directory" in message or "Failed to find any matching files" in message:
        return "a file is missing"
    return first[:200]
