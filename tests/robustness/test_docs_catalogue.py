"""docs/robustness.md's fault tables stay true to the tests that show them.

Every row of the tables under "Bad input" and "Valid but unusual input" names its tests in
its last column: `classifier[case]` / `squad[case]` (the cases of test_bad_input.py) or a
test function under tests/. Each name must exist, and every case of test_bad_input.py
must have its row, so a case added without a row, or a row left after its test went,
fails here.
"""

import re

from tests.conftest import REPO
from tests.robustness.test_bad_input import GLUE_CASES, SQUAD_CASES

DOC = REPO / "docs" / "robustness.md"
SECTIONS = ("## Bad input", "## Valid but unusual input")
CASE = re.compile(r"^(classifier|squad)\[(\w+)\]$")


def catalogue_rows():
    """(input cell, [test names]) for every table row of the catalogue's sections."""
    rows, inside, previous = [], False, []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            inside = line.startswith(SECTIONS)
            continue
        if not inside or not line.startswith("| ") or line.startswith(("| input |", "|---")):
            continue
        cells = line.strip().strip("|").split(" | ")
        names = re.findall(r"`([^`]+)`", cells[-1])
        if not names:  # "the same two tests": the row above's
            assert cells[-1].strip().startswith("the same"), line
            names = previous
        rows.append((cells[0].strip(), names))
        previous = names
    return rows


def defined_test_functions():
    names = set()
    for path in (REPO / "tests").rglob("test_*.py"):
        names.update(re.findall(r"^def (test_\w+)\(", path.read_text(encoding="utf-8"), re.M))
    return names


def test_every_row_names_tests_that_exist():
    rows = catalogue_rows()
    assert len(rows) >= 30, len(rows)  # the catalogue covers at least 30 kinds of input
    functions = defined_test_functions()
    cases = {"classifier": set(GLUE_CASES), "squad": set(SQUAD_CASES)}
    for row, names in rows:
        assert names, row
        for name in names:
            match = CASE.match(name)
            if match:
                assert match.group(2) in cases[match.group(1)], (row, name)
            else:
                assert name in functions, (row, name)


def test_every_bad_input_case_has_its_row():
    named = {name for _, names in catalogue_rows() for name in names}
    missing = [f"classifier[{case}]" for case in GLUE_CASES
               if f"classifier[{case}]" not in named]
    missing += [f"squad[{case}]" for case in SQUAD_CASES if f"squad[{case}]" not in named]
    assert not missing, f"cases without a row in {DOC.name}: {missing}"
