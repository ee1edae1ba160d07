"""Memory headroom for a target + draft deployment on vLLM: weights, KV cache, the rest, a verdict.

`plan()` checks the options and composes speckit.core.plan's pure math over configs and safetensors
headers; `plan_from_refs()` reads those (local dir, registry id or Hub repo, header-only) first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core.gpus import DEFAULT_GPU, GPU
from speckit.core.plan import compose
from speckit.core.plan.compose import header_tensors, pick_draft_method
from speckit.core.plan.dims import check_tp, target_kv_layers, valid_tps
from speckit.core.plan.kv import KV_DTYPES
from speckit.core.plan.mix import MixProjection, al_by_k, fill_buckets
from speckit.core.plan.options import check_options
from speckit.core.plan.overhead import OverheadModel
from speckit.core.plan.pairing import check_pairing
from speckit.core.plan.projection import acceptance_rates, project_mix_speed
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
from speckit.core.traffic import TrafficReport
from speckit.errors import SpeckitError, UsageError
from speckit.io.checkpoint import Checkpoint, TensorInfo
from speckit.io.context_report import read_acceptance_by_context
from speckit.io.datafiles import get_gpu
from speckit.io.headers import LoadedRef, load_headers, registry_entry
from speckit.io.preflight import check_pair, gate
from speckit.io.projection import step_model_from_refs
from speckit.io.refs import Resolved, classify, resolve
from speckit.io.tokenizer import load_tokenizer, tokenizer_dir
from speckit.io.traffic import traffic_for_run


def plan(*, gpu: GPU | str | None = DEFAULT_GPU, gpu_mem_gib: float | None = None,
         **kwargs: Any) -> PlanResult:
    """Size a vLLM deployment of ``target`` (+ ``draft``) on one TP group of ``gpu`` (a GPU, or a
    catalog name, user GPU files included): speckit.core.plan.compose.plan, whose docstring
    lists the arguments."""
    g = None if gpu_mem_gib is not None else \
        gpu if isinstance(gpu, GPU) else get_gpu(gpu or DEFAULT_GPU)
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
    res = plan(target_config=t.config, target_tensors=t.tensors,
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
        al_by = {b: al_by_k(rates) for b in run.weights}
        source += "; the same for every context bucket"
    model = step_model_from_refs(target=target, draft=draft, revision=revision,
                                 draft_revision=draft_revision, method=method, gpu=gpu, tp=tp,
                                 **model_kwargs)
    mix = project_mix_speed(model, weights=run.weights, contexts=run.contexts, al=al_by,
                            max_batch=max_batch, kv_tokens=kv_tokens, lookahead=lookahead)
    used = {b: al_by[b] for b in run.weights}
    return TrafficSpeed(run.report(), source, used, mix, gpu.name, tp, notes)


__all__ = [
    "DRAFT_QUANTS",
    "KV_DTYPES",
    "DraftCost",
    "KVReport",
    "OverheadModel",
    "OverheadReport",
    "PlanResult",
    "Scenario",
    "TrafficSpeed",
    "Try",
    "WeightsReport",
    "check_options",
    "check_pairing",
    "check_tp",
    "plan",
    "plan_from_refs",
    "plan_traffic",
    "target_kv_layers",
    "valid_tps",
]
