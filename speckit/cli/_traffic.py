"""The rows that show a traffic summary, a vocabulary coverage and a draft's trained length
(inspect today; validate, bench and plan when they take --traffic, a flag of the option table).

Labels come from the user's file: they are printed as text, never as rich markup.
"""

from __future__ import annotations

from typing import Any

from speckit.io.terminal import print_table


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _dist(d: Any) -> str:
    return f"median {d.p50:g}, p90 {d.p90:g}, max {d.max}"


def _counts(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "-"


def summary_rows(s: Any) -> list[tuple[str, str]]:
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


def coverage_rows(c: Any) -> list[tuple[str, str]]:
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


def trained_rows(t: Any) -> list[tuple[str, str]]:
    """(label, text) rows of a speckit.core.context.TrainedLength."""
    if t.tokens is None:
        return [("trained on", f"unknown ({t.source})")]
    text = f"{t.tokens:,} tokens, {t.kind}: {t.source}"
    if t.details:
        text += "; " + "; ".join(t.details)
    return [("trained on", text)]


def print_rows(console, rows: list[tuple[str, str]]) -> None:
    """Two columns, the text as plain text (user labels are never markup)."""
    from rich.table import Table
    from rich.text import Text

    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    for label, text in rows:
        t.add_row(label, Text(text))
    print_table(console, t)


__all__ = ["coverage_rows", "print_rows", "summary_rows", "trained_rows"]
