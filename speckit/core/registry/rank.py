"""Registry queries: list entries with filters, and rank the drafts for a target by their
published figures (with nearby targets when none fits). Pure.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

from speckit.core.registry.schema import (
    Candidate,
    Entry,
    NearbyTarget,
    Registry,
    RegistryListing,
    ResolveResult,
    check_method,
    squash,
)


def list_entries(
    registry: Registry,
    *,
    provider: str | None = None,
    method: str | None = None,
    target: str | None = None,
    kind: str | None = "draft",
) -> RegistryListing:
    """The entries `speckit registry list` shows, plus registry-level figures for the same
    method/target filters (those are drafts we know numbers for but do not curate)."""
    entries = registry.filter(provider=provider, method=method, target=target, kind=kind)
    pub = []
    if kind != "target":
        for r in registry.published:
            if method is not None and r.method != method:
                continue
            if target is not None and target.lower() not in (r.target or "").lower():
                continue
            if provider is not None and squash(provider) not in squash(r.provider or ""):
                continue
            pub.append(r)
    return RegistryListing(files=list(registry.files), entries=entries, published=pub)


def _rank_key(e: Entry) -> tuple[float, float, str]:
    tr, al = e.best("throughput_ratio"), e.best("acceptance_length")
    # Higher is better; entries with no figure sort after every entry that has one.
    return (-(tr.best if tr else -1.0), -(al.best if al else -1.0), e.id)


def resolve(registry: Registry, *, target: str, method: str | None = None) -> ResolveResult:
    """Drafts registered for exactly `target` (case-insensitive), optionally one method, ranked by
    best published throughput ratio, then best acceptance length. With none, the result says
    which methods exist for this target and for nearby targets (difflib + same family)."""
    if method is not None:
        check_method(method)
    want = target.strip().lower()
    drafts = registry.filter(kind="draft")
    for_target = [e for e in drafts if (e.target or "").lower() == want]
    matching = sorted((e for e in for_target if method is None or e.method == method),
                      key=_rank_key)
    candidates = [
        Candidate(rank=i, id=e.id, method=e.method or "", repo=e.repo, location=e.location,
                  num_speculative_tokens=e.num_speculative_tokens,
                  best_throughput=e.best("throughput_ratio"),
                  best_acceptance=e.best("acceptance_length"),
                  speculative_config=e.vllm_speculative_config())
        for i, e in enumerate(matching, 1)
    ]
    methods_here = _methods_by(for_target)
    other = [r for r in registry.published if (r.target or "").lower() == want
             and (method is None or r.method == method)]
    nearby: list[NearbyTarget] = []
    if candidates:
        what = f"{method} draft" if method else "draft"
        msg = (f"{len(candidates)} {what}{'s' if len(candidates) > 1 else ''} for {target}, "
               "ranked by best published throughput ratio, then acceptance length")
    else:
        nearby = _nearby_targets(want, drafts)
        if for_target:
            msg = (f"no {method} draft is registered for {target}; registered methods for it: "
                   + ", ".join(sorted(methods_here)))
        else:
            msg = f"no draft is registered for {target}"
            if nearby:
                msg += "; nearby targets: " + "; ".join(
                    f"{n.target} ({', '.join(sorted(n.methods))})" for n in nearby)
        if other:
            msg += f"; {len(other)} published figure(s) exist for drafts not in the registry"
    return ResolveResult(target=target, method=method, candidates=candidates,
                         other_published=other, methods_for_target=methods_here, nearby=nearby,
                         message=msg)


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


