"""The bench result: every cell as measured, the per-cell summary over seeds with its spread and
ratio to baseline, the k each concurrency should use (measured beside projected), and the files
(report.json, report.md, plots, spec-config.json, serve-command.sh).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from speckit.bench.options import BenchOptions, Load
from speckit.bench.stats import (
    LATENCY_METRICS,
    CellFigures,
    Spread,
    ratio_spread,
    recommend_k,
    schedule_from_best,
    spread,
)
from speckit.core.context import RequestAcceptance, acceptance_by_context, past_training
from speckit.core.evidence import (
    PAYS,
    Interval,
    classify,
    pooled_log_sd,
    pooled_ratio_interval,
)
from speckit.core.metrics import SpecCounters
from speckit.core.specconfig import MeasuredRatio, SpeculationVerdict, speculation_verdict
from speckit.io.datafiles import get_gpu
from speckit.io.projection import project_speed_from_refs


@dataclass
class CellResult:
    arm: str
    kind: str
    k: int
    load: Load
    temperature: float
    thinking: bool
    seed: int
    figures: CellFigures | None = None
    error: str | None = None
    problems: list[str] = field(default_factory=list)
    synthetic_al: float | None = None  # the AL vLLM's synthetic sampler forced (kind synthetic)

    @property
    def ok(self) -> bool:
        return self.figures is not None and not self.error


@dataclass
class SummaryRow:
    """One arm at one load, temperature and thinking setting: the mean over seeds."""

    arm: str
    kind: str
    k: int
    load: str
    concurrency: int | None
    rate: float | None
    temperature: float
    thinking: bool
    seeds: int
    output_tok_s: Spread
    per_gpu_tok_s: float
    ratio: Spread | None  # over the baseline at the same cell
    latency_ms: dict[str, dict[str, float | None]]  # stats.LATENCY_METRICS, mean over seeds
    acceptance_length: float | None  # from the /metrics deltas pooled over seeds
    per_position: list[float]
    k_drafted: float | None  # draft tokens per draft: the k the engine used on average
    # 95% interval of ratio.mean (seed-to-seed noise pooled over the run's cells; None with one
    # seed per cell): "pays" only when it lies above 1
    ratio_interval: Interval | None = None
    synthetic_al: float | None = None  # forced by vLLM's synthetic sampler (kind synthetic)


@dataclass
class KChoice:
    """Which k one concurrency should use: measured on this server beside plan's projection."""

    concurrency: int
    measured_k: int | None  # the k to use: 0 unless a static k's interval lies above 1
    measured_ratio: Spread | None  # of the fastest static k (measured_k's when it pays)
    projected_k: int | None = None
    projected_ratio: float | None = None
    schedule_ratio: Spread | None = None  # the schedule arm at this concurrency
    best_k: int | None = None  # the fastest static k, paying or not
    interval: Interval | None = None  # measured_ratio's 95% interval
    status: str | None = None  # pays | does not pay | cannot tell (None: no baseline)
    schedule_interval: Interval | None = None  # schedule_ratio's 95% interval


@dataclass
class BenchReport:
    mode: str  # "started" (speckit ran vllm serve) | "endpoint"
    target: str | None
    draft: str | None
    method: str | None
    options: dict[str, Any]
    cells: list[CellResult] = field(default_factory=list)
    summary: list[SummaryRow] = field(default_factory=list)
    k_choices: list[KChoice] = field(default_factory=list)
    measured_schedule: list[list[int]] = field(default_factory=list)
    projection: dict[str, Any] | None = None
    serve_lines: dict[str, list[str]] = field(default_factory=dict)
    spec_configs: dict[str, Any] = field(default_factory=dict)
    recommended: str | None = None  # the arm whose spec-config and serve line are written
    skipped: dict[str, str] = field(default_factory=dict)  # arm -> why it was not measured
    # which method to use at each load on this workload (choice.MethodChoice), and in one line
    method_choice: list[Any] = field(default_factory=list)
    advice: str | None = None
    # does speculation pay on this server? (core.specconfig.SpeculationVerdict); the written
    # spec-config and serve line follow it
    verdict: Any = None
    platform: str = ""
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    # arm -> AL per context bucket from the server's per-request summaries (ContextAcceptance)
    acceptance_by_context: dict[str, Any] = field(default_factory=dict)
    traffic: Any = None  # --traffic in numbers (speckit.core.traffic.TrafficReport), no text
    trained_length: Any = None  # the draft's trained (or declared) context (TrainedLength)
    # the pair's pre-flight findings (core.preflight.Finding); an error among them means the run
    # was started with --force-start
    preflight: list[Any] = field(default_factory=list)


