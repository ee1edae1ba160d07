"""Which of a validate report's ratios answers "does speculation pay on this machine?", and what
each of the others is (the demo prints them named; issue 45).

The answer is the verdict's; its figure is an end-to-end run's measured ratio with its 95%
interval (the run the verdict names, else the one at the served k). Every other ratio in the
report is a prediction, a model, a probe, a projection or another run, and is said to be one.
Pure over the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from speckit.core.evidence import shown
from speckit.core.specconfig import NOT_TIMED, MeasuredRatio


@dataclass
class Headline:
    """The answer to "does speculation pay on this machine?" and the figure behind it."""

    answer: str  # the verdict's status: pays, does not pay, cannot tell, not timed
    figure: MeasuredRatio | None  # the end-to-end run that answers (None: nothing timed)
    others: list[str] = field(default_factory=list)  # what every other ratio shown is

    @property
    def text(self) -> str:
        if self.figure is None:
            return f"does speculation pay on this machine? {self.answer}: no run was timed"
        m = self.figure
        return (f"does speculation pay on this machine? {self.answer}: "
                f"{shown(m.ratio, m.interval)} measured end to end at k={m.k}, concurrency "
                f"{m.concurrency} ({m.source}) - validate's headline ratio")


def headline(rep: Any) -> Headline:
    """The headline of a ValidationReport ``rep``."""
    v = rep.verdict
    measured = list(v.measured) if v is not None else []
    runs = [m for m in measured if m.kind == "run"]
    best = v.best if v is not None and v.best is not None and v.best in runs else None
    figure = best or next((m for m in runs if m.k == rep.k), runs[0] if runs else None)
    answer = v.status if v is not None else NOT_TIMED
    return Headline(answer, figure, _others(rep, measured, figure))


def _others(rep: Any, measured: list[MeasuredRatio], figure: MeasuredRatio | None) -> list[str]:
    out = [f"{m.source} at k={m.k}: {shown(m.ratio, m.interval)}, another end-to-end run"
           for m in measured if m.kind == "run" and m is not figure]
    if rep.sweep is not None:
        out.append(f"the k sweep's predicted ratios: the step model's prediction for each k from "
                   f"the run at k={rep.sweep.k_measured} (only that k and a confirmed one ran)")
    kinds = {m.kind for m in measured}
    if "fit" in kinds:
        out.append("fitted step model by concurrency: the step-cost model fitted to this "
                   "machine's batch probes, a model with its error band")
    if "probe" in kinds:
        out.append("batch probes: decode steps alone timed at each concurrency; shown, they "
                   "decide nothing")
    serve = rep.concurrency.serve if rep.concurrency is not None else None
    if serve:
        out.append(f"projected for {serve['gpu']}: the H200-fitted step model's projection, "
                   "not measured")
    if rep.compare is not None:
        out.append(f"{rep.compare.other.run.label}: the compare draft"
                   + (", acceptance only: no throughput" if rep.compare.acceptance_only else ""))
    return out
