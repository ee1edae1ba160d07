"""validate's engine runs: baseline, speculative at the largest k, the confirmation and the
compare draft, each in its own vLLM child process, and the per-batch schedule between them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core.specconfig import speculative_config
from speckit.errors import EngineTimeout, UsageError
from speckit.io.checkpoint import Checkpoint
from speckit.io.engine import EngineJob, EngineRun, finished_run
from speckit.io.progress import EngineProgress
from speckit.validate import concurrency as C
from speckit.validate import context
from speckit.validate.analysis import (
    calibrate_sweep,
    emulated_quant,
    spec_report,
    subset_report,
    sweep_report,
)
from speckit.validate.inputs import Inputs
from speckit.validate.options import ValidateOptions
from speckit.validate.report import (
    CompareReport,
    Confirmation,
    SpecRunReport,
    SweepReport,
)


@dataclass
class RunCtx:
    inp: Inputs
    opts: ValidateOptions
    workdir: Path
    bar: Any
    common: dict[str, Any]  # the EngineJob fields every run shares
    starts: int = 0
    engine_runs: dict[str, EngineRun] = field(default_factory=dict)
    resume: bool = False  # keep the runs an interrupted validate finished in workdir
    finished: list[str] = field(default_factory=list)  # labels of the runs done, in order
    resumed: list[str] = field(default_factory=list)  # those kept from the interrupted run

    def engine(self, job: EngineJob, *, timeout_s: float | None = None) -> EngineRun:
        """One engine run (or the same run an interrupted validate finished, when resuming)."""
        run = finished_run(job, self.workdir) if self.resume else None
        if run is not None:
            self.resumed.append(job.label)
        else:
            run = self.bar.run(job, workdir=self.workdir,
                               timeout_s=timeout_s or self.opts.timeout_s)
            self.starts += 1
        self.finished.append(job.label)
        self.engine_runs[job.label] = run
        return run

    def said(self, run: EngineRun, rep: SpecRunReport | None = None) -> None:
        """The finished run in one line (on_run): run, k, AL, tok/s, elapsed."""
        if self.opts.on_run is None:
            return
        t = run.timing
        what = [f"{t.tokens_per_s:.1f} tok/s"]
        if rep is not None:
            what = [f"k={rep.run.k}", f"AL {rep.acceptance_length:.2f}", what[0],
                    f"{rep.throughput_ratio:.2f}x baseline"]
        when = ("kept from the interrupted run" if run.label in self.resumed
                else f"{run.seconds:.0f} s")
        self.opts.on_run(f"run {run.label}: {', '.join(what)}, {when}")


def run_context(inp: Inputs, opts: ValidateOptions, workdir: Path,
                eargs: dict[str, Any], *, resume: bool = False) -> RunCtx:
    """What every engine run of this validation shares: the settings, the log directory and the
    progress display; ``resume``: runs finished in ``workdir`` by an interrupted validate of the
    same inputs are read back instead of run again."""
    common = {"model": str(inp.tpath), "max_tokens": opts.max_tokens,
              "temperature": opts.temperature, "seed": opts.seed, "thinking": opts.thinking,
              "concurrency": opts.concurrency, "tp": opts.tp, "engine_args": eargs,
              "cpu_kv_bytes": opts.cpu_kv_bytes,
              "cpu_threads": opts.cpu_threads if inp.cpu else None}
    return RunCtx(inp, opts, workdir, EngineProgress(opts.progress, opts.on_event), common,
                  resume=resume)


@dataclass
class Runs:
    base: EngineRun
    main: EngineRun
    runs: list[SpecRunReport]
    sweep: SweepReport | None
    final_k: int
    compare: CompareReport | None
    concurrency: Any  # ConcurrencyReport | None
    final_cfg: dict[str, Any]
    starts: int
    by_context: Any = None  # ContextAcceptance of the largest-k run (None: no per-request data)


def _spec_cfg(ctx: RunCtx, draft_path: Path | None, cfg: dict[str, Any],
              kk: int) -> dict[str, Any]:

    return speculative_config(method=ctx.inp.spec.name, k=kk,
                              draft=str(draft_path) if draft_path else None, draft_config=cfg,
                              tp=ctx.opts.tp)


def _spec_run(ctx: RunCtx, base: EngineRun, label: str, role: str, draft_path: Path | None,
              cfg: dict[str, Any], kk: int, name: str | None, *,
              spec_config: dict[str, Any] | None = None, timeout_s: float | None = None,
              **job: Any) -> tuple[EngineRun, SpecRunReport]:
    spec = spec_config or _spec_cfg(ctx, draft_path, cfg, kk)
    run = ctx.engine(EngineJob(label, prompt_token_ids=base.prompt_token_ids,
                               speculative_config=spec, **{**ctx.common, **job}),
                     timeout_s=timeout_s)
    rep = spec_report(run, base, role=role, k=kk, draft=name, temperature=ctx.opts.temperature)
    ctx.said(run, rep)
    return run, rep


def run_engines(ctx: RunCtx, *, batches: list[int], warnings: list[str]) -> Runs:
    """Baseline, the largest k, the per-batch schedule, the confirmation and the compare draft
    (each when asked for), as few engine starts as the options allow."""
    inp, opts = ctx.inp, ctx.opts
    probe = {"batch_probe": batches or None}
    base = _baseline(ctx, opts.baseline, probe)
    main, main_rep = _spec_run(ctx, base, f"{inp.spec.name}-k{inp.k_max}", "speculative",
                               inp.dpath, inp.dcfg, inp.k_max, inp.dname, **probe)
    runs = [main_rep]
    by_context, records = context.measure(main, k=inp.k_max, trained=inp.trained,
                                          warnings=warnings)
    sw = sweep_report(base, main, main_rep, inp.spec, inp.ks, warnings) if opts.sweep else None
    final_k = sw.recommended_k if sw else inp.k_max
    conc = _concurrency(ctx, base, main, main_rep, serve_gpu=opts.serve_gpu,
                        serve_tp=opts.serve_tp, warnings=warnings,
                        serve_profile=opts.serve_profile,
                        mix=context.serve_mix(by_context, records, inp.traffic)) \
        if batches else None
    final_cfg = _spec_cfg(ctx, inp.dpath, inp.dcfg, final_k)
    # the spec-config carries the serving schedule (--serve-gpu, else this machine's); the
    # confirmation engine runs this machine's, the one its counters can check
    serve_cfg = _scheduled_cfg(conc, final_cfg, inp)
    sched_cfg = serve_cfg
    if conc is not None and conc.serve is not None:
        sched_cfg = _scheduled_cfg(conc, final_cfg, inp, machine=True) or serve_cfg
        if serve_cfg is None and conc.serve["schedule"]:
            warnings.append(_never_pays(conc.serve))
    if serve_cfg is not None:
        final_cfg = serve_cfg
    if sched_cfg is not None:  # the k the confirmed schedule gives at this concurrency
        final_k = _k_at(sched_cfg["num_speculative_tokens_per_batch_size"],
                        opts.concurrency) or final_k
    if opts.confirm and (sched_cfg is not None or (sw and final_k != inp.k_max)):
        crep = _confirm(ctx, base, main, sw, conc, final_k, sched_cfg, batches)
        runs.append(crep)
    compare = None
    if inp.cpath is not None:
        compare = _compare(ctx, base, runs, final_k, opts.compare_acceptance_only,
                           opts.compare_budget_s, warnings)
        if compare is not None:
            runs.append(compare.other)
    return Runs(base, main, runs, sw, final_k, compare, conc, final_cfg, ctx.starts, by_context)


def _baseline(ctx: RunCtx, baseline: EngineRun | None, probe: dict[str, Any]) -> EngineRun:
    job = EngineJob("baseline", messages=[p.as_messages() for p in ctx.inp.prompts.prompts],
                    probe_tokens=sorted({1, ctx.inp.k_max + 1}), **ctx.common, **probe)
    if baseline is not None:
        _check_reusable(baseline, job)
        return baseline
    run = ctx.engine(job)
    ctx.said(run)
    return run


def _concurrency(ctx: RunCtx, base: EngineRun, main: EngineRun, main_rep: SpecRunReport, *,
                 serve_gpu: str | None, serve_tp: int, warnings: list[str],
                 serve_profile: str | None = None, mix: dict[str, Any] | None = None):
    inp = ctx.inp
    tensors = draft_tensors(inp.dpath)
    rep = C.analyse(base, main, k=inp.k_max, per_position=main_rep.per_position,
                    method=inp.spec.name, target_config=inp.tcfg, draft_config=inp.dcfg or None,
                    draft_tensors=tensors)
    if rep is None:
        warnings.append("the batch probes gave fewer than 3 usable step times: no per-batch "
                        "schedule for this machine")
        return None
    if rep.not_fitted is not None:
        warnings.append("the step model could not be fitted to this machine's step times: no "
                        f"concurrency projection or schedule for this machine ({rep.not_fitted})")
    if serve_gpu:
        C.project_serve(rep, gpu=serve_gpu, tp=serve_tp, method=inp.spec.name,
                        target_config=inp.tcfg, draft_config=inp.dcfg or None,
                        draft_tensors=tensors, per_position=main_rep.per_position,
                        profile=serve_profile, mix=mix)
    return rep


def draft_tensors(dpath: Path | None) -> list[tuple[str, tuple[int, ...]]]:
    if dpath is None:
        return []

    return [(t.name, tuple(t.shape)) for t in Checkpoint.open(dpath).tensors.values()]


def _scheduled_cfg(conc, final_cfg: dict[str, Any], inp: Inputs, *,
                   machine: bool = False) -> dict[str, Any] | None:
    if conc is None:
        return None
    sched = conc.schedule if machine else C.chosen_schedule(conc)
    cfg = C.with_schedule(final_cfg, sched, method=inp.spec.name, draft_config=inp.dcfg)
    if cfg is not None:
        C.vllm_checked(cfg["num_speculative_tokens_per_batch_size"], conc)
    return cfg


def _confirm(ctx: RunCtx, base: EngineRun, main: EngineRun, sw: SweepReport | None, conc,
             final_k: int, sched_cfg: dict[str, Any] | None,
             batches: list[int]) -> SpecRunReport:
    """One more engine: the recommended k (with the per-batch schedule when there is one, and
    the batch probe reading the k vLLM drafted at each batch size)."""
    inp = ctx.inp
    k_conc = final_k
    label = f"{inp.spec.name}-schedule" if sched_cfg is not None else f"{inp.spec.name}-k{k_conc}"
    conf, crep = _spec_run(ctx, base, label, "confirm", inp.dpath, inp.dcfg, k_conc, inp.dname,
                           spec_config=sched_cfg,
                           batch_probe=batches or None if sched_cfg is not None else None)
    if sched_cfg is not None and conc is not None:
        C.check_followed(conc, conf, sched_cfg["num_speculative_tokens_per_batch_size"])
    if sw is not None and k_conc in sw.ks:
        pred = next(p for p in sw.predictions if p.k == k_conc)
        sw.confirmation = Confirmation(k_conc, pred.acceptance_length, crep.acceptance_length,
                                       pred.throughput_ratio, crep.throughput_ratio)
        if k_conc != sw.k_measured:
            calibrate_sweep(sw, base, main, conf, k=k_conc)
    return crep


def _never_pays(serve: dict[str, Any]) -> str:
    top = max(int(r[1]) for r in serve["schedule"])
    gpu = serve.get("gpu", "the serving GPU")
    return (f"projected for {gpu}: speculation does not pay at any concurrency up to {top}: on "
            "that GPU serve the target without --speculative-config; the spec-config and serve "
            "line here carry the k measured on this machine")


def _k_at(schedule: Sequence[Sequence[int]], batch: int) -> int:
    for lo, hi, kk in schedule:
        if int(lo) <= batch <= int(hi):
            return int(kk)
    return int(schedule[-1][2])


# seconds an acceptance-only compare run may take beyond its budget: the engine start and the
# prompt in flight when the budget ends
COMPARE_GRACE_S = 300.0


def _compare(ctx: RunCtx, base: EngineRun, runs: list[SpecRunReport], final_k: int,
             acceptance_only: bool | None, budget_s: float,
             warnings: list[str]) -> CompareReport | None:
    """The compare draft at the final k. Acceptance only (its quantized kernels emulated here,
    or asked for): prompts until ``budget_s`` has passed, and the whole run ends after
    ``budget_s`` + COMPARE_GRACE_S; a run that ends so is a warning, not the loss of the
    validate run around it."""
    inp = ctx.inp
    if acceptance_only is None:
        acceptance_only = emulated_quant(inp.ccfg) is not None
    job: dict[str, Any] = {}
    if acceptance_only:
        job = {"time_budget_s": budget_s,
               "timeout_s": min(ctx.opts.timeout_s, budget_s + COMPARE_GRACE_S)}
    label = f"compare-k{final_k}"
    try:
        _, orep = _spec_run(ctx, base, label, "compare", inp.cpath, inp.ccfg, final_k,
                            inp.cname, **job)
    except EngineTimeout:
        if not acceptance_only:
            raise
        why = emulated_quant(inp.ccfg) or "acceptance only, asked for"
        warnings.append(f"{label}: no acceptance measured: not one prompt finished within "
                        f"{job['timeout_s']:.0f} s ({why}); the rest of this report stands. "
                        "compare that draft where its kernels are native, or raise "
                        "--compare-budget")
        return None
    prim = next(r for r in runs if r.run.k == final_k and r.run.role != "compare")
    if acceptance_only:
        n = len(orep.per_prompt_al)
        prim = subset_report(prim, ctx.engine_runs[prim.run.label], n)
        why = emulated_quant(inp.ccfg) or "asked for"
        orep.acceptance_only = True
        warnings.append(f"compare-k{final_k}: acceptance only ({why}): {n} of "
                        f"{len(base.requests)} prompts in the {budget_s:.0f} s budget, compared "
                        "with the primary draft on the same prompts; its throughput here says "
                        "nothing about a GPU")
    return CompareReport(inp.dname or "-", inp.cname or "-", final_k, prim, orep)


def _check_reusable(run: EngineRun, want: EngineJob) -> None:
    have = run.job
    if have is None:
        raise UsageError("the baseline to reuse does not record what it ran")
    fields = ("model", "max_tokens", "temperature", "seed", "thinking", "concurrency", "tp",
              "engine_args", "messages", "tokenizer", "cpu_threads")
    diff = [f for f in fields if getattr(have, f) != getattr(want, f)]
    if diff:
        raise UsageError("the baseline to reuse was measured with different " + ", ".join(diff),
                         hint="run validate without baseline= (it measures its own)")
