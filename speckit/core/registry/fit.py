"""Does a registry draft start on this GPU, and at which k? speckit plan's arithmetic over the
shapes the registry records (speckit.core.plan.compose on computed weights), so `registry
resolve --gpu` ranks what runs first and never offers a k that plan says will not start. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from speckit.core import methods
from speckit.core.gpus import GPU
from speckit.core.methods import MethodSpec
from speckit.core.methods.detect import pick_method
from speckit.core.plan import compose, options
from speckit.core.plan.computed import computed_draft_tensors, computed_tensors
from speckit.core.plan.report import PlanResult
from speckit.core.plan.scenarios import token_budget_reasons
from speckit.core.registry.schema import Entry, Registry
from speckit.errors import FormatError, PlanError, UsageError

# how well a candidate's fit is known, best first (the first ranking key of resolve)
STARTS, STARTS_TARGET_SIZED, NOT_CHECKED, WILL_NOT_START = range(4)


@dataclass
class Fit:
    """What plan says about one candidate on the GPU: its class (STARTS ...), the k it starts
    at (never above the entry's), and one sentence on what was checked."""

    level: int
    k: int | None
    detail: str
    _plan_result: PlanResult | None = None  # the plan the verdict rests on (not in --json)

    @property
    def plan(self) -> PlanResult | None:
        """The plan the verdict rests on (KV left, lookahead slots), where one was made."""
        return self._plan_result

    @property
    def verdict(self) -> str:
        return ("starts", "starts (draft not sized)", "not checked",
                "will not start")[self.level]


@dataclass(frozen=True)
class Deployment:
    gpu: GPU
    tp: int = 1
    concurrency: int | None = None  # max_num_seqs; None: vLLM's default for the GPU


def target_entry(registry: Registry, target: str) -> Entry | None:
    """The registry's target entry for ``target`` (its Hub repo, or a local copy of it)."""
    want = target.lower()
    for e in registry.entries.values():
        if e.kind == "target" and want in ((e.repo or "").lower(), (e.local_copy_of or "").lower(),
                                           e.id):
            return e
    return None


def draft_entry(registry: Registry, ref: str | None) -> Entry | None:
    """The registry draft entry ``ref`` names: its id, its Hub repo (``@revision`` ignored), or a
    path ending in the directory speckit bundles it in."""
    if not ref:
        return None
    key = ref.strip()
    e = registry.entries.get(key) or registry.entries.get(key.lower())
    if e is not None:
        return e if e.kind == "draft" else None
    repo = key.split("@", 1)[0].lower()
    path = key.replace("\\", "/").rstrip("/")
    for x in registry.entries.values():
        if x.kind != "draft":
            continue
        if (x.repo or "").lower() == repo or (x.bundled and path.endswith(x.bundled)):
            return x
    return None


def place(entry: Entry, target: Entry | None, dep: Deployment,
          target_rows: list[Any] | None = None) -> Fit:
    """The largest k (at most the entry's) at which ``entry`` + its target start on ``dep``."""
    k0 = entry.num_speculative_tokens
    if target is None or target.config is None:
        return Fit(NOT_CHECKED, k0, "the registry records no shape for the target")
    rows = target_rows if target_rows is not None else computed_tensors(
        target.config, where=target.id).tensors
    base = _plan(target.config, rows, None, [], dep, method=None, k=None)
    if not base.starts:
        return Fit(WILL_NOT_START, None, f"the target alone will not start: {base.reasons[0]}")
    if k0 is None:
        return Fit(NOT_CHECKED, None, "the target fits; no k is published for this draft")
    if entry.config is None:
        return _budget_only(entry, k0, base)
    return _full(entry, target, rows, k0, dep)


def _spec(entry: Entry) -> MethodSpec:
    return methods.get(entry.method or "")


def _budget_only(entry: Entry, k0: int, base: PlanResult) -> Fit:
    """No draft shape: the target's plan plus the token budget at each k (the draft's weights and
    KV are not counted, and the verdict says so)."""
    spec = _spec(entry)
    tokens, seqs = base.settings["max_num_batched_tokens"], base.settings["max_num_seqs"]
    for k in range(k0, 0, -1):
        if not token_budget_reasons(spec, k, tokens=tokens, seqs=seqs):
            lowered = f" (lowered from {k0}: the token budget)" if k != k0 else ""
            return Fit(STARTS_TARGET_SIZED, k, f"target fits and the token budget allows "
                       f"k={k}{lowered}; the draft's weights and KV are not sized (no recorded "
                       "shape)", base)
    why = token_budget_reasons(spec, 1, tokens=tokens, seqs=seqs)
    return Fit(WILL_NOT_START, None, why[0] if why else "no k fits the token budget")


def _full(entry: Entry, target: Entry, rows: list[Any], k0: int, dep: Deployment) -> Fit:
    """Both shapes recorded: plan at k0, then smaller k until vLLM would start."""
    cfg = dict(entry.config or {})
    picked = pick_method(cfg, None, registry=entry.method, where=entry.id)
    assert picked is not None
    drows = computed_draft_tensors(picked.spec, entry.source_layout, cfg, where=entry.id).tensors
    first: PlanResult | None = None
    for k in range(k0, 0, -1):
        try:
            picked.spec.check_k(cfg, k)
        except (UsageError, PlanError):
            continue
        res = _plan(target.config or {}, rows, cfg, drows, dep, method=entry.method, k=k)
        first = first or res
        if res.starts:
            lowered = f" (lowered from {k0}: {first.reasons[0]})" if k != k0 else ""
            return Fit(STARTS, k, f"plan: starts at k={k}{lowered}", res)
    why = first.reasons[0] if first is not None and first.reasons else "no k passes its k rule"
    return Fit(WILL_NOT_START, None, f"plan: {why}")


def _plan(tcfg: Mapping[str, Any], trows: list[Any], dcfg: Mapping[str, Any] | None,
          drows: list[Any], dep: Deployment, *, method: str | None,
          k: int | None) -> PlanResult:
    try:
        return compose.plan(target_config=tcfg, target_tensors=trows, draft_config=dcfg,
                            draft_tensors=drows or None, method=method, k=k, gpu=dep.gpu,
                            tp=dep.tp, max_num_seqs=dep.concurrency, suggest=False)
    except (PlanError, FormatError) as e:  # TP that does not divide the heads, ...
        raise PlanError(e.message, hint=e.hint) from None


def place_without_draft(method: str, k: int, target: Entry | None, dep: Deployment,
                        target_rows: list[Any] | None = None) -> Fit:
    """An engine-only method (ngram, suffix: no draft checkpoint) at ``k`` with the target on
    ``dep``: plan's verdict with the method's lookahead slots and token budget."""
    if target is None or target.config is None:
        return Fit(NOT_CHECKED, k, "the registry records no shape for the target")
    rows = target_rows if target_rows is not None else computed_tensors(
        target.config, where=target.id).tensors
    res = _plan(target.config, rows, None, [], dep, method=method, k=k)
    if not res.starts:
        return Fit(WILL_NOT_START, None, f"plan: {res.reasons[0]}", res)
    return Fit(STARTS, k, f"plan: starts at k={k}", res)


def default_concurrency(gpu: GPU, tp: int) -> int:
    """vLLM's max_num_seqs on this GPU when the flag is not given (what plan assumes)."""
    return options.serve_defaults(gpu, platform=gpu.platform, tp=tp)[1]


__all__ = ["NOT_CHECKED", "STARTS", "STARTS_TARGET_SIZED", "WILL_NOT_START", "Deployment", "Fit",
           "default_concurrency", "draft_entry", "place", "place_without_draft",
           "target_entry"]
