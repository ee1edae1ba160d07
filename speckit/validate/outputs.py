"""What validate returns and leaves behind: the ValidationReport assembled from the inputs and
runs, and the files written into --out (spec config, serve command, report.json/.md, plots).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform as _platform
import time
from pathlib import Path
from typing import Any

from speckit.core.specconfig import SERVE_COMMAND_FILE, serve_line, serve_script
from speckit.io.checkpoint import write_json
from speckit.validate.analysis import emulated_quant, run_summary
from speckit.validate.inputs import Inputs
from speckit.validate.options import ValidateOptions
from speckit.validate.report import (
    ValidationReport,
    to_markdown,
    write_plots,
)
from speckit.validate.runs import Runs
from speckit.validate.verdict import verdict


def report_settings(opts: ValidateOptions, eargs: dict[str, Any],
                    batches: list[int]) -> dict[str, Any]:
    """The settings a report records (the engine's effective ones are added from its run)."""
    return {"max_tokens": opts.max_tokens, "temperature": opts.temperature, "seed": opts.seed,
            "concurrency": opts.concurrency, "tp": opts.tp, "engine_args": eargs,
            "batch_sizes": batches, "serve_gpu": opts.serve_gpu, "serve_tp": opts.serve_tp}


def build_report(inp: Inputs, r: Runs, *, eargs, plan_info, warnings, settings, keep_log: bool,
                 t_start: float, preflight=None) -> ValidationReport:
    base = r.base
    v = verdict(r.runs, concurrency=settings["concurrency"], conc=r.concurrency, cpu=inp.cpu,
                emulated=emulated_quant(inp.dcfg) if inp.dcfg else None)
    serve = serve_line(target=str(inp.tpath), spec_config=r.final_cfg, method=inp.spec.name,
                       tp=settings["tp"], engine_args=eargs, speculate=v.recommended)
    rep = ValidationReport(
        target=inp.tname, draft=inp.dname, method=inp.spec.name, vllm_method=inp.spec.vllm_method,
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
        baseline=run_summary(base, role="baseline", k=None, draft=None, keep_log=keep_log),
        runs=r.runs, sweep=r.sweep, compare=r.compare, spec_config=r.final_cfg,
        serve_command=serve.command, serve_notes=serve.notes, plan=plan_info,
        warnings=warnings, engine_starts=r.starts, seconds=time.monotonic() - t_start,
        chat_template=base.chat_template, concurrency=r.concurrency, verdict=v,
        acceptance_by_context=r.by_context, trained_length=inp.trained,
        traffic=inp.traffic_report, copies=list(inp.copies), preflight=dict(preflight or {}))
    rep.baseline_run = base
    return rep


def _hash_ids(ids: list[list[int]]) -> str:

    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


SPEC_CONFIG = "spec-config.json"


NOT_RECOMMENDED = "spec-config.not-recommended.json"


def write_outputs(rep: ValidationReport, outdir: Path) -> None:
    """spec-config.json (spec-config.not-recommended.json when speculation did not pay),
    serve-command.sh, report.json, report.md and the PNG plots."""

    outdir.mkdir(parents=True, exist_ok=True)
    # the file name is the label: a script that reads spec-config.json never picks up a config
    # measured not to pay; the other name is removed, so a reused --out holds no stale one
    spec_name, stale = ((SPEC_CONFIG, NOT_RECOMMENDED) if rep.recommended
                        else (NOT_RECOMMENDED, SPEC_CONFIG))
    files = {"spec_config": str(outdir / spec_name),
             "serve_command": str(outdir / SERVE_COMMAND_FILE),
             "report_json": str(outdir / "report.json"),
             "report_md": str(outdir / "report.md")}
    files.update(write_plots(rep, outdir))
    rep.files = files
    (outdir / stale).unlink(missing_ok=True)
    write_json(outdir / spec_name, rep.spec_config)
    said = [] if rep.recommended else [rep.verdict.summary,
                                       f"({NOT_RECOMMENDED} holds the measured config)"]
    (outdir / SERVE_COMMAND_FILE).write_text(serve_script(rep.serve_command, by="validate",
                                                          comments=said))
    write_json(outdir / "report.json", rep.to_dict())
    (outdir / "report.md").write_text(to_markdown(rep))
