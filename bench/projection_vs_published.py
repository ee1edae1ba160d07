"""speckit's projected throughput ratio against published measurements, scored leaving one
source out, in the user's mode.

    PYTHONPATH=$PWD python bench/projection_vs_published.py [--write-engine] [--ideal]

Every series in bench/published_points.py is projected with speckit.core.plan.projection.StepModel
(the model `speckit plan --acceptance` prints): the ideal GPU passes (speckit/data/step_costs.json,
fitted on an H200) plus the engine's named terms (speckit.core.plan.engine), fitted
(speckit.core.plan.fit.fit_log_params) each within its physical range
(speckit.core.plan.engine.PHYSICAL_RANGE), every source weighing the same.

Leave one source out: for each source, the terms are fitted on all the others and its points are
projected. Two modes, scored and printed apart:

* USER MODE (the headline): where the source publishes acceptance, its points are projected from
  that acceptance, as plan does with --acceptance / --al / a registry figure. M = mean
  |ln(projected / published)| over those left-out points, W the worst.
* SHAPE (labelled, not the user's mode): a source without acceptance gets the AL solved at its
  own lowest-concurrency point (that point matches by construction and is not scored), so the
  score tests only how the ratio moves with concurrency.

The band (speckit.core.plan.band) is a source offset plus the spread within a source: the offset
from the user-mode sources' mean residuals, the within-source spread from every source, per
concurrency regime and target kind; it is scored out of sample on the user-mode points (each
source against a band built without it) and the coverage is printed per cell.

Frozen before this scoring (issue #52), not chosen on it: the five engine terms and their ranges
(draft_pass_s ends at the first-principles 500 us again; the 1 ms of issue #45 came from a scored
source), routing locality fitted within its range, token_s up to 300 us as the named residual,
the weak prior, source weights, the two concurrency regimes x dense / MoE cells with the
three-source fallback, the band estimator. Those were set in issues #43 / #45 with the first ten
sources in view; the sources added later (NEW_SOURCES) never were, and their score is printed
on its own line.
--write-engine stores the terms fitted on every source, with that band, in
speckit/data/engine_costs.json.

The ideal step times do not depend on the engine terms (which add to them), so each point's
ideal plain and speculative steps are priced once (``prepare``) and a fit only redoes the
arithmetic of engine.EngineCosts.plain / speculative and the ratio over them.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from published_points import ANCHORS, EXCLUDED, SERIES, SOURCES, Series

from speckit.core.gpus import builtin_gpu as get_gpu
from speckit.core.plan import band as _band
from speckit.core.plan import engine as _engine
from speckit.core.plan import formats, steps
from speckit.core.plan.fit import fit_log_params
from speckit.core.plan.projection import StepModel, target_shape
from speckit.core.plan.schedule import al_from_per_position, geometric_rates
from speckit.io import datafiles

# each term is fitted within its physical range (docs/plan.md cites each), starting from the
# middle of that range (geometric), with a weak prior (PRIOR_WEIGHT per e-fold) towards it that
# keeps the terms the ratios cannot separate there
BOUNDS = dict(_engine.PHYSICAL_RANGE)
PRIOR_WEIGHT = 0.05
LEVEL = _band.LEVEL
# routing locality (engine.ROUTE_REUSE_RANGE) is fitted with the terms, as route_keep =
# 1 - route_reuse (the log-space fit needs a positive value), unless --route-reuse fixes it; the
# ideal speculative steps are priced at these values of it and interpolated in between
REUSE_LO, REUSE_HI = _engine.ROUTE_REUSE_RANGE
REUSE_GRID = tuple(REUSE_LO + (REUSE_HI - REUSE_LO) * i / 6 for i in range(7))
BOUNDS["route_keep"] = (1 - REUSE_HI, 1 - REUSE_LO)
# the sources the frozen choices were made with (issues #43 / #45); any other was added after
# the freeze and is out of sample for every choice, not only for the fit
FROZEN_ON = frozenset({
    "amd-rocm-eagle3-mi355x", "eagle3-paper", "vllm-issue-20780", "specforge-339",
    "vllm-blog-eagle31", "lmsys-amd-dsv3-mtp", "vllm-pr-16937", "specdrift-gptoss",
    "atom-minimax-m3", "atom-dsr1-mi300x"})
NEW_SOURCES = tuple(s for s in SOURCES if s not in FROZEN_ON)


@dataclass(frozen=True)
class Point:
    """One published point with its ideal (engine-free) step times priced once."""

    series: str
    source: str
    index: int
    batch: int
    k: int
    published: float
    base0: float  # seconds: ideal plain step
    spec0s: tuple[float, ...]  # seconds: ideal speculative step at each REUSE_GRID value
    layers: int
    passes: int  # drafter forward passes a step
    moe: bool
    al: float | None  # the AL the source publishes for this point (None: solved)

    @property
    def key(self) -> tuple[str, int]:
        return self.series, self.index

    def spec0(self, reuse: float) -> float:
        """The ideal speculative step (verify q = k+1 + drafting) at routing locality
        ``reuse``, linear between the priced grid values."""
        x = (min(max(reuse, REUSE_LO), REUSE_HI) - REUSE_LO) / (REUSE_HI - REUSE_LO) \
            * (len(REUSE_GRID) - 1)
        i = min(int(x), len(REUSE_GRID) - 2)
        return self.spec0s[i] + (self.spec0s[i + 1] - self.spec0s[i]) * (x - i)


def model_of(s: Series, engine: _engine.EngineCosts = _engine.IDEAL) -> StepModel:
    gpu = get_gpu(s.gpu)
    t = target_shape(s.target_config, gpu, where="published config",
                     expert_parallel=s.expert_parallel, tp=s.tp)
    const = replace(datafiles.load_step_constants(), gqa_pack="always")
    d = steps.DraftShape.from_dims(s.draft_dims)
    if s.draft_quant:
        d = replace(d, body=replace(d.body, weight_bytes=formats.weight_bytes(s.draft_quant),
                                    fp8_compute=formats.native_compute(gpu, s.draft_quant)),
                    head_weight_bytes=2.0)
    return StepModel(t, d, gpu, s.tp, s.tp, const, engine, s.kv_bytes)


def point_ks(s: Series) -> list[int]:
    return list(s.point_k) if s.point_k else [s.k] * len(s.points)


def prepare(series: list[Series] = SERIES) -> list[Point]:
    out = []
    for s in series:
        grid = [model_of(s, replace(_engine.IDEAL, route_reuse=x)) for x in REUSE_GRID]
        m = grid[0]
        for i, ((b, pub), k) in enumerate(zip(s.points, point_ks(s), strict=True)):
            al = s.point_al[i] if s.point_al else al_from_per_position(s.acceptance, k) \
                if s.acceptance is not None else None
            out.append(Point(s.name, s.source, i, b, k, pub, m.base(b, s.ctx),
                             tuple(g.spec(b, k, s.ctx, 0.0) for g in grid), m.target.layers,
                             k if m.draft and m.draft.style == "chain" else 1,
                             bool(m.target.experts), al))
    return out


def ratio(p: Point, e: _engine.EngineCosts, al: float) -> float:
    """StepModel.ratio, from the ideal steps priced once plus the engine terms."""
    base = p.base0 + e.plain(layers=p.layers, batch=p.batch)
    spec = p.spec0(e.route_reuse) + e.speculative(layers=p.layers, batch=p.batch, al=al,
                                                  draft_passes=p.passes)
    return al * base / spec


def solve_al(p: Point, e: _engine.EngineCosts) -> float:
    """The AL at which the model gives the published ratio at ``p`` (within [1, k+1]): the
    ratio is al x B / (S + token_s x batch x al), so al = r S / (B - r token_s batch)."""
    base = p.base0 + e.plain(layers=p.layers, batch=p.batch)
    spec = p.spec0(e.route_reuse) + e.speculative(layers=p.layers, batch=p.batch, al=0.0,
                                                  draft_passes=p.passes)
    den = base - p.published * e.token_s * p.batch
    al = p.published * spec / den if den > 0 else p.k + 1.0
    return min(max(al, 1.0), p.k + 1.0)


def project(points: list[Point], e: _engine.EngineCosts) -> dict[tuple[str, int], tuple]:
    """(series, index) -> (AL used, projected ratio, role): role "AL" for the point that sets
    a series' AL (matched by construction), else "scored"."""
    out: dict[tuple[str, int], tuple] = {}
    solved: dict[str, tuple[float, int]] = {}  # series -> (AL, at k)
    by_name = {s.name: s for s in SERIES}
    for p in points:
        if p.al is not None:
            out[p.key] = (p.al, ratio(p, e, p.al), "scored")
            continue
        share = by_name[p.series].al_from
        if p.series not in solved and not share:
            solved[p.series] = (solve_al(p, e), p.k)
            al, role = solved[p.series][0], "AL"
        else:
            al0, k0 = solved[share or p.series]
            al = al0 if p.k == k0 else 1.0 + sum(geometric_rates(al0, k0, positions=p.k))
            role = "scored"
        out[p.key] = (al, ratio(p, e, al), role)
    return out


