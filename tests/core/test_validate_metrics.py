"""speckit.core.metrics by hand: AL, AL(k), the step-cost model, best k, the lossless check."""

from __future__ import annotations

import pytest

from speckit.core.metrics import (
    ACCEPTED,
    DRAFT_TOKENS,
    DRAFTS,
    PER_POS,
    KPrediction,
    RunTiming,
    SpecCounters,
    al_from_per_position,
    best_k,
    calibrate_costs,
    conditional_acceptance,
    counters_from_histograms,
    counters_from_metrics,
    decode_steps,
    fit_step_costs,
    lossless_check,
    predict_decode_s,
    predict_sweep,
    ratio_stderr,
)


def test_counters_all_accepted():
    c = SpecCounters(10, 30, 30, [10, 10, 10])
    assert c.acceptance_length == 4.0
    assert c.acceptance_rate == 1.0
    assert c.per_position == [1.0, 1.0, 1.0]
    assert c.al_for_k(1) == 2.0 and c.al_for_k(2) == 3.0 and c.al_for_k(3) == 4.0
    assert c.problems(3) == []


def test_counters_ngram_run_from_vllm_md():
    # VLLM.md 4.3: ngram on CPU, drafts 14, draft tokens 38, accepted 38, per-pos [14, 14, 10]
    c = SpecCounters(14, 38, 38, [14, 14, 10])
    assert c.acceptance_length == pytest.approx(1 + 38 / 14)
    assert c.per_position == pytest.approx([1.0, 1.0, 10 / 14])
    assert c.problems(3) == []  # 38 draft tokens <= 3 * 14


def test_counters_no_drafts():
    c = SpecCounters(0, 0, 0, [0, 0])
    assert c.acceptance_length == 1.0
    assert c.acceptance_rate is None
    assert c.per_position == [0.0, 0.0]


def test_counter_inconsistencies_are_named():
    c = SpecCounters(4, 6, 9, [3, 4, 2])
    probs = " | ".join(c.problems(3))
    assert "accepted 9 > drafted 6" in probs
    assert "increase at position 1" in probs
    assert SpecCounters(4, 20, 4, [4, 0, 0]).problems(3) == ["draft tokens 20 > k*drafts 12"]
    assert "3 positions reported for k=2" in SpecCounters(4, 8, 4, [4, 0, 0]).problems(2)[0]


def test_counters_from_metric_snapshots():
    before = {DRAFTS: 5, DRAFT_TOKENS: 15, ACCEPTED: 8, PER_POS: [5, 3]}
    after = {DRAFTS: 15, DRAFT_TOKENS: 45, ACCEPTED: 19, PER_POS: [12, 7]}
    c = counters_from_metrics(before, after)
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (10, 30, 11)
    assert c.accepted_per_pos == [7, 4]
    # a first snapshot taken before any speculation has no spec metrics at all
    c0 = counters_from_metrics({}, after)
    assert c0.num_drafts == 15 and c0.accepted_per_pos == [12, 7]


def test_counters_from_per_request_histograms():
    # hist[j] = steps with j accepted: 1 step 0, 2 steps 1, 3 steps 2, 4 steps 3
    c = counters_from_histograms([[1, 2, 3, 4]], [30])
    assert c.num_drafts == 10
    assert c.num_accepted_tokens == 0 + 2 + 6 + 12
    assert c.accepted_per_pos == [9, 7, 4]  # >=1: 2+3+4, >=2: 3+4, >=3: 4
    assert c.problems(3) == []
    two = counters_from_histograms([[1, 2, 3, 4], [0, 0, 0, 2]], [30, 6])
    assert two.accepted_per_pos == [11, 9, 6] and two.num_drafts == 12


def test_al_from_per_position_and_conditional():
    pp = [0.8, 0.6, 0.3]
    assert al_from_per_position(pp, 0) == 1.0
    assert al_from_per_position(pp, 2) == pytest.approx(2.4)
    assert al_from_per_position(pp, 3) == pytest.approx(2.7)
    with pytest.raises(ValueError):
        al_from_per_position(pp, 4)
    assert conditional_acceptance(pp) == pytest.approx([0.8, 0.75, 0.5])
    assert conditional_acceptance([0.5, 0.0, 0.0]) == [0.5, 0.0, None]


def test_ratio_stderr():
    assert ratio_stderr([2, 4], [1, 2]) == 0.0  # every prompt has the same ratio
    # r = 7/4; residuals -0.5, 0.5; var = 0.5 * 2/1 = 1; se = 1/4
    assert ratio_stderr([3, 4], [2, 2]) == pytest.approx(0.25)
    assert ratio_stderr([3], [2]) is None


# ---- the step-cost model, worked by hand ------------------------------------------------------
# baseline: 4 requests, 104 tokens (100 decode tokens) in 10 s of decode -> t_T = 0.1 s
# speculative at K=3 (sequential): 25 drafts, 50 accepted, per-pos [20, 17, 13]; 100 decode tokens
#   -> 50 steps, 25 of them with a draft (phi = 0.5); decode = 25 * c + 25 * 0.1 = 8.75 -> c = 0.25
#   verify slope v = 0.01 -> t_d = (0.25 - 0.1 - 3 * 0.01) / 3 = 0.04
BASE = RunTiming(wall_s=12.0, prefill_s=2.0, decode_s=10.0, output_tokens=104, requests=4)
SPEC = RunTiming(wall_s=11.5, prefill_s=2.5, decode_s=8.75, output_tokens=104, requests=4)
CNT = SpecCounters(25, 75, 50, [20, 17, 13])


