"""speckit bench on recorded vLLM output: /metrics parsing, per-cell figures, the summary, the
k choice, and the error paths against a local stand-in server (tests/support/bench_stub.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from speckit.bench import BenchError, BenchOptions, bench
from speckit.bench.options import Load, parse_ints, parse_schedule
from speckit.bench.promtext import parse_metrics
from speckit.bench.report import BenchReport, CellResult, summarise
from speckit.bench.stats import (
    RequestRecord,
    Spread,
    cell_figures,
    counters_disagree,
    per_request_counters,
    percentile,
    ratio_spread,
    recommend_k,
    schedule_from_best,
)
from speckit.core.metrics import ACCEPTED, DRAFT_TOKENS, DRAFTS, PER_POS, counters_from_metrics
from speckit.errors import FormatError, UsageError
from tests.support.bench_stub import DATA, SUMMARY, Stub

METRICS = (DATA / "metrics_eagle3_k3.txt").read_text()


# ---- /metrics ---------------------------------------------------------------------------------

def test_recorded_metrics_parse_to_the_counters():
    m = parse_metrics(METRICS)
    assert m.is_vllm and m.has_spec_decode
    assert m.snapshot == {DRAFTS: 8, DRAFT_TOKENS: 24, ACCEPTED: 22, PER_POS: [8, 7, 7]}


def test_engines_are_summed_and_deltas_taken():
    two = METRICS + METRICS.replace('engine="0"', 'engine="1"')
    after = parse_metrics(two).snapshot
    c = counters_from_metrics(parse_metrics(METRICS).snapshot, after)
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (8, 24, 22)
    assert c.accepted_per_pos == [8, 7, 7]


def test_a_server_without_speculation_and_a_non_vllm_server():
    base = parse_metrics('vllm:num_requests_running{engine="0"} 0.0\n')
    assert base.is_vllm and not base.has_spec_decode and base.snapshot == {}
    other = parse_metrics("http_requests_total 12\n")
    assert not other.is_vllm


@pytest.mark.parametrize("bad", ["NaN", "-1.0", "1.5", "abc"])
def test_hostile_counter_values_are_refused(bad):
    with pytest.raises(FormatError, match="spec_decode_num_drafts_total"):
        parse_metrics(f'vllm:spec_decode_num_drafts_total{{engine="0"}} {bad}\n')


def test_hostile_position_labels_are_refused():
    line = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{}"}} 1.0\n'
    for pos in ("99999", "x", "-1"):
        with pytest.raises(FormatError, match="position"):
            parse_metrics(line.format(pos))


# ---- one cell -------------------------------------------------------------------------------

def _rec(out, ttft, lat, spec=None):
    return RequestRecord(True, 39, out, ttft, lat, [0.05] * (out - 1), spec=spec)


def test_percentiles_match_numpy():
    xs = [0.3, 0.1, 0.4, 0.15, 0.9]
    import numpy as np
    for q in (50, 90, 99):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    assert percentile([], 50) is None


def test_cell_figures_and_per_request_counters_agree_with_metrics():
    records = [_rec(30, 0.2, 1.65, SUMMARY), _rec(30, 0.3, 1.75, SUMMARY)]
    after = parse_metrics(METRICS.replace(" 8.0", " 16.0").replace(" 24.0", " 48.0")
                          .replace(" 22.0", " 44.0").replace(" 7.0", " 14.0")).snapshot
    fig = cell_figures(records, duration_s=2.0, gpus=2,
                       counters=counters_from_metrics({}, after))
    assert fig.output_tokens == 60 and fig.output_tok_s == 30.0 and fig.per_gpu_tok_s == 15.0
    assert fig.latency_ms["tpot"]["p50"] == pytest.approx(50.0)  # (1.65-0.2)/29 and (1.75-0.3)/29
    assert fig.latency_ms["ttft"]["p50"] == pytest.approx(250.0)
    assert fig.acceptance_length == pytest.approx(1 + 44 / 16)
    assert fig.k_drafted == 3.0
    assert per_request_counters(records).accepted_per_pos == [16, 14, 14]
    assert counters_disagree(fig) == []
    fig.counters.num_accepted_tokens -= 1
    assert any("num_accepted_tokens" in p for p in counters_disagree(fig))


def test_failed_requests_count_but_add_no_tokens():
    recs = [_rec(10, 0.1, 0.6), RequestRecord(False, error="HTTP 500")]
    fig = cell_figures(recs, duration_s=1.0, gpus=1, counters=None)
    assert (fig.requests, fig.failed, fig.output_tokens) == (2, 1, 10)


# ---- spread, ratio, k choice -----------------------------------------------------------------

def test_ratio_spread_propagates_both_spreads():
    r = ratio_spread(Spread(30.0, 3.0, 2), Spread(20.0, 2.0, 2))
    assert r.mean == 1.5 and r.sd == pytest.approx(1.5 * math.sqrt(0.01 + 0.01))


def test_recommend_k_prefers_the_smaller_k_within_tolerance():
    assert recommend_k({0: Spread(10, 0, 1), 1: Spread(15, 0, 1), 3: Spread(15.1, 0, 1)}) == 1
    assert recommend_k({0: Spread(10, 0, 1), 3: Spread(9, 0, 1)}) == 0


def test_schedule_from_measured_best_k():
    assert schedule_from_best({1: 3, 2: 3, 4: 1, 8: 0}, max_batch=8) == [
        [1, 3, 3], [4, 7, 1], [8, 8, 0]]
    assert schedule_from_best({1: 3, 8: 3}, max_batch=16) == [[1, 16, 3]]


def test_parse_schedule_and_lists():
    assert parse_schedule("1-2:3,3-8:1") == [[1, 2, 3], [3, 8, 1]]
    for bad in ("2-3:1", "1-2", "1-2:x", "1-4:2,3-8:1"):
        with pytest.raises(UsageError):
            parse_schedule(bad)
    with pytest.raises(UsageError, match="--concurrency"):
        parse_ints("1,two", "--concurrency")


def _cell(arm, kind, k, c, tok_s, seed=0, counters=None):
    recs = [_rec(30, 0.2, 1.65)]
    fig = cell_figures(recs, duration_s=30 / tok_s, gpus=1, counters=counters)
    return CellResult(arm, kind, k, Load(concurrency=c), 0.0, False, seed, figures=fig)


def test_summary_ratios_and_k_per_concurrency():
    opts = BenchOptions(target="t", concurrencies=[1, 4])
    r = BenchReport("started", "t", None, "eagle3", {})
    for seed, jitter in ((0, 0.0), (1, 1.0)):
        r.cells += [_cell("baseline", "baseline", 0, 1, 20 + jitter, seed),
                    _cell("e k=1", "static", 1, 1, 26 + jitter, seed),
                    _cell("e k=3", "static", 3, 1, 30 + jitter, seed),
                    _cell("baseline", "baseline", 0, 4, 60 + jitter, seed),
                    _cell("e k=1", "static", 1, 4, 66 + jitter, seed),
                    _cell("e k=3", "static", 3, 4, 50 + jitter, seed)]
    r.cells.append(CellResult("e k=3", "static", 3, Load(concurrency=4), 0.0, False, 2,
                              error="HTTP 500"))  # a failed cell is listed, not averaged
    summarise(r, opts)
    row = next(s for s in r.summary if s.arm == "e k=3" and s.concurrency == 1)
    assert row.seeds == 2 and row.output_tok_s.mean == pytest.approx(30.5)
    assert row.ratio.mean == pytest.approx(30.5 / 20.5) and row.ratio.sd > 0
    assert [(c.concurrency, c.measured_k) for c in r.k_choices] == [(1, 3), (4, 1)]
    assert r.measured_schedule == [[1, 3, 3], [4, 4, 1]]


# ---- error paths against the stand-in server -------------------------------------------------

def _opts(**kw):
    base = {"concurrencies": [1, 2], "seeds": [0], "prompts_per_concurrency": 2,
            "warmups_per_concurrency": 1,
            "max_tokens": 30, "cpu_threads": None}
    base.update(kw)
    return BenchOptions(**base)


def test_endpoint_counters_equal_the_per_request_sums(tmp_path):
    with Stub() as spec, Stub(speculates=False) as base:
        rep = bench(_opts(endpoint=spec.url, baseline_endpoint=base.url, gpus=8,
                          out=tmp_path / "o"))
    cells = {(c.arm, c.load.label): c for c in rep.cells}
    assert len(cells) == 4 and all(c.ok and not c.problems for c in rep.cells)
    c = cells[("endpoint", "c=2")].figures
    assert c.counters.num_drafts == 4 * 8 and c.per_request.num_drafts == 4 * 8
    assert c.counters.accepted_per_pos == [32, 28, 28] and c.per_gpu_tok_s == c.output_tok_s / 8
    assert cells[("baseline", "c=1")].figures.counters is None
    saved = json.loads((tmp_path / "o" / "report.json").read_text())
    assert len(saved["cells"]) == 4 and (tmp_path / "o" / "report.md").is_file()
    with Stub() as spec:  # --force replaces a bench output directory
        again = bench(_opts(endpoint=spec.url, concurrencies=[1], out=tmp_path / "o"),
                      force=True)
    assert len(again.cells) == 1
    assert len(json.loads((tmp_path / "o" / "report.json").read_text())["cells"]) == 1


def test_no_server_sees_a_prompt_twice_and_every_arm_gets_the_same(tmp_path):
    # 2 seeds x (c=1: 1 warm-up + 2 measured, c=2: 2 + 4) = 18 prompts per server, of 96
    with Stub() as spec, Stub(speculates=False) as base:
        rep = bench(_opts(endpoint=spec.url, baseline_endpoint=base.url, seeds=[0, 1]))
        got = (list(spec.prompts), list(base.prompts))
    assert all(c.ok for c in rep.cells) and not rep.warnings
    assert len(got[0]) == 18 and len(set(got[0])) == 18
    assert sorted(got[0]) == sorted(got[1])


def test_wrong_endpoint_is_a_clear_error(tmp_path):
    with Stub() as s:
        url = s.url
    with pytest.raises(BenchError, match="no vLLM OpenAI server answers") as e:
        bench(_opts(endpoint=url, out=tmp_path / "o"))
    assert e.value.report.cells == []
    assert json.loads((tmp_path / "o" / "report.json").read_text())["error"]


def test_endpoint_without_speculation_keeps_the_baseline_cells(tmp_path):
    with Stub(speculates=False) as plain, Stub(speculates=False) as base:
        with pytest.raises(BenchError, match="does not speculate") as e:
            bench(_opts(endpoint=plain.url, baseline_endpoint=base.url, out=tmp_path / "o"))
    kept = e.value.report.cells
    assert [c.arm for c in kept] == ["baseline", "baseline"] and all(c.ok for c in kept)
    saved = json.loads((tmp_path / "o" / "report.json").read_text())
    assert len(saved["cells"]) == 2 and "does not speculate" in saved["error"]


def test_server_dying_mid_run_keeps_the_measured_cells(tmp_path):
    # c=1 cell: 1 warm-up + 2 requests; the c=2 cell's warm-ups then kill it
    with Stub(die_after=4) as s:
        with pytest.raises(BenchError, match="stopped answering during c=2") as e:
            bench(_opts(endpoint=s.url, out=tmp_path / "o"))
    rep = e.value.report
    assert rep.cells[0].ok and rep.cells[0].load.label == "c=1"
    assert rep.cells[1].error and "c=1" in (tmp_path / "o" / "report.md").read_text()
    assert "kept" in e.value.hint


def test_cli_wrong_endpoint_json_error(tmp_path):
    with Stub() as s:
        url = s.url
    p = subprocess.run([sys.executable, "-m", "speckit", "bench", "--endpoint", url,
                        "--concurrencies", "1", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 6
    assert "no vLLM OpenAI server answers" in json.loads(p.stdout)["error"]
    assert "Traceback" not in p.stderr


def test_cli_usage_errors():
    p = subprocess.run([sys.executable, "-m", "speckit", "bench", "--endpoint", "http://x",
                        "-t", "t"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "either --target" in p.stderr


def test_stop_group_kills_the_whole_process_group():
    from speckit.bench.server import stop_group

    proc = subprocess.Popen(["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    child = int(proc.stdout.readline())
    stop_group(proc)
    time.sleep(0.2)
    assert proc.poll() is not None
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text()


def test_a_latency_metric_is_one_declaration(monkeypatch):
    """Adding a bench metric is one LatencyMetric entry: cell figures, summary rows and the
    markdown table follow it (issue 54 item 3)."""
    from speckit.bench import render, report, stats

    e2e = stats.LatencyMetric("e2e", "E2E", lambda r: [r.latency_s], ("p50",))
    monkeypatch.setattr(stats, "LATENCY_METRICS", (*stats.LATENCY_METRICS, e2e))
    monkeypatch.setattr(report, "LATENCY_METRICS", stats.LATENCY_METRICS)
    monkeypatch.setattr(render, "LATENCY_METRICS", stats.LATENCY_METRICS)
    recs = [stats.RequestRecord(True, 10, 30, ttft_s=0.2, latency_s=1.0 + i) for i in range(3)]
    fig = stats.cell_figures(recs, duration_s=4.0, gpus=1, counters=None)
    assert fig.latency_ms["e2e"]["p50"] == pytest.approx(2000.0)
    table = render.summary_table([report.SummaryRow(
        "baseline", "baseline", 0, "c=1", 1, None, 0.0, False, 1, stats.Spread(30.0, 0.0, 1),
        30.0, None, fig.latency_ms, None, [], None)])
    assert "E2E p50 ms" in table[0] and "| 2000.0 |" in table[2]
    assert table[0].count("|") == table[1].count("|") == table[2].count("|")
