"""bench(): check the options, load the prompts, run every arm, summarise, write the report."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import tempfile
from pathlib import Path
from typing import Any

from speckit.bench import arms as _arms
from speckit.bench.choice import advice, method_choices
from speckit.bench.endpoint import Endpoint, StreamLimits
from speckit.bench.options import BenchOptions, dataset_path
from speckit.bench.render import write_files
from speckit.bench.report import (
    BenchReport,
    context_acceptance,
    primary,
    summarise,
    verdict,
)
from speckit.bench.run import (
    BenchError,
    RunContext,
    check_engine,
    check_options,
    progress_printer,
    prompts_per_arm,
    run_bench,
)
from speckit.core.evidence import PAYS, classify
from speckit.core.jsonable import to_jsonable
from speckit.core.preflight import Finding
from speckit.errors import SpeckitError, UsageError
from speckit.io.draftrecord import read_trained_length
from speckit.io.host import cpu_model, engine_model_runner
from speckit.io.output import atomic_output_dir
from speckit.io.preflight import check_pair, gate
from speckit.io.prompts import PromptSet, load_prompts
from speckit.io.refs import resolve
from speckit.io.traffic import traffic_for_target


def bench(opts: BenchOptions, *, progress: bool | str = False, force: bool = False) -> BenchReport:
    """Measure every arm x cell; raises BenchError (with ``.report``) when the run stops early,
    after writing what it measured to ``opts.out``."""
    check_options(opts)
    limits = StreamLimits.from_env()
    cpu = _vllm_cpu()
    check_engine(opts, cpu=cpu, vllm_installed=importlib.util.find_spec("vllm") is not None)
    dep = _arms.resolve_deployment(opts, cpu=cpu) if opts.target else None
    said: list[str] = []
    found = _preflight(opts, dep, said, cpu=cpu)  # an error stops here, before any server
    report = BenchReport("endpoint" if opts.endpoint else "started", opts.target, opts.draft,
                         dep.method if dep else None, to_jsonable(_as_shown(opts)),
                         platform=_platform(opts, cpu), warnings=said, preflight=found)
    extra = _thinking(opts, dep, report.warnings)
    messages = _messages(opts, dep, report, thinking=len(extra))
    say = progress_printer(progress)
    if opts.out is None:
        logs = Path(tempfile.mkdtemp(prefix="speckit-bench-logs-"))
        stop = _run(RunContext(opts, report, messages, extra, logs, say, dep, limits=limits))
    else:
        with atomic_output_dir(opts.out, force=force) as tmp:
            stop = _run(RunContext(opts, report, messages, extra, tmp / "logs", say, dep,
                                   limits=limits))
            write_files(report, tmp)
        report.files = {k: str(Path(opts.out) / v) for k, v in report.files.items()}
    if isinstance(stop, KeyboardInterrupt):
        raise stop
    if stop is not None:
        raise BenchError(stop.message, stop.hint, report=report)
    return report


def _preflight(opts: BenchOptions, dep, warnings: list[str], *, cpu: bool) -> list[Finding]:
    """The pair's pre-flight (speckit.io.preflight) of the servers speckit starts (--endpoint
    takes no --target/--draft: its pair is not here). An error raises PreflightError unless
    --force-start (then ``warnings`` says so)."""
    if dep is None or dep.draft_path is None:
        return []
    target = resolve(dep.target_path, role="target", need="config")
    res = check_pair(dep.draft_path, target, target_ref=opts.target,
                     serve_context=opts.engine_args.get("max_model_len"),
                     model_runner=engine_model_runner(cpu))
    gate(res, force_start=opts.force_start, warnings=warnings)
    return list(res.findings)


def _run(ctx: RunContext) -> BenchError | KeyboardInterrupt | None:
    """run_bench, then the summary whatever happened; the failure is returned, not raised, so
    the report of the cells measured is still written."""
    stop: BenchError | KeyboardInterrupt | None = None
    try:
        run_bench(ctx)
    except BenchError as e:
        stop = e
        ctx.report.error = e.message
    except KeyboardInterrupt as e:  # servers are already stopped; keep what was measured
        stop = e
        ctx.report.error = "interrupted"
    try:
        summarise(ctx.report, ctx.opts, dep=ctx.dep)
    except SpeckitError as e:
        ctx.report.warnings.append(f"no projection: {e.message}")
        ctx.report.projection = {}
        summarise(ctx.report, ctx.opts, dep=None)
    context_acceptance(ctx.report, ctx.opts)
    ctx.report.verdict = verdict(ctx.report, ctx.opts)
    ctx.report.recommended = _recommended(ctx.report)
    _advise(ctx.report, ctx.opts)
    return stop


def _advise(r: BenchReport, opts: BenchOptions) -> None:
    """Which method to use at each load on this workload (the prompts benched)."""

    rows = [row for row in primary(r.summary, opts) if row.kind != "synthetic"]
    r.method_choice = method_choices(rows, trained=r.method)
    r.advice = advice(r.method_choice, workload=Path(str(opts.dataset)).stem) \
        if r.method_choice else None


def _recommended(r: BenchReport) -> str | None:
    """The arm whose spec-config and serve line are written, only when the verdict says
    speculation pays: the schedule arm when one of its ratios' intervals lies above 1; else the
    static k chosen at the lowest concurrency where one pays. None: serve the target alone."""
    if r.verdict is None or r.verdict.status != PAYS:
        return None
    sched = next((row.arm for row in r.summary if row.kind == "schedule"
                  and classify(row.ratio_interval) == PAYS), None)
    if sched:
        return sched
    for ch in r.k_choices:
        if ch.measured_k:
            return next((row.arm for row in r.summary if row.kind == "static"
                         and row.k == ch.measured_k), None)
    return None


def _messages(opts: BenchOptions, dep, report: BenchReport, *,
              thinking: int = 1) -> list[list[dict[str, str]]]:
    need = prompts_per_arm(opts, thinking)
    warnings = report.warnings
    if dep is not None and dep.draft_path is not None:
        report.trained_length = read_trained_length(dep.draft_path, dep.draft_config or {})
    if opts.traffic is not None:
        ps = _traffic(opts, dep, report, need)
    else:
        ps = load_prompts(dataset_path(opts.dataset), num_prompts=need)
    if ps.skipped:
        warnings.append(f"{len(ps.skipped)} prompt rows skipped; first: {ps.skipped[0]}")
    if len(ps.prompts) < need:
        warnings.append(f"{ps.name} has {len(ps.prompts)} prompts and each server's cells and "
                        f"warm-ups take {need}: later cells repeat prompts, which favours "
                        "suffix decoding (it learns from earlier outputs) and prefix caching")
    msgs = [p.as_messages() for p in ps.prompts]
    if opts.input_len is not None:
        msgs = fixed_input(msgs, _tokenizer(opts, dep), opts.input_len)
    return msgs


def _traffic(opts: BenchOptions, dep, report: BenchReport, need: int) -> PromptSet:
    """--traffic's requests (up to ``need``, in turn from each context bucket when the target's
    tokenizer counts them), its summary and the draft's vocabulary coverage into the report.
    Each request runs at the cell's temperature and thinking setting (bench's grid), not the
    row's own: the summary shows what the rows ask for."""
    if opts.dataset != "mixed" or opts.input_len is not None:
        raise UsageError("--traffic does not combine with --dataset or --input-len",
                         hint="--traffic FILE is the prompt set, at its own lengths")
    src = opts.tokenizer or (str(dep.target_path) if dep else None)
    tokenizer = src if src and Path(src).is_dir() else None
    run, report.traffic = traffic_for_target(
        opts.traffic, tokenizer, what="target", num_prompts=need,
        draft=dep.draft_path if dep else None, target_config=dep.target_path if dep else None,
        temperature=opts.temperatures[0], thinking=sorted(opts.thinking)[0],
        warnings=report.warnings)
    if tokenizer is None:
        report.traffic.notes.append("no tokenizer here (pass --tokenizer DIR with --endpoint): "
                                    "lengths in characters, requests taken in file order; the "
                                    "context buckets come from the server's prompt tokens")
    return run.prompts


