"""The projected ratio's band: a source offset (the user-mode sources' mean residuals) plus the
within-source spread per concurrency cell, Student's t for a new source, cells that fall back to
coarser pools below three sources, out-of-sample coverage per source and per cell on synthetic
residuals, and the engine_costs.json round trip."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from speckit.core.plan import band as bd
from speckit.core.plan import engine
from speckit.errors import FormatError
from speckit.io.datafiles import load_engine_costs, save_engine_costs


def R(src: str, batch: int, value: float, moe: bool = False, mode: str = "user") -> bd.Residual:
    return bd.Residual(src, batch, moe, value, mode)


def test_t_quantile_matches_the_tables():
    # Student's t, 0.9 quantile: 3.078 (1 dof), 1.886 (2), 1.638 (3), 1.533 (4), 1.372 (10)
    for dof, want in ((1, 3.078), (2, 1.886), (3, 1.638), (4, 1.533), (10, 1.372)):
        assert bd.t_quantile(0.9, dof) == pytest.approx(want, abs=2e-3)
    assert bd.t_quantile(0.5, 5) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError):
        bd.t_quantile(0.9, 0)


def test_offsets_come_from_user_mode_sources_one_value_each():
    res = [R("a", 1, 0.1), R("a", 4, 0.3), R("b", 2, -0.2),  # user: means 0.2, -0.2
           R("s", 1, 0.0, mode="anchor"), R("s", 8, 0.9, mode="shape")]  # no offset
    off = bd.source_offsets(res)
    assert off.sources == 2 and off.mu == pytest.approx(0.0)
    assert off.tau == pytest.approx(statistics.stdev([0.2, -0.2]))
    assert bd.source_offsets([R("s", 8, 0.9, mode="shape")]).sources == 0


def test_deviations_remove_each_sources_mean_and_drop_single_points():
    res = [R("a", 1, 0.1), R("a", 4, 0.3), R("one", 2, 0.7),
           R("s", 1, 0.0, mode="anchor"), R("s", 8, -0.4, mode="shape")]
    devs = {(d.source, d.batch): d.value for d in bd.deviations(res)}
    assert devs == pytest.approx({("a", 1): -0.1, ("a", 4): 0.1, ("s", 1): 0.2,
                                  ("s", 8): -0.2})


def test_band_is_offset_plus_within_with_fallback_cells():
    res = [R(s, b, v, moe, mode) for s, b, v, moe, mode in (
        ("a", 1, -0.1, False, "user"), ("a", 4, 0.1, False, "user"),
        ("b", 2, 0.2, False, "user"), ("b", 8, 0.4, False, "user"),
        ("c", 1, 0.0, False, "anchor"), ("c", 2, -0.1, False, "shape"),
        ("d", 2, 0.3, True, "user"), ("d", 4, 0.1, True, "user"),
        ("e", 16, 0.0, True, "anchor"), ("e", 64, -0.3, True, "shape"))]
    band = bd.build_band(res, level=0.8)
    cell = {(c.min_batch, c.kind): c for c in band.cells}
    off = bd.source_offsets(res)
    assert off.sources == 3  # a, b, d
    t = bd.t_quantile(0.9, 2)
    dense = cell[(1, "dense")]  # a, b, c: three sources of deviations
    assert dense.pool == "cell" and dense.sources == 3
    devs = [d for d in bd.deviations(res) if d.batch <= 8 and not d.moe]
    w = bd.source_weights(devs)
    dc = sum(x * d.value for x, d in zip(w, devs, strict=True)) / sum(w)
    sc = math.sqrt(sum(x * (d.value - dc) ** 2 for x, d in zip(w, devs, strict=True)) / sum(w))
    half = t * math.sqrt(off.tau ** 2 * (1 + 1 / 3) + sc ** 2)
    assert (dense.lo, dense.hi) == pytest.approx((off.mu + dc - half, off.mu + dc + half))
    assert cell[(1, "moe")].pool == "regime"  # only d below 9: the regime's four sources
    assert cell[(9, "moe")].pool == "all" and cell[(9, "moe")].points == len(bd.deviations(res))
    lo, hi = band.offsets(2, moe=False)
    low, high = band.interval(1.5, 2, False)
    assert low == pytest.approx(1.5 * math.exp(lo)) and high == pytest.approx(1.5 * math.exp(hi))
    assert bd.build_band([]) is bd.NO_BAND and bd.NO_BAND.interval(1.3, 4, True) == (1.3, 1.3)
    # a source whose offset lies far from the others widens every cell: a new source is a new
    # draw of the offset, not more points of the old ones
    wider = bd.build_band([*res, R("f", 1, 0.9), R("f", 4, 1.1)])
    for a, b in zip(band.cells, wider.cells, strict=True):
        assert b.hi - b.lo > a.hi - a.lo


def test_out_of_sample_coverage_per_source_and_cell():
    # five user-mode sources with offsets within +-0.05 and one 0.6 off: the odd one falls
    # outside every band built without it, the others inside the band the rest make
    res = [R(s, b, off + v) for s, off in zip("abcde", (-0.05, -0.02, 0.0, 0.02, 0.05),
                                              strict=True)
           for b, v in ((1, -0.01), (4, 0.0), (16, 0.01))]
    res += [R("odd", b, 0.6) for b in (1, 4, 16)]
    res += [R("s", 2, 0.0, mode="anchor"), R("s", 32, -0.05, mode="shape")]
    cov = bd.out_of_sample_coverage(res, level=0.8)
    assert cov.per_source["odd"] == (0, 3) and "s" not in cov.per_source
    assert all(cov.per_source[s] == (3, 3) for s in "abcde")
    assert cov.total == 18 and cov.per_cell["B=1-8 dense"] == (10, 12, 6)
    assert cov.per_cell["B=9+ dense"] == (5, 6, 6)
    assert cov.cells_below(0.9) == ["B=1-8 dense", "B=9+ dense"] and cov.cells_below(0.8) == []
    shape = bd.out_of_sample_coverage(res, level=0.8, scored=("shape",))
    assert shape.total == 1 and list(shape.per_cell) == ["B=9+ dense"]


def test_band_rides_in_engine_costs_json(tmp_path):
    band = bd.build_band([R(s, b, v, m) for s, b, v, m in (
        ("a", 1, -0.1, True), ("a", 8, 0.0, True), ("b", 2, 0.1, True), ("b", 4, 0.3, True),
        ("c", 4, 0.0, True), ("c", 32, 0.2, False))], source="test residuals")
    e = engine.EngineCosts(step_s=1e-4, token_s=2e-5, band=band, source="test")
    p = tmp_path / "e.json"
    save_engine_costs(e, p)
    doc = json.loads(p.read_text())
    assert "band" not in doc["engine"] and doc["band"]["level"] == 0.8
    assert {"center", "offset_sd", "within_sd"} <= set(doc["band"]["cells"][0])
    back = load_engine_costs(p)
    assert back == e
    doc["band"]["cells"][0]["lo"] = 5.0  # lo above hi
    p.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="lo <= hi"):
        load_engine_costs(p)
    doc["band"] = {"cells": []}
    p.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="malformed band"):
        load_engine_costs(p)


def test_shipped_band_is_an_80_percent_band_in_every_cell():
    b = load_engine_costs().band
    assert b.level == 0.8 and "source offset" in b.source
    assert {(c.min_batch, c.kind) for c in b.cells} == {(1, "dense"), (1, "moe"), (9, "dense"),
                                                        (9, "moe")}
    for c in b.cells:
        assert c.lo < c.center < c.hi and c.offset_sd > 0 and c.sources >= bd.MIN_SOURCES
