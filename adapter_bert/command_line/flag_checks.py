"""What the flags must be, checked before anything is loaded: the error a bad value
raises (`FlagError`, one line naming the flag), the bounds of every numeric flag (rows of
`command_line.settings`), the checks of the paths flags name, and each runner's one validation
of its flags (`validate_classifier`, `validate_squad`, `validate_ablation`).

The flags themselves are defined in `command_line.flags`.
"""

from typing import Optional

from adapter_bert import io_utils
from adapter_bert.adapters.files import adapter_config_of, read_adapter_config
from adapter_bert.data.glue import canonical_task_name, how_to_get_data
from adapter_bert.errors import UserError
from adapter_bert.model.config import adapter_families
from adapter_bert.model.families import parse_option
from adapter_bert.command_line.settings import all_settings, numeric_bounds


class FlagError(UserError):
    """A flag value is invalid; the message names the flag and what was expected."""


def check_numeric_flags(values) -> None:
    """Checks every numeric flag `values` has against its setting's bounds (None: unset;
    `command_line.settings`).

    Raises:
        FlagError: the first flag out of bounds, e.g. `--num_train_epochs must be a finite
            number in (0, 1e+06], got nan`.
    """
    integers = {s.name for s in all_settings() if s.type == "integer"}
    for name, bounds in numeric_bounds().items():
        value = values[name]
        if value is None or bounds.admits(value) and (
                name not in integers or float(value).is_integer()):
            continue
        raise FlagError(f"--{name} must be {bounds.describe(name in integers)}, got {value}")


def path_is(name: str, path: str, query) -> bool:
    """`query(path)` (`io_utils.exists`, `isdir`, `isfile`), a store that cannot be reached
    (`gs://` without network or credentials) named by its flag."""
    try:
        return query(path)
    except io_utils.StorageError as e:
        raise FlagError(f"--{name}={e}") from None


def require_paths(values, names, query=io_utils.isfile, what: str = "file") -> None:
    """FlagError naming the first of the flags `names` set to a path `query` denies."""
    for name in names:
        path = values[name]
        if path and not path_is(name, path, query):
            raise FlagError(f"--{name}={path}: {what} not found")


def check_writable_dir(name: str, path: str) -> None:
    """Raises FlagError unless the folder `path` can be written (`io_utils.write_problem`):
    on a local disk (and `file://`) a temporary entry is made and removed in it or its
    nearest existing parent (permission bits do not stop root, while /proc or a read-only
    mount do); on `gs://` and `s3://` its bucket must exist; a store that does not answer
    is named with advice fitting its scheme."""
    try:
        problem = io_utils.write_problem(path)
    except io_utils.StorageError as e:
        raise FlagError(f"--{name}={e}") from None
    if problem:
        shown = io_utils.absolute(path) if io_utils.is_local(path) else path
        raise FlagError(f"--{name}={shown}: {problem}")


# The flags that say a run is on your own data rather than a GLUE task.
OWN_DATA_FILES = ("train_file", "dev_file", "test_file")


def uses_own_data(values) -> bool:
    """Whether the run reads your own files or a TFDS text set (not GLUE), or exports an
    adapter of your own data alone (`exports_adapter_alone`)."""
    return any(values[name] for name in OWN_DATA_FILES) or bool(values.tfds_name) \
        or (exports_adapter_alone(values) and not names_glue_task(values.task_name))


def exports_adapter_alone(values) -> bool:
    """Whether the run exports --load_adapter reading no data: no data flags, neither
    training, evaluating nor predicting. The adapter's record is then the task
    (`validate_classifier` makes a GLUE one, without --task_name, that task)."""
    given = ("tfds_name", *OWN_DATA_FILES, "do_train", "do_eval", "do_predict")
    return bool(values.load_adapter and values.export_dir) \
        and not any(values[name] for name in given)


