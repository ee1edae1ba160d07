"""Figures of one bench cell and their spread over seeds: tokens/s, TTFT / TPOT / ITL percentiles,
acceptance from the counter deltas, the ratio to baseline, and the k each concurrency should use.

Pure arithmetic over recorded requests (no clock, no network) so every figure is unit-tested.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from speckit.core.context import RequestAcceptance, request_from_histogram
from speckit.core.metrics import BEST_K_TOLERANCE, SpecCounters, counters_from_histograms

PERCENTILES = (50, 90, 99)


@dataclass
class RequestRecord:
    """One request as the client saw it (seconds), plus the server's own per-request summary."""

    success: bool
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft_s: float = 0.0
    latency_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)  # gaps between streamed chunks
    error: str = ""
    spec: dict[str, Any] | None = None  # response metrics.speculative_decoding (vLLM)

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first (vLLM bench serve's definition)."""
        if self.output_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), None when empty."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def percentiles_ms(values: Sequence[float]) -> dict[str, float | None]:
    return {f"p{q}": (None if (v := percentile(values, q)) is None else v * 1e3)
            for q in PERCENTILES}


@dataclass(frozen=True)
class LatencyMetric:
    """One per-request latency bench reports: its samples from a request record (seconds), and
    the percentiles the summary table shows. Adding a metric is adding one entry below: the cell
    figures, the summary rows (mean over seeds), report.json (`latency_ms`) and the table follow."""

    name: str  # key in latency_ms ("tpot")
    label: str  # table column ("TPOT")
    samples: Callable[[RequestRecord], list[float]]
    shown: tuple[str, ...] = ("p50", "p99")


LATENCY_METRICS: tuple[LatencyMetric, ...] = (
    LatencyMetric("ttft", "TTFT", lambda r: [r.ttft_s]),
    LatencyMetric("tpot", "TPOT", lambda r: [] if r.tpot_s is None else [r.tpot_s],
                  ("p50", "p90", "p99")),
    LatencyMetric("itl", "ITL", lambda r: list(r.itl_s)),
)


def latency_ms(records: Sequence[RequestRecord]) -> dict[str, dict[str, float | None]]:
    """Every LATENCY_METRICS metric's percentiles (ms) over the successful ``records``."""
    return {m.name: percentiles_ms([x for r in records for x in m.samples(r)])
            for m in LATENCY_METRICS}


@dataclass
class CellFigures:
    """One run of one cell (one seed)."""

    requests: int
    failed: int
    duration_s: float
    output_tokens: int
    output_tok_s: float
    per_gpu_tok_s: float
    # LATENCY_METRICS name -> percentile -> ms
    latency_ms: dict[str, dict[str, float | None]]
    counters: SpecCounters | None  # the /metrics deltas; None without speculation
    per_request: SpecCounters | None  # the same, summed over the responses that carried it
    k_drafted: float | None  # mean draft tokens per draft: what the engine actually proposed
    prompt_tokens: float | None = None  # mean per successful request (the KV context it starts at)
    # each successful request's own acceptance (server summary + usage.prompt_tokens): counts
    # only, for the acceptance by context
    requests_acceptance: list[RequestAcceptance] = field(default_factory=list)

    @property
    def acceptance_length(self) -> float | None:
        return self.counters.acceptance_length if self.counters and self.counters.num_drafts \
            else None


def cell_figures(records: Sequence[RequestRecord], *, duration_s: float, gpus: int,
                 counters: SpecCounters | None) -> CellFigures:
    ok = [r for r in records if r.success]
    out_tokens = sum(r.output_tokens for r in ok)
    tok_s = out_tokens / duration_s if duration_s > 0 else 0.0
    k_drafted = (counters.num_draft_tokens / counters.num_drafts
                 if counters and counters.num_drafts else None)
    return CellFigures(len(records), len(records) - len(ok), duration_s, out_tokens, tok_s,
                       tok_s / max(1, gpus), latency_ms(ok), counters,
                       per_request_counters(ok), k_drafted,
                       sum(r.prompt_tokens for r in ok) / len(ok) if ok else None,
                       request_acceptance(ok))


def request_acceptance(records: Sequence[RequestRecord]) -> list[RequestAcceptance]:
    """The records of the requests whose response carried vLLM's acceptance summary."""
    return [request_from_histogram(r.prompt_tokens, r.output_tokens,
                                   r.spec.get("acceptance_histogram") or [0],
                                   int(r.spec.get("num_draft_tokens", 0)))
            for r in records if r.spec]


def per_request_counters(records: Sequence[RequestRecord]) -> SpecCounters | None:
    """Sum of the servers' per-request acceptance summaries (histogram of accepted per step)."""
    specs = [r.spec for r in records if r.spec]
    if not specs:
        return None
    hists = [[int(x) for x in s.get("acceptance_histogram") or [0]] for s in specs]
    return counters_from_histograms(hists, [int(s.get("num_draft_tokens", 0)) for s in specs])


def counters_disagree(fig: CellFigures) -> list[str]:
    """Where the /metrics deltas and the summed per-request summaries differ (empty if equal)."""
    a, b = fig.counters, fig.per_request
    if a is None or b is None:
        return []
    out = []
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        if getattr(a, name) != getattr(b, name):
            out.append(f"{name}: /metrics delta {getattr(a, name)}, per-request sum "
                       f"{getattr(b, name)}")
    pa = list(a.accepted_per_pos)
    pb = list(b.accepted_per_pos) + [0] * max(0, len(pa) - len(b.accepted_per_pos))
    if pa != pb[:len(pa)] or any(pb[len(pa):]):
        out.append(f"accepted per position: /metrics delta {pa}, per-request sum {pb}")
    return out


# ---- spread over seeds and the ratio to baseline -------------------------------------------------

@dataclass
class Spread:
    mean: float
    sd: float  # sample standard deviation over seeds (0 with one seed)
    n: int


def spread(values: Sequence[float]) -> Spread | None:
    xs = [float(v) for v in values]
    if not xs:
        return None
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return Spread(m, sd, len(xs))


def ratio_spread(num: Spread, den: Spread) -> Spread | None:
    """mean(num) / mean(den), its sd by first-order error propagation of the two spreads."""
    if den.mean <= 0:
        return None
    r = num.mean / den.mean
    rel = math.sqrt((num.sd / num.mean) ** 2 + (den.sd / den.mean) ** 2) if num.mean > 0 else 0.0
    return Spread(r, r * rel, min(num.n, den.n))


def recommend_k(tok_s_by_k: Mapping[int, Spread], *,
                tolerance: float = BEST_K_TOLERANCE) -> int | None:
    """The measured k (0 = speculation off) with the highest mean tokens/s; a smaller k within
    ``tolerance`` of it wins, as speckit validate's best_k does."""
    if not tok_s_by_k:
        return None
    top = max(s.mean for s in tok_s_by_k.values())
    return min(k for k, s in tok_s_by_k.items() if s.mean >= top * (1 - tolerance))


def schedule_from_best(best: Mapping[int, int], *, max_batch: int) -> list[list[int]]:
    """vLLM's per-batch-size ranges from the best k at measured concurrencies: each measured
    concurrency's k holds up to the next one's; the last holds up to ``max_batch``."""
    cs = sorted(best)
    if not cs:
        return []
    out: list[list[int]] = []
    for i, c in enumerate(cs):
        lo = 1 if i == 0 else c
        hi = (cs[i + 1] - 1) if i + 1 < len(cs) else max(max_batch, c)
        if out and out[-1][2] == best[c]:
            out[-1][1] = hi
        else:
            out.append([lo, hi, int(best[c])])
    return out
