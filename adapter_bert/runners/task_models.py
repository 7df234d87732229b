"""The run's task model from its flags: the seam between the flags and `ModelRecipe`
(adapters/task_models.py). With `--load_adapter` the adapter directory, not the flags, says
which kind of model to build, so an evaluation run needs no architecture flags.
"""

from typing import Optional

from adapter_bert.adapters.files import adapter_config_of, read_adapter_config
from adapter_bert.adapters.resadapter import ResAdapterConfig
from adapter_bert.adapters.task_models import ModelRecipe
from adapter_bert.model.config import AdapterConfig, adapter_family
from adapter_bert.command_line.flag_checks import FlagError


def resadapter_config_for_run(flag_values) -> Optional[ResAdapterConfig]:
    """The run's ResAdapter: from --load_adapter's file, or from the flags (None: none).

    Raises:
        FlagError: --adapter_type contradicts the kind of adapter in --load_adapter.
    """
    if flag_values.load_adapter:
        stored = read_adapter_config(flag_values.load_adapter).get("resadapter")
        if flag_values.was_set("adapter_type") and \
                (flag_values.adapter_type == "resadapter") != bool(stored):
            raise FlagError(f"--load_adapter={flag_values.load_adapter} holds "
                            f"{'a ResAdapter' if stored else 'no ResAdapter'}, but "
                            f"--adapter_type={flag_values.adapter_type}")
        return ResAdapterConfig.from_dict(stored) if stored else None
    if flag_values.adapter_type != "resadapter":
        return None
    return ResAdapterConfig(size=flag_values.adapter_size, variant=flag_values.resadapter_variant,
                            cell=flag_values.resadapter_cell,
                            activation=flag_values.adapter_activation,
                            pooling=flag_values.resadapter_pooling)


def adapter_config_for_run(flag_values) -> Optional[AdapterConfig]:
    """The adapters the run's model gets: from --load_adapter's file, or from the flags.

    Only `--tuning_mode=adapter` inserts adapters (None for a ResAdapter, a side network):
    `--adapter_type` picks a registered family, its options come from the flags named after
    them (`--lora_alpha`, ...), and `--adapter_positions` applies only when given.
    """
    if flag_values.load_adapter:
        return adapter_config_of(flag_values.load_adapter)
    adapter_type = flag_values.adapter_type
    if flag_values.tuning_mode != "adapter" or adapter_type == "resadapter":
        return None
    positions = flag_values.adapter_positions
    if adapter_type != "houlsby" and not flag_values.was_set("adapter_positions"):
        positions = None
    options = {name: flag_values[name] for name in adapter_family(adapter_type).options}
    return AdapterConfig(size=flag_values.adapter_size, activation=flag_values.adapter_activation,
                         init_scale=flag_values.adapter_init_scale, positions=positions,
                         leave_out=[int(i) for i in flag_values.adapter_leave_out],
                         adapter_type=adapter_type, **options)


def recipe_from_flags(flag_values, head: str, num_labels: Optional[int] = None,
                      train_pooler: str = "false", task: str = "task") -> ModelRecipe:
    """The run's recipe. Raises FlagError when --adapter_type contradicts --load_adapter's
    file."""
    resadapter_config = resadapter_config_for_run(flag_values)
    return ModelRecipe(head, num_labels,
                       None if resadapter_config else adapter_config_for_run(flag_values),
                       resadapter_config, task, flag_values.tuning_mode,
                       flag_values.top_k_layers,
                       "false" if resadapter_config else train_pooler)
