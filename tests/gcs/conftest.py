"""The store the scenarios of tests/gcs run on: a bucket of the GCS emulator (`gs://`,
marker `gcs`, inside `python -m tests.gcs.sandbox`, which `make test-gcs` runs). The same
`tf.io.gfile` code paths on a local store are tests/test_remote_paths.py's (`ram://`)."""

import os
import uuid

import pytest

from tests.gcs import sandbox


@pytest.fixture(scope="module", params=[pytest.param("gs", marks=pytest.mark.gcs)])
def store() -> str:
    """The root URL of an empty store for one test module: a new bucket."""
    if not os.environ.get(sandbox.ENV):
        pytest.fail("the gcs tests run inside the emulator's sandbox: make test-gcs")
    bucket = f"adapter-bert-{uuid.uuid4().hex[:12]}"
    sandbox.create_bucket(bucket)
    return f"gs://{bucket}"
