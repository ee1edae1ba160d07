"""`registry resolve --gpu G --concurrency C`: the drafts for a target ranked by projected
throughput ratio at C on G, each with its band, k, the KV memory left and where its acceptance
came from; ngram and suffix beside them. Pure: the registry's recorded shapes, the step constants
and engine terms in (speckit.registry reads those), a SpeedRanking out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from speckit.core import methods
from speckit.core.gpus import GPU
from speckit.core.plan import engine as _engine
from speckit.core.plan import steps as _steps
from speckit.core.plan.acceptance import (
    AcceptanceChoice,
    choose_acceptance,
    family_of,
    params_from_name,
    prior_shortfall,
)
from speckit.core.plan.answer import best_ratio_at, scaled_rates, widen, without_k
from speckit.core.plan.computed import computed_draft_tensors
from speckit.core.plan.projection import project_speed
from speckit.core.registry.fit import (
    WILL_NOT_START,
    Deployment,
    Fit,
    place,
    place_without_draft,
)
from speckit.core.registry.schema import Entry, PublishedResult, Registry
from speckit.core.specconfig import adaptive_verification_advice
from speckit.errors import FormatError, PlanError, UsageError

DEFAULT_CONTEXT = 1024  # KV context per request the ranking is projected at (plan's first)


@dataclass
class SpeedRow:
    """One way to speculate for the target on the GPU, projected at the concurrency asked."""

    rank: int
    id: str  # registry id, or the method name for an engine-only method
    method: str  # speckit's method name
    k: int | None  # the best projected k at the concurrency (at most what starts)
    ratio: float | None  # projected throughput ratio there (None: not projected, see note)
    band: tuple[float, float] | None  # model error and acceptance spread together
    kv_left_bytes: int | None  # KV memory left once C requests hold the context
    kv_left_tokens: int | None
    acceptance_origin: str | None  # flag | report | published | prior
    acceptance: str  # where the acceptance came from, in words
    supported: bool | None  # the recorded engine support for the GPU (None: not recorded)
    support: str  # that support, in words
    fit: str  # plan's verdict
    note: str = ""  # why a row has no ratio, or what to know about it
    speculative_config: dict[str, Any] = field(default_factory=dict)
    location: str = ""  # where its weights come from (a Hub repo@revision, bundled, ...)
    kv_holds: int | None = None  # requests the KV cache holds at the context, when under C
    label: str = "projected"
    # the draft shape the ratio and KV left rest on: "recorded" (the registry's config), "assumed"
    # (the method's standard construction from the target's config: ``shape_assumed`` says what)
    # or None (no draft weights, or not projected)
    shape: str | None = None
    shape_assumed: str = ""


@dataclass
class SpeedRanking:
    target: str
    gpu: str
    tp: int
    concurrency: int
    context: int
    rows: list[SpeedRow]
    ranked_by: str
    on_prior: list[str]  # ids whose ratio rests on the method prior, not a published figure
    start_with: dict[str, Any] | None = None
    start_with_id: str | None = None
    notes: list[str] = field(default_factory=list)
    label: str = "projected"


@dataclass(frozen=True)
class Pricing:
    """The step model's inputs the operation reads from disk."""

    constants: _steps.StepConstants
    engine: _engine.EngineCosts
    installed_vllm: str | None = None  # this machine's vLLM, only when --gpu is this machine


def rank_by_speed(registry: Registry, *, target: Entry, entries: Sequence[Entry],
                  fits: dict[str, Fit], dep: Deployment, pricing: Pricing,
                  dataset: str | None = None, context: int = DEFAULT_CONTEXT,
                  method: str | None = None) -> SpeedRanking:
    """Every entry (with its plan ``fits``) and every engine-only method (only ``method`` when
    given), projected at ``dep.concurrency`` on ``dep.gpu``; ranked by ratio, the unprojected
    after."""
    c = int(dep.concurrency or 1)
    ask = _Ask(registry, target, dep, pricing, dataset, context, c)
    only = methods.get(method) if method is not None else None
    rows = [_entry_row(ask, e, fits.get(e.id)) for e in entries]
    rows += [_engine_only_row(ask, s) for s in methods.all_specs()
             if not s.has_checkpoint and s.vllm_method and only in (None, s)]
    rows.sort(key=lambda r: (r.ratio is None, -(r.ratio or 0.0), r.supported is False))
    for i, r in enumerate(rows, 1):
        r.rank = i
    pick = next((r for r in rows if r.ratio is not None and r.ratio > 1.0
                 and r.supported is not False), None)
    on_prior = [r.id for r in rows if r.acceptance_origin == "prior" and r.ratio is not None]
    return SpeedRanking(
        target=target.repo or target.id, gpu=dep.gpu.name, tp=dep.tp, concurrency=c,
        context=context, rows=rows, on_prior=on_prior,
        ranked_by=(f"projected throughput ratio at concurrency {c}, KV context {context:,}, "
                   f"on {dep.gpu.name} x TP={dep.tp} (speckit plan's step model over the "
                   "registry's recorded shapes; each row's best k up to the k that starts)"),
        start_with=pick.speculative_config if pick else None,
        start_with_id=pick.id if pick else None,
        notes=_notes(rows, pick, on_prior) + _adaptive(rows, dep.gpu.platform))


