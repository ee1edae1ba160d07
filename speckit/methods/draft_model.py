"""draft_model: a small causal LM of the same tokenizer drafting token by token.

Any checkpoint vLLM can load as a causal LM; every draft layer adds KV.
"""

from __future__ import annotations

from typing import Any

from speckit.methods import KVLayer
from speckit.methods.common import check_k_range, draft_layer_kv

NAME = "draft_model"
VLLM_METHOD = "draft_model"
SPECULATORS_TYPE = None
PARALLEL = False
HAS_CHECKPOINT = True


def default_k(config: dict[str, Any]) -> int | None:
    return None


def check_k(config: dict[str, Any], k: int) -> None:
    check_k_range(NAME, k, lo=1)


def lookahead_slots(k: int) -> int:
    return k


def extra_query_slots(k: int) -> int:
    return 1


def speculative_config(*, model: str | None, k: int, config: dict[str, Any]) -> dict[str, Any]:
    return {"method": VLLM_METHOD, "model": model, "num_speculative_tokens": k}


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    return draft_layer_kv(config)
