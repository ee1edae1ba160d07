"""k schedule math: AL from rates, throughput ratio, best k, break-even, and vLLM's own validator
on every schedule speckit emits."""

from __future__ import annotations

import math

import pytest

from speckit.core.plan import schedule as sch
from speckit.errors import UsageError

RATES = [0.730, 0.521, 0.355]


def test_al_from_per_position_and_conditional():
    assert sch.al_from_per_position(RATES, 3) == pytest.approx(1 + 0.730 + 0.521 + 0.355)
    assert sch.al_from_per_position(RATES, 0) == 1.0
    cond = [0.8, 0.5, 0.5]
    assert sch.al_from_conditional(cond, 3) == pytest.approx(1 + 0.8 + 0.4 + 0.2)
    assert sch.per_position_from_conditional(cond) == pytest.approx([0.8, 0.4, 0.2])
    with pytest.raises(UsageError, match="needs 4"):
        sch.al_from_per_position(RATES, 4)


def test_rate_checks():
    with pytest.raises(UsageError, match="never rise"):
        sch.check_rates([0.5, 0.6])
    assert sch.check_rates([0.5, 0.6], kind="conditional") == [0.5, 0.6]
    with pytest.raises(UsageError, match="outside"):
        sch.check_rates([1.2])


def test_geometric_rates_reproduce_the_al_given():
    rates = sch.geometric_rates(2.5, 3, positions=5)
    assert sch.al_from_per_position(rates, 3) == pytest.approx(2.5, abs=1e-9)
    assert rates == sorted(rates, reverse=True) and len(rates) == 5
    with pytest.raises(UsageError, match="AL must lie"):
        sch.geometric_rates(4.5, 3)


def _synthetic(max_batch=256, overhead=0.0):
    """A toy machine: weights cost 1.0 per step, each token 0.01 (compute), a draft 0.05 k."""
    al = {k: sch.al_from_per_position(RATES, k) for k in (1, 2, 3)}
    return sch.project(al, base_step=lambda b: 1.0 + 0.01 * b,
                       spec_step=lambda b, k: 1.0 + 0.01 * b * (k + 1) + 0.05 * k + overhead,
                       max_batch=max_batch, batches=[1, 8, 32, 64, 128, 256])


def test_ratio_and_break_even_where_ratio_crosses_one():
    tb = _synthetic()
    assert tb.ratio[3][0] == pytest.approx(sch.al_from_per_position(RATES, 3) * 1.01 / 1.19)
    be = tb.break_even
    assert be is not None

    def best(b: int) -> float:
        return max(sch.throughput_ratio(tb.al[k], 1 + 0.01 * b * (k + 1) + 0.05 * k, 1 + 0.01 * b)
                   for k in tb.ks)

    assert best(be) <= 1.0 < best(be - 1)
    assert tb.schedule[-1] == (be, 256, 0)
    # k falls as concurrency rises: the deepest k first, off last
    ks = [k for _, _, k in tb.schedule]
    assert ks == sorted(ks, reverse=True) and ks[0] == 3
    # ratios fall with concurrency for every k
    for k in tb.ks:
        assert tb.ratio[k] == sorted(tb.ratio[k], reverse=True)


def test_never_pays_and_always_pays():
    off = _synthetic(overhead=5.0)
    assert off.schedule == [(1, 256, 0)] and off.break_even == 1
    al = {1: 1.9}
    on = sch.project(al, base_step=lambda b: 1.0, spec_step=lambda b, k: 1.05, max_batch=64)
    assert on.schedule == [(1, 64, 1)] and on.break_even is None


def test_ranges_and_own_check():
    assert sch.ranges([3, 3, 2, 2, 2, 0]) == [(1, 2, 3), (3, 5, 2), (6, 6, 0)]
    with pytest.raises(UsageError):
        sch.check_schedule([(2, 4, 1)])
    with pytest.raises(UsageError):
        sch.check_schedule([(1, 4, 1), (3, 8, 2)])


