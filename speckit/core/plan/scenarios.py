"""One deployment (with or without the draft) as vLLM sizes it, and why it would not start.

Each reason quotes the vLLM 0.32 check it mirrors, so a "will not start" can be traced to its
source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from speckit.core.gpus import GiB
from speckit.core.methods import MethodSpec
from speckit.core.plan.inputs import PlanInputs, Settings
from speckit.core.plan.kv import Capacity, Groups, capacity
from speckit.core.plan.report import DraftCost, Scenario


def gib(n: float) -> str:
    return f"{n / GiB:.2f}"


@dataclass(frozen=True)
class Deployment:
    """What one scenario puts on a rank besides the KV cache."""

    weights: int
    overhead: int
    groups: Groups
    lookahead: int  # KV slots each request reserves beyond its tokens
    draft_on: bool


def requested_bytes(inp: PlanInputs, st: Settings) -> int:
    """vLLM's budget: ceil(total memory x gpu_memory_utilization)."""
    return math.ceil(inp.gpu.memory_bytes * st.util)


def in_flight_tokens(inp: PlanInputs, st: Settings) -> int:
    """vLLM max_in_flight_tokens: async scheduling keeps two batches in flight; the CPU platform
    and CPU-side ngram drafting turn async scheduling off (platforms/cpu.py, config/vllm.py)."""
    sync = inp.platform == "cpu" or (inp.method is not None and inp.method.proposes_on_cpu)
    return (1 if sync else 2) * st.max_num_batched_tokens


def _config_reasons(inp: PlanInputs, st: Settings, d: Deployment) -> list[str]:
    """Refusals vLLM raises while building its config, before any memory is measured."""
    why = []
    lim = inp.length_limit
    if lim is not None and st.max_model_len > lim.tokens:
        # vllm/config/model.py _get_and_verify_max_len raises ValueError unless
        # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (positions past the limit give NaNs or out-of-bounds)
        why.append(f"max_model_len {st.max_model_len} is greater than the target's "
                   f"{lim.key} = {lim.tokens}: vLLM refuses it ('User-specified max_model_len "
                   f"is greater than the derived max_model_len'); set --max-model-len "
                   f"{lim.tokens} or less")
    mod = inp.method
    if d.draft_on and mod is not None and not mod.cpu_supported and inp.platform == "cpu":
        why.append(f"{mod.name} does not run on vLLM's CPU backend (V2 model runner or a "
                   "target with native MTP layers is needed)")
    return why


def _available(inp: PlanInputs, st: Settings, d: Deployment) -> tuple[int, list[str]]:
    """Bytes left for the KV cache, and why there are none (or too few) to start."""
    used = d.weights + d.overhead
    if st.kv_cache_memory_bytes is not None:
        avail = int(st.kv_cache_memory_bytes)
        if inp.platform != "cpu" and used + avail > inp.gpu.memory_bytes:
            return avail, [(f"weights + runtime ({gib(used)}) + the requested KV ({gib(avail)}) "
                           f"exceed the device's {gib(inp.gpu.memory_bytes)}")]
        return avail, []
    requested = requested_bytes(inp, st)
    if used > requested:
        return requested - used, [
            (f"weights and runtime need {gib(used)} GiB, more than gpu_memory_utilization "
            f"{st.util} x {gib(inp.gpu.memory_bytes)} = {gib(requested)} GiB")]
    return requested - used, []


def _kv_reasons(st: Settings, avail: int, cap: Capacity) -> list[str]:
    if avail <= 0:
        return ["no memory left for the KV cache ('No available memory for the cache blocks')"]
    if not cap.fits:
        return [(f"one request of max_model_len {st.max_model_len} needs more KV than the "
                f"{gib(avail)} GiB left; vLLM's estimate of the longest that fits is "
                f"{cap.max_len_fit}")]
    return []


def _budget_reasons(inp: PlanInputs, st: Settings, d: Deployment) -> list[str]:
    """The scheduler's token budget against max_num_seqs and the draft's query slots."""
    return token_budget_reasons(inp.method if d.draft_on else None, st.k,
                                tokens=st.max_num_batched_tokens, seqs=st.max_num_seqs)


def token_budget_reasons(mod: MethodSpec | None, k: int | None, *, tokens: int,
                         seqs: int) -> list[str]:
    """Why vLLM refuses ``tokens`` batched tokens per step for ``seqs`` sequences drafting ``k``
    tokens with ``mod`` (None: no draft); [] when it accepts them. Needs no model shape."""
    T, S = tokens, seqs
    why = []
    if T < S:
        why.append(f"max_num_batched_tokens {T} < max_num_seqs {S} (vLLM: "
                   f"'max_num_batched_tokens must be greater than or equal to max_num_seqs')")
    if mod is None or not k:
        return why
    delta = mod.extra_query_slots(k)  # vLLM's max_num_new_slots_for_drafting
    if T <= delta:
        why.append(f"max_num_batched_tokens {T} <= the {delta} extra draft slots per "
                   f"request (vLLM: 'VllmConfig does not have enough slots')")
    if mod.parallel and T < S * (k + 1):
        # vLLM releases that take the draft slots out of the scheduling budget refuse to
        # start (vllm#50708: 'max_num_scheduled_tokens is set to -1792'); the drafter
        # sizes its query buffers for max_num_seqs x (k+1) (vllm#53970)
        why.append(f"{mod.name} drafts k+1={k + 1} query slots per request: "
                   f"max_num_batched_tokens {T} < max_num_seqs {S} x {k + 1} = "
                   f"{S * (k + 1)} (vllm#50708/#53970); set --max-num-batched-tokens "
                   f"{S * (k + 1)} or --max-num-seqs {T // (k + 1)}")
    return why


def scenario(inp: PlanInputs, st: Settings, d: Deployment) -> Scenario:
    """Blocks, tokens and concurrency of one deployment, and every reason it would not start."""
    avail, memory_why = _available(inp, st, d)
    cap = capacity(d.groups, available=avail, max_len=st.max_model_len, lookahead=d.lookahead,
                   in_flight=in_flight_tokens(inp, st))
    why = _config_reasons(inp, st, d) + (memory_why or _kv_reasons(st, avail, cap)) \
        + _budget_reasons(inp, st, d)
    return Scenario(d.weights, d.weights + d.overhead, avail, d.groups.bytes_per_block,
                    cap.num_blocks, cap.kv_tokens, round(cap.max_concurrency, 4),
                    round(cap.concurrency_lookahead, 4), cap.blocks_per_request,
                    not why, why, cap.max_len_fit if not cap.fits else None)


def draft_cost(without: Scenario, withd: Scenario) -> DraftCost:
    """What the draft takes from the same deployment without it."""
    lost = without.kv_tokens - withd.kv_tokens
    return DraftCost(withd.non_kv_bytes - without.non_kv_bytes, lost,
                     round(without.concurrency_with_lookahead - withd.concurrency_with_lookahead,
                           4),
                     round(lost / without.kv_tokens, 4) if without.kv_tokens else 0.0)
