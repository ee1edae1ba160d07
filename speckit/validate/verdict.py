"""validate's verdict on whether speculation pays: the measured throughput ratios of a run (end to
end, and the batch probes at the other concurrencies when they agree with the end-to-end runs)
handed to core.specconfig's rule.

Pure over the report pieces (no engine): tests feed it recorded runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from speckit.core.specconfig import MeasuredRatio, SpeculationVerdict, speculation_verdict

# the end-to-end runs that time the primary draft (a compare run times another draft)
TIMED_ROLES = ("speculative", "confirm")


def measured_ratios(runs: Sequence[Any], concurrency: int, conc: Any = None
                    ) -> tuple[list[MeasuredRatio], str | None]:
    """The throughput ratios measured for the primary draft, and why probes were left out.

    ``runs``: SpecRunReports; ``conc``: the ConcurrencyReport or None. At the run's own
    concurrency the end-to-end runs are the measure (prefill and scheduling included, as a server
    sees them). The batch probes (decode steps only) add the other concurrencies when the probe
    at the run's concurrency agrees with the end-to-end runs there on whether speculation pays;
    when it does not, the probes misjudge this machine and none is counted (the note says so).
    """
    e2e = [MeasuredRatio(float(s.throughput_ratio), int(s.run.k), int(concurrency),
                         f"run {s.run.label}", float(s.acceptance_length))
           for s in runs if s.run.role in TIMED_ROLES and not s.acceptance_only
           and s.run.k is not None]
    if conc is None:
        return e2e, None
    al = _al_at(runs, conc.k)
    probes = {int(m.batch): float(m.measured_ratio) for m in conc.measured
              if m.measured_ratio is not None}
    own = probes.pop(int(concurrency), None)
    same_k = [m for m in e2e if m.k == conc.k] or e2e
    if own is not None and same_k and (own >= 1.0) != (max(m.ratio for m in same_k) >= 1.0):
        return e2e, (f"the batch probes (decode steps only, k={conc.k}) are not counted: at "
                     f"concurrency {concurrency} the probe measured {own:.3f}x where the "
                     "end-to-end runs measured " + ", ".join(
                         f"{m.ratio:.3f}x at k={m.k}" for m in e2e) + "; their "
                     + ", ".join(f"{r:.2f}x at concurrency {b}" for b, r in probes.items())
                     + " elsewhere misjudge this machine the same way")
    return e2e + [MeasuredRatio(r, int(conc.k), b, "batch probe", al)
                  for b, r in probes.items()], None


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
    points, left_out = measured_ratios(runs, concurrency, conc)
    v = speculation_verdict(points, causes=causes, projected_for=_projected_for(conc))
    if left_out:
        v.reasons.append(left_out)
    return v


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
