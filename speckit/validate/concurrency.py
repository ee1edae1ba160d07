"""k for every concurrency: step costs measured at several batch sizes, the step model fitted to
them, a per-batch-size k schedule for this machine, and the projection for a serving GPU.

The batch probes ride on the baseline and largest-k engines (no extra engine starts); a schedule
confirmation reads vLLM's counters at each probed batch size to show that k followed it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from speckit.core import methods
from speckit.core.evidence import Interval, welch_ratio_interval
from speckit.core.jsonable import to_jsonable
from speckit.core.plan import fit as _fit
from speckit.core.plan import schedule as _sched
from speckit.core.plan import steps as _steps
from speckit.core.plan.projection import (
    draft_shape,
    project_mix_speed,
    project_speed,
    step_model,
)
from speckit.errors import PlanError, UsageError
from speckit.io.datafiles import get_gpu, load_engine_costs
from speckit.io.engine import EngineRun
from speckit.io.projection import step_constants
from speckit.validate.context import mix_markdown

CPU_BATCHES = (1, 2, 4, 8, 16)
GPU_BATCHES = (1, 4, 16, 64, 128)


@dataclass
class BatchMeasure:
    batch: int
    base_step_s: float | None  # one decode step without speculation
    spec_step_s: float | None  # one verify + draft step at the measured k
    measured_ratio: float | None  # AL(k) x base / spec
    model_base_s: float | None = None
    model_spec_s: float | None = None
    ratio_interval: Interval | None = None  # over the probe's rounds on both engines


@dataclass
class ScheduleCheck:
    batch: int
    expected_k: int  # the schedule's k at this batch size
    observed_k: float | None  # vLLM's draft tokens per draft while B requests ran


@dataclass
class ConcurrencyReport:
    k: int  # the k the spec engine's probes ran at
    ctx: int  # KV context of the probes (prompt + half the probe tokens)
    measured: list[BatchMeasure]
    holdout: int | None  # the batch size kept out of the fit
    # why the step model could not be fitted to the measured steps (None: it was); the measured
    # steps stay, the fitted fields below are then empty
    not_fitted: str | None = None
    worst_fit_error: float | None = None
    holdout_error: dict[str, float] = field(default_factory=dict)  # "base"/"spec" -> rel. error
    constants: dict[str, Any] = field(default_factory=dict)
    ks: list[int] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)  # columns of the fitted curves
    ratio: dict[int, list[float]] = field(default_factory=dict)  # k -> fitted ratio per batch
    best_k: list[int] = field(default_factory=list)
    break_even: int | None = None
    schedule: list[list[int]] = field(default_factory=list)  # this machine: (lo, hi, k)
    serve: dict[str, Any] | None = None  # the projection for --serve-gpu (projected)
    schedule_source: str = "this machine (fitted)"
    checks: list[ScheduleCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def followed(self) -> bool | None:
        """Did vLLM draft the schedule's k at every probed batch size (within 0.5 tokens)?"""
        seen = [c for c in self.checks if c.observed_k is not None]
        if not seen:
            return None
        return all(abs(c.observed_k - c.expected_k) <= 0.5 for c in seen)


def default_batches(*, cpu: bool) -> list[int]:
    return list(CPU_BATCHES if cpu else GPU_BATCHES)


