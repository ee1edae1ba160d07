"""speckit.core.context: AL per context bucket from per-request counters (hand-computed figures
and interval), the trained or declared length of a draft, and the shipped EAGLE-3 draft's
trained length recounted from the answers files its training record hashes."""

from __future__ import annotations

import hashlib
import json
import lzma
import math
from pathlib import Path

import pytest
from scipy import stats

from speckit.core import PACKAGE_DIR
from speckit.core.context import (
    INTERVAL_METHOD,
    RequestAcceptance,
    acceptance_by_context,
    context_table,
    past_training,
    trained_length,
)
from speckit.io.draftrecord import read_train_record, read_trained_length, recorded_targets

ROOT = Path(__file__).resolve().parents[2]
EAGLE3 = PACKAGE_DIR / "data" / "drafts" / "smollm2-135m-eagle3"


def _req(prompt, drafts, accepted, per_pos=()):
    return RequestAcceptance(prompt, 64, drafts, 3 * drafts, accepted, tuple(per_pos))


def test_al_per_bucket_with_a_t_interval_over_requests():
    short = [_req(500, 10, 20, (9, 7, 4)), _req(600, 10, 16, (8, 5, 3)),
             _req(700, 20, 30, (15, 10, 5)), _req(300, 10, 14, (7, 4, 3))]
    long = [_req(5000, 10, 6, (4, 2, 0)), _req(6000, 10, 8, (5, 2, 1))]
    got = acceptance_by_context([*short, *long, _req(900, 0, 0)], k=3)
    b = {x.bucket: x for x in got.buckets}
    assert [x.bucket for x in got.buckets] == ["[0, 1k)", "[1k, 2k)", "[2k, 4k)", "[4k, 8k)",
                                               ">= 8k"]
    s = b["[0, 1k)"]
    assert s.requests == 4 and s.requests_without_drafts == 1 and s.drafts == 50
    assert s.acceptance_length == pytest.approx(1 + 80 / 50)
    assert s.per_position == [pytest.approx(39 / 50), pytest.approx(26 / 50),
                              pytest.approx(15 / 50)]
    assert s.enough and s.note is None and s.prompt_tokens_median == 600
    # by hand: delta-method standard error of sum(a)/sum(d), t with n-1 = 3 df
    a, d = [20, 16, 30, 14], [10, 10, 20, 10]
    r = sum(a) / sum(d)
    se = math.sqrt(sum((x - r * y) ** 2 for x, y in zip(a, d, strict=True)) * 4 / 3) / sum(d)
    half = stats.t.ppf(0.975, 3) * se
    assert s.interval == (pytest.approx(1 + r - half, abs=1e-4),
                          pytest.approx(1 + r + half, abs=1e-4))
    lo = b["[4k, 8k)"]
    assert lo.acceptance_length == pytest.approx(1.7) and not lo.enough
    assert "only 2 requests" in lo.note and got.warnings == [f"[4k, 8k): {lo.note}"]
    assert b["[1k, 2k)"].requests == 0 and b["[1k, 2k)"].acceptance_length is None
    assert b["[1k, 2k)"].interval is None and got.interval_method == INTERVAL_METHOD
    assert [x.bucket for x in got.measured()] == ["[0, 1k)", "[4k, 8k)"]
    table = context_table(got)
    assert table[0] == ["context (tokens)", "requests", "AL", "95% interval", "note"]
    assert table[1][:3] == ["[0, 1k)", "4", "2.60"] and table[2][-1] == "not measured"
    assert table[4][2] == "1.70" and table[4][-1].startswith("only 2 requests")


def test_the_curve_is_plotted_with_the_trained_length(tmp_path):
    pytest.importorskip("matplotlib")
    from speckit.io.context_plot import write_context_plot

    reqs = [_req(n, 10, a) for n, a in ((500, 20), (600, 16), (1500, 10), (1600, 9),
                                        (5000, 6), (6000, 8))]
    t = trained_length({}, {"result": {"trained_context": {"max_tokens": 294}}})
    out = write_context_plot(acceptance_by_context(reqs, k=3), tmp_path / "c.png", trained=t)
    assert out is not None and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert write_context_plot(acceptance_by_context([]), tmp_path / "none.png") is None