def names_glue_task(name: Optional[str]) -> bool:
    """Whether `name` is a GLUE task's name (or alias)."""
    try:
        return bool(name) and bool(canonical_task_name(name))
    except UserError:
        return False


def validate_own_data(values) -> None:
    """The checks of a run on your own files or a TFDS text set.

    Raises:
        FlagError: naming the flag and what was expected.
    """
    tfds = bool(values.tfds_name)
    if tfds and values.data_source != "tfds":
        raise FlagError("--tfds_name reads a TensorFlow Datasets set: add --data_source=tfds")
    if tfds and any(values[name] for name in OWN_DATA_FILES):
        raise FlagError("--tfds_name and --train_file/--dev_file/--test_file both name the "
                        "data: pass one of them")
    if values.data_dir:
        raise FlagError("--data_dir is a GLUE task's folder; your own files are named by "
                        "--train_file, --dev_file and --test_file: drop --data_dir")
    if values.dev_file and values.dev_fraction is not None:
        raise FlagError(f"--dev_file and --dev_fraction={values.dev_fraction} both give a "
                        f"dev set: pass one of them")
    if values.dev_fraction is not None and not (values.train_file or tfds):
        raise FlagError("--dev_fraction holds out part of --train_file: it needs --train_file")
    if tfds:
        return
    needs = (("do_train", "train_file"), ("do_predict", "test_file"))
    for action, name in needs:
        if values[action] and not values[name]:
            raise FlagError(f"--{action} on your own data needs --{name}")
    if values.do_eval and not values.dev_file and values.dev_fraction is None:
        raise FlagError("--do_eval on your own data needs --dev_file (or --dev_fraction=0.1 "
                        "to hold out part of --train_file)")
    require_paths(values, OWN_DATA_FILES)


def with_recorded_task(values):
    """`values`, or where it exports --load_adapter alone without --task_name and the
    adapter was trained on a GLUE task, `values` naming that task (its pairs, its labels)."""
    if exports_adapter_alone(values) and not values.task_name:
        recorded = read_adapter_config(values.load_adapter).get("task")
        if names_glue_task(recorded):
            return values.replace(task_name=canonical_task_name(recorded))
    return values


def validate_classifier(values) -> str:
    """run_classifier.py's checks, before anything is loaded or written; returns the
    canonical task name or raises FlagError naming the flag and what was expected.
    """
    validate_common(values)
    if values.eval_every_epoch and not (values.do_train and values.do_eval):
        raise FlagError("--eval_every_epoch evaluates while training: it needs --do_train and "
                        "--do_eval")
    values = with_recorded_task(values)
    if uses_own_data(values):
        validate_own_data(values)
        validate_resadapter_flags(values)
        validate_family_flags(values)
        return values.task_name or ""
    if not values.task_name:
        raise FlagError("--task_name is required (one of CoLA, SST-2, MRPC, STS-B, QQP, MNLI, "
                        "QNLI, RTE, WNLI, AX, XNLI), or your own data with --train_file, "
                        "--dev_file, --test_file (or --data_source=tfds --tfds_name=...)")
    try:
        task = canonical_task_name(values.task_name)
    except ValueError as e:
        raise FlagError(f"--task_name: {e}") from None
    # --export_dir alone exports the latest checkpoint: it reads no data.
    reads_data = values.do_train or values.do_eval or values.do_predict
    if values.data_source == "tsv" and reads_data:
        if not values.data_dir:
            raise FlagError(f"--data_dir is required: {how_to_get_data(task)}")
        if not path_is("data_dir", values.data_dir, io_utils.isdir):
            raise FlagError(f"--data_dir={values.data_dir}: directory not found; "
                            f"{how_to_get_data(task, values.data_dir)}")
    if task == "ax" and (values.do_train or values.do_eval):
        raise FlagError("AX is a diagnostic set with test data only: train on MNLI, then run "
                        "--task_name=AX --do_predict --load_adapter=<MNLI output_dir>/adapter")
    validate_resadapter_flags(values)
    validate_family_flags(values)
    return task


