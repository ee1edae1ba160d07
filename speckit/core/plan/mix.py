"""Speed for a traffic mix: the projected throughput ratio per concurrency averaged over the
traffic's context buckets (each with its own acceptance and KV context), the k schedule vLLM takes
today (one k per batch-size range, whatever the context) chosen for that mix, and a (concurrency x
context) table of the best k for an engine that could also pick k by context.

Averaging. A mix gives each bucket c a weight w_c, its share of the generated tokens. Generating N
tokens at batch size b takes N * sum_c w_c * t_spec(b, k, c) / AL_c(k) seconds with speculation and
N * sum_c w_c * t_base(b, c) without, so the mix's ratio is

    R_mix(b, k) = sum_c w_c t_base(b, c) / sum_c w_c t_spec(b, k, c) / AL_c(k),

the weighted harmonic mean of the buckets' own ratios R_c, weighted by each bucket's share of the
plain-decoding time w_c * t_base(b, c): time adds up, ratios do not (an arithmetic mean of the
ratios would overstate a mix whose slow buckets gain least). A batch is priced as if all its
sequences were at one bucket's context; a batch that mixes contexts costs in between.

Pure: any step model with ``base(batch, ctx)`` and ``spec(batch, k, ctx, al)`` (seconds per step;
speckit.core.plan.projection.StepModel is one) and acceptance per bucket in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from speckit.core.plan.schedule import (
    Offsets,
    Schedule,
    al_from_per_position,
    break_even,
    column_bands,
    default_batches,
    dense_schedule,
    no_band,
    ranges,
    throughput_ratio,
)
from speckit.core.traffic import CONTEXT_BUCKETS, context_bucket
from speckit.errors import UsageError

AVERAGING = ("ratio per batch size = sum over buckets of weight x plain step time / sum of weight "
             "x speculative step time / AL (time-weighted: the mix's tokens per second with k "
             "over without); weight = the bucket's share of generated tokens")
BAND_NOTE = ("the band of a mix ratio applies the model's residual band at that concurrency "
             "(speckit.core.plan.band) to the mixed ratio, as plan does to each context's")


class StepPricer(Protocol):
    def base(self, batch: int, ctx: int) -> float: ...

    def spec(self, batch: int, k: int, ctx: int, al: float = 1.0) -> float: ...


@dataclass(frozen=True)
class MixBucket:
    bucket: str
    weight: float  # share of the generated tokens (the weights of a mix sum to 1)
    context: int  # KV context this bucket's decode steps are priced at
    al: Mapping[int, float]  # k -> expected tokens per verify step in this bucket


@dataclass(frozen=True)
class ContextRow:
    """One row of the (concurrency x context) table: the best k at each batch column if vLLM
    could pick k for this bucket's context alone (0 = speculation off)."""

    bucket: str
    context: int
    best_k: list[int]
    ratio: list[float]  # at that k (1.0 where off)


@dataclass
class MixProjection:
    buckets: list[MixBucket]
    ks: list[int]
    batches: list[int]  # the table's columns
    ratio: dict[int, list[float]]  # k -> per column: the mix's throughput ratio
    best_k: list[int]  # per column, for the mix (0 = off)
    schedule: Schedule  # vLLM's num_speculative_tokens_per_batch_size for the mix, 1..max_batch
    by_context: list[ContextRow]
    averaging: str = AVERAGING
    notes: list[str] = field(default_factory=list)
    # k -> per column: the mixed ratio's band, and whether it straddles 1.0 (empty: no band)
    band: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    uncertain: dict[int, list[bool]] = field(default_factory=dict)
    break_even: int | None = None  # first batch size from which the mix is best served off


# ---- the mix from traffic ---------------------------------------------------------------------

def mix_from_traffic(prompt_tokens: Sequence[int], output_tokens: Sequence[int] | None = None,
                     ) -> tuple[dict[str, float], dict[str, int]]:
    """(weight, context) per context bucket of a traffic: the weight is the bucket's share of the
    output tokens (of the requests when no output lengths are known), the context the mean KV
    length while decoding (prompt + half the output) of its requests."""
    if not prompt_tokens:
        raise UsageError("a traffic mix needs at least one request")
    outs = list(output_tokens) if output_tokens is not None else [1] * len(prompt_tokens)
    if len(outs) != len(prompt_tokens):
        raise ValueError("one output length per prompt")
    tokens: dict[str, int] = {}
    kv: dict[str, list[float]] = {}
    for p, o in zip(prompt_tokens, outs, strict=True):
        label = context_bucket(int(p)).label
        tokens[label] = tokens.get(label, 0) + max(1, int(o))
        kv.setdefault(label, []).append(int(p) + max(0, int(o)) / 2)
    total = sum(tokens.values())
    order = [b.label for b in CONTEXT_BUCKETS if b.label in tokens]
    return ({b: tokens[b] / total for b in order},
            {b: round(sum(kv[b]) / len(kv[b])) for b in order})


