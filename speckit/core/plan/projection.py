"""Projected speed of a target + draft on a catalog GPU: throughput ratio by k x concurrency, the
best k per batch-size range, the break-even concurrency and vLLM's per-batch-size k schedule.

Pure: configs, tensor shapes, acceptance and the step constants and engine terms in, a SpeedResult
out. speckit.io.projection picks the constants (a calibrate profile or the shipped fit) and reads
the configs of a directory, registry id or Hub repo.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from speckit.core import methods as _methods
from speckit.core.gpus import GPU
from speckit.core.plan import engine as _engine
from speckit.core.plan import formats as _formats
from speckit.core.plan import mix as _mix
from speckit.core.plan import schedule as _sched
from speckit.core.plan import steps as _steps
from speckit.errors import PlanError, UsageError

PROJECTED = "projected"  # every figure of a SpeedResult is a model projection, not a measurement
KV_BYTES = {"auto": None, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
DEFAULT_CONTEXTS = (1024, 4096)


@dataclass
class SpeedResult:
    label: str  # always "projected"
    target: str
    draft: str | None
    method: str
    gpu: str
    tp: int
    draft_tp: int
    acceptance_source: str
    per_position: list[float]  # vLLM-style per-position acceptance rates used for AL(k)
    tables: list[_sched.SpeedTable]  # one per KV context length
    schedule_context: int
    schedule: list[tuple[int, int, int]]
    num_speculative_tokens: int  # the largest k in the schedule (vLLM clamps each range to it)
    speculative_config: dict[str, Any]  # the fields to merge into --speculative-config
    constants_source: str
    assumptions: list[str] = field(default_factory=list)
    max_batch: int = 0  # max-num-seqs: columns past a table's max_batch do not fit its KV
    band_level: float = 0.0  # each table's band covers this share of published points (0: none)
    band_source: str = ""  # where the band comes from
    columns: list[int] = field(default_factory=list)  # the concurrencies asked for (the columns)
    # (AL low, AL high) at the acceptance's k when the bands also span the acceptance's spread
    acceptance_spread: tuple[float, float] | None = None


def project_speed(*, target_config: Mapping[str, Any], method: str,
                  draft_config: Mapping[str, Any] | None = None,
                  draft_tensors: Iterable[tuple[str, Sequence[int]]] = (),
                  k: int | None = None, acceptance: Sequence[float] | None = None,
                  acceptance_kind: str = "per-position", al: float | None = None,
                  gpu: GPU, tp: int = 1, draft_tp: int | None = None,
                  contexts: Sequence[int] = DEFAULT_CONTEXTS, max_batch: int = 256,
                  kv_cache_dtype: str = "auto", draft_quant: str | None = None,
                  constants: _steps.StepConstants, gqa_pack: str = "always",
                  engine: _engine.EngineCosts, expert_parallel: bool = False,
                  schedule_context: int | None = None, kv_tokens: int | None = None,
                  lookahead: int = 0, data_parallel: int = 1, target_name: str = "target",
                  draft_name: str | None = None,
                  batches: Sequence[int] | None = None) -> SpeedResult:
    """Project tokens/s with each k over tokens/s without, for batch sizes 1..max_batch.

    ``gqa_pack="always"`` prices attention as vLLM's paged FlashAttention runs it (GQA heads
    share one K/V read while verifying); "decode" as the PyTorch SDPA the constants were fitted on.
    ``kv_tokens`` (the plan's KV capacity per replica) stops each table at the concurrency the
    cache holds at its context; the schedule is picked at ``schedule_context`` (default: the
    first context given). ``batches``: the columns (default: powers of two below max_batch, then
    max_batch); the schedule still covers every batch size 1..max_batch.
    """
    mod = _methods.get(method)
    want = sorted({int(b) for b in batches}) if batches else _sched.default_batches(max_batch)
    rates, source = acceptance_rates(acceptance, acceptance_kind, al, k)
    if not contexts or any(int(c) < 1 for c in contexts):
        raise UsageError(f"--context values must be positive (got {list(contexts)})")
    model = step_model(target_config=target_config, method=method, draft_config=draft_config,
                       draft_tensors=draft_tensors, gpu=gpu, tp=tp, draft_tp=draft_tp,
                       kv_cache_dtype=kv_cache_dtype, draft_quant=draft_quant,
                       constants=constants, gqa_pack=gqa_pack, engine=engine,
                       expert_parallel=expert_parallel, target_name=target_name,
                       draft_name=draft_name)
    const, dshape, eng = model.constants, model.draft, engine
    al = {kk: _sched.al_from_per_position(rates, kk) for kk in range(1, len(rates) + 1)}
    ctxs = [int(c) for c in dict.fromkeys(int(c) for c in contexts)]
    sched_ctx = int(schedule_context or ctxs[0])
    tables = []
    for ctx in sorted({*ctxs, sched_ctx}):
        fit = max_batch if kv_tokens is None else max(0, min(max_batch,
                                                             kv_tokens // (ctx + lookahead)))
        if fit < 1:
            tables.append(_sched.SpeedTable(ctx, sorted(al), [], dict(al), [], {}, {}, [], None,
                                            [(1, max_batch, 0)], 0))
            continue
        cols = [b for b in want if b <= fit] or [fit]  # none fits: the schedule still needs one
        tables.append(_table(model, al, ctx=ctx, max_batch=fit, batches=cols))
    sched_table = next(t for t in tables if t.ctx == sched_ctx)
    sched = sched_table.schedule
    if sched_table.max_batch < max_batch:  # beyond what the cache holds: the last k carries on
        sched = [*sched[:-1], (sched[-1][0], max_batch, sched[-1][2])] if sched_table \
            .max_batch else [(1, max_batch, 0)]
    spec_cfg = _sched.schedule_config(sched, k_if_off=max(al))
    return SpeedResult(
        label=PROJECTED, target=target_name, draft=draft_name, method=mod.name, gpu=gpu.name,
        tp=tp, draft_tp=model.draft_tp, acceptance_source=source, per_position=rates,
        tables=[t for t in tables if t.ctx in ctxs], schedule_context=sched_ctx, schedule=sched,
        num_speculative_tokens=spec_cfg["num_speculative_tokens"], speculative_config=spec_cfg,
        constants_source=const.source,
        assumptions=_assumptions(gpu, const, source, sched_ctx, dshape, eng, data_parallel,
                                 kv_tokens), max_batch=max_batch,
        band_level=eng.band.level, band_source=eng.band.source, columns=want)


def step_model(*, target_config: Mapping[str, Any], method: str,
               draft_config: Mapping[str, Any] | None = None,
               draft_tensors: Iterable[tuple[str, Sequence[int]]] = (), gpu: GPU, tp: int = 1,
               draft_tp: int | None = None, kv_cache_dtype: str = "auto",
               draft_quant: str | None = None, constants: _steps.StepConstants,
               gqa_pack: str = "always", engine: _engine.EngineCosts,
               expert_parallel: bool = False, target_name: str = "target",
               draft_name: str | None = None) -> StepModel:
    """The StepModel of one deployment (project_speed's, and a traffic mix's)."""
    if kv_cache_dtype not in KV_BYTES:
        raise UsageError(f"--kv-cache-dtype {kv_cache_dtype!r}: use one of {', '.join(KV_BYTES)}")
    if gqa_pack not in ("always", "decode"):
        raise UsageError(f"gqa_pack {gqa_pack!r}: use always or decode")
    const = replace(constants, gqa_pack=gqa_pack)
    tshape = target_shape(target_config, gpu, where=f"{target_name}/config.json",
                          expert_parallel=expert_parallel, tp=tp)
    dshape = draft_shape(_methods.get(method), target_config, draft_config, draft_tensors,
                         tshape, draft_quant, gpu, where=draft_name or "draft")
    return StepModel(tshape, dshape, gpu, tp, draft_tp or tp, const, engine,
                     float(KV_BYTES[kv_cache_dtype] or 2))  # auto: the model dtype


def project_mix_speed(model: StepModel, *, weights: Mapping[str, float],
                      contexts: Mapping[str, int], al: Mapping[str, Mapping[int, float]],
                      max_batch: int, kv_tokens: int | None = None,
                      lookahead: int = 0,
                      batches: Sequence[int] | None = None) -> _mix.MixProjection:
    """The traffic mix's projection (speckit.core.plan.mix) on ``model``, each mixed ratio with
    the model's band; ``kv_tokens`` stops the columns at the concurrency the KV cache holds at
    the mix's mean context (beyond it the schedule keeps its last k, as project_speed's does).
    ``batches``: the columns asked for (default: powers of two, then the most that fit)."""
    buckets = _mix.mix_buckets(weights, al, contexts)
    mean_ctx = round(sum(b.weight * b.context for b in buckets))
    fit = max_batch if kv_tokens is None else min(max_batch, kv_tokens // (mean_ctx + lookahead))
    if fit < 1:
        raise PlanError(f"the KV cache ({kv_tokens:,} tokens) holds no sequence at the traffic "
                        f"mix's mean context of {mean_ctx:,} tokens",
                        hint="lower --max-model-len or free memory (see the plan above)")
    moe, band = bool(model.target.experts), model.engine.band
    cols = [b for b in batches if b <= fit] if batches else \
        [*(b for b in _sched.default_batches(max_batch) if b < fit), fit]
    proj = _mix.project_mix(model, buckets, max_batch=fit, batches=cols or [fit],
                            band=(lambda b: band.offsets(b, moe)) if band.level else None)
    proj.notes.append(f"KV context per bucket: the mean of prompt + half the output over its "
                      f"requests; the mix's mean is {mean_ctx:,} tokens")
    if model.engine.band.level:
        proj.notes.append(_mix.BAND_NOTE)
    if fit < max_batch:
        lo, _, last = proj.schedule[-1]
        proj.schedule = [*proj.schedule[:-1], (lo, max_batch, last)]
        proj.notes.append(f"the KV cache holds {fit} sequences at the mix's mean context: "
                          f"concurrency {fit + 1}-{max_batch} keeps k={last} (never reached)")
    return proj


def acceptance_rates(acceptance: Sequence[float] | None, kind: str, al: float | None,
                     k: int | None) -> tuple[list[float], str]:
    """vLLM-style per-position rates from --acceptance (per-position or conditional) or from
    --al at -k (one constant conditional rate), and where they came from."""
    if (acceptance is None) == (al is None):
        raise UsageError("pass exactly one of --acceptance P1,P2,... and --al X",
                         hint="--acceptance: vLLM's per-position acceptance rates (speckit "
                         "validate prints them); --al: mean tokens per step at -k")
    if acceptance is not None:
        rates = _sched.check_rates(acceptance, kind=kind)
        if kind == "conditional":
            return _sched.per_position_from_conditional(rates), "conditional rates given"
        return rates, "per-position rates given"
    if k is None:
        raise UsageError("--al needs -k (the k that AL was measured at)")
    return (_sched.geometric_rates(float(al), k),
            f"AL {al} at k={k}, other k from one constant conditional rate (assumed)")


@dataclass(frozen=True)
class StepModel:
    """Seconds per plain and per speculative step of one deployment: the ideal GPU passes
    (steps.py) plus the engine's named terms (engine.py). The one model plan, validate
    --serve-gpu, the demo and benchmarks/projection_vs_published.py price steps with."""

    target: _steps.ModelShape
    draft: _steps.DraftShape | None
    gpu: GPU
    tp: int = 1
    draft_tp: int = 1
    constants: _steps.StepConstants = field(default_factory=_steps.StepConstants)
    engine: _engine.EngineCosts = _engine.IDEAL
    kv_bytes: float = 2.0

    @property
    def priced(self) -> _steps.StepConstants:
        """The constants the passes are priced with: the GPU's, with the routing locality
        fitted beside the engine terms."""
        if self.constants.route_reuse == self.engine.route_reuse:
            return self.constants
        return replace(self.constants, route_reuse=self.engine.route_reuse)

    def base(self, batch: int, ctx: int) -> float:
        t = _steps.target_step_time(self.target, batch=batch, q=1, ctx=ctx, gpu=self.gpu,
                                    tp=self.tp, constants=self.priced, kv_bytes=self.kv_bytes)
        return t + self.engine.plain(layers=self.target.layers, batch=batch)

    def spec(self, batch: int, k: int, ctx: int, al: float = 1.0) -> float:
        """A speculative step; ``al`` (tokens out per sequence) prices the per-token term."""
        c = self.priced
        t = _steps.target_step_time(self.target, batch=batch, q=k + 1, ctx=ctx, gpu=self.gpu,
                                    tp=self.tp, constants=c, kv_bytes=self.kv_bytes)
        passes = 0
        if self.draft is not None:
            t += _steps.draft_step_time(self.draft, batch=batch, k=k, ctx=ctx, gpu=self.gpu,
                                        tp=self.draft_tp, constants=c, kv_bytes=self.kv_bytes)
            passes = k if self.draft.style == "chain" else 1
        return t + self.engine.speculative(layers=self.target.layers, batch=batch, al=al,
                                           draft_passes=passes)

    def ratio(self, batch: int, k: int, al: float, ctx: int) -> float:
        return _sched.throughput_ratio(al, self.spec(batch, k, ctx, al), self.base(batch, ctx))


def _table(model: StepModel, al, *, ctx, max_batch, batches=None):
    base_cache: dict[int, float] = {}

    def base(b: int) -> float:
        if b not in base_cache:
            base_cache[b] = model.base(b, ctx)
        return base_cache[b]

    moe = bool(model.target.experts)
    return _sched.project(al, base_step=base,
                          spec_step=lambda b, kk: model.spec(b, kk, ctx, al[kk]),
                          max_batch=max_batch, ctx=ctx, batches=batches,
                          band=lambda b: model.engine.band.offsets(b, moe))


def target_shape(config: Mapping[str, Any], gpu: GPU, *, where: str,
                 expert_parallel: bool = False, tp: int = 1) -> _steps.ModelShape:
    """The target's step-model shape with its weight formats (formats.py) priced."""
    dense, experts = _formats.scheme_of_config(dict(config))
    shape = _steps.ModelShape.from_config(
        config, weight_bytes=_formats.weight_bytes(dense),
        fp8_compute=_formats.native_compute(gpu, dense), where=where,
        expert_bytes=_formats.weight_bytes(experts),
        expert_native=_formats.native_compute(gpu, experts))
    return replace(shape, ep=tp) if expert_parallel and shape.experts else shape


