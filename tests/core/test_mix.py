"""speckit.core.plan.mix: speed for a traffic's context mix. With recorded AL per bucket (2.8 below
1k tokens, 1.6 at 4k-8k, both at k=3) the schedule for an all-long mix picks a smaller k than for
an all-short mix at the same concurrency; a single-bucket mix agrees with the projection's own
table; the averaging is time-weighted, checked by hand on a toy step model."""

from __future__ import annotations

import pytest

from speckit.core import methods
from speckit.core.gpus import builtin_gpu
from speckit.core.plan.mix import (
    al_by_k,
    fill_buckets,
    mix_buckets,
    mix_from_traffic,
    output_lengths,
    project_mix,
)
from speckit.core.plan.projection import StepModel, draft_shape, project_mix_speed, target_shape
from speckit.core.plan.schedule import geometric_rates, project
from speckit.errors import PlanError, UsageError
from speckit.io.datafiles import load_engine_costs, load_step_constants
from tests.support.plan_shapes import LLAMA31_70B, eagle3_llama70b

SHORT, LONG = "[0, 1k)", "[4k, 8k)"
# recorded: AL 2.8 below 1k and 1.6 at 4k-8k, both measured at k=3; other k from one constant
# conditional rate per bucket (what plan --al assumes)
AL = {SHORT: al_by_k(geometric_rates(2.8, 3, positions=6)),
      LONG: al_by_k(geometric_rates(1.6, 3, positions=6))}


@pytest.fixture(scope="module")
def model() -> StepModel:
    """Llama-3.1-70B with an EAGLE-3 head on 4 H100s, priced as plan prices it."""
    gpu = builtin_gpu("h100")
    t = target_shape(LLAMA31_70B, gpu, where="target", tp=4)
    cfg, tensors = eagle3_llama70b()
    d = draft_shape(methods.get("eagle3"), LLAMA31_70B, cfg, [(n, s) for n, _, s in tensors], t,
                    None, gpu, where="draft")
    return StepModel(t, d, gpu, 4, 4, load_step_constants(), load_engine_costs())


def _k_at(schedule, batch: int) -> int:
    return next(k for lo, hi, k in schedule if lo <= batch <= hi)


def test_an_all_long_mix_schedules_a_smaller_k_than_an_all_short_one(model):
    short = project_mix(model, mix_buckets({SHORT: 1.0}, AL), max_batch=256)
    long = project_mix(model, mix_buckets({LONG: 1.0}, AL), max_batch=256)
    both = project_mix(model, mix_buckets({SHORT: 1, LONG: 1}, AL), max_batch=256)
    assert _k_at(short.schedule, 1) > _k_at(long.schedule, 1) > 0
    for b in range(1, 257):
        assert _k_at(long.schedule, b) <= _k_at(short.schedule, b), b
        assert _k_at(long.schedule, b) <= _k_at(both.schedule, b) <= _k_at(short.schedule, b), b
    # the mixed projection's (concurrency x context) table holds each bucket's own best k
    rows = {r.bucket: r for r in both.by_context}
    assert rows[SHORT].best_k == short.best_k and rows[LONG].best_k == long.best_k
    assert rows[LONG].context == 6144 and rows[SHORT].context == 512
    assert both.schedule[0][0] == 1 and both.schedule[-1][1] == 256


def test_a_single_bucket_mix_is_the_projection_at_that_context(model):
    mix = project_mix(model, mix_buckets({LONG: 1.0}, AL, {LONG: 5000}), max_batch=64)
    al = AL[LONG]
    table = project(al, base_step=lambda b: model.base(b, 5000),
                    spec_step=lambda b, k: model.spec(b, k, 5000, al[k]), max_batch=64)
    assert mix.schedule == table.schedule and mix.best_k == table.best_k
    for k in mix.ks:
        assert mix.ratio[k] == pytest.approx(table.ratio[k])


class _Toy:
    """Seconds per step: plain 1 + ctx/1000, speculative 1.5x that plus 0.1 per k."""

    def base(self, batch, ctx):
        return 1 + ctx / 1000

    def spec(self, batch, k, ctx, al=1.0):
        return 1.5 * (1 + ctx / 1000) + 0.1 * k


def test_the_mix_ratio_is_time_weighted_not_an_average_of_ratios():
    al = {SHORT: {1: 1.8, 2: 2.4}, LONG: {1: 1.3, 2: 1.4}}
    p = project_mix(_Toy(), mix_buckets({SHORT: 3, LONG: 1}, al, {SHORT: 500, LONG: 6000}),
                    max_batch=1)
    w = {SHORT: 0.75, LONG: 0.25}
    for k in (1, 2):
        num = w[SHORT] * 1.5 + w[LONG] * 7.0
        den = (w[SHORT] * (1.5 * 1.5 + 0.1 * k) / al[SHORT][k]
               + w[LONG] * (1.5 * 7.0 + 0.1 * k) / al[LONG][k])
        assert p.ratio[k] == [pytest.approx(num / den)]
        mean_of_ratios = sum(w[b] * al[b][k] * t / (1.5 * t + 0.1 * k)
                             for b, t in ((SHORT, 1.5), (LONG, 7.0)))
        assert p.ratio[k][0] < mean_of_ratios  # the slow long steps weigh more in time
    assert p.best_k == [2] and p.schedule == [(1, 1, 2)]


