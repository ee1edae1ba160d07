"""The result of `speckit validate` and its renderings: report.json, report.md, PNG plots, a table.

Everything a reader needs to trust (or distrust) an acceptance figure is recorded next to it: vLLM
version, hardware, dtype, prompt-set hash, chat template, thinking flag and temperature.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core.context import context_table
from speckit.core.evidence import Interval, shown
from speckit.core.metrics import (
    KPrediction,
    LosslessCheck,
    SpecCounters,
    StepCosts,
    drift_counts,
    drift_meaning,
    lossless_cell,
)
from speckit.core.registry.canary import canary_lines
from speckit.core.traffic_text import traffic_rows, trained_rows
from speckit.io.context_plot import write_context_plot
from speckit.io.plots import pyplot
from speckit.io.preflight import finding_line
from speckit.io.terminal import output_console, print_rows, print_table, unclipped
from speckit.validate import concurrency as C
from speckit.validate import context


@dataclass
class RunSummary:
    """One engine configuration: what ran and how fast."""

    label: str
    role: str  # "baseline" | "speculative" | "confirm" | "compare"
    k: int | None
    draft: str | None
    speculative_config: dict[str, Any] | None
    output_tokens: int
    wall_s: float
    tokens_per_s: float
    prefill_s: float
    decode_s: float
    engine_start_s: float
    child_s: float
    log: str


@dataclass
class SpecRunReport:
    run: RunSummary
    counters: SpecCounters
    acceptance_length: float
    acceptance_rate: float | None
    per_position: list[float]
    conditional: list[float | None]
    al_stderr: float | None
    per_prompt_al: list[float | None]
    throughput_ratio: float  # speculative / baseline output tokens per second
    lossless: LosslessCheck
    problems: list[str]  # counter inconsistencies; empty when sane
    # timed on a machine where its kernels are emulated: acceptance counts, throughput does not
    acceptance_only: bool = False
    # 95% interval of throughput_ratio over the paired prompts (None: under 2 timed prompts)
    ratio_interval: Interval | None = None


@dataclass
class Confirmation:
    k: int
    predicted_al: float
    measured_al: float
    predicted_ratio: float
    measured_ratio: float

    @property
    def al_error(self) -> float:
        return (self.predicted_al - self.measured_al) / self.measured_al

    @property
    def ratio_error(self) -> float:
        return (self.predicted_ratio - self.measured_ratio) / self.measured_ratio


@dataclass
class SweepReport:
    ks: list[int]
    k_measured: int
    costs: StepCosts
    predictions: list[KPrediction]
    recommended_k: int
    confirmation: Confirmation | None
    notes: list[str] = field(default_factory=list)
    # after the confirmation run: the step cost refit through both measured k
    calibrated_costs: StepCosts | None = None
    calibrated: list[KPrediction] = field(default_factory=list)


@dataclass
class CompareReport:
    """A second draft on the same prompts and k, side by side with the primary draft."""

    primary_draft: str
    other_draft: str
    k: int
    primary: SpecRunReport
    other: SpecRunReport

    @property
    def al_drop(self) -> float:
        return self.primary.acceptance_length - self.other.acceptance_length

    @property
    def al_drop_pct(self) -> float:
        return 100.0 * self.al_drop / self.primary.acceptance_length

    @property
    def per_position_drop(self) -> list[float]:
        return [a - b for a, b in zip(self.primary.per_position, self.other.per_position,
                                      strict=False)]

    @property
    def acceptance_only(self) -> bool:
        """The compare measured acceptance, not throughput (its kernels emulated here)."""
        return self.other.acceptance_only or self.primary.acceptance_only

    @property
    def ratio_drop_pct(self) -> float | None:
        """None for an acceptance-only compare: no throughput was compared."""
        p = self.primary.throughput_ratio
        if self.acceptance_only:
            return None
        return 100.0 * (p - self.other.throughput_ratio) / p if p else 0.0


@dataclass
class ValidationReport:
    target: str
    draft: str | None
    method: str
    vllm_method: str
    k: int  # the k of the final spec config (recommended and confirmed with --sweep)
    mode: str  # "single" | "sweep"
    dataset: dict[str, Any]
    settings: dict[str, Any]
    environment: dict[str, Any]
    baseline: RunSummary
    runs: list[SpecRunReport]
    sweep: SweepReport | None
    compare: CompareReport | None
    spec_config: dict[str, Any]
    serve_command: str
    serve_notes: list[str]
    plan: dict[str, Any] | None
    warnings: list[str]
    engine_starts: int
    seconds: float
    chat_template: str = ""
    files: dict[str, str] = field(default_factory=dict)
    baseline_run: Any = field(default=None, repr=False)  # EngineRun, for reuse; not serialized
    # step costs by concurrency, the fitted model and the per-batch-size k schedule
    concurrency: Any = None  # speckit.validate.concurrency.ConcurrencyReport
    # does speculation pay where it was measured? (speckit.core.specconfig.SpeculationVerdict)
    verdict: Any = None
    # AL per context bucket from the largest-k run's per-request counters
    # (speckit.core.context.ContextAcceptance), the draft's trained length (TrainedLength) and
    # the --traffic file in numbers (speckit.core.traffic.TrafficReport; never its text)
    acceptance_by_context: Any = None
    trained_length: Any = None
    traffic: Any = None
    # which copy already on this machine a Hub target or draft was read from (local first)
    copies: list[str] = field(default_factory=list)
    # the measured AL against the published one (speckit.core.registry.canary.AcceptanceCanary)
    canary: Any = None
    # runs an interrupted validate into the same --out had finished, kept instead of run again
    resumed: list[str] = field(default_factory=list)
    # the pair's pre-flight findings (core.preflight.Finding) by flag (--draft, --compare-draft);
    # an error among them means the run was started with --force-start
    preflight: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def recommended(self) -> bool:
        """Is spec_config what to serve? False when every measured ratio was below 1."""
        return self.verdict is None or bool(self.verdict.recommended)

    def run_at(self, k: int, *, role: str | None = None) -> SpecRunReport | None:
        for r in self.runs:
            if r.run.k == k and (role is None or r.run.role == role):
                return r
        return None

    @property
    def final(self) -> SpecRunReport:
        """The primary draft's run at the final k."""
        return self.run_at(self.k, role="confirm") or self.run_at(self.k, role="speculative") \
            or self.runs[0]

    def to_dict(self) -> dict[str, Any]:
        d = _jsonable(self)
        d["summary"] = {
            "acceptance_length": self.final.acceptance_length,
            "acceptance_rate": self.final.acceptance_rate,
            "per_position": self.final.per_position,
            "throughput_ratio": self.final.throughput_ratio,
            "lossless_status": self.final.lossless.status,
            "exact_match_share": self.final.lossless.exact_share,
            "token_match_rate": self.final.lossless.token_match_rate,
            "k": self.k,
            "speculation_pays": None if self.verdict is None else self.verdict.pays,
            "verdict_status": None if self.verdict is None else self.verdict.status,
            "throughput_ratio_interval": _jsonable(self.final.ratio_interval),
            "recommended": self.recommended,
            "verdict": None if self.verdict is None else self.verdict.summary,
        }
        if self.compare is not None:
            d["compare"]["al_drop"] = self.compare.al_drop
            d["compare"]["al_drop_pct"] = self.compare.al_drop_pct
            d["compare"]["per_position_drop"] = self.compare.per_position_drop
            d["compare"]["ratio_drop_pct"] = self.compare.ratio_drop_pct  # None: not timed
            d["compare"]["acceptance_only"] = self.compare.acceptance_only
        if self.sweep is not None and self.sweep.confirmation is not None:
            d["sweep"]["confirmation"]["al_error"] = self.sweep.confirmation.al_error
            d["sweep"]["confirmation"]["ratio_error"] = self.sweep.confirmation.ratio_error
        return d


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
               if f.name != "baseline_run"}
        if isinstance(obj, SpecCounters):
            out["acceptance_length"] = obj.acceptance_length
        return out
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float):
        return round(obj, 6)
    return obj


