"""Fit the step-cost model to step times measured on one machine, and check it on held-out points.

validate measures decode steps at a few batch sizes (with and without speculation); the fitted
constants then project every other batch size and k for that machine. Pure Python, no numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from speckit.core.gpus import GPU
from speckit.core.plan import steps as _steps
from speckit.errors import PlanError

# the constants a handful of points can pin down: bandwidth, compute, the fixed costs, and how
# memory and compute time combine (softness 1: they add, as on a CPU; large: they overlap)
FIT_FIELDS = ("bw_frac", "flop_frac", "attn_bw_frac", "attn_flop_frac", "attn_unit_bytes_per_s",
              "pass_overhead_s", "layer_overhead_s", "softness")


@dataclass(frozen=True)
class StepPoint:
    """One measured step: ``k`` 0 is plain decoding (q = 1), else verify q = k+1 plus drafting."""

    batch: int
    k: int
    ctx: int
    seconds: float


@dataclass(frozen=True)
class FitResult:
    constants: _steps.StepConstants
    fitted_on: list[StepPoint]
    held_out: list[StepPoint]
    predicted: dict[tuple[int, int], float]  # (batch, k) -> model seconds, for every point
    error: dict[tuple[int, int], float]  # (batch, k) -> (model - measured) / measured
    worst_fit_error: float
    worst_holdout_error: float | None


def machine(name: str, *, vendor: str = "cpu", memory_bytes: int = 0,
            bytes_per_s: float = 50e9, flops: float = 1e12) -> GPU:
    """A device for the step model whose nominal rates the fit scales (fractions may exceed 1)."""
    return GPU(name, vendor, memory_bytes, "measured machine", fp8=False, mxfp4="no",
               hbm_bytes_per_s=bytes_per_s, bf16_flops=flops, perf_source="fitted to this run")


def model_seconds(p: StepPoint, *, target: _steps.ModelShape, draft: _steps.DraftShape | None,
                  gpu: GPU, constants: _steps.StepConstants) -> float:
    t = _steps.target_step_time(target, batch=p.batch, q=p.k + 1, ctx=p.ctx, gpu=gpu,
                                constants=constants)
    if p.k and draft is not None:
        t += _steps.draft_step_time(draft, batch=p.batch, k=p.k, ctx=p.ctx, gpu=gpu,
                                    constants=constants)
    return t


def fit_steps(points: Sequence[StepPoint], *, target: _steps.ModelShape,
              draft: _steps.DraftShape | None, gpu: GPU,
              holdout: Sequence[int] = (),
              start: _steps.StepConstants | None = None) -> FitResult:
    """Least squares on log step time over the points whose batch is not in ``holdout``."""
    fit_on = [p for p in points if p.batch not in holdout and p.seconds > 0]
    held = [p for p in points if p.batch in holdout and p.seconds > 0]
    if len(fit_on) < 2:
        raise PlanError(f"the step model needs >= 2 measured steps to fit (got {len(fit_on)})",
                        hint="measure more batch sizes")
    base = replace(start or _steps.StepConstants(), source="fitted to this run")

    def consts(x: Sequence[float]) -> _steps.StepConstants:
        vals = {f: math.exp(v) for f, v in zip(FIT_FIELDS, x, strict=True)}
        vals["softness"] = 1.0 + vals["softness"]  # p >= 1 keeps it a norm
        return replace(base, **vals)

    def loss(x: Sequence[float]) -> float:
        c = consts(x)
        return sum(math.log(model_seconds(p, target=target, draft=draft, gpu=gpu, constants=c)
                            / p.seconds) ** 2 for p in fit_on)

    x0 = [math.log(max(getattr(base, f) - (1.0 if f == "softness" else 0.0), 1e-9))
          for f in FIT_FIELDS]
    best = _nelder_mead(loss, x0)
    c = consts(best)
    pred = {(p.batch, p.k): model_seconds(p, target=target, draft=draft, gpu=gpu, constants=c)
            for p in points}
    err = {(p.batch, p.k): pred[(p.batch, p.k)] / p.seconds - 1 for p in points if p.seconds > 0}
    worst_fit = max(abs(err[(p.batch, p.k)]) for p in fit_on)
    worst_held = max((abs(err[(p.batch, p.k)]) for p in held), default=None)
    return FitResult(c, list(fit_on), list(held), pred, err, worst_fit, worst_held)


def _nelder_mead(f: Callable[[Sequence[float]], float], x0: Sequence[float], *,
                 step: float = 1.0, iters: int = 600, tol: float = 1e-10) -> list[float]:
    """The downhill simplex; enough for a handful of parameters in log space."""
    n = len(x0)
    simplex = [list(x0)] + [[x0[j] + (step if j == i else 0.0) for j in range(n)]
                            for i in range(n)]
    vals = [f(x) for x in simplex]
    for _ in range(iters):
        order = sorted(range(n + 1), key=vals.__getitem__)
        simplex, vals = [simplex[i] for i in order], [vals[i] for i in order]
        if vals[-1] - vals[0] < tol:
            break
        centre = [sum(x[j] for x in simplex[:-1]) / n for j in range(n)]

        def towards(a: float, _c: list[float] = centre,
                    _w: list[float] = simplex[-1]) -> list[float]:
            return [c + a * (w - c) for c, w in zip(_c, _w, strict=True)]

        refl = towards(-1.0)
        fr = f(refl)
        if fr < vals[0]:
            exp = towards(-2.0)
            fe = f(exp)
            simplex[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            simplex[-1], vals[-1] = refl, fr
        else:
            con = towards(0.5)
            fc = f(con)
            if fc < vals[-1]:
                simplex[-1], vals[-1] = con, fc
            else:  # shrink towards the best point
                simplex = [simplex[0]] + [[b + 0.5 * (v - b) for b, v in
                                           zip(simplex[0], x, strict=True)] for x in simplex[1:]]
                vals = [vals[0]] + [f(x) for x in simplex[1:]]
    return simplex[min(range(n + 1), key=vals.__getitem__)]


__all__ = ["FIT_FIELDS", "FitResult", "StepPoint", "fit_steps", "machine", "model_seconds"]
