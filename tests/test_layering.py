"""The package's import layering: no import runs upward, no module imports itself back.

Subpackages are ordered from the bottom up (docs/design.md explains the order):

    errors < io_utils, install_check, console, progress, precision < model < adapters
    < data, metrics
    < training < serving < command_line < runs < runners, library < cli < the entry points
    (run_classifier, run_squad, ablate_adapters, export_model, sweep), __main__

A module may import modules of its own subpackage or of a lower one, never of a higher
one, and the module import graph has no cycle. Imports inside functions count too: a
lazy import hides a cycle from Python, not from a reader.
"""

import ast
import pathlib

import pytest

PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1] / "adapter_bert"

# Rank of each subpackage (or top-level module); equal ranks may not import each other.
LAYERS = {"errors": -1, "io_utils": 0, "install_check": 0, "console": 0, "progress": 0,
          "precision": 0, "google_checkpoints": 0.5, "cli": 6.5,
          "model": 1, "adapters": 2, "data": 3, "metrics": 3, "training": 4, "serving": 5,
          "command_line": 5.5, "runs": 5.7, "runners": 6, "library": 6, "run_classifier": 7, "run_squad": 7, "ablate_adapters": 7,
          "export_model": 7, "sweep": 7, "__main__": 7}

# No edge runs against the order: the adapter layers are network layers (model/), and
# everything that manages adapters (named, fusion, multi-task, files, merging, ResAdapter)
# sits above the model.
ALLOWED_UPWARD = set()


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path, modules: set) -> set:
    """Modules of this package that `path` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import mod` names a module; `from mod import name` names the module.
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        found.update(name for name in names if name in modules)
    # `from adapter_bert.model import encoder` also lists "adapter_bert.model": keep the
    # package only when nothing below it was named.
    return {m for m in found if not any(o.startswith(m + ".") for o in found)}


def _graph():
    files = sorted(PACKAGE_DIR.rglob("*.py"))
    modules = {_module_name(f) for f in files}
    return {_module_name(f): _imports(f, modules) - {_module_name(f)} for f in files}


def _layer(module: str) -> str:
    return module.split(".")[1]


def test_every_module_belongs_to_a_layer():
    unknown = sorted(m for m in _graph() if m != "adapter_bert" and _layer(m) not in LAYERS)
    assert not unknown, f"modules outside the layers of tests/test_layering.py: {unknown}"


def test_top_level_holds_few_modules():
    top = [p.name for p in PACKAGE_DIR.glob("*.py")]
    # The five command-line entry points, __init__/__main__ and the base modules.
    assert len(top) <= 14, top


def test_no_import_runs_upward():
    upward = sorted(
        (module, target) for module, targets in _graph().items() if module != "adapter_bert"
        for target in targets
        if LAYERS[_layer(target)] > LAYERS[_layer(module)]
        or (LAYERS[_layer(target)] == LAYERS[_layer(module)] and _layer(target) != _layer(module)))
    assert [edge for edge in upward if edge not in ALLOWED_UPWARD] == []
    # The allowed edge must still exist, or the exception above is stale.
    assert set(upward) == ALLOWED_UPWARD


def test_no_import_cycle():
    graph = _graph()
    visiting, done, cycles = [], set(), []

    def visit(module):
        if module in done:
            return
        if module in visiting:
            cycles.append(visiting[visiting.index(module):] + [module])
            return
        visiting.append(module)
        for target in sorted(graph.get(module, ())):
            visit(target)
        visiting.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
    assert cycles == []


@pytest.mark.parametrize("module", ["adapter_bert.model.encoder", "adapter_bert.runners.classifier"])
def test_the_graph_sees_real_imports(module):
    # Guards the parser: a graph that found no edges would pass the tests above vacuously.
    assert _graph()[module]
