"""BertConfig (Google and Hugging Face files) and AdapterConfig."""

import json

import pytest

from adapter_bert.model.config import AdapterConfig, BertConfig, ConfigError, adapter_families
from adapter_bert.model.families import GOOGLE_ADAPTER_INIT_SCALE


def _write(tmp_path, values, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(values))
    return str(path)


# Google's bert_config.json of BERT-Mini (uncased_L-4_H-256_A-4), as published.
BERT_MINI_CONFIG = {"hidden_size": 256, "hidden_act": "gelu", "initializer_range": 0.02,
                    "vocab_size": 30522, "hidden_dropout_prob": 0.1, "num_attention_heads": 4,
                    "type_vocab_size": 2, "max_position_embeddings": 512,
                    "num_hidden_layers": 4, "intermediate_size": 1024,
                    "attention_probs_dropout_prob": 0.1}


def test_google_bert_config_reads_bert_mini_as_published(tmp_path):
    cfg = BertConfig.from_json_file(_write(tmp_path, BERT_MINI_CONFIG, "bert_config.json"))
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (256, 4, 4)
    assert cfg.intermediate_size == 1024 and cfg.vocab_size == 30522
    # Google's "gelu" is the tanh approximation; the default epsilon is BERT's 1e-12.
    assert cfg.hidden_act == "gelu_tanh" and cfg.max_position_embeddings == 512
    assert cfg.layer_norm_eps == 1e-12
    assert cfg.head_size == 64


@pytest.mark.realdata
def test_google_bert_config_reads_real_bert_mini(bert_mini_index):
    cfg = BertConfig.from_json_file(str(bert_mini_index / "bert_config.json"))
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (256, 4, 4)
    assert cfg.intermediate_size == 1024 and cfg.vocab_size == 30522
    # Google's "gelu" is the tanh approximation; the default epsilon is BERT's 1e-12.
    assert cfg.hidden_act == "gelu_tanh"
    assert cfg.layer_norm_eps == 1e-12
    assert cfg.head_size == 64


def test_hf_config_reads_minilm(minilm_dir):
    cfg = BertConfig.from_json_file(str(minilm_dir / "config.json"))
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (384, 6, 12)
    # transformers' "gelu" is the exact erf form.
    assert cfg.hidden_act == "gelu_erf"


def test_google_json_round_trip(tmp_path, tiny_config):
    path = tmp_path / "bert_config.json"
    tiny_config.hidden_act = "gelu_tanh"
    path.write_text(tiny_config.to_google_json())
    assert json.loads(path.read_text())["hidden_act"] == "gelu"
    assert BertConfig.from_json_file(str(path)) == tiny_config


def test_missing_field_names_file_and_field(tmp_path, tiny_config):
    values = json.loads(tiny_config.to_google_json())
    del values["num_attention_heads"]
    path = _write(tmp_path, values, "bert_config.json")
    with pytest.raises(ConfigError, match=r"bert_config.json: missing field 'num_attention_heads'"):
        BertConfig.from_json_file(path)


def test_unknown_field_names_file_and_field(tmp_path, tiny_config):
    values = json.loads(tiny_config.to_google_json())
    values["num_hiden_layers"] = 3
    path = _write(tmp_path, values, "bert_config.json")
    with pytest.raises(ConfigError, match=r"bert_config.json: unknown field 'num_hiden_layers'"):
        BertConfig.from_json_file(path)


def test_hf_bookkeeping_fields_are_accepted_but_architecture_changes_are_not(tmp_path, minilm_dir):
    values = json.loads((minilm_dir / "config.json").read_text())
    values["id2label"] = {"0": "a"}
    assert BertConfig.from_json_file(_write(tmp_path, values)).hidden_size == 384
    values["position_embedding_type"] = "relative_key"
    with pytest.raises(ConfigError, match="position_embedding_type"):
        BertConfig.from_json_file(_write(tmp_path, values))
    values["position_embedding_type"] = "absolute"
    values["model_type"] = "roberta"
    with pytest.raises(ConfigError, match="model_type.*roberta"):
        BertConfig.from_json_file(_write(tmp_path, values))


@pytest.mark.parametrize("content, message", [
    ("{not json", r"not valid JSON \(line 1"),
    ("[1, 2]", "expected a JSON object"),
])
def test_bad_json(tmp_path, content, message):
    path = tmp_path / "bert_config.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        BertConfig.from_json_file(str(path))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        BertConfig.from_json_file(str(tmp_path / "nope.json"))


def test_invalid_values():
    with pytest.raises(ConfigError, match="multiple of num_attention_heads"):
        BertConfig(vocab_size=10, hidden_size=10, num_attention_heads=3)
    with pytest.raises(ValueError, match="unknown activation 'gelux'"):
        BertConfig(vocab_size=10, hidden_size=8, num_attention_heads=2, hidden_act="gelux")


def test_adapter_config_defaults_follow_the_paper():
    cfg = AdapterConfig()
    assert (cfg.size, cfg.activation, cfg.positions) == (64, "gelu", "both")
    assert cfg.layer_positions(0) == ("attention", "ffn")
    # Near-identity init at the top of the paper's flat range, 10x Google's 1e-3 (which
    # --adapter_init_scale restores): see ADAPTER_INIT_SCALE.
    assert (cfg.init_scale, GOOGLE_ADAPTER_INIT_SCALE) == (1e-2, 1e-3)


def test_the_library_config_and_layers_start_from_the_settings_tables_defaults():
    from adapter_bert.command_line import settings
    from adapter_bert.model.adapter_layers import HoulsbyAdapter
    config = AdapterConfig()  # as a library user makes it; the runners start from the table
    for setting, field in (("adapter_size", "size"), ("adapter_activation", "activation"),
                           ("adapter_init_scale", "init_scale"),
                           ("adapter_type", "adapter_type")):
        assert getattr(config, field) == settings.default(setting), setting
    assert list(config.leave_out) == settings.default("adapter_leave_out")
    # Unset positions are the family's: the table's default is the Houlsby family's.
    assert config.positions == adapter_families()[0].default_positions \
        == settings.default("adapter_positions")
    assert HoulsbyAdapter().init_scale == config.init_scale


def test_adapter_config_positions_and_leave_out(tiny_config):
    cfg = AdapterConfig(size=4, positions="ffn", leave_out=[1])
    assert cfg.layer_positions(0) == ("ffn",)
    assert cfg.layer_positions(1) == ()
    assert AdapterConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match=r"leave_out names layers \[5\]"):
        AdapterConfig(leave_out=[5]).validate_for(tiny_config)


@pytest.mark.parametrize("kwargs, message", [
    ({"size": 0}, "positive integer"),
    ({"init_scale": -1}, ">= 0"),
    ({"positions": "middle"}, "positions must be one of"),
    ({"activation": "nope"}, "unknown activation"),
])
def test_adapter_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AdapterConfig(**kwargs)


def test_adapter_config_from_dict_rejects_unknown_keys():
    with pytest.raises(ConfigError, match="unknown adapter config field"):
        AdapterConfig.from_dict({"size": 8, "bottleneck": 3})
