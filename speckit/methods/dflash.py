"""DFlash: a block-diffusion drafter that fills a block of masked slots in one forward.

speculators layout `dflash`; z-lab and SpecForge sources convert to it. FORMATS.md 2.3.
"""

from __future__ import annotations

from typing import Any

from speckit.errors import FormatError
from speckit.methods import KVLayer
from speckit.methods.common import (
    check_k_range,
    draft_layer_kv,
    offset_layer_runtime_name,
    speculators_k,
)

NAME = "dflash"
VLLM_METHOD = "dflash"
SPECULATORS_TYPE = "dflash"
PARALLEL = True
HAS_CHECKPOINT = True


def block_size(config: dict[str, Any]) -> int:
    for src in (config, config.get("dflash_config") or {}):
        if src.get("block_size"):
            return int(src["block_size"])
    raise FormatError("config.json: DFlash draft has no block_size (top level or dflash_config)",
                      hint="add the block size the draft was trained with")


def max_k(config: dict[str, Any]) -> int:
    b = block_size(config)
    return b if config.get("sample_from_anchor") else b - 1


def default_k(config: dict[str, Any]) -> int | None:
    return speculators_k(config) or max_k(config)


def check_k(config: dict[str, Any], k: int) -> None:
    check_k_range(NAME, k, lo=1, hi=max_k(config),
                  why=f"a DFlash draft with block size {block_size(config)} fills at most "
                  f"{max_k(config)} slots per step")


def lookahead_slots(k: int) -> int:
    return k + 1


def speculative_config(*, model: str | None, k: int, config: dict[str, Any]) -> dict[str, Any]:
    return {"method": VLLM_METHOD, "model": model, "num_speculative_tokens": k}


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    return draft_layer_kv(config)


def runtime_module_name(ckpt_name: str, *, target_num_layers: int) -> str:
    """vLLM's run-time module name for a checkpoint tensor (Quark `exclude` must use it)."""
    return offset_layer_runtime_name(ckpt_name, target_num_layers=target_num_layers)