def validate_ablation(values) -> str:
    """ablate_adapters.py's checks (it only evaluates: refuses --do_train and --do_predict),
    then `validate_classifier`'s as an evaluation; returns the canonical task name.
    """
    if values.do_train or values.do_predict:
        raise FlagError("ablate_adapters.py evaluates a trained model: drop --do_train / "
                        "--do_predict and pass --load_adapter=<run output_dir>/adapter")
    return validate_classifier(values.replace(do_eval=True))


def validate_common(values) -> None:
    """Checks shared by both scripts, before anything is loaded or written.

    Args:
        values: the run's configuration (`command_line.run_config.RunConfig`).

    Raises:
        FlagError: naming the flag and what was expected.
    """
    check_numeric_flags(values)
    actions = [a for a in ("do_train", "do_eval", "do_predict") if values[a]]
    if not actions and not values.export_dir:
        names = "`do_train`, `do_eval` or `do_predict`" if "do_eval" in values \
            else "`do_train` or `do_predict`"
        raise FlagError(f"At least one of {names} must be True.")
    if not values.output_dir:
        raise FlagError("--output_dir is required")
    if path_is("output_dir", values.output_dir, io_utils.exists) \
            and not io_utils.isdir(values.output_dir):
        raise FlagError(f"--output_dir={values.output_dir} exists and is a file, not a directory")
    check_writable_dir("output_dir", values.output_dir)
    if values.overwrite_output_dir and not values.do_train:
        raise FlagError("--overwrite_output_dir only applies with --do_train (it deletes the "
                        "earlier run's outputs before training anew)")
    if values.adapter_learning_rate is not None:
        if values.tuning_mode != "adapter":
            raise FlagError("--adapter_learning_rate is only used with --tuning_mode=adapter, "
                            f"got --tuning_mode={values.tuning_mode}")
    require_paths(values, ("bert_config_file", "vocab_file"))
    checkpoint = values.init_checkpoint
    if checkpoint and not io_utils.is_local(checkpoint):
        # Only whether its store answers: what is (or is not) there, the backbone's
        # resolution says.
        path_is("init_checkpoint", checkpoint, io_utils.exists)
    if values.tuning_mode == "top_k" and values.top_k_layers is None:
        raise FlagError("--tuning_mode=top_k needs --top_k_layers")
    if values.tuning_mode != "top_k" and values.top_k_layers is not None:
        raise FlagError("--top_k_layers is only used with --tuning_mode=top_k")
    require_paths(values, ("load_adapter",), io_utils.isdir, "directory")
    if values.export_dir:
        check_writable_dir("export_dir", values.export_dir)
        check_export_target(values.export_dir, values.output_dir)


def check_export_target(export_dir: str, output_dir: str) -> None:
    """Refuses, before anything runs, an --export_dir that the export could not replace
    (`serving.export.check_export_dir`) or that holds the run's own --output_dir.

    Raises:
        FlagError: naming both flags; ExportError: naming what is in the way.
    """
    from adapter_bert.serving.export import check_export_dir
    export, output = io_utils.absolute(export_dir), io_utils.absolute(output_dir)
    if io_utils.is_within(output, export):
        raise FlagError(f"--export_dir={export_dir} holds --output_dir={output_dir}: an "
                        f"export replaces its folder whole; name a folder of its own "
                        f"(e.g. {io_utils.join(output_dir, 'export')})")
    check_export_dir(export)