def test_the_mix_from_traffic_weights_buckets_by_output_tokens():
    weights, ctx = mix_from_traffic([100, 300, 5000], [200, 100, 100])
    assert weights == {SHORT: pytest.approx(0.75), LONG: pytest.approx(0.25)}
    assert ctx == {SHORT: round(((100 + 100) + (300 + 50)) / 2), LONG: 5050}
    by_count, _ = mix_from_traffic([100, 300, 5000])
    assert by_count[SHORT] == pytest.approx(2 / 3)


def test_bad_mixes_are_usage_errors():
    with pytest.raises(UsageError, match="no acceptance for context bucket"):
        mix_buckets({SHORT: 1, LONG: 1}, {SHORT: AL[SHORT]})
    with pytest.raises(UsageError, match="no weight"):
        mix_buckets({SHORT: 0}, AL)
    with pytest.raises(UsageError, match="unknown context bucket"):
        mix_buckets({"[1k, 3k)": 1}, AL)
    with pytest.raises(UsageError, match="the same k"):
        project_mix(_Toy(), mix_buckets({SHORT: 1, LONG: 1}, {SHORT: {1: 1.5}, LONG: {2: 1.5}}),
                    max_batch=4)
    with pytest.raises(UsageError):
        mix_from_traffic([])


def test_output_lengths_fill_from_max_tokens_then_the_median_reply():
    assert output_lengths([10, None, 30], [None, 7, None]) == [10, 7, 30]
    assert output_lengths([10, None, 30, None]) == [10, 30, 30, 30]
    assert output_lengths([None, None]) is None  # nothing known: weigh by requests
    assert output_lengths([None, None], [None, 5]) == [1, 5]


def test_an_unmeasured_bucket_takes_its_nearest_measured_neighbour():
    al, notes = fill_buckets(AL, ["[0, 1k)", "[1k, 2k)", "[2k, 4k)", ">= 8k"])
    assert al["[1k, 2k)"] == AL[SHORT] and al[">= 8k"] == AL[LONG] and al["[2k, 4k)"] == AL[LONG]
    assert notes == ["[1k, 2k): not measured; [0, 1k)'s acceptance is used for it",
                     "[2k, 4k): not measured; [4k, 8k)'s acceptance is used for it",
                     ">= 8k: not measured; [4k, 8k)'s acceptance is used for it"]
    tie, _ = fill_buckets({SHORT: AL[SHORT], "[2k, 4k)": AL[LONG]}, ["[1k, 2k)"])
    assert tie["[1k, 2k)"] == AL[SHORT]  # one step from both: the shorter one
    with pytest.raises(UsageError, match="no context bucket"):
        fill_buckets({}, [SHORT])


def test_a_band_keeps_the_schedule_until_a_k_is_clearly_better():
    al = {SHORT: {1: 1.8, 2: 2.4}}
    b = mix_buckets({SHORT: 1}, al, {SHORT: 500})
    plain = project_mix(_Toy(), b, max_batch=2)
    assert plain.best_k == [2, 2] and plain.band == {} and plain.uncertain == {}
    # a band of x0.61..x1.65: k=2's ratio (1.47) does not lie wholly above plain decoding's 1.0
    wide = project_mix(_Toy(), b, max_batch=2, band=lambda batch: (-0.5, 0.5))
    assert wide.best_k == [0, 0] and wide.schedule == [(1, 2, 0)] and wide.break_even == 1
    lo, hi = wide.band[2][0]
    assert wide.ratio[2][0] == pytest.approx(2.4 * 1.5 / 2.45)
    assert lo == pytest.approx(wide.ratio[2][0] * 0.60653, rel=1e-4) and wide.uncertain[2][0]
    assert [r.best_k for r in wide.by_context] == [[0, 0]]


def test_the_kv_cache_caps_the_mix_at_its_mean_context(model):
    weights, ctx = {SHORT: 0.5, LONG: 0.5}, {SHORT: 600, LONG: 6000}
    full = project_mix_speed(model, weights=weights, contexts=ctx, al=AL, max_batch=256)
    capped = project_mix_speed(model, weights=weights, contexts=ctx, al=AL, max_batch=256,
                               kv_tokens=3300 * 10, lookahead=0)
    assert max(full.batches) == 256 and max(capped.batches) == 10
    assert capped.schedule[-1][1] == 256 and capped.schedule[0][0] == 1
    assert any("holds 10 sequences" in n for n in capped.notes)
    with pytest.raises(PlanError, match="holds no sequence"):
        project_mix_speed(model, weights=weights, contexts=ctx, al=AL, max_batch=8,
                          kv_tokens=100)
