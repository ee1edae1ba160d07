"""bench's AL by context from the acceptance summary vLLM returns with each response, rebuilt
from recorded per-request counters (tests/data/validate/longctx_eagle3_requests.json, the same
requests validate measured): the same buckets, ALs and intervals as validate's, pooled over an
arm's cells and seeds; a server that returns no summaries is said to, not guessed at."""

from __future__ import annotations

import json
from pathlib import Path

from speckit.bench.options import BenchOptions, Load
from speckit.bench.render import markdown
from speckit.bench.report import NO_PER_REQUEST, BenchReport, CellResult, context_acceptance
from speckit.bench.stats import RequestRecord, cell_figures
from speckit.core.context import TrainedLength, acceptance_by_context, request_from_histogram

DATA = Path(__file__).resolve().parents[1] / "data" / "validate" / "longctx_eagle3_requests.json"


def _records(spec: bool = True) -> list[RequestRecord]:
    rows = json.loads(DATA.read_text())["requests"]
    return [RequestRecord(True, r["prompt_tokens"], r["output_tokens"], 0.1, 1.0, [0.03] * 31,
                          spec={"acceptance_histogram": r["spec_histogram"],
                                "num_draft_tokens": r["spec_draft_tokens"]} if spec else None)
            for r in rows]


def _cell(arm, kind, k, recs, seed=0, temperature=0.0):
    fig = cell_figures(recs, duration_s=10.0, gpus=1, counters=None)
    return CellResult(arm, kind, k, Load(concurrency=2), temperature, False, seed, figures=fig)


def test_each_arm_gets_its_al_by_context_from_the_responses():
    recs = _records()
    opts = BenchOptions(target="t", concurrencies=[2], temperatures=[0.0, 0.7])
    r = BenchReport("started", "t", "d", "eagle3", {})
    r.trained_length = TrainedLength(294, "trained", "speckit-train.json")
    r.cells = [_cell("baseline", "baseline", 0, _records(spec=False)),
               _cell("eagle3 k=3", "static", 3, recs[:8], seed=0),
               _cell("eagle3 k=3", "static", 3, recs[8:], seed=1),
               _cell("eagle3 k=3", "static", 3, recs, temperature=0.7),  # not the first T
               _cell("ngram k=3", "untrained", 3, _records(spec=False))]
    context_acceptance(r, opts)
    assert list(r.acceptance_by_context) == ["eagle3 k=3"]
    got = r.acceptance_by_context["eagle3 k=3"]
    want = acceptance_by_context([request_from_histogram(
        x.prompt_tokens, x.output_tokens, x.spec["acceptance_histogram"],
        x.spec["num_draft_tokens"]) for x in recs], k=3)
    assert [(b.bucket, b.requests, b.acceptance_length, b.interval) for b in got.buckets] == \
        [(b.bucket, b.requests, b.acceptance_length, b.interval) for b in want.buckets]
    assert "16 responses at T=0" in got.source
    assert any(w.startswith("ngram k=3: ") and NO_PER_REQUEST in w for w in r.warnings)
    assert any("16 of 16 prompts" in w for w in r.warnings)
    md = markdown(r)
    assert "## Acceptance by context" in md and "| [2k, 4k) | 4 |" in md
    assert "trained on: 294 tokens" in md


def test_a_server_without_summaries_keeps_its_overall_al_only():
    r = BenchReport("endpoint", None, None, None, {})
    r.cells = [_cell("endpoint", "static", 3, _records(spec=False))]
    context_acceptance(r, BenchOptions(endpoint="http://x", concurrencies=[2]))
    assert r.acceptance_by_context == {} and NO_PER_REQUEST in r.warnings[0]