# ---- text renderings --------------------------------------------------------------------------

def _f(x: float | None, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _speed(s: SpecRunReport) -> str:
    """tokens/s, or why it is not shown (a run timed where its kernels are emulated)."""
    return "acceptance only" if s.acceptance_only else f"{s.run.tokens_per_s:.2f}"


def _ratio(s: SpecRunReport) -> str:
    """The ratio with its 95% interval over the paired prompts: "0.851 (0.80-0.90)"."""
    if s.acceptance_only:
        return "-"
    iv = s.ratio_interval
    return f"{s.throughput_ratio:.3f}" + ("" if iv is None else f" ({iv.lo:.2f}-{iv.hi:.2f})")


def _pos(xs: list[float]) -> str:
    return " / ".join(f"{x:.3f}" for x in xs)


# what drift means, in one terminal line; report.md and docs/validate.md say it whole
DRIFT_SHORT = "drift is engine arithmetic, not the draft: docs/validate.md, 'What it does'"


def lossless_lines(r: ValidationReport, *, short: bool = False) -> list[str]:
    """Under the table: where each drifting run left the baseline, and once what drift means
    (why a CPU shows it, and why it is not the draft's fault; ``short``: one line and where
    the whole explanation is)."""
    drifting = [s for s in r.runs if s.lossless.status == "drift"]
    lines = [f"{s.run.label}: {drift_counts(s.lossless)}" for s in drifting]
    if drifting:
        lines.append(DRIFT_SHORT if short else
                     drift_meaning(cpu=r.environment.get("platform") == "cpu"))
    if any(s.lossless.status == "n/a" for s in r.runs):
        lines.append("lossless n/a: temperature > 0, the outputs are samples; equality with the "
                     "baseline is not expected")
    return lines


def _thinking(value: Any) -> str:
    return "no switch in the chat template" if value is None else ("on" if value else "off")


def to_markdown(r: ValidationReport) -> str:
    lines = _md_header(r) + _md_verdict(r) + [f"- {x}" for x in canary_lines(r.canary)] + \
        _md_runs(r)
    lines += context.markdown(r.acceptance_by_context, r.trained_length, r.traffic,
                              Path(r.files["acceptance_by_context_png"]).name
                              if "acceptance_by_context_png" in r.files else None)
    if r.sweep is not None:
        lines += _md_sweep(r.sweep)
    if r.compare is not None:
        lines += _md_compare(r.compare)
    lines += _md_serve(r)
    lines += _md_preflight(r)
    if r.warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in r.warnings]
    if r.concurrency is not None:
        lines += ["", C.markdown(r.concurrency)]
    lines += ["", f"{r.engine_starts} engine starts, {r.seconds:.0f} s in all.", ""]
    return "\n".join(lines)


