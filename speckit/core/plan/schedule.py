"""Which k pays at which concurrency: AL(k), the projected throughput ratio by k x batch size
with its band, the break-even batch size, and the schedule vLLM's
num_speculative_tokens_per_batch_size takes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from speckit.errors import UsageError

Schedule = list[tuple[int, int, int]]


# ---- acceptance length ---------------------------------------------------------------------------
def check_rates(rates: Sequence[float], *, kind: str = "per-position") -> list[float]:
    """Rates in [0, 1]; vLLM's per-position rates (share of drafts with position i accepted)
    can only fall with i, conditional ones (accepted at i given i-1 accepted) need not."""
    out = [float(r) for r in rates]
    if not out:
        raise UsageError("--acceptance needs at least one rate", hint="e.g. --acceptance 0.73,0.52")
    for i, r in enumerate(out):
        if not 0.0 <= r <= 1.0:
            raise UsageError(f"--acceptance: rate {i + 1} is {r}, outside [0, 1]")
    if kind == "per-position":
        for i in range(1, len(out)):
            if out[i] > out[i - 1] + 1e-9:
                raise UsageError(
                    f"--acceptance: per-position rate {i + 1} ({out[i]}) exceeds rate {i} "
                    f"({out[i - 1]}); vLLM's per-position rates never rise",
                    hint="for conditional rates (accepted at i given i-1 accepted) pass "
                    "--acceptance-kind conditional")
    elif kind != "conditional":
        raise UsageError(f"acceptance kind {kind!r}: use per-position or conditional")
    return out


def per_position_from_conditional(conditional: Sequence[float]) -> list[float]:
    """p_i = a_1 * ... * a_i: the share of steps whose first i drafts were all accepted."""
    out, run = [], 1.0
    for a in conditional:
        run *= float(a)
        out.append(run)
    return out


def al_from_per_position(per_position: Sequence[float], k: int) -> float:
    """AL(k) = 1 + p_1 + ... + p_k (vLLM's per-position rates; the bonus token is the 1)."""
    if not 0 <= k <= len(per_position):
        raise UsageError(f"AL({k}) needs {k} per-position rates; {len(per_position)} given")
    return 1.0 + sum(per_position[:k])


def al_from_conditional(conditional: Sequence[float], k: int) -> float:
    """AL(k) = 1 + sum of the cumulative products of the conditional acceptance rates."""
    return al_from_per_position(per_position_from_conditional(conditional), k)


def geometric_rates(al: float, k: int, *, positions: int | None = None) -> list[float]:
    """Per-position rates a, a^2, ... of one constant conditional rate a with AL(k) = ``al``:
    what ``--al X -k K`` implies for the other k (an assumption, said where it is used)."""
    if k < 1 or not 1.0 <= al <= k + 1:
        raise UsageError(f"--al {al} with k={k}: AL must lie in [1, k + 1]",
                         hint="AL counts the bonus token: 1 = nothing accepted, k+1 = all")
    lo, hi = 0.0, 1.0
    for _ in range(100):  # bisection: 1 + a + ... + a^k rises with a
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(k + 1)) < al:
            lo = mid
        else:
            hi = mid
    a = (lo + hi) / 2
    return [a**i for i in range(1, (positions or k) + 1)]


# ---- the projection ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpeedTable:
    """Projected figures for one context length: everything here comes from the step model."""

    ctx: int
    ks: list[int]
    batches: list[int]  # the table's columns
    al: dict[int, float]  # k -> expected tokens per verify step
    base_step_s: list[float]  # per batch: one decode step without speculation
    spec_step_s: dict[int, list[float]]  # k -> per batch: verify (q = k+1) + draft step
    ratio: dict[int, list[float]]  # k -> per batch: tokens/s with k over tokens/s without
    best_k: list[int]  # per batch column, 0 = speculation off
    break_even: int | None  # first batch size from which no k beats plain decoding
    schedule: Schedule  # (batch_lo, batch_hi, k), for every batch size 1..max_batch
    max_batch: int
    # k -> per batch column: (low, high) of the ratio's band (speckit.core.plan.band)
    band: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    # k -> per batch column: the band straddles 1.0 (measure before relying on the sign)
    uncertain: dict[int, list[bool]] = field(default_factory=dict)


