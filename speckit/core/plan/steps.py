"""Seconds per target verify pass and per draft step, from model shapes and a GPU's datasheet.

Roofline per matmul and per attention (a smooth max of bytes / bandwidth and FLOPs / peak; an
attention's GQA re-reads cost HBM only past L2, decoding splits K/V over idle SMs), plus fixed
per-pass and per-layer overheads; the fractions and overheads are fitted data
(speckit/data/step_costs.json, fitted by benchmarks/step_costs.py --fit; speckit.io.datafiles reads
it), never a speedup.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from speckit.core.gpus import GPU
from speckit.errors import FormatError, PlanError

# the constants benchmarks/step_costs.py --fit adjusts (the rest are structural choices)
FITTED = ("bw_frac", "flop_frac", "flop_frac_large", "flop_m_half", "attn_bw_frac",
          "attn_flop_frac", "attn_unit_bytes_per_s", "attn_parallel_units", "pass_overhead_s",
          "layer_overhead_s", "softness", "l2_bytes")
DRAFT_STYLES = ("chain", "block", "append")


@dataclass(frozen=True)
class StepConstants:
    """Achievable fractions of a GPU's datasheet rates and the fixed costs of a pass."""

    bw_frac: float = 0.7  # of HBM bandwidth, streaming weights and activations through matmuls
    flop_frac: float = 0.75  # of dense peak, in matmuls over few token rows
    # of dense peak as the token rows M grow: more rows fill more output tiles and waves, so
    # efficiency rises from flop_frac towards this as M / (M + flop_m_half); 0: flat flop_frac
    flop_frac_large: float = 0.0
    flop_m_half: float = 256.0
    attn_bw_frac: float = 0.5  # of HBM bandwidth, reading K/V in attention
    attn_flop_frac: float = 0.1  # of dense peak, attention tiles (softmax-bound, padded rows)
    # one attention work unit streams its K/V no faster than this: few units cannot fill the GPU
    attn_unit_bytes_per_s: float = 1e11
    attn_parallel_units: float = 132.0  # work units in flight at once (SMs x occupancy)
    pass_overhead_s: float = 2e-5  # per forward pass (graph launch, sampler, small kernels)
    layer_overhead_s: float = 2e-5  # per decoder layer per pass (kernel tails, norms)
    # L2 that serves K/V re-read by the query heads of a GQA group (fitted: an H200's 50 MB
    # is two partitions, and an SM reads its near one fastest)
    l2_bytes: float = 50e6
    softness: float = 3.0  # p of (mem^p + compute^p)^(1/p); large p is the plain max
    attn_tile_rows: int = 128  # query rows an attention work unit pads to
    # "decode": GQA heads share a K/V read only when q == 1 (PyTorch SDPA / FlashAttention-2);
    # "always": also while verifying q > 1 tokens (vLLM's paged FlashAttention packs GQA)
    gqa_pack: str = "decode"
    allreduce_latency_s: float = 1e-5  # per all-reduce under TP; not measured (one GPU)
    # per MoE layer per pass: routing top-k, sorting token rows by expert, the grouped GEMMs'
    # fixed cost (torch._grouped_mm in a CUDA graph: benchmarks/results/gpu_profile_h200.json)
    moe_layer_overhead_s: float = 1e-5
    # an MoE layer's grouped GEMMs reach this fraction of the matmul rate's fraction (few rows
    # per expert, ragged tiles)
    moe_flop_eff: float = 0.5
    # MLA latent attention: fractions of HBM bandwidth / dense peak (0: use attn_bw_frac /
    # attn_flop_frac); fitted by calibrate from its MLA points
    mla_bw_frac: float = 0.0
    mla_flop_frac: float = 0.0
    # routing locality: the share of a token's routed experts that the previous token of the
    # same sequence already picked, beyond chance (0: independent uniform routing). A verify
    # pass of q tokens a sequence then reads the experts of 1 + (q - 1)(1 - route_reuse)
    # independent tokens (distinct_routings); not a GPU property: the shipped engine fit sets it
    route_reuse: float = 0.0
    source: str = "defaults (not fitted)"

    def for_vllm(self) -> StepConstants:
        """The same fitted rates with vLLM's attention packing of GQA heads for verification."""
        return replace(self, gqa_pack="always")