def terms_of(vals: dict[str, float]) -> _engine.EngineCosts:
    """EngineCosts from fitted values: the seconds terms, and routing locality fitted as
    route_keep = 1 - route_reuse (a positive value, as the log-space fit needs)."""
    v = dict(vals)
    keep = v.pop("route_keep", None)
    return _engine.EngineCosts(**v, route_reuse=FIXED_REUSE[0] if keep is None else 1 - keep)


FIXED_REUSE: list[float] = [0.0]  # --route-reuse: the locality when it is not fitted


def fit(points: list[Point], *, bounds: dict | None = None) -> _engine.EngineCosts:
    """One set of terms over the scored points of ``points``, every source weighing the same
    (each point 1/sqrt(its source's scored points)), plus the weak prior."""
    bnd = bounds or BOUNDS
    start = {n: math.sqrt(lo * hi) for n, (lo, hi) in bnd.items()}
    scored = [p for p in points if p.source]
    proj0 = project(scored, _engine.IDEAL)
    counts: dict[str, int] = {}
    for p in scored:
        counts[p.source] = counts.get(p.source, 0) + (proj0[p.key][2] == "scored")

    def residuals(vals):
        e = terms_of(vals)
        proj = project(scored, e)
        data = [math.log(proj[p.key][1] / p.published) / math.sqrt(counts[p.source])
                for p in scored if proj[p.key][2] == "scored"]
        return data + [PRIOR_WEIGHT * math.log(vals[n] / start[n]) for n in start]

    best = fit_log_params(residuals, start, bnd, what="the published ratios")
    return replace(terms_of(best), source="fitted to published ratios within physical ranges "
                   "(bench/published_points.py, every source weighing the same; "
                   "bench/projection_vs_published.py)")


