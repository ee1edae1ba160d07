"""How far a projected throughput ratio may sit from a measured one: an interval built from the
model's leave-one-source-out residuals as a source offset plus the spread within a source, and the
out-of-sample score of that interval.

A residual is ln(published / projected) at one published point, projected by a fit that never
saw that point's source. Its ``mode`` says how the point was projected:

* "user": from the acceptance the source publishes (what plan does with `--acceptance`, `--al`,
  a validate report or a registry figure): the mode the band is for;
* "shape": with the AL solved at the source's own lowest-concurrency point (the "anchor", whose
  residual is 0 by construction): such a residual carries no source offset, only the shape of
  the ratio across concurrency.

The estimator (a one-way random-effects model, written down before it was scored):
ln(published / projected) = mu + u_s + e_sj, the source offset u_s ~ (0, tau^2) drawn anew for
every source, the within-source part e_sj ~ (d_c, s_c^2) depending on the concurrency cell c.

* mu and tau^2: the mean and the sample variance (ddof 1) of the user-mode sources' mean
  residuals, one value per source (S sources). Each source mean also carries its own
  within-source noise, so tau^2 is, if anything, too large.
* d_c and s_c^2: every residual minus its source's mean (shape sources counting their anchor's
  0), sources with two points or more; the source-weighted mean and variance of those deviations
  in the cell (a concurrency regime x dense / MoE), or, where the cell holds fewer than
  MIN_SOURCES sources, its regime's (both kinds), then all of them.
* The band of a level L: mu + d_c +- t * sqrt(tau^2 (1 + 1/S) + s_c^2), t the (1 + L) / 2
  quantile of Student's t with S - 1 degrees of freedom (a new source is one more draw of an
  offset estimated from S sources).

Pure: bench/projection_vs_published.py computes the residuals and writes the cells into
speckit/data/engine_costs.json beside the engine terms; speckit.io.datafiles reads them back.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from speckit.errors import FormatError

LEVEL = 0.8
REGIMES: tuple[tuple[int, int | None], ...] = ((1, 8), (9, None))  # concurrency ranges
KINDS = ("dense", "moe")
MIN_SOURCES = 3
MODES = ("user", "shape", "anchor")


@dataclass(frozen=True)
class Residual:
    """ln(published / projected) at one point left out of the fit with its whole source."""

    source: str
    batch: int
    moe: bool
    value: float
    mode: str = "user"  # MODES: published acceptance / AL solved at the anchor / the anchor


@dataclass(frozen=True)
class BandCell:
    min_batch: int
    max_batch: int | None  # None: no upper end
    kind: str  # "dense" | "moe"
    lo: float  # log offsets: the band is [ratio * e^lo, ratio * e^hi]
    hi: float
    pool: str  # whose within-source deviations: "cell", "regime" (both kinds) or "all"
    sources: int  # sources in that pool
    points: int
    center: float = 0.0  # mu + d_c
    offset_sd: float = 0.0  # tau
    within_sd: float = 0.0  # s_c

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


def t_quantile(q: float, dof: int) -> float:
    """Student's t quantile: exact for 1 and 2 degrees of freedom, else the Cornish-Fisher
    expansion around the normal quantile (within 0.001 of the tables from 3 up)."""
    if dof < 1:
        raise ValueError("t quantile needs one degree of freedom or more")
    if dof == 1:
        return math.tan(math.pi * (q - 0.5))
    if dof == 2:
        return (2 * q - 1) / math.sqrt(2 * q * (1 - q))
    z = statistics.NormalDist().inv_cdf(q)
    v = float(dof)
    return (z + (z ** 3 + z) / (4 * v) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * v ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * v ** 3))


@dataclass(frozen=True)
class Offsets:
    """The source-level part: the user-mode sources' mean residuals."""

    mu: float
    tau: float
    sources: int


def source_offsets(residuals: Sequence[Residual]) -> Offsets:
    """mu, tau over the user-mode sources' means (one value per source); no user-mode source:
    (0, 0, 0), one: its mean with tau 0."""
    means = [statistics.fmean(v) for v in _by_source(residuals, ("user",)).values()]
    if not means:
        return Offsets(0.0, 0.0, 0)
    tau = statistics.stdev(means) if len(means) > 1 else 0.0
    return Offsets(statistics.fmean(means), tau, len(means))


