"""Model configurations: `BertConfig` (Google and Hugging Face formats), `AdapterConfig`,
and the registry of adapter families that `AdapterConfig` is validated against.

Both configs are plain dataclasses so they serialise to JSON, compare by value and can
be written into adapter files to describe the backbone an adapter fits.
"""

import dataclasses
import json
import math
from typing import Any, Dict, Optional, Sequence, Tuple

from adapter_bert import io_utils
from adapter_bert.model.activations import canonical_activation
from adapter_bert.model.families import (ADAPTER_INIT_SCALE, ADAPTER_POSITIONS, COMMON_FIELDS,
                                         AdapterFamily, parse_option)
from adapter_bert.errors import UserError

# Fields of Google's `bert_config.json` (google-research/bert `BertConfig`).
_GOOGLE_REQUIRED = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "intermediate_size", "hidden_act", "hidden_dropout_prob",
    "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
    "initializer_range",
)

# Hugging Face `config.json` keys that describe book-keeping or generation options,
# not the encoder's architecture: safe to ignore for a BERT encoder.
_HF_IGNORED = frozenset({
    "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype",
    "dtype", "gradient_checkpointing", "use_cache", "pad_token_id", "bos_token_id",
    "eos_token_id", "sep_token_id", "classifier_dropout", "id2label", "label2id",
    "num_labels", "problem_type", "output_attentions", "output_hidden_states",
    "return_dict", "torchscript", "tie_word_embeddings", "chunk_size_feed_forward",
    "tokenizer_class", "prefix", "task_specific_params", "finetuning_task", "directionality",
    "pooler_fc_size", "pooler_num_attention_heads", "pooler_num_fc_layers",
    "pooler_size_per_head", "pooler_type", "layer_norm_eps", "position_embedding_type",
    "is_decoder", "add_cross_attention", "is_encoder_decoder", "cross_attention_hidden_size",
    "pruned_heads", "tie_encoder_decoder", "use_bfloat16", "decoder_start_token_id",
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams",
    "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p",
    "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
    "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens", "tf_legacy_loss",
})


class ConfigError(UserError):
    """A configuration file or value is invalid; the message names the file and field."""


