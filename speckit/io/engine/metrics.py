"""The spec-decode counters of a live vLLM engine, read through vLLM's metrics reader (in the
engine's process); speckit.core.metrics turns two snapshots into counters.
"""

from __future__ import annotations

from typing import Any


def metric_snapshot(llm) -> dict[str, Any]:
    """The spec-decode counters of a vLLM ``LLM`` (``get_metrics()``, which needs
    ``disable_log_stats=False``), summed over labels (engines, model names):
    {metric name: int, or list[int] per position}. counters_from_metrics takes two of these."""
    from vllm.v1.metrics.reader import Counter, Vector

    out: dict[str, Any] = {}
    for m in llm.get_metrics():
        if not m.name.startswith("vllm:spec_decode"):
            continue
        if isinstance(m, Counter):
            out[m.name] = out.get(m.name, 0) + int(m.value)
        elif isinstance(m, Vector):
            prev, vals = out.get(m.name) or [], [int(v) for v in m.values]
            n = max(len(prev), len(vals))
            out[m.name] = [(prev[i] if i < len(prev) else 0) + (vals[i] if i < len(vals) else 0)
                           for i in range(n)]
    return out