def constants_from(raw: Mapping[str, Any], *, where: str) -> StepConstants:
    """StepConstants from a step_costs.json document (``{"constants": {...}}`` or the bare
    table); FormatError naming ``where`` for an unknown key. speckit.io.datafiles reads it."""
    known = {f.name for f in fields(StepConstants)}
    vals = raw.get("constants", raw)
    unknown = sorted(set(vals) - known)
    if unknown:
        raise FormatError(f"{where}: unknown step-cost constants {unknown}",
                          hint="known: " + ", ".join(sorted(known)))
    return StepConstants(**vals)


def constants_document(c: StepConstants, *, extra: Mapping[str, Any] | None = None
                       ) -> dict[str, Any]:
    """The step_costs.json document of ``c`` (what constants_from reads back)."""
    return {"constants": asdict(c), **(extra or {})}


# ---- shapes --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelShape:
    """A decoder as one rank computes it: dense or MoE MLP, standard (GQA) or MLA attention."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense MLP width (the leading dense layers of an MoE model)
    vocab: int  # rows of the lm_head this rank computes
    weight_bytes: float = 2.0  # per weight element as loaded (bf16 2, fp8 1, mxfp4 ~0.53)
    fp8_compute: bool = False  # W8A8: matmuls at the FP8 peak
    qkv_in: int = 0  # input width of q/k/v projections (0 = hidden; EAGLE-3 reads 2 x hidden)
    # MoE (experts 0: dense MLP in every layer)
    experts: int = 0  # routed experts of the whole model
    topk: int = 0
    moe_inter: int = 0  # one expert's width (this rank's slice under TP)
    shared_inter: int = 0  # summed width of the shared experts (this rank's slice)
    dense_layers: int = 0  # leading layers with a dense MLP (first_k_dense_replace)
    expert_bytes: float = 0.0  # per routed-expert weight element (0: weight_bytes)
    expert_native: bool = False  # routed-expert matmuls at the FP8 rate
    ep: int = 1  # expert-parallel ranks: each holds experts / ep whole experts
    # MLA (kv_lora 0: standard attention with kv_heads x head_dim K and V)
    kv_lora: int = 0
    q_lora: int = 0
    rope_dim: int = 0
    nope_dim: int = 0
    v_dim: int = 0
    # sliding-window attention: this many layers attend to at most ``window`` positions
    window: int = 0
    window_layers: int = 0

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, weight_bytes: float = 2.0,
                    fp8_compute: bool = False, where: str = "config.json",
                    expert_bytes: float = 0.0, expert_native: bool = False) -> ModelShape:
        """From a config.json dict (text_config / transformer_layer_config when nested)."""
        cfg = _layer_config(config)
        hidden = _int(cfg, "hidden_size", where)
        heads = _int(cfg, "num_attention_heads", where)
        layers = _int(cfg, "num_hidden_layers", where)
        _refuse_unpriced_layers(cfg, layers, where)
        kv = int(cfg.get("num_key_value_heads") or heads)
        hd = int(cfg.get("head_dim") or hidden // heads)
        vocab = int(cfg.get("vocab_size") or config.get("vocab_size") or 0)
        if vocab <= 0:
            raise FormatError(f"{where}: required field 'vocab_size' is missing")
        moe = _moe_fields(cfg, layers, where)
        inter = int(cfg.get("intermediate_size") or 0)
        if not moe or moe.get("dense_layers"):
            inter = _int(cfg, "intermediate_size", where)
        else:
            inter = 0
        return cls(hidden, layers, heads, kv, hd, inter, vocab, weight_bytes, fp8_compute,
                   expert_bytes=expert_bytes, expert_native=expert_native,
                   **moe, **_mla_fields(cfg), **_window_fields(cfg, layers))

    def per_rank(self, tp: int) -> ModelShape:
        """What one of ``tp`` tensor-parallel ranks holds (vLLM splits heads, MLP and vocab;
        MLA's latent and its down-projections are replicated; with ep > 1 whole experts are
        spread over the ranks instead of each expert being split)."""
        if tp == 1:
            return self
        moe_inter = self.moe_inter if self.ep > 1 else -(-self.moe_inter // tp)
        return replace(self, heads=max(1, self.heads // tp), kv_heads=max(1, self.kv_heads // tp),
                       intermediate=-(-self.intermediate // tp), vocab=-(-self.vocab // tp),
                       moe_inter=moe_inter, shared_inter=-(-self.shared_inter // tp))

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.experts else 0

    @property
    def attn_params(self) -> int:
        """One layer's attention weights (MLA: the absorbed form vLLM runs for decoding)."""
        h = self.heads
        if self.kv_lora:
            qk = self.nope_dim + self.rope_dim
            q = (self.hidden * self.q_lora + self.q_lora * h * qk) if self.q_lora \
                else self.hidden * h * qk
            return (q + self.hidden * (self.kv_lora + self.rope_dim)
                    + h * self.nope_dim * self.kv_lora + h * self.kv_lora * self.v_dim
                    + h * self.v_dim * self.hidden)
        qkv = (self.qkv_in or self.hidden) * (h + 2 * self.kv_heads) * self.head_dim
        return qkv + h * self.head_dim * self.hidden

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden * self.moe_inter

    @property
    def weight_bytes_total(self) -> float:
        """Bytes of weights one pass streams when every expert is touched (embedding rows are
        gathered, not streamed)."""
        dense = self.layers * self.attn_params + (self.layers - self.moe_layers) * 3 \
            * self.hidden * self.intermediate + self.moe_layers * 3 * self.hidden \
            * self.shared_inter + self.vocab * self.hidden
        eb = self.expert_bytes or self.weight_bytes
        return dense * self.weight_bytes + self.moe_layers * (self.experts // self.ep) \
            * self.expert_params * eb


def _refuse_unpriced_layers(cfg: Mapping[str, Any], layers: int, where: str) -> None:
    """Layer types the model has no price for: named, with the reason."""
    for i, kind in enumerate(list(cfg.get("layer_types") or [])[:layers]):
        if kind not in ("full_attention", "sliding_attention", "attention"):
            raise PlanError(f"{where}: layer {i} is {kind!r}: the step-cost model prices full, "
                            "sliding-window and MLA attention only (linear-attention / Mamba "
                            "layers keep a per-request state it does not model)",
                            hint="measure with speckit validate on the hardware")


def _moe_fields(cfg: Mapping[str, Any], layers: int, where: str) -> dict[str, int]:
    experts = int(cfg.get("n_routed_experts") or cfg.get("num_experts")
                  or cfg.get("num_local_experts") or 0)
    if not experts:
        return {}
    topk = int(cfg.get("num_experts_per_tok") or cfg.get("top_k_experts") or 0)
    width = int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0)
    if topk <= 0 or width <= 0:
        raise FormatError(f"{where}: an MoE config ({experts} experts) needs positive "
                          "num_experts_per_tok and moe_intermediate_size / intermediate_size")
    shared = int(cfg.get("n_shared_experts") or 0) * width \
        + int(cfg.get("shared_expert_intermediate_size") or 0)
    dense = min(int(cfg.get("first_k_dense_replace") or 0), layers)
    return {"experts": experts, "topk": topk, "moe_inter": width, "shared_inter": shared,
            "dense_layers": dense}