@dataclasses.dataclass
class BertConfig:
    """Shape and hyper-parameters of a BERT encoder.

    `hidden_act` is stored in canonical form (`gelu_tanh`, `gelu_erf`, `relu`, ...):
    Google's checkpoints were trained with the tanh approximation of GELU under the
    name "gelu", while Hugging Face's "gelu" is the exact erf form, so the name alone
    is ambiguous and is resolved when the file is read.

    Examples:
        >>> cfg = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2,
        ...                  num_attention_heads=2, intermediate_size=32)
        >>> cfg.head_size
        8
    """

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu_tanh"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12

    def __post_init__(self):
        check_types({field.name: getattr(self, field.name) for field in dataclasses.fields(self)},
                    {field.name: field.type for field in dataclasses.fields(self)})
        self.hidden_act = canonical_activation(self.hidden_act)
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size ({self.hidden_size}) must be a multiple of "
                f"num_attention_heads ({self.num_attention_heads})")
        check_positive(self, ("vocab_size", "hidden_size", "num_hidden_layers",
                              "num_attention_heads", "intermediate_size",
                              "max_position_embeddings", "type_vocab_size"))

    @property
    def head_size(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict:
        """Returns the fields as a plain dict (canonical activation names)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "BertConfig":
        """Builds a config from `to_dict()` output."""
        return cls(**values)

    def to_google_json(self) -> str:
        """Serialises in Google's `bert_config.json` layout."""
        values = {k: getattr(self, k) for k in _GOOGLE_REQUIRED}
        values["hidden_act"] = {"gelu_tanh": "gelu"}.get(self.hidden_act, self.hidden_act)
        return json.dumps(values, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json_file(cls, path: str) -> "BertConfig":
        """Reads a Google `bert_config.json` or a Hugging Face `config.json` (told apart by
        `model_type`/`layer_norm_eps`). Raises ConfigError for a missing or non-JSON file, a
        missing or unknown field, or a model that is not a BERT encoder.
        """
        values = _read_json_object(path)
        if "model_type" in values or "layer_norm_eps" in values or "architectures" in values:
            return cls._from_hf_values(values, path)
        return cls._from_google_values(values, path)

    @classmethod
    def _from_google_values(cls, values: dict, path: str) -> "BertConfig":
        _check_fields(values, path, required=_GOOGLE_REQUIRED, ignored=frozenset())
        kwargs = _typed_fields(cls, values, path)
        # Google's modeling.py implements "gelu" with the tanh approximation.
        kwargs["hidden_act"] = {"gelu": "gelu_tanh"}.get(values["hidden_act"], values["hidden_act"])
        return _construct(cls, kwargs, path)

    @classmethod
    def _from_hf_values(cls, values: dict, path: str) -> "BertConfig":
        model_type = values.get("model_type", "bert")
        if model_type != "bert":
            raise ConfigError(f"{path}: field 'model_type' is {model_type!r}; only 'bert' is supported")
        for field, expected in (("position_embedding_type", "absolute"), ("is_decoder", False),
                                ("add_cross_attention", False)):
            if field in values and values[field] != expected:
                raise ConfigError(f"{path}: field {field!r} is {values[field]!r}; "
                                  f"only {expected!r} is supported")
        _check_fields(values, path, required=_GOOGLE_REQUIRED, ignored=_HF_IGNORED)
        kwargs = _typed_fields(cls, values, path)
        # In transformers, "gelu" is the exact (erf) GELU; "gelu_new" the tanh form.
        kwargs["hidden_act"] = {"gelu": "gelu_erf"}.get(values["hidden_act"], values["hidden_act"])
        kwargs["layer_norm_eps"] = values.get("layer_norm_eps", 1e-12)
        return _construct(cls, kwargs, path)


# ------------------------------------------------------------------ adapter families
# The registry every adapter family is read from (see model/families.py): config
# validation here, the encoder's and the named adapters' slots, the runners'
# --adapter_type choices and the adapter files. Name -> family, in registration order.
_FAMILIES: Dict[str, AdapterFamily] = {}
_BUILT_IN: Tuple[str, ...] = ()


def _registry() -> Dict[str, AdapterFamily]:
    """The registered families, the built-in ones first (registered on first use)."""
    global _BUILT_IN
    if not _BUILT_IN:
        # The built-in families are declared beside their layers (model/adapter_layers.py);
        # loading them on first use keeps `import adapter_bert.model.config` free of
        # TensorFlow. That module imports nothing of this one, so this makes no cycle.
        from adapter_bert.model.adapter_layers import BUILT_IN_FAMILIES
        for family in BUILT_IN_FAMILIES:
            _FAMILIES[family.name] = family
        _BUILT_IN = tuple(family.name for family in BUILT_IN_FAMILIES)
    return _FAMILIES


def register_adapter_family(family: AdapterFamily, replace: bool = False) -> AdapterFamily:
    """Adds an adapter family, so that `AdapterConfig(adapter_type=family.name)` builds it.

    Register it in every process that builds its configs or reads its files (Keras loading
    also needs the layer class registered). `replace=True` replaces a user family of the
    same name (a notebook cell run again). Returns `family`; raises ValueError for a taken
    or reserved name or an option name another family has.
    """
    if not isinstance(family, AdapterFamily):
        raise UserError(f"register_adapter_family takes an AdapterFamily, got {family!r}")
    registry = _registry()
    if family.name in _BUILT_IN or family.name == "resadapter":
        raise UserError(f"adapter family name {family.name!r} is built in")
    if family.name in registry and not replace:
        raise UserError(f"an adapter family named {family.name!r} is already registered "
                        f"(replace=True replaces it)")
    taken = sorted(key for key in family.options if hasattr(AdapterConfig, key))
    if taken:
        raise UserError(f"adapter family {family.name!r}: option name(s) {taken} are "
                        f"AdapterConfig attributes")
    for other in registry.values():
        shared = sorted(set(other.options) & set(family.options))
        if other.name != family.name and shared:
            raise UserError(f"adapter family {family.name!r}: option(s) {shared} belong to "
                            f"family {other.name!r}; prefix options with the family's name")
    registry[family.name] = family
    return family


def unregister_adapter_family(name: str) -> None:
    """Removes a family added by `register_adapter_family`.

    Raises:
        ValueError: a built-in family.
        KeyError: no family of that name.
    """
    registry = _registry()
    if name in _BUILT_IN:
        raise UserError(f"adapter family {name!r} is built in and stays registered")
    if name not in registry:
        raise KeyError(f"no adapter family named {name!r}")
    del registry[name]


def adapter_families() -> Tuple[AdapterFamily, ...]:
    """Every registered family, the built-in ones first (houlsby, pfeiffer, parallel, lora)."""
    return tuple(_registry().values())


def adapter_family(name: str) -> AdapterFamily:
    """The family registered as `name`.

    Raises:
        ConfigError: no such family; the message lists the registered ones.
    """
    registry = _registry()
    if name not in registry:
        raise ConfigError(f"adapter_type must be one of {tuple(registry)}, got {name!r}")
    return registry[name]


@dataclasses.dataclass(init=False)
class AdapterConfig:
    """Adapters of one family: which family, where they go, how they start.

    Built-in families (`adapter_type`): "houlsby" (a bottleneck with its own skip after both
    output projections), "pfeiffer" (one per layer at the feed-forward output,
    `LN(h + B(LN(h + r)) + r)`), "parallel" (`LN(h + s * B(r) + r)`, option
    `parallel_scaling`, default 4) and "lora" (`scale * dropout(x) A B` on frozen
    projections; options `lora_alpha` (None: the rank), `lora_targets` (default query and
    value), `lora_dropout`). A family's own options are keyword arguments and attributes;
    `options` holds them all; another family's are refused.

    Fields: `size` (bottleneck width or LoRA rank); `activation` ("gelu" is the tanh
    approximation of adapter-bert); `init_scale` (stddev of the Houlsby/Pfeiffer truncated
    normal, `ADAPTER_INIT_SCALE`; Google's is `GOOGLE_ADAPTER_INIT_SCALE`; parallel and LoRA
    start exactly at the backbone); `positions` ("both", "attention", "ffn"; None: the
    family's place); `leave_out` (layers without adapters). Raises ConfigError for an
    unknown family or field, a value out of range or a position the family does not support.

        >>> AdapterConfig(size=8, leave_out=[0]).layer_positions(1)
        ('attention', 'ffn')
        >>> AdapterConfig(size=8, adapter_type="lora", lora_alpha=16).lora_targets
        ('query', 'value')
    """

    size: int = 64
    activation: str = "gelu"
    init_scale: float = ADAPTER_INIT_SCALE
    positions: Optional[str] = None
    leave_out: Tuple[int, ...] = ()
    adapter_type: str = "houlsby"
    options: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def __init__(self, size: int = 64, activation: str = "gelu",
                 init_scale: float = ADAPTER_INIT_SCALE, positions: Optional[str] = None,
                 leave_out: Sequence[int] = (), adapter_type: str = "houlsby",
                 options: Optional[Dict[str, Any]] = None, **more_options):
        self.size, self.activation, self.init_scale = size, activation, init_scale
        self.positions, self.leave_out, self.adapter_type = positions, leave_out, adapter_type
        self.options = {}
        self._validate(dict(options or {}, **more_options))

    def _validate(self, given: Dict[str, Any]) -> None:
        check_types({"size": self.size, "activation": self.activation,
                     "init_scale": self.init_scale, "adapter_type": self.adapter_type},
                    {"size": int, "activation": str, "init_scale": float, "adapter_type": str})
        if self.positions is not None:
            check_types({"positions": self.positions}, {"positions": str})
        if not isinstance(self.leave_out, (list, tuple)) or not all(
                _is_int(i) for i in self.leave_out):
            raise ConfigError(f"leave_out must be a list of layer indices (integers), got "
                              f"{self.leave_out!r}")
        family = adapter_family(self.adapter_type)
        check_positive(self, ("size",), "adapter ")
        self.size = int(self.size)
        if not float(self.init_scale) >= 0:
            raise ConfigError(f"adapter init_scale must be >= 0, got {self.init_scale}")
        if self.positions is None:
            self.positions = family.default_positions
        if self.positions not in ADAPTER_POSITIONS:
            raise ConfigError(f"adapter positions must be one of {ADAPTER_POSITIONS}, "
                              f"got {self.positions!r}")
        if self.positions not in family.positions:
            raise ConfigError(f"{self.adapter_type} adapters go at positions "
                              f"{family.positions}, got {self.positions!r}")
        self._check_foreign_options(family, given)
        for key, option in family.options.items():
            try:
                self.options[key] = parse_option(key, option, given.get(key, option.default))
            except ValueError as e:
                raise ConfigError(str(e)) from None
        canonical_activation(self.activation)  # validates the name
        self.leave_out = tuple(sorted(int(i) for i in self.leave_out))

    def _check_foreign_options(self, family: AdapterFamily, given: Dict[str, Any]) -> None:
        owners = {key: other for other in adapter_families() for key in other.options}
        unknown = sorted(key for key in given if key not in family.options and key not in owners)
        if unknown:
            raise ConfigError(
                f"unknown adapter config field(s): {unknown}; adapter_type "
                f"{self.adapter_type!r} has {', '.join(COMMON_FIELDS + tuple(family.options))}")
        for key in given:
            if key not in family.options:
                raise ConfigError(f"{key} applies to adapter_type {owners[key].name!r}, not "
                                  f"{self.adapter_type!r}")

    def __getattr__(self, name):
        # Only reached for names that are not attributes: the family's options.
        options = self.__dict__.get("options")
        if options is not None and name in options:
            return options[name]
        raise AttributeError(f"AdapterConfig of adapter_type "
                             f"{self.__dict__.get('adapter_type')!r} has no field {name!r}")

    @property
    def family(self) -> AdapterFamily:
        """The registered `AdapterFamily` of `adapter_type`."""
        return adapter_family(self.adapter_type)

    @property
    def lora_scale(self) -> float:
        """LoRA's `alpha / r` (1 when `lora_alpha` is None); LoRA configs only."""
        alpha = self.size if self.lora_alpha is None else self.lora_alpha
        return float(alpha) / int(self.size)

    def layer_positions(self, layer_index: int) -> Tuple[str, ...]:
        """The adapter slots ("attention", "ffn") filled in transformer layer `layer_index`.

        For a "projections" family (LoRA) any position means the layer's projections
        named by the family (`lora_targets`).
        """
        if layer_index in self.leave_out:
            return ()
        return {"both": ("attention", "ffn"), "attention": ("attention",),
                "ffn": ("ffn",)}[self.positions]

    def validate_for(self, bert_config: BertConfig) -> None:
        """Raises ConfigError if `leave_out` names layers the backbone does not have."""
        bad = [i for i in self.leave_out if not 0 <= i < bert_config.num_hidden_layers]
        if bad:
            raise ConfigError(f"adapter leave_out names layers {bad}, but the backbone has "
                              f"layers 0..{bert_config.num_hidden_layers - 1}")

    def param_count(self, bert_config: BertConfig) -> int:
        """Adapter weights these adapters add to a backbone of `bert_config`'s shape.

        Sums the family's `param_count` over the slots (or projections) filled.
        """
        family = self.family
        h, i = bert_config.hidden_size, bert_config.intermediate_size
        widths = {"query": (h, h), "key": (h, h), "value": (h, h), "attention_output": (h, h),
                  "intermediate": (h, i), "output": (i, h)}
        total = 0
        for index in range(bert_config.num_hidden_layers):
            positions = self.layer_positions(index)
            if family.slot == "output":
                total += len(positions) * family.param_count(self, h, h)
            elif positions:
                total += sum(family.param_count(self, *widths[name])
                             for name in family.projections(self))
        return total

    def to_dict(self) -> dict:
        """Returns the common fields and the family's options as a JSON-ready dict."""
        values = {name: getattr(self, name) for name in COMMON_FIELDS}
        values["leave_out"] = list(self.leave_out)
        values.update({key: list(value) if isinstance(value, tuple) else value
                       for key, value in self.options.items()})
        return values

    @classmethod
    def from_dict(cls, values: dict) -> "AdapterConfig":
        """Builds a config from `to_dict()` output; unknown keys are an error.

        A dict without `adapter_type` describes Houlsby adapters (the default family).
        """
        return cls(**values)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string"}


def check_positive(config, names: Sequence[str], prefix: str = "") -> None:
    """ConfigError naming the first of `config`'s fields `names` that is not a positive
    integer (`prefix` leads the field's name in the message)."""
    for name in names:
        if int(getattr(config, name)) <= 0:
            raise ConfigError(f"{prefix}{name} must be a positive integer, "
                              f"got {getattr(config, name)}")


def check_types(values: Dict[str, Any], types: Dict[str, Any]) -> None:
    """Checks that each value has its field's type: int (not a bool), float (an int or a
    float, finite) or str; other annotations are not checked.

    Raises:
        ConfigError: naming the key, the expected type and the value found, e.g.
            `hidden_size must be an integer, got '384' (str)`.
    """
    for key, value in values.items():
        kind = types.get(key)
        if kind in ("int", int):
            good = _is_int(value)
        elif kind in ("float", float):
            good = (_is_int(value) or isinstance(value, float)) and math.isfinite(value)
        elif kind in ("str", str):
            good = isinstance(value, str)
        else:
            continue
        if not good:
            expected = _TYPE_NAMES[{"int": int, "float": float, "str": str}.get(kind, kind)]
            if kind in ("float", float):
                expected = "a finite number"
            raise ConfigError(f"{key} must be {expected}, got {value!r} "
                              f"({type(value).__name__})")


def _read_json_object(path: str) -> dict:
    if not io_utils.isfile(path):
        raise ConfigError(f"{path}: config file not found")
    values = io_utils.read_json_object(path, ConfigError)
    return values


def _check_fields(values: dict, path: str, required: Sequence[str], ignored: frozenset) -> None:
    missing = [k for k in required if k not in values]
    if missing:
        raise ConfigError(f"{path}: missing field {missing[0]!r}"
                          + (f" (and {missing[1:]})" if len(missing) > 1 else ""))
    unknown = sorted(k for k in values if k not in required and k not in ignored)
    if unknown:
        raise ConfigError(f"{path}: unknown field {unknown[0]!r}"
                          + (f" (and {unknown[1:]})" if len(unknown) > 1 else "")
                          + "; expected the fields of a BERT config: " + ", ".join(required))


def _typed_fields(cls, values: dict, path: str) -> dict:
    """The Google fields of `values`, each checked to have its BertConfig type."""
    kwargs = {k: values[k] for k in _GOOGLE_REQUIRED}
    try:
        check_types(kwargs, {field.name: field.type for field in dataclasses.fields(cls)})
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    return kwargs


def _construct(cls, kwargs: dict, path: str):
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{path}: invalid value ({e})") from None
