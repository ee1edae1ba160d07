"""compressed-tensors 0.17's layout, as llm-compressor writes it and vLLM's CompressedTensorsConfig
reads it: the `quantization_config` of the FP8_DYNAMIC and NVFP4A16 presets (targets "Linear",
speckit's exclude list as `ignore`), and how to recognise one.

The field values are compressed-tensors' QuantizationConfig.model_dump() for those presets,
checked against the package in tests/quant/test_quant_numerics.py.
"""

from __future__ import annotations

from typing import Any

CT_VERSION = "0.17.0"

def _args(num_bits: int, strategy: str, *, dynamic: bool, group_size: int | None,
          observer: str | None, scale_dtype: str | None, zp_dtype: str | None
          ) -> dict[str, Any]:
    return {"num_bits": num_bits, "type": "float", "symmetric": True, "group_size": group_size,
            "strategy": strategy, "block_structure": None, "dynamic": dynamic, "actorder": None,
            "scale_dtype": scale_dtype, "zp_dtype": zp_dtype, "observer": observer,
            "observer_kwargs": {}}


FP8_WEIGHTS = _args(8, "channel", dynamic=False, group_size=None, observer="memoryless_minmax",
                    scale_dtype=None, zp_dtype=None)
FP8_TOKEN_INPUTS = _args(8, "token", dynamic=True, group_size=None, observer=None,
                         scale_dtype=None, zp_dtype=None)
NVFP4_WEIGHTS = _args(4, "tensor_group", dynamic=False, group_size=16,
                      observer="memoryless_minmax", scale_dtype="torch.float8_e4m3fn",
                      zp_dtype=None)


def config(fmt: str, weights: dict[str, Any], input_activations: dict[str, Any] | None):
    """The exclude -> `quantization_config` function of one compressed-tensors scheme."""
    def build(exclude: list[str]) -> dict[str, Any]:
        return {
            "config_groups": {"group_0": {
                "targets": ["Linear"], "weights": dict(weights),
                "input_activations": dict(input_activations) if input_activations else None,
                "output_activations": None, "format": fmt}},
            "quant_method": "compressed-tensors",
            "kv_cache_scheme": None,
            "format": fmt,
            "quantization_status": "compressed",
            "global_compression_ratio": None,
            "ignore": list(exclude),
            "sparsity_config": {},
            "transform_config": {},
            "version": CT_VERSION,
        }
    return build


def recogniser(fmt: str, weights: dict[str, Any], inputs: dict[str, Any] | None):
    """A quantization_config -> bool test: compressed-tensors, every group in ``fmt`` with these
    weight (and input) numerics."""
    keys = ("num_bits", "type", "strategy", "group_size", "symmetric", "dynamic")

    def same(a: Any, b: dict[str, Any] | None) -> bool:
        if b is None or a is None:
            return a is None and b is None
        return isinstance(a, dict) and all(a.get(k) == b[k] for k in keys)

    def test(q: dict[str, Any]) -> bool:
        if not isinstance(q, dict) or q.get("quant_method") != "compressed-tensors":
            return False
        groups = q.get("config_groups")
        if not isinstance(groups, dict) or not groups:
            return False
        return all(isinstance(g, dict) and (g.get("format") or q.get("format")) == fmt
                   and same(g.get("weights"), weights)
                   and same(g.get("input_activations"), inputs) for g in groups.values())
    return test