def _md_preflight(r: ValidationReport) -> list[str]:
    rows = [f"- {flag}: {finding_line(f)}" for flag, fs in r.preflight.items() for f in fs]
    return ["", "## Pre-flight", "", *rows] if rows else []


def _md_header(r: ValidationReport) -> list[str]:
    env, st, ds = r.environment, r.settings, r.dataset
    return [
        f"# speckit validate: {r.method} draft for `{r.target}`",
        "",
        f"- draft: `{r.draft or '(none: ' + r.method + ')'}`",
        (f"- vLLM {env.get('vllm_version')} on {env.get('device')} ({env.get('platform')}), "
        f"dtype {env.get('dtype')}, TP {st.get('tp')}"),
        (f"- prompts: {ds.get('name')} ({ds.get('prompts')} prompts, sha256 "
        f"`{str(ds.get('sha256'))[:16]}`), max tokens {st.get('max_tokens')}, temperature "
        f"{st.get('temperature')}, concurrency {st.get('concurrency')}"),
        (f"- chat template sha256 `{str(st.get('chat_template_sha256'))[:16]}`, thinking: "
        f"{_thinking(st.get('thinking'))}"),
    ] + [f"- {c}" for c in r.copies]


def _md_verdict(r: ValidationReport) -> list[str]:
    v = r.verdict
    if v is None:
        return []
    head = {"does not pay": "**Speculation does not pay here.**",
            "cannot tell": "**Cannot tell whether speculation pays here.**",
            "pays": "**Speculation pays here.**"}.get(v.status, "**Verdict:**")
    return ["", "## Verdict", "", f"{head} {_sentence(v.summary)}", ""] + [
        f"- {x}" for x in v.reasons] + _md_evidence(v)


