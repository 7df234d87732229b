"""Choosing a `tf.distribute.Strategy` from Google BERT's flags (CPU, GPUs, TPU).

Google's scripts select TPU vs. local with `--use_tpu`, `--tpu_name`, `--tpu_zone`,
`--gcp_project` and `--master`; `get_strategy` takes those plus a strategy name, so
the same script trains on one device, several GPUs, several workers or a TPU.
"""

import dataclasses
import os
from typing import Optional

import tensorflow as tf
from absl import logging
from adapter_bert import io_utils
from adapter_bert.errors import UserError

STRATEGIES = ("auto", "tpu", "mirrored", "multi_worker_mirrored", "one_device")

# Resolver address when no TPU name is given anywhere: "local" is a TPU attached to
# this VM (Cloud TPU VMs, Colab TPU runtimes).
_LOCAL_TPU = "local"


def split_cpu(num_devices: int) -> None:
    """Splits the physical CPU into `num_devices` (>= 1) logical devices, so that
    `MirroredStrategy` runs several replicas on one CPU (how the multi-replica paths are
    tested without GPUs). Call it before TensorFlow initialises its devices (any op,
    strategy or `list_logical_devices` does): RuntimeError otherwise."""
    if num_devices < 1:
        raise UserError(f"num_devices must be >= 1, got {num_devices}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])
    except RuntimeError as e:
        raise RuntimeError(
            f"split_cpu({num_devices}) must be called before TensorFlow initialises its "
            f"devices (before any op, model or strategy is created): {e}") from e


def is_tpu_strategy(strategy) -> bool:
    """Whether `strategy` (a `tf.distribute.Strategy` or None) is a `TPUStrategy`, of
    either API version."""
    classes = [tf.distribute.TPUStrategy]
    experimental = getattr(tf.distribute.experimental, "TPUStrategy", None)
    if experimental is not None:
        classes.append(experimental)
    return isinstance(strategy, tuple(classes))


def static_shapes_required(strategy) -> bool:
    """Whether every batch must have the same shape under `strategy` (TPU: XLA compiles
    one program): input pipelines then drop the remainder and fix the sequence length."""
    return is_tpu_strategy(strategy)


@dataclasses.dataclass
class WorkerRole:
    """Where one worker of a run reads and writes: the chief/worker split in one place.

    Every worker runs the same program, but only the chief (`is_chief`) writes into
    `output_dir`; the others write into a temporary `write_dir`, deleted by `close()`. Every
    worker reads checkpoints from the chief's `output_dir` (storage all can read, e.g.
    `gs://`). `name` ("chief", "worker 1") is for log lines.
    """

    is_chief: bool
    output_dir: str
    write_dir: str
    name: str = "chief"

    def close(self) -> None:
        """Deletes a non-chief worker's temporary directory (nothing for the chief)."""
        if not self.is_chief:
            io_utils.remove_tree(self.write_dir)


def worker_role(strategy, output_dir: str) -> WorkerRole:
    """The `WorkerRole` of this process in `strategy`'s cluster.

    Multi-worker strategies name their chief (`extended.should_checkpoint`: the task
    "chief", else worker 0); every other strategy runs as one process, its chief.
    A non-chief worker gets a fresh directory under the system temporary folder.
    """
    extended = getattr(strategy, "extended", None)
    if getattr(extended, "should_checkpoint", True):
        return WorkerRole(True, output_dir, output_dir)
    resolver = strategy.cluster_resolver
    name = f"{resolver.task_type} {resolver.task_id}"
    write_dir = io_utils.make_scratch_dir(
        f"adapter_bert_{resolver.task_type}{resolver.task_id}_")
    logging.info("This process is %s, not the chief: it writes into %s (deleted at the end) "
                 "and reads checkpoints from %s", name, write_dir, output_dir)
    return WorkerRole(False, output_dir, write_dir, name)


def _tpu_strategy(tpu_name, tpu_zone, gcp_project, master):
    """Resolves, connects to and initialises a TPU; wraps any failure in RuntimeError."""
    tpu = tpu_name or master or os.environ.get("TPU_NAME") or _LOCAL_TPU
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu, zone=tpu_zone, project=gcp_project)
        # Joins a remote TPU's workers to this program; a no-op for "local".
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as e:
        from adapter_bert.install_check import has_tpu_support
        hint = "" if has_tpu_support() else (
            "; this TensorFlow is not the TPU build: on a TPU VM or a Colab TPU runtime run  "
            "pip install -e \".[tpu]\"  (tensorflow-tpu; see docs/install.md)")
        raise UserError(
            f"--use_tpu was given but no TPU was found (tpu_name={tpu_name!r}, "
            f"zone={tpu_zone!r}, project={gcp_project!r}, master={master!r}, "
            f"resolved to {tpu!r}): {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            f"{hint}") from e
    return tf.distribute.TPUStrategy(resolver)


def check_tpu_cores(num_tpu_cores: Optional[int], strategy) -> None:
    """--num_tpu_cores, when given, is the number of cores the TPU reports: the run uses
    every core (its replicas), so another number is refused in one line."""
    if num_tpu_cores is not None and num_tpu_cores != strategy.num_replicas_in_sync:
        raise UserError(f"--num_tpu_cores={num_tpu_cores}: the TPU has "
                        f"{strategy.num_replicas_in_sync} cores, and the run uses them all; "
                        f"leave --num_tpu_cores out")


def _gpus(num_gpus):
    """The logical GPUs to use: all of them, or the first `num_gpus`."""
    gpus = tf.config.list_logical_devices("GPU")
    if num_gpus is None:
        return gpus
    if num_gpus > len(gpus):
        raise UserError(f"num_gpus={num_gpus} but only {len(gpus)} GPU(s) are visible")
    return gpus[:num_gpus]


def _mirrored(gpus):
    """MirroredStrategy over the GPUs, else over every logical CPU device."""
    devices = gpus or tf.config.list_logical_devices("CPU")
    return tf.distribute.MirroredStrategy(devices=[d.name for d in devices])


def _one_device(gpus):
    return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")


def get_strategy(distribution_strategy: str = "auto", use_tpu: bool = False,
                 tpu_name: Optional[str] = None, tpu_zone: Optional[str] = None,
                 gcp_project: Optional[str] = None, master: Optional[str] = None,
                 num_gpus: Optional[int] = None,
                 num_tpu_cores: Optional[int] = None) -> tf.distribute.Strategy:
    """Builds the distribution strategy the flags ask for (Google's TPU flags included).

    `tpu` (or `use_tpu`): `TPUStrategy` on `tpu_name`, `master`, `$TPU_NAME` or the local
    TPU; `mirrored`: the GPUs (the first `num_gpus`) or every logical CPU device;
    `multi_worker_mirrored`: the cluster of `$TF_CONFIG`; `one_device`: `/gpu:0` or
    `/cpu:0`; `auto`: TPU with `use_tpu`, mirrored with several GPUs, else one device.
    `num_tpu_cores`: given, the TPU's core count it must be (`check_tpu_cores`).
    Raises ValueError for an unknown strategy, `use_tpu` with another, or too many GPUs, and
    RuntimeError when a requested TPU cannot be initialised.
    """
    name = (distribution_strategy or "auto").lower()
    if name not in STRATEGIES:
        raise UserError(f"Unknown distribution strategy {distribution_strategy!r}; "
                        f"expected one of {', '.join(STRATEGIES)}")
    if use_tpu and name not in ("auto", "tpu"):
        raise UserError(f"--use_tpu conflicts with distribution_strategy={name!r}")
    if name == "auto":
        name = "tpu" if use_tpu else ("mirrored" if len(_gpus(num_gpus)) > 1 else "one_device")

    if name == "tpu":
        strategy = _tpu_strategy(tpu_name, tpu_zone, gcp_project, master)
        check_tpu_cores(num_tpu_cores, strategy)
    elif name == "multi_worker_mirrored":
        if "TF_CONFIG" not in os.environ:
            logging.warning("TF_CONFIG is not set: multi_worker_mirrored runs as one worker")
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif name == "mirrored":
        strategy = _mirrored(_gpus(num_gpus))
    else:
        strategy = _one_device(_gpus(num_gpus))
    logging.info("Distribution strategy: %s (%s) with %d replica(s) in sync",
                 name, type(strategy).__name__, strategy.num_replicas_in_sync)
    return strategy
