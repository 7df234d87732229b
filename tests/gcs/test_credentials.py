"""A process without Google Cloud credentials: the emulator's front refuses it as GCS
refuses an anonymous caller (401), and the run stops in one line saying how to sign in."""

import os
import subprocess
import sys

from tests.conftest import REPO


def test_a_run_without_credentials_is_one_line_saying_how_to_sign_in(store, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GOOGLE_AUTH_TOKEN_FOR_TESTING"}
    env.update(HOME=str(tmp_path), PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-m", "adapter_bert.run_classifier", "--do_train",
                           f"--train_file={store}/train.csv", f"--output_dir={tmp_path}/out"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert done.returncode == 1 and len(errors) == 1, done.stderr[-3000:]
    assert errors[0].startswith(f"run_classifier.py: error: --train_file={store}/train.csv: "
                                f"cannot access it (")
    assert errors[0].endswith("; not signed in to Google Cloud: run  gcloud auth "
                              "application-default login  (on Colab: from google.colab import "
                              "auth; auth.authenticate_user())")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
