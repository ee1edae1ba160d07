"""Seconds per target verify pass and per draft step, from model shapes and a GPU's datasheet.

Roofline per matmul and per attention (a smooth max of bytes / bandwidth and FLOPs / peak; an
attention's GQA re-reads cost HBM only past L2, decoding splits K/V over idle SMs), plus fixed
per-pass and per-layer overheads; the fractions and overheads are fitted data
(speckit/data/step_costs.json, fitted by bench/step_costs.py --fit), never a speedup.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from speckit.core import PACKAGE_DIR
from speckit.core.gpus import GPU
from speckit.errors import FormatError, PlanError

CONSTANTS_PATH = PACKAGE_DIR / "data" / "step_costs.json"
# the constants bench/step_costs.py --fit adjusts (the rest are structural choices)
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
    source: str = "defaults (not fitted)"

    def for_vllm(self) -> StepConstants:
        """The same fitted rates with vLLM's attention packing of GQA heads for verification."""
        return replace(self, gqa_pack="always")


def load_constants(path: str | Path | None = None) -> StepConstants:
    """The fitted constants shipped with speckit (or a file written by bench --write-constants)."""
    p = Path(path) if path is not None else CONSTANTS_PATH
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        return StepConstants()
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FormatError(f"{p}: not valid JSON ({e})") from e
    known = {f.name for f in fields(StepConstants)}
    vals = raw.get("constants", raw)
    unknown = sorted(set(vals) - known)
    if unknown:
        raise FormatError(f"{p}: unknown step-cost constants {unknown}",
                          hint="known: " + ", ".join(sorted(known)))
    return StepConstants(**vals)


def save_constants(c: StepConstants, path: Path, *, extra: Mapping[str, Any] | None = None) -> None:
    path.write_text(json.dumps({"constants": asdict(c), **(extra or {})}, indent=2) + "\n")


