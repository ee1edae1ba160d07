"""How far a projected throughput ratio may sit from a measured one: an interval read off the
model's leave-one-source-out residuals, and the out-of-sample score of that interval.

A residual is ln(published / projected) at one published point, projected by a fit that never
saw that point's source. The band of a level L (0.8: an 80% band) is the (1-L)/2 and (1+L)/2
quantiles of those residuals, applied to every ratio: [ratio * e^lo, ratio * e^hi]. The residuals
are split into cells by concurrency regime and target kind (dense / MoE) only where a cell keeps
MIN_SOURCES sources; a thinner cell takes its regime's residuals, then all of them. Pure:
bench/projection_vs_published.py computes the residuals and writes the cells into
speckit/data/engine_costs.json beside the engine terms; speckit.io.datafiles reads them back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from speckit.errors import FormatError

LEVEL = 0.8
REGIMES: tuple[tuple[int, int | None], ...] = ((1, 8), (9, None))  # concurrency ranges
KINDS = ("dense", "moe")
MIN_SOURCES = 3


@dataclass(frozen=True)
class Residual:
    """ln(published / projected) at one point left out of the fit with its whole source."""

    source: str
    batch: int
    moe: bool
    value: float


@dataclass(frozen=True)
class BandCell:
    min_batch: int
    max_batch: int | None  # None: no upper end
    kind: str  # "dense" | "moe"
    lo: float  # quantile of ln(published / projected)
    hi: float
    pool: str  # whose residuals gave lo/hi: "cell", "regime" (both kinds) or "all"
    sources: int
    points: int

    def holds(self, batch: int, moe: bool) -> bool:
        return (self.kind == ("moe" if moe else "dense") and self.min_batch <= batch
                and (self.max_batch is None or batch <= self.max_batch))


@dataclass(frozen=True)
class ResidualBand:
    """The interval every projected ratio carries; ``level`` 0 is no band ([ratio, ratio])."""

    level: float = 0.0
    cells: tuple[BandCell, ...] = ()
    source: str = "no band"

    def offsets(self, batch: int, moe: bool) -> tuple[float, float]:
        """(lo, hi) log offsets for a ratio at ``batch`` concurrency on a dense / MoE target."""
        for c in self.cells:
            if c.holds(batch, moe):
                return c.lo, c.hi
        return 0.0, 0.0

    def interval(self, ratio: float, batch: int, moe: bool) -> tuple[float, float]:
        lo, hi = self.offsets(batch, moe)
        return ratio * math.exp(lo), ratio * math.exp(hi)


NO_BAND = ResidualBand()


def quantile(values: Sequence[float], q: float,
             weights: Sequence[float] | None = None) -> float:
    """The q-quantile of ``values``, each carrying its weight (default 1): the values sorted,
    each placed at the midpoint of its share of the cumulative weight, linear in between and
    flat beyond the ends. Equal weights give the Hazen quantile ((i - 0.5) / n)."""
    if not values:
        raise ValueError("quantile of no values")
    w = list(weights) if weights is not None else [1.0] * len(values)
    pairs = sorted(zip(values, w, strict=True))
    total = sum(x for _, x in pairs)
    pos, run = [], 0.0
    for _, x in pairs:
        pos.append((run + x / 2) / total)
        run += x
    if q <= pos[0]:
        return pairs[0][0]
    for (v0, _), (v1, _), p0, p1 in zip(pairs, pairs[1:], pos, pos[1:], strict=False):
        if q <= p1:
            return v0 + (v1 - v0) * (q - p0) / (p1 - p0)
    return pairs[-1][0]


def source_weights(pool: Sequence[Residual]) -> list[float]:
    """1 / (the residual's source's residuals in the pool): every source weighs the same,
    the source being the unit that is independent of the others."""
    n: dict[str, int] = {}
    for r in pool:
        n[r.source] = n.get(r.source, 0) + 1
    return [1.0 / n[r.source] for r in pool]


def build_band(residuals: Sequence[Residual], *, level: float = LEVEL,
               regimes: Sequence[tuple[int, int | None]] = REGIMES,
               min_sources: int = MIN_SOURCES, source: str = "") -> ResidualBand:
    """One cell per (regime, kind), each from the narrowest pool holding ``min_sources``
    sources: its own residuals, else its regime's (both kinds), else all of them; the
    quantiles weigh every source of the pool the same (source_weights)."""
    if not residuals:
        return NO_BAND
    qlo, qhi = (1 - level) / 2, (1 + level) / 2
    cells = []
    for lo_b, hi_b in regimes:
        def in_regime(r: Residual, lo_b: int = lo_b, hi_b: int | None = hi_b) -> bool:
            return lo_b <= r.batch and (hi_b is None or r.batch <= hi_b)

        regime = [r for r in residuals if in_regime(r)]
        for kind in KINDS:
            own = [r for r in regime if r.moe == (kind == "moe")]
            pool, name = next(((p, n) for p, n in ((own, "cell"), (regime, "regime"))
                               if _sources(p) >= min_sources), (list(residuals), "all"))
            vals, wts = [r.value for r in pool], source_weights(pool)
            cells.append(BandCell(lo_b, hi_b, kind, quantile(vals, qlo, wts),
                                  quantile(vals, qhi, wts), name, _sources(pool), len(pool)))
    return ResidualBand(level, tuple(cells), source)


def _sources(pool: Sequence[Residual]) -> int:
    return len({r.source for r in pool})


@dataclass(frozen=True)
class Coverage:
    covered: int
    total: int
    per_source: dict[str, tuple[int, int]]  # source -> (covered, points)

    @property
    def share(self) -> float:
        return self.covered / self.total if self.total else 0.0


def out_of_sample_coverage(residuals: Sequence[Residual], *, level: float = LEVEL,
                           regimes: Sequence[tuple[int, int | None]] = REGIMES,
                           min_sources: int = MIN_SOURCES) -> Coverage:
    """How many residuals of each source fall inside a band built from the OTHER sources'
    residuals only: the band scored out of sample."""
    per: dict[str, tuple[int, int]] = {}
    for s in dict.fromkeys(r.source for r in residuals):
        band = build_band([r for r in residuals if r.source != s], level=level,
                          regimes=regimes, min_sources=min_sources)
        mine = [r for r in residuals if r.source == s]
        inside = 0
        for r in mine:
            lo, hi = band.offsets(r.batch, r.moe)
            inside += lo <= r.value <= hi
        per[s] = (inside, len(mine))
    return Coverage(sum(c for c, _ in per.values()), sum(n for _, n in per.values()), per)


def band_document(band: ResidualBand) -> dict[str, Any]:
    return {"level": band.level, "source": band.source,
            "cells": [asdict(c) for c in band.cells]}


def band_from(raw: Mapping[str, Any] | None, *, where: str) -> ResidualBand:
    """A ResidualBand from its engine_costs.json entry (None: no band); FormatError naming
    ``where`` for a malformed one."""
    if raw is None:
        return NO_BAND
    try:
        cells = tuple(BandCell(int(c["min_batch"]), None if c.get("max_batch") is None
                               else int(c["max_batch"]), str(c["kind"]), float(c["lo"]),
                               float(c["hi"]), str(c.get("pool", "")), int(c.get("sources", 0)),
                               int(c.get("points", 0))) for c in raw.get("cells", ()))
        level = float(raw["level"])
    except (KeyError, TypeError, ValueError) as e:
        raise FormatError(f"{where}: malformed band entry ({e})",
                          hint="bench/projection_vs_published.py --write-engine writes it") from e
    if not 0.0 < level < 1.0 or any(c.kind not in KINDS or c.lo > c.hi for c in cells):
        raise FormatError(f"{where}: band level must lie in (0, 1), each cell's kind be one of "
                          f"{KINDS} and its lo <= hi")
    return ResidualBand(level, cells, str(raw.get("source", "")))


__all__ = ["KINDS", "LEVEL", "MIN_SOURCES", "NO_BAND", "REGIMES", "BandCell", "Coverage",
           "Residual", "ResidualBand", "band_document", "band_from", "build_band",
           "out_of_sample_coverage", "quantile", "source_weights"]
