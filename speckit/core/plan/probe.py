"""What `speckit calibrate` measures and how it fits the step model to it (pure: no torch).

The probe times a few pieces on one GPU -- a stack of dense decoder layers, one MoE layer
(grouped GEMMs over the experts its tokens touch), an MLA latent attention and a GQA attention --
at a few (batch, query width, context) points. ``fit_profile`` fits the step model's constants
to those times with the one bounded robust fitter (fit.fit_log_params) and reports the error
of every point; the result is a GPU profile that plan and validate take (--gpu-profile).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from speckit.core.gpus import GPU
from speckit.core.plan import steps as _steps
from speckit.core.plan.fit import BOUNDS, fit_log_params
from speckit.errors import PlanError

# per-rank shapes the probe builds (random bf16 weights): a Llama-3.1-8B layer stack (4 of its
# 32 layers, no lm_head), one TP=4 rank of a Kimi-K2.5 MoE layer (384 experts, each a quarter
# of its 2048 width) and of a MiniMax-M2.5 one (256 experts of 1536 / 4), a Kimi-K2.5 TP=4 MLA
# attention (16 heads over a 512 + 64 latent) and Llama-3.1-8B's GQA attention (32 / 8 heads)
PROBE_SHAPES: dict[str, _steps.ModelShape] = {
    "dense4": _steps.ModelShape(4096, 4, 32, 8, 128, 14336, 0),
    "kimi_moe_tp4": _steps.ModelShape(7168, 1, 16, 1, 128, 0, 0, experts=384, topk=8,
                                      moe_inter=512),
    "minimax_moe_tp4": _steps.ModelShape(3072, 1, 12, 2, 128, 0, 0, experts=256, topk=8,
                                         moe_inter=384),
    "kimi_mla_tp4": _steps.ModelShape(7168, 1, 16, 1, 128, 0, 0, kv_lora=512, q_lora=1536,
                                      rope_dim=64, nope_dim=128, v_dim=128),
    "gqa8b": _steps.ModelShape(4096, 1, 32, 8, 128, 0, 0),
}


@dataclass(frozen=True)
class ProbePoint:
    kind: str  # steps.PIECES
    shape: str  # a PROBE_SHAPES key
    batch: int
    q: int
    ctx: int
    seconds: float = float("nan")
    # attention packs the query heads of a KV head as rows for q > 1 (vLLM's kernels); False:
    # PyTorch SDPA's own GQA (packed only at q = 1), the attention benchmarks/step_costs.py measured
    packed: bool = True


def probe_plan() -> list[ProbePoint]:
    """The points the probe times (about 40, a minute on a data-centre GPU)."""
    pts = [ProbePoint("layers", "dense4", b, q, ctx) for b, q, ctx in (
        (1, 1, 1024), (8, 1, 1024), (32, 1, 1024), (128, 1, 1024), (1, 4, 1024), (32, 4, 1024),
        (128, 4, 1024), (64, 1, 4096), (64, 4, 4096), (256, 4, 1024))]
    for shape in ("kimi_moe_tp4", "minimax_moe_tp4"):
        pts += [ProbePoint("moe", shape, t, 1, 0) for t in (1, 4, 16, 64, 256, 1024)]
    pts += [ProbePoint("mla", "kimi_mla_tp4", b, q, ctx) for b, q, ctx in (
        (1, 1, 1024), (16, 1, 1024), (64, 1, 4096), (16, 4, 4096), (64, 4, 1024),
        (128, 4, 4096))]
    pts += [ProbePoint("attn", "gqa8b", b, q, ctx) for b, q, ctx in (
        (1, 1, 4096), (32, 1, 4096), (32, 4, 4096), (128, 4, 1024), (128, 1, 8192))]
    # the same pieces with SDPA's unpacked q > 1 attention: without these the probe never sees
    # attention compute (packed rows keep it memory-bound), and the fit leaves attn_flop_frac
    # wherever the bounds let it go
    pts += [ProbePoint("layers", "dense4", b, q, ctx, packed=False) for b, q, ctx in (
        (32, 4, 4096), (128, 4, 1024), (128, 2, 4096), (64, 8, 1024))]
    pts += [ProbePoint("attn", "gqa8b", b, q, ctx, packed=False) for b, q, ctx in (
        (32, 4, 4096), (128, 4, 1024), (128, 2, 4096), (64, 8, 4096), (16, 8, 8192))]
    return pts


# the constants a probe pins down (the rest keep the shipped fit)
PROFILE_FIELDS = ("bw_frac", "flop_frac", "flop_frac_large", "attn_bw_frac", "attn_flop_frac",
                  "attn_unit_bytes_per_s", "pass_overhead_s", "layer_overhead_s",
                  "moe_layer_overhead_s", "moe_flop_eff", "mla_bw_frac", "mla_flop_frac")
PROFILE_BOUNDS = {**BOUNDS, "flop_frac_large": (1e-3, 2.0), "moe_layer_overhead_s": (1e-8, 1e-2),
                  "moe_flop_eff": (0.02, 2.0), "mla_bw_frac": (1e-3, 2.0),
                  "mla_flop_frac": (1e-3, 2.0)}


PRIOR_WEIGHT = 0.05  # per e-fold away from the shipped constant


def model_seconds(p: ProbePoint, gpu: GPU, c: _steps.StepConstants) -> float:
    c = replace(c, gqa_pack="always" if p.packed else "decode")
    return _steps.piece_step(p.kind, PROBE_SHAPES[p.shape], batch=p.batch, q=p.q, ctx=p.ctx,
                             gpu=gpu, constants=c).total_s


@dataclass(frozen=True)
class Profile:
    constants: _steps.StepConstants
    points: list[ProbePoint]
    error: list[float]  # model / measured - 1, per point
    median_error: float
    worst_error: float


def fit_profile(points: Sequence[ProbePoint], gpu: GPU, *, start: _steps.StepConstants,
                source: str) -> Profile:
    """Fit PROFILE_FIELDS to the timed points (log error, bounded, soft-L1)."""
    good = [p for p in points if math.isfinite(p.seconds) and p.seconds > 0]
    if len(good) < len(PROFILE_FIELDS):
        raise PlanError(f"calibration: {len(good)} usable timings, the fit needs at least "
                        f"{len(PROFILE_FIELDS)}", hint="rerun calibrate; every point failed?")
    # the probe packs the query heads of a KV head for q > 1, as vLLM's attention does
    base = replace(start, source=source, gqa_pack="always",
                   mla_bw_frac=start.mla_bw_frac or start.attn_bw_frac,
                   mla_flop_frac=start.mla_flop_frac or start.attn_flop_frac)

    def residuals(vals: Mapping[str, float]) -> list[float]:
        c = replace(base, **vals)
        # a weak pull towards the shipped fit holds a constant no probe point pins down
        return [math.log(model_seconds(p, gpu, c) / p.seconds) for p in good] + [
            PRIOR_WEIGHT * math.log(vals[f] / getattr(base, f)) for f in PROFILE_FIELDS]

    best = fit_log_params(residuals, {f: getattr(base, f) for f in PROFILE_FIELDS},
                          PROFILE_BOUNDS, what="the calibration timings")
    c = replace(base, **best)
    err = [model_seconds(p, gpu, c) / p.seconds - 1 for p in good]
    mags = sorted(abs(e) for e in err)
    return Profile(c, good, err, mags[len(mags) // 2], mags[-1])


__all__ = ["PROBE_SHAPES", "PROFILE_FIELDS", "Profile", "ProbePoint", "fit_profile",
           "model_seconds", "probe_plan"]
