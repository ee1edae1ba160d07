"""DSpark: a DFlash backbone plus a Markov head and a confidence head; k is the block size.

speculators layout `dspark`; SpecForge and DeepSeek flat configs convert to it. FORMATS.md 2.5.
vLLM runs it only on the V2 model runner (CUDA/ROCm), not on CPU.
"""

from __future__ import annotations

from typing import Any

from speckit.methods import KVLayer
from speckit.methods import dflash as _dflash
from speckit.methods.common import check_k_range, offset_layer_runtime_name

NAME = "dspark"
VLLM_METHOD = "dspark"
SPECULATORS_TYPE = "dspark"
PARALLEL = True
HAS_CHECKPOINT = True
CPU_SUPPORTED = False
SUPPORTED_MARKOV_HEADS = ("vanilla",)  # vLLM's qwen3_dspark implements only the vanilla head

block_size = _dflash.block_size


def default_k(config: dict[str, Any]) -> int | None:
    return block_size(config)


def check_k(config: dict[str, Any], k: int) -> None:
    b = block_size(config)
    check_k_range(NAME, k, lo=b, hi=b,
                  why=f"DSpark drafts a whole block; use num_speculative_tokens = block size ({b})")


def lookahead_slots(k: int) -> int:
    return k + 1


def speculative_config(*, model: str | None, k: int, config: dict[str, Any]) -> dict[str, Any]:
    return {"method": VLLM_METHOD, "model": model, "num_speculative_tokens": k}


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    return _dflash.draft_kv_layers(config)


def runtime_module_name(ckpt_name: str, *, target_num_layers: int) -> str:
    """vLLM's run-time module name for a checkpoint tensor (Quark `exclude` must use it)."""
    return offset_layer_runtime_name(ckpt_name, target_num_layers=target_num_layers)