def holdout_of(batches: Sequence[int]) -> int | None:
    """The batch size kept out of the fit: an inner one, so the check is an interpolation."""
    inner = sorted(batches)[1:-1]
    return inner[len(inner) // 2] if len(inner) >= 2 else None


def analyse(base: EngineRun, main: EngineRun, *, k: int, per_position: Sequence[float],
            method: str, target_config: Mapping[str, Any], draft_config: Mapping[str, Any] | None,
            draft_tensors: Sequence[tuple[str, Sequence[int]]], max_batch: int | None = None
            ) -> ConcurrencyReport | None:
    """Fit the step model to the two engines' batch probes and schedule k for this machine.

    Timings the model cannot fit keep their measured steps in a report that says why
    (``not_fitted``); the acceptance figures never depend on the fit.
    """
    pairs = _paired(base, main)
    if len(pairs) < 3:
        return None
    al = {kk: _sched.al_from_per_position(per_position, kk)
          for kk in range(1, len(per_position) + 1)}
    measured = [BatchMeasure(b, tb, ts, al[k] * tb / ts if ts else None) for b, tb, ts in pairs]
    rounds = _rounds(base, main)
    for m in measured:
        if m.measured_ratio is not None and m.batch in rounds:
            m.ratio_interval = welch_ratio_interval(m.measured_ratio, *rounds[m.batch])
    held = holdout_of([b for b, _, _ in pairs])
    rep = ConcurrencyReport(k=k, ctx=_context(base, main), measured=measured, holdout=held)
    try:
        _fit_report(rep, pairs, al, method=method, target_config=target_config,
                    draft_config=draft_config, draft_tensors=draft_tensors, max_batch=max_batch)
    except PlanError as e:
        rep.not_fitted = e.message + (f" ({e.hint})" if e.hint else "")
    return rep


def _fit_report(rep: ConcurrencyReport, pairs: list[tuple[int, float, float]],
                al: Mapping[int, float], *, method: str, target_config: Mapping[str, Any],
                draft_config: Mapping[str, Any] | None,
                draft_tensors: Sequence[tuple[str, Sequence[int]]],
                max_batch: int | None) -> None:
    k, ctx, held = rep.k, rep.ctx, rep.holdout
    gpu = _fit.machine("this machine")
    tshape = _steps.ModelShape.from_config(target_config, where="target/config.json")
    dshape = _draft(methods.get(method), target_config, draft_config, draft_tensors, tshape, gpu)
    points = [_fit.StepPoint(b, 0, ctx, tb) for b, tb, _ in pairs] + \
        [_fit.StepPoint(b, k, ctx, ts) for b, _, ts in pairs]
    res = _fit.fit_steps(points, target=tshape, draft=dshape, gpu=gpu,
                         holdout=[held] if held else [])
    table = _sched.project(al, max_batch=max_batch or 2 * max(b for b, _, _ in pairs),
                           base_step=lambda b: _seconds(b, 0, ctx, tshape, dshape, gpu, res),
                           spec_step=lambda b, kk: _seconds(b, kk, ctx, tshape, dshape, gpu, res))
    for m in rep.measured:
        m.model_base_s, m.model_spec_s = res.predicted[(m.batch, 0)], res.predicted[(m.batch, k)]
    rep.holdout_error = {} if held is None else {"base": res.error[(held, 0)],
                                                 "spec": res.error[(held, k)]}
    rep.worst_fit_error, rep.constants = res.worst_fit_error, asdict(res.constants)
    rep.ks, rep.batches, rep.ratio = table.ks, table.batches, table.ratio
    rep.best_k, rep.break_even = table.best_k, table.break_even
    rep.schedule = [list(r) for r in table.schedule]


def project_serve(rep: ConcurrencyReport, *, gpu: str, tp: int, method: str,
                  target_config: Mapping[str, Any], draft_config: Mapping[str, Any] | None,
                  draft_tensors: Sequence[tuple[str, Sequence[int]]],
                  per_position: Sequence[float], max_batch: int = 256,
                  profile: str | None = None, mix: Mapping[str, Any] | None = None) -> None:
    """The serving GPU's projected table and schedule (plan's model: the H200-fitted constants,
    or ``profile`` from speckit calibrate; this run's acceptance); it becomes the schedule the
    spec-config carries. With ``mix`` (validate.context.serve_mix: a context mix and AL per
    bucket) the schedule is the one chosen for that mix (speckit.core.plan.mix)."""

    g = get_gpu(gpu)
    consts, eng = step_constants(g, profile), load_engine_costs()
    sp = project_speed(target_config=target_config, method=method, draft_config=draft_config,
                       draft_tensors=draft_tensors, acceptance=list(per_position),
                       gpu=g, tp=tp, max_batch=max_batch, constants=consts, engine=eng)
    rep.serve = to_jsonable(sp)
    rep.schedule_source = f"{sp.gpu} x TP={tp} (projected)"
    if mix is None:
        return
    model = step_model(target_config=target_config, method=method, draft_config=draft_config,
                       draft_tensors=draft_tensors, gpu=g, tp=tp, constants=consts, engine=eng)
    mp = project_mix_speed(model, weights=mix["weights"], contexts=mix["contexts"],
                           al=mix["al"], max_batch=max_batch)
    mp.notes[:0] = [f"the mix: {mix['whose']}", *mix["notes"]]
    cfg = _sched.schedule_config(mp.schedule, k_if_off=max(mp.ks))
    rep.serve.update(mix=to_jsonable(mp), schedule=cfg["num_speculative_tokens_per_batch_size"],
                     speculative_config=cfg)
    rep.schedule_source = f"{sp.gpu} x TP={tp} for the context mix (projected)"


def chosen_schedule(rep: ConcurrencyReport) -> list[list[int]]:
    if rep.serve is not None:
        return [list(r) for r in rep.serve["schedule"]]
    return rep.schedule


def with_schedule(spec_config: Mapping[str, Any], schedule: Sequence[Sequence[int]],
                  *, method: str, draft_config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The spec-config carrying ``schedule`` (None when it never speculates); vLLM caps every
    range's k at num_speculative_tokens, so that is the schedule's largest k."""
    if not schedule:  # the step model was not fitted: no schedule to carry
        return None
    top = max(int(r[2]) for r in schedule)
    if top < 1:
        return None
    try:
        methods.get(method).check_k(dict(draft_config), top)
    except (UsageError, PlanError):
        return None
    return {**spec_config, **_sched.schedule_config(schedule, k_if_off=top)}


def vllm_checked(schedule: Sequence[Sequence[int]], rep: ConcurrencyReport) -> None:
    """Run vLLM's own schedule validator (vllm.v1.spec_decode.dynamic.utils) when vLLM is here;
    a refusal is a bug in speckit's schedule, so it raises."""
    try:
        from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule
    except ImportError:
        rep.notes.append("vLLM is not importable here: the schedule was not run through its "
                         "validator")
        return
    try:
        validate_and_normalize_dynamic_sd_schedule([list(r) for r in schedule])
    except ValueError as e:
        raise PlanError(f"vLLM refuses the schedule {list(schedule)}: {e}",
                        hint="this is a bug in speckit's schedule; pass --batch-sizes ''") from e


def check_followed(rep: ConcurrencyReport, run: EngineRun,
                   schedule: Sequence[Sequence[int]]) -> None:
    dense = {b: int(k) for lo, hi, k in schedule for b in range(int(lo), int(hi) + 1)}
    last = int(schedule[-1][2])
    for p in run.batch_probe:
        c = p.counters
        seen = c.num_draft_tokens / c.num_drafts if c is not None and c.num_drafts else None
        if c is not None and not c.num_drafts:
            seen = 0.0
        rep.checks.append(ScheduleCheck(p.batch, dense.get(p.batch, last), seen))


# ---- pieces --------------------------------------------------------------------------------------

def _paired(base: EngineRun, main: EngineRun) -> list[tuple[int, float, float]]:
    spec = {p.batch: p.step_s for p in main.batch_probe}
    return [(p.batch, p.step_s, spec[p.batch]) for p in base.batch_probe
            if p.step_s and spec.get(p.batch)]


def _rounds(base: EngineRun, main: EngineRun) -> dict[int, tuple[list[float], list[float]]]:
    """batch -> (the baseline's round step times, the speculative engine's)."""
    spec = {p.batch: p.round_step_s for p in main.batch_probe}
    return {p.batch: (p.round_step_s, spec[p.batch]) for p in base.batch_probe
            if p.round_step_s and spec.get(p.batch)}


def _context(base: EngineRun, main: EngineRun) -> int:
    ids = base.prompt_token_ids or [[0]]
    tokens = main.job.batch_probe_tokens if main.job is not None else 16
    return int(sum(len(p) for p in ids) / len(ids) + tokens / 2)


def _draft(spec, target_config, draft_config, draft_tensors, tshape, gpu):

    return draft_shape(spec, target_config, draft_config, list(draft_tensors), tshape, None, gpu,
                       where="draft")


def _seconds(b: int, k: int, ctx: int, tshape, dshape, gpu, res: _fit.FitResult) -> float:
    return _fit.model_seconds(_fit.StepPoint(b, k, ctx, 0.0), target=tshape, draft=dshape,
                              gpu=gpu, constants=res.constants)


__all__ = ["BatchMeasure", "ConcurrencyReport", "ScheduleCheck", "analyse", "check_followed",
           "chosen_schedule", "default_batches", "project_serve", "with_schedule"]


# ---- report pieces: terminal, markdown, plot -----------------------------------------------------

def summary_lines(rep: ConcurrencyReport) -> list[str]:
    """What the terminal and report.md say about concurrency, one line each."""
    where = (f"step costs measured at concurrency {', '.join(str(m.batch) for m in rep.measured)}"
             f" (k={rep.k}, KV context ~{rep.ctx})")
    if rep.not_fitted is not None:
        lines = [f"{where}; the step model was NOT fitted to them, so there is no concurrency "
                 f"projection or schedule for this machine: {rep.not_fitted}"]
    else:
        lines = [f"{where}; step model fitted to them: worst fit error "
                 f"{100 * (rep.worst_fit_error or 0.0):.1f}%"]
    if rep.holdout is not None and rep.holdout_error:
        e = rep.holdout_error
        lines.append(f"held out concurrency {rep.holdout}: model vs measured "
                     f"{100 * e['base']:+.1f}% (no speculation), {100 * e['spec']:+.1f}% (k="
                     f"{rep.k})")
    # in the schedule's own words ("pays up to 6", "does not pay at any concurrency"): a bare
    # "break-even concurrency 1" read as a claim that it pays somewhere (issue 53)
    if rep.not_fitted is None:
        lines.append(f"this machine (fitted): schedule {rep.schedule}; "
                     + _sched.pays_text(rep.schedule))
    if rep.serve is not None:
        s = rep.serve
        lines.append(f"projected for {s['gpu']} x TP={s['tp']}: schedule {s['schedule']}; "
                     + _sched.pays_text(s["schedule"])
                     + " (projected from the H200-fitted step model, not measured)")
        if s.get("mix"):
            m = s["mix"]
            lines.append("that schedule is chosen for the context mix ("
                         + ", ".join(f"{b['bucket']} {100 * b['weight']:.0f}%"
                                     for b in m["buckets"])
                         + f"; AL per bucket measured here); the schedule for one context "
                         f"({s['schedule_context']:,}) would be {s['tables'][0]['schedule']}")
    if rep.checks:
        seen = ", ".join(f"B={c.batch}: k {c.expected_k} -> drafted "
                         f"{'-' if c.observed_k is None else f'{c.observed_k:.2f}'}"
                         for c in rep.checks)
        verdict = {True: "followed", False: "NOT followed", None: "not observed"}[rep.followed]
        lines.append(f"this machine's schedule on the engine: {seen} -> {verdict}")
    lines += rep.notes
    return lines


def markdown(rep: ConcurrencyReport) -> str:
    head = (f"| concurrency | base step ms | spec step ms (k={rep.k}) | measured ratio "
            "(95%, rounds) | model base ms | model spec ms |\n|---|---|---|---|---|---|\n")
    rows = "".join(f"| {m.batch} | {_ms(m.base_step_s)} | {_ms(m.spec_step_s)} | "
                   f"{_xi(m.measured_ratio, m.ratio_interval)} | {_ms(m.model_base_s)} | "
                   f"{_ms(m.model_spec_s)} |\n" for m in rep.measured)
    fitted = ""
    if rep.not_fitted is None:
        fitted = ("\nFitted throughput ratio on this machine:\n\n| k | "
                  + " | ".join(f"B={b}" for b in rep.batches) + " |\n|---|"
                  + "---|" * len(rep.batches) + "\n"
                  + "".join(f"| {k} | " + " | ".join(_x(v) for v in rep.ratio[k]) + " |\n"
                            for k in rep.ks))
    serve = _serve_markdown(rep.serve) if rep.serve is not None else ""
    return ("## Throughput by concurrency\n\n" + "\n".join(f"- {x}" for x in summary_lines(rep))
            + "\n\nMeasured on this machine:\n\n" + head + rows + fitted + serve)


def _serve_markdown(serve: Mapping[str, Any]) -> str:
    t = serve["tables"][-1]
    ratio = {int(k): v for k, v in t["ratio"].items()}
    cols = t["batches"]
    return (f"\nProjected for {serve['gpu']} x TP={serve['tp']} at KV context {t['ctx']} "
            "(projected, not measured):\n\n| k | " + " | ".join(f"B={b}" for b in cols)
            + " |\n|---|" + "---|" * len(cols) + "\n"
            + "".join(f"| {k} | " + " | ".join(_x(v) for v in ratio[k]) + " |\n"
                      for k in sorted(ratio))
            + (mix_markdown(serve["mix"]) if serve.get("mix") else "")
            + f"\nSchedule: `{serve['speculative_config']}`\n")


def plot(rep: ConcurrencyReport, out, plt) -> str:
    """ratio-by-concurrency.png: fitted curves per k, the measured points at the measured k."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for k in rep.ks:
        ax.plot(rep.batches, rep.ratio[k], "-", label=f"k={k} (fitted)")
    ms = [m for m in rep.measured if m.measured_ratio is not None]
    ax.plot([m.batch for m in ms], [m.measured_ratio for m in ms], "ko", ms=6,
            label=f"measured, k={rep.k}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency (requests in the batch)")
    ax.set_ylabel("throughput ratio vs no speculation")
    ax.set_title("Throughput ratio by concurrency (this machine)")
    ax.legend(fontsize=8, loc="best")
    path = out / "ratio-by-concurrency.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1e3 * x:.1f}"


def _xi(x: float | None, iv: Interval | None) -> str:
    """A probe's ratio with its interval over the rounds (probes are shown, never decide)."""
    return _x(x) + ("" if x is None or iv is None else f" ({iv.lo:.2f}-{iv.hi:.2f})")


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"
