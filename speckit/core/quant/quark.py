"""AMD Quark 0.13's layout: the exact `quantization_config` its export writes for MXFP4 and FP8
E4M3 (docs/formats.md#quark-config), and how to recognise one when reading a config.

vLLM's QuarkConfig selects QuarkOCP_MX / QuarkW8A8Fp8 for these configs
(tests/quant/test_quant_vllm.py checks it with vLLM's own code).
"""

from __future__ import annotations

import copy
from typing import Any

QUARK_VERSION = "0.13"

# QTensorConfig.to_dict() of Quark 0.13 for the specs below, field for field (checked against
# Quark in tests/quant/test_quant_numerics.py::test_quantization_config_is_quarks)
MX_SPEC: dict[str, Any] = {
    "dtype": "fp4", "is_dynamic": False, "qscheme": "per_group", "ch_axis": -1, "group_size": 32,
    "block_size": None, "symmetric": None, "round_method": "half_even", "scale_type": "float",
    "zero_point_type": "int32", "scale_format": "e8m0", "scale_calculation_mode": "even",
    "mx_element_dtype": None, "observer_cls": "PerBlockMXObserver", "is_scale_quant": False,
    "enable_buffer_reuse": False, "max_input_numel": 4194304,
}
_FP8_COMMON: dict[str, Any] = {
    "group_size": None, "block_size": None, "symmetric": True,
    "round_method": "half_even", "zero_point_type": "int32", "scale_format": None,
    "scale_calculation_mode": None, "mx_element_dtype": None, "is_scale_quant": False,
    "enable_buffer_reuse": False, "max_input_numel": 4194304,
}


def fp8_spec(qscheme: str, *, ch_axis: int | None, dynamic: bool, scale_type: str
             ) -> dict[str, Any]:
    observer = {"per_channel": "PerChannelMinMaxObserver",
                "per_tensor": "PerTensorMinMaxObserver"}[qscheme]
    spec = {"dtype": "fp8_e4m3", "is_dynamic": dynamic, "qscheme": qscheme, "ch_axis": ch_axis,
            **_FP8_COMMON, "scale_type": scale_type, "observer_cls": observer}
    return {k: spec[k] for k in MX_SPEC}  # Quark's key order (to_dict walks the fields)


def config(weight: dict[str, Any], input_tensors: dict[str, Any] | None):
    """The exclude -> `quantization_config` function of one Quark scheme."""
    def build(exclude: list[str]) -> dict[str, Any]:
        return {
            "global_quant_config": {
                "input_tensors": copy.deepcopy(input_tensors), "output_tensors": None,
                "weight": copy.deepcopy(weight), "bias": None, "target_device": None,
            },
            "exclude": list(exclude),
            "algo_config": None,
            "softmax_quant_spec": None,
            "quant_method": "quark",
            "layer_type_quant_config": {},
            "layer_quant_config": {},
            "kv_cache_quant_config": {},
            "kv_cache_post_rope": False,
            "quant_mode": "eager_mode",
            "version": QUARK_VERSION,
            # what Quark's file-to-file export adds; vLLM requires `export.kv_cache_group`
            "export": {"kv_cache_group": [], "min_kv_scale": 0.0, "pack_method": "reorder",
                       "weight_format": "real_quantized", "weight_merge_groups": None},
        }
    return build


def weight_kind(spec: Any) -> str | None:
    """Which numerics a Quark weight spec describes: "mxfp4", "fp8-channel", "fp8-tensor"."""
    if not isinstance(spec, dict):
        return None
    if spec.get("dtype") == "fp4" and spec.get("qscheme") == "per_group" and \
            spec.get("group_size") == 32 and spec.get("scale_format") == "e8m0":
        return "mxfp4"
    if spec.get("dtype") == "fp8_e4m3" and spec.get("qscheme") in ("per_channel", "per_tensor"):
        return "fp8-" + spec["qscheme"].removeprefix("per_")
    return None


def recogniser(kind: str, *, inputs: str | None):
    """A quantization_config -> bool test: Quark, one global config of weight ``kind``, inputs
    None / "dynamic" / "static" / "mx"."""
    def test(q: dict[str, Any]) -> bool:
        if not isinstance(q, dict) or q.get("quant_method") != "quark":
            return False
        glob = q.get("global_quant_config") or {}
        if weight_kind(glob.get("weight")) != kind:
            return False
        inp = glob.get("input_tensors")
        if inputs is None:
            return inp is None
        if not isinstance(inp, dict):
            return False
        if inputs == "mx":
            return inp.get("dtype") == "fp4"
        return inp.get("dtype") == "fp8_e4m3" and bool(inp.get("is_dynamic")) == (
            inputs == "dynamic")
    return test