def validate_family_flags(flag_values) -> None:
    """Rejects an adapter family's option flags (`--lora_alpha`, ...) given for another
    family, and --merge_lora without --export_dir or with a family that cannot merge.

    An option flag is a flag named as a registered family's option (model/config.py).

    Raises:
        FlagError: naming the flags and the family they belong to.
    """
    kind = flag_values.adapter_type
    for family in adapter_families():
        given = [name for name in family.options if flag_values.was_set(name)]
        if given and family.name != kind:
            raise FlagError(f"{', '.join('--' + name for name in given)} only apply with "
                            f"--adapter_type={family.name} (got --adapter_type={kind})")
        for name in given:
            try:
                parse_option(name, family.options[name], flag_values[name])
            except ValueError as e:
                raise FlagError(f"--{name}: {e}") from None
    if flag_values.merge_lora:
        if not flag_values.export_dir:
            raise FlagError("--merge_lora merges LoRA into the exported model: it needs "
                            "--export_dir")
        source = f"--adapter_type={kind}"
        if flag_values.load_adapter:
            stored = adapter_config_of(flag_values.load_adapter)
            kind = stored.adapter_type if stored is not None else "none"
            source = f"--load_adapter={flag_values.load_adapter} (adapter type {kind})"
        if not any(f.name == kind and f.slot == "projections" for f in adapter_families()):
            raise FlagError(f"--merge_lora folds LoRA updates into the kernels; {source} "
                            f"has none to fold")


# Flags that place Houlsby adapters inside BERT; a ResAdapter has no use for them.
_INSIDE_ADAPTER_FLAGS = ("adapter_positions", "adapter_leave_out", "adapter_init_scale")
_RESADAPTER_FLAGS = ("resadapter_variant", "resadapter_cell", "resadapter_pooling")


def validate_resadapter_flags(flag_values) -> None:
    """Raises FlagError for flags given that mean nothing for the chosen adapter type."""
    kind = flag_values.adapter_type
    if kind != "resadapter":
        given = [f"--{name}" for name in _RESADAPTER_FLAGS if flag_values.was_set(name)]
        if given:
            raise FlagError(f"{', '.join(given)} only apply with --adapter_type=resadapter "
                            f"(got --adapter_type={kind})")
        return
    if flag_values.tuning_mode != "adapter":
        raise FlagError(f"--adapter_type=resadapter trains a side network beside a frozen BERT; "
                        f"it needs --tuning_mode=adapter, not --tuning_mode="
                        f"{flag_values.tuning_mode}")
    if flag_values.train_pooler == "true":
        raise FlagError("--train_pooler=true does not apply with --adapter_type=resadapter: the "
                        "whole BERT stays frozen and the heads read the side network, not the "
                        "pooler")
    given = [f"--{name}" for name in _INSIDE_ADAPTER_FLAGS if flag_values.was_set(name)]
    if given:
        raise FlagError(f"{', '.join(given)} place(s) adapters inside BERT; a ResAdapter has one "
                        f"cell beside every layer: drop them with --adapter_type=resadapter")
    if flag_values.resadapter_cell == "attention" \
            and flag_values.was_set("adapter_activation"):
        raise FlagError("--adapter_activation is the feedforward cell's non-linearity; "
                        "--resadapter_cell=attention has self-attention in its place")


def validate_squad(values) -> None:
    """run_squad.py's checks, before anything is loaded or written.

    Args:
        values: the run's configuration (`command_line.run_config.RunConfig`).

    Raises:
        FlagError: naming the flag (or file) and what was expected.
    """
    validate_common(values)
    for action, name in (("do_train", "train_file"), ("do_predict", "predict_file")):
        if values[action] and not values[name]:
            raise FlagError(f"If `{action}` is True, then `{name}` must be specified.")
        require_paths(values, (name,) if values[action] else ())
    # Google's only window check. A --doc_stride as long as the context window or
    # longer is fine: the next window starts min(window, doc_stride) tokens later.
    if values.max_seq_length <= values.max_query_length + 3:
        raise FlagError(f"The max_seq_length ({values.max_seq_length}) must be greater than "
                        f"max_query_length ({values.max_query_length}) + 3")
    validate_resadapter_flags(values)
    validate_family_flags(values)
    if values.was_set("resadapter_pooling"):
        raise FlagError("--resadapter_pooling chooses a classification head's input; the "
                        "span head scores every token")
