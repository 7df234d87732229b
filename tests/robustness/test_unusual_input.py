"""Valid but unusual input works, and gives exactly what its plain form gives.

TSVs with Windows line ends, a UTF-8 byte-order mark, blank lines at the end or no
newline after the last row; a SQuAD JSON file with a byte-order mark (and Windows line
ends). Each is read into the same examples as the plain file, and a real run on it
(train, evaluate, predict; `--deterministic`, a subprocess per run) writes the same bytes
as the run on the plain files: adapter weights, eval_results.txt, test_results.tsv,
SQuAD's predictions.json.
"""

import json
from pathlib import Path

import pytest

from tests.robustness.helpers import classifier_flags, squad_flags, write_mrpc_dir
from tests.runner_utils import run_subprocess

DETERMINISTIC = ["--deterministic", "--seed=7"]
BOM = b"\xef\xbb\xbf"

# How each unusual form is made from the plain file's bytes (which end in one "\n").
TSV_FORMS = {
    "crlf": lambda data: data.replace(b"\n", b"\r\n"),
    "bom": lambda data: BOM + data,
    "trailing_blank_lines": lambda data: data + b"\n\r\n  \n",
    "no_final_newline": lambda data: data[:-1],
}
# The end-to-end run takes the quirks together: each alone reads into the plain file's
# examples (test_unusual_tsv_reads_as_the_plain_file), so one run shows that they reach
# training, evaluation and prediction unchanged.
TSV_FORMS["bom_crlf_trailing_blank_lines"] = lambda data: TSV_FORMS["trailing_blank_lines"](
    BOM + TSV_FORMS["crlf"](data))


def unusual_mrpc_dir(root: Path, mrpc_lines, form: str) -> Path:
    data = write_mrpc_dir(root, mrpc_lines)
    for name in ("train.tsv", "dev.tsv", "test.tsv"):
        path = data / name
        plain = path.read_bytes()
        assert plain.endswith(b"\n") and b"\r" not in plain and not plain.startswith(BOM)
        path.write_bytes(TSV_FORMS[form](plain))
        assert path.read_bytes() != plain
    return data


@pytest.mark.parametrize("form", sorted(TSV_FORMS))
def test_unusual_tsv_reads_as_the_plain_file(form, mrpc_lines, tmp_path):
    from adapter_bert.data.glue import get_processor
    processor = get_processor("MRPC")
    plain = write_mrpc_dir(tmp_path / "plain", mrpc_lines)
    unusual = unusual_mrpc_dir(tmp_path / form, mrpc_lines, form)
    for split in ("train", "dev", "test"):
        expected = processor.get_examples(str(plain), split)
        assert len(expected) == len(mrpc_lines[["train", "dev", "test"].index(split)]) - 1
        assert processor.get_examples(str(unusual), split) == expected, split


CLASSIFIER_OUTPUTS = ("adapter/adapter_model.safetensors", "eval_results.txt",
                      "test_results.tsv")


def classifier_outputs(backbone, data: Path, out: Path) -> dict:
    result = run_subprocess("run_classifier.py", [
        "--do_train", "--do_eval", "--do_predict", *DETERMINISTIC,
        *classifier_flags(backbone, out, data)])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return {name: (out / name).read_bytes() for name in CLASSIFIER_OUTPUTS}


@pytest.fixture(scope="module")
def plain_classifier_outputs(backbone, mrpc_lines, tmp_path_factory):
    root = tmp_path_factory.mktemp("plain_tsv")
    return classifier_outputs(backbone, write_mrpc_dir(root, mrpc_lines), root / "out")


@pytest.mark.slow
def test_unusual_tsv_trains_and_evaluates_as_the_plain_file(plain_classifier_outputs,
                                                            backbone, mrpc_lines, tmp_path):
    data = unusual_mrpc_dir(tmp_path, mrpc_lines, "bom_crlf_trailing_blank_lines")
    got = classifier_outputs(backbone, data, tmp_path / "out")
    assert b"eval_accuracy" in got["eval_results.txt"]
    for name in CLASSIFIER_OUTPUTS:
        assert got[name] == plain_classifier_outputs[name], name


def squad_outputs(backbone, squad: Path, out: Path) -> dict:
    result = run_subprocess("run_squad.py", [
        "--do_train", "--do_predict", *DETERMINISTIC,
        *squad_flags(backbone, out, train_file=squad, predict_file=squad)])
    assert result.returncode == 0, result.stderr[-3000:]
    return {name: (out / name).read_bytes()
            for name in ("adapter/adapter_model.safetensors", "predictions.json",
                         "eval_results.txt")}


@pytest.mark.slow
def test_squad_json_with_a_byte_order_mark_works_as_the_plain_file(backbone, squad_slice,
                                                                  tmp_path):
    from adapter_bert.data.squad import read_squad_examples
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(squad_slice), encoding="utf-8")
    unusual = tmp_path / "bom_crlf.json"
    unusual.write_bytes(BOM + json.dumps(squad_slice, indent=1, ensure_ascii=False)
                        .replace("\n", "\r\n").encode("utf-8"))
    for training in (True, False):
        expected = read_squad_examples(str(plain), training)
        assert len(expected) == sum(len(p["qas"]) for p in squad_slice["data"][0]["paragraphs"])
        got = read_squad_examples(str(unusual), training)
        assert [vars(e) for e in got] == [vars(e) for e in expected]
    reference = squad_outputs(backbone, plain, tmp_path / "plain_out")
    got = squad_outputs(backbone, unusual, tmp_path / "unusual_out")
    assert b"exact_match" in got["eval_results.txt"]
    assert got == reference
