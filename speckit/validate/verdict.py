"""validate's verdict on whether speculation pays, handed to core.specconfig's rule from three
kinds of evidence:

- the end-to-end runs at the run's concurrency (prefill and scheduling included, as a server sees
  them), each with a 95% interval over its paired prompts: they decide;
- the step model fitted to the batch probes over all measured concurrencies, with a band of its
  fit error: it decides at the concurrencies it was measured at, when it agrees with an
  end-to-end run at the run's concurrency (each ratio inside the other's interval: decode steps
  alone can misjudge a machine);
- each batch probe point (decode steps only, a few rounds): shown with its interval, never
  counted. One noisy probe must not flip the verdict.

Pure over the report pieces (no engine): tests feed it recorded runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from speckit.core.evidence import Interval, shown
from speckit.core.specconfig import MeasuredRatio, SpeculationVerdict, speculation_verdict

# the end-to-end runs that time the primary draft (a compare run times another draft)
TIMED_ROLES = ("speculative", "confirm")
MORE = "more prompts (--num-prompts) or a quieter machine"


def measured_ratios(runs: Sequence[Any], concurrency: int, conc: Any = None
                    ) -> tuple[list[MeasuredRatio], str | None]:
    """The throughput ratios measured for the primary draft, and why the fit was left out.

    ``runs``: SpecRunReports; ``conc``: the ConcurrencyReport or None.
    """
    e2e = [MeasuredRatio(float(s.throughput_ratio), int(s.run.k), int(concurrency),
                         f"run {s.run.label}", float(s.acceptance_length), s.ratio_interval,
                         kind="run")
           for s in runs if s.run.role in TIMED_ROLES and not s.acceptance_only
           and s.run.k is not None]
    if conc is None:
        return e2e, None
    al = _al_at(runs, conc.k)
    probes = [MeasuredRatio(float(m.measured_ratio), int(conc.k), int(m.batch), "batch probe",
                            al, m.ratio_interval, decides=False, kind="probe")
              for m in conc.measured if m.measured_ratio is not None]
    fitted = fitted_points(conc)
    left_out = _disagreement(e2e, fitted, concurrency, conc.k)
    if left_out:
        fitted = [replace(m, decides=False) for m in fitted]
    return e2e + fitted + probes, left_out


def fitted_points(conc: Any) -> list[MeasuredRatio]:
    """The fitted step model's ratio at each measured concurrency, at the k it fits best there,
    with a band of twice its worst error (fit or held out): a ratio is AL x base / spec, and the
    two step times can each be off by that much."""
    if conc.not_fitted is not None or not conc.ratio:
        return []
    errs = [abs(e) for e in (conc.holdout_error or {}).values()]
    rel = 2 * max([float(conc.worst_fit_error or 0.0), *errs])
    out = []
    for m in conc.measured:
        if m.batch not in conc.batches:
            continue
        i = conc.batches.index(m.batch)
        k = max((kk for kk in conc.ratio if int(kk) >= 1), key=lambda kk: conc.ratio[kk][i])
        r = float(conc.ratio[k][i])
        iv = Interval(r * max(0.0, 1 - rel), r * (1 + rel), len(conc.measured),
                      "fitted concurrencies", f"fitted step model, +-{100 * rel:.0f}% (twice its "
                      "worst fit or held-out error)")
        out.append(MeasuredRatio(r, int(k), int(m.batch), "fitted step model", None, iv,
                                 kind="fit"))
    return out


def _disagreement(e2e: list[MeasuredRatio], fitted: list[MeasuredRatio], concurrency: int,
                  k: int) -> str | None:
    """Why the fit is not counted: at the run's concurrency it agrees with no end-to-end run (or
    it cannot be compared there); None when it agrees with one."""
    if not fitted:
        return None
    at = next((m for m in fitted if m.concurrency == concurrency), None)
    runs = [m for m in e2e if m.k == k] or e2e
    if at is None or not runs:
        return (f"the step model fitted to the batch probes is not counted: it was not measured "
                f"at concurrency {concurrency}, where the end-to-end runs could check it")
    if any(_agree(at, m) for m in runs):
        return None
    return (f"the step model fitted to the batch probes (decode steps only) is not counted: at "
            f"concurrency {concurrency} it gives {shown(at.ratio, at.interval)} at k={at.k} where "
            "the end-to-end runs measured " + ", ".join(
                f"{shown(m.ratio, m.interval)} at k={m.k}" for m in runs)
            + "; decode steps alone misjudge this machine")


def _agree(fit: MeasuredRatio, run: MeasuredRatio) -> bool:
    """Each inside the other's interval: the fit's ratio within the run's 95% interval, and the
    run's ratio within the fit's band. Merely overlapping ranges are not enough: a decode-only
    fit that sits above the whole end-to-end interval is contradicted by the direct measure."""
    band = fit.interval
    in_band = band is None or band.contains(run.ratio)
    return in_band and (run.interval is None or run.interval.contains(fit.ratio))


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
    v = speculation_verdict(points, causes=causes, projected_for=_projected_for(conc), more=MORE)
    if left_out:
        v.reasons.append(left_out)
    return v


def _al_at(runs: Sequence[Any], k: int) -> float | None:
    return next((float(s.acceptance_length) for s in runs
                 if s.run.role in TIMED_ROLES and s.run.k == k), None)


def _projected_for(conc: Any) -> str | None:
    """The serving GPU whose projected schedule speculates somewhere, else None.

    The projected schedule (core.plan.schedule) leaves k = 0 only where a k's error band lies
    wholly above 1.0, so a projected gain inside the band never reaches here as a reason to
    speculate."""
    serve = conc.serve if conc is not None else None
    if not serve:
        return None
    if any(int(r[2]) > 0 for r in serve.get("schedule") or []):
        return f"{serve.get('gpu')} x TP={serve.get('tp')}"
    return None
