"""Acceptance by context length: per-request counters grouped into the context buckets of
speckit.core.traffic (AL and its interval per bucket), and the context a draft was trained on,
with the warning when traffic goes past it.

Pure: per-request records and configs in, results out (speckit.io.engine measures the records,
speckit.io.draftrecord reads the training record).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from speckit.core.metrics import ratio_stderr
from speckit.core.traffic import CONTEXT_BUCKETS, context_bucket

MIN_REQUESTS = 4  # per bucket; fewer and the bucket's AL is shown but flagged
CONFIDENCE = 0.95
INTERVAL_METHOD = (
    "95% Student-t interval with n-1 degrees of freedom (n = requests in the bucket) around the "
    "bucket's AL = 1 + accepted / drafts, with the delta-method standard error of that ratio over "
    "requests (each request one cluster of verify steps)")


@dataclass(frozen=True)
class RequestAcceptance:
    """One request's speculative counters, as vLLM counted them for that request alone."""

    prompt_tokens: int  # the prompt as the engine received it (chat template applied)
    output_tokens: int
    drafts: int  # verify steps that carried draft tokens
    draft_tokens: int
    accepted: int  # accepted draft tokens
    accepted_per_pos: tuple[int, ...] = ()  # steps with position i (0-based) accepted

    @property
    def acceptance_length(self) -> float | None:
        return 1.0 + self.accepted / self.drafts if self.drafts else None


def request_from_histogram(prompt_tokens: int, output_tokens: int, histogram: Sequence[int],
                           draft_tokens: int) -> RequestAcceptance:
    """One request's record from vLLM's per-request summary: ``histogram[j]`` verify steps that
    carried drafts had j of them accepted; ``draft_tokens`` proposed in all."""
    hist = [int(x) for x in histogram]
    per_pos = [sum(hist[j + 1:]) for j in range(max(0, len(hist) - 1))]
    return RequestAcceptance(int(prompt_tokens), int(output_tokens), sum(hist), int(draft_tokens),
                             sum(j * n for j, n in enumerate(hist)), tuple(per_pos))


@dataclass(frozen=True)
class BucketAcceptance:
    bucket: str
    lo: int
    hi: int | None
    requests: int  # requests in the bucket that drafted at least once
    requests_without_drafts: int
    drafts: int
    acceptance_length: float | None
    interval: tuple[float, float] | None  # None below 2 requests
    per_position: list[float]  # share of drafts with position i accepted
    prompt_tokens_median: int | None
    enough: bool  # requests >= min_requests
    note: str | None = None


@dataclass
class ContextAcceptance:
    """report.json's ``acceptance_by_context``: every bucket, measured or not."""

    buckets: list[BucketAcceptance]
    interval_method: str = INTERVAL_METHOD
    min_requests: int = MIN_REQUESTS
    context: str = ("the prompt's length in target tokens as the engine received it (chat "
                    "template applied); buckets [lo, hi)")
    warnings: list[str] = field(default_factory=list)
    k: int | None = None  # the k drafted (the largest k of the run the records came from)
    source: str = ""  # which run the per-request counters came from

    def measured(self) -> list[BucketAcceptance]:
        return [b for b in self.buckets if b.requests]

    def per_position(self) -> dict[str, list[float]]:
        """bucket -> its per-position acceptance rates, for every bucket that drafted."""
        return {b.bucket: list(b.per_position) for b in self.buckets
                if b.per_position and b.acceptance_length is not None}


def acceptance_by_context(records: Sequence[RequestAcceptance], *, k: int | None = None,
                          min_requests: int = MIN_REQUESTS, source: str = "") -> ContextAcceptance:
    """AL per context bucket with its interval (INTERVAL_METHOD); ``k`` (the largest k drafted)
    bounds each interval to [1, k + 1]; ``source`` says which run counted."""
    by: dict[str, list[RequestAcceptance]] = {b.label: [] for b in CONTEXT_BUCKETS}
    for r in records:
        by[context_bucket(r.prompt_tokens).label].append(r)
    buckets = [_bucket(b, by[b.label], k=k, min_requests=min_requests) for b in CONTEXT_BUCKETS]
    warnings = [f"{b.bucket}: {b.note}" for b in buckets if b.note and b.requests]
    return ContextAcceptance(buckets, min_requests=min_requests, warnings=warnings, k=k,
                             source=source)


def context_table(ctx: ContextAcceptance) -> list[list[str]]:
    """The AL-by-context table as text cells, a header row first (report.md, the terminal)."""
    out = [["context (tokens)", "requests", "AL", "95% interval", "note"]]
    for b in ctx.buckets:
        al = f"{b.acceptance_length:.2f}" if b.acceptance_length is not None else "-"
        iv = f"{b.interval[0]:.2f} - {b.interval[1]:.2f}" if b.interval else "-"
        note = b.note or ("" if b.requests else "not measured")
        out.append([b.bucket, str(b.requests), al, iv, note])
    return out


