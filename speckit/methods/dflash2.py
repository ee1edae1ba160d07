"""DFlash2: DFlash plus token-conditioned convolutions and a low-rank candidate selector.

speculators layout `dflash2`, which vLLM serves as method dflash with DFlash2DraftModel. FORMATS.md 2.4.
"""

from __future__ import annotations

from typing import Any

from speckit.methods import KVLayer
from speckit.methods import dflash as _dflash
from speckit.methods.common import offset_layer_runtime_name

NAME = "dflash2"
VLLM_METHOD = "dflash"
SPECULATORS_TYPE = "dflash2"
PARALLEL = True
HAS_CHECKPOINT = True

block_size = _dflash.block_size
max_k = _dflash.max_k
default_k = _dflash.default_k


def check_k(config: dict[str, Any], k: int) -> None:
    _dflash.check_k(config, k)


def lookahead_slots(k: int) -> int:
    return k + 1


def speculative_config(*, model: str | None, k: int, config: dict[str, Any]) -> dict[str, Any]:
    return {"method": VLLM_METHOD, "model": model, "num_speculative_tokens": k}


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    return _dflash.draft_kv_layers(config)


def runtime_module_name(ckpt_name: str, *, target_num_layers: int) -> str:
    """vLLM's run-time module name for a checkpoint tensor (Quark `exclude` must use it)."""
    return offset_layer_runtime_name(ckpt_name, target_num_layers=target_num_layers)
