"""P-EAGLE: an EAGLE-3 head that drafts all k positions in one forward (parallel drafting).

vLLM serves it as method eagle3 with parallel_drafting=true and a mask token; FORMATS.md 2.2.
"""

from __future__ import annotations

from typing import Any

from speckit.methods import KVLayer
from speckit.methods.common import (
    check_k_range,
    draft_layer_kv,
    layer_config,
    offset_layer_runtime_name,
    speculators_k,
)

NAME = "peagle"
VLLM_METHOD = "eagle3"
SPECULATORS_TYPE = "peagle"
PARALLEL = True
HAS_CHECKPOINT = True


def default_k(config: dict[str, Any]) -> int | None:
    return speculators_k(config)


def check_k(config: dict[str, Any], k: int) -> None:
    check_k_range(NAME, k, lo=1)


def lookahead_slots(k: int) -> int:
    return k


def extra_query_slots(k: int) -> int:
    """Extra per-request query slots vLLM reserves while drafting (max_num_new_slots_for_drafting)."""
    return k - 1


def speculative_config(*, model: str | None, k: int, config: dict[str, Any]) -> dict[str, Any]:
    return {"method": VLLM_METHOD, "model": model, "num_speculative_tokens": k,
            "parallel_drafting": True}


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    return draft_layer_kv(config, int(layer_config(config).get("num_hidden_layers", 1)))


def runtime_module_name(ckpt_name: str, *, target_num_layers: int) -> str:
    """vLLM's run-time module name for a checkpoint tensor (Quark `exclude` must use it)."""
    return offset_layer_runtime_name(ckpt_name, target_num_layers=target_num_layers)
