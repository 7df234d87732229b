"""Runs an entry point with every path on TensorFlow's in-memory filesystem (`ram://`).

`ram://` lives inside one process, so the files are staged, the runner runs and its
outputs are copied back to local disk all in the calling process. Also runnable as
`python tests/remote_utils.py SPEC.json` (run_squad.py's flags cannot be defined in a
pytest process that already defined run_classifier.py's).
"""

import json
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: import the package from this checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.runner_utils import run_in_process  # noqa: E402

# An environment in which gs:// cannot be reached, as on a machine without network: every
# HTTP request TensorFlow's GCS filesystem makes (the metadata-server and token requests
# too) goes through a proxy whose name never resolves (`.invalid` is reserved for that),
# so each fails at once and none leaves the machine. (A closed local port would do the
# same, but TensorFlow retries a refused connection for minutes.)
UNREACHABLE_GS_ENV = {name: "http://proxy.invalid:3128"
                      for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")}
UNREACHABLE_GS_ENV.update(NO_PROXY="", no_proxy="")


def copy_to_remote(local: Path, remote: str) -> None:
    """Copies a local file or directory tree to `remote`."""
    import tensorflow as tf
    if local.is_dir():
        tf.io.gfile.makedirs(remote)
        for child in local.iterdir():
            copy_to_remote(child, f"{remote}/{child.name}")
    else:
        tf.io.gfile.makedirs(remote.rsplit("/", 1)[0])
        with tf.io.gfile.GFile(remote, "wb") as f:
            f.write(local.read_bytes())


def copy_from_remote(remote: str, local: Path) -> None:
    """Copies the directory tree `remote` to `local`."""
    import tensorflow as tf
    for root, _, names in tf.io.gfile.walk(remote):
        target = local / root[len(remote):].lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            with tf.io.gfile.GFile(f"{root}/{name}", "rb") as f:
                (target / name).write_bytes(f.read())


def run_spec(spec: dict) -> int:
    """Stages `spec["stage"]` ({name: local path}) under `spec["root"]` (a ram:// URL or
    a local folder), runs `spec["module"]` with `spec["argv"]` (`{root}` replaced by the
    root, any other `{name}` by `<root>/<name>`), then copies `spec["fetch"]`
    ({remote: local}) back.

    Returns:
        The runner's exit code.
    """
    names = _Staged(spec["root"])
    for name, local in spec.get("stage", {}).items():
        copy_to_remote(Path(local), names[name])
    code, _ = run_in_process(spec["module"], [arg.format_map(names) for arg in spec["argv"]])
    for remote, local in spec.get("fetch", {}).items():
        copy_from_remote(remote.format_map(names), Path(local))
    return code


class _Staged(dict):
    """`{root}` -> the root; `{name}` -> `<root>/<name>` (staged now or by an earlier run)."""

    def __init__(self, root: str):
        super().__init__(root=root)

    def __missing__(self, name: str) -> str:
        return f"{self['root']}/{name}"


if __name__ == "__main__":
    runs = json.loads(Path(sys.argv[1]).read_text())
    sys.exit(max(run_spec(run) for run in runs))
