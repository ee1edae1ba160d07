"""Which speculative method suits the measured workload: at each load, the best arm of every
method (the trained draft at its best k, ngram, suffix) against the baseline, from the measured
tok/s of one bench report. Pure: summary rows in, a table and one sentence out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from speckit.bench.report import SummaryRow
from speckit.bench.stats import Spread
from speckit.core.evidence import PAYS, Interval, classify
from speckit.core.metrics import BEST_K_TOLERANCE


@dataclass
class MethodAtLoad:
    """One method's best arm at one load."""

    method: str  # "none" for the baseline
    arm: str
    tok_s: Spread
    ratio: Spread | None
    acceptance_length: float | None
    ratio_interval: Interval | None = None  # 95%, over seeds (SummaryRow.ratio_interval)


@dataclass
class MethodChoice:
    """At one load: every method's best arm and the one to use."""

    load: str
    concurrency: int | None
    rate: float | None
    use: str  # the method with the highest measured tok/s ("none": do not speculate)
    use_arm: str
    # others the measurements do not separate from it (within the tolerance or the sd)
    close: list[str] = field(default_factory=list)
    methods: list[MethodAtLoad] = field(default_factory=list)


def arm_method(row: SummaryRow, trained: str | None) -> str:
    """The method an arm runs: the draft's for static and schedule arms, else the arm's own."""
    if row.kind == "baseline":
        return "none"
    if row.kind in ("static", "schedule"):
        return trained or row.arm.split(" ")[0]
    return row.arm.split(" ")[0]


def method_choices(rows: Sequence[SummaryRow], *, trained: str | None,
                   tolerance: float = BEST_K_TOLERANCE) -> list[MethodChoice]:
    """Per load (of the rows given: one temperature and thinking setting), each method's best
    arm by mean tok/s, and the method to use; a method within ``tolerance`` of the best is
    listed as close, and so is one whose mean +- sd over seeds overlaps the best's, and no
    speculation unless the best's ratio interval lies above 1."""
    by_load: dict[tuple, list[SummaryRow]] = {}
    for r in rows:
        by_load.setdefault((r.concurrency is None, r.concurrency or 0, r.rate or 0.0), []).append(r)
    out = []
    for key in sorted(by_load):
        at = by_load[key]
        best: dict[str, SummaryRow] = {}
        for r in at:
            m = arm_method(r, trained)
            if m not in best or r.output_tok_s.mean > best[m].output_tok_s.mean:
                best[m] = r
        ranked = sorted(best.items(), key=lambda kv: -kv[1].output_tok_s.mean)
        (use, top), rest = ranked[0], ranked[1:]
        close = [m for m, r in rest if _not_separated(r.output_tok_s, top.output_tok_s,
                                                      tolerance)
                 or (m == "none" and classify(top.ratio_interval) != PAYS)]
        out.append(MethodChoice(
            at[0].load, at[0].concurrency, at[0].rate, use, top.arm, close,
            [MethodAtLoad(m, r.arm, r.output_tok_s, r.ratio, r.acceptance_length,
                          r.ratio_interval) for m, r in ranked]))
    return out


def _not_separated(a: Spread, best: Spread, tolerance: float) -> bool:
    """a is within ``tolerance`` of the best, or their mean +- sd over seeds overlap."""
    if a.mean >= best.mean * (1 - tolerance):
        return True
    return (a.n > 1 or best.n > 1) and a.mean + a.sd >= best.mean - best.sd


def advice(choices: Sequence[MethodChoice], *, workload: str) -> str:
    """One sentence: the method to use at each load on this workload, from ``choices``."""
    if not choices:
        return f"{workload}: nothing measured"
    groups: list[tuple[str, list[str]]] = []
    for ch in choices:
        name = _label(ch)
        if groups and groups[-1][0] == name:
            groups[-1][1].append(ch.load)
        else:
            groups.append((name, [ch.load]))
    parts = [f"{name} at {', '.join(loads)}" for name, loads in groups]
    return f"{workload} prompts: use " + "; ".join(parts)


def _label(ch: MethodChoice) -> str:
    name = "no speculation" if ch.use == "none" else ch.use_arm
    if ch.close:
        name += " (" + ", ".join("no speculation" if m == "none" else m for m in ch.close) \
            + " not separated)"
    return name


__all__ = ["MethodAtLoad", "MethodChoice", "advice", "method_choices", "arm_method"]
