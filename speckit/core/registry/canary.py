"""The live canary: a measured acceptance held against the figure the draft's producer (or an
independent source) publishes for a comparable setting. Far below it ends in "acceptance
collapsed" with the pre-flight findings that could explain it. Pure: validate and bench pass the
measured figure, the registry entry's published rows and the pre-flight findings.

The threshold works on accepted draft tokens per step, AL - 1 (the bonus token is produced with
or without a draft): COLLAPSED when the measured share of the published one is under
COLLAPSE_SHARE (1/2), BELOW under BELOW_SHARE (3/4). Why these: one draft's published accepted
tokens move by about a quarter to a third across prompt sets and harnesses (speckit's own
smollm2-135m-eagle3, k=3 on vLLM: chat 1.34 against code 1.82 accepted tokens per step, 26%
apart; registry.toml records it), so a share under 3/4 is worth a look and one under 1/2 lies
beyond that spread; the silent collapses pre-flight knows (wrong aux layers, another target, a
chat template the draft was not trained on) leave AL near 1, a share near 0. The comparable
figure is the LOWEST published on the prompt sets the measured one draws from, so that a prompt
set mix never reads as a collapse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from speckit.core.plan import schedule as _sched
from speckit.core.registry.schema import PublishedResult, squash

COLLAPSE_SHARE = 0.5
BELOW_SHARE = 0.75
COLLAPSED, BELOW, CONSISTENT, NO_FIGURE = ("acceptance collapsed", "below the published figure",
                                           "consistent with the published figure",
                                           "no comparable published figure")
# validate's built-in prompt sets that are speckit's own categories (speckit/data/prompts)
_SPECKIT_SETS = ("chat", "code", "math")
GREEDY_TOLERANCE = 0.05  # temperatures this close are one setting


@dataclass
class AcceptanceCanary:
    """The measured AL against the comparable published one, and what it means."""

    status: str  # COLLAPSED | BELOW | CONSISTENT | NO_FIGURE
    measured_al: float
    k: int
    dataset: str
    published_al: float | None = None
    published_dataset: str | None = None
    source: str | None = None
    share: float | None = None  # (measured AL - 1) / (published AL - 1)
    threshold: float = COLLAPSE_SHARE
    message: str = ""
    findings: list[str] = field(default_factory=list)  # pre-flight findings that could explain it
    compared: list[str] = field(default_factory=list)  # what made the figure comparable

    @property
    def collapsed(self) -> bool:
        return self.status == COLLAPSED


def comparable_sets(measured: str) -> tuple[str, ...]:
    """The squashed published-dataset prefixes a measured prompt set stands for: speckit's own
    categories ("speckit code ..."), all three for validate's "mixed", else its own name."""
    m = squash(measured)
    if m == "mixed":
        return tuple("speckit" + x for x in _SPECKIT_SETS)
    if m in _SPECKIT_SETS:
        return ("speckit" + m,)
    return (m,) if m else ()


def published_al_at(r: PublishedResult, k: int) -> float | None:
    """A published figure's AL at ``k``: its own where it was measured at k, else from its
    per-position rates where they reach k; None when it cannot say."""
    if r.metric != "acceptance_length":
        return None
    if r.k == k:
        return float(r.value) if r.value is not None else (
            (float(r.min) + float(r.max)) / 2 if r.min is not None and r.max is not None
            else None)
    if r.per_position and len(r.per_position) >= k:
        return _sched.al_from_per_position(list(r.per_position), k)
    return None


def compare_acceptance(*, measured_al: float, k: int, dataset: str, published:
                       Sequence[PublishedResult], temperature: float | None = 0.0,
                       thinking: bool | None = None,
                       findings: Sequence[Any] = ()) -> AcceptanceCanary:
    """``measured_al`` at ``k`` on ``dataset`` against the lowest comparable published AL: the
    same prompt set (comparable_sets), AL at the same k, the same temperature (within
    GREEDY_TOLERANCE; unknown counts as greedy) and thinking mode (unknown matches either).
    ``findings``: pre-flight findings (core.preflight.Finding), listed when it collapsed."""
    rows = _comparable(published, k, dataset, temperature, thinking)
    base = AcceptanceCanary(NO_FIGURE, measured_al, k, dataset)
    if not rows:
        base.message = (f"{NO_FIGURE} for AL at k={k} on {dataset!r} (temperature "
                        f"{temperature}, thinking {_mode(thinking)})")
        return base
    al, r = min(rows, key=lambda x: x[0])
    share = (measured_al - 1.0) / (al - 1.0) if al > 1.0 else 1.0
    status = COLLAPSED if share < COLLAPSE_SHARE else BELOW if share < BELOW_SHARE else \
        CONSISTENT
    out = AcceptanceCanary(status, measured_al, k, dataset, al, r.dataset, r.source, share,
                           compared=[f"{len(rows)} comparable figure(s); the lowest is used"])
    out.message = (f"measured AL {measured_al:.2f} at k={k} on {dataset!r} vs published "
                   f"{al:.2f} on {r.dataset} ({r.source}): {share:.0%} of its accepted tokens "
                   f"per step; {status}")
    if status == COLLAPSED:
        out.message += (f" (under {COLLAPSE_SHARE:.0%}: beyond the spread of one draft's "
                        "published figures across prompt sets)")
        out.findings = finding_lines(findings)
    return out


def canary_lines(c: AcceptanceCanary | None) -> list[str]:
    """What validate and bench print: the comparison, then (collapsed) the findings; the last
    line of a collapse is "acceptance collapsed"."""
    if c is None or c.status == NO_FIGURE:
        return [] if c is None else [f"canary: {c.message}"]
    out = [f"canary: {c.message}"]
    if c.collapsed:
        out += [f"  - {x}" for x in c.findings] + [COLLAPSED]
    return out


def finding_lines(findings: Sequence[Any]) -> list[str]:
    """Pre-flight findings (core.preflight.Finding) as the canary lists them."""
    lines = [f"pre-flight {f.severity}: {f.message} [{f.subject}] (fix: {f.fix}; {f.report})"
             for f in findings]
    return lines or ["pre-flight found nothing in the pair's files: look at the chat template, "
                     "the sampling settings and the engine release"]


def _comparable(published: Sequence[PublishedResult], k: int, dataset: str,
                temperature: float | None, thinking: bool | None
                ) -> list[tuple[float, PublishedResult]]:
    sets = comparable_sets(dataset)
    out = []
    for r in published:
        al = published_al_at(r, k)
        if al is None or not sets or not squash(r.dataset).startswith(sets):
            continue
        if abs((r.temperature or 0.0) - (temperature or 0.0)) > GREEDY_TOLERANCE:
            continue
        if r.thinking is not None and thinking is not None and r.thinking != thinking:
            continue
        out.append((al, r))
    return out


def _mode(thinking: bool | None) -> str:
    return "unknown" if thinking is None else "on" if thinking else "off"


__all__ = ["BELOW", "BELOW_SHARE", "COLLAPSED", "COLLAPSE_SHARE", "CONSISTENT", "NO_FIGURE",
           "AcceptanceCanary", "canary_lines", "comparable_sets", "compare_acceptance",
           "finding_lines", "published_al_at"]