@dataclass(frozen=True)
class _Ask:
    registry: Registry
    target: Entry
    dep: Deployment
    pricing: Pricing
    dataset: str | None
    context: int
    concurrency: int


def _entry_row(ask: _Ask, e: Entry, fit: Fit | None) -> SpeedRow:
    name = family_of(e)
    row = _row(e.id, name, fit, ask, e)
    row.speculative_config, row.location = e.vllm_speculative_config(), e.location
    if fit is not None and fit.level == WILL_NOT_START:
        row.note = f"will not start: {fit.detail}"
        return row
    spec, own = methods.get(name), e
    if e.config is None and spec.has_checkpoint:
        shape = assumed_shape(spec, e, ask.target.config or {})
        if isinstance(shape, str):
            row.note = shape
            return row
        e = replace(e, config=shape.config, source_layout=None)
        row.shape, row.shape_assumed = "assumed", shape.assumed
        fit = place(e, ask.target, ask.dep) if e.num_speculative_tokens is not None else fit
        row.fit = fit.verdict if fit is not None else row.fit
        if fit is not None and fit.level == WILL_NOT_START:
            row.note = f"will not start (with the assumed shape): {fit.detail}"
            return row
    elif e.config is not None:
        row.shape = "recorded"
    k = fit.k if fit is not None and fit.k is not None else e.num_speculative_tokens
    if k is None:  # no k recorded: the one its acceptance figure was measured at, planned
        k = _figure_k(ask, e, name)
        if k is None:
            row.note = "no k published or planned: not projected"
            return row
        fit = place(replace(e, num_speculative_tokens=k), ask.target, ask.dep)
        row.fit = fit.verdict
        row.note = f"no k recorded: planned at k={k}, its published figure's"
        if fit.level == WILL_NOT_START:
            row.note = f"will not start at k={k} (its figure's k): {fit.detail}"
            return row
    try:
        rows = computed_draft_tensors(spec, e.source_layout, e.config or {},
                                      where=e.id).tensors if e.config is not None else []
        drows = [(n, tuple(dims)) for n, _, dims in rows]
    except (PlanError, FormatError) as err:
        row.note = f"draft weights not computable: {err.message}"
        return row
    row = _project(ask, row, own, k, fit, e.config, drows)
    if row.shape == "assumed" and row.ratio is not None:
        row.note = "; ".join(x for x in (row.note, "shape assumed (no recorded config; ratio "
                                         "and KV left rest on it): " + row.shape_assumed) if x)
    return row


def assumed_shape(spec: methods.MethodSpec, e: Entry,
                  target_config: dict[str, Any]) -> methods.AssumedShape | str:
    """The stand-in shape for an entry without a recorded config (its method's documented
    construction, with the layer count its card states), or a note saying why there is none."""
    if spec.assumed_shape is None:
        why = f"{spec.name} has no documented standard construction (its depth varies by release)"
    elif not target_config:
        why = "the registry records no shape for the target"
    else:
        shape = spec.assumed_shape(target_config, layers=e.draft_layers,
                                   layers_source=e.draft_layers_source)
        if not isinstance(shape, str):
            return shape
        why = shape
    return (f"no recorded draft shape, and none assumed: {why}: not projected (`speckit plan` "
            "with its files does)")


def _figure_k(ask: _Ask, e: Entry, method: str) -> int | None:
    """The k of the acceptance figure an entry without a recorded k would be projected from."""
    try:
        pick = choose_acceptance(entry=e, registry=ask.registry, method=method,
                                 dataset=ask.dataset, k=None)
    except UsageError:
        return None
    return pick.k if pick is not None and pick.origin == "published" else None


