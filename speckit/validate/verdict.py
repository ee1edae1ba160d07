"""validate's verdict on whether speculation pays: the measured throughput ratios of a run (end to
end, and the batch probes at the other concurrencies) handed to core.specconfig's rule.

Pure over the report pieces (no engine): tests feed it recorded runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from speckit.core.specconfig import MeasuredRatio, SpeculationVerdict, speculation_verdict

# the end-to-end runs that time the primary draft (a compare run times another draft)
TIMED_ROLES = ("speculative", "confirm")


def measured_ratios(runs: Sequence[Any], concurrency: int, conc: Any = None
                    ) -> list[MeasuredRatio]:
    """Every throughput ratio the run measured for its primary draft.

    ``runs``: SpecRunReports; ``conc``: the ConcurrencyReport or None. At the run's own
    concurrency the end-to-end runs are the measure (they include prefill and scheduling, as a
    server does); the batch probes add the other concurrencies (decode steps at the probed k).
    """
    out = [MeasuredRatio(float(s.throughput_ratio), int(s.run.k), int(concurrency),
                         f"run {s.run.label}", float(s.acceptance_length))
           for s in runs if s.run.role in TIMED_ROLES and not s.acceptance_only
           and s.run.k is not None]
    if conc is not None:
        al = _al_at(runs, conc.k)
        out += [MeasuredRatio(float(m.measured_ratio), int(conc.k), int(m.batch), "batch probe",
                              al)
                for m in conc.measured
                if m.measured_ratio is not None and (m.batch != concurrency or not out)]
    return out


def verdict(runs: Sequence[Any], *, concurrency: int, conc: Any = None, cpu: bool = False,
            emulated: str | None = None) -> SpeculationVerdict:
    """The verdict for a validate run; ``emulated``: why the draft's kernels are emulated here."""
    causes = []
    if emulated:
        causes.append(f"the draft's quantized kernels are emulated here ({emulated})")
    if cpu:
        causes.append("a CPU engine: the target's decode step is so cheap that the draft's "
                      "passes dominate; a GPU serving a larger target sees other costs "
                      "(`speckit plan` or --serve-gpu project one)")
    v = speculation_verdict(measured_ratios(runs, concurrency, conc), causes=causes,
                            projected_for=_projected_for(conc))
    if v.pays is False:
        v.reasons += _probes_overruled(v, conc, concurrency)
    return v


def _probes_overruled(v: SpeculationVerdict, conc: Any, concurrency: int) -> list[str]:
    """A probe at the run's own concurrency that looked better than the end-to-end runs is not
    hidden: the report's concurrency table shows it, so the verdict says why it did not count."""
    if conc is None:
        return []
    e2e = [m for m in v.measured if m.source != "batch probe"]
    return [f"at concurrency {m.batch} the batch probe's decode-step ratio was "
            f"{m.measured_ratio:.3f}x, but the end-to-end runs there (prefill and scheduling "
            f"included, as a server sees them) measured "
            + ", ".join(f"{x.ratio:.3f}x at k={x.k}" for x in e2e)
            for m in conc.measured
            if e2e and m.batch == concurrency and (m.measured_ratio or 0) >= 1.0]


def _al_at(runs: Sequence[Any], k: int) -> float | None:
    return next((float(s.acceptance_length) for s in runs
                 if s.run.role in TIMED_ROLES and s.run.k == k), None)


def _projected_for(conc: Any) -> str | None:
    """The serving GPU whose projected schedule speculates somewhere, else None."""
    serve = getattr(conc, "serve", None) if conc is not None else None
    if not serve:
        return None
    if any(int(r[2]) > 0 for r in serve.get("schedule") or []):
        return f"{serve.get('gpu')} x TP={serve.get('tp')}"
    return None
