"""The Colab notebook with a bucket named: its runs, export and served answers on gs://."""

import uuid

import pytest

from adapter_bert import io_utils
from tests.gcs import sandbox
from tests.test_notebook import run_notebook


@pytest.mark.gcs
def test_the_notebook_writes_and_serves_from_the_bucket(backbone, mrpc_dir, tmp_path):
    bucket = f"adapter-bert-notebook-{uuid.uuid4().hex[:8]}"
    sandbox.create_bucket(bucket)
    text = run_notebook(tmp_path, backbone, mrpc_dir, bucket=bucket)
    root = f"gs://{bucket}/adapter-bert"
    assert f"outputs: {root}" in text and text.count("eval_accuracy = ") >= 2
    assert io_utils.isfile(f"{root}/mrpc_export/saved_model.pb")
    assert io_utils.isfile(f"{root}/own_adapter/adapter/adapter_model.safetensors")
    assert sum(line.startswith(("'The cat sat", "'Stocks fell")) for line in text.splitlines()) == 2
    assert not (tmp_path / "adapter-bert-runs").exists()
