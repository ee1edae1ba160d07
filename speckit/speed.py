"""Projected speed of a target + draft on a catalog GPU: throughput ratio by k x concurrency, the
best k per batch-size range, the break-even concurrency and vLLM's per-batch-size k schedule.

`project_speed()` is pure (configs, tensor shapes, acceptance); `project_speed_from_refs()` reads
config.json and safetensors headers of a local directory, registry id or Hub repo first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from speckit.core import methods as _methods
from speckit.core import quant as core_quant
from speckit.core.gpus import GPU
from speckit.core.plan import schedule as _sched
from speckit.core.plan import steps as _steps
from speckit.errors import PlanError, UsageError

PROJECTED = "projected"  # every figure of a SpeedResult is a model projection, not a measurement
KV_BYTES = {"auto": None, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
# bytes per weight as loaded: mxfp4 = 4 bits + one e8m0 scale per 32 weights
QUANT_BYTES = {"bf16": 2.0, **{n: s.bits_per_weight() / 8 for n, s in core_quant.SCHEMES.items()}}
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


def project_speed(*, target_config: Mapping[str, Any], method: str,
                  draft_config: Mapping[str, Any] | None = None,
                  draft_tensors: Iterable[tuple[str, Sequence[int]]] = (),
                  k: int | None = None, acceptance: Sequence[float] | None = None,
                  acceptance_kind: str = "per-position", al: float | None = None,
                  gpu: GPU, tp: int = 1, draft_tp: int | None = None,
                  contexts: Sequence[int] = DEFAULT_CONTEXTS, max_batch: int = 256,
                  kv_cache_dtype: str = "auto", draft_quant: str | None = None,
                  constants: _steps.StepConstants | None = None, gqa_pack: str = "always",
                  target_name: str = "target",
                  draft_name: str | None = None) -> SpeedResult:
    """Project tokens/s with each k over tokens/s without, for batch sizes 1..max_batch.

    ``gqa_pack="always"`` prices attention as vLLM's paged FlashAttention runs it (GQA heads
    share one K/V read while verifying); "decode" as the PyTorch SDPA the constants were fitted on.
    """
    mod = _methods.get(method)
    rates, source = _rates(acceptance, acceptance_kind, al, k)
    if not contexts or any(int(c) < 1 for c in contexts):
        raise UsageError(f"--context values must be positive (got {list(contexts)})")
    if kv_cache_dtype not in KV_BYTES:
        raise UsageError(f"--kv-cache-dtype {kv_cache_dtype!r}: use one of {', '.join(KV_BYTES)}")
    dtp = draft_tp or tp
    if gqa_pack not in ("always", "decode"):
        raise UsageError(f"gqa_pack {gqa_pack!r}: use always or decode")
    const = replace(constants or _steps.load_constants(), gqa_pack=gqa_pack)
    wbytes, fp8 = _target_weights(target_config)
    tshape = _steps.ModelShape.from_config(target_config, weight_bytes=wbytes, fp8_compute=fp8,
                                           where=f"{target_name}/config.json")
    dshape = draft_shape(mod, target_config, draft_config, draft_tensors, tshape, draft_quant,
                          gpu, where=draft_name or "draft")
    kvb = float(KV_BYTES[kv_cache_dtype] or 2)  # auto: the model dtype (bf16 also for FP8)
    al = {kk: _sched.al_from_per_position(rates, kk) for kk in range(1, len(rates) + 1)}
    tables = []
    for ctx in sorted({int(c) for c in contexts}):
        tables.append(_table(tshape, dshape, al, gpu=gpu, tp=tp, dtp=dtp, ctx=ctx, const=const,
                             kvb=kvb, max_batch=max_batch))
    sched_table = tables[-1]  # the longest context: speculation turns off soonest there
    sched = sched_table.schedule
    top = max(kk for _, _, kk in sched) or max(al, key=lambda kk: sched_table.ratio[kk][0])
    return SpeedResult(
        label=PROJECTED, target=target_name, draft=draft_name, method=mod.name, gpu=gpu.name,
        tp=tp, draft_tp=dtp, acceptance_source=source, per_position=rates, tables=tables,
        schedule_context=sched_table.ctx, schedule=sched, num_speculative_tokens=int(top),
        speculative_config={"num_speculative_tokens": int(top),
                            "num_speculative_tokens_per_batch_size": [list(r) for r in sched]},
        constants_source=const.source,
        assumptions=_assumptions(gpu, const, source, sched_table.ctx, dshape))


def _rates(acceptance: Sequence[float] | None, kind: str, al: float | None,
           k: int | None) -> tuple[list[float], str]:
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


def _table(tshape, dshape, al, *, gpu, tp, dtp, ctx, const, kvb, max_batch):
    base_cache: dict[int, float] = {}

    def base(b: int) -> float:
        if b not in base_cache:
            base_cache[b] = _steps.target_step_time(tshape, batch=b, q=1, ctx=ctx, gpu=gpu,
                                                    tp=tp, constants=const, kv_bytes=kvb)
        return base_cache[b]

    def spec(b: int, kk: int) -> float:
        t = _steps.target_step_time(tshape, batch=b, q=kk + 1, ctx=ctx, gpu=gpu, tp=tp,
                                    constants=const, kv_bytes=kvb)
        if dshape is not None:
            t += _steps.draft_step_time(dshape, batch=b, k=kk, ctx=ctx, gpu=gpu, tp=dtp,
                                        constants=const, kv_bytes=kvb)
        return t

    return _sched.project(al, base_step=base, spec_step=spec, max_batch=max_batch, ctx=ctx)


def _target_weights(config: Mapping[str, Any]) -> tuple[float, bool]:
    """Bytes per weight and W8A8 from the target's quantization_config (FP8 checkpoints)."""
    q = config.get("quantization_config") or {}
    method = str(q.get("quant_method", "")).lower()
    if method in ("fp8", "fbgemm_fp8") or "fp8" in str(q.get("format", "")).lower():
        return 1.0, True
    if method:
        raise PlanError(f"target quantization {method!r} is not in the step-cost model",
                        hint="the model prices bf16/fp16 and FP8 targets")
    return 2.0, False


