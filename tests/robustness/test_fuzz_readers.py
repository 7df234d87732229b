"""Property-based tests of every reader of a user's file (GLUE TSVs, your own CSV, TSV
and JSON Lines files, SQuAD JSON, bert_config.json / config.json, adapter_config.json,
vocab.txt, run_flags.json): whatever the bytes, a reader
succeeds or raises its own one-line error naming the file, never anything else.

Each reader starts from a valid file written here and gets it damaged by `hypothesis`:
truncated, bytes flipped or inserted, emptied, a line or a huge field added, or (for
JSON files) one value swapped for a value of another type. The runs are derandomised
(the same examples on every machine) and bounded (`EXAMPLES` per reader), so CI time
stays fixed; an example that once failed is kept with `@example`.
"""

import json
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from adapter_bert.adapters.files import AdapterFileError, adapter_config_of
from adapter_bert.data.glue import GlueDataError, get_processor
from adapter_bert.data.squad import SquadDataError, read_squad_examples
from adapter_bert.data.text_files import DataFileError
from adapter_bert.data.text_task import Columns, TextTask
from adapter_bert.data.tokenization import TokenizerError, load_tokenizer
from adapter_bert.model.config import BertConfig, ConfigError
from adapter_bert.command_line.flag_checks import FlagError
from adapter_bert.runs.run_record import check_reused_output_dir

EXAMPLES = 150
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# ------------------------------------------------------------------ damage


@st.composite
def damaged(draw, data: bytes) -> bytes:
    """`data` with one kind of damage done to it."""
    kind = draw(st.sampled_from(["truncate", "flip", "insert", "empty", "line", "huge"]))
    if kind == "truncate":
        return data[:draw(st.integers(0, len(data)))]
    if kind == "flip":
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 8))):
            at = draw(st.integers(0, len(out) - 1))
            out[at] = draw(st.integers(0, 255))
        return bytes(out)
    if kind == "insert":
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.binary(min_size=1, max_size=40)) + data[at:]
    if kind == "empty":
        return draw(st.sampled_from([b"", b"\n", b"\xef\xbb\xbf", b"\r\n\r\n", b"\t"]))
    if kind == "line":
        line = draw(st.text(alphabet=st.sampled_from("ab\t\r\"'\\ 1\u00e9\u2028"), max_size=30))
        return data + line.encode("utf-8") + b"\n"
    at = draw(st.integers(0, len(data)))
    return data[:at] + b"x" * draw(st.sampled_from([200_000, 1_100_000])) + data[at:]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=6)


@st.composite
def retyped(draw, value):
    """`value` (parsed JSON) with one value somewhere in it replaced by another."""
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        return {**value, key: draw(retyped(value[key]))}
    if isinstance(value, list) and value and draw(st.booleans()):
        at = draw(st.integers(0, len(value) - 1))
        return value[:at] + [draw(retyped(value[at]))] + value[at + 1:]
    return draw(JSON_VALUES)


def json_damage(valid: dict):
    text = json.dumps(valid).encode("utf-8")
    return damaged(text) | retyped(valid).map(lambda v: json.dumps(v).encode("utf-8"))


def assert_one_line_naming(error: BaseException, path) -> None:
    message = str(error)
    assert "\n" not in message.strip(), message
    assert str(path) in message or os.path.dirname(str(path)) in message, message


# ------------------------------------------------------------------ readers


MRPC_TRAIN = ("\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
              "1\t1\t2\tThe cat sat.\tA cat was sitting.\n"
              "0\t3\t4\tIt rained.\tThe sun shone all day.\n").encode("utf-8")


@FUZZ
@given(data=damaged(MRPC_TRAIN))
@example(data=b"\xef\xbb\xbf")  # a BOM alone: an IndexError once
@example(data=MRPC_TRAIN.replace(b"It rained.", b"It\rrained."))  # a lone CR: csv.Error
@example(data=MRPC_TRAIN + b"1\t5\t6\t" + b"x" * 200_000 + b"\tshort\n")  # csv's field limit
def test_glue_tsv(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("mrpc")
    (folder / "train.tsv").write_bytes(data)
    try:
        examples = get_processor("MRPC").get_examples(str(folder), "train")
    except GlueDataError as e:
        assert_one_line_naming(e, folder / "train.tsv")
        return
    assert all(example.label in ("0", "1") for example in examples)


OWN_FILES = {
    "csv": 'id,text,label\n1,"a comma, inside",pos\n2,"a ""quote""\nand a newline",neg\n'
           '3,plain,pos\n'.encode(),
    "tsv": b'label\ttext\npos\tHe said "hi\nneg\tplain\n',
    "jsonl": b'{"text": "a", "label": 1}\n{"text": "b", "label": "x"}\n',
}


@FUZZ
@example(kind="jsonl", data=None, columns=Columns(text=1, label=0))  # once named no file
@given(kind=st.sampled_from(sorted(OWN_FILES)), data=st.data(),
       columns=st.sampled_from([Columns(), Columns(text=1, label=0), Columns(label="label")]))
def test_own_data_files(tmp_path_factory, kind, data, columns):
    damaged_bytes = data.draw(damaged(OWN_FILES[kind])) if data else OWN_FILES[kind]
    path = tmp_path_factory.mktemp("own") / f"train.{kind}"
    path.write_bytes(damaged_bytes)
    task = TextTask("t", {"train": str(path)}, columns)
    try:
        examples = task.get_examples(None, "train")
    except DataFileError as e:
        assert_one_line_naming(e, path)
        return
    assert all(isinstance(e.text_a, str) and e.text_a.strip() for e in examples)
    assert all(e.label in task.get_labels() for e in examples)


SQUAD = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{
    "context": "The cat sat on the mat.",
    "qas": [{"id": "q1", "question": "Where did the cat sit?",
             "answers": [{"text": "on the mat", "answer_start": 12}]},
            {"id": "q2", "question": "Who sat?", "answers": [{"text": "The cat",
                                                             "answer_start": 0}]}]}]}]}