def leave_one_source_out(points: list[Point], *, ideal: bool = False,
                         bounds: dict | None = None) -> tuple[dict, dict]:
    """(terms fitted without each source, {(series, index): (AL, projected, role)} of every
    engine source's points projected by the fit that left their source out)."""
    terms, out = {}, {}
    for src in SOURCES:
        train = [p for p in points if p.source and p.source != src]
        e = _engine.IDEAL if ideal else fit(train, bounds=bounds)
        terms[src] = e
        mine = [p for p in points if p.source == src]
        out.update(project(mine, e))
    return terms, out


def residuals_of(points: list[Point], proj: dict) -> list[_band.Residual]:
    """ln(published / projected) at every point of the engine sources, with its mode: "user"
    (projected from the acceptance its source publishes), "shape" (AL solved at its source's
    anchor point) or "anchor" (that point: 0 by construction, never scored)."""
    out = []
    for p in points:
        if not p.source:
            continue
        role = proj[p.key][2]
        mode = "user" if p.al is not None else "anchor" if role == "AL" else "shape"
        out.append(_band.Residual(p.source, p.batch, p.moe,
                                  math.log(p.published / proj[p.key][1]), mode))
    return out


def summary(res: list[_band.Residual], band: _band.ResidualBand,
            mode: str = "user") -> tuple[float, float, float]:
    """(M, W, median band width in % of the ratio) over the ``mode`` points."""
    mine = [r for r in res if r.mode == mode]
    errs = [abs(r.value) for r in mine]
    widths = [math.exp(hi) - math.exp(lo) for lo, hi in (band.offsets(r.batch, r.moe)
                                                         for r in mine)]
    return statistics.mean(errs), max(errs), 100 * statistics.median(widths)


