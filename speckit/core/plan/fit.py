"""Fit the step-cost model to step times measured on one machine, and check it on held-out points.

validate measures decode steps at a few batch sizes (with and without speculation); the fitted
constants then project every other batch size and k for that machine. The search is
``scipy.optimize.least_squares`` in log space with a bound on every constant and a robust loss,
so noisy or flat timings give finite constants or a PlanError, never an overflow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from speckit.core.gpus import GPU
from speckit.core.plan import steps as _steps
from speckit.errors import PlanError

# the constants a handful of points can pin down: bandwidth, compute, the fixed costs, and how
# memory and compute time combine (softness 1: they add, as on a CPU; large: they overlap)
FIT_FIELDS = ("bw_frac", "flop_frac", "attn_bw_frac", "attn_flop_frac", "attn_unit_bytes_per_s",
              "pass_overhead_s", "layer_overhead_s", "softness")

# (low, high) for each fitted value. Fractions of nominal rates may exceed 1 (the machine's nominal
# rates are guesses), but not by orders of magnitude; fixed costs stay between 10 ns and 10 s.
# Flat timings leave a rate unconstrained: the bound then holds it instead of letting it run away.
BOUNDS: dict[str, tuple[float, float]] = {
    "bw_frac": (1e-4, 1e2), "flop_frac": (1e-5, 1e2), "attn_bw_frac": (1e-5, 1e2),
    "attn_flop_frac": (1e-6, 1e2), "attn_unit_bytes_per_s": (1e6, 1e14),
    "pass_overhead_s": (1e-8, 10.0), "layer_overhead_s": (1e-9, 1.0),
    "softness": (1.001, 50.0),
}


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
    return GPU(name, vendor, memory_bytes, "measured machine", formats={},
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
    """Robust least squares on log step time over the points whose batch is not in ``holdout``."""
    fit_on = [p for p in points if p.batch not in holdout and _usable(p.seconds)]
    held = [p for p in points if p.batch in holdout and _usable(p.seconds)]
    if len(fit_on) < 2:
        raise PlanError(f"the step model needs >= 2 measured steps to fit (got {len(fit_on)})",
                        hint="measure more batch sizes")
    base = replace(start or _steps.StepConstants(), source="fitted to this run")

    def consts(vals: Mapping[str, float]) -> _steps.StepConstants:
        return replace(base, **vals)

    def residuals(vals: Mapping[str, float]) -> list[float]:
        c = consts(vals)
        return [math.log(model_seconds(p, target=target, draft=draft, gpu=gpu, constants=c)
                         / p.seconds) for p in fit_on]

    best = fit_log_params(residuals, {f: getattr(base, f) for f in FIT_FIELDS}, BOUNDS,
                          what="the measured step times")
    c = consts(best)
    pred = {(p.batch, p.k): model_seconds(p, target=target, draft=draft, gpu=gpu, constants=c)
            for p in points}
    err = {(p.batch, p.k): pred[(p.batch, p.k)] / p.seconds - 1 for p in points
           if _usable(p.seconds)}
    worst_fit = max(abs(err[(p.batch, p.k)]) for p in fit_on)
    worst_held = max((abs(err[(p.batch, p.k)]) for p in held), default=None)
    return FitResult(c, list(fit_on), list(held), pred, err, worst_fit, worst_held)


def fit_log_params(residuals: Callable[[Mapping[str, float]], Sequence[float]],
                   start: Mapping[str, float], bounds: Mapping[str, tuple[float, float]], *,
                   what: str, loss: str = "soft_l1", f_scale: float = 0.1) -> dict[str, float]:
    """Positive parameters that minimise ``residuals`` (log errors), each kept within its bounds.

    The search runs in log space (scipy's bounded trust-region least squares) with a robust loss,
    so one outlier point bends the fit less than squares would. Every term the step model gains
    fits through here. Returns finite values or raises PlanError naming ``what`` and why.
    """
    from scipy.optimize import least_squares

    names = list(start)
    lo = [math.log(bounds[n][0]) for n in names]
    hi = [math.log(bounds[n][1]) for n in names]
    x0 = [min(max(math.log(max(start[n], 1e-300)), a + 1e-9), b - 1e-9)
          for n, a, b in zip(names, lo, hi, strict=True)]

    def values(x: Sequence[float]) -> dict[str, float]:
        return {n: math.exp(v) for n, v in zip(names, x, strict=True)}

    def fun(x: Sequence[float]) -> list[float]:
        r = [float(v) for v in residuals(values(x))]
        # a non-finite residual (an overflowing term) counts as a very bad point, not a crash
        return [v if math.isfinite(v) else 1e6 for v in r]

    try:
        res = least_squares(fun, x0, bounds=(lo, hi), loss=loss, f_scale=f_scale,
                            x_scale="jac", max_nfev=400 * len(names))
    except (ValueError, ArithmeticError) as e:
        raise PlanError(f"could not fit the step model to {what}: {e}",
                        hint="the timings may be too noisy; rerun on a quieter machine") from e
    best = values(res.x)
    final = [float(v) for v in residuals(best)]
    if not all(math.isfinite(v) for v in (*best.values(), *final)):
        raise PlanError(f"could not fit the step model to {what}: the fit gave non-finite "
                        "constants", hint="the timings may be too noisy or flat to fit; rerun "
                        "on a quieter machine, or measure more batch sizes")
    return best


def _usable(seconds: float) -> bool:
    return math.isfinite(seconds) and seconds > 0


__all__ = ["BOUNDS", "FIT_FIELDS", "FitResult", "StepPoint", "fit_log_params", "fit_steps",
           "machine", "model_seconds"]
