"""core.quant.kernels: every GPU format key the scheme table names has vLLM's native-kernel rule,
and the rules read vLLM's thresholds (io.host applies them)."""

from __future__ import annotations

from speckit.core.quant import SCHEMES
from speckit.core.quant.kernels import KERNEL_RULES


def test_every_format_key_of_the_scheme_table_has_a_rule():
    keys = {s.capability for s in SCHEMES.values()}
    assert keys <= set(KERNEL_RULES), keys - set(KERNEL_RULES)


def test_cuda_thresholds_and_rocm_families():
    fp8, mx = KERNEL_RULES["fp8"], KERNEL_RULES["mxfp4"]
    assert fp8.native_on_cuda("8.9") and not fp8.native_on_cuda("8.6")
    assert mx.native_on_cuda("10.0") and not mx.native_on_cuda("9.0")
    assert not fp8.native_on_cuda("garbage")
    assert fp8.native_on_rocm("gfx942:sramecc+:xnack-") and mx.native_on_rocm("gfx950")
    assert not mx.native_on_rocm("gfx942")


def test_only_fp8_has_a_cpu_kernel_and_only_with_amx_fp8():
    assert KERNEL_RULES["fp8"].native_on_cpu({"amx_tile", "amx_fp8"})
    assert not KERNEL_RULES["fp8"].native_on_cpu({"amx_tile", "amx_bf16"})
    assert not any(r.native_on_cpu({"amx_fp8"}) for k, r in KERNEL_RULES.items() if k != "fp8")
