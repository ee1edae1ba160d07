"""Memory headroom for a target + draft deployment on vLLM: weights, KV cache, the rest, a verdict.

`plan()` checks the options and composes speckit.core.plan's pure math over configs and safetensors
headers; `plan_from_refs()` reads those (local dir, registry id or Hub repo, header-only) first.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from speckit.core import methods
from speckit.core.gpus import DEFAULT_PLAN_GPU, GPU
from speckit.core.plan import compose
from speckit.core.plan.acceptance import (
    AcceptanceChoice,
    choose_acceptance,
    from_flags,
    params_from_name,
)
from speckit.core.plan.answer import (
    PlanReport,
    check_concurrency,
    scaled_rates,
    widen,
    without_k,
)
from speckit.core.plan.compose import header_tensors, pick_draft_method
from speckit.core.plan.dims import check_tp, target_kv_layers, valid_tps
from speckit.core.plan.kv import KV_DTYPES
from speckit.core.plan.mix import MixProjection, al_by_k, fill_buckets
from speckit.core.plan.options import check_options
from speckit.core.plan.overhead import OverheadModel
from speckit.core.plan.pairing import check_pairing
from speckit.core.plan.projection import DEFAULT_CONTEXTS, acceptance_rates, project_mix_speed
from speckit.core.plan.report import (
    DraftCost,
    KVReport,
    OverheadReport,
    PlanResult,
    Scenario,
    Try,
    WeightsReport,
)
from speckit.core.plan.weights import DRAFT_QUANTS
from speckit.core.plan.weights import is_top_level as _is_top_level
from speckit.core.registry.fit import draft_entry
from speckit.core.specconfig import adaptive_verification_advice
from speckit.core.traffic import TrafficReport
from speckit.errors import PlanError, SpeckitError, UsageError
from speckit.io.checkpoint import Checkpoint, TensorInfo
from speckit.io.context_report import read_acceptance, read_acceptance_by_context
from speckit.io.datafiles import get_gpu, load_registry
from speckit.io.headers import LoadedRef, load_headers, registry_entry
from speckit.io.preflight import check_pair, gate
from speckit.io.profiles import load_profile
from speckit.io.projection import project_speeds_from_refs, step_model_from_refs
from speckit.io.refs import Resolved, classify, resolve
from speckit.io.tokenizer import load_tokenizer, tokenizer_dir
from speckit.io.traffic import traffic_for_run


def plan_configs(*, gpu: GPU | str | None = DEFAULT_PLAN_GPU, gpu_mem_gib: float | None = None,
                 **kwargs: Any) -> PlanResult:
    """Size a vLLM deployment from configs and tensor headers already read, on one TP group of
    ``gpu`` (a GPU, or a catalog name, user GPU files included): speckit.core.plan.compose.plan,
    whose docstring lists the arguments. ``plan`` is the entry point that reads references."""
    g = None if gpu_mem_gib is not None else \
        gpu if isinstance(gpu, GPU) else get_gpu(gpu or DEFAULT_PLAN_GPU)
    return compose.plan(gpu=g, gpu_mem_gib=gpu_mem_gib, **kwargs)


def _same_bytes(a: Path, ta: TensorInfo, b: Path, tb: TensorInfo) -> bool:
    """Are two local tensors bit-identical? Streams both; stops at the first difference."""
    if ta.dtype != tb.dtype or ta.shape != tb.shape:
        return False
    chunk = 16 * 1024 * 1024
    with open(a / ta.file, "rb") as fa, open(b / tb.file, "rb") as fb:
        fa.seek(ta.offsets[0])
        fb.seek(tb.offsets[0])
        left = ta.nbytes
        while left:
            n = min(chunk, left)
            if fa.read(n) != fb.read(n):
                return False
            left -= n
    return True


def _shared_tensors(target: LoadedRef, draft: LoadedRef) -> dict[str, bool]:
    """For local pairs: which of the draft's embed_tokens / lm_head equal the target's."""
    out: dict[str, bool] = {}
    if target.local is None or draft.local is None:
        return out
    tmap = {t.name: t for t in target.tensors}
    for t in draft.tensors:
        for key in ("embed_tokens", "lm_head"):
            if not _is_top_level(t.name, key):
                continue
            cands = [tt for n, tt in tmap.items() if _is_top_level(n, key)]
            if key == "lm_head" and not cands:  # tied target: its lm_head is the embedding
                cands = [tt for n, tt in tmap.items() if _is_top_level(n, "embed_tokens")]
            out[t.name] = any(_same_bytes(draft.local, t, target.local, c) for c in cands)
    return out


def plan_from_refs(*, target: str | None, draft: str | None = None, method: str | None = None,
                   revision: str | None = None, draft_revision: str | None = None,
                   force_start: bool = False, preflight: bool = True,
                   **kwargs: Any) -> PlanResult:
    """Resolve ``target``/``draft`` (directory, registry id, Hub repo) to configs + headers, then
    plan. Hub repos are read header-only (config.json and safetensors headers, no weights).
    ``preflight``: the pair's pre-flight (speckit.io.preflight) goes into the result, and an
    error finding raises PreflightError unless ``force_start``."""
    d = load_headers(draft, revision=draft_revision, role="draft", method=method) \
        if draft else None
    if target is None:
        entry = registry_entry(draft) if draft else None
        target = getattr(entry, "target", None)
        if not target:
            raise UsageError("no --target given", hint="pass --target (a directory, registry id "
                             "or Hub repo)")
    t = load_headers(target, revision=revision, role="target")
    if d is not None and method is None:
        method = d.method
    shares = _shared_tensors(t, d) if d is not None else {}
    if d is not None and d.k is not None and kwargs.get("k") is None:
        mod = pick_draft_method(method, d.config, header_tensors(d.tensors), d.name)
        if mod is not None and mod.default_k(d.config) is None:
            kwargs["k"] = d.k  # the draft does not record k; the registry's starting k does
    res = plan_configs(target_config=t.config, target_tensors=t.tensors,
               draft_config=d.config if d else None, draft_tensors=d.tensors if d else None,
               method=method, draft_shares=shares, target_name=t.name,
               draft_name=d.name if d else None, **kwargs)
    _say_where_from(res, t, d)
    if preflight and d is not None:
        _preflight(res, t, d, target=target, revision=revision, force_start=force_start,
                   draft=str(draft), draft_revision=draft_revision)
    return res


def _say_where_from(res: PlanResult, t: LoadedRef, d: LoadedRef | None) -> None:
    """Which copy each model was read from, and which weights are computed, not read."""
    res.weights.target_from = t.origin
    said = [f"target weights: {t.origin}"] if t.computed else []
    said += t.notes
    if d is not None:
        res.weights.draft_from = d.origin
        said += ([f"draft weights: {d.origin}"] if d.computed else []) + d.notes
    res.weights.notes[:0] = said


def _preflight(res: PlanResult, t: LoadedRef, d: LoadedRef, *, target: str,
               revision: str | None, force_start: bool, draft: str,
               draft_revision: str | None) -> None:
    """The pair's pre-flight at the planned max_model_len into ``res``; an error stops here
    unless ``force_start`` (then res.preflight_notes says so). Reads the draft's config and
    tensor headers (a Hub draft's as plan read them, header-only)."""
    if d.computed:
        res.preflight_notes.append(f"pre-flight not run: the tensors of {d.name} are computed "
                                   "from its config, not read; `speckit fetch` it first")
        return
    try:
        where, ckpt = _draft_for_preflight(d, draft, draft_revision)
    except SpeckitError as e:
        res.preflight_notes.append(f"pre-flight not run: {e.message}")
        return
    try:
        tres = _target_for_preflight(t, target, revision)
    except SpeckitError as e:
        tres, why = None, e.message
    else:
        why = "the target's config is not on this machine"
    if tres is None:
        res.preflight_notes.append(f"pre-flight compared the draft alone: {why}")
    try:
        found = check_pair(where, tres, target_ref=target, checkpoint=ckpt,
                           serve_context=int(res.settings["max_model_len"]))
    except SpeckitError as e:
        res.preflight_notes.append(f"pre-flight not run: {e.message}")
        return
    res.preflight = list(found.findings)
    gate(found, force_start=force_start, warnings=res.preflight_notes)


def _draft_for_preflight(d: LoadedRef, draft: str,
                         revision: str | None) -> tuple[Path, Checkpoint | None]:
    """The draft's directory, and for a Hub draft read header-only its config.json's snapshot
    directory with the headers plan read (no weights are downloaded for pre-flight)."""
    if d.local is not None:
        return d.local, None
    cfg = resolve(draft, role="draft", need="config", revision=revision).path
    return cfg, Checkpoint(cfg, d.config, {t.name: t for t in d.tensors}, files=[])


def _target_for_preflight(t: LoadedRef, target: str, revision: str | None) -> Resolved | None:
    """The target as pre-flight reads it: the local copy plan read, else its Hub config.json."""
    if t.local is not None:
        return resolve(t.local, role="target", need="config")
    if classify(target, role="target").repo is None:
        return None  # a registry entry not built here: nothing to read without building it
    return resolve(target, role="target", need="config", revision=revision)


# ---- speed for a traffic's context mix -----------------------------------------------------------

@dataclass
class TrafficSpeed:
    """plan --traffic: the traffic in numbers, where each context bucket's acceptance came from,
    and the projection for its context mix (every figure projected)."""

    traffic: TrafficReport
    acceptance_source: str
    acceptance: dict[str, dict[int, float]]  # bucket -> k -> AL used for it
    mix: MixProjection
    gpu: str
    tp: int
    notes: list[str] = field(default_factory=list)
    label: str = "projected"


def plan_traffic(*, traffic: str | Path, target: str, draft: str | None = None,
                 method: str, revision: str | None = None, draft_revision: str | None = None,
                 acceptance_from: str | Path | None = None,
                 acceptance: list[float] | None = None, acceptance_kind: str = "per-position",
                 al: float | None = None, k: int | None = None, gpu: GPU, tp: int = 1,
                 max_batch: int, kv_tokens: int | None = None, lookahead: int = 0,
                 acceptance_label: str | None = None, columns: list[int] | None = None,
                 **model_kwargs: Any) -> TrafficSpeed:
    """The projected speed for ``traffic``'s context mix: its requests counted with the target's
    tokenizer, each bucket's AL from a validate report's acceptance_by_context
    (``acceptance_from``) or one set of rates for every bucket (``acceptance`` / ``al`` at
    ``k``), priced on ``gpu`` with plan's step model (``model_kwargs``: draft_tp,
    kv_cache_dtype, draft_quant, constants)."""
    if acceptance_from is not None and (acceptance is not None or al is not None):
        raise UsageError("--acceptance-from and --acceptance/--al do not combine",
                         hint="the report gives each context bucket its own acceptance")
    if acceptance_from is None and acceptance is None and al is None:
        raise UsageError("--traffic projects speed and needs the draft's acceptance",
                         hint="pass --acceptance-from REPORT (a validate report.json with "
                         "acceptance_by_context) or --acceptance P1,P2,... / --al X -k K")
    tres = resolve(target, role="target", need="config", revision=revision, what="--target")
    tok = load_tokenizer(tokenizer_dir(tres), what=f"target {target}")
    run = traffic_for_run(traffic, tok)
    notes: list[str] = []
    if acceptance_from is not None:
        rec = read_acceptance_by_context(acceptance_from)
        al_by, filled = fill_buckets({b: al_by_k(p) for b, p in rec.per_position.items()},
                                     list(run.weights))
        source, notes = f"measured per context bucket: {rec.source}", rec.notes + filled
    else:
        rates, source = acceptance_rates(acceptance, acceptance_kind, al, k)
        source = acceptance_label or source
        al_by = {b: al_by_k(rates) for b in run.weights}
        source += "; the same for every context bucket"
    model = step_model_from_refs(target=target, draft=draft, revision=revision,
                                 draft_revision=draft_revision, method=method, gpu=gpu, tp=tp,
                                 **model_kwargs)
    mix = project_mix_speed(model, weights=run.weights, contexts=run.contexts, al=al_by,
                            max_batch=max_batch, kv_tokens=kv_tokens, lookahead=lookahead,
                            batches=columns)
    used = {b: al_by[b] for b in run.weights}
    return TrafficSpeed(run.report(), source, used, mix, gpu.name, tp, notes)


# ---- the entry point: the memory plan and the projected speed, one result ------------------------

def plan(*, target: str | None = None, draft: str | None = None, method: str | None = None,
         revision: str | None = None, draft_revision: str | None = None,
         gpu: GPU | str | None = DEFAULT_PLAN_GPU, gpu_mem_gib: float | None = None,
         k: int | None = None, acceptance: list[float] | None = None,
         acceptance_kind: str = "per-position", al: float | None = None,
         acceptance_from: str | Path | None = None, dataset: str | None = None,
         concurrency: list[int] | None = None, contexts: list[int] | None = None,
         traffic: str | Path | None = None, gpu_profile: str | Path | None = None,
         project: bool = True, **kwargs: Any) -> PlanReport:
    """`speckit plan` as a function (speckit.api.plan): the memory plan of ``target`` (+
    ``draft``) on ``gpu`` (plan_from_refs; ``kwargs``: tp, draft_tp, max_model_len, max_num_seqs,
    ...), then, where the deployment has a method and ``project``, the projected speed at
    ``concurrency`` (columns; default powers of two up to max-num-seqs) and ``contexts``, or for
    ``traffic``'s context mix. Acceptance, in this order: ``acceptance``/``al``, the validate
    report ``acceptance_from``, the draft's published figures (on ``dataset``), the method's
    prior; the result says which (PlanReport.acceptance)."""
    g = None if gpu_mem_gib is not None else gpu if isinstance(gpu, GPU) else \
        get_gpu(gpu or DEFAULT_PLAN_GPU)
    if k is None and acceptance is not None:
        k = len(acceptance)  # N rates: k = N
    res = plan_from_refs(target=target, draft=draft, method=method, revision=revision,
                         draft_revision=draft_revision, k=k, gpu=g, gpu_mem_gib=gpu_mem_gib,
                         **kwargs)
    cols = check_concurrency(concurrency, int(res.settings["max_num_seqs"]))
    report = PlanReport(res, concurrency=cols)
    if res.method is None or not project:
        return report
    ask = _SpeedAsk(target=target, draft=draft, revision=revision, draft_revision=draft_revision,
                    acceptance=acceptance, acceptance_kind=acceptance_kind, al=al,
                    acceptance_from=acceptance_from, dataset=dataset, columns=cols,
                    contexts=list(contexts or DEFAULT_CONTEXTS), gpu_profile=gpu_profile,
                    kv_cache_dtype=kwargs.get("kv_cache_dtype", "auto"),
                    draft_quant=kwargs.get("draft_quant"))
    try:
        if traffic is not None:
            report.traffic_speed = _traffic_speed(res, g, ask, traffic)
        else:
            report.acceptance, report.speed = _speed(res, g, ask)
    except PlanError as e:  # the memory plan stands; the speed part is said to be unpriced
        report.speed_unpriced = f"speed not projected: {e.message}" + \
            (f" ({e.hint})" if e.hint else "")
    sched = report.speed.schedule if report.speed is not None else None
    report.adaptive_verification = adaptive_verification_advice(
        method=res.method, platform=g.platform if g is not None else "cuda", schedule=sched,
        confidence_head=_confidence_head(res.method, draft))
    return report


def _confidence_head(method: str, draft: str | None) -> bool | None:
    """Whether a registry draft's recorded config has a confidence head (what vLLM's adaptive
    verification scores positions with); None when unknown."""
    entry = draft_entry(load_registry(), draft)
    if entry is None or entry.config is None:
        return None
    try:
        said = methods.get(method).describe(dict(entry.config)).get("enable_confidence_head")
    except (KeyError, TypeError, ValueError, SpeckitError):
        return None
    return None if said is None else bool(said)


@dataclass(frozen=True)
class _SpeedAsk:
    """What the speed part of plan() was asked (the flags that do not size memory)."""

    target: str | None
    draft: str | None
    revision: str | None
    draft_revision: str | None
    acceptance: list[float] | None
    acceptance_kind: str
    al: float | None
    acceptance_from: str | Path | None
    dataset: str | None
    columns: list[int] | None
    contexts: list[int]
    gpu_profile: str | Path | None
    kv_cache_dtype: str
    draft_quant: str | None


def _constants(ask: _SpeedAsk) -> Any:
    return load_profile(ask.gpu_profile) if ask.gpu_profile is not None else None


def _speed(res: PlanResult, gpu: GPU | None, ask: _SpeedAsk) -> tuple[Any, Any]:
    """(the acceptance used, the SpeedResult with every band widened by its spread)."""
    given = ask.acceptance is not None or ask.al is not None or ask.acceptance_from is not None
    if gpu is None:
        if given:
            raise UsageError("--acceptance/--al project speed for a catalog GPU, not "
                             "--gpu-mem-gib", hint="pass --gpu NAME (its bandwidth and peak "
                             "drive the projection)")
        raise PlanError("--gpu-mem-gib gives no bandwidth or peak", hint="pass --gpu NAME")
    choice = _acceptance(res, ask)
    rates = choice.per_position(res.k)  # the k the memory plan holds, at most
    spread = [scaled_rates(rates, choice.al, choice.k or len(rates), x)
              for x in (choice.al_low, choice.al_high) if x is not None]
    runs = project_speeds_from_refs(
        target=res.target if ask.target is None else ask.target, draft=ask.draft,
        revision=ask.revision, draft_revision=ask.draft_revision, method=res.method, k=res.k,
        acceptances=[rates, *spread] if len(spread) == 2 else [rates], gpu=gpu, tp=res.tp,
        draft_tp=res.draft_tp, contexts=ask.contexts,
        max_batch=int(res.settings["max_num_seqs"]), kv_cache_dtype=ask.kv_cache_dtype,
        draft_quant=ask.draft_quant, constants=_constants(ask),
        kv_tokens=res.with_draft.kv_tokens, lookahead=res.lookahead_slots, batches=ask.columns)
    sp = replace(widen(*runs), acceptance_spread=(choice.al_low, choice.al_high)) \
        if len(runs) == 3 else runs[0]
    sp = replace(sp, acceptance_source=choice.label + _spread_text(choice))
    sp.assumptions[:] = [f"acceptance: {choice.label}{_spread_text(choice)}; acceptance does "
                         "not depend on the batch size" if a.startswith("acceptance:") else a
                         for a in sp.assumptions]
    return choice, sp


def _spread_text(choice: AcceptanceChoice) -> str:
    if choice.al_low is None or choice.al_high is None:
        return ""
    return (f"; its spread AL {choice.al_low:.2f}-{choice.al_high:.2f} at k={choice.k} widens "
            "every band (low acceptance x the model's low residual, high x high)")


def _acceptance(res: PlanResult, ask: _SpeedAsk) -> AcceptanceChoice:
    """--acceptance/--al, then --acceptance-from, then the draft's published figures, then the
    method's prior (speckit.core.plan.acceptance.choose_acceptance)."""
    if ask.acceptance_from is not None and (ask.acceptance is not None or ask.al is not None):
        raise UsageError("--acceptance-from and --acceptance/--al do not combine",
                         hint="pass one source of acceptance")
    flag = from_flags(acceptance=ask.acceptance, acceptance_kind=ask.acceptance_kind,
                      al=ask.al, k=res.k)
    rep = read_acceptance(ask.acceptance_from) if ask.acceptance_from is not None else None
    reg = load_registry()
    entry = draft_entry(reg, ask.draft)
    choice = choose_acceptance(flag=flag, report=rep, entry=entry, registry=reg,
                               method=res.method or "", dataset=ask.dataset, k=res.k,
                               target_params_b=params_from_name(res.target))
    if without_k(choice):  # a published AL without its k: the prior, and the reason
        prior = choose_acceptance(entry=None, registry=reg, method=res.method or "", k=res.k,
                                  target_params_b=params_from_name(res.target))
        if prior is not None:
            choice = replace(prior, label=f"{prior.label}; {choice.label} records no k")
    if choice is None or without_k(choice):
        raise PlanError(f"no acceptance for {res.method}: none given, none published for this "
                        "draft, and the registry records no figure for the method",
                        hint="pass --acceptance P1,P2,... (speckit validate measures them), "
                        "--al X -k K, or --acceptance-from REPORT")
    return choice


def _traffic_speed(res: PlanResult, gpu: GPU | None, ask: _SpeedAsk,
                   traffic: str | Path) -> TrafficSpeed:
    if gpu is None:
        raise UsageError("--traffic projects speed for a catalog GPU, not --gpu-mem-gib",
                         hint="pass --gpu NAME (its bandwidth and peak drive the projection)")
    acceptance, al, k, label = ask.acceptance, ask.al, res.k, None
    if ask.acceptance_from is None and acceptance is None and al is None:
        choice = _acceptance(res, ask)  # published or prior: the same for every bucket
        acceptance, al, k = choice.per_position(), None, len(choice.per_position())
        label = choice.label
    return plan_traffic(
        traffic=traffic, target=res.target if ask.target is None else ask.target,
        draft=ask.draft, method=res.method or "", revision=ask.revision,
        draft_revision=ask.draft_revision, acceptance_from=ask.acceptance_from,
        acceptance=acceptance, acceptance_kind=ask.acceptance_kind, al=al, k=k, gpu=gpu,
        tp=res.tp, draft_tp=res.draft_tp, max_batch=int(res.settings["max_num_seqs"]),
        kv_tokens=res.with_draft.kv_tokens, lookahead=res.lookahead_slots,
        kv_cache_dtype=ask.kv_cache_dtype, draft_quant=ask.draft_quant,
        constants=_constants(ask), acceptance_label=label, columns=ask.columns)


__all__ = [
    "DRAFT_QUANTS",
    "KV_DTYPES",
    "DraftCost",
    "KVReport",
    "OverheadModel",
    "OverheadReport",
    "PlanReport",
    "PlanResult",
    "Scenario",
    "TrafficSpeed",
    "Try",
    "WeightsReport",
    "check_options",
    "check_pairing",
    "check_tp",
    "plan",
    "plan_configs",
    "plan_from_refs",
    "plan_traffic",
    "target_kv_layers",
    "valid_tps",
]
