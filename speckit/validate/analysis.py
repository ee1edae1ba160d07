"""What validate's engine runs measured: per-run reports, the k sweep's predictions and their
calibration, and the warnings that say why a number looks wrong (no engine starts here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from speckit.core.evidence import paired_ratio_interval
from speckit.core.methods import MethodSpec
from speckit.core.metrics import (
    StepCosts,
    al_from_per_position,
    best_k,
    calibrate_costs,
    conditional_acceptance,
    counters_from_histograms,
    fit_step_costs,
    lossless_check,
    predict_sweep,
    ratio_stderr,
)
from speckit.core.quant import recognise
from speckit.io.engine import EngineRun
from speckit.io.host import probe_kernel
from speckit.validate.inputs import Inputs
from speckit.validate.report import (
    RunSummary,
    SpecRunReport,
    SweepReport,
)

# the bar for "the draft does not work at all": position 0 almost never accepted
BROKEN_POS0 = 0.05


def run_summary(run: EngineRun, *, role: str, k: int | None, draft: str | None,
                keep_log: bool = True) -> RunSummary:
    t = run.timing
    return RunSummary(run.label, role, k, draft, run.speculative_config, t.output_tokens,
                      t.wall_s, t.tokens_per_s, t.prefill_s, t.decode_s, run.engine_start_s,
                      run.seconds, str(run.log_path) if keep_log else "")


def spec_report(run: EngineRun, base: EngineRun, *, role: str, k: int, draft: str | None,
                temperature: float) -> SpecRunReport:
    c = run.counters
    assert c is not None
    acc, drafts, per_prompt = [], [], []
    for r in run.requests:
        h = r.spec_histogram
        if h is None:
            break
        a, d = sum(j * n for j, n in enumerate(h)), sum(h)
        acc.append(a)
        drafts.append(d)
        per_prompt.append(1 + a / d if d else None)
    stderr = ratio_stderr(acc, drafts) if len(acc) == len(run.requests) else None
    ratio = run.timing.tokens_per_s / base.timing.tokens_per_s if base.timing.tokens_per_s else 0.0
    interval = paired_ratio_interval(ratio, _per_prompt(base), _per_prompt(run))
    return SpecRunReport(
        run=run_summary(run, role=role, k=k, draft=draft), counters=c,
        acceptance_length=c.acceptance_length, acceptance_rate=c.acceptance_rate,
        per_position=c.per_position[:k], conditional=conditional_acceptance(c.per_position[:k]),
        al_stderr=stderr, per_prompt_al=per_prompt, throughput_ratio=ratio,
        lossless=lossless_check(base.token_ids[:len(run.requests)], run.token_ids,
                                temperature=temperature),
        # a scheduled run drafts up to num_speculative_tokens; its k is the one at this concurrency
        problems=c.problems(int((run.speculative_config or {}).get("num_speculative_tokens", k))),
        ratio_interval=interval)


def _per_prompt(run: EngineRun) -> list[tuple[float, float]]:
    """(output tokens, seconds from scheduled to last token) of each request; (0, 0) where vLLM
    gave no timestamps (such a pair is left out of the interval)."""
    return [(float(len(r.token_ids)), (r.prefill_s or 0.0) + (r.decode_s or 0.0))
            if r.prefill_s is not None and r.decode_s is not None else (0.0, 0.0)
            for r in run.requests]


def sweep_report(base: EngineRun, main: EngineRun, mrep: SpecRunReport,
                 spec: MethodSpec, ks: list[int],
                 warnings: list[str]) -> SweepReport:
    k_max = max(ks)
    c = main.counters
    assert c is not None
    slope = None
    longest = max(base.probe_s, default=1)
    if 1 in base.probe_s and longest > 1:
        slope = (base.probe_s[longest] - base.probe_s[1]) / (longest - 1)
    costs: StepCosts = fit_step_costs(base=base.timing, spec=main.timing, counters=c, k=k_max,
                                      parallel=bool(spec.parallel), verify_slope_s=slope)
    preds = predict_sweep(base=base.timing, spec=main.timing, counters=c, costs=costs, ks=ks)
    notes: list[str] = []
    best = best_k(preds)
    rec = best.k
    if mrep.lossless.status == "suspect" and 1 in ks:
        rec = 1
        notes.append("greedy outputs diverge early at the largest k: confirming at k=1 first "
                     "(correctness before speed)")
    elif best.throughput_ratio < 1.0:
        notes.append(f"no k is predicted to beat the baseline here (best "
                     f"{best.throughput_ratio:.2f}x"
                     f" at k={best.k}); the draft costs too much relative to the target on this "
                     "hardware")
    for kk in ks:
        al = al_from_per_position(c.per_position, kk)
        if not 1.0 <= al <= kk + 1 + 1e-9:
            warnings.append(f"derived AL({kk}) = {al:.3f} is outside [1, {kk + 1}]")
    return SweepReport(ks, k_max, costs, preds, rec, None, notes)


def calibrate_sweep(sw: SweepReport, base: EngineRun, main: EngineRun, conf: EngineRun, *,
                    k: int) -> None:
    """Refit the step cost through both measured k and re-predict every k with it."""
    assert main.counters is not None and conf.counters is not None
    costs = calibrate_costs(sw.costs, k=k, spec=conf.timing, counters=conf.counters)
    sw.calibrated_costs = costs
    sw.calibrated = predict_sweep(base=base.timing, spec=main.timing, counters=main.counters,
                                  costs=costs, ks=sw.ks)
    better = best_k(sw.calibrated)
    if better.throughput_ratio < 1.0:
        sw.notes.append(f"with the step cost calibrated on both runs no k beats the baseline "
                        f"(best {better.throughput_ratio:.2f}x at k={better.k})")
    elif better.k != sw.recommended_k:
        sw.notes.append(f"with the step cost calibrated on both runs, k={better.k} is predicted "
                        f"at {better.throughput_ratio:.2f}x; check it with -k {better.k}")


def emulated_quant(cfg: Mapping[str, Any]) -> str | None:
    """Why a quantized draft cannot be timed here: its low-precision matmul is emulated on this
    machine (speckit.io.host.probe_kernel: the answer doctor gives, one per process), else
    None."""

    sch = recognise(cfg.get("quantization_config"))  # None: not a scheme speckit knows
    if sch is None:
        return None
    fmt = sch.capability
    probe = probe_kernel(fmt)
    if probe.status == "native":
        return None
    return (f"{fmt.upper()} matmuls are {probe.status} on this {probe.device} ({probe.basis}: "
            f"{probe.detail})")


def subset_report(rep: SpecRunReport, run: EngineRun, n: int) -> SpecRunReport:
    """The primary run's acceptance over its first n prompts (greedy: the same contexts)."""


    reqs = [r for r in run.requests[:n] if r.spec_histogram is not None]
    if not reqs:
        return rep
    c = counters_from_histograms([r.spec_histogram for r in reqs],
                                 [r.spec_draft_tokens or 0 for r in reqs])
    return replace(rep, counters=c, acceptance_length=c.acceptance_length,
                   acceptance_rate=c.acceptance_rate, per_position=c.per_position,
                   conditional=conditional_acceptance(c.per_position),
                   per_prompt_al=rep.per_prompt_al[:n])


