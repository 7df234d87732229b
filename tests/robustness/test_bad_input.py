"""Bad input, end to end through the entry points.

Each row of the catalogue in docs/robustness.md ("Bad input") names its test here: a case
of `glue_case` (`classifier[case]`) or `squad_case` (`squad[case]`), or a test function.
The run exits with 1 and exactly one line `<script>: error: ...` naming the file, line or
flag, prints no Python traceback, and leaves what was already in --output_dir as it was.
run_classifier.py runs in process (fast); run_squad.py as a subprocess (absl flags are
defined once per process, and the classifier's are defined here). The fixtures are in
tests/robustness/conftest.py; test_docs_catalogue.py keeps the docs' rows and these cases
in step.
"""

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.robustness.helpers import (assert_one_error_line, classifier_flags, fill_output_dir,
                                      snapshot, squad_flags, write_lines, write_mrpc_dir)
from tests.runner_utils import run_in_process, run_subprocess


# ------------------------------------------------------------------ bad input: GLUE


def _replace_line(path: Path, number: int, line: str):
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[number - 1] = line
    write_lines(path, lines)


def _set_label(path: Path, number: int, label: str):
    row = path.read_text(encoding="utf-8").splitlines()[number - 1].split("\t")
    _replace_line(path, number, "\t".join([label] + row[1:]))


def _config_with(backbone: Path, target: Path, **fields) -> Path:
    config = json.loads((backbone / "bert_config.json").read_text())
    config.update(fields)
    target.write_text(json.dumps(config))
    return target


def _foreign_adapter(target: Path, vocab: Path) -> Path:
    """An adapter directory trained on a hidden-32 backbone (the run's backbone is hidden-16)."""
    from adapter_bert.adapters.files import save_trained_weights
    from adapter_bert.model.checkpoints import build_model
    from adapter_bert.model.config import AdapterConfig, BertConfig
    from adapter_bert.adapters.models import BertClassifier
    config = BertConfig(vocab_size=sum(1 for _ in open(vocab, encoding="utf-8")), hidden_size=32,
                        num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=64)
    model = BertClassifier(config, 2, AdapterConfig(size=8))
    build_model(model)
    save_trained_weights(model, str(target), "mrpc", ["0", "1"])
    return target


def _adapter_for_labels(target: Path, backbone: Path, task: str, labels) -> Path:
    """An adapter directory for the run's backbone shape, trained for another label set."""
    from adapter_bert.adapters.files import save_trained_weights
    from adapter_bert.model.checkpoints import build_model
    from adapter_bert.model.config import AdapterConfig, BertConfig
    from adapter_bert.adapters.models import BertClassifier
    config = BertConfig.from_json_file(str(backbone / "bert_config.json"))
    model = BertClassifier(config, len(labels), AdapterConfig(size=8))
    build_model(model)
    save_trained_weights(model, str(target), task, list(labels))
    return target


