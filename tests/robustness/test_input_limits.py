"""Input limits and shapes: fields of any length, one id per SQuAD question, and every
config value of the wrong type named by its key and the type expected."""

import json

import pytest

from adapter_bert.data.glue import get_processor
from adapter_bert.data.squad import SquadDataError, read_squad_examples
from adapter_bert.model.config import AdapterConfig, BertConfig, ConfigError

BERT_CONFIG = {"vocab_size": 30, "hidden_size": 16, "num_hidden_layers": 2,
               "num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
               "max_position_embeddings": 64, "type_vocab_size": 2, "initializer_range": 0.02}


def test_a_megabyte_field_is_read(tmp_path):
    """Python's csv module stops at 128 KiB per field by default; a TSV field of 1 MB is
    read whole, as Google's readers and the IANA TSV format allow."""
    sentence = "word " * 220_000  # 1.1 MB
    (tmp_path / "train.tsv").write_text(
        "sentence\tlabel\n" f"{sentence}\t1\n" "short\t0\n", encoding="utf-8")
    examples = get_processor("SST-2").get_examples(str(tmp_path), "train")
    assert [len(e.text_a) for e in examples] == [len(sentence), 5]
    assert [e.label for e in examples] == ["1", "0"]


def test_a_duplicate_question_id_is_refused(tmp_path):
    path = tmp_path / "dev.json"
    qas = [{"id": "q", "question": "Who?", "answers": [{"text": "A", "answer_start": 0}]},
           {"id": "q", "question": "What?", "answers": [{"text": "A", "answer_start": 0}]}]
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": "A b.", "qas": qas}]}]}))
    for training in (True, False):
        with pytest.raises(SquadDataError) as error:
            read_squad_examples(str(path), is_training=training)
        assert str(error.value) == (
            f"{path}: data[0].paragraphs[0].qas[1]: question id 'q' is used again (first at "
            f"data[0].paragraphs[0].qas[0]); ids must be unique")


@pytest.mark.parametrize("key, value, expected", [
    ("hidden_size", "384", "hidden_size must be an integer, got '384' (str)"),
    ("num_hidden_layers", 2.0, "num_hidden_layers must be an integer, got 2.0 (float)"),
    ("vocab_size", True, "vocab_size must be an integer, got True (bool)"),
    ("hidden_dropout_prob", "0.1", "hidden_dropout_prob must be a finite number, got '0.1' "
                                   "(str)"),
    ("hidden_act", ["gelu"], "hidden_act must be a string, got ['gelu'] (list)"),
    ("initializer_range", None, "initializer_range must be a finite number, got None "
                                "(NoneType)"),
])
def test_a_config_value_of_the_wrong_type_is_named(key, value, expected, tmp_path):
    for layout in (BERT_CONFIG, dict(BERT_CONFIG, model_type="bert", layer_norm_eps=1e-12)):
        path = tmp_path / "bert_config.json"
        path.write_text(json.dumps(dict(layout, **{key: value})))
        with pytest.raises(ConfigError) as error:
            BertConfig.from_json_file(str(path))
        assert str(error.value) == f"{path}: {expected}"


@pytest.mark.parametrize("values, expected", [
    ({"size": "8"}, "size must be an integer, got '8' (str)"),
    ({"init_scale": "small"}, "init_scale must be a finite number, got 'small' (str)"),
    ({"leave_out": "0"}, "leave_out must be a list of layer indices (integers), got '0'"),
    ({"adapter_type": ["lora"]}, "adapter_type must be a string, got ['lora'] (list)"),
    ({"positions": 1}, "positions must be a string, got 1 (int)"),
])
def test_an_adapter_config_value_of_the_wrong_type_is_named(values, expected):
    with pytest.raises(ConfigError) as error:
        AdapterConfig.from_dict(values)
    assert str(error.value) == expected
