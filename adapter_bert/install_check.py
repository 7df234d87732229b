"""Checks the installed TensorFlow and tf-keras before TensorFlow is first imported.

The package never makes pip install TensorFlow (pip would put `tensorflow` beside a
machine's `tensorflow-tpu` or `tensorflow-cpu` and overwrite it), so the installed
distributions are read from their metadata, and a missing or mismatched install stops
with one line naming the fix. The package's import hook (`adapter_bert/__init__.py`)
runs `check_tensorflow` at the first import of `tensorflow` or `tf_keras`; `python -m
adapter_bert` prints what is installed.
ADAPTER_BERT_SKIP_TF_CHECK=1 skips it.
"""

import os
import re
import sys
import warnings
from typing import Dict, Optional, Tuple

# The TensorFlow minor versions the tests run on (CI runs them on both).
SUPPORTED = ((2, 20), (2, 21))
NEWEST = "%d.%d" % SUPPORTED[-1]

# Distributions that install the `tensorflow` module. Several can be installed at once
# (tf-keras depends on `tensorflow`, so `pip install tensorflow-cpu tf-keras` adds both);
# they then share, and overwrite, one module folder.
TENSORFLOW_DISTRIBUTIONS = ("tensorflow-tpu", "tensorflow-cpu", "tensorflow",
                            "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
                            "tf-nightly", "tf-nightly-cpu")
KERAS_DISTRIBUTIONS = ("tf-keras", "tf-keras-nightly")

SKIP_VARIABLE = "ADAPTER_BERT_SKIP_TF_CHECK"
_checking = False  # a check is running (its module lookups must not start another)


class TensorFlowInstallError(ImportError):
    """TensorFlow or tf-keras is missing, or their versions do not fit together."""


