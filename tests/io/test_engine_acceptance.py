"""Per-request acceptance from an engine run: vLLM's per-request histograms become records that
must add up to the engine-wide counter deltas. The real engine's run is
tests/validate/test_validate_traffic_vllm.py (validate --traffic on long prompts, whose report
checks the same sums); here the pure parts, on hand-written histograms.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from speckit.core.metrics import RunTiming, SpecCounters
from speckit.errors import EngineError
from speckit.io.engine import EngineRun, RequestResult
from speckit.io.engine.acceptance import request_acceptance, request_problems


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
