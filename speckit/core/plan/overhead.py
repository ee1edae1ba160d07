"""The non-weight, non-KV part of vLLM's memory budget: activations, CUDA graphs, runtime.

vLLM measures these at start-up (profile run, graph capture); this estimates them from model dims.
"""

from __future__ import annotations

from dataclasses import dataclass

from speckit.core.plan.dims import Dims, dims
from speckit.core.plan.inputs import OverheadModel, PlanInputs, Settings
from speckit.core.plan.report import OverheadReport


def act_per_token(d: Dims, *, tp: int, om: OverheadModel) -> float:
    """Transient activation elements per token of one forward (the widest block)."""
    q = d.q_heads // tp if d.q_heads >= tp else 1
    kv = max(1, d.kv_heads // tp)
    attn = (2 * q + 2 * kv) * d.head_dim
    mlp = om.mlp_copies * -(-d.inter // tp)
    moe = d.topk * (om.mlp_copies * -(-d.moe_inter // tp) + d.hidden) if d.topk else 0
    return om.hidden_copies * d.hidden + max(attn, mlp, moe)


def max_capture_size(inp: PlanInputs, st: Settings) -> int:
    """vLLM's largest CUDA-graph capture size: 2 x the decode batch's query tokens, capped."""
    decode_q = 1 + (st.k or 0) if inp.has_draft else 1
    cap = 1024 if inp.gpu.name.upper().startswith("B") else 512
    return min(st.max_num_seqs * decode_q * 2, cap)


@dataclass(frozen=True)
class _Peaks:
    without: float  # activation peak of the target alone
    with_draft: float
    draft_buffers: float


def _draft_dims(inp: PlanInputs, n_draft_layers: int) -> Dims | None:
    """The drafter's own dims (None when its layers live in the target and size like them)."""
    if inp.draft_config is None or inp.method is None or inp.method.weights_in_target:
        return None
    return dims(inp.draft_config, layers=n_draft_layers or None)


def _peaks(inp: PlanInputs, st: Settings, td: Dims, dd: Dims | None) -> _Peaks:
    om, T, mb = inp.overhead, st.max_num_batched_tokens, inp.model_bytes
    act_t = act_per_token(td, tp=st.tp, om=om) * T * mb
    vocab = td.vocab  # logits are gathered to the full vocabulary before sampling
    sampler = st.max_num_seqs * vocab * om.sampler_bytes_per_logit
    if not inp.has_draft:
        peak = max(act_t, sampler)
        return _Peaks(peak, peak, 0.0)
    # the drafter keeps input buffers of max_num_batched_tokens rows (hidden, embeds,
    # ids/positions/masks); EAGLE-3/DFlash also stage the concatenated aux hidden states
    if dd is not None:
        act_d = act_per_token(dd, tp=st.draft_tp, om=om) * T * mb
        buffers = T * (2 * (dd.hidden or td.hidden) * mb + 24)
    else:  # MTP layers live with the target and are sized like one of its layers
        act_d = act_t
        buffers = T * (2 * td.hidden * mb + 24)
    rejection = max(0.0, 2 * st.max_num_seqs * vocab * om.rejection_bytes_per_logit - sampler)
    return _Peaks(max(act_t, sampler), max(act_t, sampler + rejection, act_d), buffers)


def _graphs(inp: PlanInputs, st: Settings, td: Dims, dd: Dims | None,
            max_cap: int) -> tuple[float, float]:
    """(target, draft) CUDA-graph bytes: none with enforce_eager and on CPU."""
    if st.enforce_eager or inp.platform == "cpu":
        return 0.0, 0.0
    om, mb = inp.overhead, inp.model_bytes
    graphs = om.graph_fixed_bytes + act_per_token(td, tp=st.tp, om=om) * max_cap * mb
    if not inp.has_draft:
        return graphs, 0.0
    draft = om.draft_graph_fixed_bytes + act_per_token(dd or td, tp=st.draft_tp, om=om) \
        * max_cap * mb
    return graphs, draft


def runtime_bytes(inp: PlanInputs, st: Settings) -> int:
    om = inp.overhead
    vendor = inp.gpu.vendor if inp.platform != "cpu" else "cpu"
    runtime = om.runtime_bytes.get(vendor, om.runtime_default_bytes)
    return runtime + (om.comm_bytes_tp if st.tp > 1 else 0)


def estimate_overhead(inp: PlanInputs, st: Settings, *, n_draft_layers: int) -> OverheadReport:
    """Activation peak, CUDA graphs, runtime and drafter buffers, with and without the draft."""
    td = dims(inp.target_config)
    dd = _draft_dims(inp, n_draft_layers)
    peaks = _peaks(inp, st, td, dd)
    max_cap = max_capture_size(inp, st)
    graphs, graphs_d = _graphs(inp, st, td, dd, max_cap)
    runtime = runtime_bytes(inp, st)
    over_without = int(peaks.without + graphs + runtime)
    over_with = int(peaks.with_draft + graphs + graphs_d + runtime + peaks.draft_buffers)
    return OverheadReport(int(peaks.with_draft), int(peaks.with_draft - peaks.without),
                          int(graphs + graphs_d), int(graphs_d), int(runtime),
                          int(peaks.draft_buffers), over_with, over_with - over_without, max_cap)
