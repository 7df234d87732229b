"""What an adapter family declares: `AdapterFamily`, its options, and where it may go.

A family is one registration (`model.config.register_adapter_family`): name, layer class,
slot, options with defaults, parameter count. Slots: "output" (a layer in an output block,
`layer(hidden, residual, layer_norm)`: Houlsby, Pfeiffer, parallel) and "projections"
(updates of the frozen projections in `PROJECTIONS`, `layer(inputs)` returning
`{projection name: update}`: LoRA). Declarations only, no TensorFlow.
"""

import dataclasses
import math
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple
from adapter_bert.errors import UserError

ADAPTER_POSITIONS = ("both", "attention", "ffn")

# Kinds of slot a family fills (see the module docstring).
SLOT_KINDS = ("output", "projections")

# The dense projections of a transformer layer that a "projections" family can update,
# in the order the layer runs them: self-attention's query, key and value, the attention
# output projection (PEFT's `attention.output.dense`), the feed-forward up projection
# (`intermediate.dense`) and its down projection (`output.dense`).
PROJECTIONS = ("query", "key", "value", "attention_output", "intermediate", "output")

# Stddev of the initial Houlsby/Pfeiffer projection weights. google-research/adapter-bert
# uses 1e-3; the default is 1e-2, still near the identity (the paper finds accuracy flat
# for stddevs up to 1e-2), because Adam moves every weight by about the learning rate per
# step whatever its size: at adapter rates (1e-3 and up) weights of size 1e-3 are
# replaced by gradient noise in the first steps, weights of size 1e-2 are only nudged
# (measurements: docs/results.md, "Learning rates, seeds and the optimizer").
# --adapter_init_scale=1e-3 restores Google's.
ADAPTER_INIT_SCALE = 1e-2
GOOGLE_ADAPTER_INIT_SCALE = 1e-3

# The `AdapterConfig` fields every family has; family options may not reuse these names.
COMMON_FIELDS = ("size", "activation", "init_scale", "positions", "leave_out", "adapter_type")


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The values a numeric setting takes: finite, within [low, high] (or the open ends),
    an integer for integer settings. The ceilings keep a value from overflowing a step
    count or a tensor shape far later; they lie well above any value that makes sense."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False

    def admits(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def describe(self, integer: bool) -> str:
        if math.isinf(self.high):
            return f"a finite number {'>' if self.low_open else '>='} {self.low:g}"
        if integer:
            return f"an integer in [{int(self.low)}, {int(self.high)}]"
        return (f"a finite number in {'(' if self.low_open else '['}{self.low:g}, "
                f"{self.high:g}{')' if self.high_open else ']'}")


class AdapterOption(NamedTuple):
    """One config option of a family: its default, how a given value is checked, and what
    its command-line setting (`--<name>`, made from this declaration) says.

    Attributes:
        default: the value when the config does not give one (JSON-compatible).
        parse: maps a given value (from Python or from an adapter file's JSON) to the
            stored one, raising ValueError with a message naming the option when it is
            bad; None stores the value as given.
        help: the flag's help line.
        kind: the flag's type, "float", "integer", "string" or "list" (None: that of the
            default).
        bounds: a numeric option's `Bounds`, checked with the other flags.
    """

    default: Any
    parse: Optional[Callable[[Any], Any]] = None
    help: str = ""
    kind: Optional[str] = None
    bounds: Optional[Bounds] = None


@dataclasses.dataclass(frozen=True)
class AdapterFamily:
    """The declaration of one adapter family.

    `name` is the `adapter_type`; `layer` a `model.adapter_layers.AdapterLayer` subclass
    whose `from_adapter_config(config[, projections])` builds one slot's layer;
    `param_count(config, in_width, out_width)` counts one slot's (or projection's) weights;
    `slot` is "output" or "projections"; `positions`/`default_positions` the accepted and
    default `AdapterConfig.positions`; `options` the family's own fields (name ->
    `AdapterOption` or a default; prefix them with the family's name, as files share one
    namespace); `projections(config)` the targets of a "projections" family; `description`
    one line of `--adapter_type`'s help. Raises ValueError for an inconsistent declaration.
    """

    name: str
    layer: type
    param_count: Callable[[Any, int, int], int]
    slot: str = "output"
    positions: Tuple[str, ...] = ADAPTER_POSITIONS
    default_positions: str = "both"
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    projections: Optional[Callable[[Any], Sequence[str]]] = None
    description: str = ""

    def __post_init__(self):
        if not (isinstance(self.name, str) and self.name and self.name[0].isalpha()
                and all(c.islower() or c.isdigit() or c == "_" for c in self.name)):
            raise UserError(f"adapter family name {self.name!r} must start with a letter and "
                            f"use only lowercase letters, digits and '_'")
        if self.slot not in SLOT_KINDS:
            raise UserError(f"adapter family {self.name!r}: slot must be one of {SLOT_KINDS}, "
                            f"got {self.slot!r}")
        positions = tuple(self.positions)
        if not positions or any(p not in ADAPTER_POSITIONS for p in positions):
            raise UserError(f"adapter family {self.name!r}: positions must be values of "
                            f"{ADAPTER_POSITIONS}, got {positions}")
        if self.default_positions not in positions:
            raise UserError(f"adapter family {self.name!r}: default_positions "
                            f"{self.default_positions!r} is not one of its positions {positions}")
        if (self.slot == "projections") != (self.projections is not None):
            raise UserError(f"adapter family {self.name!r}: a 'projections' family, and only "
                            f"one, says which projections it updates (projections=...)")
        if not callable(getattr(self.layer, "from_adapter_config", None)):
            raise UserError(f"adapter family {self.name!r}: its layer {self.layer!r} needs a "
                            f"from_adapter_config classmethod (subclass AdapterLayer)")
        if not callable(self.param_count):
            raise UserError(f"adapter family {self.name!r}: param_count must be callable")
        options: Dict[str, AdapterOption] = {}
        for key, option in dict(self.options).items():
            if key in COMMON_FIELDS + ("options",) or not key.isidentifier():
                raise UserError(f"adapter family {self.name!r}: option name {key!r} is a "
                                f"common field or not an identifier")
            if not isinstance(option, AdapterOption):
                option = AdapterOption(option)
            parse_option(key, option, option.default)  # the default must pass its own check
            options[key] = option
        object.__setattr__(self, "positions", positions)
        object.__setattr__(self, "options", options)


def parse_option(key: str, option: AdapterOption, value: Any) -> Any:
    """`value` as the family stores option `key` (its `parse`), or ValueError naming it."""
    if option.parse is None:
        return value
    try:
        return option.parse(value)
    except (TypeError, ValueError) as e:
        message = str(e)
        raise UserError(message if key in message else f"{key}: {message}") from None
