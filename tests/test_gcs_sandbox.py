"""The GCS group's sandbox fails in one line, never skips, where it cannot run; its TLS
front's mending of TensorFlow's requests is exercised by every test of tests/gcs."""

import os
import subprocess
import sys

from tests.conftest import REPO


def test_without_unshare_the_group_fails_in_one_line_with_status_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tests.gcs.sandbox", "true"], cwd=REPO,
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PATH=str(tmp_path), PYTHONPATH=str(REPO)))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "make test-gcs: needs root and unshare (util-linux) for a private network namespace"]


def test_without_a_command_it_says_how_to_call_it():
    done = subprocess.run([sys.executable, "-m", "tests.gcs.sandbox"], cwd=REPO,
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 2 and "usage: python -m tests.gcs.sandbox COMMAND" in done.stderr