def _truncated_copy(backbone: Path, target: Path, pattern: str) -> Path:
    """A copy of the backbone whose file matching `pattern` lost its second half."""
    shutil.copytree(backbone, target)
    cut = next(target.glob(pattern))
    data = cut.read_bytes()
    cut.write_bytes(data[:len(data) // 2])
    return target / "bert_model.ckpt"


def glue_case(case, backbone, vocab, data: Path, tmp: Path):
    """Breaks one input for `case`; returns (extra flags, expected message regex)."""
    dev = data / "dev.tsv"
    if case == "missing_file":
        dev.unlink()
        return {}, (r"MRPC: data file not found: .*MRPC/dev\.tsv; "
                    r"pass --data_dir=.*--data_source=tfds")
    if case == "unreadable_file":
        dev.unlink()
        dev.mkdir()  # a directory where the file should be (chmod does not stop root)
        return {}, r"MRPC .*MRPC/dev\.tsv: cannot read it \(Is a directory\)"
    if case == "too_few_columns":
        _replace_line(dev, 3, "1\t702876\t702977")
        return {}, (r"MRPC .*MRPC/dev\.tsv line 3: expected at least 5 tab-separated columns, "
                    r"found 3")
    if case == "unknown_label":
        _set_label(dev, 4, "yes")
        return {}, r"MRPC .*MRPC/dev\.tsv line 4: unknown label 'yes'; allowed labels: 0, 1"
    if case == "empty_file":
        dev.write_bytes(b"")
        return {}, r"MRPC .*MRPC/dev\.tsv: file is empty"
    if case == "header_only":
        write_lines(dev, dev.read_text(encoding="utf-8").splitlines()[:1])
        return {}, r"MRPC .*MRPC/dev\.tsv: file has a header but no examples"
    if case == "non_utf8_tsv":
        lines = dev.read_text(encoding="utf-8").splitlines()
        write_lines(dev, lines[:4], raw=lines[4].encode("utf-8").replace(b"the", b"th\xe9", 1)
                    + b"\n")
        return {}, (r"MRPC .*MRPC/dev\.tsv line 5: not valid UTF-8 \(byte 0xe9 at byte column "
                    r"\d+\); save the file as UTF-8")
    if case == "unknown_task":
        return {"task_name": "MRPX"}, (r"--task_name: Unknown GLUE task 'MRPX'; valid tasks: ax, "
                                       r"cola, mnli, mrpc")
    if case == "missing_data_dir":
        return {"data_dir": tmp / "nowhere"}, r"--data_dir=.*nowhere: directory not found"
    if case == "missing_checkpoint":
        return ({"init_checkpoint": tmp / "nowhere/bert_model.ckpt"},
                r"nowhere/bert_model\.ckpt: no checkpoint found \(expected a TF1 checkpoint prefix")
    if case == "missing_config":
        return ({"bert_config_file": tmp / "no_config.json"},
                r"--bert_config_file=.*no_config\.json: file not found")
    if case == "malformed_config":
        (tmp / "bad_config.json").write_text('{"vocab_size": 30522,')
        return ({"bert_config_file": tmp / "bad_config.json"},
                r"bad_config\.json: not valid JSON \(line 1, column \d+")
    if case == "non_utf8_config":
        (tmp / "latin1.json").write_bytes(b'{"vocab_size": 30522, "name": "caf\xe9"}')
        return {"bert_config_file": tmp / "latin1.json"}, r"latin1\.json line 1: not valid UTF-8"
    if case == "config_checkpoint_mismatch":
        config = _config_with(backbone, tmp / "wide_config.json", intermediate_size=48)
        return {"bert_config_file": config}, (
            r"variable bert/encoder/layer_0/intermediate/dense/kernel has shape \[16, 32\] in "
            r"the checkpoint but \[16, 48\] in the model built from the config")
    if case == "vocab_size_mismatch":
        short = write_lines(tmp / "short_vocab.txt",
                            vocab.read_text(encoding="utf-8").splitlines()[:1000])
        return {"vocab_file": short}, (r"short_vocab\.txt has 1000 tokens but the BERT config says "
                                       r"vocab_size=30522")
    if case == "non_utf8_vocab":
        lines = vocab.read_text(encoding="utf-8").splitlines()
        bad = write_lines(tmp / "latin1_vocab.txt", lines[:-1], raw=b"caf\xe9\n")
        return {"vocab_file": bad}, r"latin1_vocab\.txt line 30522: not valid UTF-8"
    if case == "lower_case_vs_cased":
        cased = tmp / "cased_L-2_H-16_A-2"
        shutil.copytree(backbone, cased)
        return {"init_checkpoint": cased / "bert_model.ckpt"}, (
            r"--do_lower_case=True but .*cased_L-2_H-16_A-2/bert_model\.ckpt is a cased "
            r"checkpoint; pass --do_lower_case=False")
    if case == "max_seq_length":
        return {"max_seq_length": 128}, (r"Cannot use sequence length 128 because the BERT model "
                                         r"was only trained up to sequence length 64")
    if case == "foreign_adapter":
        adapter = _foreign_adapter(tmp / "adapter32", vocab)
        return {"load_adapter": adapter}, (r"adapter32 was trained on another backbone shape "
                                           r"\(hidden_size: file 32 vs model 16")
    if case == "adapter_other_labels":
        adapter = _adapter_for_labels(tmp / "mnli_adapter", backbone, "mnli",
                                      ["contradiction", "entailment", "neutral"])
        return {"load_adapter": adapter}, (
            r"--load_adapter=.*mnli_adapter was trained for mnli with 3 labels \(contradiction, "
            r"entailment, neutral\), but MRPC has 2 \(0, 1\): pass an adapter trained on MRPC$")
    if case == "adapter_files_mixed":
        # A write interrupted between the two files: the weights of another save beside
        # this one's adapter_config.json.
        adapter = _adapter_for_labels(tmp / "mixed", backbone, "mrpc", ["0", "1"])
        other = _adapter_for_labels(tmp / "other", backbone, "mrpc", ["0", "1"])
        (adapter / "adapter_model.safetensors").write_bytes(
            (other / "adapter_model.safetensors").read_bytes())
        return {"load_adapter": adapter}, (
            r"mixed/adapter_model\.safetensors is not the weights file adapter_config\.json "
            r"was written with")
    if case == "load_adapter_missing":
        return ({"load_adapter": tmp / "no_adapter"},
                r"--load_adapter=.*no_adapter: directory not found$")
    if case == "another_tasks_files":
        from tests import fixtures
        fixtures.write_nli_pairs(data, "RTE", rows={"train": 96, "dev": 40, "test": 8})
        return {}, (r"MRPC .*MRPC/dev\.tsv line 1: the header \(index, sentence1, sentence2, "
                    r"label\) is that of RTE or WNLI files, not MRPC's \(Quality, #1 ID, #2 ID, "
                    r"#1 String, #2 String\): is --data_dir another task's folder\?$")
    if case == "truncated_checkpoint_data":
        cut = _truncated_copy(backbone, tmp / "cut_data", "bert_model.ckpt.data-*")
        return {"init_checkpoint": cut}, (
            r"cut_data/bert_model\.ckpt: cannot read TF1 checkpoint \(Read less bytes than "
            r"requested\): its data file is cut short \(an interrupted download or copy\?\); "
            r"fetch it again$")
    if case == "truncated_checkpoint_index":
        cut = _truncated_copy(backbone, tmp / "cut_index", "bert_model.ckpt.index")
        return {"init_checkpoint": cut}, (
            r"cut_index/bert_model\.ckpt: cannot read TF1 checkpoint \(.+\): its \.index file "
            r"is damaged or cut short; fetch it again$")
    if case == "vocab_of_another_kind":
        lines = vocab.read_text(encoding="utf-8").splitlines()
        lines[lines.index("[CLS]")] = "<s>"  # as large as the config says, but no [CLS]
        other = write_lines(tmp / "other_vocab.txt", lines)
        return {"vocab_file": other}, (
            r"other_vocab\.txt has no \[CLS\] token: not the WordPiece vocabulary of a BERT "
            r"checkpoint .*; pass the vocab\.txt of --init_checkpoint$")
    if case == "vocab_missing":
        return ({"vocab_file": tmp / "no_vocab.txt"},
                r"--vocab_file=.*no_vocab\.txt: file not found$")
    if case == "max_seq_length_no_room":
        return {"max_seq_length": 2}, (
            r"--max_seq_length=2 leaves no room for text: MRPC's sentence pairs need \[CLS\] "
            r"and two \[SEP\], so at least 3$")
    if case == "task_name_missing":
        return {"task_name": None}, (r"--task_name is required \(one of CoLA, SST-2, MRPC, "
                                     r"STS-B, QQP, MNLI, QNLI, RTE, WNLI, AX, XNLI\), or your "
                                     r"own data with --train_file, --dev_file, --test_file \(or "
                                     r"--data_source=tfds --tfds_name=\.\.\.\)$")
    if case == "data_dir_missing_flag":
        return {"data_dir": None}, r"--data_dir is required: pass --data_dir=<glue_data>/MRPC"
    if case == "no_action":
        return {"do_eval": "false"}, (r"At least one of `do_train`, `do_eval` or `do_predict` "
                                      r"must be True\.$")
    if case == "train_batch_size_zero":
        return {"train_batch_size": 0}, r"--train_batch_size must be an integer in \[1, 1048576\], got 0$"
    if case == "negative_epochs":
        return {"num_train_epochs": -1}, r"--num_train_epochs must be a finite number in \(0, 1e\+06\], got -1\.0$"
    if case == "warmup_out_of_range":
        return {"warmup_proportion": 1.5}, r"--warmup_proportion must be a finite number in \[0, 1\], got 1\.5$"
    raise AssertionError(case)


GLUE_CASES = ["missing_file", "unreadable_file", "too_few_columns", "unknown_label",
              "empty_file", "header_only", "non_utf8_tsv", "unknown_task", "missing_data_dir",
              "missing_checkpoint", "missing_config", "malformed_config", "non_utf8_config",
              "config_checkpoint_mismatch", "vocab_size_mismatch", "non_utf8_vocab",
              "lower_case_vs_cased", "max_seq_length", "foreign_adapter",
              "adapter_other_labels", "adapter_files_mixed", "load_adapter_missing",
              "another_tasks_files",
              "truncated_checkpoint_data", "truncated_checkpoint_index",
              "vocab_of_another_kind", "vocab_missing", "max_seq_length_no_room",
              "task_name_missing", "data_dir_missing_flag", "no_action",
              "train_batch_size_zero", "negative_epochs", "warmup_out_of_range"]


@pytest.mark.parametrize("case", GLUE_CASES)
def test_bad_classifier_input_gives_one_line_and_keeps_output_dir(
        case, backbone, vocab, mrpc_lines, tmp_path, capfd):
    data = write_mrpc_dir(tmp_path, mrpc_lines)
    extra, pattern = glue_case(case, backbone, vocab, data, tmp_path)
    out = tmp_path / "out"
    before = fill_output_dir(out)
    capfd.readouterr()
    code, _ = run_in_process("run_classifier", ["--do_eval", *classifier_flags(
        backbone, out, extra.pop("data_dir", data), **extra)])
    err = capfd.readouterr().err
    assert code == 1
    assert_one_error_line(err, "run_classifier.py", pattern)
    assert snapshot(out) == before  # nothing destroyed, nothing half-written


@pytest.mark.parametrize("broken", ["dev.tsv", "test.tsv"])
def test_a_bad_dev_or_test_file_fails_before_training(broken, backbone, mrpc_lines, tmp_path,
                                                      capfd):
    data = write_mrpc_dir(tmp_path, mrpc_lines)
    _replace_line(data / broken, 3, "1\tonly\tthree")
    out = tmp_path / "out"
    capfd.readouterr()
    code, _ = run_in_process("run_classifier", ["--do_train", "--do_eval", "--do_predict",
                                                *classifier_flags(backbone, out, data)])
    assert code == 1
    assert_one_error_line(capfd.readouterr().err, "run_classifier.py", f"{broken} line 3")
    assert not (out / "checkpoints").exists()  # no training happened


def test_stsb_score_that_is_not_finite_is_rejected_before_training(backbone, tmp_path, capfd):
    header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
              "sentence1", "sentence2", "score"]
    rows = [[str(i), "main-news", "f", "2012", str(i), "none", "none", "a man plays",
             "a man is playing", "nan" if i == 2 else "3.2"] for i in range(4)]
    write_lines(tmp_path / "STS-B" / "train.tsv", ["\t".join(r) for r in [header] + rows])
    out = tmp_path / "out"
    before = fill_output_dir(out)
    capfd.readouterr()
    code, _ = run_in_process("run_classifier", ["--do_train", *classifier_flags(
        backbone, out, tmp_path / "STS-B", task_name="STS-B")])
    assert code == 1
    assert_one_error_line(capfd.readouterr().err, "run_classifier.py",
                          r"STS-B .*train\.tsv line 4: label 'nan' is not a finite number")
    assert snapshot(out) == before


def test_output_dir_that_is_a_file_is_left_alone(backbone, mrpc_lines, tmp_path, capfd):
    data = write_mrpc_dir(tmp_path, mrpc_lines)
    blocker = tmp_path / "results.txt"
    blocker.write_text("precious\n")
    capfd.readouterr()
    code, _ = run_in_process("run_classifier", ["--do_train", "--do_eval", *classifier_flags(
        backbone, blocker, data)])
    assert code == 1
    assert_one_error_line(capfd.readouterr().err, "run_classifier.py",
                          r"--output_dir=.*results\.txt exists and is a file, not a directory")
    assert blocker.read_text() == "precious\n"


def test_nan_loss_stops_with_a_clear_message_and_keeps_the_last_good_checkpoint(
        backbone, mrpc_lines, tmp_path, capfd):
    """A learning rate of 1e36 overflows the weights at step 1; step 2's loss is NaN."""
    data = write_mrpc_dir(tmp_path, mrpc_lines)
    out = tmp_path / "out"
    before = fill_output_dir(out)
    capfd.readouterr()
    code, _ = run_in_process("run_classifier", ["--do_train", "--do_eval", *classifier_flags(
        backbone, out, data, learning_rate=1e36, warmup_proportion=0,
        save_checkpoints_steps=1)])
    assert code == 1
    line = assert_one_error_line(
        capfd.readouterr().err, "run_classifier.py",
        r"the training loss became NaN near step 2; stopped\. Last good checkpoint: "
        r".*checkpoints/ckpt-1\. Lower --learning_rate or check the data\.")
    checkpoints = sorted(p.name for p in (out / "checkpoints").glob("ckpt-*.index"))
    assert checkpoints == ["ckpt-1.index"], line
    # No adapter and no new results were written from the diverged weights.
    assert not (out / "adapter").exists()
    assert {k: v for k, v in snapshot(out).items() if k in before} == before


def test_the_entry_point_itself_prints_no_traceback(backbone, mrpc_lines, tmp_path):
    """The real script (absl app, INFO logging to stderr) prints the line and no traceback."""
    data = write_mrpc_dir(tmp_path, mrpc_lines)
    _set_label(data / "dev.tsv", 4, "yes")
    result = run_subprocess("run_classifier.py", ["--do_eval", *classifier_flags(
        backbone, tmp_path / "out", data)])
    assert result.returncode == 1
    assert_one_error_line(result.stderr, "run_classifier.py", r"dev\.tsv line 4: unknown label")
    assert "Traceback of the error" not in result.stderr
    # The error is the last thing the user sees.
    assert result.stderr.strip().splitlines()[-1].startswith("run_classifier.py: error: ")


# ------------------------------------------------------------------ bad input: SQuAD


def squad_case(case, squad_slice, tmp: Path):
    """Writes a broken SQuAD file for `case`; returns (flags, expected message regex)."""
    data = json.loads(json.dumps(squad_slice))
    path = tmp / f"{case}.json"
    flag = "predict_file"
    qas = data["data"][0]["paragraphs"][0]["qas"]
    if case == "missing_file":
        return {flag: tmp / "nowhere.json"}, r"--predict_file=.*nowhere\.json: file not found"
    if case == "malformed_json":
        path.write_text(json.dumps(data)[:700])
        return {flag: path}, r"malformed_json\.json: malformed JSON at line 1, column \d+"
    if case == "not_utf8":
        word = data["data"][0]["paragraphs"][0]["context"].split()[0].encode("ascii")
        path.write_bytes(json.dumps(data).encode("utf-8").replace(word, b"\xfc" + word[1:], 1))
        return {flag: path}, r"not_utf8\.json line 1: not valid UTF-8 \(byte 0xfc at byte column \d+\)"
    if case == "missing_key":
        del qas[1]["question"]
        qid = qas[1]["id"]
        path.write_text(json.dumps(data))
        return {flag: path}, (rf"missing_key\.json: data\[0\]\.paragraphs\[0\]\.qas\[1\] "
                              rf"\(question id '{qid}'\): missing key 'question'")
    if case == "answer_start_not_int":
        qas[0]["answers"][0]["answer_start"] = "177"
        path.write_text(json.dumps(data))
        return {flag: path}, (r"data\[0\]\.paragraphs\[0\]\.qas\[0\]\.answers\[0\]\.answer_start "
                              r"\(question id '\w+'\): expected int, got str")
    if case == "answer_start_wrong_everywhere":
        for paragraph in data["data"][0]["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["answers"][0]["answer_start"] = len(paragraph["context"]) + 5
        path.write_text(json.dumps(data))
        return {"train_file": path, "do_predict": None}, (
            r"--train_file=.*answer_start_wrong_everywhere\.json: no usable questions")
    if case == "squad_v2_without_flag":
        for qa in qas:
            qa["is_impossible"] = False
        qas[1]["is_impossible"], qas[1]["answers"] = True, []
        path.write_text(json.dumps(data))
        return {"train_file": path, "do_predict": None}, (
            rf"squad_v2_without_flag\.json: data\[0\]\.paragraphs\[0\]\.qas\[1\] \(question id "
            rf"'{qas[1]['id']}'\) is a SQuAD 2\.0 unanswerable question \(is_impossible: true\): "
            r"pass --version_2_with_negative to train on SQuAD 2\.0$")
    if case == "squad_v2_predict_without_flag":
        qas[1]["answers"] = []  # unanswerable, as in a SQuAD 2.0 dev file
        path.write_text(json.dumps(data))
        total = sum(len(p["qas"]) for p in data["data"][0]["paragraphs"])
        return {flag: path}, (rf"--predict_file=.*squad_v2_predict_without_flag\.json: 1 of "
                              rf"{total} questions have no answer; for SQuAD 2\.0 pass "
                              r"--version_2_with_negative$")
    if case == "no_questions":
        for paragraph in data["data"][0]["paragraphs"]:
            paragraph["qas"] = []
        path.write_text(json.dumps(data))
        return {flag: path}, (r"--predict_file=.*no_questions\.json: the file holds no "
                              r"questions \(every data\[\]\.paragraphs\[\]\.qas is empty\)$")
    if case == "train_file_missing_flag":
        return {"train_file": None}, (r"If `do_train` is True, then `train_file` must be "
                                      r"specified\.$")
    if case == "max_query_length_too_long":
        path.write_text(json.dumps(data))
        return {flag: path, "max_query_length": 61}, (
            r"The max_seq_length \(64\) must be greater than max_query_length \(61\) \+ 3$")
    if case == "doc_stride_zero":
        path.write_text(json.dumps(data))
        return {flag: path, "doc_stride": 0}, r"--doc_stride must be an integer in \[1, 65536\], got 0$"
    raise AssertionError(case)


SQUAD_CASES = ["missing_file", "malformed_json", "not_utf8", "missing_key",
               "answer_start_not_int", "answer_start_wrong_everywhere", "squad_v2_without_flag",
               "squad_v2_predict_without_flag", "no_questions", "train_file_missing_flag",
               "max_query_length_too_long", "doc_stride_zero"]


@pytest.mark.parametrize("case", SQUAD_CASES)
def test_bad_squad_input_gives_one_line_and_keeps_output_dir(case, backbone, squad_slice,
                                                             tmp_path, capfd):
    extra, pattern = squad_case(case, squad_slice, tmp_path)
    actions = ["--do_train"] if "train_file" in extra else ["--do_predict"]
    extra = {k: v for k, v in extra.items() if v is not None}
    out = tmp_path / "out"
    before = fill_output_dir(out)
    # In process: run_squad.py's own stderr and exit status, as a script, are tested by
    # test_unwritable_output_dir_is_named_before_anything_loads.
    code, _ = run_in_process("run_squad", [*actions, *squad_flags(backbone, out, **extra)])
    stderr = capfd.readouterr().err
    assert code == 1, stderr[-3000:]
    assert_one_error_line(stderr, "run_squad.py", pattern)
    assert snapshot(out) == before


def test_one_wrong_answer_start_is_counted_and_skipped_not_fatal(squad_slice, tmp_path):
    """An answer_start that misses its text drops that question from training, with a count."""
    from adapter_bert.data.squad import read_squad_examples
    data = json.loads(json.dumps(squad_slice))
    qa = data["data"][0]["paragraphs"][0]["qas"][0]
    qa["answers"][0]["answer_start"] += 3
    path = tmp_path / "one_off.json"
    path.write_text(json.dumps(data))
    total = sum(len(p["qas"]) for p in data["data"][0]["paragraphs"])
    examples = read_squad_examples(str(path), is_training=True)
    assert examples.num_answer_mismatches == 1 and examples.mismatched_ids == [qa["id"]]
    assert len(examples) == total - 1 and qa["id"] not in {e.qas_id for e in examples}
    # For prediction nothing is dropped: the question is still answered and scored.
    assert len(read_squad_examples(str(path), is_training=False)) == total


# ------------------------------------------------------------------ an unwritable --output_dir


@pytest.mark.parametrize("runner", ["run_classifier", "run_squad"])
def test_unwritable_output_dir_is_named_before_anything_loads(runner, backbone, mrpc_lines,
                                                              squad_slice, tmp_path, capfd):
    """/proc takes no new folders, even from root: the flag check says so in one line, before
    the backbone or the data are read (a missing --init_checkpoint would fail otherwise)."""
    out = "/proc/review_out"
    missing = tmp_path / "no_backbone"
    if runner == "run_classifier":
        data = write_mrpc_dir(tmp_path / "glue", mrpc_lines)
        argv = ["--do_train", *classifier_flags(missing, out, data)]
        code, _ = run_in_process(runner, argv)
        stderr = capfd.readouterr().err
    else:
        train = tmp_path / "train.json"
        train.write_text(json.dumps(squad_slice))
        result = run_subprocess("run_squad.py", ["--do_train", *squad_flags(
            missing, out, train_file=train)])
        code, stderr = result.returncode, result.stderr
    assert code == 1, stderr[-3000:]
    assert_one_error_line(stderr, f"{runner}.py", (
        r"error: --output_dir=/proc/review_out: cannot create it in /proc "
        r"\(No such file or directory\)$"))
    assert not Path(out).exists()


def test_output_dir_under_a_file_is_named(tmp_path):
    from adapter_bert.command_line.flag_checks import FlagError, check_writable_dir
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(FlagError, match=r"^--output_dir=.*a_file/run: cannot create it, "
                                        r".*a_file is a file$"):
        check_writable_dir("output_dir", str(blocker / "run"))
    check_writable_dir("output_dir", str(tmp_path / "new" / "deeper"))  # creatable: fine
    check_writable_dir("output_dir", f"ram://{tmp_path.name}/run")  # a store that answers
    with pytest.raises(FlagError, match=r"^--output_dir=gs://bucket/run: cannot access it"):
        check_writable_dir("output_dir", "gs://bucket/run")  # no network here: one line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # the probe is gone


# ------------------------------------------------------------------ an unreachable gs:// store

BUCKET = "gs://adapter-bert-offline-test"
STORE_REASON = (r": cannot access it \(.+\); check the network and the credentials \(gcloud "
                r"auth application-default login\)$")


@pytest.mark.parametrize("flag", ["data_dir", "init_checkpoint", "output_dir", "vocab_file"])
def test_unreachable_gs_path_is_named_with_its_flag(flag, backbone, mrpc_lines, tmp_path,
                                                    monkeypatch, capfd):
    """No network (tests/remote_utils.py): the flag check names the flag and the path."""
    from tests.remote_utils import UNREACHABLE_GS_ENV
    for name, value in UNREACHABLE_GS_ENV.items():
        monkeypatch.setenv(name, value)
    data = write_mrpc_dir(tmp_path, mrpc_lines)
    out = tmp_path / "out"
    before = fill_output_dir(out)
    remote = f"{BUCKET}/{flag}"
    overrides = {flag: remote}
    capfd.readouterr()
    code, _ = run_in_process("run_classifier", ["--do_train", "--do_eval", *classifier_flags(
        backbone, overrides.pop("output_dir", out), overrides.pop("data_dir", data),
        **overrides)])
    assert code == 1
    assert_one_error_line(capfd.readouterr().err, "run_classifier.py",
                          rf"error: --{flag}={re.escape(remote)}" + STORE_REASON)
    assert snapshot(out) == before


def test_unreachable_gs_squad_file_is_named_with_its_flag(backbone, tmp_path):
    from tests.remote_utils import UNREACHABLE_GS_ENV
    out = tmp_path / "out"
    before = fill_output_dir(out)
    remote = f"{BUCKET}/squad/train-v1.1.json"
    result = run_subprocess("run_squad.py", ["--do_train", *squad_flags(
        backbone, out, train_file=remote)], env=UNREACHABLE_GS_ENV)
    assert result.returncode == 1, result.stderr[-3000:]
    assert_one_error_line(result.stderr, "run_squad.py",
                          rf"error: --train_file={re.escape(remote)}" + STORE_REASON)
    assert snapshot(out) == before