def run_warnings(runs: list[SpecRunReport], spec: MethodSpec, warnings: list[str]) -> None:
    for s in runs:
        if s.problems:
            warnings.append(f"{s.run.label}: vLLM's counters are inconsistent: "
                            + "; ".join(s.problems))
        if s.lossless.status == "suspect":
            warnings.append(f"{s.run.label}: {s.lossless.note}")
        if s.counters.num_drafts and s.per_position and s.per_position[0] < BROKEN_POS0 \
                and spec.has_checkpoint:
            warnings.append(f"{s.run.label}: position 0 is accepted in only "
                            f"{100 * s.per_position[0]:.1f}% of steps (AL "
                            f"{s.acceptance_length:.2f}): the draft is not predicting this "
                            "target; check its pairing, conversion and quantization")


LOW_RATIO = 0.5


def low_ratio_causes(runs: list[SpecRunReport], conc, inp: Inputs, *, concurrency: int,
                     warnings: list[str]) -> None:
    """A measured ratio below 0.5 never stands alone: say the likely cause."""
    for s in runs:
        if s.throughput_ratio >= LOW_RATIO or s.acceptance_only:
            continue
        causes = []
        cfg = inp.ccfg if s.run.role == "compare" else inp.dcfg
        emulated = emulated_quant(cfg) if cfg else None
        if emulated:
            causes.append(f"the draft's quantized kernels are emulated here ({emulated})")
        if inp.cpu:
            causes.append("a CPU engine: the target's step is so cheap that the draft's passes "
                          "dominate, which is not what a GPU sees")
        be = conc.break_even if conc is not None else None
        if be is not None and concurrency >= be:
            causes.append(f"concurrency {concurrency} is at or above the break-even {be} "
                          "fitted for this machine")
        if s.per_position and s.per_position[0] < BROKEN_POS0:
            causes.append("the draft is almost never accepted")
        warnings.append(f"{s.run.label}: throughput ratio {s.throughput_ratio:.2f} (< "
                        f"{LOW_RATIO}); likely cause: " + ("; ".join(causes) or "unknown"))