@FUZZ
@given(data=json_damage(SQUAD), training=st.booleans(), version_2=st.booleans())
@example(data=json.dumps({"data": [{"paragraphs": [{"context": "c", "qas": [
    {"id": "q", "question": "a?", "answers": []}, {"id": "q", "question": "b?", "answers": []}]}]}]}
).encode(), training=False, version_2=False)  # one id twice
@example(data=b"[" * 100_000, training=False, version_2=False)  # nested past the recursion limit
def test_squad_json(tmp_path_factory, data, training, version_2):
    path = tmp_path_factory.mktemp("squad") / "train.json"
    path.write_bytes(data)
    try:
        read_squad_examples(str(path), is_training=training, version_2_with_negative=version_2)
    except SquadDataError as e:
        assert_one_line_naming(e, path)


BERT_CONFIG = {"vocab_size": 30, "hidden_size": 16, "num_hidden_layers": 2,
               "num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
               "max_position_embeddings": 64, "type_vocab_size": 2, "initializer_range": 0.02}
HF_CONFIG = dict(BERT_CONFIG, model_type="bert", layer_norm_eps=1e-12,
                 architectures=["BertModel"])


@FUZZ
@given(data=json_damage(BERT_CONFIG) | json_damage(HF_CONFIG))
@example(data=json.dumps(dict(BERT_CONFIG, hidden_size="384")).encode())  # a string for a number
@example(data=json.dumps(dict(HF_CONFIG, hidden_act=[])).encode())  # a TypeError once
def test_bert_config(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("config") / "bert_config.json"
    path.write_bytes(data)
    try:
        config = BertConfig.from_json_file(str(path))
    except ConfigError as e:
        assert_one_line_naming(e, path)
        return
    assert config.hidden_size % config.num_attention_heads == 0


ADAPTER_DESCRIPTION = {
    "format_version": 2, "task": "mrpc", "labels": ["0", "1"], "head": "ClassifierHead",
    "tuning_mode": "adapter",
    "adapter_config": {"size": 8, "activation": "gelu", "init_scale": 0.001,
                       "positions": "both", "leave_out": [], "adapter_type": "houlsby"},
    "resadapter": None, "backbone": BERT_CONFIG, "backbone_fingerprint": "ab",
    "weights_sha256": "cd"}


@FUZZ
@given(data=json_damage(ADAPTER_DESCRIPTION))
@example(data=b"[]")  # a list at the top level
@example(data=json.dumps(dict(ADAPTER_DESCRIPTION, adapter_config={"size": "x"})).encode())
def test_adapter_config(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("adapter")
    (folder / "adapter_config.json").write_bytes(data)
    try:
        adapter_config_of(str(folder))
    except AdapterFileError as e:
        assert_one_line_naming(e, folder)


VOCAB = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "##s"]).encode()


@FUZZ
@given(data=damaged(VOCAB))
def test_vocab_file(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_bytes(data)
    try:
        tokenizer = load_tokenizer(str(path))
    except TokenizerError as e:
        assert_one_line_naming(e, path)
        return
    tokenizer.tokenize("The cats sat.")


def _rerun(output_dir):
    """The configuration of a training rerun, which compares itself with run_flags.json."""
    from adapter_bert.command_line import run_config
    return run_config.parse("classifier", [
        "--do_train", f"--output_dir={output_dir}", "--learning_rate=1e-3", "--adapter_size=8",
        "--adapter_leave_out=0", "--task_name=MRPC"])


RUN_FLAGS = {"flags": {"runner": "classifier", "learning_rate": 1e-3, "adapter_size": 8,
                       "adapter_leave_out": ["0"], "task_name": "MRPC"}}


@FUZZ
@given(data=json_damage(RUN_FLAGS))
@example(data=json.dumps({"flags": ["a"]}).encode())  # a list where the record was
@example(data=json.dumps({"flags": {"adapter_leave_out": [1, 2]}}).encode())  # not strings
def test_run_flags_record(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("run")
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    (folder / "run_flags.json").write_bytes(data)
    try:
        check_reused_output_dir(_rerun(str(folder)), "classifier")
    except FlagError as e:
        assert_one_line_naming(e, folder)


@pytest.mark.parametrize("reader", [test_glue_tsv, test_own_data_files, test_squad_json, test_bert_config,
                                    test_adapter_config, test_vocab_file, test_run_flags_record])
def test_the_fuzzing_is_bounded(reader):
    """Every reader's property runs under the bounded, derandomised settings."""
    assert reader.hypothesis.inner_test is not None
    assert FUZZ.max_examples == EXAMPLES and FUZZ.derandomize