def summary_line(res: list[_band.Residual], band: _band.ResidualBand,
                 cov: _band.Coverage) -> str:
    """The user-mode, out-of-sample line the README and docs quote."""
    m, w, width = summary(res, band)
    user = [r for r in res if r.mode == "user"]
    n = len({r.source for r in user})
    return (f"user mode (published acceptance), leave-one-source-out: {n} sources, "
            f"{len(user)} points, mean |log ratio| {m:.3f}, worst {w:.3f}; {band.level:.0%} "
            f"band built without each source covers {cov.covered}/{cov.total} "
            f"({100 * cov.share:.0f}%), median width {width:.0f}%")


def shape_line(res: list[_band.Residual], cov: _band.Coverage) -> str:
    shape = [abs(r.value) for r in res if r.mode == "shape"]
    n = len({r.source for r in res if r.mode == "shape"})
    return (f"SHAPE ONLY (AL solved from each source's own lowest-concurrency ratio; not the "
            f"user's mode): {n} sources, {len(shape)} points, mean |log ratio| "
            f"{statistics.mean(shape):.3f}, worst {max(shape):.3f}; the same band covers "
            f"{cov.covered}/{cov.total}")


def _terms_text(e: _engine.EngineCosts, bnd: dict) -> str:
    def at(v, lo, hi):
        return " (upper bound)" if v >= hi * 0.999 else " (lower bound)" if v <= lo * 1.001 \
            else ""
    return ", ".join(f"{f}={getattr(e, f) * 1e6:.3g} us{at(getattr(e, f), *bnd[f])}"
                     for f in _engine.ENGINE_FIELDS) + \
        f", route_reuse={e.route_reuse:.3f}" + (at(e.route_reuse, REUSE_LO, REUSE_HI)
                                                 if "route_keep" in bnd else " (fixed)")


def report_sources() -> None:
    print(f"sources ({len(SOURCES)} included; inclusion rules in bench/published_points.py):")
    for sid, src in SOURCES.items():
        names = [s.name for s in SERIES if s.source == sid]
        print(f"- {sid}: {src.engine}, {src.gpu}; publishes: {src.publishes}; series "
              f"{', '.join(names)}; {src.citation}" + (f"; {src.notes}" if src.notes else ""))
    for s in SERIES:
        print(f"  {s.name}: {s.target} + {s.draft}, {s.gpu} TP={s.tp}, k={s.k}, ctx {s.ctx}"
              + "".join(f"; {n}" for n in s.notes))
    print(f"excluded ({len(EXCLUDED)}):")
    for what, why in EXCLUDED:
        print(f"- {what}: {why}")


def report_points(points: list[Point], loso: dict, within: dict) -> None:
    print(f"{'series':26s} {'B':>4s} {'k':>2s} {'role':6s} {'AL':>5s} {'published':>9s} "
          f"{'LOSO':>7s} {'log':>7s} {'within':>7s}")
    for p in points:
        if not p.source:
            continue
        al, r, role = loso[p.key]
        print(f"{p.series:26s} {p.batch:4d} {p.k:2d} {role:6s} {al:5.2f} {p.published:8.2f}x "
              f"{r:6.2f}x {math.log(r / p.published):+7.3f} {within[p.key][1]:6.2f}x")