@dataclass(frozen=True)
class _EngineOnly:
    """An engine-only method as an entry: the registry-level figures published for it on this
    target are its own (published_acceptance reads them), the rest of the registry its prior."""

    id: str
    method: str
    target: str | None
    num_speculative_tokens: int
    published: tuple[PublishedResult, ...]
    kind: str = "draft"
    repo: str | None = None
    config: dict[str, Any] | None = None
    speculative_config: dict[str, Any] = field(default_factory=dict)


def _engine_only_row(ask: _Ask, spec: methods.MethodSpec) -> SpeedRow:
    k = spec.usual_k or spec.default_k({}) or 3
    fit = place_without_draft(spec.name, k, ask.target, ask.dep)
    row = _row(spec.name, spec.name, fit, ask, None)
    row.speculative_config = spec.speculative_config(model=None, k=k, config={})
    row.location = "no weights: vLLM drafts from the prompt and its own output"
    if fit.level == WILL_NOT_START:
        row.note = f"will not start: {fit.detail}"
        return row
    want = (ask.target.repo or ask.target.id).lower()
    own = tuple(r for r in ask.registry.published if r.method and (r.target or "").lower() == want
                and methods.get(r.method) is spec)
    if spec.workload_acceptance and ask.dataset is None and own:
        # one workload's figure is not this method's acceptance on the user's: the prior (its
        # band the spread across workloads) unless --dataset names the workload
        row.note = (f"{len(own)} figure{'s' if len(own) != 1 else ''} published on this target "
                    f"({'; '.join(sorted({r.dataset for r in own}))}): pass --dataset to use "
                    "one")
        own = ()
    pseudo = _EngineOnly(spec.name, spec.vllm_method, ask.target.repo, k, own)
    row = _project(ask, row, pseudo, k, fit, None, [])
    if row.ratio is None and not row.acceptance_origin:
        short = prior_shortfall(ask.registry, method=spec.name)
        row.note = f"not projected: {short}" if short else row.note
    return row


def _row(rid: str, name: str, fit: Fit | None, ask: _Ask, e: Entry | None) -> SpeedRow:
    ok, why = engine_support(methods.get(name), e, ask.dep.gpu, ask.pricing.installed_vllm)
    return SpeedRow(rank=0, id=rid, method=name, k=None, ratio=None, band=None,
                    kv_left_bytes=None, kv_left_tokens=None, acceptance_origin=None,
                    acceptance="", supported=ok, support=why,
                    fit=fit.verdict if fit is not None else "not checked")


def _choice(ask: _Ask, e: Entry | None, method: str, k: int) -> tuple[AcceptanceChoice | None,
                                                                       str]:
    size = params_from_name(ask.target.repo or ask.target.id)
    try:
        pick = choose_acceptance(entry=e, registry=ask.registry, method=method,
                                 dataset=ask.dataset, k=k, target_params_b=size)
        why = ""
    except UsageError as err:  # publishes nothing on --dataset: the prior, said
        pick, why = None, err.message
    if pick is None or without_k(pick):
        why = why or (f"its published AL ({pick.label}) records no k: the prior instead"
                      if pick is not None else "")
        pick = choose_acceptance(entry=None, registry=ask.registry, method=method, k=k,
                                 target_params_b=size)
    return pick, why


