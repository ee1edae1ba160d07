"""What `speckit plan` returns: the plan's result objects, plain dataclasses that --json prints.

The field names are the JSON shape the CLI, validate and the benches read; keep them stable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class WeightsReport:
    target_bytes: int  # per rank, as loaded
    draft_bytes: int  # per rank, as loaded (or as priced with --draft-quant)
    draft_stored_bytes: int  # per rank at the checkpoint's stored dtypes
    draft_borrowed: list[str]  # draft tensors that are the target's (not counted)
    draft_quant: str | None
    draft_quant_saving_bytes: int  # draft bytes --draft-quant saves vs. the draft as stored
    notes: list[str]
    # where each model's tensors came from: its safetensors headers (exact), or computed from a
    # config (a config.json, a cached Hub config, the registry's recorded shape)
    target_from: str = "safetensors headers"
    draft_from: str | None = None


@dataclass
class KVReport:
    dtype_bytes: int
    block_size: int
    target_layers: int
    draft_layers: int
    target_bytes_per_token: int  # per rank, summed over target attention layers
    draft_bytes_per_token: int  # per rank, summed over draft attention layers
    sliding_layers: int  # layers whose per-request KV is window-bounded
    bytes_per_block: int  # vLLM's pool bytes per block (all groups), with the draft
    notes: list[str]


@dataclass
class OverheadReport:
    activation_bytes: int  # transient peak of the profile run (forward, sampler, drafter)
    activation_draft_bytes: int  # the part of that peak the draft adds
    cudagraph_bytes: int
    cudagraph_draft_bytes: int
    runtime_bytes: int  # non-torch runtime (+ TP communication buffers)
    draft_buffers_bytes: int  # the drafter's persistent input buffers
    total_bytes: int
    draft_total_bytes: int
    max_capture_size: int


@dataclass
class Scenario:
    """One deployment (with or without the draft) as vLLM would size it."""

    weights_bytes: int
    non_kv_bytes: int  # weights + overhead
    available_kv_bytes: int
    bytes_per_block: int
    num_blocks: int
    kv_tokens: int  # vLLM's logged "KV cache size: N tokens"
    max_concurrency: float  # vLLM's logged concurrency at max_model_len
    concurrency_with_lookahead: float  # what the scheduler can admit incl. k lookahead slots
    blocks_per_request: int
    starts: bool
    reasons: list[str]
    max_model_len_that_fits: int | None  # vLLM's own estimate when max_model_len does not fit


@dataclass
class DraftCost:
    bytes: int  # weights + KV-independent overhead the draft adds, per rank
    kv_tokens: int  # KV tokens lost to the draft
    concurrency: float  # full-length concurrency lost to the draft (incl. lookahead)
    kv_tokens_fraction: float


@dataclass
class Try:
    flag: str
    effect: str
    starts: bool
    kv_tokens: int
    concurrency: float


@dataclass
class PlanResult:
    target: str
    draft: str | None
    method: str | None
    vllm_method: str | None
    k: int | None
    lookahead_slots: int
    gpu: dict[str, Any]
    tp: int
    draft_tp: int
    settings: dict[str, Any]
    weights: WeightsReport
    kv: KVReport
    overhead: OverheadReport
    with_draft: Scenario
    without_draft: Scenario
    draft_cost: DraftCost
    verdict: str  # "starts" | "will not start"
    reasons: list[str]
    checks: list[str]
    tries: list[Try]
    assumptions: list[str]
    # the pair's pre-flight (core.preflight.Finding, errors first), and what is said about it:
    # that it did not run and why, or that --force-start started past an error
    preflight: list[Any] = field(default_factory=list)
    preflight_notes: list[str] = field(default_factory=list)

    @property
    def starts(self) -> bool:
        return self.verdict == "starts"
