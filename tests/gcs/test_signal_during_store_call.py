"""SIGTERM and SIGINT stop a run while TensorFlow's GCS client waits on a slow store (the
emulator's front answers a "slow" bucket after 30 s): the run exits with 128 + the signal
and its one line within seconds, instead of when the store answers."""

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from tests.conftest import REPO
from tests.gcs import sandbox

# Far below the front's delay: the signal, not the store's answer, ends the run.
STOPPED_WITHIN_S = 10


@pytest.mark.gcs
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_a_slow_store_call_stops_the_run(signum, tmp_path):
    bucket = f"{sandbox.SLOW_BUCKET_PREFIX}{uuid.uuid4().hex[:8]}"
    marker = os.path.join(tempfile.gettempdir(), bucket)
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    run = subprocess.Popen([sys.executable, "-m", "adapter_bert.run_classifier", "--do_train",
                            f"--train_file=gs://{bucket}/train.csv",
                            f"--output_dir={tmp_path}/out"],
                           stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(marker):  # the run is inside the store call
            assert run.poll() is None and time.monotonic() < deadline, "never asked the store"
            time.sleep(0.2)
        time.sleep(1)
        run.send_signal(signum)
        sent = time.monotonic()
        stderr = run.communicate(timeout=sandbox.SLOW_SECONDS + 30)[1]
        took = time.monotonic() - sent
    finally:
        run.kill()
        if os.path.exists(marker):
            os.remove(marker)
    assert run.returncode == 128 + signum, stderr[-3000:]
    assert took < STOPPED_WITHIN_S, took
    name = signal.Signals(signum).name
    assert f"run_classifier.py: {name}: stopped; nothing was in progress that could be " \
           f"saved; preempted, run again with the same command to resume" in stderr
    assert "Traceback" not in stderr