# ---- the summary -----------------------------------------------------------------------------

def summarise(report: BenchReport, opts: BenchOptions, *, dep=None) -> None:
    """Fill summary, k_choices and measured_schedule from the cells (run again after each arm)."""
    groups: dict[tuple, list[CellResult]] = {}
    for c in report.cells:
        if c.ok:
            groups.setdefault((c.load, c.temperature, c.thinking, c.arm), []).append(c)
    base = {key[:3]: _row(cells) for key, cells in groups.items() if cells[0].kind == "baseline"}
    rows = []
    for key, cells in groups.items():
        row = _row(cells)
        b = base.get(key[:3])
        if b is not None and row.kind != "baseline":
            row.ratio = ratio_spread(row.output_tok_s, b.output_tok_s)
        elif row.kind == "baseline":
            row.ratio = Spread(1.0, 0.0, row.seeds)
        rows.append(row)
    _intervals(rows, base)
    report.summary = rows
    report.k_choices, report.measured_schedule = _k_choices(rows, opts)
    if dep is not None and opts.gpu and report.projection is None:
        report.projection = project(report, opts, dep)
    _merge_projection(report)


def _intervals(rows: Sequence[SummaryRow], base: dict[tuple, SummaryRow]) -> None:
    """Each speculating row's ratio interval: the log-scale seed-to-seed noise of every cell of
    this run pooled (one machine, one noise level), a t-interval on its ratio to the baseline."""
    pooled = pooled_log_sd([(r.output_tok_s.mean, r.output_tok_s.sd, r.output_tok_s.n)
                            for r in rows])
    for r in rows:
        b = base.get((_load_key(r), r.temperature, r.thinking))
        if r.kind != "baseline" and r.ratio is not None and b is not None:
            r.ratio_interval = pooled_ratio_interval(r.ratio.mean, r.seeds, b.seeds, pooled)


def _load_key(r: SummaryRow) -> Load:
    return Load(concurrency=r.concurrency) if r.rate is None else Load(rate=r.rate)


def _row(cells: Sequence[CellResult]) -> SummaryRow:
    c0 = cells[0]
    figs = [c.figures for c in cells if c.figures is not None]
    pooled = _pool([f.counters for f in figs if f.counters is not None])
    k_dr = (pooled.num_draft_tokens / pooled.num_drafts) if pooled and pooled.num_drafts else None
    return SummaryRow(
        c0.arm, c0.kind, c0.k, c0.load.label, c0.load.concurrency, c0.load.rate,
        c0.temperature, c0.thinking, len(figs), spread([f.output_tok_s for f in figs]),
        sum(f.per_gpu_tok_s for f in figs) / len(figs), None,
        {m.name: _mean_pct([f.latency_ms[m.name] for f in figs]) for m in LATENCY_METRICS},
        pooled.acceptance_length if pooled and pooled.num_drafts else None,
        pooled.per_position if pooled else [], k_dr, synthetic_al=c0.synthetic_al)