def draft_shape(mod, target_config, draft_config, draft_tensors, tshape, draft_quant, gpu, *,
                 where: str) -> _steps.DraftShape | None:
    if not mod.has_checkpoint or mod.proposes_on_cpu:
        return None  # ngram proposes on the host: no GPU draft step
    style = mod.draft_style
    if draft_quant is not None and draft_quant not in _formats.SCHEMES:
        raise UsageError(f"--draft-quant {draft_quant!r}: use one of "
                         + ", ".join(_formats.SCHEMES))
    stored = _formats.scheme_of_config(dict(draft_config))[0] if draft_config is not None \
        else None
    scheme = draft_quant or stored
    wb = _formats.weight_bytes(scheme) if scheme else tshape.weight_bytes
    fp8 = scheme is not None and _formats.native_compute(gpu, scheme)
    if draft_config is None:
        if not mod.weights_in_target:
            raise UsageError(f"method {mod.name} needs a draft checkpoint", hint="pass --draft")
        # MTP layers inside the target: one target-shaped layer behind a 2H -> H projection
        body = replace(tshape, layers=1, dense_layers=0, weight_bytes=wb, fp8_compute=fp8)
        return _steps.DraftShape(body, style, fc_in=2 * tshape.hidden)
    d = _steps.DraftShape.from_checkpoint(draft_config, list(draft_tensors), style=style,
                                          target=tshape, weight_bytes=wb, fp8_compute=fp8)
    # speckit quantize (and Quark, which also skips fc) leave lm_head at the model dtype
    quantized = scheme not in (None, "bf16", "fp16")
    return replace(d, head_weight_bytes=2.0) if quantized else d