def minor_version(version: str) -> Optional[Tuple[int, int]]:
    """(major, minor) of a version string such as "2.20.0" or "2.22.0.dev20251101"."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _minor_text(version: str) -> str:
    minor = minor_version(version)
    return "%d.%d" % minor if minor else version


def installed_versions(names) -> Dict[str, str]:
    """{distribution name: version} of those of `names` that are installed, in order."""
    import importlib.metadata  # Imported here: paid only when checking.
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def _module_exists(name: str) -> bool:
    """Whether `name` can be imported (found on sys.path, not imported)."""
    import importlib.util
    return importlib.util.find_spec(name) is not None


def add_on_install(name: str) -> str:
    """The command that installs `name`, a package built against TensorFlow
    (tensorflow-text, tf-keras), beside the TensorFlow installed: at its minor version and
    with `--no-deps`, since its requirement on the `tensorflow` distribution would put that
    beside (and over) tensorflow-tpu or tensorflow-cpu. The one place this advice is made."""
    tensorflow = installed_versions(TENSORFLOW_DISTRIBUTIONS)
    if not tensorflow:
        return _pip(name)
    return _pip(f"{name}=={_minor_text(next(iter(tensorflow.values())))}.*", no_deps=True)


def has_tpu_support() -> bool:
    """Whether the installed TensorFlow is the TPU build (tensorflow-tpu)."""
    return "tensorflow-tpu" in installed_versions(TENSORFLOW_DISTRIBUTIONS)


def _pip(*requirements: str, no_deps: bool = False) -> str:
    quoted = " ".join(f'"{r}"' for r in requirements)
    return f"pip install {'--no-deps ' if no_deps else ''}{quoted}"


def _no_tensorflow_problem(keras: Dict[str, str]) -> str:
    if keras:
        name, version = next(iter(keras.items()))
        minor = _minor_text(version)
        return (f"adapter_bert needs TensorFlow and none is installed ({name} {version} is): "
                f"run  {_pip(f'tensorflow=={minor}.*')}  (NVIDIA GPU: "
                f"{_pip(f'tensorflow[and-cuda]=={minor}.*')}; TPU: see docs/install.md)")
    return (f"adapter_bert needs TensorFlow 2.20 or 2.21 with the matching tf-keras and no "
            f"TensorFlow is installed: run  {_pip(f'tensorflow=={NEWEST}.*', f'tf-keras=={NEWEST}.*')}"
            f"  (NVIDIA GPU: tensorflow[and-cuda]; TPU: see docs/install.md)")


def _mixed_problem(tensorflow: Dict[str, str]) -> Optional[str]:
    """Two TensorFlow distributions that overwrite each other's files, or None.

    Same-minor copies of `tensorflow` and `tensorflow-cpu` are harmless (tf-keras pulls
    `tensorflow` in beside `tensorflow-cpu`); anything beside `tensorflow-tpu` may have
    replaced its TPU kernels, and different minor versions leave a mix of two releases.
    """
    if len(tensorflow) < 2:
        return None
    minors = {minor_version(v) for v in tensorflow.values()}
    if len(minors) == 1 and "tensorflow-tpu" not in tensorflow:
        return None
    keep = next(name for name in tensorflow if name != "tensorflow")  # the one chosen
    others = [name for name in tensorflow if name != keep]
    listing = ", ".join(f"{name} {version}" for name, version in tensorflow.items())
    return (f"{listing} are all installed and overwrite one another's `tensorflow` module: "
            f"run  pip uninstall -y {' '.join(others)} && pip install --force-reinstall "
            f"--no-deps \"{keep}=={tensorflow[keep]}\"")


def in_progress() -> bool:
    """Whether `find_problem` is running (its module lookup passes import hooks)."""
    return _checking


def find_problem() -> Optional[str]:
    """The one-line description of what is wrong with the TensorFlow install, or None.

    Looks only at installed distributions' metadata; TensorFlow is not imported.
    """
    global _checking
    _checking = True  # its lookup of the `tensorflow` module must not check again
    try:
        return _problem()
    finally:
        _checking = False


def _problem() -> Optional[str]:
    tensorflow = installed_versions(TENSORFLOW_DISTRIBUTIONS)
    keras = installed_versions(KERAS_DISTRIBUTIONS)
    if not tensorflow:
        if _module_exists("tensorflow"):
            return None  # A build without pip metadata (from source): nothing to compare.
        return _no_tensorflow_problem(keras)
    mixed = _mixed_problem(tensorflow)
    if mixed:
        return mixed
    name, version = next(iter(tensorflow.items()))
    minor = _minor_text(version)
    keras_name, keras_version = next(iter(keras.items()), (None, None))
    if keras_version is not None and _minor_text(keras_version) == minor:
        return None
    found = (f"{keras_name} {keras_version} is installed" if keras_name
             else "tf-keras is not installed")
    return (f"adapter_bert needs tf-keras {minor} to match {name} {version} ({found}): "
            f"run  {add_on_install('tf-keras')}")


def unsupported_note() -> Optional[str]:
    """A note when the installed TensorFlow is not one the tests run on, else None."""
    tensorflow = installed_versions(TENSORFLOW_DISTRIBUTIONS)
    if not tensorflow:
        return None
    name, version = next(iter(tensorflow.items()))
    if minor_version(version) in SUPPORTED:
        return None
    return (f"adapter_bert is tested on TensorFlow 2.20 and 2.21, not {name} {version}; "
            f"if it fails, install one of those (see docs/install.md)")


def check_tensorflow() -> None:
    """Raises `TensorFlowInstallError` (one line) where the install cannot work.

    Warns, without stopping, about a TensorFlow version outside `SUPPORTED`.
    Does nothing when ADAPTER_BERT_SKIP_TF_CHECK=1.
    """
    if os.environ.get(SKIP_VARIABLE) == "1" or in_progress():
        return  # find_problem's module lookup passes the package's import hook
    problem = find_problem()
    if problem:
        raise TensorFlowInstallError(problem)
    note = unsupported_note()
    if note:
        warnings.warn(note, stacklevel=2)


def require_tensorflow(program: str) -> None:
    """For entry points: runs the check, and on a problem prints
    `<program>: error: <problem>` and exits with status 1."""
    try:
        check_tensorflow()
    except TensorFlowInstallError as e:
        print(f"{program}: error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def main() -> int:
    """`python -m adapter_bert`: one line, exit status 1 on a problem."""
    problem = find_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    found = {**installed_versions(TENSORFLOW_DISTRIBUTIONS),
             **installed_versions(KERAS_DISTRIBUTIONS)}
    note = unsupported_note()
    print(", ".join(f"{n} {v}" for n, v in found.items()) + (f": {note}" if note else ": OK"))
    return 0
