"""--dtype=auto: the dtype policy chosen from faked hardware descriptions, and for real."""

import pytest

from adapter_bert.precision import (ENV_OVERRIDE, Hardware, apply_dtype, choose_dtype,
                                    cpu_flags, cpu_vendor, describe_hardware, resolve_dtype)

AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma"})
ZEN4 = AVX2 | {"avx512f", "avx512bw", "avx512_bf16", "avx512_vnni"}
SAPPHIRE_RAPIDS = AVX2 | {"avx512f", "amx_tile", "amx_bf16", "amx_int8"}


AMD, INTEL = "AuthenticAMD", "GenuineIntel"
# Intel Cooper Lake (and Xeon VMs that show avx512_bf16 without AMX).
COOPER_LAKE = AVX2 | {"avx512f", "avx512bw", "avx512_bf16"}


@pytest.mark.parametrize("hardware,dtype,reason_has", [
    (Hardware(cpu_flags=AVX2, cpu_vendor=AMD), "float32", "emulated"),
    (Hardware(cpu_flags=AVX2, cpu_vendor=INTEL), "float32", "emulated"),
    (Hardware(cpu_flags=ZEN4, cpu_vendor=AMD), "mixed_bfloat16", "AMD CPU with avx512_bf16"),
    # Measured slower than float32 on such a Xeon (0.64x): float32.
    (Hardware(cpu_flags=COOPER_LAKE, cpu_vendor=INTEL), "float32", "no amx_bf16"),
    (Hardware(cpu_flags=SAPPHIRE_RAPIDS | {"avx512_bf16"}, cpu_vendor=INTEL), "mixed_bfloat16",
     "amx_bf16"),
    (Hardware(cpu_flags=SAPPHIRE_RAPIDS, cpu_vendor=INTEL), "mixed_bfloat16", "amx_bf16"),
    (Hardware(), "float32", "without"),  # no /proc/cpuinfo (macOS, Windows)
    (Hardware(cpu_flags=ZEN4, tpu=True), "mixed_bfloat16", "TPU"),
    (Hardware(cpu_flags=AVX2, gpu_capabilities=((8, 0),)), "mixed_bfloat16", "8.0"),
    (Hardware(cpu_flags=AVX2, gpu_capabilities=((9, 0), (9, 0))), "mixed_bfloat16", "9.0"),
    # A V100 (7.0) or T4 (7.5) computes in float32 even beside a bfloat16 CPU.
    (Hardware(cpu_flags=ZEN4, cpu_vendor=AMD, gpu_capabilities=((7, 0),)), "float32", "7.0"),
    (Hardware(cpu_flags=AVX2, gpu_capabilities=((8, 6), (7, 5))), "float32", "7.5"),
])
def test_auto_dtype_from_hardware(hardware, dtype, reason_has):
    chosen, reason = choose_dtype(hardware)
    assert chosen == dtype
    assert reason_has in reason


def test_explicit_dtype_is_kept_whatever_the_hardware(monkeypatch):
    monkeypatch.delenv(ENV_OVERRIDE, raising=False)
    for dtype in ("float32", "mixed_float16", "mixed_bfloat16"):
        assert resolve_dtype(dtype, Hardware(cpu_flags=ZEN4))[0] == dtype
    assert resolve_dtype("auto", Hardware(cpu_flags=AVX2))[0] == "float32"
    assert resolve_dtype("auto", Hardware(cpu_flags=ZEN4, cpu_vendor=AMD))[0] == "mixed_bfloat16"


def test_cpu_flags_and_vendor_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n"
                       "flags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n"
                       "vendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512_bf16\n")
    assert cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_vendor(str(cpuinfo)) == "AuthenticAMD"
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()
    assert cpu_vendor(str(tmp_path / "missing")) == ""


