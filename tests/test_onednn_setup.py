"""Importing the package turns TensorFlow's oneDNN CPU kernels on, unless the user chose."""

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

# What TensorFlow itself reports after loading, not just the variable: the switch only
# counts if it is set before TensorFlow reads it.
PROBE = ("import os, adapter_bert, tensorflow\n"
         "from tensorflow.python.util import _pywrap_util_port as port\n"
         "print(os.environ['TF_ENABLE_ONEDNN_OPTS'], port.IsMklEnabled())")


def _probe(choice):
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if choice is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = choice
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=REPO,
                          capture_output=True, text=True, check=True)
    return done.stdout.split()[-2:]


@pytest.mark.parametrize("choice, expected", [(None, ["1", "True"]),
                                              ("0", ["0", "False"]),
                                              ("1", ["1", "True"])])
def test_onednn_is_on_unless_turned_off(choice, expected):
    assert _probe(choice) == expected
