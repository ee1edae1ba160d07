"""The checked inputs of one plan: the models as header data, the device, the vLLM settings.

Built by speckit.plan after flag validation; everything downstream only reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from speckit.core.gpus import GPU, GiB
from speckit.core.methods import MethodSpec
from speckit.core.plan.dims import LengthLimit
from speckit.core.plan.weights import HeaderTensor


@dataclass(frozen=True)
class OverheadModel:
    """Coefficients of the non-weight, non-KV part of vLLM's budget; every term is printed.

    vLLM measures these at start-up (profile run, CUDA-graph capture); speckit cannot, so it
    estimates them from the model dims. Override any field to match what your vLLM logs say.
    """

    # transient peak of the profile forward, per token of max_num_batched_tokens, in activation
    # elements: residual + normed hidden (2*H) plus the widest block (MLP: gate_up 2*I + act I;
    # attention: q, k, v, output; MoE: fused_moe caches topk*(3*I_moe) + topk*H)
    hidden_copies: float = 2.0
    mlp_copies: float = 3.0
    # sampler warm-up on max_num_seqs rows of vocab logits: fp32 logits, probs, exponential noise
    # and their quotient (16.0 measured on an H200 for a replica of vLLM's steps,
    # benchmarks/results/plan_h200.txt)
    sampler_bytes_per_logit: float = 16.0
    # rejection-sampler warm-up with spec decode, per element of its 2*max_num_seqs rows of fp32
    # logits: the logits, the kept bonus rows, the target copy, probs, noise (14.0 measured)
    rejection_bytes_per_logit: float = 14.0
    # CUDA graphs: one pool holding a forward's intermediates at the largest capture size, plus a
    # fixed cost for the captured graphs themselves (target, and draft which has its own graphs)
    graph_fixed_bytes: int = int(0.25 * GiB)
    draft_graph_fixed_bytes: int = int(0.10 * GiB)
    # allocations outside torch after vLLM's start snapshot (BLAS workspaces, runtime libraries)
    runtime_bytes: Mapping[str, int] = field(default_factory=lambda: {
        "nvidia": int(0.35 * GiB), "amd": int(0.50 * GiB), "cpu": 0})
    runtime_default_bytes: int = int(0.40 * GiB)
    comm_bytes_tp: int = int(0.40 * GiB)  # NCCL/RCCL + custom all-reduce buffers when TP > 1


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