def fixed_input(msgs: list[list[dict[str, str]]], tok, n: int) -> list[list[dict[str, str]]]:
    """Each prompt's user text made exactly ``n`` tokens long: the prompts that follow it are
    appended until there are enough, then the tokens are cut (the chat template adds its own)."""
    texts = [m[-1]["content"] for m in msgs]
    out = []
    for i in range(len(msgs)):
        ids: list[int] = []
        j = i
        while len(ids) < n:
            ids += tok.encode("\n\n" + texts[j % len(texts)] if ids else texts[j % len(texts)],
                              add_special_tokens=False)
            j += 1
        out.append([*msgs[i][:-1], {"role": "user", "content": tok.decode(ids[:n])}])
    return out


def _tokenizer(opts: BenchOptions, dep):
    from transformers import AutoTokenizer

    src = opts.tokenizer or (str(dep.target_path) if dep else None)
    if src is None or not Path(src).is_dir():
        raise UsageError("--input-len needs the target's tokenizer as a local directory",
                         hint="pass --tokenizer DIR (with --endpoint)")
    return AutoTokenizer.from_pretrained(src, trust_remote_code=False)


def _thinking(opts: BenchOptions, dep, warnings: list[str]) -> dict[bool, dict[str, Any]]:
    """Request bodies per thinking setting; a template without the switch runs it off only."""
    wanted = sorted(set(opts.thinking))
    if dep is not None and True in wanted and not _has_switch(dep.target_path):
        warnings.append("the target's chat template has no enable_thinking switch: thinking "
                        "on was not measured")
        wanted = [False]
    return {t: {"chat_template_kwargs": {"enable_thinking": t}} for t in wanted}


def _has_switch(path: Path) -> bool:
    for name in ("chat_template.jinja", "tokenizer_config.json"):
        f = path / name
        if f.is_file() and "enable_thinking" in f.read_text(errors="replace"):
            return True
    return False


def _vllm_cpu() -> bool:
    try:
        importlib.metadata.version("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _as_shown(opts: BenchOptions) -> BenchOptions:
    """The options as the report records them: endpoint credentials redacted."""
    return dataclasses.replace(
        opts, endpoint=opts.endpoint and Endpoint.parse(opts.endpoint).shown,
        baseline_endpoint=opts.baseline_endpoint and Endpoint.parse(
            opts.baseline_endpoint, flag="--baseline-endpoint").shown)


def _platform(opts: BenchOptions, cpu: bool) -> str:
    if opts.endpoint:
        return f"endpoint {Endpoint.parse(opts.endpoint).shown} ({opts.gpus or '?'} GPUs, given)"

    if cpu:
        return f"vllm-cpu {importlib.metadata.version('vllm-cpu')} on {cpu_model()}"
    return f"vLLM {importlib.metadata.version('vllm')}"