def _bucket(b, rows: Sequence[RequestAcceptance], *, k: int | None,
            min_requests: int) -> BucketAcceptance:
    drafted = [r for r in rows if r.drafts > 0]
    drafts = sum(r.drafts for r in drafted)
    accepted = sum(r.accepted for r in drafted)
    al = 1.0 + accepted / drafts if drafts else None
    width = max((len(r.accepted_per_pos) for r in drafted), default=0)
    per_pos = [sum(r.accepted_per_pos[i] for r in drafted if i < len(r.accepted_per_pos))
               / drafts for i in range(width)] if drafts else []
    interval = _interval(drafted, al, k=k)
    n = len(drafted)
    note = None
    if n and n < min_requests:
        note = (f"only {n} request{'s' * (n != 1)} (at least {min_requests} are needed for a "
                "figure to rely on)")
    prompts = sorted(r.prompt_tokens for r in rows)
    return BucketAcceptance(b.label, b.lo, b.hi, n, len(rows) - n, drafts,
                            round(al, 4) if al is not None else None, interval,
                            [round(p, 4) for p in per_pos],
                            prompts[len(prompts) // 2] if prompts else None,
                            n >= min_requests, note)


def _interval(rows: Sequence[RequestAcceptance], al: float | None, *,
              k: int | None) -> tuple[float, float] | None:
    if al is None or len(rows) < 2:
        return None
    from scipy.stats import t as student_t

    se = ratio_stderr([r.accepted for r in rows], [r.drafts for r in rows]) or 0.0
    half = float(student_t.ppf(0.5 + CONFIDENCE / 2, len(rows) - 1)) * se
    hi_bound = float(k + 1) if k is not None else float("inf")
    return (round(max(1.0, al - half), 4), round(min(hi_bound, al + half), 4))


# ---- the context a draft was trained on ---------------------------------------------------------

@dataclass(frozen=True)
class TrainedLength:
    """The longest context the draft saw in training (``kind`` "trained", from its training
    record), else the one its config declares ("declared"), else unknown."""

    tokens: int | None
    kind: Literal["trained", "declared", "unknown"]
    source: str
    details: list[str] = field(default_factory=list)  # rope scaling, sliding window, ...


def trained_length(config: Mapping[str, Any],
                   train_record: Mapping[str, Any] | None = None) -> TrainedLength:
    """From ``train_record`` (speckit-train.json: result.trained_context.max_tokens) when it has
    it, else declared by ``config`` (max_position_embeddings, with rope scaling and sliding
    window noted; a speculators config's transformer_layer_config is read first)."""
    declared = _declared(config)
    ctx = ((train_record or {}).get("result") or {}).get("trained_context") or {}
    n = ctx.get("max_tokens") if isinstance(ctx, Mapping) else None
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        details = [f"median {ctx['p50_tokens']}, 99th percentile {ctx['p99_tokens']} over "
                   f"{ctx.get('sequences', '?')} training sequences"] \
            if "p50_tokens" in ctx and "p99_tokens" in ctx else []
        if declared.tokens:
            details.append(f"declared {declared.tokens} ({declared.source})")
        return TrainedLength(n, "trained", "the longest training sequence, prompt + answer "
                             "(speckit-train.json result.trained_context)", details)
    return declared


def _declared(config: Mapping[str, Any]) -> TrainedLength:
    inner = config.get("transformer_layer_config")
    cfg = inner if isinstance(inner, Mapping) else config
    where = "transformer_layer_config." if cfg is inner else ""
    mpe = cfg.get("max_position_embeddings", config.get("max_position_embeddings"))
    details = []
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if isinstance(rope, Mapping):
        kind = rope.get("rope_type") or rope.get("type") or "default"
        text = f"rope {kind}"
        theta = rope.get("rope_theta")
        if isinstance(theta, (int, float)) and not isinstance(theta, bool):
            text += f", theta {theta:g}"
        if rope.get("factor") is not None:
            text += f", factor {rope['factor']}"
        if rope.get("original_max_position_embeddings") is not None:
            text += f" over {rope['original_max_position_embeddings']} original positions"
        details.append(text)
    window = cfg.get("sliding_window")
    if isinstance(window, int) and window > 0 and cfg.get("use_sliding_window", True):
        details.append(f"sliding window {window}: attention sees the last {window} tokens")
    if isinstance(mpe, int) and not isinstance(mpe, bool) and mpe > 0:
        return TrainedLength(mpe, "declared", f"config.json {where}max_position_embeddings",
                             details)
    return TrainedLength(None, "unknown", "no training record and no max_position_embeddings",
                         details)


def past_training(trained: TrainedLength, prompt_tokens: Sequence[int]) -> str | None:
    """A warning when prompts go past the trained (or declared) length, else None."""
    if trained.tokens is None or not prompt_tokens:
        return None
    over = sum(1 for n in prompt_tokens if n > trained.tokens)
    if not over:
        return None
    what = "was trained on" if trained.kind == "trained" else \
        "declares (its config's figure, not what its training covered)"
    return (f"{over} of {len(prompt_tokens)} prompts ({100 * over / len(prompt_tokens):.0f}%) are "
            f"longer than the {trained.tokens} tokens the draft {what} ({trained.source}); "
            "its acceptance there is extrapolated, see the AL by context")


__all__ = ["INTERVAL_METHOD", "MIN_REQUESTS", "BucketAcceptance", "ContextAcceptance",
           "RequestAcceptance", "TrainedLength", "acceptance_by_context", "context_table",
           "past_training", "request_from_histogram", "trained_length"]
