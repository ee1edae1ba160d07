"""validate's workflow: inputs read and gated, the engines run, the report built and written
(the package's one entry point, re-exported by speckit.validate).
"""

from __future__ import annotations

import shutil
import time
import warnings as warnings_
from typing import Any

from speckit.core.options import options_of
from speckit.io.engine import forget_exchange
from speckit.io.output import output_errors
from speckit.validate.analysis import low_ratio_causes, run_warnings
from speckit.validate.gates import check_gates, check_preflight
from speckit.validate.inputs import check_args, gather_inputs, output_dirs, pick_batch_sizes
from speckit.validate.options import ValidateOptions
from speckit.validate.outputs import build_report, report_settings, write_outputs
from speckit.validate.report import ValidationReport
from speckit.validate.runs import run_context, run_engines


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
    as fit in ``compare_budget_s`` and reports acceptance only.
    """
    if "force" in fields:  # the old name, one more release
        warnings_.warn("validate(force=...) is now force_start=... (force replaces outputs "
                       "elsewhere)", DeprecationWarning, stacklevel=2)
        fields["force_start"] = fields.pop("force")
    opts = options_of(ValidateOptions, options, fields)
    t_start = time.monotonic()
    eargs = check_args(opts)
    warnings: list[str] = []
    inp = gather_inputs(opts, warnings)
    batches = pick_batch_sizes(opts.batch_sizes, cpu=inp.cpu, concurrency=opts.concurrency)
    preflight = check_preflight(inp, opts, eargs=eargs, warnings=warnings)
    plan_info = check_gates(inp, opts, eargs=eargs, concurrency=max([opts.concurrency, *batches]),
                            warnings=warnings)
    outdir, workdir = output_dirs(opts.out, inp, opts.dataset)
    ctx = run_context(inp, opts, workdir, eargs)
    with ctx.bar:
        try:
            r = run_engines(ctx, batches=batches, warnings=warnings)
        finally:
            if inp.traffic is not None:  # the users' prompts never stay in --out
                forget_exchange(workdir)
    if outdir is None:  # no --out: leave nothing behind (a failure above keeps its logs)
        shutil.rmtree(workdir, ignore_errors=True)
        for s in r.runs:
            s.run.log = ""
    run_warnings(r.runs, inp.spec, warnings)
    low_ratio_causes(r.runs, r.concurrency, inp, concurrency=opts.concurrency, warnings=warnings)
    rep = build_report(inp, r, eargs=eargs, plan_info=plan_info, preflight=preflight,
                       warnings=warnings,
                       settings=report_settings(opts, eargs, batches),
                       keep_log=outdir is not None or opts.baseline is not None, t_start=t_start)
    if opts.baseline is not None:
        rep.warnings.append(f"baseline reused from an earlier run ({r.base.log_path})")
    if outdir is not None:
        with output_errors(outdir):
            write_outputs(rep, outdir)
    return rep
