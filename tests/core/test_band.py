"""The projected ratio's band: source-weighted quantiles of leave-one-source-out residuals, cells
that fall back to coarser pools below three sources, out-of-sample coverage on synthetic
residuals, and the engine_costs.json round trip."""

from __future__ import annotations

import json
import math

import pytest

from speckit.core.plan import band as bd
from speckit.core.plan import engine
from speckit.errors import FormatError
from speckit.io.datafiles import load_engine_costs, save_engine_costs


def R(src: str, batch: int, value: float, moe: bool = False) -> bd.Residual:
    return bd.Residual(src, batch, moe, value)


def test_quantile_equal_and_source_weights():
    assert bd.quantile([4.0, 1.0, 3.0, 2.0], 0.5) == pytest.approx(2.5)
    # Hazen positions (i - 0.5) / n: 0.1 of four values lies below the first one's 0.125
    assert bd.quantile([1.0, 2.0, 3.0, 4.0], 0.1) == 1.0
    assert bd.quantile([1.0, 2.0, 3.0, 4.0], 0.3) == pytest.approx(1.0 + (0.3 - 0.125) / 0.25)
    # three points of one source against one of another: weighted, each source holds half
    pool = [R("a", 1, 0.0), R("a", 2, 0.0), R("a", 4, 0.0), R("b", 1, 1.0)]
    w = bd.source_weights(pool)
    assert w == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1.0])
    vals = [r.value for r in pool]
    assert bd.quantile(vals, 0.8, w) > bd.quantile(vals, 0.8)
    with pytest.raises(ValueError):
        bd.quantile([], 0.5)


def test_cells_fall_back_below_three_sources():
    res = [R(s, b, v, moe) for s, b, v, moe in (
        ("a", 1, -0.1, False), ("b", 2, 0.1, False), ("c", 4, 0.0, False),  # dense, low: 3
        ("d", 2, 0.3, True), ("e", 4, 0.2, True),  # MoE, low: 2 sources -> regime (5)
        ("a", 16, -0.2, False), ("d", 64, 0.4, True))]  # high: 2 sources -> all
    band = bd.build_band(res, level=0.8)
    cell = {(c.min_batch, c.kind): c for c in band.cells}
    assert cell[(1, "dense")].pool == "cell" and cell[(1, "dense")].sources == 3
    assert cell[(1, "moe")].pool == "regime" and cell[(1, "moe")].sources == 5
    assert cell[(9, "dense")].pool == "all" and cell[(9, "moe")].points == len(res)
    lo, hi = band.offsets(2, moe=False)
    assert (lo, hi) == (cell[(1, "dense")].lo, cell[(1, "dense")].hi) and lo < 0 < hi
    assert band.offsets(100, moe=True) == (cell[(9, "moe")].lo, cell[(9, "moe")].hi)
    low, high = band.interval(1.5, 2, False)
    assert low == pytest.approx(1.5 * math.exp(lo)) and high == pytest.approx(1.5 * math.exp(hi))
    assert bd.build_band([]) is bd.NO_BAND and bd.NO_BAND.interval(1.3, 4, True) == (1.3, 1.3)


def test_out_of_sample_coverage_misses_a_source_unlike_the_others():
    # five sources within +-0.05 and one 0.5 off: the odd one is outside every band built
    # without it; the others fall inside the band the rest make
    res = [R(s, b, v) for s in "abcde" for b, v in ((1, -0.05), (4, 0.0), (16, 0.05))]
    res += [R("odd", b, 0.5) for b in (1, 4, 16)]
    cov = bd.out_of_sample_coverage(res, level=0.8)
    assert cov.per_source["odd"] == (0, 3)
    assert cov.total == len(res) and 0 < cov.share < 1
    # an 80% band of the other sources' pooled residuals cannot cover every one of theirs:
    # the edges of each source fall at the band's quantiles or outside
    assert cov.per_source["a"][0] >= 1
    wide = bd.out_of_sample_coverage(res, level=0.999)
    assert wide.covered >= cov.covered


def test_band_rides_in_engine_costs_json(tmp_path):
    band = bd.build_band([R(s, b, v, m) for s, b, v, m in (
        ("a", 1, -0.1, True), ("b", 2, 0.1, True), ("c", 4, 0.0, True), ("d", 32, 0.2, False))],
        source="test residuals")
    e = engine.EngineCosts(step_s=1e-4, token_s=2e-5, band=band, source="test")
    p = tmp_path / "e.json"
    save_engine_costs(e, p)
    doc = json.loads(p.read_text())
    assert "band" not in doc["engine"] and doc["band"]["level"] == 0.8
    back = load_engine_costs(p)
    assert back == e
    doc["band"]["cells"][0]["lo"] = 1.0  # lo above hi
    p.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="lo <= hi"):
        load_engine_costs(p)
    doc["band"] = {"cells": []}
    p.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="malformed band"):
        load_engine_costs(p)


def test_shipped_band_is_an_80_percent_band_in_every_cell():
    b = load_engine_costs().band
    assert b.level == 0.8 and "leave-one-source-out" in b.source
    assert {(c.min_batch, c.kind) for c in b.cells} == {(1, "dense"), (1, "moe"), (9, "dense"),
                                                        (9, "moe")}
    for c in b.cells:
        assert c.lo < c.hi and c.sources >= bd.MIN_SOURCES