def report_sources_table(res: list[_band.Residual], cov: _band.Coverage,
                         within: list[_band.Residual]) -> None:
    print(f"{'left-out source':24s} {'mode':5s} {'points':>6s} {'M':>6s} {'W':>6s} "
          f"{'bias':>7s} {'in band':>8s} {'within M':>8s}")
    for sid in SOURCES:
        mine = [r for r in res if r.source == sid and r.mode != "anchor"]
        wm = [abs(r.value) for r in within if r.source == sid and r.mode != "anchor"]
        mode = mine[0].mode
        c, n = cov.per_source.get(sid, (0, 0))
        band = f"{c:>4d}/{n:<3d}" if mode == "user" else f"{'-':>8s}"
        vals = [r.value for r in mine]
        print(f"{sid:24s} {mode:5s} {len(mine):6d} {statistics.mean(map(abs, vals)):6.3f} "
              f"{max(map(abs, vals)):6.3f} {statistics.mean(vals):+7.3f} {band} "
              f"{statistics.mean(wm):8.3f}" + ("  (added after the freeze)"
                                               if sid in NEW_SOURCES else ""))


def report_cells(cov: _band.Coverage, shape_cov: _band.Coverage) -> None:
    print("coverage per cell, each point against the band built without its source:")
    for c, (k, n, srcs) in cov.per_cell.items():
        print(f"  user  {c:12s}: {k}/{n} ({100 * k / n:.0f}%), {srcs} sources")
    for c, (k, n, srcs) in shape_cov.per_cell.items():
        print(f"  shape {c:12s}: {k}/{n} ({100 * k / n:.0f}%), {srcs} sources (not the "
              f"user's mode)")


def report_band(band: _band.ResidualBand) -> None:
    print(f"{band.level:.0%} band: ln(published / projected) = source offset + within-source "
          "part (speckit.core.plan.band):")
    for c in band.cells:
        hi = "+" if c.max_batch is None else f"-{c.max_batch}"
        print(f"  B={c.min_batch}{hi:4s} {c.kind:5s}: [{c.lo:+.3f}, {c.hi:+.3f}] -> x"
              f"{math.exp(c.lo):.2f}..x{math.exp(c.hi):.2f} (center {c.center:+.3f}, offset sd "
              f"{c.offset_sd:.3f}, within sd {c.within_sd:.3f} from {c.pool}: {c.sources} "
              f"sources, {c.points} points)")


def report_checks(points: list[Point], e: _engine.EngineCosts) -> None:
    ideal = [p for p in points if not p.source]
    for p in ideal:
        al, r, _ = project([p], _engine.IDEAL)[p.key]
        print(f"ideal-steps check {p.series} B={p.batch}: published {p.published:.2f}x, "
              f"projected {r:.2f}x ({math.log(r / p.published):+.3f})")
    const = replace(datafiles.load_step_constants(), gqa_pack="always")
    for _, g, tp, cfg, b, ctx, sec, src in ANCHORS:
        gpu = get_gpu(g)
        m = StepModel(target_shape(cfg, gpu, where="anchor", tp=tp), None, gpu, tp, tp, const, e)
        print(f"anchor {g} TP={tp} B={b}: plain step published {sec * 1e3:.2f} ms, model "
              f"{m.base(b, ctx) * 1e3:.2f} ms ({src})")


def run(points: list[Point], *, ideal: bool = False, bounds: dict | None = None) -> dict:
    """Everything the report prints: the full fit, the within-source residuals, the left-out
    projections, the band and its out-of-sample coverage (user mode; shape mode apart)."""
    bnd = bounds or BOUNDS
    full = _engine.IDEAL if ideal else fit(points, bounds=bnd)
    within = project(points, full)
    terms, loso = leave_one_source_out(points, ideal=ideal, bounds=bnd)
    res = residuals_of(points, loso)
    user = [r for r in res if r.mode == "user"]
    band = _band.build_band(res, level=LEVEL, source=(
        f"source offset over {len({r.source for r in user})} sources that publish acceptance "
        f"+ within-source spread of {len({r.source for r in res})} sources, leave-one-source-"
        f"out residuals ({len(res)} points; bench/results/projection_vs_published.txt)"))
    cov = _band.out_of_sample_coverage(res, level=LEVEL)
    shape_cov = _band.out_of_sample_coverage(res, level=LEVEL, scored=("shape",))
    return {"full": replace(full, band=band), "within": within, "terms": terms, "loso": loso,
            "residuals": res, "within_res": residuals_of(points, within), "band": band,
            "coverage": cov, "shape_coverage": shape_cov, "bounds": bnd}


