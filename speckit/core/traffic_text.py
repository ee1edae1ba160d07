"""The text rows (label, text) that show a traffic summary, a draft's vocabulary coverage of it,
its trained length and the acceptance by context: one wording for the terminal (inspect, validate,
bench, plan) and report.md.

Pure formatting over speckit.core's results; numbers and the user's own labels only, never a
prompt's text.
"""

from __future__ import annotations

from typing import Any

Rows = list[tuple[str, str]]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _dist(d: Any) -> str:
    return f"median {d.p50:g}, p90 {d.p90:g}, max {d.max}"


def _counts(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "-"


def summary_rows(s: Any) -> Rows:
    """(label, text) rows of a speckit.core.traffic.TrafficSummary."""
    rows = [("requests", f"{s.requests} used, {s.skipped} skipped")]
    rows.append(("prompts", f"{_dist(s.prompt_length)} {s.unit}; {s.length_note}"))
    if s.reply_length is not None:
        rows.append(("replies", f"{s.with_reply} rows: {_dist(s.reply_length)} {s.unit}"))
    else:
        rows.append(("replies", "none in the traffic"))
    cats = _counts(s.categories) + (f"; unlabelled {s.unlabelled}" if s.unlabelled else "")
    rows.append(("categories", cats))
    if s.languages:
        rows.append(("languages", _counts(s.languages)))
    rows.append(("sampling", f"temperature {_counts(s.temperature)} · thinking "
                             f"{_counts(s.thinking)}"))
    if s.context_mix is not None:
        rows.append(("context", " · ".join(f"{b.bucket} {b.requests} ({_pct(b.share)})"
                                           for b in s.context_mix)))
    return rows


def coverage_rows(c: Any) -> Rows:
    """(label, text) rows of a speckit.core.coverage.VocabCoverage."""
    if not c.reduced:
        return [("coverage", "full vocabulary: the draft can propose every target token")]
    side = "reply" if c.side == "responses" else "prompt"
    head = (f"{_pct(c.share)} of {c.tokens:,} {side} tokens can be proposed "
            f"(draft vocabulary {c.draft_vocab:,} of {c.target_vocab:,} target ids; "
            f"{c.distinct_uncovered:,} of {c.distinct_tokens:,} distinct tokens are not in it)")
    rows = [("coverage", head), ("counted", f"{c.side_note} ({c.rows_counted} of "
                                            f"{c.rows_total} rows)")]
    for label, groups in (("by category", c.by_category), ("by language", c.by_language),
                          ("by script", c.by_script)):
        if groups:
            rows.append((label, ", ".join(f"{g.name} {_pct(g.share)} ({g.tokens:,} tokens)"
                                          for g in groups)))
    if not c.by_language:
        rows.append(("by language", "no row labels its language (\"language\"); the scripts "
                                    "above are read from the text, a script is not a language"))
    return rows


def trained_rows(t: Any) -> Rows:
    """(label, text) rows of a speckit.core.context.TrainedLength."""
    if t.tokens is None:
        return [("trained on", f"unknown ({t.source})")]
    text = f"{t.tokens:,} tokens, {t.kind}: {t.source}"
    if t.details:
        text += "; " + "; ".join(t.details)
    return [("trained on", text)]


def traffic_rows(t: Any) -> Rows:
    """(label, text) rows of a speckit.core.traffic.TrafficReport: the file, the summary, the
    coverage when measured, the mix's weights, the first skipped rows and the notes."""
    rows = [("traffic", f"{t.file} (sha256 {t.sha256[:12]})")]
    rows += summary_rows(t.summary)
    if t.coverage is not None:
        rows += coverage_rows(t.coverage)
    if t.weights:
        rows.append(("speed mix", " · ".join(f"{b} {_pct(w)} at KV ~{t.contexts.get(b, 0):,}"
                                            for b, w in t.weights.items())))
    rows += [("skipped", why) for why in t.skipped[:5]]
    rows += [("note", n) for n in t.notes]
    return rows


__all__ = ["Rows", "coverage_rows", "summary_rows", "traffic_rows", "trained_rows"]
