"""Registry queries: list entries with filters, and rank the drafts for a target by whether they
start on the user's GPU and by comparable published figures (with nearby targets and draft-free
methods when none is registered). Pure.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

from speckit.core import methods
from speckit.core.plan.computed import computed_tensors
from speckit.core.registry.fit import (
    NOT_CHECKED,
    STARTS,
    STARTS_TARGET_SIZED,
    WILL_NOT_START,
    Deployment,
    Fit,
    default_concurrency,
    place,
    target_entry,
)
from speckit.core.registry.schema import (
    Candidate,
    Entry,
    NearbyTarget,
    PublishedResult,
    Registry,
    ResolveResult,
    check_method,
    squash,
)
from speckit.errors import FormatError, PlanError, UsageError

__all__ = ["resolve"]


def resolve(registry: Registry, *, target: str, method: str | None = None,
            deployment: Deployment | None = None) -> ResolveResult:
    """Drafts registered for exactly `target` (case-insensitive), optionally one method.

    Ranked by whether they start on ``deployment`` (plan's arithmetic over the registry's
    recorded shapes, at the largest k up to the entry's that starts), then by published figures
    on the prompt set the most of them share (acceptance length first: a throughput ratio is
    compared only within one study's GPU and engine). With none, the result says which methods
    exist for this target and nearby ones, and which engine methods need no draft."""
    if method is not None:
        check_method(method)
    want = target.strip().lower()
    drafts = registry.filter(kind="draft")
    for_target = [e for e in drafts if (e.target or "").lower() == want]
    matching = [e for e in for_target if method is None or e.method == method]
    label, comparable = _comparable(matching)
    fits = _fits(registry, target, matching, deployment)
    order = {e.id: i for i, e in enumerate(matching)}  # ties keep the registry's order
    ordered = sorted(matching, key=lambda e: _rank_key(e, fits.get(e.id), comparable.get(e.id),
                                                       order[e.id]))
    candidates = [_candidate(i, e, fits.get(e.id), comparable.get(e.id))
                  for i, e in enumerate(ordered, 1)]
    res = ResolveResult(target=target, method=method, candidates=candidates,
                        other_published=[r for r in registry.published
                                         if (r.target or "").lower() == want
                                         and (method is None or r.method == method)],
                        methods_for_target=_methods_by(for_target), nearby=[], message="")
    res.ranked_by = _ranked_by(deployment, label)
    res.start_with = _start_with(candidates)
    if not candidates:
        res.nearby = _nearby_targets(want, drafts)
        res.without_draft = [s.speculative_config(model=None, k=s.default_k({}), config={})
                             for s in methods.all_specs() if not s.has_checkpoint]
    res.message = _message(res, method, for_target)
    return res


def _fits(registry: Registry, target: str, entries: list[Entry],
          dep: Deployment | None) -> dict[str, Fit]:
    if dep is None or not entries:
        return {}
    tentry = target_entry(registry, target)
    rows = None
    if tentry is not None and tentry.config is not None:
        try:
            rows = computed_tensors(tentry.config, where=tentry.id).tensors
        except (PlanError, FormatError) as e:
            return {x.id: Fit(NOT_CHECKED, x.num_speculative_tokens,
                              f"the target's weights cannot be computed: {e.message}")
                    for x in entries}
    out = {}
    for e in entries:
        try:
            out[e.id] = place(e, tentry, dep, rows)
        except (PlanError, FormatError, UsageError) as err:
            out[e.id] = Fit(WILL_NOT_START, None, err.message)
    return out


def _rank_key(e: Entry, fit: Fit | None, figure: PublishedResult | None, index: int) -> tuple:
    level = fit.level if fit is not None else NOT_CHECKED
    return (level, figure is None, -(figure.best if figure else 0.0), index)


def _candidate(rank: int, e: Entry, fit: Fit | None, figure: PublishedResult | None) -> Candidate:
    cfg = e.vllm_speculative_config()
    if fit is not None and fit.k is not None:
        cfg["num_speculative_tokens"] = fit.k
    return Candidate(rank=rank, id=e.id, method=e.method or "", repo=e.repo, location=e.location,
                     num_speculative_tokens=fit.k if fit is not None and fit.k is not None
                     else e.num_speculative_tokens,
                     best_throughput=e.best("throughput_ratio"),
                     best_acceptance=e.best("acceptance_length"), speculative_config=cfg,
                     fit=fit, comparable=figure)


def _start_with(candidates: list[Candidate]) -> dict | None:
    """The first candidate that plan says starts (or, without a GPU, the first with a k)."""
    for c in candidates:
        if "num_speculative_tokens" not in c.speculative_config:
            continue
        if c.fit is None or c.fit.level in (STARTS, STARTS_TARGET_SIZED):
            return c.speculative_config
    return None


_PREFERRED = ("mtbench", "gsm8k", "humaneval", "math500")


def _comparable(entries: list[Entry]) -> tuple[str, dict[str, PublishedResult]]:
    """The figures to rank on: per entry, its best acceptance length on the prompt set the most
    entries report one for; else its throughput ratio on the (prompt set, GPU, engine) the most
    share (one study); a figure no other candidate shares ranks nothing."""
    for metric in ("acceptance_length", "throughput_ratio"):
        groups: dict[tuple, dict[str, PublishedResult]] = {}
        for e in entries:
            for r in e.published:
                if r.metric != metric:
                    continue
                key = (squash(r.dataset),) if metric == "acceptance_length" else \
                    (squash(r.dataset), r.hardware or "", r.engine or "")
                best = groups.setdefault(key, {}).get(e.id)
                if best is None or r.best > best.best:
                    groups[key][e.id] = r
        shared = [(k, v) for k, v in groups.items() if len(v) >= 2]
        if shared:
            key, figures = max(shared, key=lambda kv: (len(kv[1]), _preference(kv[0][0])))
            any_r = next(iter(figures.values()))
            what = f"acceptance length on {any_r.dataset}" if metric == "acceptance_length" \
                else (f"throughput ratio on {any_r.dataset} ({', '.join(key[1:])})")
            return f"{what}, which {len(figures)} of them publish", figures
    return "", {}


def _preference(dataset_key: str) -> int:
    return len(_PREFERRED) - _PREFERRED.index(dataset_key) if dataset_key in _PREFERRED else 0


def _ranked_by(dep: Deployment | None, label: str) -> str:
    first = (f"what starts on {dep.gpu.name} x TP={dep.tp} at concurrency "
             f"{dep.concurrency or default_concurrency(dep.gpu, dep.tp)} (speckit plan over the "
             "registry's recorded shapes, at the largest k up to the entry's that starts)"
             if dep is not None else "fit not checked (no GPU given)")
    then = label or ("no figure two of them share, so nothing further (figures from different "
                     "GPUs, engines and prompt sets are not comparable)")
    return f"{first}; then {then}; ties keep the registry's order"


def _message(res: ResolveResult, method: str | None, for_target: list[Entry]) -> str:
    if res.candidates:
        n = len(res.candidates)
        what = f"{method} draft" if method else "draft"
        return f"{n} {what}{'s' if n > 1 else ''} for {res.target}"
    if for_target:
        msg = (f"no {method} draft is registered for {res.target}; registered methods for it: "
               + ", ".join(sorted(res.methods_for_target)))
    else:
        msg = f"no draft is registered for {res.target}"
        if res.nearby:
            msg += "; nearby targets: " + "; ".join(
                f"{n.target} ({', '.join(sorted(n.methods))})" for n in res.nearby)
    if res.other_published:
        msg += f"; {len(res.other_published)} published figure(s) exist for drafts not in the " \
            "registry"
    return msg


def _methods_by(entries: Iterable[Entry]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for e in entries:
        out.setdefault(e.method or "", []).append(e.id)
    return out


def _family(repo: str) -> str:
    """'qwen/qwen3-8b' -> 'qwen3'; 'google/gemma-4-31b-it' -> 'gemma-4': the name up to the first
    size/variant token, so siblings of one model family share it."""
    name = repo.split("/", 1)[-1].lower()
    tokens = re.split(r"[-_]", name)
    fam = []
    for t in tokens:
        if re.fullmatch(r"[a-z]?\d+(\.\d+)?[bmk]|a\d+(\.\d+)?b|e\d+b|it|instruct|chat|base", t):
            break
        fam.append(t)
    return "-".join(fam) or name


def _nearby_targets(want: str, drafts: Sequence[Entry], *, n: int = 4) -> list[NearbyTarget]:
    lower = sorted({(e.target or "").lower() for e in drafts} - {want})
    close = difflib.get_close_matches(want, lower, n=n, cutoff=0.55)
    fam = _family(want)
    same_family = [t for t in lower if _family(t) == fam and t not in close]
    picked = (close + same_family)[:n]
    out = []
    for t in picked:
        entries = [e for e in drafts if (e.target or "").lower() == t]
        out.append(NearbyTarget(target=entries[0].target or t, methods=_methods_by(entries)))
    return out


