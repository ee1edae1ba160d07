"""Gemma-4 "assistant": an MTP drafter that shares the target's KV cache (adds no KV of its own).

Kept in its native HF layout (vLLM loads it as gemma4_mtp, method mtp). FORMATS.md 2.7.3.
"""

from __future__ import annotations

from typing import Any

from speckit.methods import KVLayer
from speckit.methods.common import check_k_range

NAME = "gemma4_assistant"
VLLM_METHOD = "mtp"
SPECULATORS_TYPE = None
PARALLEL = False
HAS_CHECKPOINT = True


def default_k(config: dict[str, Any]) -> int | None:
    return None


def check_k(config: dict[str, Any], k: int) -> None:
    check_k_range(NAME, k, lo=1)


def lookahead_slots(k: int) -> int:
    return k


def speculative_config(*, model: str | None, k: int, config: dict[str, Any]) -> dict[str, Any]:
    return {"method": VLLM_METHOD, "model": model, "num_speculative_tokens": k}


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    return []  # K/V come from the target's cache