def _mla_fields(cfg: Mapping[str, Any]) -> dict[str, int]:
    if not cfg.get("kv_lora_rank"):
        return {}
    return {"kv_lora": int(cfg["kv_lora_rank"]), "q_lora": int(cfg.get("q_lora_rank") or 0),
            "rope_dim": int(cfg.get("qk_rope_head_dim") or 0),
            "nope_dim": int(cfg.get("qk_nope_head_dim") or 0),
            "v_dim": int(cfg.get("v_head_dim") or 0)}


def _window_fields(cfg: Mapping[str, Any], layers: int) -> dict[str, int]:
    window = cfg.get("sliding_window")
    if not window or cfg.get("use_sliding_window") is False:
        return {}
    types = list(cfg.get("layer_types") or [])[:layers]
    n = sum(1 for t in types if t == "sliding_attention") if types else layers
    return {"window": int(window), "window_layers": n}


@dataclass(frozen=True)
class DraftShape:
    """A drafter: its decoder body, how it drafts, and the extra matmuls around the body.

    style "chain": k sequential passes (EAGLE-3, MTP, draft models): the first over the q tokens
    the target just verified, then k-1 one-token passes, each with its lm_head.
    style "block": one pass over k+1 block positions after the K/V of the q new context tokens
    are projected into every layer (DFlash family). style "append": one pass over the q verified
    tokens plus k-1 mask slots (P-EAGLE).
    """

    body: ModelShape  # layers = the draft's decoder layers; vocab = its lm_head rows
    style: str
    fc_in: int = 0  # input width of the fc over the target's aux hidden states (0: none)
    head_params: int = 0  # weights of extra heads applied at each drafted position
    # bytes per weight of the fc and lm_head when they stay unquantized in a quantized draft
    # (Quark and speckit quantize leave lm_head, Quark also fc, at the model dtype); 0: body's
    head_weight_bytes: float = 0.0

    def __post_init__(self) -> None:
        if self.style not in DRAFT_STYLES:
            raise ValueError(f"draft style {self.style!r}: use one of {DRAFT_STYLES}")

    @classmethod
    def from_dims(cls, d: Mapping[str, Any]) -> DraftShape:
        """From flat dims (benchmarks/step_costs.py's shapes): config keys plus fc_in, qkv_in,
        style."""
        body = ModelShape.from_config(d, where="draft dims")
        return cls(replace(body, qkv_in=int(d.get("qkv_in") or 0)), str(d["style"]),
                   int(d.get("fc_in") or 0), int(d.get("head_params") or 0))

    @classmethod
    def from_checkpoint(cls, config: Mapping[str, Any],
                        tensors: Iterable[tuple[str, Sequence[int]]], *, style: str,
                        target: ModelShape, weight_bytes: float = 2.0,
                        fp8_compute: bool = False) -> DraftShape:
        """From a draft's config.json and its tensor (name, shape) list: fc width, q/k/v input
        width and lm_head rows are read off the tensors; other top-level 2-D weights count as
        extra heads. A draft without an lm_head uses the target's (full vocabulary)."""
        cfg = dict(config)
        lay = _layer_config(cfg)
        if not lay.get("vocab_size"):
            lay = {**lay, "vocab_size": target.vocab}
        body = ModelShape.from_config(lay, weight_bytes=weight_bytes, fp8_compute=fp8_compute,
                                      where="draft config")
        fc_in = qkv_in = heads = 0
        vocab = target.vocab
        for name, shape in tensors:
            leaf = name.split(".")
            if len(shape) != 2 or "embed_tokens" in leaf:
                continue
            if leaf[0] in ("fc", "eh_proj") or name.endswith(
                    ("model.fc.weight", ".eh_proj.weight")):
                fc_in = int(shape[1])
            elif name.endswith("self_attn.q_proj.weight") and not qkv_in:
                qkv_in = int(shape[1])
            elif leaf[-2:] == ["lm_head", "weight"]:
                vocab = int(shape[0])
            elif "layers" not in leaf and "midlayer" not in leaf:
                # SpecForge / SafeAILab EAGLE-3 keeps its one decoder layer as midlayer.*:
                # vLLM runs it as layers.0 (after speckit convert), never as an extra head
                heads += int(shape[0]) * int(shape[1])
        if qkv_in == body.hidden:
            qkv_in = 0
        return cls(replace(body, vocab=vocab, qkv_in=qkv_in), style, fc_in, heads)

    def per_rank(self, tp: int) -> DraftShape:
        return replace(self, body=self.body.per_rank(tp))