def test_this_machine_gets_its_native_dtype(monkeypatch):
    """On this CPU for real: /proc/cpuinfo's flags and vendor decide."""
    monkeypatch.delenv(ENV_OVERRIDE, raising=False)
    hardware = describe_hardware()
    assert hardware.cpu_flags == cpu_flags() and hardware.cpu_vendor == cpu_vendor()
    assert resolve_dtype("auto")[0] == _native(hardware)


def _native(hardware) -> str:
    """The rule of docs/performance.md, written out independently of choose_dtype."""
    if hardware.tpu:
        return "mixed_bfloat16"
    if hardware.gpu_capabilities:
        return "mixed_bfloat16" if min(hardware.gpu_capabilities) >= (8, 0) else "float32"
    flags = hardware.cpu_flags
    bf16 = "amx_bf16" in flags or ("avx512_bf16" in flags and hardware.cpu_vendor == AMD)
    return "mixed_bfloat16" if bf16 else "float32"


def test_environment_fixes_what_auto_means(monkeypatch):
    monkeypatch.setenv(ENV_OVERRIDE, "float32")
    assert resolve_dtype("auto", Hardware(cpu_flags=ZEN4)) == ("float32", f"{ENV_OVERRIDE}=float32")
    monkeypatch.setenv(ENV_OVERRIDE, "mixed_bfloat16")
    assert resolve_dtype("auto", Hardware(cpu_flags=AVX2))[0] == "mixed_bfloat16"
    assert resolve_dtype("float32", Hardware(cpu_flags=AVX2))[0] == "float32"  # a flag wins
    monkeypatch.setenv(ENV_OVERRIDE, "bf16")
    with pytest.raises(ValueError, match="ADAPTER_BERT_DTYPE=bf16: expected one of float32"):
        resolve_dtype("auto", Hardware())


def test_apply_dtype_sets_keras_policy_and_none_leaves_it(monkeypatch, caplog):
    import tf_keras as keras
    monkeypatch.delenv(ENV_OVERRIDE, raising=False)
    try:
        keras.mixed_precision.set_global_policy("float32")
        assert apply_dtype(None) is None
        assert keras.mixed_precision.global_policy().name == "float32"
        assert apply_dtype("mixed_bfloat16") == "mixed_bfloat16"
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
        with caplog.at_level("INFO"):
            chosen = apply_dtype("auto", source="dtype")
        assert chosen == _native(describe_hardware())
        assert keras.mixed_precision.global_policy().name == chosen
        assert f"dtype: {chosen} (dtype=auto: " in caplog.text
        with pytest.raises(ValueError, match="dtype=bfloat16: expected auto or one of"):
            apply_dtype("bfloat16", source="dtype")
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_load_pretrained_dtype(monkeypatch):
    """dtype=None builds under the global policy; "auto" picks this machine's native dtype
    and sets it; the logits are float32 either way."""
    import numpy as np
    import tf_keras as keras
    import adapter_bert as ab
    from tests.conftest import tiny_inputs
    monkeypatch.delenv(ENV_OVERRIDE, raising=False)
    try:
        # The same seed for both: their untrained head and pooler (MiniLM has none) then
        # start equal, and only the dtype separates their logits.
        keras.utils.set_random_seed(0)
        plain = ab.load_pretrained(head="classifier", num_labels=2)
        assert plain.dtype_policy.name == "float32"
        keras.utils.set_random_seed(0)
        auto = ab.load_pretrained(head="classifier", num_labels=2, dtype="auto")
        native = _native(describe_hardware())
        assert auto.dtype_policy.name == native
        assert keras.mixed_precision.global_policy().name == native
        inputs = tiny_inputs(batch=2, seq=8, vocab=1000)
        reference = plain(inputs, training=False).numpy()
        logits = auto(inputs, training=False)
        assert logits.dtype.name == "float32"
        np.testing.assert_allclose(logits.numpy(), reference, atol=0.1)
    finally:
        keras.mixed_precision.set_global_policy("float32")
