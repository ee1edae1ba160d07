"""A deployment's memory plan on one TP rank: weights, KV cache, overheads, the verdict.

`evaluate` composes the steps (each a pure function returning a small result) into a PlanResult.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from speckit.core.methods import KVLayer
from speckit.core.plan.dims import check_tp, kv_heads, target_kv_layers
from speckit.core.plan.inputs import PlanInputs, Settings
from speckit.core.plan.kv import KV_DTYPES, Groups, block_size, kv_groups
from speckit.core.plan.overhead import estimate_overhead
from speckit.core.plan.report import KVReport, OverheadReport, PlanResult, WeightsReport
from speckit.core.plan.scenarios import Deployment, draft_cost, gib, requested_bytes, scenario
from speckit.core.plan.weights import VOCAB_PADDING, DraftWeightsInput, draft_weights, rank_bytes


def check_parallel(inp: PlanInputs, st: Settings) -> None:
    """TP must divide the target's heads (and the draft's, for a separate draft model)."""
    check_tp(inp.target_config, st.tp, what=inp.target_name)
    mod = inp.method
    if inp.has_draft and inp.draft_config is not None and not mod.weights_in_target:
        check_tp(inp.draft_config, st.draft_tp, what=inp.draft_name or "draft")


def plan_weights(inp: PlanInputs, st: Settings) -> WeightsReport:
    """Target and draft weight bytes per rank; what the draft borrows; notes on both."""
    target, _ = rank_bytes(inp.target_tensors, tp=st.tp,
                           kv_heads=kv_heads(inp.target_config, where=inp.target_name),
                           model_bytes=inp.model_bytes, skip=set(inp.mtp_in_target))
    report = WeightsReport(target, 0, 0, [], st.draft_quant, 0, [])
    if inp.has_draft and inp.draft_tensors:
        d_kv = kv_heads(inp.draft_config, where="draft") if inp.draft_config else None
        d = draft_weights(DraftWeightsInput(inp.draft_tensors, inp.target_tensors,
                                            inp.draft_shares, d_kv,
                                            not inp.method.weights_in_target),
                          tp=st.draft_tp, target_tp=st.tp, model_bytes=inp.model_bytes,
                          quant=st.draft_quant)
        report = WeightsReport(target, d.bytes, d.stored_bytes, d.borrowed, st.draft_quant,
                               d.quant_saving_bytes, d.notes)
    if inp.mtp_in_target:
        report.notes.append(f"MTP layers ({len(inp.mtp_in_target)} tensors) ship in the target "
                            f"checkpoint; counted as the draft")
    return report


@dataclass(frozen=True)
class KVPlan:
    report: KVReport
    with_draft: Groups
    without_draft: Groups


def _kv_notes(inp: PlanInputs, st: Settings, t_layers: list[KVLayer],
              d_layers: list[KVLayer]) -> list[str]:
    notes = []
    mla = any(x.mla_latent is not None for x in t_layers + d_layers)
    if any(x.mla_latent for x in t_layers):
        notes.append("MLA: one (kv_lora_rank + qk_rope_head_dim) latent per token per layer, "
                     "held whole on every TP rank")
    n_sliding = sum(1 for x in t_layers + d_layers if x.sliding_window)
    if n_sliding:
        notes.append(f"{n_sliding} sliding-window layers: per-request KV bounded by the window "
                     f"(vLLM hybrid KV manager); per-token bytes count every layer")
    t_kv = kv_heads(inp.target_config, where=inp.target_name)
    if t_kv and t_kv < st.tp and not mla:
        notes.append(f"{t_kv} KV heads < TP {st.tp}: each rank keeps one replicated head")
    if inp.method is not None and inp.method.shares_target_kv:
        notes.append(f"{inp.method.name}: the Gemma-4 assistant shares the target's KV cache: "
                     "no draft KV")
    return notes


def plan_kv(inp: PlanInputs, st: Settings) -> KVPlan:
    """KV bytes per token per rank and vLLM's KV groups, with and without the draft's layers."""
    dtype_bytes = KV_DTYPES[st.kv_cache_dtype] or inp.model_bytes
    t_layers = target_kv_layers(inp.target_config, where=inp.target_name)
    d_layers: list[KVLayer] = []
    if inp.has_draft:
        d_layers = inp.method.draft_kv_layers(inp.draft_config if inp.draft_config is not None
                                              else inp.target_config)
    bs = block_size(t_layers + d_layers, platform=inp.platform, override=st.block_size)
    # draft layers sit in the same pool as the target's (vLLM offsets their layer names)
    t_pairs = [(x, st.tp) for x in t_layers]
    with_draft = kv_groups(t_pairs + [(x, st.draft_tp) for x in d_layers],
                           dtype_bytes=dtype_bytes, block_size=bs)
    report = KVReport(
        dtype_bytes, bs, len(t_layers), len(d_layers),
        sum(x.bytes_per_token(tp=st.tp, dtype_bytes=dtype_bytes) for x in t_layers),
        sum(x.bytes_per_token(tp=st.draft_tp, dtype_bytes=dtype_bytes) for x in d_layers),
        sum(1 for x in t_layers + d_layers if x.sliding_window), with_draft.bytes_per_block,
        _kv_notes(inp, st, t_layers, d_layers))
    return KVPlan(report, with_draft, kv_groups(t_pairs, dtype_bytes=dtype_bytes, block_size=bs))


def lookahead_slots(inp: PlanInputs, st: Settings) -> int:
    return inp.method.lookahead_slots(st.k) if (inp.method is not None and st.k) else 0


def _budget_assumptions(inp: PlanInputs, st: Settings, kv: KVReport) -> list[str]:
    out = []
    if st.kv_cache_memory_bytes is None:
        out.append(f"budget = ceil(gpu_memory_utilization {st.util} x {inp.gpu.memory_bytes:,} B "
                   f"[{inp.gpu.memory_source}]) = {requested_bytes(inp, st):,} B; the CUDA "
                   f"context sits outside it (vLLM snapshots memory after device init)")
    else:
        out.append(f"KV budget fixed at {st.kv_cache_memory_bytes:,} B (--kv-cache-memory-bytes)")
    out.append(f"weights: safetensors header bytes per TP rank; float tensors at the model dtype "
               f"{inp.model_dtype} (vLLM 'auto' casts float32 to bfloat16); quantized tensors as "
               f"stored; embeddings/lm_head vocab-padded to {VOCAB_PADDING} and split by TP; "
               f"norms replicated")
    out.append(f"KV: {kv.dtype_bytes} B/element ({st.kv_cache_dtype}), block size "
               f"{kv.block_size}; num_blocks = available // bytes_per_block; tokens = "
               f"int(num_blocks / blocks_per_request x max_model_len), as vLLM logs it")
    return out


def _overhead_assumptions(inp: PlanInputs, st: Settings, over: OverheadReport,
                          lookahead: int) -> list[str]:
    om, T, S, has_draft = inp.overhead, st.max_num_batched_tokens, st.max_num_seqs, inp.has_draft
    rest = (f", rejection sampler 2 x {S} x vocab x {om.rejection_bytes_per_logit:g} B, "
            f"drafter forward at its own dims)" if has_draft else ")")
    out = [f"activation peak = max(forward: max_num_batched_tokens {T} x ({om.hidden_copies:g} x "
           f"H + the widest of attention q,k,v,o / MLP {om.mlp_copies:g} x I/TP / MoE topk x "
           f"({om.mlp_copies:g} x I_moe/TP + H)) x {inp.model_bytes} B; sampler: max_num_seqs "
           f"{S} x vocab x {om.sampler_bytes_per_logit:g} B" + rest]
    cap = over.max_capture_size
    if over.cudagraph_bytes:
        out.append(f"CUDA graphs: {gib(om.graph_fixed_bytes)} GiB fixed + one forward at the "
                   f"largest capture size ({cap} tokens)"
                   + (f"; the draft's own graphs: {gib(om.draft_graph_fixed_bytes)} GiB + its "
                      f"forward at {cap}" if has_draft else ""))
    else:
        out.append("CUDA graphs: none (enforce_eager or CPU)")
    tp_note = (f", + {gib(om.comm_bytes_tp)} GiB NCCL/RCCL buffers for TP={st.tp}"
               if st.tp > 1 else "")
    out.append(f"runtime outside torch: {gib(over.runtime_bytes)} GiB ({inp.gpu.vendor}{tp_note})")
    if has_draft:
        out.append(f"drafter buffers: max_num_batched_tokens x (2 x draft hidden x "
                   f"{inp.model_bytes} B + 24 B); each request reserves {lookahead} lookahead KV "
                   f"slots ({'k+1' if lookahead == (st.k or 0) + 1 else 'k'}) beyond its tokens")
    if inp.platform == "cpu":
        out.append("CPU backend: KV budget is VLLM_CPU_KVCACHE_SPACE / --kv-cache-memory-bytes; "
                   "no CUDA graphs")
    return out


def _checks(inp: PlanInputs, st: Settings) -> list[str]:
    """Warnings that do not stop vLLM (refusals are reasons, never checks)."""
    if st.kv_cache_dtype.startswith("fp8") and not inp.gpu.native("fp8"):
        return [(f"{inp.gpu.name} has no native FP8; fp8 KV is stored at 8 bits but attention "
                f"backends may not support it there")]
    return []


def _settings(inp: PlanInputs, st: Settings, kv: KVReport) -> dict:
    return {"gpu_memory_utilization": st.util, "max_model_len": st.max_model_len,
            "max_num_seqs": st.max_num_seqs, "max_num_batched_tokens": st.max_num_batched_tokens,
            "kv_cache_dtype": st.kv_cache_dtype, "draft_quant": st.draft_quant,
            "block_size": kv.block_size, "enforce_eager": st.enforce_eager,
            "kv_cache_memory_bytes": st.kv_cache_memory_bytes, "model_dtype": inp.model_dtype,
            "platform": inp.platform, "overhead_model": asdict(inp.overhead)}


def evaluate(inp: PlanInputs, st: Settings) -> PlanResult:
    """The whole plan for one set of settings: raises PlanError for TP that does not divide."""
    check_parallel(inp, st)
    weights = plan_weights(inp, st)
    kv = plan_kv(inp, st)
    over = estimate_overhead(inp, st, n_draft_layers=kv.report.draft_layers)
    lookahead = lookahead_slots(inp, st)
    over_without = over.total_bytes - over.draft_total_bytes
    without = scenario(inp, st, Deployment(weights.target_bytes, over_without, kv.without_draft,
                                           0, False))
    withd = scenario(inp, st, Deployment(weights.target_bytes + weights.draft_bytes,
                                         over.total_bytes, kv.with_draft, lookahead, True)) \
        if inp.has_draft else without
    mod, g = inp.method, inp.gpu
    return PlanResult(
        target=inp.target_name, draft=inp.draft_name if inp.has_draft else None,
        method=mod.name if mod else None, vllm_method=mod.vllm_method if mod else None,
        k=st.k, lookahead_slots=lookahead,
        gpu={"name": g.name, "vendor": g.vendor, "memory_bytes": g.memory_bytes,
             "memory_source": g.memory_source, "formats": dict(g.formats)},
        tp=st.tp, draft_tp=st.draft_tp, settings=_settings(inp, st, kv.report),
        weights=weights, kv=kv.report, overhead=over, with_draft=withd, without_draft=without,
        draft_cost=draft_cost(without, withd),
        verdict="starts" if withd.starts else "will not start", reasons=list(withd.reasons),
        checks=_checks(inp, st), tries=[],
        assumptions=_budget_assumptions(inp, st, kv.report)
        + _overhead_assumptions(inp, st, over, lookahead))