def _by_source(residuals: Sequence[Residual], modes: Sequence[str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in residuals:
        if r.mode in modes:
            out.setdefault(r.source, []).append(r.value)
    return out


def deviations(residuals: Sequence[Residual]) -> list[Residual]:
    """Every residual minus its source's mean (the user-mode residuals' mean for a user-mode
    source, the shape and anchor ones' for a shape source), for sources with two points or
    more: the within-source part."""
    out = []
    for modes in (("user",), ("shape", "anchor")):
        groups = _by_source(residuals, modes)
        for r in residuals:
            vals = groups.get(r.source, [])
            if r.mode in modes and len(vals) > 1:
                out.append(Residual(r.source, r.batch, r.moe, r.value - statistics.fmean(vals),
                                    r.mode))
    return out


def _in_regime(r: Residual, lo_b: int, hi_b: int | None) -> bool:
    return lo_b <= r.batch and (hi_b is None or r.batch <= hi_b)


def build_band(residuals: Sequence[Residual], *, level: float = LEVEL,
               regimes: Sequence[tuple[int, int | None]] = REGIMES,
               min_sources: int = MIN_SOURCES, source: str = "") -> ResidualBand:
    """One cell per (regime, kind): mu + d_c +- t * sqrt(tau^2 (1 + 1/S) + s_c^2) (the module
    docstring); d_c and s_c from the narrowest pool of within-source deviations holding
    ``min_sources`` sources, every source of the pool weighing the same."""
    off = source_offsets(residuals)
    devs = deviations(residuals)
    if off.sources == 0 or not devs:
        return NO_BAND
    t = t_quantile((1 + level) / 2, max(off.sources - 1, 1))
    cells = []
    for lo_b, hi_b in regimes:
        regime = [d for d in devs if _in_regime(d, lo_b, hi_b)]
        for kind in KINDS:
            own = [d for d in regime if d.moe == (kind == "moe")]
            pool, name = next(((p, n) for p, n in ((own, "cell"), (regime, "regime"))
                               if _sources(p) >= min_sources), (devs, "all"))
            w = source_weights(pool)
            dc = sum(x * d.value for x, d in zip(w, pool, strict=True)) / sum(w)
            sc = math.sqrt(sum(x * (d.value - dc) ** 2 for x, d in zip(w, pool, strict=True))
                           / sum(w))
            center = off.mu + dc
            half = t * math.sqrt(off.tau ** 2 * (1 + 1 / off.sources) + sc ** 2)
            cells.append(BandCell(lo_b, hi_b, kind, center - half, center + half, name,
                                  _sources(pool), len(pool), center, off.tau, sc))
    return ResidualBand(level, tuple(cells), source)


def _sources(pool: Sequence[Residual]) -> int:
    return len({r.source for r in pool})


def cell_of(r: Residual, regimes: Sequence[tuple[int, int | None]] = REGIMES) -> str:
    """The name of the (regime, kind) cell ``r`` falls in, e.g. "B=9+ moe"."""
    for lo_b, hi_b in regimes:
        if _in_regime(r, lo_b, hi_b):
            span = f"{lo_b}+" if hi_b is None else f"{lo_b}-{hi_b}"
            return f"B={span} {'moe' if r.moe else 'dense'}"
    return "outside"


@dataclass(frozen=True)
class Coverage:
    covered: int
    total: int
    per_source: dict[str, tuple[int, int]]  # source -> (covered, points)
    # cell name -> (covered, points, sources)
    per_cell: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    @property
    def share(self) -> float:
        return self.covered / self.total if self.total else 0.0

    def cells_below(self, floor: float, min_sources: int = MIN_SOURCES) -> list[str]:
        """Cells of ``min_sources`` sources or more whose coverage is under ``floor``."""
        return [c for c, (k, n, s) in self.per_cell.items()
                if s >= min_sources and n and k / n < floor]


def out_of_sample_coverage(residuals: Sequence[Residual], *, level: float = LEVEL,
                           regimes: Sequence[tuple[int, int | None]] = REGIMES,
                           min_sources: int = MIN_SOURCES,
                           scored: Sequence[str] = ("user",)) -> Coverage:
    """How many residuals of mode ``scored`` of each source fall inside a band built from the
    OTHER sources' residuals only (offsets, deviations and cells re-formed without it): the band
    scored out of sample, per source and per cell."""
    per: dict[str, tuple[int, int]] = {}
    cells: dict[str, list] = {}
    for s in dict.fromkeys(r.source for r in residuals if r.mode in scored):
        band = build_band([r for r in residuals if r.source != s], level=level,
                          regimes=regimes, min_sources=min_sources)
        mine = [r for r in residuals if r.source == s and r.mode in scored]
        inside = 0
        for r in mine:
            lo, hi = band.offsets(r.batch, r.moe)
            ok = band.level > 0 and lo <= r.value <= hi
            inside += ok
            c = cells.setdefault(cell_of(r, regimes), [0, 0, set()])
            c[0] += ok
            c[1] += 1
            c[2].add(s)
        per[s] = (inside, len(mine))
    return Coverage(sum(c for c, _ in per.values()), sum(n for _, n in per.values()), per,
                    {k: (v[0], v[1], len(v[2])) for k, v in sorted(cells.items())})


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
                               int(c.get("points", 0)), float(c.get("center", 0.0)),
                               float(c.get("offset_sd", 0.0)), float(c.get("within_sd", 0.0)))
                      for c in raw.get("cells", ()))
        level = float(raw["level"])
    except (KeyError, TypeError, ValueError) as e:
        raise FormatError(f"{where}: malformed band entry ({e})",
                          hint="bench/projection_vs_published.py --write-engine writes it") from e
    if not 0.0 < level < 1.0 or any(c.kind not in KINDS or c.lo > c.hi for c in cells):
        raise FormatError(f"{where}: band level must lie in (0, 1), each cell's kind be one of "
                          f"{KINDS} and its lo <= hi")
    return ResidualBand(level, cells, str(raw.get("source", "")))


__all__ = ["KINDS", "LEVEL", "MIN_SOURCES", "MODES", "NO_BAND", "REGIMES", "BandCell",
           "Coverage", "Offsets", "Residual", "ResidualBand", "band_document", "band_from",
           "build_band", "cell_of", "deviations", "out_of_sample_coverage", "quantile",
           "source_offsets", "source_weights", "t_quantile"]