Offsets = Callable[[int], tuple[float, float]]  # batch -> (lo, hi) log offsets of the band


def no_band(batch: int) -> tuple[float, float]:
    """Zero log offsets at every batch size: a band of no width."""
    return 0.0, 0.0


def throughput_ratio(al: float, spec_step_s: float, base_step_s: float) -> float:
    """(AL / t_spec) / (1 / t_base): tokens per second with speculation over without."""
    return al * base_step_s / spec_step_s


def project(al: Mapping[int, float], *, base_step: Callable[[int], float],
            spec_step: Callable[[int, int], float], max_batch: int,
            batches: Sequence[int] | None = None, ctx: int = 0,
            min_gain: float = 1.0, band: Offsets | None = None) -> SpeedTable:
    """Ratios for every k in ``al`` and every batch size 1..max_batch (``base_step(b)`` and
    ``spec_step(b, k)`` are seconds per step), each with its band (``band(b)``: log offsets;
    none: zero width). Going up the batch sizes, the schedule leaves its current k (0: plain
    decoding, band [min_gain, min_gain]) only for a k whose band lies wholly above the current
    one's: a gain inside the band is no reason to speculate, nor to switch."""
    if max_batch < 1:
        raise UsageError(f"max batch size must be >= 1 (got {max_batch})")
    ks = sorted(int(k) for k in al)
    if not ks or ks[0] < 1:
        raise UsageError("the projection needs k >= 1 with an AL for each")
    offsets = band or no_band
    cols = sorted({b for b in (batches or _default_batches(max_batch)) if 1 <= b <= max_batch})

    def ratios_at(b: int) -> dict[int, float]:
        t = base_step(b)
        return {k: throughput_ratio(al[k], spec_step(b, k), t) for k in ks}

    dense = dense_schedule(ratios_at, max_batch, offsets, min_gain=min_gain)
    base = [base_step(b) for b in cols]
    spec = {k: [spec_step(b, k) for b in cols] for k in ks}
    ratio = {k: [throughput_ratio(al[k], s, t) for s, t in zip(spec[k], base, strict=True)]
             for k in ks}
    bands, uncertain = column_bands(ratio, cols, offsets)
    return SpeedTable(ctx=ctx, ks=ks, batches=cols, al={k: al[k] for k in ks}, base_step_s=base,
                      spec_step_s=spec, ratio=ratio, best_k=[dense[b - 1] for b in cols],
                      break_even=break_even(dense), schedule=ranges(dense), max_batch=max_batch,
                      band=bands, uncertain=uncertain)


def interval(ratio: float, offsets: tuple[float, float]) -> tuple[float, float]:
    """[ratio x e^lo, ratio x e^hi]: a ratio's band from its log offsets."""
    return ratio * math.exp(offsets[0]), ratio * math.exp(offsets[1])


def column_bands(ratio: Mapping[int, Sequence[float]], cols: Sequence[int], offsets: Offsets
                 ) -> tuple[dict[int, list[tuple[float, float]]], dict[int, list[bool]]]:
    """k -> each column's band of ``ratio[k]``, and k -> whether that band straddles 1.0."""
    bands = {k: [interval(r, offsets(b)) for r, b in zip(rs, cols, strict=True)]
             for k, rs in ratio.items()}
    return bands, {k: [lo < 1.0 < hi for lo, hi in bs] for k, bs in bands.items()}


def dense_schedule(ratios_at: Callable[[int], Mapping[int, float]], max_batch: int,
                   offsets: Offsets, *, min_gain: float = 1.0) -> list[int]:
    """The k for every batch size 1..max_batch (``ratios_at(b)``: k -> projected ratio), each
    chosen by next_k from the one before, starting from plain decoding below batch 1."""
    out, cur = [], 0
    for b in range(1, max_batch + 1):
        cur = next_k(cur, ratios_at(b), offsets(b), min_gain=min_gain)
        out.append(cur)
    return out


