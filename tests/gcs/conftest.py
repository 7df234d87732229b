"""The stores the scenarios of tests/gcs run on: a bucket of the GCS emulator (`gs://`,
marker `gcs`, inside `python -m tests.gcs.sandbox`, which `make test-gcs` runs) and a local
folder named by a `file://` URL (marker `slow`), which takes the same `tf.io.gfile` code
paths as `gs://` with a local disk's semantics."""

import os
import uuid

import pytest

from tests.gcs import sandbox


@pytest.fixture(scope="module", params=[pytest.param("gs", marks=pytest.mark.gcs),
                                        pytest.param("file", marks=pytest.mark.slow)])
def store(request, tmp_path_factory) -> str:
    """The root URL of an empty store for one test module: a new bucket, or a folder."""
    if request.param == "file":
        return "file://" + str(tmp_path_factory.mktemp("file_store"))
    if not os.environ.get(sandbox.ENV):
        pytest.fail("the gcs tests run inside the emulator's sandbox: make test-gcs")
    bucket = f"adapter-bert-{uuid.uuid4().hex[:12]}"
    sandbox.create_bucket(bucket)
    return f"gs://{bucket}"
