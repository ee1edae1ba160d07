"""`speckit validate`: measure a draft on the real vLLM engine against a no-speculation baseline.

Baseline and speculative runs use identical rendered prompts, each configuration in its own child
process; a k sweep needs at most three engine starts (baseline, largest k, confirmation).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from speckit.io.engine import DEFAULT_TIMEOUT_S, EngineRun
from speckit.io.output import output_errors
from speckit.io.progress import EngineProgress
from speckit.validate.analysis import low_ratio_causes, run_warnings
from speckit.validate.gates import check_gates
from speckit.validate.inputs import check_args, gather_inputs, output_dirs, pick_batch_sizes
from speckit.validate.outputs import build_report, write_outputs
from speckit.validate.report import ValidationReport, print_report
from speckit.validate.runs import RunCtx, run_engines

__all__ = ["ValidationReport", "print_report", "validate", "write_outputs"]


def validate(*, target: str, draft: str | None = None, method: str | None = None,
             k: int | None = None, sweep: Sequence[int] | None = None,
             dataset: str | Path = "mixed", num_prompts: int | None = 32, max_tokens: int = 128,
             temperature: float = 0.0, seed: int = 0, thinking: bool = False,
             concurrency: int = 1, tp: int = 1, engine_args: Mapping[str, Any] | None = None,
             compare_draft: str | None = None, out: str | Path | None = None,
             force: bool = False, confirm: bool = True, timeout_s: float = DEFAULT_TIMEOUT_S,
             cpu_kv_bytes: int = 1 << 30, cpu_threads: int | None = 1, progress: bool = False,
             baseline: EngineRun | None = None, batch_sizes: Sequence[int] | None = None,
             serve_gpu: str | None = None, serve_tp: int = 1,
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
    eargs = check_args(k=k, sweep=sweep, max_tokens=max_tokens, temperature=temperature,
                       concurrency=concurrency, tp=tp, engine_args=engine_args)
    warnings: list[str] = []
    inp = gather_inputs(target=target, draft=draft, method=method, compare_draft=compare_draft, k=k,
                        sweep=sweep, dataset=dataset, num_prompts=num_prompts, warnings=warnings)
    batches = pick_batch_sizes(batch_sizes, cpu=inp.cpu, concurrency=concurrency)
    plan_info = check_gates(inp, tp=tp, eargs=eargs, concurrency=max([concurrency, *batches]),
                            cpu_kv_bytes=cpu_kv_bytes, force=force, warnings=warnings)
    outdir, workdir = output_dirs(out, inp, dataset)
    ctx = RunCtx(inp, workdir, EngineProgress(progress, on_event), timeout_s, temperature, tp,
                 common={"model": str(inp.tpath), "max_tokens": max_tokens,
                         "temperature": temperature, "seed": seed, "thinking": thinking,
                         "concurrency": concurrency, "tp": tp, "engine_args": eargs,
                         "cpu_kv_bytes": cpu_kv_bytes,
                         "cpu_threads": cpu_threads if inp.cpu else None})
    with ctx.bar:
        r = run_engines(ctx, baseline=baseline, sweep=bool(sweep), confirm=confirm,
                        batches=batches, serve_gpu=serve_gpu, serve_tp=serve_tp,
                        acceptance_only=compare_acceptance_only, budget_s=compare_budget_s,
                        warnings=warnings)
    if outdir is None:  # no --out: leave nothing behind (a failure above keeps its logs)
        shutil.rmtree(workdir, ignore_errors=True)
        for s in r.runs:
            s.run.log = ""
    run_warnings(r.runs, inp.mod, warnings)
    low_ratio_causes(r.runs, r.concurrency, inp, concurrency=concurrency, warnings=warnings)
    rep = build_report(inp, r, eargs=eargs, plan_info=plan_info, warnings=warnings,
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
