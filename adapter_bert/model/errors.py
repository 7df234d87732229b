"""The error every way of finding, fetching or reading a checkpoint raises, and the words
that say why a checkpoint did not read (`describe_read_error`).

It lives on its own so that the checkpoint readers (`checkpoints`, the training
checkpoints of `training.loop`) and the downloader of Google's released checkpoints
(`google_checkpoints`), which `checkpoints` calls, can all use it without importing each
other.
"""

from adapter_bert.errors import UserError


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
