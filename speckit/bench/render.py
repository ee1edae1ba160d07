"""report.md, the plots and the deployable files of a bench report."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

from speckit.bench.report import BenchReport, SummaryRow
from speckit.bench.stats import LATENCY_METRICS, Spread
from speckit.core.context import context_table
from speckit.core.evidence import CANNOT_TELL, DOES_NOT_PAY, Interval
from speckit.core.jsonable import to_jsonable
from speckit.core.specconfig import SERVE_COMMAND_FILE, serve_script
from speckit.core.traffic_text import traffic_rows, trained_rows
from speckit.io.context_plot import write_context_plot
from speckit.io.output import write_provenance
from speckit.io.plots import pyplot
from speckit.io.preflight import finding_line

CONTEXT_PLOT = "acceptance-by-context.png"


def write_files(report: BenchReport, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rec = report.recommended
    if rec and rec in report.spec_configs:
        (out / "spec-config.json").write_text(json.dumps(report.spec_configs[rec], indent=2)
                                              + "\n")
        report.files["spec_config"] = "spec-config.json"
    line_arm = _serve_arm(report)
    if line_arm is not None:  # validate's file name and header; not made executable
        line = " ".join(shlex.quote(a) for a in report.serve_lines[line_arm])
        said = [] if line_arm == report.recommended else [
            "the target alone: speculation did not pay, or could not be told to, here"]
        (out / SERVE_COMMAND_FILE).write_text(serve_script(line, by="bench", comments=said))
        report.files["serve_command"] = SERVE_COMMAND_FILE
    report.files.update(write_plots(report, out))
    # the marker that lets a later `bench --force` replace this directory
    report.files["provenance"] = write_provenance(
        out, {"target": report.target, "draft": report.draft, "platform": report.platform},
        command="bench")
    report.files["report_md"] = "report.md"
    report.files["report_json"] = "report.json"
    (out / "report.md").write_text(markdown(report))
    (out / "report.json").write_text(json.dumps(to_jsonable(report), indent=2) + "\n")


def _serve_arm(r: BenchReport) -> str | None:
    """The arm whose serve line is written: the recommended one; the baseline (the target
    alone) when speculation was measured and did not pay, or could not be told to."""
    if r.recommended and r.recommended in r.serve_lines:
        return r.recommended
    v = r.verdict
    if v is not None and v.status in (DOES_NOT_PAY, CANNOT_TELL) and "baseline" in r.serve_lines:
        return "baseline"
    return None


def _ri(s: Spread | None, iv: Interval | None) -> str:
    """A ratio with its 95% interval over seeds, "1.49 (1.40-1.58)"; "1.49 (1 seed)"."""
    if s is None:
        return "-"
    if iv is None:
        return f"{s.mean:.2f} ({s.n} seed{'s' if s.n != 1 else ''}, no interval)"
    return f"{s.mean:.2f} ({iv.lo:.2f}-{iv.hi:.2f})"


def _sp(s: Spread | None, fmt: str = "{:.1f}") -> str:
    if s is None:
        return "-"
    return fmt.format(s.mean) + (f" ± {fmt.format(s.sd)}" if s.n > 1 else "")


def _ms(d: dict, key: str) -> str:
    v = d.get(key)
    return "-" if v is None else f"{v:.1f}"


def _f(v, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def summary_table(rows: Sequence[SummaryRow]) -> list[str]:
    lat = [f"{m.label} {'/'.join(m.shown)} ms" for m in LATENCY_METRICS]
    out = ["| load | T | thinking | arm | tok/s | per GPU | ratio (95%) | " + " | ".join(lat)
           + " | AL | k drafted | per position |", "|---" * (10 + len(lat)) + "|"]
    for r in sorted(rows, key=lambda r: (r.temperature, r.thinking, r.concurrency or 0,
                                         r.rate or 0, r.kind != "baseline", r.arm)):
        pos = ", ".join(f"{p:.2f}" for p in r.per_position) or "-"
        out.append(
            f"| {r.load} | {r.temperature:g} | {'on' if r.thinking else 'off'} | {r.arm} | "
            f"{_sp(r.output_tok_s)} | {r.per_gpu_tok_s:.1f} | "
            f"{'1.00' if r.kind == 'baseline' else _ri(r.ratio, r.ratio_interval)} | "
            + " | ".join(" / ".join(_ms(r.latency_ms.get(m.name) or {}, q) for q in m.shown)
                         for m in LATENCY_METRICS)
            + f" | {_f(r.acceptance_length)} | {_f(r.k_drafted)} | {pos} |")
    return out


def markdown(r: BenchReport) -> str:
    o = r.options
    lines = [f"# speckit bench: {r.target or o.get('endpoint')}", "",
             f"- mode: {r.mode}; platform: {r.platform or 'unknown'}",
             f"- draft: {r.draft or '-'} ({r.method or 'from the server'})",
             f"- prompts: {o.get('dataset')}, {o.get('prompts_per_concurrency')} x concurrency "
             f"per cell, {o.get('warmups_per_concurrency')} x concurrency warm-ups, max tokens "
             f"{o.get('output_len') or o.get('max_tokens')}, seeds {o.get('seeds')}", "",
             *_verdict_lines(r),
             "## Measured cells (tok/s: mean ± sd over seeds; ratio: mean with its 95% "
             "interval)", "", *summary_table(r.summary), ""]
    lines += _k_lines(r)
    lines += _choice_lines(r)
    lines += _context_lines(r)
    if r.measured_schedule:
        lines += ["", f"Measured schedule (batch lo, hi, k): `{r.measured_schedule}`"]
    arm = _serve_arm(r)
    if arm is not None:
        what = arm if arm == r.recommended else "the target alone, no --speculative-config"
        lines += ["", f"## Serve ({what})", "", "```sh",
                  " ".join(shlex.quote(a) for a in r.serve_lines.get(arm, [])), "```"]
    bad = [c for c in r.cells if c.error or c.problems]
    if bad:
        lines += ["", "## Cells with errors or counter problems", ""]
        lines += [f"- {c.arm} {c.load.label} seed {c.seed}: {c.error or ''} "
                  f"{'; '.join(c.problems)}" for c in bad]
    if r.preflight:
        lines += ["", "## Pre-flight", ""] + [f"- {finding_line(f)}" for f in r.preflight]
    if r.warnings or r.error or r.skipped:
        lines += ["", "## Notes", ""] + [f"- {w}" for w in r.warnings]
        lines += [f"- {arm} not measured: {why}" for arm, why in r.skipped.items()]
        if r.error:
            lines.append(f"- **stopped early**: {r.error}")
    return "\n".join(lines) + "\n"


def _verdict_lines(r: BenchReport) -> list[str]:
    v = r.verdict
    if v is None:
        return []
    out = ["## Verdict", "", f"**{v.summary[:1].upper() + v.summary[1:]}.**", ""]
    out += [f"- {x}" for x in v.reasons]
    iv = next((m.interval for m in v.measured if m.interval is not None), None)
    out += ["", f"Intervals: {iv.method}." if iv else "Intervals: none (one seed per cell).",
            "Speculation is recommended only when a ratio's interval lies above 1.", ""]
    return out


def _k_lines(r: BenchReport) -> list[str]:
    if not r.k_choices:
        return []
    p = r.projection
    head = f"projected ({p['gpu']} x TP={p['tp']})" if p else "projected (pass --gpu)"
    out = ["## k per concurrency: measured vs projected", "",
           f"| concurrency | k to use (measured) | its ratio (95%) | verdict | {head} k | "
           "projected ratio | schedule ratio |", "|---|---|---|---|---|---|---|"]
    for ch in r.k_choices:
        k = _f(ch.measured_k, '{}')
        if ch.measured_k == 0 and ch.best_k:
            k += f" (fastest: k={ch.best_k})"
        out.append(f"| {ch.concurrency} | {k} | {_ri(ch.measured_ratio, ch.interval)} | "
                   f"{ch.status or '-'} | {_f(ch.projected_k, '{}')} | "
                   f"{_f(ch.projected_ratio)} | "
                   f"{_ri(ch.schedule_ratio, ch.schedule_interval) if ch.schedule_ratio else '-'}"
                   " |")
    return out


def _context_lines(r: BenchReport) -> list[str]:
    """The traffic in numbers and each arm's AL by context (counts and labels, no text)."""
    out: list[str] = []
    if r.traffic is not None:
        out += ["", "## Traffic", ""] + [f"- {label}: {text}"
                                         for label, text in traffic_rows(r.traffic)]
    if not r.acceptance_by_context:
        return out
    first = next(iter(r.acceptance_by_context.values()))
    out += ["", "## Acceptance by context", "",
            f"AL per context bucket from the acceptance summary vLLM returns with each response "
            f"(context: usage.prompt_tokens, the prompt as the server tokenized it). Interval: "
            f"{first.interval_method}; a bucket needs at least {first.min_requests} requests."]
    for arm, ctx in r.acceptance_by_context.items():
        rows = context_table(ctx)
        out += ["", f"{arm} ({ctx.source}):", "", "| " + " | ".join(rows[0]) + " |",
                "|" + "---|" * len(rows[0])]
        out += ["| " + " | ".join(row) + " |" for row in rows[1:] if row[1] != "0"]
    if r.trained_length is not None:
        out += [""] + [f"- {label}: {text}" for label, text in trained_rows(r.trained_length)]
    if "acceptance_by_context_png" in r.files:
        out += ["", f"![AL by context]({r.files['acceptance_by_context_png']})"]
    return out


