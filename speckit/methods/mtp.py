"""MTP: multi-token-prediction layers that ship inside the target checkpoint (`mtp.*`).

vLLM serves them with method mtp and no separate model; speckit can extract the head for
inspection and sizing. FORMATS.md 2.7.
"""

from __future__ import annotations

from typing import Any

from speckit.methods import KVLayer
from speckit.methods.common import attn_dims, check_k_range, layer_config

NAME = "mtp"
VLLM_METHOD = "mtp"
SPECULATORS_TYPE = "mtp"
PARALLEL = False
HAS_CHECKPOINT = True
CPU_SUPPORTED = False


def n_predict(config: dict[str, Any]) -> int:
    cfg = layer_config(config)
    return int(cfg.get("num_nextn_predict_layers") or config.get("num_nextn_predict_layers") or 1)


def default_k(config: dict[str, Any]) -> int | None:
    return n_predict(config)


def check_k(config: dict[str, Any], k: int) -> None:
    n = n_predict(config)
    check_k_range(NAME, k, lo=1)
    if k > n and k % n:
        check_k_range(NAME, k, lo=n, hi=n,
                      why=f"vLLM requires k to be a multiple of the {n} MTP layers when k > {n}")


def lookahead_slots(k: int) -> int:
    return k


def speculative_config(*, model: str | None, k: int, config: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"method": VLLM_METHOD, "num_speculative_tokens": k}
    if model:
        out["model"] = model
    return out


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    cfg = layer_config(config)
    n = n_predict(config)
    if cfg.get("kv_lora_rank"):
        latent = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim") or 0)
        return [KVLayer(1, latent, mla_latent=latent) for _ in range(n)]
    _, _, kv, hd = attn_dims(cfg)
    return [KVLayer(kv, hd) for _ in range(n)]
