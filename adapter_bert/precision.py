"""`--dtype=auto`: the compute dtype the hardware runs natively.

bfloat16 pays only where the hardware multiplies it fast: TPUs, NVIDIA GPUs of compute
capability 8.0 on, x86 CPUs with AMX and AMD CPUs with AVX512_BF16; on an Intel Xeon with
AVX512_BF16 but no AMX, and on AVX2-only CPUs, it is slower (docs/performance.md). So
`auto` picks bfloat16 there and float32 elsewhere, never float16 (loss scaling, not shown
safe for adapters). The decision reads a `Hardware` description (`describe_hardware()`), so
it is tested with faked ones; `ADAPTER_BERT_DTYPE` fixes what `auto` means on a machine.
"""

import dataclasses
from adapter_bert.errors import UserError
import logging
import os
from typing import FrozenSet, Optional, Tuple

# /proc/cpuinfo's vendor_id of AMD CPUs (whose AVX512_BF16 runs bfloat16 matmuls fast).
AMD = "AuthenticAMD"
# The dtype policies a run can compute in ("auto" decides among the first and the last).
POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
# Fixes what `auto` resolves to on this machine.
ENV_OVERRIDE = "ADAPTER_BERT_DTYPE"
# The first NVIDIA compute capability with bfloat16 tensor cores (Ampere).
BF16_GPU_CAPABILITY = (8, 0)


@dataclasses.dataclass(frozen=True)
class Hardware:
    """What the dtype decision needs to know about the machine a run computes on."""

    cpu_flags: FrozenSet[str] = frozenset()
    cpu_vendor: str = ""  # /proc/cpuinfo's vendor_id: "AuthenticAMD", "GenuineIntel", ...
    gpu_capabilities: Tuple[Tuple[int, int], ...] = ()  # one (major, minor) per GPU
    tpu: bool = False


def choose_dtype(hardware: Hardware) -> Tuple[str, str]:
    """The `auto` dtype policy for `hardware`, with the reason in a few words.

    The device that computes decides: a TPU, else the GPUs (all of them must have
    bfloat16 units), else the CPU.
    """
    if hardware.tpu:
        return "mixed_bfloat16", "TPU: bfloat16 matmuls are native"
    if hardware.gpu_capabilities:
        lowest = min(hardware.gpu_capabilities)
        name = f"compute capability {lowest[0]}.{lowest[1]}"
        if lowest >= BF16_GPU_CAPABILITY:
            return "mixed_bfloat16", f"GPU of {name}: bfloat16 tensor cores"
        return "float32", f"GPU of {name}: no bfloat16 tensor cores (8.0 and later have them)"
    flags = hardware.cpu_flags
    if "amx_bf16" in flags:
        return "mixed_bfloat16", "CPU with amx_bf16: bfloat16 matrix units"
    if "avx512_bf16" in flags and hardware.cpu_vendor == AMD:
        return "mixed_bfloat16", "AMD CPU with avx512_bf16: bfloat16 matmuls are native"
    if "avx512_bf16" in flags:
        return "float32", ("CPU with avx512_bf16 but no amx_bf16: bfloat16 measured slower "
                           "than float32 on such a Xeon")
    return "float32", "CPU without avx512_bf16 or amx_bf16: bfloat16 would be emulated, slower"


def _cpuinfo_field(keys, cpuinfo_path: str) -> str:
    """The first value of one of `keys` in /proc/cpuinfo; "" where there is none."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in keys:
                    return value.strip()
    except OSError:
        pass
    return ""


def cpu_flags(cpuinfo_path: str = "/proc/cpuinfo") -> FrozenSet[str]:
    """The CPU's feature flags (Linux); empty where /proc/cpuinfo is not there."""
    return frozenset(_cpuinfo_field(("flags", "Features"), cpuinfo_path).split())


def cpu_vendor(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """The CPU's vendor_id (Linux x86): "AuthenticAMD", "GenuineIntel"; "" elsewhere."""
    return _cpuinfo_field(("vendor_id",), cpuinfo_path)


def gpu_capabilities() -> Tuple[Tuple[int, int], ...]:
    """The compute capability of every GPU TensorFlow sees."""
    import tensorflow as tf
    capabilities = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        capability = details.get("compute_capability")
        if capability:
            capabilities.append(tuple(int(v) for v in capability))
    return tuple(capabilities)


def describe_hardware(strategy=None) -> Hardware:
    """The machine this process computes on (a TPU when `strategy` is a TPUStrategy)."""
    tpu = bool(strategy is not None and "TPU" in type(strategy).__name__)
    return Hardware(cpu_flags=cpu_flags(), cpu_vendor=cpu_vendor(),
                    gpu_capabilities=() if tpu else gpu_capabilities(), tpu=tpu)


def resolve_dtype(requested: str, hardware: Optional[Hardware] = None,
                  strategy=None) -> Tuple[str, str]:
    """The dtype policy a run uses, with the reason: `auto` decides from the hardware;
    any other value is the user's choice."""
    if requested != "auto":
        return requested, "--dtype"
    fixed = os.environ.get(ENV_OVERRIDE)
    if fixed:
        if fixed not in POLICIES:
            raise UserError(f"{ENV_OVERRIDE}={fixed}: expected one of {', '.join(POLICIES)}")
        return fixed, f"{ENV_OVERRIDE}={fixed}"
    return choose_dtype(hardware or describe_hardware(strategy))


def set_dtype_policy(dtype: str) -> None:
    """Sets Keras' global dtype policy ("float32", "mixed_float16", "mixed_bfloat16")."""
    import tf_keras as keras
    keras.mixed_precision.set_global_policy(dtype)


def apply_dtype(requested: Optional[str], strategy=None, source: str = "--dtype") -> Optional[str]:
    """Sets Keras' global dtype policy to `requested` (resolving "auto") and logs the
    choice; None leaves the policy as it is. Returns the policy set (or None).

    Raises:
        ValueError: `requested` is not "auto", None or one of `POLICIES`.
    """
    if requested is None:
        return None
    if requested != "auto" and requested not in POLICIES:
        raise UserError(f"{source}={requested}: expected auto or one of {', '.join(POLICIES)}")
    dtype, why = resolve_dtype(requested, strategy=strategy)
    if requested == "auto":
        logging.info("dtype: %s (%s=auto: %s)", dtype, source, why)
    set_dtype_policy(dtype)
    return dtype
