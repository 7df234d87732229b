"""The one base class of the errors a user can fix: `UserError`.

Everything this package raises about its input (a flag, a file, a checkpoint, an adapter
directory, a library argument) is a `UserError` or a subclass naming the kind of input.
The command-line runners print such an error as one line, `<program>: error: <message>`,
and exit with status 1; any other exception is a bug of the package, and they print its
traceback and a line asking for a report (`tasks.base.run_cli`).

`UserError` is a `ValueError`, so library callers' `except ValueError` keeps working, as
with Keras' and TensorFlow's argument errors.
"""


class UserError(ValueError):
    """Bad input, or a run that failed for a reason its message tells the user to fix."""


class MissingDependency(ImportError, UserError):
    """An optional package a feature needs is not installed (or is another version); the
    message names the `pip install` that fixes it. Also an `ImportError`."""
