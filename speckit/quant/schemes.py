"""The quantization schemes speckit writes, as data: Quark 0.13's exact quantization_config, the
tensors each quantized Linear becomes, and the rules for Quark's `exclude` list in vLLM's names.

No torch here; vLLM's QuarkConfig selects QuarkOCP_MX / QuarkW8A8Fp8 for these configs
(docs/formats.md#quark-config), which tests/test_quant_vllm.py checks with vLLM's own code.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from speckit.errors import UsageError

QUARK_VERSION = "0.13"

# QTensorConfig.to_dict() of Quark 0.13 for the specs below, field for field (checked against
# Quark in tests/test_quant_numerics.py::test_quantization_config_is_quarks)
_MX_SPEC: dict[str, Any] = {
    "dtype": "fp4", "is_dynamic": False, "qscheme": "per_group", "ch_axis": -1, "group_size": 32,
    "block_size": None, "symmetric": None, "round_method": "half_even", "scale_type": "float",
    "zero_point_type": "int32", "scale_format": "e8m0", "scale_calculation_mode": "even",
    "mx_element_dtype": None, "observer_cls": "PerBlockMXObserver", "is_scale_quant": False,
    "enable_buffer_reuse": False, "max_input_numel": 4194304,
}
_FP8_COMMON: dict[str, Any] = {
    "dtype": "fp8_e4m3", "group_size": None, "block_size": None, "symmetric": True,
    "round_method": "half_even", "zero_point_type": "int32", "scale_format": None,
    "scale_calculation_mode": None, "mx_element_dtype": None, "is_scale_quant": False,
    "enable_buffer_reuse": False, "max_input_numel": 4194304,
}


def _fp8(qscheme: str, *, ch_axis: int | None, dynamic: bool, scale_type: str) -> dict[str, Any]:
    observer = {"per_channel": "PerChannelMinMaxObserver",
                "per_tensor": "PerTensorMinMaxObserver"}[qscheme]
    spec = {"dtype": "fp8_e4m3", "is_dynamic": dynamic, "qscheme": qscheme, "ch_axis": ch_axis,
            **{k: v for k, v in _FP8_COMMON.items() if k != "dtype"}}
    spec["scale_type"] = scale_type
    spec["observer_cls"] = observer
    # keep Quark's key order (to_dict walks the dataclass fields)
    order = list(_MX_SPEC)
    return {k: spec[k] for k in order}


@dataclass(frozen=True)
class Scheme:
    """One way to quantize a draft's Linear layers, and what vLLM makes of it."""

    name: str  # CLI spelling: mxfp4, mxfp4-w4a4, fp8, fp8-static
    kind: str  # numerics: "mxfp4" | "fp8-channel" | "fp8-tensor"
    description: str
    weight: dict[str, Any]
    input_tensors: dict[str, Any] | None
    vllm_scheme: str  # the class vLLM's QuarkConfig picks: QuarkOCP_MX | QuarkW8A8Fp8
    needs_calibration: bool = False
    in_features_multiple: int = 1  # vLLM refuses MXFP4 layers whose input dim % 32 != 0

    def quantization_config(self, exclude: Iterable[str]) -> dict[str, Any]:
        """The `quantization_config` block, exactly as Quark's export writes it."""
        return {
            "global_quant_config": {
                "input_tensors": copy.deepcopy(self.input_tensors),
                "output_tensors": None,
                "weight": copy.deepcopy(self.weight),
                "bias": None,
                "target_device": None,
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

    def outputs(self, name: str, shape: tuple[int, ...]) -> list[tuple[str, str, tuple[int, ...]]]:
        """(tensor name, safetensors dtype, shape) written for the Linear weight ``name``."""
        out_f, in_f = shape
        if self.kind == "mxfp4":
            return [(name, "U8", (out_f, in_f // 2)), (f"{name}_scale", "U8", (out_f, in_f // 32))]
        module = name.removesuffix(".weight")
        static = [(f"{module}.input_scale", "F32", ())] if self.needs_calibration else []
        if self.kind == "fp8-channel":
            return [(name, "F8_E4M3", shape), (f"{name}_scale", "F32", (out_f,)), *static]
        return [(name, "F8_E4M3", shape), (f"{name}_scale", "F32", ()), *static]


SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("mxfp4", "mxfp4",
           "OCP MXFP4 weights (E2M1, E8M0 scale per 32 inputs), activations unquantized",
           weight=dict(_MX_SPEC), input_tensors=None, vllm_scheme="QuarkOCP_MX",
           in_features_multiple=32),
    Scheme("mxfp4-w4a4", "mxfp4",
           "OCP MXFP4 weights + dynamic MXFP4 activations",
           weight=dict(_MX_SPEC), input_tensors={**_MX_SPEC, "is_dynamic": True},
           vllm_scheme="QuarkOCP_MX", in_features_multiple=32),
    Scheme("fp8", "fp8-channel",
           "FP8 E4M3 per-channel weights + dynamic per-token FP8 activations",
           weight=_fp8("per_channel", ch_axis=0, dynamic=False, scale_type="float32"),
           input_tensors=_fp8("per_channel", ch_axis=1, dynamic=True, scale_type="float"),
           vllm_scheme="QuarkW8A8Fp8"),
    Scheme("fp8-static", "fp8-channel",
           "FP8 E4M3 per-channel weights + static per-tensor FP8 activations (calibrated)",
           weight=_fp8("per_channel", ch_axis=0, dynamic=False, scale_type="float32"),
           input_tensors=_fp8("per_tensor", ch_axis=None, dynamic=False, scale_type="float32"),
           vllm_scheme="QuarkW8A8Fp8", needs_calibration=True),
)}


def get(name: str) -> Scheme:
    key = name.strip().lower().replace("_", "-")
    if key in ("fp8-weight-only", "fp8-w8a16", "w8a16"):
        raise UsageError(
            "FP8 weight-only is not a scheme vLLM's Quark loader can serve",
            hint="its QuarkW8A8Fp8 needs activation quantization too (vLLM's Quark config: "
            "'No quark compatible scheme was found'); use --fp8 (dynamic per-token activations, no "
            "calibration) or --mxfp4 for weight-only")
    if key not in SCHEMES:
        raise UsageError(f"unknown scheme {name!r}", hint="one of " + ", ".join(SCHEMES))
    return SCHEMES[key]


# ---- exclude entries ---------------------------------------------------------------------------

def matches(entry: str, module: str) -> bool:
    """vLLM's rule for one `exclude` entry: exact name, or `re:` + regex with re.match."""
    if entry.startswith("re:"):
        return re.match(entry[3:], module) is not None
    return entry == module


def check_entry(entry: str) -> None:
    if not entry or entry.strip() != entry:
        raise UsageError(f"--exclude {entry!r}: empty or padded with spaces")
    if entry.startswith("re:"):
        try:
            re.compile(entry[3:])
        except re.error as e:
            raise UsageError(f"--exclude {entry!r}: not a valid regex ({e})") from e


def module_of(tensor_name: str) -> str:
    return tensor_name.rsplit(".", 1)[0] if tensor_name.endswith((".weight", ".bias")) \
        else tensor_name


def describe_quark_weight(spec: dict[str, Any] | None) -> str | None:
    """Which numerics an existing Quark weight spec describes (for --force re-quantization)."""
    if not isinstance(spec, dict):
        return None
    if spec.get("dtype") == "fp4" and spec.get("qscheme") == "per_group" and \
            spec.get("group_size") == 32 and spec.get("scale_format") == "e8m0":
        return "mxfp4"
    if spec.get("dtype") == "fp8_e4m3" and spec.get("qscheme") == "per_channel":
        return "fp8-channel"
    if spec.get("dtype") == "fp8_e4m3" and spec.get("qscheme") == "per_tensor":
        return "fp8-tensor"
    return None
