"""validate's workflow: inputs read and gated, the engines run, the report built and written
(the package's one entry point, re-exported by speckit.validate).
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from speckit.core.options import options_of
from speckit.io import host
from speckit.io.engine import forget_exchange
from speckit.io.output import Interrupted, output_errors, sigterm_as_interrupt
from speckit.io.rundir import FINISHED, PARTIAL, RunDir
from speckit.validate.analysis import low_ratio_causes, run_warnings
from speckit.validate.gates import check_gates, check_preflight
from speckit.validate.inputs import check_args, gather_inputs, output_dirs, pick_batch_sizes
from speckit.validate.options import ValidateOptions, sized
from speckit.validate.outputs import build_report, report_settings, write_outputs
from speckit.validate.report import ValidationReport
from speckit.validate.runs import RunCtx, Runs, run_context, run_engines


def validate(options: ValidateOptions | None = None, /, **fields: Any) -> ValidationReport:
    """Validate a draft (or a draft-free method such as ngram) for a target on vLLM.

    ``options``: a ValidateOptions (the CLI builds one), or its fields as keywords:
    ``validate(target="Qwen/Qwen3-8B", draft="qwen3-dflash", sweep=[1, 3, 5, 7])``; keywords
    given with ``options`` replace its fields. target/draft/compare_draft are directories,
    registry ids or Hub repo ids. With ``sweep`` the largest k is measured, AL(k) is derived for
    the smaller ones, the best k is predicted and confirmed with one more run. ``batch_sizes``
    (default: by platform; empty: off): decode step costs measured at these concurrencies on the
    same engines, the step model fitted to them and a per-batch-size k schedule for this machine;
    ``serve_gpu``/``serve_tp`` project for a catalog GPU instead and put that schedule into the
    spec-config. ``baseline``: the ``baseline_run`` of an earlier report on the same target,
    prompts and settings (saves one engine start). ``compare_acceptance_only`` (None: when the
    compare draft's quantized kernels are emulated here): the compare run covers as many prompts
    as fit in ``compare_budget_s`` and reports acceptance only. ``num_prompts``/``max_tokens``
    (None: by platform, validate.options.CPU_SIZE on a CPU engine, GPU_SIZE on a GPU).

    ``out``: each engine run's result lands in OUT/logs as it finishes; on Ctrl-C or SIGTERM the
    engine's process group is ended and Interrupted (a KeyboardInterrupt) says what was kept.
    The same call into that OUT resumes (finished runs are read back, not run again); an OUT
    holding a finished run or one of other inputs is refused unless ``force``, which replaces
    it (only a directory speckit wrote). ``on_run(line)``: one line as each run finishes.
    """
    opts = sized(options_of(ValidateOptions, options, fields), cpu=host.engine_on_cpu())
    t_start = time.monotonic()
    eargs = check_args(opts)
    warnings: list[str] = []
    inp = gather_inputs(opts, warnings)
    batches = pick_batch_sizes(opts.batch_sizes, cpu=inp.cpu, concurrency=opts.concurrency)
    preflight = check_preflight(inp, opts, eargs=eargs, warnings=warnings)
    if opts.on_run is not None:  # a finding --force-start overrode: said before any engine starts
        for line in (w for w in warnings if w.startswith("pre-flight ")):
            opts.on_run(line)
    plan_info = check_gates(inp, opts, eargs=eargs, concurrency=max([opts.concurrency, *batches]),
                            warnings=warnings)
    rd, workdir = output_dirs(opts, inp, eargs=eargs, batches=batches)
    ctx = run_context(inp, opts, workdir, eargs, resume=rd is not None and rd.resumed)
    if rd is not None and rd.resumed and opts.on_run is not None:
        opts.on_run(f"resuming the interrupted validate in {rd.path}: runs it finished are "
                    "kept, not run again")
    r = _run(ctx, rd, batches=batches, warnings=warnings)
    if rd is None:  # no --out: leave nothing behind (a failure above keeps its logs)
        shutil.rmtree(workdir, ignore_errors=True)
        for s in r.runs:
            s.run.log = ""
    run_warnings(r.runs, inp.spec, warnings)
    low_ratio_causes(r.runs, r.concurrency, inp, concurrency=opts.concurrency, warnings=warnings)
    if ctx.resumed:
        warnings.append(f"resumed: {', '.join(ctx.resumed)} measured by the interrupted run in "
                        "this --out and kept (their logs are that run's)")
    rep = build_report(inp, r, eargs=eargs, plan_info=plan_info, preflight=preflight,
                       warnings=warnings,
                       settings=report_settings(opts, eargs, batches),
                       keep_log=rd is not None or opts.baseline is not None, t_start=t_start)
    rep.resumed = list(ctx.resumed)
    if opts.baseline is not None:
        rep.warnings.append(f"baseline reused from an earlier run ({r.base.log_path})")
    if rd is not None:
        with output_errors(rd.path):
            write_outputs(rep, rd.path)
            rd.mark(FINISHED)
    return rep


def _run(ctx: RunCtx, rd: RunDir | None, *, batches: list[int], warnings: list[str]) -> Runs:
    """The engine runs; on Ctrl-C / SIGTERM the engine's process group is ended (run_engine),
    the finished runs stay in --out for a resume, and the hint says what is on disk."""
    with ctx.bar, sigterm_as_interrupt():
        try:
            return run_engines(ctx, batches=batches, warnings=warnings)
        except KeyboardInterrupt as e:
            raise _interrupted(ctx, rd) from e
        except BaseException:
            if rd is not None:
                rd.mark(PARTIAL, finished_runs=ctx.finished)
            raise
        finally:
            if ctx.inp.traffic is not None:  # the users' prompts never stay in --out
                forget_exchange(ctx.workdir)


def _interrupted(ctx: RunCtx, rd: RunDir | None) -> Interrupted:
    if rd is None:
        shutil.rmtree(ctx.workdir, ignore_errors=True)
        return Interrupted("interrupted", hint="nothing was kept: without --out the engine "
                           "logs go to a temporary directory, now removed; pass --out DIR to "
                           "keep each finished run and resume from it")
    rd.mark(PARTIAL, finished_runs=ctx.finished)
    logs = rd.path / "logs"
    if ctx.inp.traffic is not None:
        return Interrupted("interrupted", hint=f"no report was written; {logs} holds the "
                           "engine logs only (a --traffic run never keeps the users' prompts or "
                           "outputs, so the same command runs every run again)")
    if not ctx.finished:
        return Interrupted("interrupted", hint=f"no run had finished; {logs} holds the stopped "
                           "run's log. The same command starts again there; --force replaces it")
    return Interrupted("interrupted", hint=(
        f"no report yet; kept in {logs}: the finished runs ({', '.join(ctx.finished)}), each with "
        "its result and log; the run in progress was stopped with its engine. Run the same "
        "command again to resume (finished runs are not repeated), or add --force to start over"))