def _md_evidence(v) -> list[str]:
    """Every ratio the verdict saw, with its 95% interval and how that was made."""
    if not v.measured:
        return []
    out = ["", "| evidence | k | concurrency | ratio (95% interval) | counts | interval |",
           "|---|---|---|---|---|---|"]
    for m in v.measured:
        iv = m.interval
        out.append(f"| {m.source} | {m.k} | {m.concurrency} | {shown(m.ratio, iv)} | "
                   f"{'decides' if m.decides else 'shown only'} | "
                   f"{iv.method if iv else '-'} |")
    return out


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _md_runs(r: ValidationReport) -> list[str]:
    lines = [
        "",
        "## Result",
        "",
        "| run | k | AL | acceptance rate | per position | tokens/s | ratio | lossless |",
        "|---|---|---|---|---|---|---|---|",
        f"| baseline | - | - | - | - | {r.baseline.tokens_per_s:.2f} | 1.000 | - |",
    ]
    for s in r.runs:
        lines.append(
            f"| {s.run.label} | {s.run.k} | {s.acceptance_length:.3f}"
            f"{' ± ' + format(s.al_stderr, '.3f') if s.al_stderr is not None else ''} | "
            f"{_pct(s.acceptance_rate)} | {_pos(s.per_position)} | {_speed(s)} | "
            f"{_ratio(s)} | {lossless_cell(s.lossless)} |")
    said = lossless_lines(r)
    return lines + (["", "Lossless (greedy outputs against the baseline's, token for token):", ""]
                    + [f"- {x}" for x in said] if said else [])


def _md_sweep(sw: SweepReport) -> list[str]:
    c = sw.costs
    lines = ["", f"## k sweep (measured at k={sw.k_measured}, derived below it)", "",
             (f"- target step {c.target_step_s * 1e3:.2f} ms; verification step "
             f"{c.verify_step_s(sw.k_measured) * 1e3:.2f} ms at {sw.k_measured + 1} tokens "
             f"(+{c.verify_slope_s * 1e3:.2f} ms per token); draft "
             f"{'forward' if c.parallel else 'step'} {c.draft_step_s * 1e3:.2f} ms; "
             f"speculative step {c.spec_step_s * 1e3:.2f} ms; "
             f"{_pct(c.draft_fraction)} of steps carried a draft"),
             "", "| k | AL (derived) | step ms | predicted ratio | calibrated ratio |",
             "|---|---|---|---|---|"]
    cal = {p.k: p for p in sw.calibrated}
    for p in sw.predictions:
        star = " **recommended**" if p.k == sw.recommended_k else ""
        cal_ratio = f"{cal[p.k].throughput_ratio:.3f}" if p.k in cal else "-"
        lines.append(f"| {p.k}{star} | {p.acceptance_length:.3f} | "
                     f"{p.spec_step_s * 1e3:.2f} | {p.throughput_ratio:.3f} | {cal_ratio} |")
    if sw.confirmation is not None:
        cf = sw.confirmation
        lines += ["", (f"Confirmed at k={cf.k}: AL predicted {cf.predicted_al:.3f} vs "
                  f"measured {cf.measured_al:.3f} ({100 * cf.al_error:+.1f}%), throughput "
                  f"ratio predicted {cf.predicted_ratio:.3f} vs measured "
                  f"{cf.measured_ratio:.3f} ({100 * cf.ratio_error:+.1f}%).")]
    lines += [f"- {n}" for n in sw.notes + c.notes
              + (sw.calibrated_costs.notes if sw.calibrated_costs else [])]
    return lines