def output_lengths(replies: Sequence[int | None],
                   max_tokens: Sequence[int | None] | None = None) -> list[int] | None:
    """Each request's output length for the mix's weights: its reply's length, else its own
    max_tokens, else the median reply; None when no request gives either (weigh by requests)."""
    caps = list(max_tokens) if max_tokens is not None else [None] * len(replies)
    known = sorted(int(r) for r in replies if r is not None)
    fill = known[len(known) // 2] if known else None
    out = [r if r is not None else (c if c is not None else fill)
           for r, c in zip(replies, caps, strict=True)]
    if any(o is None for o in out):
        return None if all(o is None for o in out) else [int(o or 1) for o in out]
    return [int(o) for o in out]


def fill_buckets(al: Mapping[str, Mapping[int, float]], wanted: Sequence[str]
                 ) -> tuple[dict[str, dict[int, float]], list[str]]:
    """``al`` with each wanted bucket that has no measurement given its nearest measured
    neighbour's (the shorter one on a tie), and a note for each one so filled."""
    order = [b.label for b in CONTEXT_BUCKETS]
    have = [b for b in order if al.get(b)]
    if not have:
        raise UsageError("no context bucket has an acceptance measurement")
    out = {b: dict(al[b]) for b in have}
    notes = []
    for b in wanted:
        if b in out:
            continue
        i = order.index(b)
        near = min(have, key=lambda h: (abs(order.index(h) - i), order.index(h)))
        out[b] = dict(al[near])
        notes.append(f"{b}: not measured; {near}'s acceptance is used for it")
    return out, notes


def al_by_k(per_position: Sequence[float]) -> dict[int, float]:
    """k -> AL(k) = 1 + p_1 + ... + p_k for every k the per-position rates cover."""
    return {k: al_from_per_position(per_position, k) for k in range(1, len(per_position) + 1)}


def mix_buckets(weights: Mapping[str, float], al: Mapping[str, Mapping[int, float]],
                contexts: Mapping[str, int] | None = None) -> list[MixBucket]:
    """The buckets of a mix, weights normalised; every weighted bucket needs its AL table
    (a bucket without a measurement: give it a neighbour's and say so where it is shown)."""
    known = {b.label: b for b in CONTEXT_BUCKETS}
    live = {b: float(w) for b, w in weights.items() if float(w) > 0}
    if not live:
        raise UsageError("the traffic mix has no weight in any context bucket")
    unknown = sorted(set(live) - set(known))
    if unknown:
        raise UsageError(f"unknown context bucket(s) {unknown}", hint="use " + ", ".join(known))
    missing = [b for b in live if not al.get(b)]
    if missing:
        raise UsageError(f"no acceptance for context bucket(s) {', '.join(missing)}",
                         hint="measure them (validate's acceptance by context) or give a "
                         "neighbouring bucket's")
    total = sum(live.values())
    ctx = contexts or {}
    return [MixBucket(b, live[b] / total, int(ctx.get(b) or known[b].representative),
                      dict(al[b])) for b in known if b in live]


# ---- the projection -----------------------------------------------------------------------------

def project_mix(model: StepPricer, buckets: Sequence[MixBucket], *, max_batch: int,
                batches: Sequence[int] | None = None, min_gain: float = 1.0,
                band: Offsets | None = None) -> MixProjection:
    """The mix's ratio for every k and batch size 1..max_batch, the per-batch-size schedule for
    it, and the best k per bucket. ``band(b)`` (log offsets; none: zero width) is applied to the
    mixed ratio, and the schedule moves to a k only where its band lies wholly above the current
    one's (plain decoding: [min_gain, min_gain]), as plan's schedule does."""
    if max_batch < 1:
        raise UsageError(f"max batch size must be >= 1 (got {max_batch})")
    ks = sorted(set.intersection(*(set(b.al) for b in buckets))) if buckets else []
    if not ks or ks[0] < 1:
        raise UsageError("every bucket of the mix needs an AL for the same k >= 1")
    cols = sorted({b for b in (batches or default_batches(max_batch)) if 1 <= b <= max_batch})
    offsets = band or no_band
    base: dict[tuple[int, int], float] = {}

    def plain(b: int, ctx: int) -> float:
        if (b, ctx) not in base:
            base[(b, ctx)] = model.base(b, ctx)
        return base[(b, ctx)]

    def mix_ratio(b: int, k: int) -> float:
        num = sum(m.weight * plain(b, m.context) for m in buckets)
        den = sum(m.weight * model.spec(b, k, m.context, m.al[k]) / m.al[k] for m in buckets)
        return num / den

    dense = dense_schedule(lambda b: {k: mix_ratio(b, k) for k in ks}, max_batch, offsets,
                           min_gain=min_gain)
    ratio = {k: [mix_ratio(b, k) for b in cols] for k in ks}
    bands, uncertain = column_bands(ratio, cols, offsets) if band else ({}, {})
    rows = [_context_row(model, m, ks, cols, plain, min_gain, offsets, max_batch)
            for m in buckets]
    return MixProjection(list(buckets), ks, cols, ratio, [dense[b - 1] for b in cols],
                         ranges(dense), rows, band=bands, uncertain=uncertain,
                         break_even=break_even(dense))


def _context_row(model: StepPricer, m: MixBucket, ks, cols, plain, min_gain, offsets,
                 max_batch: int) -> ContextRow:
    def ratio_of(b: int, k: int) -> float:
        return throughput_ratio(m.al[k], model.spec(b, k, m.context, m.al[k]), plain(b, m.context))

    dense = dense_schedule(lambda b: {k: ratio_of(b, k) for k in ks}, max_batch, offsets,
                           min_gain=min_gain)
    best = [dense[b - 1] for b in cols]
    return ContextRow(m.bucket, m.context, best,
                      [round(ratio_of(b, k), 4) if k else 1.0 for b, k in zip(cols, best,
                                                                           strict=True)])


__all__ = ["AVERAGING", "BAND_NOTE", "ContextRow", "MixBucket", "MixProjection", "StepPricer",
           "al_by_k", "fill_buckets", "mix_buckets", "mix_from_traffic", "output_lengths",
           "project_mix"]