def test_interval_stays_within_one_and_k_plus_one():
    reqs = [_req(100, 10, 30), _req(100, 10, 0), _req(100, 1, 3)]
    (b, *_) = acceptance_by_context(reqs, k=3).buckets
    assert 1.0 <= b.interval[0] <= b.acceptance_length <= b.interval[1] <= 4.0
    one = acceptance_by_context([_req(100, 5, 5)]).buckets[0]
    assert one.interval is None and one.acceptance_length == 2.0


def test_trained_length_from_the_record_else_declared():
    cfg = {"transformer_layer_config": {"max_position_embeddings": 8192, "rope_parameters": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}}}
    rec = {"result": {"trained_context": {"max_tokens": 294, "p50_tokens": 204,
                                          "p99_tokens": 277, "sequences": 68638}}}
    t = trained_length(cfg, rec)
    assert (t.tokens, t.kind) == (294, "trained") and "declared 8192" in t.details[-1]
    d = trained_length(cfg, {"result": {}})
    assert (d.tokens, d.kind) == (8192, "declared")
    assert "transformer_layer_config.max_position_embeddings" in d.source
    assert d.details == ["rope yarn, factor 4.0 over 2048 original positions"]
    theta = trained_length({"rope_scaling": {"rope_type": "default", "rope_theta": 1e5}})
    assert theta.details == ["rope default, theta 100000"]
    sw = trained_length({"max_position_embeddings": 32768, "sliding_window": 4096})
    assert sw.tokens == 32768 and "sliding window 4096" in sw.details[0]
    assert trained_length({}).kind == "unknown"
    assert trained_length({"max_position_embeddings": True}).kind == "unknown"


def test_past_training_warns_with_the_share():
    t = trained_length({}, {"result": {"trained_context": {"max_tokens": 300}}})
    assert past_training(t, [100, 200]) is None
    w = past_training(t, [100, 400, 5000, 50])
    assert w.startswith("2 of 4 prompts (50%) are longer than the 300 tokens the draft was "
                        "trained on")
    d = trained_length({"max_position_embeddings": 1000})
    assert "the draft declares" in past_training(d, [2000])
    assert past_training(trained_length({}), [10**6]) is None


def test_shipped_drafts_records():
    assert read_trained_length(EAGLE3, json.loads((EAGLE3 / "config.json").read_text())).tokens \
        == 294
    dflash = PACKAGE_DIR / "data" / "drafts" / "smollm2-135m-dflash"
    d = read_trained_length(dflash, json.loads((dflash / "config.json").read_text()))
    assert d.kind == "declared"  # its record names no trained context
    assert recorded_targets(EAGLE3, json.loads((EAGLE3 / "config.json").read_text())) == [
        ("smollm2-135m-instruct", "speckit-train.json recipe.target.id"),
        ("HuggingFaceTB/SmolLM2-135M-Instruct",
         "config.json speculators_config.verifier.name_or_path")]


@pytest.mark.slow
def test_shipped_eagle3_trained_context_recounts_from_its_answers_files():
    rec = read_train_record(EAGLE3)
    h, lengths = hashlib.sha256(), []
    for seed in (2, 1):  # the order recipe.answers hashes them in
        with lzma.open(ROOT / "benchmarks" / "data"
                       / f"smollm2-135m-seed{seed}.samples.jsonl.xz") as f:
            raw = f.read()
        h.update(raw)
        lengths += [len(r["prompt_ids"]) + len(r["response_ids"])
                    for r in map(json.loads, raw.splitlines())]
    assert h.hexdigest() == rec["recipe"]["answers"]
    lengths.sort()
    n = len(lengths)
    ctx = rec["result"]["trained_context"]
    assert ctx["sequences"] == n == rec["result"]["samples"]
    assert sum(lengths) == rec["result"]["tokens"]
    assert (ctx["max_tokens"], ctx["p50_tokens"], ctx["p99_tokens"]) == (
        lengths[-1], lengths[n // 2], lengths[int(n * 0.99)])