def _pool(cs: Sequence[SpecCounters]) -> SpecCounters | None:
    if not cs:
        return None
    n = max(len(c.accepted_per_pos) for c in cs)
    per = [sum(c.accepted_per_pos[i] for c in cs if i < len(c.accepted_per_pos))
           for i in range(n)]
    return SpecCounters(sum(c.num_drafts for c in cs), sum(c.num_draft_tokens for c in cs),
                        sum(c.num_accepted_tokens for c in cs), per)


def _mean_pct(ds: Sequence[dict[str, float | None]]) -> dict[str, float | None]:
    keys = ds[0].keys() if ds else ()
    out: dict[str, float | None] = {}
    for k in keys:
        vals = [d[k] for d in ds if d.get(k) is not None]
        out[k] = sum(vals) / len(vals) if vals else None
    return out


def primary(rows: Sequence[SummaryRow], opts: BenchOptions) -> list[SummaryRow]:
    """The rows at the first temperature and thinking setting: the ones k is chosen on."""
    t0, th0 = opts.temperatures[0], sorted(opts.thinking)[0]
    return [r for r in rows if r.temperature == t0 and r.thinking == th0]


def _k_choices(rows: Sequence[SummaryRow], opts: BenchOptions):
    """Per concurrency the k to use: the fastest static k whose ratio interval lies above 1
    (a smaller k within the tolerance wins), else 0; a k is only chosen against a baseline."""
    prim = [r for r in primary(rows, opts) if r.concurrency is not None]
    out, best = [], {}
    for c in sorted({r.concurrency for r in prim}):
        at = [r for r in prim if r.concurrency == c]
        static = {r.k: r for r in at if r.kind == "static"}
        base = next((r for r in at if r.kind == "baseline"), None)
        srow = next((r for r in at if r.kind == "schedule"), None)
        sched, siv = (srow.ratio, srow.ratio_interval) if srow else (None, None)
        fastest = max(static.values(), key=lambda r: r.output_tok_s.mean, default=None)
        if base is None or fastest is None:
            out.append(KChoice(c, None, fastest.ratio if fastest else None,
                               schedule_ratio=sched, best_k=fastest.k if fastest else None,
                               schedule_interval=siv))
            continue
        paying = {k: r.output_tok_s for k, r in static.items()
                  if classify(r.ratio_interval) == PAYS}
        k = recommend_k(paying) if paying else 0
        shown_row = static.get(k) or fastest
        out.append(KChoice(c, k, shown_row.ratio, schedule_ratio=sched, best_k=fastest.k,
                           interval=shown_row.ratio_interval,
                           status=classify(shown_row.ratio_interval), schedule_interval=siv))
        best[c] = k
    top = max(opts.concurrencies, default=1)
    return out, schedule_from_best(best, max_batch=top)


# ---- acceptance by context ----------------------------------------------------------------------

NO_PER_REQUEST = ("the server returned no per-request acceptance, so AL is not split by "
                  "context there (vLLM >= 0.32 with --per-request-spec-decode-metrics summary "
                  "returns it; speckit starts its servers so); its overall AL from /metrics "
                  "stands")


def context_acceptance(report: BenchReport, opts: BenchOptions) -> None:
    """Each speculating arm's AL per context bucket, from the acceptance summary vLLM puts in
    every response and the prompt tokens of its usage, over the arm's cells at the first
    temperature and thinking setting (all loads and seeds pooled: acceptance does not depend on
    the load); the trained-length warning over the same prompts."""
    t0, th0 = opts.temperatures[0], sorted(opts.thinking)[0]
    arms: dict[str, tuple[int, list[RequestAcceptance]]] = {}
    for c in report.cells:
        if c.ok and c.kind != "baseline" and c.temperature == t0 and c.thinking == th0:
            arms.setdefault(c.arm, (c.k, []))[1].extend(c.figures.requests_acceptance)
    report.acceptance_by_context = {
        arm: acceptance_by_context(recs, k=k or None, source=f"arm {arm}: the acceptance "
                                   f"summaries of its {len(recs)} responses at T={t0:g}")
        for arm, (k, recs) in arms.items() if recs}
    missing = [a for a, (_, recs) in arms.items() if not recs]
    if missing:
        report.warnings.append(f"{', '.join(missing)}: {NO_PER_REQUEST}")
    prompts = [r.prompt_tokens for _, recs in arms.values() for r in recs]
    over = past_training(report.trained_length, prompts) \
        if report.trained_length is not None else None
    if over and over not in report.warnings:
        report.warnings.append(over + " (prompt tokens as the server counted them)")