def _md_compare(cp: CompareReport) -> list[str]:
    timed = not cp.acceptance_only
    lines = ["", f"## Draft comparison at k={cp.k}", "",
             "| draft | AL | per position |" + (" tokens/s | ratio |" if timed else ""),
             "|---|---|---|" + ("---|---|" if timed else "")]
    for name, s in ((cp.primary_draft, cp.primary), (cp.other_draft, cp.other)):
        lines.append(f"| `{name}` | {s.acceptance_length:.3f} | {_pos(s.per_position)} |"
                     + (f" {_speed(s)} | {_ratio(s)} |" if timed else ""))
    drop = (f"throughput ratio drop {cp.ratio_drop_pct:+.1f}%" if timed else
            f"throughput not compared: acceptance only, on the {len(cp.other.per_prompt_al)} "
            "prompts both drafts ran (the warnings say why)")
    lines += ["", (f"AL drop {cp.al_drop:+.3f} ({cp.al_drop_pct:+.1f}%), per position "
              f"{_pos(cp.per_position_drop)}, {drop}.")]
    return lines


def _md_serve(r: ValidationReport) -> list[str]:
    label = ("`--speculative-config`:" if r.recommended else
             "`--speculative-config` as measured (**not recommended**: it did not pay here):")
    lines = ["", "## Serve it", "", "```sh", r.serve_command, "```", "", label, "", "```json",
             json.dumps(r.spec_config, indent=2), "```"]
    return lines + [f"- {n}" for n in r.serve_notes]


def write_plots(r: ValidationReport, out: Path) -> dict[str, str]:
    """acceptance-per-position.png and k-sweep.png; empty when matplotlib is missing."""
    plt = pyplot(r.warnings)
    if plt is None:
        return {}
    files: dict[str, str] = {}
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    width = 0.8 / max(1, len(r.runs))
    for i, s in enumerate(r.runs):
        xs = [j + 1 + (i - (len(r.runs) - 1) / 2) * width for j in range(len(s.per_position))]
        ax.bar(xs, s.per_position, width=width,
               label=f"{s.run.label} (AL {s.acceptance_length:.2f})")
    positions = max((len(s.per_position) for s in r.runs), default=1)
    ax.set_xticks(range(1, positions + 1))
    ax.set_xlabel("draft position")
    ax.set_ylabel("share of steps accepted up to here")
    ax.set_ylim(0, 1.25)  # headroom for the legend above the bars
    ax.set_title("Acceptance per position")
    ax.legend(fontsize=8, loc="upper right", ncol=2)
    p = out / "acceptance-per-position.png"
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    files["acceptance_per_position_png"] = str(p)
    if r.sweep is not None:
        fig = k_sweep_figure(r, plt)
        p = out / "k-sweep.png"
        fig.tight_layout()
        fig.savefig(p, dpi=110)
        plt.close(fig)
        files["k_sweep_png"] = str(p)
    if r.concurrency is not None:
        files["ratio_by_concurrency_png"] = C.plot(r.concurrency, out, plt)
    ctx = r.acceptance_by_context
    if ctx is not None and write_context_plot(
            ctx, out / context.PLOT, trained=r.trained_length,
            title=f"acceptance length by context, k={ctx.k} (95% interval per bucket)"):
        files["acceptance_by_context_png"] = str(out / context.PLOT)
    return files


def k_sweep_figure(r: ValidationReport, plt):
    """AL by k on the left axis, throughput ratio by k on the right one (its break-even line
    1.0 drawn on that axis), the measured runs marked on each; every series in the legend, named
    with its axis."""
    sw = r.sweep
    fig, ax1 = plt.subplots(figsize=(6.4, 4.0))
    ks = [p.k for p in sw.predictions]
    ax1.plot(ks, [p.acceptance_length for p in sw.predictions], "o-",
             label="AL, derived (left axis)")
    ax1.set_xlabel("k (num_speculative_tokens)")
    ax1.set_ylabel("mean acceptance length")
    ax2 = ax1.twinx()
    ax2.plot(ks, [p.throughput_ratio for p in sw.predictions], "s--", color="tab:orange",
             label="throughput ratio, predicted (right axis)")
    if sw.calibrated:
        ax2.plot(ks, [p.throughput_ratio for p in sw.calibrated], "^:", color="tab:green",
                 label="throughput ratio, calibrated after confirmation (right axis)")
    ax2.axhline(1.0, color="grey", lw=0.8, ls="-", label="ratio 1.0: break-even (right axis)")
    timed = [s for s in r.runs if s.run.role in ("speculative", "confirm")
             and s.run.k is not None and not s.acceptance_only]
    if timed:
        ax1.plot([s.run.k for s in timed], [s.acceptance_length for s in timed], "k*", ms=10,
                 ls="none", label="AL, measured (left axis)")
        ax2.plot([s.run.k for s in timed], [s.throughput_ratio for s in timed], "rx", ms=9,
                 ls="none", label="throughput ratio, measured (right axis)")
    lo, hi = ax2.get_ylim()
    ax2.set_ylim(min(lo, 0.95), max(hi, 1.05))  # the break-even line always inside the axis
    ax1.set_xticks(ks)
    ax2.set_ylabel("throughput ratio vs baseline")
    ax1.set_title(f"k sweep (recommended k={sw.recommended_k})")
    h1, l1 = ax1.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax1.legend(h1 + h2, l1 + l2, fontsize=7, loc="best")
    return fig