# ---- shapes --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelShape:
    """A dense decoder as one rank computes it."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int  # rows of the lm_head this rank computes
    weight_bytes: float = 2.0  # per weight element as loaded (bf16 2, fp8 1, mxfp4 ~0.53)
    fp8_compute: bool = False  # W8A8: matmuls at the FP8 peak
    qkv_in: int = 0  # input width of q/k/v projections (0 = hidden; EAGLE-3 reads 2 x hidden)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, weight_bytes: float = 2.0,
                    fp8_compute: bool = False, where: str = "config.json") -> ModelShape:
        """From a config.json dict (text_config / transformer_layer_config when nested)."""
        cfg = _layer_config(config)
        if any(cfg.get(k) for k in ("n_routed_experts", "num_experts", "num_local_experts",
                                    "kv_lora_rank")):
            raise PlanError(f"{where}: the step-cost model covers dense decoders with "
                            f"standard attention; this config is MoE or MLA",
                            hint="project speed for a dense target, or measure with "
                            "speckit validate on the hardware")
        hidden = _int(cfg, "hidden_size", where)
        heads = _int(cfg, "num_attention_heads", where)
        kv = int(cfg.get("num_key_value_heads") or heads)
        hd = int(cfg.get("head_dim") or hidden // heads)
        vocab = int(cfg.get("vocab_size") or config.get("vocab_size") or 0)
        if vocab <= 0:
            raise FormatError(f"{where}: required field 'vocab_size' is missing")
        return cls(hidden, _int(cfg, "num_hidden_layers", where), heads, kv, hd,
                   _int(cfg, "intermediate_size", where), vocab, weight_bytes, fp8_compute)

    def per_rank(self, tp: int) -> ModelShape:
        """What one of ``tp`` tensor-parallel ranks holds (vLLM splits heads, MLP and vocab)."""
        if tp == 1:
            return self
        return replace(self, heads=max(1, self.heads // tp), kv_heads=max(1, self.kv_heads // tp),
                       intermediate=-(-self.intermediate // tp), vocab=-(-self.vocab // tp))

    @property
    def layer_params(self) -> int:
        qkv = (self.qkv_in or self.hidden) * (self.heads + 2 * self.kv_heads) * self.head_dim
        return qkv + self.heads * self.head_dim * self.hidden + 3 * self.hidden * self.intermediate

    @property
    def weight_bytes_total(self) -> float:
        """Bytes of weights one pass streams (embedding rows are gathered, not streamed)."""
        return (self.layers * self.layer_params + self.vocab * self.hidden) * self.weight_bytes


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

    def __post_init__(self) -> None:
        if self.style not in DRAFT_STYLES:
            raise ValueError(f"draft style {self.style!r}: use one of {DRAFT_STYLES}")

    @classmethod
    def from_dims(cls, d: Mapping[str, Any]) -> DraftShape:
        """From flat dims (bench/step_costs.py's shapes): config keys plus fc_in, qkv_in, style."""
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
            elif "layers" not in leaf:
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

    @classmethod
    def of(cls, gpu: GPU, *, fp8_compute: bool) -> _Rates:
        if gpu.hbm_bytes_per_s <= 0 or gpu.bf16_flops <= 0:
            raise PlanError(f"GPU {gpu.name!r} has no bandwidth / peak figures for the step model",
                            hint="pick a catalog GPU, or give hbm_tb_s and bf16_tflops in a "
                            "gpus.toml entry (--gpu-file)")
        fp8 = fp8_compute and gpu.native("fp8") and gpu.fp8_flops > 0
        return cls(gpu.hbm_bytes_per_s, gpu.fp8_flops if fp8 else gpu.bf16_flops,
                   gpu.link_bytes_per_s)


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


def _layers(tokens: int, batch: int, q: int, span: int, s: ModelShape, r: _Rates,
            c: StepConstants, kv_bytes: float, *, layers: int | None = None) -> StepCost:
    """``layers`` decoder layers over ``tokens`` = batch x q tokens attending to ``span``."""
    n = s.layers if layers is None else layers
    one = (_linear(tokens, s.qkv_in or s.hidden, (s.heads + 2 * s.kv_heads) * s.head_dim, s, r, c)
           + _attention(batch, q, span, s, r, c, kv_bytes)
           + _linear(tokens, s.heads * s.head_dim, s.hidden, s, r, c)
           + _linear(tokens, s.hidden, 2 * s.intermediate, s, r, c)
           + _linear(tokens, s.intermediate, s.hidden, s, r, c))
    over = c.layer_overhead_s
    return StepCost(n * (one.total_s + over), n * one.memory_s, n * one.compute_s, n * over)


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
                constants: StepConstants | None = None, kv_bytes: float = 2.0) -> StepCost:
    """One target forward of ``batch`` sequences verifying ``q`` tokens each at KV context
    ``ctx`` (q = 1 is plain decoding), logits for every token; ``shape`` is the whole model."""
    _check(batch=batch, q=q, ctx=ctx, tp=tp)
    c = constants or load_constants()
    s = shape.per_rank(tp)
    r = _Rates.of(gpu, fp8_compute=s.fp8_compute)
    tokens = batch * q
    return (_overhead(c) + _layers(tokens, batch, q, ctx + q, s, r, c, kv_bytes)
            + _linear(tokens, s.hidden, s.vocab, s, r, c) + _allreduce(tokens, s, r, c, tp))


def target_step_time(shape: ModelShape, **kw: Any) -> float:
    return target_step(shape, **kw).total_s


def draft_step(draft: DraftShape, *, batch: int, k: int, ctx: int, gpu: GPU, tp: int = 1,
               constants: StepConstants | None = None, kv_bytes: float = 2.0) -> StepCost:
    """Everything the drafter runs to propose ``k`` tokens for ``batch`` sequences at context
    ``ctx`` after a verify step of q = k + 1 tokens (``draft`` is per model; TP = draft TP)."""
    _check(batch=batch, q=k, ctx=ctx, tp=tp)
    c = constants or load_constants()
    d = draft.per_rank(tp)
    s, q = d.body, k + 1
    r = _Rates.of(gpu, fp8_compute=s.fp8_compute)
    cost = _linear(batch * q, d.fc_in, s.hidden, s, r, c)

    def head(tokens: int) -> StepCost:
        return (_linear(tokens, s.hidden, s.vocab, s, r, c)
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


__all__ = ["DRAFT_STYLES", "FITTED", "DraftShape", "ModelShape", "StepConstants", "StepCost",
           "draft_step", "draft_step_time", "load_constants", "save_constants",
           "target_step", "target_step_time"]