# ---- does speculation pay? ---------------------------------------------------------------------

MORE_SEEDS = "more runs per cell (--repeats 3 or more)"


def verdict(report: BenchReport, opts: BenchOptions) -> SpeculationVerdict:
    """core.specconfig's rule over the closed-loop rows that speculate with the draft (static k,
    the schedule; an --endpoint), at the first temperature and thinking setting: "pays" when one
    ratio's 95% interval over seeds lies above 1. Synthetic-acceptance and untrained arms are
    not what the serve line would run, so they never decide."""
    pts = [MeasuredRatio(r.ratio.mean, r.k, int(r.concurrency), f"arm {r.arm}",
                         r.acceptance_length, r.ratio_interval, kind="arm")
           for r in primary(report.summary, opts)
           if r.kind in ("static", "schedule") and r.ratio is not None
           and r.concurrency is not None]
    return speculation_verdict(pts, where="this server", more=MORE_SEEDS)


# ---- the projection ---------------------------------------------------------------------------

def project(report: BenchReport, opts: BenchOptions, dep) -> dict[str, Any] | None:
    """speckit plan's projection for ``opts.gpu`` with the acceptance measured here (the largest
    static k at the first temperature, pooled over its cells)."""

    static = [r for r in primary(report.summary, opts) if r.kind == "static" and r.per_position]
    if not static:
        return None
    kmax = max(r.k for r in static)
    cells = [c for c in report.cells if c.ok and c.kind == "static" and c.k == kmax
             and c.temperature == opts.temperatures[0] and c.figures.counters is not None]
    pooled = _pool([c.figures.counters for c in cells])
    if pooled is None or not pooled.num_drafts:
        return None
    rates = [min(1.0, p) for p in pooled.per_position]
    for i in range(1, len(rates)):
        rates[i] = min(rates[i], rates[i - 1])
    ctx = int(opts.input_len or 256) + int(opts.output_len or opts.max_tokens)
    sp = project_speed_from_refs(target=str(dep.target_path), draft=str(dep.draft_path),
                                 method=dep.method, k=kmax, acceptance=rates,
                                 gpu=get_gpu(opts.gpu), tp=dep.tp, contexts=(ctx,),
                                 max_batch=max(opts.concurrencies, default=1))
    table = sp.tables[0]
    ratios = {str(c): {str(k): table.ratio[k][table.batches.index(c)] for k in table.ks}
              for c in opts.concurrencies if c in table.batches}
    return {"label": "projected", "gpu": sp.gpu, "tp": sp.tp, "context": ctx,
            "per_position": rates, "schedule": [list(r) for r in sp.schedule],
            "best_k": {str(c): _k_at(sp.schedule, c) for c in opts.concurrencies},
            "ratio": ratios, "assumptions": list(sp.assumptions)}


def _k_at(schedule: Sequence[Sequence[int]], batch: int) -> int | None:
    return next((int(k) for lo, hi, k in schedule if lo <= batch <= hi), None)


def _merge_projection(report: BenchReport) -> None:
    p = report.projection
    if not p:
        return
    for ch in report.k_choices:
        ch.projected_k = p["best_k"].get(str(ch.concurrency))
        if ch.projected_k:
            ch.projected_ratio = (p["ratio"].get(str(ch.concurrency)) or {}).get(
                str(ch.projected_k))
        elif ch.projected_k == 0:
            ch.projected_ratio = 1.0