def test_fit_step_costs_sequential():
    assert decode_steps(SPEC, CNT) == 50
    c = fit_step_costs(base=BASE, spec=SPEC, counters=CNT, k=3, parallel=False,
                       verify_slope_s=0.01)
    assert c.target_step_s == pytest.approx(0.1)
    assert c.draft_fraction == pytest.approx(0.5)
    assert c.spec_step_s == pytest.approx(0.25)
    assert c.draft_step_s == pytest.approx(0.04)
    assert c.verify_step_s(3) == pytest.approx(0.13)
    assert c.spec_step_at(3) == pytest.approx(0.25)  # reproduces the measurement
    assert c.spec_step_at(1) == pytest.approx(0.15)
    assert c.notes == []


def test_fit_step_costs_parallel_and_missing_probe():
    c = fit_step_costs(base=BASE, spec=SPEC, counters=CNT, k=3, parallel=True,
                       verify_slope_s=0.01)
    assert c.draft_step_s == pytest.approx(0.12)  # one forward per step
    assert c.spec_step_at(1) == pytest.approx(0.1 + 0.01 + 0.12)
    n = fit_step_costs(base=BASE, spec=SPEC, counters=CNT, k=3, parallel=False,
                       verify_slope_s=None)
    assert n.verify_slope_s == 0.0 and n.draft_step_s == pytest.approx(0.05)
    assert any("not probed" in x for x in n.notes)


def test_predict_sweep_by_hand():
    costs = fit_step_costs(base=BASE, spec=SPEC, counters=CNT, k=3, parallel=False,
                           verify_slope_s=0.01)
    # k=1: AL 1.8, c 0.15 -> 100 / (0.5*1.8+0.5) * (0.5*0.15+0.5*0.1) = 8.928571
    assert predict_decode_s(costs, 1.8, 1, 100) == pytest.approx(100 / 1.4 * 0.125)
    preds = {p.k: p for p in predict_sweep(base=BASE, spec=SPEC, counters=CNT, costs=costs,
                                           ks=[1, 2, 3])}
    assert preds[3].wall_s == pytest.approx(11.5)  # the measured run
    assert preds[3].throughput_ratio == pytest.approx(12 / 11.5)
    assert preds[1].acceptance_length == pytest.approx(1.8)
    assert preds[1].wall_s == pytest.approx(2.75 + 100 / 1.4 * 0.125)
    # k=2: AL 2.48, c 0.2 -> 100 / 1.74 * 0.15
    assert preds[2].acceptance_length == pytest.approx(2.48)
    assert preds[2].throughput_ratio == pytest.approx(12 / (2.75 + 100 / 1.74 * 0.15))
    assert best_k(list(preds.values())).k == 2


def test_best_k_prefers_smaller_within_tolerance():
    ps = [KPrediction(1, 1.8, 0.1, 10, 1.50), KPrediction(2, 2.4, 0.1, 10, 1.505),
          KPrediction(3, 2.7, 0.1, 10, 1.40)]
    assert best_k(ps).k == 1
    assert best_k(ps, tolerance=0.0).k == 2
    with pytest.raises(ValueError):
        best_k([])


# ---- lossless check ---------------------------------------------------------------------------

def test_lossless_exact_drift_suspect_na():
    base = [list(range(40)), list(range(100, 140))]
    assert lossless_check(base, [list(b) for b in base], temperature=0).status == "exact"
    drift = [list(range(30)) + [999] * 10, list(range(100, 140))]
    r = lossless_check(base, drift, temperature=0)
    assert r.status == "drift" and r.exact_matches == 1 and r.first_divergence == [30, None]
    assert r.token_match_rate == pytest.approx(70 / 80)
    early = [[0, 1, 7] + [9] * 37, [100, 5] + [9] * 38]
    s = lossless_check(base, early, temperature=0)
    assert s.status == "suspect" and s.first_divergence == [2, 1]
    assert lossless_check(base, early, temperature=0.7).status == "n/a"
    # a speculative output that stops early differs in length: not exact
    short = lossless_check([[1, 2, 3]], [[1, 2]], temperature=0)
    assert short.exact_matches == 0 and short.first_divergence == [2]


def test_calibrate_costs_through_two_measured_k():
    # the run at k=1 measured c(1) = 0.19 s where the one-run model said 0.15 s:
    # 50 drafts, 40 accepted -> 60 steps (10 draft-free): decode = 50 * 0.19 + 10 * 0.1 = 10.5 s
    costs = fit_step_costs(base=BASE, spec=SPEC, counters=CNT, k=3, parallel=False,
                           verify_slope_s=0.01)
    spec1 = RunTiming(wall_s=13.0, prefill_s=2.5, decode_s=10.5, output_tokens=104, requests=4)
    cnt1 = SpecCounters(50, 50, 40, [40])
    cal = calibrate_costs(costs, k=1, spec=spec1, counters=cnt1)
    # slope (0.25 - 0.19) / 2 = 0.03 per k, intercept 0.16 = t_T + fixed -> fixed 0.06
    assert cal.fixed_s == pytest.approx(0.06)
    assert cal.draft_step_s == pytest.approx(0.02)  # slope minus the verify slope
    assert cal.spec_step_at(1) == pytest.approx(0.19)
    assert cal.spec_step_at(3) == pytest.approx(0.25)
    assert cal.spec_step_at(2) == pytest.approx(0.22)
    assert calibrate_costs(costs, k=3, spec=SPEC, counters=CNT) is costs
    par = calibrate_costs(fit_step_costs(base=BASE, spec=SPEC, counters=CNT, k=3, parallel=True,
                                         verify_slope_s=0.01), k=1, spec=spec1, counters=cnt1)
    assert par.verify_slope_s == pytest.approx(0.03) and par.fixed_s == 0.0
    assert par.spec_step_at(1) == pytest.approx(0.19) and par.spec_step_at(3) == pytest.approx(0.25)
