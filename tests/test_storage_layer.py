"""Every path a user gives goes through `adapter_bert.io_utils`, and nothing else.

`os.path.join` turns `gs://b/x` into `gs:\\b\\x` on Windows, `os.path.abspath` into
`<cwd>/gs:/b/x`, and `open`, `shutil`, `tempfile` and `pathlib` do not reach `gs://` at
all: a module outside `io_utils` that uses them on a user's path writes a bucket's files to
the local disk. This test reads the package's source (as test_layering does for imports)
and fails on any such use outside `io_utils`, but for the system paths listed in `ALLOWED`.
"""

import ast
import pathlib

PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1] / "adapter_bert"

# Modules that only `io_utils` may import.
FILE_MODULES = {"shutil", "tempfile", "pathlib", "glob"}
# Attributes of `os` that touch no file: the environment, processes, descriptors of the
# package's own pipes.
OS_NOT_FILES = {"environ", "getenv", "getpid", "kill", "cpu_count", "urandom", "sep",
                "fspath", "PathLike"}
# (module, what it uses): each is a path of the system, never one a user gives.
ALLOWED = {
    # /proc/driver/nvidia/version (whether a GPU driver is loaded), and a private
    # temporary file that takes a native library's stderr through dup/dup2.
    ("console", "os.path.exists"), ("console", "import tempfile"), ("console", "os.dup"),
    ("console", "os.dup2"), ("console", "os.close"),
    ("console", "os.fstat"), ("console", "os.fdopen"),
    # /proc/cpuinfo (which kernels this CPU runs).
    ("precision", "open"),
    # /proc/<pid>/stat (whether the process holding a run's lock is the same process).
    ("runs.run_lock", "open"),
}


def _module(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE_DIR).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _dotted(node: ast.AST) -> str:
    """`os.path.join` for the expression `os.path.join`, "" for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def file_uses(source: str) -> set:
    """(line, what) for each use of a filesystem API in `source` that only `io_utils` may
    make: file modules imported, `open(...)`, `os.path.*` and `os.*` file functions."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update((node.lineno, f"import {a.name.split('.')[0]}") for a in node.names
                         if a.name.split(".")[0] in FILE_MODULES)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top = node.module.split(".")[0]
            if top in FILE_MODULES:
                found.add((node.lineno, f"import {top}"))
            if node.module == "os":
                found.update((node.lineno, f"os.{a.name}") for a in node.names
                             if a.name not in OS_NOT_FILES)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "open":
            found.add((node.lineno, "open"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "os" and node.attr not in OS_NOT_FILES:
            name = _dotted(node)
            found.add((node.lineno, name))
        elif isinstance(node, ast.Attribute) and _dotted(node.value) == "os.path":
            found.add((node.lineno, f"os.path.{node.attr}"))
    # `os.path.join` is reported as itself, not also as `os.path`.
    return {(line, what) for line, what in found
            if not (what == "os.path" and any(w.startswith("os.path.") and other == line
                                              for other, w in found))}


def test_no_module_outside_io_utils_touches_files_itself():
    offences = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        module = _module(path)
        if module == "io_utils" or module.startswith("io_utils."):
            continue
        for line, what in sorted(file_uses(path.read_text())):
            if (module, what) not in ALLOWED:
                offences.append(f"adapter_bert/{path.relative_to(PACKAGE_DIR)}:{line}: {what}")
    assert not offences, ("use adapter_bert.io_utils for these (or, for a system path, "
                          "list it in ALLOWED with the reason):\n" + "\n".join(offences))


def test_the_check_finds_each_kind_of_use():
    source = ("import os, shutil\nfrom pathlib import Path\nfrom os import makedirs\n"
              "open('x')\nos.path.join('a', 'b')\nos.replace('a', 'b')\nos.environ['X']\n"
              "import tempfile as t\nos.getpid()\n")
    assert {what for _, what in file_uses(source)} == {
        "import shutil", "import pathlib", "os.makedirs", "open", "os.path.join",
        "os.replace", "import tempfile"}


def test_every_allowed_use_is_still_made():
    uses = {(_module(path), what) for path in PACKAGE_DIR.rglob("*.py")
            for _, what in file_uses(path.read_text())}
    assert not ALLOWED - uses, f"no longer used, drop from ALLOWED: {sorted(ALLOWED - uses)}"
