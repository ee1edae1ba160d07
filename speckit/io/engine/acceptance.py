"""Per-request acceptance from one engine run: each request's prompt length (as the engine got it)
and the speculative counters vLLM kept for that request alone.

vLLM (>= 0.32) counts per request when the engine is built with
``per_request_spec_decode_metrics="summary"`` (the worker sets it for every speculative run):
each finished CompletionOutput then carries ``spec_decode_metrics`` with a histogram of accepted
draft tokens per verify step (hist[j] = steps with j accepted) and the draft tokens proposed. A
step is counted only when it carried draft tokens, as the engine-wide counters count drafts, so the
requests' sums equal the run's counter deltas (request_problems checks that).
"""

from __future__ import annotations

from speckit.core.context import RequestAcceptance, request_from_histogram
from speckit.core.metrics import SpecCounters, counters_from_histograms
from speckit.errors import EngineError
from speckit.io.engine.job import EngineRun, RequestResult


def request_acceptance(run: EngineRun) -> list[RequestAcceptance]:
    """One record per request of ``run``, in prompt order; EngineError when the run is not
    speculative or its vLLM kept no per-request counters."""
    if run.counters is None:
        raise EngineError(f"engine run {run.label!r} did not speculate: no acceptance to split "
                          "by request", hint="pass a speculative configuration")
    missing = [i for i, r in enumerate(run.requests) if r.spec_histogram is None]
    if missing:
        raise EngineError(f"engine run {run.label!r}: vLLM {run.vllm_version} returned no "
                          f"per-request speculative counters ({len(missing)} of "
                          f"{len(run.requests)} requests)",
                          hint="per-request acceptance needs vLLM >= 0.32 "
                          "(per_request_spec_decode_metrics); upgrade vLLM")
    # a run with a time budget may stop before the last prompts: records for those it ran
    prompts = run.prompt_token_ids[:len(run.requests)]
    return [_record(p, r) for p, r in zip(prompts, run.requests, strict=True)]


def _record(prompt_ids: list[int], r: RequestResult) -> RequestAcceptance:
    return request_from_histogram(len(prompt_ids), len(r.token_ids), r.spec_histogram or [],
                                  int(r.spec_draft_tokens or 0))


def request_problems(run: EngineRun, records: list[RequestAcceptance]) -> list[str]:
    """Where the requests' counters do not add up to the run's engine-wide deltas (empty when
    they do): a vLLM that counts per request differently from its totals."""
    if run.counters is None:
        return []
    total = counters_from_histograms([r.spec_histogram or [0] for r in run.requests],
                                     [r.draft_tokens for r in records])
    return _diff(total, run.counters)


def _diff(per_request: SpecCounters, engine: SpecCounters) -> list[str]:
    out = []
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        a, b = getattr(per_request, name), getattr(engine, name)
        if a != b:
            out.append(f"{name}: requests sum to {a}, the engine counted {b}")
    width = max(len(per_request.accepted_per_pos), len(engine.accepted_per_pos))
    pa = list(per_request.accepted_per_pos) + [0] * (width - len(per_request.accepted_per_pos))
    pb = list(engine.accepted_per_pos) + [0] * (width - len(engine.accepted_per_pos))
    if pa != pb:
        out.append(f"accepted per position: requests sum to {pa}, the engine counted {pb}")
    return out


__all__ = ["request_acceptance", "request_problems"]