def _choice_lines(r: BenchReport) -> list[str]:
    if not r.method_choice:
        return []
    out = ["", "## Which method for this workload", "", f"**{r.advice}**", "",
           "| load | use | best arm of each method: tok/s (ratio, AL) |", "|---|---|---|"]
    for ch in r.method_choice:
        each = "; ".join(f"{m.arm}: {_sp(m.tok_s)} ("
                         f"{'1.00' if m.method == 'none' else _ri(m.ratio, m.ratio_interval)}, "
                         f"AL {_f(m.acceptance_length)})" for m in ch.methods)
        out.append(f"| {ch.load} | {ch.use_arm if ch.use != 'none' else 'no speculation'} | "
                   f"{each} |")
    return out


def write_plots(r: BenchReport, out: Path) -> dict[str, str]:
    """ratio and TPOT vs concurrency, acceptance per position; none without matplotlib."""
    plt = pyplot(r.warnings)
    if plt is None:
        return {}
    rows = [s for s in r.summary if s.concurrency is not None]
    files = {}
    for name, ylabel, get in (("ratio-vs-concurrency.png", "tok/s ratio to baseline",
                               lambda s: s.ratio.mean if s.ratio else None),
                              ("tpot-vs-concurrency.png", "TPOT p50 (ms)",
                               lambda s: s.latency_ms["tpot"].get("p50"))):
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for arm in sorted({s.arm for s in rows}):
            pts = sorted((s.concurrency, get(s)) for s in rows if s.arm == arm
                         and s.temperature == rows[0].temperature and get(s) is not None)
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", label=arm)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        if ax.lines:
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        files[name.split(".")[0]] = name
    files.update(_acceptance_plot(r, out, plt))
    if r.acceptance_by_context:  # the arm with the most requests counted
        arm, ctx = max(r.acceptance_by_context.items(),
                       key=lambda kv: sum(b.requests for b in kv[1].buckets))
        if write_context_plot(ctx, out / CONTEXT_PLOT, trained=r.trained_length,
                              title=f"AL by context, {arm} (95% interval per bucket)"):
            files["acceptance_by_context_png"] = CONTEXT_PLOT
    return files


def _acceptance_plot(r: BenchReport, out: Path, plt) -> dict[str, str]:
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    seen = set()
    for s in r.summary:
        if s.per_position and (s.arm, s.temperature) not in seen:
            seen.add((s.arm, s.temperature))
            ax.plot(range(1, len(s.per_position) + 1), s.per_position, "o-",
                    label=f"{s.arm} T={s.temperature:g} {s.load}")
    if not seen:
        plt.close(fig)
        return {}
    ax.set_xlabel("draft position")
    ax.set_ylabel("share of drafts accepted up to here")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "acceptance-per-position.png", dpi=110)
    plt.close(fig)
    return {"acceptance_per_position": "acceptance-per-position.png"}
