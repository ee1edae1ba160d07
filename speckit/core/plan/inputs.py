"""The checked inputs of one plan: the models as header data, the device, the vLLM settings.

Built by speckit.ops.plan after flag validation; everything downstream only reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from speckit.core.gpus import GPU
from speckit.core.methods import MethodSpec
from speckit.core.plan.dims import LengthLimit
from speckit.core.plan.weights import HeaderTensor

if TYPE_CHECKING:
    from speckit.core.plan.overhead import OverheadModel


@dataclass(frozen=True)
class PlanInputs:
    """What is deployed, on what: fixed for one plan and for every "try" re-plan of it."""

    target_name: str
    draft_name: str | None
    target_config: dict[str, Any]
    target_tensors: list[HeaderTensor]
    draft_config: dict[str, Any] | None
    draft_tensors: list[HeaderTensor]
    method: MethodSpec | None
    mtp_in_target: frozenset[str]  # target tensors that are the MTP draft's layers
    draft_shares: Mapping[str, bool]
    model_dtype: str
    model_bytes: int
    gpu: GPU
    platform: str  # "cuda" | "rocm" | "cpu"
    overhead: OverheadModel
    length_limit: LengthLimit | None  # the target's longest max_model_len vLLM accepts

    @property
    def has_draft(self) -> bool:
        """A drafter with weights and KV (ngram has neither)."""
        return self.method is not None and self.method.has_checkpoint


@dataclass(frozen=True)
class Settings:
    """vLLM's engine settings; a "try" line is one of these with a field changed."""

    tp: int
    draft_tp: int
    util: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_dtype: str
    draft_quant: str | None
    k: int | None
    block_size: int | None
    enforce_eager: bool
    kv_cache_memory_bytes: int | None