def print_report(r: ValidationReport, *, console=None, fit: bool = False) -> None:
    """A rich table for the terminal. ``fit``: tables squeezed into the console's width (cells
    folded; off a TTY they otherwise keep their natural width) and the serve line broken over
    lines that paste back (the demo's 100 columns)."""
    from rich.markup import escape
    from rich.table import Table


    console = console or output_console()
    env, st = r.environment, r.settings
    console.print(f"[bold]{r.method}[/] draft [cyan]{r.draft or '-'}[/] on target "
                  f"[cyan]{r.target}[/]")
    console.print(f"vLLM {env.get('vllm_version')} · {env.get('device')} · {env.get('dtype')} · "
                  f"{r.dataset.get('name')} x{r.dataset.get('prompts')} · max_tokens "
                  f"{st.get('max_tokens')} · T={st.get('temperature')} · thinking "
                  f"{_thinking(st.get('thinking'))}")
    for c in r.copies:
        console.print(f"read from: {c}", markup=False, highlight=False)
    t = Table(title="acceptance and speed")
    for col in ("run", "k", "AL", "accept rate", "per position", "tok/s", "ratio", "lossless"):
        t.add_column(col, justify="right" if col not in ("run", "lossless") else "left",
                     no_wrap=col == "run")  # a run name stays whole when squeezed
    t.add_row("baseline", "-", "-", "-", "-", f"{r.baseline.tokens_per_s:.2f}", "1.000", "-")
    for s in r.runs:
        t.add_row(s.run.label, str(s.run.k), f"{s.acceptance_length:.3f}", _pct(s.acceptance_rate),
                  _pos(s.per_position), _speed(s), _ratio(s), lossless_cell(s.lossless))
    _table(console, t, fit)
    for line in lossless_lines(r, short=True):
        console.print(f"lossless: {line}", markup=False, highlight=False)
    if r.sweep is not None:
        sw = r.sweep
        t2 = Table(title=f"k sweep (measured at k={sw.k_measured})")
        for col in ("k", "AL (derived)", "step ms", "predicted ratio", "calibrated"):
            t2.add_column(col, justify="right")
        cal = {p.k: p for p in sw.calibrated}
        for p in sw.predictions:
            mark = " ←" if p.k == sw.recommended_k else ""
            t2.add_row(f"{p.k}{mark}", f"{p.acceptance_length:.3f}", f"{p.spec_step_s * 1e3:.1f}",
                       f"{p.throughput_ratio:.3f}",
                       f"{cal[p.k].throughput_ratio:.3f}" if p.k in cal else "-")
        _table(console, t2, fit)
        if sw.confirmation is not None:
            cf = sw.confirmation
            console.print(f"confirmed k={cf.k}: AL predicted {cf.predicted_al:.3f} / measured "
                          f"{cf.measured_al:.3f}; ratio predicted {cf.predicted_ratio:.3f} / "
                          f"measured {cf.measured_ratio:.3f}")
        for n in sw.notes:
            console.print(f"note: {n}")
    if r.compare is not None:
        cp = r.compare
        speed = ("throughput not compared (acceptance only)" if cp.acceptance_only else
                 f"ratio {cp.primary.throughput_ratio:.3f} -> {cp.other.throughput_ratio:.3f}")
        console.print(f"compare at k={cp.k}: AL {cp.primary.acceptance_length:.3f} -> "
                      f"{cp.other.acceptance_length:.3f} (drop {cp.al_drop_pct:+.1f}%), {speed}")
    if r.concurrency is not None:
        for line in C.summary_lines(r.concurrency):
            console.print(line)
    _print_context(r, console, fit)
    for flag, fs in r.preflight.items():
        for f in fs:
            console.print(f"[{'red' if f.is_error else 'yellow'}]pre-flight {flag}:[/] "
                          f"{escape(finding_line(f))}")
    for w in r.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    _print_verdict(r, console)
    console.print("[bold]serve:[/]" if r.recommended else
                  "[bold]serve (the target alone, no --speculative-config):[/]")
    for line in shell_lines(r.serve_command, console.width) if fit else [r.serve_command]:
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    if r.files:
        console.print(f"files in {Path(next(iter(r.files.values()))).parent}")
    for line in canary_lines(r.canary):  # last: a collapse is the final word
        console.print(line, markup=False, highlight=False)


