"""bench's live canary: each static arm of the draft at its lowest concurrency, per temperature
and thinking mode, held against the draft's published acceptance (speckit.io.canary).
"""

from __future__ import annotations

from typing import Any

from speckit.core.registry.canary import AcceptanceCanary
from speckit.io.canary import acceptance_canary


def bench_canaries(report: Any, *, draft: str | None, dataset: str) -> list[AcceptanceCanary]:
    """One comparison per (k, temperature, thinking) the draft's static arms measured, at the
    lowest concurrency (the least batching noise); none when the draft is no registry entry."""
    if not draft:
        return []
    firsts: dict[tuple, Any] = {}
    for row in report.summary:
        if row.kind != "static" or row.acceptance_length is None:
            continue
        key = (row.k, row.temperature, row.thinking)
        if key not in firsts or (row.concurrency or 0) < (firsts[key].concurrency or 0):
            firsts[key] = row
    out = []
    for row in firsts.values():
        c = acceptance_canary(draft=draft, measured_al=row.acceptance_length, k=row.k,
                              dataset=dataset, temperature=row.temperature,
                              thinking=row.thinking)
        if c is None:
            return []
        out.append(c)
    return out


__all__ = ["bench_canaries"]