@pytest.mark.vllm
@pytest.mark.parametrize("overhead", [0.0, 0.3, 5.0])
def test_vllm_validator_accepts_emitted_schedules(overhead):
    from vllm.v1.spec_decode.dynamic.utils import (
        build_dynamic_sd_schedule_lookup,
        validate_and_normalize_dynamic_sd_schedule,
    )

    tb = _synthetic(overhead=overhead)
    as_json = [list(r) for r in tb.schedule]  # the form --speculative-config carries
    assert validate_and_normalize_dynamic_sd_schedule(as_json) == tb.schedule
    top = max(k for _, _, k in tb.schedule) or 1
    dense = build_dynamic_sd_schedule_lookup(as_json, vllm_max_batch_size=256,
                                             vllm_num_speculative_tokens=top)
    for lo, hi, k in tb.schedule:
        assert set(dense[lo:hi + 1]) == {k}


@pytest.mark.vllm
def test_vllm_validator_agrees_with_our_check_on_bad_schedules():
    from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

    for bad in ([(2, 4, 1)], [(1, 4, 1), (3, 8, 2)], [(1, 4, -1)], [(3, 1, 1)]):
        with pytest.raises(ValueError):
            validate_and_normalize_dynamic_sd_schedule([list(b) for b in bad])
        with pytest.raises(ValueError):
            sch.check_schedule(bad)


def test_pays_text_says_where_a_schedule_speculates():
    from speckit.core.plan.schedule import pays_text

    assert pays_text([(1, 32, 3)]) == "speculation pays up to 32"
    assert pays_text([(1, 5, 3), (6, 10, 2), (11, 32, 0)]) == "speculation pays up to 10"
    assert pays_text([(1, 4, 2), (5, 8, 0), (9, 16, 1)]) == \
        "speculation pays at concurrency 1-4, 9-16"
    # off at low concurrency, on higher up: never "pays up to"
    assert pays_text([(1, 227, 0), (228, 256, 3)]) == \
        "speculation pays at concurrency 228-256 (off below 228)"
    assert pays_text([(1, 64, 0)]) == "speculation does not pay at any concurrency"


def test_next_k_moves_only_for_a_band_wholly_above():
    band = (math.log(0.9), math.log(1.1))  # +-10%
    # from plain decoding: a k whose band lies above 1.0 is taken; one straddling 1.0 is not
    assert sch.next_k(0, {1: 1.15, 2: 1.05}, band) == 1
    assert sch.next_k(0, {1: 1.05, 2: 1.08}, band) == 0
    # between k: 1.30 vs 1.25 overlap (1.17-1.43 against 1.125-1.375): stay; 1.60 is clear
    assert sch.next_k(1, {1: 1.25, 2: 1.30}, band) == 1
    assert sch.next_k(1, {1: 1.25, 2: 1.60}, band) == 2
    # back to plain decoding only once the current k's band lies below 1.0
    assert sch.next_k(2, {1: 0.95, 2: 0.95}, band) == 2
    assert sch.next_k(2, {1: 0.85, 2: 0.88}, band) == 0
    # no band: the best ratio, as before
    assert sch.next_k(1, {1: 1.25, 2: 1.30}, (0.0, 0.0)) == 2


def test_projected_table_carries_bands_and_keeps_k_inside_them():
    al = {k: sch.al_from_per_position(RATES, k) for k in (1, 2, 3)}

    def table(offsets=None):
        return sch.project(al, base_step=lambda b: 1.0 + 0.01 * b,
                           spec_step=lambda b, k: 1.0 + 0.01 * b * (k + 1) + 0.05 * k,
                           max_batch=256, batches=[1, 8, 32, 64, 128, 256], band=offsets)

    plain, wide = table(), table(lambda b: (math.log(0.8), math.log(1.2)))
    assert plain.ratio == wide.ratio
    for k in wide.ks:
        for r, (lo, hi), u in zip(wide.ratio[k], wide.band[k], wide.uncertain[k], strict=True):
            assert lo == pytest.approx(0.8 * r) and hi == pytest.approx(1.2 * r)
            assert u == (lo < 1.0 < hi)
        assert plain.band[k] == [(r, r) for r in plain.ratio[k]]
    # the banded schedule changes k less often, and only to a k clearly better than the last
    changes = [len(t.schedule) for t in (plain, wide)]
    assert changes[1] < changes[0]
    assert sch.uncertain_batches(wide) and not sch.uncertain_batches(plain)
