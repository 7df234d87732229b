"""export_model.py's job: trained adapters -> one SavedModel on one frozen backbone."""

from adapter_bert.command_line.flag_checks import FlagError, check_numeric_flags


def main(flag_values) -> int:
    """Checks export_model.py's flags before anything loads, then exports the adapters
    they name (`serving.multi_adapter.export_multi_adapter`) and prints where.

    Raises:
        FlagError: a missing or out-of-range flag.
    """
    from adapter_bert.data.features import check_room_for_text
    from adapter_bert.precision import apply_dtype
    from adapter_bert.serving.export import require_serving_extra
    from adapter_bert.serving.multi_adapter import export_multi_adapter

    check_numeric_flags(flag_values)
    check_room_for_text(flag_values.max_seq_length, pair=True, error=FlagError)
    for name in ("adapters", "export_dir"):
        if not flag_values[name]:
            raise FlagError(f"--{name} is required ({flag_help(name)})")
    require_serving_extra()
    apply_dtype(flag_values.dtype)
    path = export_multi_adapter(flag_values.adapters, flag_values.export_dir,
                                flag_values.init_checkpoint, flag_values.bert_config_file,
                                flag_values.vocab_file, flag_values.do_lower_case,
                                flag_values.max_seq_length, flag_values.names)
    print(f"exported: {path}", flush=True)
    return 0


def flag_help(name: str) -> str:
    """A setting's help, as the line that asks for it quotes it."""
    from adapter_bert.command_line import settings
    return settings.by_name()[name].help.rstrip(".")
