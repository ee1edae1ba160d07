"""speckit.plan.plan (= speckit.api.plan): the memory plan and the projected speed in one result,
at the user's --concurrency, from the acceptance named (flag > report > published > prior), each
band spanning the acceptance's spread; offline, on speckit's bundled EAGLE-3 draft and its
registry entry's published figures."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import speckit.api as sk
from speckit.cli import main
from speckit.core.plan.answer import PlanReport, scaled_rates
from speckit.core.plan.schedule import al_from_per_position
from speckit.errors import UsageError

DRAFT = "smollm2-135m-eagle3"  # bundled; its registry entry publishes AL at k=3 (RECIPE.md)


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["plan", *args])
    return r.exit_code, r.output


def test_the_api_is_the_entry_point_and_returns_the_speed(offline):
    import speckit.plan

    assert sk.plan is speckit.plan.plan
    rep = sk.plan(draft=DRAFT, gpu="H100", concurrency=[8, 32])
    assert isinstance(rep, PlanReport) and rep.starts
    assert rep.acceptance.origin == "published" and DRAFT in rep.acceptance.label
    sp = rep.speed
    assert sp.columns == [8, 32] and all(t.batches == [8, 32] for t in sp.tables)
    assert sp.acceptance_source.startswith(f"published for {DRAFT}")


def test_done_when_plan_names_the_published_source_without_acceptance(offline):
    code, out = run("--draft", DRAFT, "--gpu", "h100", "--concurrency", "32,40")
    assert code == 0, out
    assert f"projected speed on H100 x TP=1 (published for {DRAFT}: AL" in out
    assert "RECIPE.md" in out and "B=32" in out and "B=40" in out
    assert "B=64" not in out and "B=1 " not in out


def test_the_order_flag_then_report_then_published(offline, tmp_path):
    rep = sk.plan(draft=DRAFT, gpu="H100", al=2.0, k=3)
    assert rep.acceptance.origin == "flag" and rep.speed.acceptance_spread is None
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"summary": {"per_position": [0.7, 0.5, 0.3], "k": 3}}))
    rep = sk.plan(draft=DRAFT, gpu="H100", acceptance_from=str(report))
    assert rep.acceptance.origin == "report" and str(report) in rep.acceptance.label
    assert rep.speed.tables[0].al[3] == pytest.approx(al_from_per_position([0.7, 0.5, 0.3], 3))
    with pytest.raises(UsageError, match="do not combine"):
        sk.plan(draft=DRAFT, gpu="H100", al=2.0, k=3, acceptance_from=str(report))


def test_dataset_picks_the_published_figure_and_a_missing_one_lists_the_others(offline):
    rep = sk.plan(draft=DRAFT, gpu="H100", dataset="speckit chat (built-in)")
    assert "speckit chat" in rep.acceptance.label and rep.acceptance.al == pytest.approx(2.339)
    code, out = run("--draft", DRAFT, "--gpu", "h100", "--dataset", "gsm8k")
    assert code == UsageError.exit_code and "publishes no acceptance on 'gsm8k'" in out
    assert "speckit code (built-in)" in out


def test_each_band_spans_the_acceptance_spread_and_the_model_error(offline):
    """The published chat..code spread (AL 2.339-2.824 at k=3) widens the model's band: the
    band under the spread contains the one with the figure alone."""
    spread = sk.plan(draft=DRAFT, gpu="H100", concurrency=[4])
    alone = sk.plan(draft=DRAFT, gpu="H100", concurrency=[4],
                    acceptance=list(spread.acceptance.rates))
    assert spread.speed.acceptance_spread == pytest.approx((2.339, 2.824))
    for a, b in zip(spread.speed.tables, alone.speed.tables, strict=True):
        for k in a.ks:
            (lo, hi), (lo0, hi0) = a.band[k][0], b.band[k][0]
            assert lo < lo0 and hi > hi0 and a.ratio[k] == pytest.approx(b.ratio[k])


def test_concurrency_beyond_max_num_seqs_is_refused(offline):
    code, out = run("--draft", DRAFT, "--gpu", "h100", "--max-num-seqs", "16",
                    "--concurrency", "8,32")
    assert code == UsageError.exit_code
    assert "--concurrency 32 exceeds max-num-seqs 16" in out and "--max-num-seqs 32" in out


def test_json_prints_the_report(offline):
    code, out = run("--draft", DRAFT, "--gpu", "h100", "--concurrency", "16", "--json")
    data = json.loads(out)
    assert code == 0 and set(data) >= {"plan", "speed", "acceptance", "adaptive_verification"}
    assert data["speed"]["columns"] == [16] and data["acceptance"]["origin"] == "published"
    assert data["adaptive_verification"] == []  # EAGLE-3: vLLM documents it for DSpark only


def test_scaled_rates_keep_the_shape_and_reach_the_al():
    rates = [0.8, 0.6, 0.4]
    low = scaled_rates(rates, al_from_per_position(rates, 3), 3, 2.2)
    assert al_from_per_position(low, 3) == pytest.approx(2.2)
    assert low[0] / low[2] == pytest.approx(2.0)


def test_concurrency_is_one_flag_a_list_in_plan_one_value_elsewhere(offline):
    r = CliRunner().invoke(main, ["registry", "resolve", "--target", "Qwen/Qwen3-8B",
                                  "--concurrency", "32,40"])
    assert r.exit_code == 2 and "takes one value" in r.output
    r = CliRunner().invoke(main, ["registry", "resolve", "--target", "Qwen/Qwen3-8B",
                                  "--gpu", "h100", "--concurrency", "32", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["ranking"]["concurrency"] == 32