def _routing_text(eng: _engine.EngineCosts) -> str:
    if not eng.route_reuse:
        return ("MoE: distinct experts read per step from uniform top-k routing (real routing "
                "clusters, so fewer experts are read; fitted, that locality did not lower the "
                "error on published sources left out of the fit)")
    return (f"MoE: distinct experts read per step from top-k routing, a verified token reusing "
            f"{eng.route_reuse:.0%} of the experts its sequence's previous token picked "
            "(routing locality, fitted with the engine terms)")


def _band_text(eng: _engine.EngineCosts) -> str:
    b = eng.band
    if not b.level:
        return "no band: these engine terms carry no leave-one-source-out residuals"
    return (f"each ratio's {b.level:.0%} band comes from {b.source}; the schedule moves to a k "
            "only where that k's band lies wholly above the current one's (plain decoding: "
            "1.0); a band straddling 1.0 is uncertain: measure with `speckit bench`")


def _assumptions(gpu: GPU, c: _steps.StepConstants, source: str, ctx: int,
                 dshape: _steps.DraftShape | None, eng: _engine.EngineCosts, dp: int,
                 kv_tokens: int | None) -> list[str]:
    out = [f"every figure is projected from the step-cost model ({c.source}), not measured",
           (f"{gpu.name} rates from {gpu.perf_source or 'the catalog'}; achievable fractions "
           f"fitted on an H200 with plain torch (benchmarks/results/step_costs_h200.txt) are "
           f"assumed to hold on this GPU (speckit calibrate fits them on yours)"),
           ("attention packs GQA heads while verifying (vLLM's paged FlashAttention); "
            "the H200 fit measured PyTorch SDPA, which packs them only for q = 1"
            if c.gqa_pack == "always" else
            "attention priced as PyTorch SDPA (GQA heads packed only for q = 1)"),
           f"acceptance: {source}; acceptance does not depend on the batch size",
           (f"the k schedule is picked at KV context {ctx:,} (the first --context, or "
            "schedule_context); the published tables show the ratio at high concurrency rising, "
            "not falling, with context once attention dominates the step"),
           (f"engine overhead per step ({eng.source}): step {eng.step_s * 1e6:.0f} us, "
            f"per layer {eng.graph_layer_s * 1e6:.1f} us, per generated token "
            f"{eng.token_s * 1e6:.1f} us, per speculative step {eng.spec_step_s * 1e6:.0f} us, "
            f"per draft pass {eng.draft_pass_s * 1e6:.0f} us; TP all-reduces from link "
            "bandwidth (not measured)"),
           _routing_text(eng),
           _band_text(eng)]
    if kv_tokens is not None:
        out.append(f"columns stop at the concurrency the plan's {kv_tokens:,} KV tokens hold "
                   "at each context (\"does not fit\" beyond)")
    if dp > 1:
        out.append(f"data parallel {dp}: vLLM ignores the per-batch-size k schedule with "
                   "DP > 1; each replica runs the single num_speculative_tokens")
    if dshape is None:
        out.append("the method proposes on the host: no draft step on the GPU")
    return out


__all__ = ["DEFAULT_CONTEXTS", "KV_BYTES", "PROJECTED", "SpeedResult", "StepModel", "draft_shape",
           "acceptance_rates", "project_mix_speed", "project_speed", "step_model",
           "target_shape"]