def draft_shape(mod, target_config, draft_config, draft_tensors, tshape, draft_quant, gpu, *,
                 where: str) -> _steps.DraftShape | None:
    if not mod.has_checkpoint or mod.proposes_on_cpu:
        return None  # ngram proposes on the host: no GPU draft step
    style = mod.draft_style
    if draft_quant is not None and draft_quant not in QUANT_BYTES:
        raise UsageError(f"--draft-quant {draft_quant!r}: use one of {', '.join(QUANT_BYTES)}")
    wb = QUANT_BYTES[draft_quant] if draft_quant else tshape.weight_bytes
    sch = core_quant.get(draft_quant) if draft_quant and draft_quant != "bf16" else None
    # FP8 matmuls only where the scheme quantizes activations to FP8 and the GPU runs it natively
    fp8 = sch is not None and sch.activations.startswith("fp8") and gpu.native(sch.capability)
    if draft_config is None:
        if not mod.weights_in_target:
            raise UsageError(f"method {mod.name} needs a draft checkpoint", hint="pass --draft")
        # MTP layers inside the target: one target-shaped layer behind a 2H -> H projection
        body = replace(tshape, layers=1, weight_bytes=wb, fp8_compute=fp8)
        return _steps.DraftShape(body, style, fc_in=2 * tshape.hidden)
    return _steps.DraftShape.from_checkpoint(draft_config, list(draft_tensors), style=style,
                                             target=tshape, weight_bytes=wb, fp8_compute=fp8)


def _assumptions(gpu: GPU, c: _steps.StepConstants, source: str, ctx: int,
                 dshape: _steps.DraftShape | None) -> list[str]:
    out = [f"every figure is projected from the step-cost model ({c.source}), not measured",
           (f"{gpu.name} rates from {gpu.perf_source or 'the catalog'}; achievable fractions "
           f"fitted on an H200 with plain torch (bench/results/step_costs_h200.txt) are "
           f"assumed to hold on this GPU"),
           ("attention packs GQA heads while verifying (vLLM's paged FlashAttention); "
            "the H200 fit measured PyTorch SDPA, which packs them only for q = 1"
            if c.gqa_pack == "always" else
            "attention priced as PyTorch SDPA (GQA heads packed only for q = 1)"),
           f"acceptance: {source}; acceptance does not depend on the batch size",
           (f"the schedule is chosen at KV context {ctx:,} (the longest given): speculation "
           f"stops paying at lower concurrency as context grows"),
           ("ideal steps: no rejection-sampler, scheduler or prefill cost; tensor-parallel "
           "all-reduces from link bandwidth (not measured)")]
    if dshape is None:
        out.append("the method proposes on the host: no draft step on the GPU")
    return out


def project_speed_from_refs(*, target: str, draft: str | None = None,
                            revision: str | None = None, draft_revision: str | None = None,
                            **kwargs: Any) -> SpeedResult:
    """Read target (+ draft) configs and headers (plan's header-only loader over
    speckit.io.refs.resolve), then project_speed(**kwargs)."""
    from speckit.plan import load_ref

    tcfg, _ = load_ref(target, revision=revision)
    dcfg, dtensors = load_ref(draft, revision=draft_revision) if draft else (None, [])
    return project_speed(target_config=tcfg, draft_config=dcfg, draft_tensors=dtensors,
                         target_name=target, draft_name=draft, **kwargs)


__all__ = ["PROJECTED", "SpeedResult", "draft_shape", "project_speed", "project_speed_from_refs"]