def new_sources_line(res: list[_band.Residual]) -> str:
    new = [abs(r.value) for r in res if r.source in NEW_SOURCES and r.mode != "anchor"]
    return (f"sources added after the freeze ({', '.join(NEW_SOURCES)}): {len(new)} points, "
            f"mean |log ratio| {statistics.mean(new):.3f}, worst {max(new):.3f}"
            if new else "no source added after the freeze")


def report(points: list[Point], r: dict) -> None:
    print(f"engine terms fitted on every source: {_terms_text(r['full'], r['bounds'])}")
    for sid, e in r["terms"].items():
        print(f"  without {sid}: {_terms_text(e, r['bounds'])}")
    report_checks(points, r["full"])
    report_points(points, r["loso"], r["within"])
    report_sources_table(r["residuals"], r["coverage"], r["within_res"])
    report_band(r["band"])
    report_cells(r["coverage"], r["shape_coverage"])
    wm = [abs(x.value) for x in r["within_res"] if x.mode == "user"]
    print(f"within-source, user mode (fitted on every source, NOT out of sample): {len(wm)} "
          f"points, mean |log ratio| {statistics.mean(wm):.3f}, worst {max(wm):.3f}")
    print(new_sources_line(r["residuals"]))
    print(shape_line(r["residuals"], r["shape_coverage"]))
    print(summary_line(r["residuals"], r["band"], r["coverage"]))


def _bounds(args: list[str], ap: argparse.ArgumentParser) -> dict:
    bnd = dict(BOUNDS)
    for b in args:
        term, _, rng = b.partition("=")
        lo, _, hi = rng.partition(":")
        if term not in _engine.PHYSICAL_RANGE:
            ap.error(f"--bound {b}: a term of {sorted(_engine.PHYSICAL_RANGE)}")
        bnd[term] = (float(lo) * 1e-6, float(hi) * 1e-6)
    return bnd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-engine", action="store_true")
    ap.add_argument("--ideal", action="store_true", help="no engine terms")
    ap.add_argument("--bound", action="append", default=[], metavar="TERM=LO:HI",
                    help="fit TERM within LO..HI microseconds instead of its physical range "
                         "(to study the trade-off; not with --write-engine)")
    ap.add_argument("--route-reuse", type=float, metavar="X",
                    help="fix the routing locality at X instead of fitting it (0: independent "
                         "routing; to study it, not with --write-engine)")
    a = ap.parse_args()
    if a.write_engine and (a.ideal or a.bound or a.route_reuse is not None):
        ap.error("--write-engine writes the shipped fit: not with --ideal, --bound or "
                 "--route-reuse")
    report_sources()
    points = prepare()
    bnd = _bounds(a.bound, ap)
    if a.route_reuse is not None:
        FIXED_REUSE[0] = a.route_reuse
        bnd.pop("route_keep")
    r = run(points, ideal=a.ideal, bounds=bnd)
    report(points, r)
    if a.write_engine:
        datafiles.save_engine_costs(r["full"], datafiles.ENGINE_COSTS_PATH, extra={
            "fitted_on": sorted(SOURCES),
            "notes": "one set for every engine and GPU, fitted by "
                     "bench/projection_vs_published.py to every scored point of "
                     "bench/published_points.py; the band is the quantiles of the "
                     "leave-one-source-out residuals; bench/results/projection_vs_published.txt"})
        print(f"wrote {datafiles.ENGINE_COSTS_PATH.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
