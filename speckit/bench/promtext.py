"""Reading vLLM's speculative-decoding counters from Prometheus text (the server's /metrics).

Pure: text in, a {metric name: int | list[int]} snapshot out, summed over engines and model
names, in the shape speckit.core.metrics.counters_from_metrics takes (names without ``_total``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from speckit.core.metrics import ACCEPTED, DRAFT_TOKENS, DRAFTS, PER_POS
from speckit.core.refs import printable
from speckit.errors import FormatError

SPEC_COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED)
MAX_POSITIONS = 64  # vLLM drafts far fewer; a larger label is a hostile or broken server
_SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+'
                     r'(?P<value>\S+)(?:\s+\S+)?$')
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass
class MetricsText:
    """What one /metrics scrape said about speculation."""

    snapshot: dict[str, Any] = field(default_factory=dict)  # counters_from_metrics input
    is_vllm: bool = False  # any vllm: metric at all
    has_spec_decode: bool = False  # the spec-decode counters are exported

    @property
    def positions(self) -> int:
        return len(self.snapshot.get(PER_POS) or [])


def parse_labels(text: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    text = text or ""
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            raise ValueError(f"malformed labels {{{printable(text[:80])}}}")
        out[m.group(1)] = m.group(2)
        pos = m.end()
    return out


def parse_metrics(text: str, *, source: str = "/metrics") -> MetricsText:
    """The spec-decode counters of one scrape; other metrics are only noted (is_vllm)."""
    res = MetricsText()
    per_pos: dict[int, int] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue  # exposition formats we do not read (e.g. OpenMetrics exemplars)
        name = m.group("name")
        res.is_vllm = res.is_vllm or name.startswith("vllm:")
        base = name.removesuffix("_total")
        if base not in (*SPEC_COUNTERS, PER_POS) or not name.endswith("_total"):
            continue
        value = _count(m.group("value"), f"{source} line {lineno} ({name})")
        res.has_spec_decode = True
        if base == PER_POS:
            pos = _position(m.group("labels"), f"{source} line {lineno}")
            per_pos[pos] = per_pos.get(pos, 0) + value
        else:
            res.snapshot[base] = res.snapshot.get(base, 0) + value
    if per_pos:
        res.snapshot[PER_POS] = [per_pos.get(i, 0) for i in range(max(per_pos) + 1)]
    return res


def _count(raw: str, where: str) -> int:
    try:
        v = float(raw)
    except ValueError:
        raise FormatError(f"{where}: counter value {raw[:40]!r} is not a number",
                          hint="is this a vLLM server's Prometheus endpoint?") from None
    if not math.isfinite(v) or v < 0 or v != int(v):
        raise FormatError(f"{where}: counter value {raw[:40]!r} is not a non-negative integer",
                          hint="a counter only counts up; the server's metrics are broken")
    return int(v)


def _position(labels: str | None, where: str) -> int:
    try:
        pos = parse_labels(labels).get("position")
    except ValueError as e:
        raise FormatError(f"{where}: {e}") from None
    if pos is None or not pos.isdigit() or int(pos) >= MAX_POSITIONS:
        raise FormatError(f"{where}: per-position counter with position label {pos!r}",
                          hint=f"expected an integer position below {MAX_POSITIONS}")
    return int(pos)