def _project(ask: _Ask, row: SpeedRow, e: Entry | None, k: int, fit: Fit | None,
             dcfg: Any, drows: list[Any]) -> SpeedRow:
    choice, why = _choice(ask, e, row.method, k)
    if choice is None:
        row.note = "no acceptance published for it and no prior for the method: not projected"
        return row
    row.acceptance_origin, row.acceptance = choice.origin, choice.label
    row.note = "; ".join(x for x in (row.note, why) if x)
    rates = choice.per_position(k)
    spread = [scaled_rates(rates, choice.al, choice.k or len(rates), x)
              for x in (choice.al_low, choice.al_high) if x is not None]
    plan = fit.plan if fit is not None else None
    kv = plan.with_draft.kv_tokens if plan is not None else None
    look = plan.lookahead_slots if plan is not None else 0
    try:
        runs = [project_speed(
            target_config=ask.target.config or {}, method=row.method, draft_config=dcfg,
            draft_tensors=drows, acceptance=r, gpu=ask.dep.gpu, tp=ask.dep.tp,
            contexts=[ask.context], max_batch=ask.concurrency, kv_tokens=kv, lookahead=look,
            constants=ask.pricing.constants, engine=ask.pricing.engine,
            batches=[ask.concurrency], target_name=row.id, draft_name=row.id)
            for r in ([rates, *spread] if len(spread) == 2 else [rates])]
    except (PlanError, FormatError, UsageError) as err:
        row.note = f"not projected: {err.message}"
        return row
    sp = widen(*runs) if len(runs) == 3 else runs[0]
    best = best_ratio_at(sp.tables[0], ask.concurrency)
    if best is None:
        row.kv_holds = sp.tables[0].max_batch
        row.note = (f"the KV cache holds {row.kv_holds} requests at {ask.context:,} tokens, "
                    f"under concurrency {ask.concurrency}")
        return row
    row.k, row.ratio, row.band = best[0], best[1], best[2]
    row.speculative_config = {**row.speculative_config, "num_speculative_tokens": best[0]}
    if plan is not None:
        # bytes one token of KV capacity takes: plan's block over its size (a hybrid model's
        # sliding and full layers fill one block pool, so summing every layer double-counts)
        per_token = plan.kv.bytes_per_block // plan.kv.block_size
        row.kv_left_tokens = kv - ask.concurrency * (ask.context + look)
        row.kv_left_bytes = row.kv_left_tokens * per_token
    return row


def engine_support(spec: methods.MethodSpec, e: Entry | None, gpu: GPU,
                   installed_vllm: str | None) -> tuple[bool | None, str]:
    """Whether vLLM serves ``spec`` on ``gpu``'s platform, as recorded (the method's spec, the
    entry's minimum vLLM); ``installed_vllm`` (this machine's, given only when --gpu is it) is
    held against that minimum."""
    plat = gpu.platform
    if plat == "cpu" and not spec.cpu_supported:
        return False, f"vLLM's CPU backend does not serve {spec.name}"
    need = e.min_vllm if e is not None else None
    if need and installed_vllm and _version(installed_vllm) < _version(need):
        return False, f"needs vLLM >= {need}; this machine has {installed_vllm}"
    where = {"cpu": "vLLM CPU", "rocm": "vLLM ROCm", "cuda": "vLLM CUDA"}[plat]
    return True, f"{where}" + (f" (vLLM >= {need})" if need else "")


def _version(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def _adaptive(rows: list[SpeedRow], platform: str) -> list[str]:
    """vLLM's adaptive verification, for each ranked method that takes it (DSpark in 0.32)."""
    out: list[str] = []
    for name in dict.fromkeys(r.method for r in rows):
        said = adaptive_verification_advice(method=name, platform=platform)
        if said:
            out.append(f"{name}: {said[0]}")
    return out


def _notes(rows: list[SpeedRow], pick: SpeedRow | None, on_prior: list[str]) -> list[str]:
    out = []
    assumed = [r.id for r in rows if r.shape == "assumed" and r.ratio is not None]
    if assumed:
        out.append("shape assumed (the registry records no config; each method's standard "
                   "construction from the target's, the draft's cost an upper bound): "
                   + ", ".join(assumed) + "; `speckit plan` with the draft's files counts it")
    if pick is not None and pick.shape == "assumed":
        out.append(f"the start below ({pick.id}) rests on an assumed draft shape")
    if on_prior:
        out.append("rests on the method prior (no published acceptance for the draft): "
                   + ", ".join(on_prior) + "; measure with `speckit validate` and pass "
                   "--acceptance-from to plan")
    marked = [r.id for r in rows if r.supported is False]
    if marked:
        out.append("not served on this GPU's vLLM as recorded (never picked): " + ", ".join(marked))
    if pick is not None and pick.band is not None and pick.band[0] < 1.0:
        out.append(f"{pick.id}: its band ({pick.band[0]:.2f}-{pick.band[1]:.2f}) straddles "
                   "1.0x: the gain is uncertain; measure with `speckit bench`")
    if not any(r.ratio is not None for r in rows):
        out.append("nothing could be projected (no recorded draft shape, or no acceptance): "
                   "the start below is plan's first draft that starts, not ranked by speed")
    elif pick is None:
        out.append("no way to speculate is projected to pay here")
    return out


__all__ = ["DEFAULT_CONTEXT", "Pricing", "SpeedRanking", "SpeedRow", "assumed_shape",
           "engine_support", "rank_by_speed"]