def _table(console, table, fit: bool) -> None:
    if fit:
        console.print(unclipped(table))
    else:
        print_table(console, table)


def _print_context(r: ValidationReport, console, fit: bool = False) -> None:
    """The traffic in numbers and the AL-by-context table (numbers and the user's labels)."""
    from rich.table import Table

    if r.traffic is not None:
        print_rows(console, traffic_rows(r.traffic))
    ctx = r.acceptance_by_context
    if ctx is None:
        return
    cells = context_table(ctx)
    t = Table(title=f"acceptance by context ({ctx.source}, k={ctx.k})")
    for i, col in enumerate(cells[0]):
        t.add_column(col, justify="right" if 0 < i < 4 else "left")
    for row in cells[1:]:
        if row[1] != "0":
            t.add_row(*row)
    _table(console, t, fit)
    console.print(f"interval: {ctx.interval_method}", markup=False, highlight=False)
    if r.trained_length is not None:
        print_rows(console, trained_rows(r.trained_length))


def shell_lines(command: str, width: int = 100, *, indent: str = "") -> list[str]:
    """A shell command over lines of at most ``width`` that paste back as the same command:
    words joined with `` \\`` continuations; a JSON argument too long for one line is broken
    at its commas inside its quotes (a newline there is JSON whitespace)."""
    words = [shlex.quote(w) for w in shlex.split(command)]
    lines: list[str] = []
    cur = indent
    for w in words:
        if cur.strip() and len(cur) + 1 + len(w) + 2 > width:
            lines.append(cur + " \\")
            cur = indent + "    "
        if len(cur) + len(w) > width and w.startswith("'{"):
            parts = _json_parts(w, width - len(cur))
            lines += [cur + parts[0], *(indent + "      " + p for p in parts[1:-1])]
            cur = indent + "      " + parts[-1]
            continue
        cur = cur + (" " if cur.strip() else "") + w
    return [*lines, cur]


def _json_parts(word: str, room: int) -> list[str]:
    """'{...}' cut after commas into pieces of about ``room`` columns (the quotes kept)."""
    text = json.dumps(json.loads(word[1:-1]), separators=(", ", ": "))
    pieces = textwrap.wrap(text, max(room - 2, 40), break_long_words=False,
                           break_on_hyphens=False)
    pieces[0], pieces[-1] = "'" + pieces[0], pieces[-1] + "'"
    return pieces


def _print_verdict(r: ValidationReport, console) -> None:
    from rich.markup import escape

    v = r.verdict
    if v is None:
        return
    style = {"does not pay": "bold red", "cannot tell": "bold yellow"}.get(v.status, "bold")
    console.print(f"[{style}]verdict:[/] {escape(v.summary)}")
    for x in v.reasons:
        console.print(f"  - {escape(x)}")
    for m in v.measured:
        console.print(f"  {'*' if m.decides else ' '} {escape(m.source)} k={m.k} concurrency "
                      f"{m.concurrency}: {shown(m.ratio, m.interval)}")
    if v.measured:
        console.print("  (* decides; 95% intervals: end-to-end runs over their paired prompts, "
                      "the fit by its error, probes over their rounds)")
    if not r.recommended:
        console.print("spec-config: not recommended (written as "
                      "spec-config.not-recommended.json with --out)")