# ---- the cost of pieces --------------------------------------------------------------------------
@dataclass(frozen=True)
class StepCost:
    """One pass (or one draft step), split by what bounds each piece."""

    total_s: float
    memory_s: float  # sum over pieces of their bytes / achievable bandwidth
    compute_s: float  # sum over pieces of their FLOPs / achievable peak
    overhead_s: float
    comm_s: float = 0.0

    @property
    def bound(self) -> str:
        return "memory" if self.memory_s >= self.compute_s else "compute"

    def __add__(self, o: StepCost) -> StepCost:
        return StepCost(self.total_s + o.total_s, self.memory_s + o.memory_s,
                        self.compute_s + o.compute_s, self.overhead_s + o.overhead_s,
                        self.comm_s + o.comm_s)


_ZERO = StepCost(0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class _Rates:
    bw: float
    peak: float
    link: float
    expert_peak: float = 0.0

    @classmethod
    def of(cls, gpu: GPU, *, fp8_compute: bool, expert_native: bool = False) -> _Rates:
        if gpu.hbm_bytes_per_s <= 0 or gpu.bf16_flops <= 0:
            raise PlanError(f"GPU {gpu.name!r} has no bandwidth / peak figures for the step model",
                            hint="pick a catalog GPU, or give hbm_tb_s and bf16_tflops in a "
                            "gpus.toml entry (--gpu-file)")
        fp8 = fp8_compute and gpu.native("fp8") and gpu.fp8_flops > 0
        efp8 = expert_native and gpu.fp8_flops > 0
        return cls(gpu.hbm_bytes_per_s, gpu.fp8_flops if fp8 else gpu.bf16_flops,
                   gpu.link_bytes_per_s, gpu.fp8_flops if efp8 else gpu.bf16_flops)

    @classmethod
    def for_shape(cls, gpu: GPU, s: ModelShape) -> _Rates:
        return cls.of(gpu, fp8_compute=s.fp8_compute, expert_native=s.expert_native)


def _piece(mem_s: float, comp_s: float, c: StepConstants) -> StepCost:
    p = c.softness
    hi = max(mem_s, comp_s)
    # scaled so the power does not underflow for microsecond pieces
    t = hi * ((mem_s / hi) ** p + (comp_s / hi) ** p) ** (1 / p) if hi > 0 else 0.0
    return StepCost(t, mem_s, comp_s, 0.0)


def _linear(tokens: int, n_in: int, n_out: int, s: ModelShape, r: _Rates,
            c: StepConstants) -> StepCost:
    if tokens <= 0 or n_in <= 0 or n_out <= 0:
        return _ZERO
    moved = n_in * n_out * s.weight_bytes + tokens * (n_in + n_out) * 2
    frac = c.flop_frac
    if c.flop_frac_large > 0:
        frac += (c.flop_frac_large - c.flop_frac) * tokens / (tokens + c.flop_m_half)
    return _piece(moved / (r.bw * c.bw_frac), 2.0 * tokens * n_in * n_out / (r.peak * frac), c)


def _attention(batch: int, q: int, span: int, s: ModelShape, r: _Rates, c: StepConstants,
               kv_bytes: float) -> StepCost:
    """Each work unit (one K/V head, or one query head when GQA is not packed) streams the K/V
    of ``span`` positions once per tile of query rows and runs the tile's two matmuls."""
    group = max(1, s.heads // s.kv_heads)
    if q == 1 or c.gqa_pack == "always":
        units, rows = batch * s.kv_heads, q * group
    else:
        units, rows = batch * s.heads, q
    tiles = -(-rows // c.attn_tile_rows)
    head_kv = tiles * span * s.head_dim * 2 * kv_bytes  # one K/V head's bytes, every tile
    flops = 4.0 * units * tiles * c.attn_tile_rows * span * s.head_dim
    par = max(c.attn_parallel_units, 1.0)
    # too few units split their span across idle SMs (flash-decoding): PyTorch SDPA does so
    # only when decoding (q = 1, what the H200 fit measured); vLLM's FlashAttention picks its
    # number of splits from batch x heads x query tiles for verification too
    splits = 1
    if q == 1 or c.gqa_pack == "always":
        splits = max(1, min(int(par // units), -(-span // c.attn_tile_rows)))
    unique = batch * s.kv_heads * head_kv
    # query heads re-reading their K/V head hit L2 only while the layer's K/V fits in it
    miss = max(0.0, 1.0 - c.l2_bytes / unique) if unique > 0 else 0.0
    hbm = unique + (units * head_kv - unique) * miss
    waves = math.ceil(units * splits / par)
    mem = max(hbm / (r.bw * c.attn_bw_frac), waves * head_kv / splits / c.attn_unit_bytes_per_s)
    return _piece(mem, flops / (r.peak * c.attn_flop_frac), c)


def _mla_attention(batch: int, q: int, span: int, s: ModelShape, r: _Rates, c: StepConstants,
                   kv_bytes: float) -> StepCost:
    """Absorbed MLA over the latent cache: every query head of a sequence reads the same
    (kv_lora + rope) latent per position, so a sequence's cache is read once per step; scores
    over kv_lora + rope and values over kv_lora."""
    lat = s.kv_lora + s.rope_dim
    rows = q * s.heads
    tiles = -(-rows // c.attn_tile_rows)
    seq_kv = span * lat * kv_bytes
    flops = 2.0 * batch * tiles * c.attn_tile_rows * span * (lat + s.kv_lora)
    par = max(c.attn_parallel_units, 1.0)
    splits = max(1, min(int(par // batch), -(-span // c.attn_tile_rows)))
    waves = math.ceil(batch * splits / par)
    mem = max(batch * seq_kv / (r.bw * (c.mla_bw_frac or c.attn_bw_frac)),
              waves * seq_kv / splits / c.attn_unit_bytes_per_s)
    return _piece(mem, flops / (r.peak * (c.mla_flop_frac or c.attn_flop_frac)), c)


def _attention_block(tokens: int, batch: int, q: int, span: int, s: ModelShape, r: _Rates,
                     c: StepConstants, kv_bytes: float) -> StepCost:
    """One layer's attention: projections and the attention over ``span`` positions."""
    if s.kv_lora:
        h, qk = s.heads, s.nope_dim + s.rope_dim
        proj = (_linear(tokens, s.hidden, s.q_lora, s, r, c)
                + _linear(tokens, s.q_lora, h * qk, s, r, c) if s.q_lora
                else _linear(tokens, s.hidden, h * qk, s, r, c))
        return (proj + _linear(tokens, s.hidden, s.kv_lora + s.rope_dim, s, r, c)
                + _linear(tokens, h * s.nope_dim, s.kv_lora, s, r, c)  # absorbed W_UK
                + _mla_attention(batch, q, span, s, r, c, kv_bytes)
                + _linear(tokens, h * s.kv_lora, s.v_dim, s, r, c)  # absorbed W_UV
                + _linear(tokens, h * s.v_dim, s.hidden, s, r, c))
    return (_linear(tokens, s.qkv_in or s.hidden, (s.heads + 2 * s.kv_heads) * s.head_dim,
                    s, r, c)
            + _attention(batch, q, span, s, r, c, kv_bytes)
            + _linear(tokens, s.heads * s.head_dim, s.hidden, s, r, c))


def _dense_mlp(tokens: int, width: int, s: ModelShape, r: _Rates, c: StepConstants) -> StepCost:
    return _linear(tokens, s.hidden, 2 * width, s, r, c) + _linear(tokens, width, s.hidden, s, r, c)


def distinct_routings(batch: int, q: int, reuse: float) -> float:
    """How many independently routed tokens ``batch`` sequences of ``q`` consecutive tokens
    amount to: each sequence's first token, then (1 - reuse) of each later one (the share of
    its experts its predecessor had not picked)."""
    return batch * (1.0 + (q - 1) * (1.0 - min(max(reuse, 0.0), 1.0)))


def experts_touched(tokens: float, s: ModelShape) -> float:
    """Expected distinct routed experts one rank reads for ``tokens`` token rows: each token
    picks topk of the experts (uniform routing), so an expert is missed by all of them with
    probability (1 - topk / experts) ** tokens."""
    if not s.experts or tokens <= 0:
        return 0.0
    local = s.experts / max(s.ep, 1)
    return local * (1.0 - (1.0 - s.topk / s.experts) ** tokens)


def moe_traffic(tokens: int, s: ModelShape, *, routings: float | None = None
                ) -> tuple[float, float]:
    """(bytes, FLOPs) of one MoE layer's routed experts on one rank (``s`` per rank): the
    experts touched by ``routings`` independent tokens (default: every token independent) with
    their gate/up/down weights, plus the token rows in and out; 2 FLOPs per multiply-add over
    the token x expert rows this rank holds."""
    touched = experts_touched(tokens if routings is None else routings, s)
    rows = tokens * s.topk / max(s.ep, 1)
    wbytes = touched * s.expert_params * (s.expert_bytes or s.weight_bytes)
    act = rows * (2 * s.hidden + 3 * s.moe_inter) * 2
    return wbytes + act, 2.0 * rows * s.expert_params


def _moe(tokens: int, s: ModelShape, r: _Rates, c: StepConstants,
         routings: float | None = None) -> StepCost:
    """One MoE layer: router, the touched experts' grouped GEMMs, shared experts, and under
    expert parallelism the all-to-all dispatch and combine of each token's hidden state."""
    router = _linear(tokens, s.hidden, s.experts, replace(s, weight_bytes=2.0), r, c)
    moved, flops = moe_traffic(tokens, s, routings=routings)
    touched = max(experts_touched(tokens if routings is None else routings, s), 1e-9)
    m = tokens * s.topk / max(s.ep, 1) / touched  # token rows per touched expert
    frac = c.flop_frac
    if c.flop_frac_large > 0:
        frac += (c.flop_frac_large - c.flop_frac) * m / (m + c.flop_m_half)
    experts = _piece(moved / (r.bw * c.bw_frac),
                     flops / (r.expert_peak * frac * c.moe_flop_eff), c)
    cost = router + experts + StepCost(c.moe_layer_overhead_s, 0.0, 0.0, c.moe_layer_overhead_s)
    if s.shared_inter:
        cost += _dense_mlp(tokens, s.shared_inter, s, r, c)
    if s.ep > 1:
        t = 2 * (c.allreduce_latency_s + tokens * s.topk * s.hidden * 2 * (s.ep - 1) / s.ep
                 / max(r.link, 1.0))
        cost += StepCost(t, 0.0, 0.0, 0.0, t)
    return cost


def _scaled(cost: StepCost, n: float) -> StepCost:
    return StepCost(*(n * v for v in (cost.total_s, cost.memory_s, cost.compute_s,
                                      cost.overhead_s, cost.comm_s)))


def _layers(tokens: int, batch: int, q: int, span: int, s: ModelShape, r: _Rates,
            c: StepConstants, kv_bytes: float, *, layers: int | None = None) -> StepCost:
    """``layers`` decoder layers over ``tokens`` = batch x q tokens attending to ``span``
    (sliding-window layers to at most their window; MoE layers after the dense ones)."""
    n = s.layers if layers is None else layers
    win = min(s.window_layers, n) if s.window else 0
    attn = _scaled(_attention_block(tokens, batch, q, span, s, r, c, kv_bytes), n - win)
    if win:
        attn += _scaled(_attention_block(tokens, batch, q, min(span, s.window + q), s, r, c,
                                         kv_bytes), win)
    n_moe = min(s.moe_layers, n)
    mlp = _scaled(_dense_mlp(tokens, s.intermediate, s, r, c), n - n_moe)
    if n_moe:
        routings = distinct_routings(batch, q, c.route_reuse) if tokens == batch * q else None
        mlp += _scaled(_moe(tokens, s, r, c, routings), n_moe)
    over = c.layer_overhead_s * n
    return attn + mlp + StepCost(over, 0.0, 0.0, over)


def _overhead(c: StepConstants) -> StepCost:
    return StepCost(c.pass_overhead_s, 0.0, 0.0, c.pass_overhead_s)


def _allreduce(tokens: int, s: ModelShape, r: _Rates, c: StepConstants, tp: int) -> StepCost:
    """Two all-reduces of the hidden states per layer under TP (ring bytes over the link)."""
    if tp <= 1:
        return _ZERO
    one = c.allreduce_latency_s + (2 * (tp - 1) / tp * tokens * s.hidden * 2
                                   / max(r.link, 1.0))
    t = 2 * s.layers * one
    return StepCost(t, 0.0, 0.0, 0.0, t)


# ---- public step costs ---------------------------------------------------------------------------
def target_step(shape: ModelShape, *, batch: int, q: int, ctx: int, gpu: GPU, tp: int = 1,
                constants: StepConstants, kv_bytes: float = 2.0) -> StepCost:
    """One target forward of ``batch`` sequences verifying ``q`` tokens each at KV context
    ``ctx`` (q = 1 is plain decoding), logits for every token; ``shape`` is the whole model."""
    _check(batch=batch, q=q, ctx=ctx, tp=tp)
    c = constants
    s = shape.per_rank(tp)
    r = _Rates.for_shape(gpu, s)
    tokens = batch * q
    return (_overhead(c) + _layers(tokens, batch, q, ctx + q, s, r, c, kv_bytes)
            + _linear(tokens, s.hidden, s.vocab, s, r, c) + _allreduce(tokens, s, r, c, tp))


def target_step_time(shape: ModelShape, **kw: Any) -> float:
    return target_step(shape, **kw).total_s


def draft_step(draft: DraftShape, *, batch: int, k: int, ctx: int, gpu: GPU, tp: int = 1,
               constants: StepConstants, kv_bytes: float = 2.0) -> StepCost:
    """Everything the drafter runs to propose ``k`` tokens for ``batch`` sequences at context
    ``ctx`` after a verify step of q = k + 1 tokens (``draft`` is per model; TP = draft TP)."""
    _check(batch=batch, q=k, ctx=ctx, tp=tp)
    c = constants
    d = draft.per_rank(tp)
    s, q = d.body, k + 1
    r = _Rates.for_shape(gpu, s)
    hs = replace(s, weight_bytes=d.head_weight_bytes, fp8_compute=False) \
        if d.head_weight_bytes else s
    rh = _Rates.for_shape(gpu, hs)
    cost = _linear(batch * q, d.fc_in, s.hidden, hs, rh, c)

    def head(tokens: int) -> StepCost:
        return (_linear(tokens, s.hidden, s.vocab, hs, rh, c)
                + _linear(tokens, 1, d.head_params, s, r, c))

    if d.style == "chain":
        cost += (_overhead(c) + _layers(batch * q, batch, q, ctx + q, s, r, c, kv_bytes)
                 + head(batch))
        for j in range(1, k):
            cost += _overhead(c) + _layers(batch, batch, 1, ctx + q + j, s, r, c, kv_bytes)
            cost += head(batch)
        return cost
    if d.style == "block":
        kv_proj = _linear(batch * q, s.hidden, 2 * s.kv_heads * s.head_dim, s, r, c)
        cost += StepCost(*(s.layers * v for v in (kv_proj.total_s, kv_proj.memory_s,
                                                   kv_proj.compute_s, 0.0)))
        cost += _layers(batch * q, batch, q, ctx + 2 * q, s, r, c, kv_bytes)
    else:  # append: the q verified tokens plus k-1 mask slots in one pass
        n = q + k - 1
        cost += _layers(batch * n, batch, n, ctx + n, s, r, c, kv_bytes)
    return cost + _overhead(c) + head(batch * k)


def draft_step_time(draft: DraftShape, **kw: Any) -> float:
    return draft_step(draft, **kw).total_s


PIECES = ("layers", "moe", "mla", "attn")


def piece_step(kind: str, shape: ModelShape, *, batch: int, q: int, ctx: int, gpu: GPU,
               constants: StepConstants, kv_bytes: float = 2.0) -> StepCost:
    """One measurable piece on one rank (``shape`` is per rank): "layers", the whole forward
    (as target_step); "moe", one MoE layer over batch x q tokens; "mla" / "attn", one layer's
    attention core (latent MLA / GQA) over ``ctx + q`` positions. What calibrate times."""
    _check(batch=batch, q=q, ctx=ctx, tp=1)
    c = constants
    r = _Rates.for_shape(gpu, shape)
    if kind == "layers":
        return target_step(shape, batch=batch, q=q, ctx=ctx, gpu=gpu, constants=c,
                           kv_bytes=kv_bytes)
    # a piece timed alone is one graph replay: it pays the pass overhead too
    if kind == "moe":
        return _overhead(c) + _moe(batch * q, shape, r, c)
    if kind == "mla":
        return _overhead(c) + _mla_attention(batch, q, ctx + q, shape, r, c, kv_bytes)
    if kind == "attn":
        return _overhead(c) + _attention(batch, q, ctx + q, shape, r, c, kv_bytes)
    raise PlanError(f"step model: piece {kind!r}: use one of {PIECES}")


def _check(*, batch: int, q: int, ctx: int, tp: int) -> None:
    for name, v, lo in (("batch", batch, 1), ("q", q, 1), ("ctx", ctx, 0), ("tp", tp, 1)):
        if int(v) != v or v < lo:
            raise PlanError(f"step model: {name} must be an integer >= {lo} (got {v})")


def _int(cfg: Mapping[str, Any], key: str, where: str) -> int:
    v = cfg.get(key)
    if v is None or int(v) <= 0:
        raise FormatError(f"{where}: required field {key!r} is missing or not positive",
                          hint="the step model needs hidden_size, num_hidden_layers, "
                          "num_attention_heads, intermediate_size and vocab_size")
    return int(v)


def _layer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    for key in ("transformer_layer_config", "text_config"):
        inner = config.get(key)
        if isinstance(inner, dict):
            return {**({"vocab_size": config["vocab_size"]} if "vocab_size" in config else {}),
                    **inner}
    return dict(config)


__all__ = ["DRAFT_STYLES", "FITTED", "PIECES", "DraftShape", "ModelShape", "StepConstants",
           "StepCost", "constants_document", "constants_from", "draft_step", "draft_step_time",
           "distinct_routings", "experts_touched", "moe_traffic", "piece_step", "target_step",
           "target_step_time"]
