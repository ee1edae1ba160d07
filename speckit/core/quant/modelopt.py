"""NVIDIA ModelOpt 0.47's layout: the `quantization_config` its unified Hugging Face export
(`export_hf_checkpoint`) writes into config.json for the W4A16_NVFP4 preset, and how to recognise
one. vLLM's ModelOptNvFp4Config reads this compressed-tensors-style form (`quant_algo`, `ignore`)
as well as the older hf_quant_config.json.

The field values are what ModelOpt 0.47 writes, checked against the package in
tests/quant/test_quant_modelopt.py.
"""

from __future__ import annotations

from typing import Any

MODELOPT_VERSION = "0.47.0"
NVFP4_WEIGHTS: dict[str, Any] = {"dynamic": False, "num_bits": 4, "type": "float",
                                 "group_size": 16}


def config(quant_algo: str, weights: dict[str, Any]):
    """The exclude -> `quantization_config` function of one ModelOpt scheme (weight-only)."""
    def build(exclude: list[str]) -> dict[str, Any]:
        return {
            "config_groups": {"group_0": {"weights": dict(weights), "targets": ["Linear"]}},
            "ignore": list(exclude),
            "quant_algo": quant_algo,
            "producer": {"name": "modelopt", "version": MODELOPT_VERSION},
            "quant_method": "modelopt",
        }
    return build


def recogniser(quant_algo: str):
    """A quantization_config -> bool test: ModelOpt, this quant_algo, no input quantization (vLLM
    also routes an "NVFP4" config whose groups quantize no inputs to W4A16)."""
    def test(q: dict[str, Any]) -> bool:
        if not isinstance(q, dict) or q.get("quant_method") != "modelopt":
            return False
        algo = str(q.get("quant_algo") or (q.get("quantization") or {}).get("quant_algo")
                   or "").upper()
        if algo == quant_algo:
            return True
        groups = q.get("config_groups")
        return (quant_algo == "W4A16_NVFP4" and algo == "NVFP4" and isinstance(groups, dict)
                and bool(groups) and all(isinstance(g, dict) and g.get("input_activations")
                                         is None for g in groups.values()))
    return test