def next_k(current: int, ratios: Mapping[int, float], offsets: tuple[float, float], *,
           min_gain: float = 1.0) -> int:
    """The k to run next to ``current``: the best (by projected ratio) of the k whose band lies
    wholly above the current k's band; k = 0 (no speculation) has the band [min_gain,
    min_gain]. None above: keep the current k."""
    point = {0: min_gain, **{int(k): float(r) for k, r in ratios.items()}}
    band = {k: interval(r, offsets) if k else (r, r) for k, r in point.items()}
    cur = current if current in point else 0
    above = [k for k in point if k != cur and band[k][0] > band[cur][1]]
    return max(above, key=lambda k: (point[k], -k)) if above else cur


def break_even(dense: Sequence[int]) -> int | None:
    """The smallest batch size from which every larger one is best served with k = 0."""
    if not dense or dense[-1] != 0:
        return None
    b = len(dense)
    while b > 1 and dense[b - 2] == 0:
        b -= 1
    return b


def pays_text(schedule: Sequence[Sequence[int]]) -> str:
    """Where a schedule speculates, in words: "speculation pays up to 32", "speculation pays at
    concurrency 228-1024 (off below 228)", or that it pays nowhere."""
    on: list[tuple[int, int]] = []
    for a, b, k in schedule:
        if int(k) > 0:
            if on and on[-1][1] + 1 == int(a):  # adjacent ranges with different k: one span
                on[-1] = (on[-1][0], int(b))
            else:
                on.append((int(a), int(b)))
    if not on:
        return "speculation does not pay at any concurrency"
    if len(on) == 1 and on[0][0] == 1:
        return f"speculation pays up to {on[0][1]}"
    spans = ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in on)
    below = f" (off below {on[0][0]})" if on[0][0] > 1 else ""
    return f"speculation pays at concurrency {spans}{below}"


def uncertain_batches(table: SpeedTable) -> list[int]:
    """The table's columns whose chosen k (the schedule's) has a band straddling 1.0: the
    projection cannot say there whether speculating wins."""
    return [b for i, (b, k) in enumerate(zip(table.batches, table.best_k, strict=True))
            if k and table.uncertain.get(k, [False] * len(table.batches))[i]]


def ranges(best_k: Sequence[int]) -> Schedule:
    """[(lo, hi, k), ...] over batch sizes 1..len(best_k): inclusive, sorted, starting at 1, as
    vllm.v1.spec_decode.dynamic.utils.validate_and_normalize_dynamic_sd_schedule requires."""
    out: Schedule = []
    for b, k in enumerate(best_k, start=1):
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], b, k)
        else:
            out.append((b, b, int(k)))
    return out


def schedule_config(schedule: Sequence[Sequence[int]], *, k_if_off: int) -> dict[str, Any]:
    """The --speculative-config fields that carry a k schedule: num_speculative_tokens is the
    schedule's largest k (vLLM caps every range at it), ``k_if_off`` where it never speculates."""
    rows = [[int(a), int(b), int(k)] for a, b, k in schedule]
    return {"num_speculative_tokens": max((r[2] for r in rows), default=0) or int(k_if_off),
            "num_speculative_tokens_per_batch_size": rows}


def check_schedule(schedule: Sequence[Sequence[int]]) -> Schedule:
    """speckit's own reading of vLLM's rules (tests hold it against vLLM's validator)."""
    out = [(int(a), int(b), int(k)) for a, b, k in schedule]
    if not out or out[0][0] != 1:
        raise UsageError("a k schedule must be non-empty and start at batch size 1")
    prev = 0
    for a, b, k in out:
        if a <= prev or a > b or k < 0:
            raise UsageError(f"k schedule range ({a}, {b}, {k}) overlaps, is reversed or has k < 0")
        prev = b
    return out


def default_batches(max_batch: int) -> list[int]:
    """The table's columns: powers of two below max_batch, then max_batch."""
    return _default_batches(max_batch)


def _default_batches(max_batch: int) -> list[int]:
    cols, b = [], 1
    while b < max_batch:
        cols.append(b)
        b *= 2
    return [*cols, max_batch]


__all__ = ["Offsets", "Schedule", "SpeedTable", "al_from_conditional", "al_from_per_position",
           "break_even", "check_rates", "check_schedule", "column_bands", "default_batches",
           "dense_schedule", "geometric_rates", "interval", "next_k", "no_band", "pays_text",
           "per_position_from_conditional", "project", "ranges", "throughput_ratio"]
