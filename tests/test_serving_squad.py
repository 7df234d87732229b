"""run_squad.py --export_dir and SquadAnswerer: the exported span model answers real
SQuAD dev questions exactly as run_squad.py predicted them (tiny backbone)."""

import json

import pytest

from tests.conftest import BERT_VOCAB
from tests.runner_utils import run_in_process, write_tiny_backbone

pytest.importorskip("tensorflow_text", reason="the [serving] extra (tensorflow-text) is not "
                                              "installed")


def small_dev_file(squad_dir, tmp_path, name, articles=1, paragraphs=3):
    """The first paragraphs of a dev file (a few dozen questions)."""
    data = json.loads((squad_dir / name).read_text(encoding="utf-8"))
    data["data"] = [dict(a, paragraphs=a["paragraphs"][:paragraphs])
                    for a in data["data"][:articles]]
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    return write_tiny_backbone(tmp_path_factory.mktemp("tiny_bert"), BERT_VOCAB)


@pytest.mark.parametrize("version", ["dev-v1.1.json", "dev-v2.0.json"])
def test_answerer_reproduces_run_squad_predictions(backbone, squad_dir, tmp_path, version):
    from adapter_bert.data.squad import read_squad_examples
    from adapter_bert.serving.squad import SquadAnswerer
    predict_file = small_dev_file(squad_dir, tmp_path, version)
    out = tmp_path / "run"
    v2 = version == "dev-v2.0.json"
    # A short max_seq_length and stride: long contexts span several windows.
    code, _ = run_in_process("run_squad", [
        "--do_predict", f"--predict_file={predict_file}", f"--output_dir={out}",
        f"--init_checkpoint={backbone / 'bert_model.ckpt'}", "--max_seq_length=64",
        "--doc_stride=24", "--max_query_length=16", "--predict_batch_size=16",
        f"--version_2_with_negative={v2}", f"--export_dir={out / 'export'}"])
    assert code == 0
    expected = json.loads((out / "predictions.json").read_text())
    answerer = SquadAnswerer(str(out / "export"), batch_size=16)
    examples = read_squad_examples(str(predict_file), False, v2)
    predictions, null_odds = answerer.predict(examples)
    assert len(expected) > 20 and predictions == expected
    if v2:
        odds = json.loads((out / "null_odds.json").read_text())
        assert odds.keys() == null_odds.keys()
        assert all(abs(odds[k] - null_odds[k]) < 1e-4 for k in odds)
    first = examples[0]
    assert answerer.answer(first.question_text, first.context_text) == expected[first.qas_id]
    info = json.loads((out / "export" / "export_info.json").read_text())
    assert info["max_seq_length"] == 64 and info["doc_stride"] == 24
