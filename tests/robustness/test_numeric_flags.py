"""Every numeric flag of every entry point is checked before anything runs.

Rather than a list of examples, each entry point is started in its own process (they
define overlapping flags), its flags are walked, and every integer and float flag is
given NaN, the infinities, a negative number, zero and a huge number through absl's own
parsing and the entry point's `main`. A value out of the flag's bounds must end in the
one line `<program>: error: --<flag> must be ..., got <value>`; a value within them must
pass that check (the run then stops at the next check, as no action is asked for).
"""

import json
import math
import subprocess
import sys

import pytest

from adapter_bert.command_line.settings import numeric_bounds
from tests.runner_utils import REPO

ENTRY_POINTS = {"run_classifier": "run_classifier.py", "run_squad": "run_squad.py",
                "ablate_adapters": "ablate_adapters.py", "export_model": "export_model.py"}
FLOAT_VALUES = ("nan", "inf", "-inf", "-1", "0", "1e300", "0.5")
INT_VALUES = ("-1", "0", "9223372036854775807", "1")

# Run in a child process: imports one entry point, walks the numeric flags this package
# defines (not those of absl or TensorFlow's own modules) and reports,
# for each flag and value, how absl's parsing and the entry point's main answered.
_WALK = r"""
import contextlib, io, json, sys
from absl import flags
import importlib
module = importlib.import_module("adapter_bert." + sys.argv[1])
FLAGS = flags.FLAGS
float_values, int_values = json.loads(sys.argv[2]), json.loads(sys.argv[3])
numeric = sorted(name for name, flag in FLAGS._flags().items()
                 if flag.flag_type() in ("int", "float") and name == flag.name
                 and FLAGS.find_module_defining_flag(name, "").startswith("adapter_bert"))
report = []
for name in numeric:
    kind = FLAGS[name].flag_type()
    for value in (float_values if kind == "float" else int_values):
        FLAGS.unparse_flags()
        try:
            FLAGS([sys.argv[1], f"--{name}={value}"])
        except flags.Error as e:
            report.append([name, kind, value, "absl", str(e)])
            continue
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = module.main()
        lines = [l for l in err.getvalue().splitlines() if ": error: " in l]
        report.append([name, kind, value, code, lines])
print(json.dumps(report))
"""


def _walk(module: str):
    result = subprocess.run(
        [sys.executable, "-c", _WALK, module, json.dumps(FLOAT_VALUES), json.dumps(INT_VALUES)],
        capture_output=True, text=True, cwd=REPO, timeout=300,
        env={"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(ENTRY_POINTS))
def test_every_numeric_flag_is_bounded_and_named_when_out_of_bounds(module):
    program = ENTRY_POINTS[module]
    report = _walk(module)
    names = sorted({row[0] for row in report})
    assert names, "no numeric flag found: the walk itself is broken"
    assert not [n for n in names if n not in numeric_bounds()], "flags without bounds"
    for name, kind, value, code, lines in report:
        if code == "absl":  # absl's parser refused it first (e.g. an int out of int64)
            assert name in lines, lines
            continue
        number = int(value) if kind == "int" else float(value)
        bounds = numeric_bounds()[name]
        shown = str(number)
        if bounds.admits(number):
            assert not any(f"--{name} must be" in line for line in lines), (name, value, lines)
        else:
            assert code == 1 and len(lines) == 1, (name, value, code, lines)
            assert lines[0] == (f"{program}: error: --{name} must be "
                                f"{bounds.describe(kind == 'int')}, got {shown}"), lines[0]


def test_nan_and_the_infinities_are_never_admitted():
    for name, bounds in numeric_bounds().items():
        for value in (math.nan, math.inf, -math.inf):
            assert not bounds.admits(value), (name, value)
