"""A validate report's acceptance by context read back (plan --acceptance-from REPORT): the
per-position acceptance rates of each context bucket it measured, checked field by field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core.refs import printable
from speckit.core.traffic import CONTEXT_BUCKETS
from speckit.errors import FormatError, UsageError

HINT = ("pass the report.json `speckit validate --out DIR` writes (with --traffic FILE or "
        "--dataset longctx its acceptance_by_context spans the context buckets), or give "
        "--acceptance P1,P2,... for every bucket alike")


@dataclass
class RecordedAcceptance:
    """Per-position acceptance rates by context bucket, as a validate report recorded them."""

    per_position: dict[str, list[float]]  # bucket -> rates (share of drafts with position i)
    source: str  # the file, the run and the k they were measured at
    notes: list[str] = field(default_factory=list)  # buckets under the minimum request count


def read_acceptance_by_context(path: str | Path) -> RecordedAcceptance:
    """The ``acceptance_by_context`` of the validate report at ``path``; UsageError when there is
    no such file, FormatError naming the field when it is not one validate writes."""
    p, data = _read_report(path)
    abc = data.get("acceptance_by_context") if isinstance(data, dict) else None
    if not isinstance(abc, dict):
        raise FormatError(f"{p}: no 'acceptance_by_context' object (field "
                          "acceptance_by_context)", hint=HINT)
    buckets = abc.get("buckets")
    if not isinstance(buckets, list):
        raise FormatError(f"{p}: acceptance_by_context.buckets is not a list", hint=HINT)
    out, notes = {}, []
    for i, b in enumerate(buckets):
        label, rates = _bucket(p, i, b)
        if rates:
            out[label] = rates
            if b.get("enough") is False:
                notes.append(f"{label}: measured on {_count(b.get('requests'))} request(s), "
                             f"under the {_count(abc.get('min_requests', 4))} a figure needs")
    if not out:
        raise FormatError(f"{p}: no context bucket in acceptance_by_context.buckets drafted "
                          "(every per_position is empty)", hint=HINT)
    k = _count(abc.get("k"), default=None)
    run = printable(abc.get("source") or "validate")  # the file's text, shown on the terminal
    return RecordedAcceptance(out, f"{p} ({run}" + (f", k={k}" if k else "") + ")", notes)


def _count(value: Any, default: Any = "?") -> Any:
    """A count the report records, or ``default`` when it is not a non-negative int (the file's
    other values never reach the terminal)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else default


def _bucket(p: Path, i: int, b: Any) -> tuple[str, list[float]]:
    where = f"acceptance_by_context.buckets[{i}]"
    if not isinstance(b, dict):
        raise FormatError(f"{p}: {where} is not an object", hint=HINT)
    label = b.get("bucket")
    known = [c.label for c in CONTEXT_BUCKETS]
    if label not in known:
        raise FormatError(f"{p}: {where}.bucket is {label!r}, not one of {', '.join(known)}",
                          hint=HINT)
    rates = b.get("per_position")
    if not isinstance(rates, list) or not all(
            isinstance(r, (int, float)) and not isinstance(r, bool) and 0.0 <= r <= 1.0
            for r in rates):
        raise FormatError(f"{p}: {where}.per_position must be a list of rates in [0, 1]",
                          hint=HINT)
    for j in range(1, len(rates)):
        if rates[j] > rates[j - 1] + 1e-9:
            raise FormatError(f"{p}: {where}.per_position[{j}] ({rates[j]}) exceeds the rate "
                              f"before it ({rates[j - 1]}); per-position rates never rise",
                              hint=HINT)
    return label, [float(r) for r in rates]


@dataclass
class ReportAcceptance:
    """A validate report's overall per-position acceptance (its summary, at its final k)."""

    per_position: list[float]
    source: str


def read_acceptance(path: str | Path) -> ReportAcceptance:
    """``summary.per_position`` of the validate report at ``path`` (plan --acceptance-from
    without --traffic): UsageError when there is no such file, FormatError naming the field."""
    p, data = _read_report(path)
    summary = data.get("summary") if isinstance(data, dict) else None
    rates = summary.get("per_position") if isinstance(summary, dict) else None
    if not isinstance(rates, list) or not rates or not all(
            isinstance(r, (int, float)) and not isinstance(r, bool) and 0.0 <= r <= 1.0
            for r in rates):
        raise FormatError(f"{p}: summary.per_position is not a non-empty list of rates in "
                          "[0, 1] (field summary.per_position)", hint=HINT)
    k = _count(summary.get("k"), default=None)
    return ReportAcceptance([float(r) for r in rates],
                            f"{p} (validate summary" + (f", k={k}" if k else "") + ")")


def _read_report(path: str | Path) -> tuple[Path, Any]:
    """The report file at ``path`` and its parsed JSON (UsageError: no such file; FormatError:
    not JSON)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise UsageError(f"--acceptance-from {path}: no such file", hint=HINT)
    try:
        return p, json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"{p}: not a JSON report ({e})", hint=HINT) from e


__all__ = ["ReportAcceptance", "RecordedAcceptance", "read_acceptance",
           "read_acceptance_by_context"]
