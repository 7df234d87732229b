"""A missing or mistyped bucket on a write path is one line in seconds, on TensorFlow's own
GCS client against the emulator (`make test-gcs`): TensorFlow's recursive folder creation
loops on a missing bucket instead of failing, so every write path asks for the bucket
first (`io_utils.write_problem`, `io_utils.makedirs`)."""

import time

import pytest

from adapter_bert import io_utils
from tests.gcs.test_store_runs import TINY, bert, run, staged  # noqa: F401 - the fixture

MISSING = "gs://adapter-bert-no-such-bucket-7f3a"
# Far below what a hang would take; a runner's start (TensorFlow's import) is most of it.
SECONDS = 60


def _one_line(done, flag):
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert done.returncode == 1 and len(errors) == 1, done.stderr[-3000:]
    assert f"--{flag}={MISSING}/" in errors[0]
    assert f"the bucket {MISSING} does not exist, or these credentials cannot see it: " \
           f"create it (gcloud storage buckets create {MISSING}) or fix the name" in errors[0]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("module, flag, extra", [
    ("run_classifier", "output_dir", []),
    ("run_classifier", "export_dir", []),
    ("sweep", "output_dir", ["--grid=warmup_proportion=0.1,0.2"]),
])
def test_a_missing_bucket_on_a_write_flag_is_one_line_in_seconds(staged, module, flag,  # noqa: F811
                                                                 extra):
    root = staged
    where = {"output_dir": f"{root}/out_{module}", flag: f"{MISSING}/{flag}"}
    start = time.monotonic()
    done = run(module, ["--do_train", f"--train_file={root}/own/train.csv", bert(root),
                        *(f"--{k}={v}" for k, v in where.items()), *extra, *TINY])
    assert time.monotonic() - start < SECONDS
    if module == "sweep":  # the sweep names the point whose flags were refused
        assert "grid point warmup_proportion=0.1: --output_dir=" in done.stderr
    _one_line(done, flag)


def test_the_library_and_the_storage_layer_refuse_a_missing_bucket_at_once(staged):  # noqa: F811
    import adapter_bert as ab
    from adapter_bert.errors import UserError
    root = staged
    start = time.monotonic()
    with pytest.raises(io_utils.WriteError, match=f"the bucket {MISSING} does not exist"):
        io_utils.makedirs(f"{MISSING}/a/b")
    model = ab.TextClassifier.from_pretrained(labels=["neg", "pos"], backbone=f"{root}/bert",
                                              adapter={"size": 8}, max_seq_length=32,
                                              quiet=True)
    for save in (lambda: model.save(f"{MISSING}/m.keras"),
                 lambda: model.save(f"{MISSING}/saved_model"),
                 lambda: model.save_adapter(f"{MISSING}/adapter")):
        with pytest.raises(UserError, match=f"the bucket {MISSING} does not exist"):
            save()
    assert time.monotonic() - start < SECONDS
