"""`--dtype=auto`: the compute dtype the hardware runs natively, and why.

bfloat16 halves the bytes every matmul moves, but only pays where the hardware multiplies
bfloat16 natively: TPUs; NVIDIA GPUs of compute capability 8.0 and later (Ampere on);
x86 CPUs with AVX512_BF16 (AMD Zen 4 and 5, Intel Cooper Lake) or AMX (Intel Sapphire
Rapids and later). Elsewhere TensorFlow converts in software and bfloat16 is slower than
float32 (measured on an AVX2-only EPYC), so `auto` keeps float32 there. float16 on older
tensor-core GPUs needs loss scaling and has not been shown safe for adapter tuning here,
so `auto` never picks it; `--dtype=mixed_float16` still does.

The decision reads a `Hardware` description, so it is tested with faked descriptions;
`describe_hardware()` reads the real one (CPU flags from /proc/cpuinfo, GPUs' compute
capabilities from TensorFlow, TPUs from the distribution strategy). The environment
variable `ADAPTER_BERT_DTYPE` (e.g. `float32`) fixes what `auto` means on a machine, so
that a shared machine or a test suite computes the same everywhere.
"""

import dataclasses
import logging
import os
from typing import FrozenSet, Optional, Tuple

# CPU flags (as /proc/cpuinfo spells them) that mean native bfloat16 matmuls.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
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
    native = sorted(flag for flag in BF16_CPU_FLAGS if flag in hardware.cpu_flags)
    if native:
        return "mixed_bfloat16", f"CPU with {', '.join(native)}: bfloat16 matmuls are native"
    return "float32", "CPU without avx512_bf16 or amx_bf16: bfloat16 would be emulated, slower"


def cpu_flags(cpuinfo_path: str = "/proc/cpuinfo") -> FrozenSet[str]:
    """The CPU's feature flags (Linux); empty where /proc/cpuinfo is not there."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


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
    return Hardware(cpu_flags=cpu_flags(), gpu_capabilities=() if tpu else gpu_capabilities(),
                    tpu=tpu)


def resolve_dtype(requested: str, hardware: Optional[Hardware] = None,
                  strategy=None) -> Tuple[str, str]:
    """The dtype policy a run uses, with the reason: `auto` decides from the hardware;
    any other value is the user's choice."""
    if requested != "auto":
        return requested, "--dtype"
    fixed = os.environ.get(ENV_OVERRIDE)
    if fixed:
        if fixed not in POLICIES:
            raise ValueError(f"{ENV_OVERRIDE}={fixed}: expected one of {', '.join(POLICIES)}")
        return fixed, f"{ENV_OVERRIDE}={fixed}"
    return choose_dtype(hardware or describe_hardware(strategy))


def set_dtype_policy(dtype: str) -> None:
    """Sets Keras' global dtype policy ("float32", "mixed_float16", "mixed_bfloat16")."""
    import tf_keras as keras
    keras.mixed_precision.set_global_policy(dtype)


def apply_dtype(requested: Optional[str], strategy=None, source: str = "--dtype") -> Optional[str]:
    """Sets Keras' global dtype policy to `requested` (resolving "auto") and logs the choice;
    None leaves the policy as it is. Returns the policy set (or None).

    Raises:
        ValueError: `requested` is not "auto", None or one of `POLICIES`.
    """
    if requested is None:
        return None
    if requested != "auto" and requested not in POLICIES:
        raise ValueError(f"{source}={requested}: expected auto or one of {', '.join(POLICIES)}")
    dtype, why = resolve_dtype(requested, strategy=strategy)
    if requested == "auto":
        logging.info("dtype: %s (%s=auto: %s)", dtype, source, why)
    set_dtype_policy(dtype)
    return dtype
