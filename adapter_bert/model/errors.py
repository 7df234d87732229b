"""The error every way of finding, fetching or reading a checkpoint raises.

It lives on its own so that the checkpoint readers (`checkpoints`) and the downloader of
Google's released checkpoints (`google_checkpoints`), which `checkpoints` calls, can both
raise it without importing each other.
"""


class CheckpointError(ValueError):
    """A checkpoint cannot be found, fetched, read or fitted to the model."""
