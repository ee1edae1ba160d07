"""How sure a measured throughput ratio is: 95% intervals for the ratios validate and bench
measure, and the rule that turns an interval into "pays", "does not pay" or "cannot tell".

Every interval is a Student-t interval on the log of the ratio (ratios multiply, so their noise is
symmetric in log space); each constructor names its method in ``Interval.method`` so a report can
say how it was made. Pure arithmetic: the t quantile comes from scipy.stats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95

PAYS, DOES_NOT_PAY, CANNOT_TELL = "pays", "does not pay", "cannot tell"


@dataclass(frozen=True)
class Interval:
    """A 95% interval around a measured ratio, from ``n`` samples by ``method``."""

    lo: float
    hi: float
    n: int  # samples behind it
    unit: str  # what they are: "prompts", "seeds", "rounds", "fitted points"
    method: str  # e.g. "t-interval, jackknife over 32 paired prompts"

    def contains(self, x: float) -> bool:
        return self.lo <= x <= self.hi


def t_quantile(dof: float) -> float:
    """The two-sided 95% Student-t critical value for ``dof`` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(0.5 + CONFIDENCE / 2, dof))


def around(point: float, log_se: float, dof: float, n: int, unit: str,
           method: str) -> Interval | None:
    """point x exp(+-t * log_se); None without a usable spread (fewer than 2 samples)."""
    if not (point > 0 and dof >= 1 and math.isfinite(log_se) and log_se >= 0):
        return None
    half = t_quantile(dof) * log_se
    return Interval(point * math.exp(-half), point * math.exp(half), n, unit, method)


def paired_ratio_interval(point: float, base: Sequence[tuple[float, float]],
                          spec: Sequence[tuple[float, float]]) -> Interval | None:
    """The throughput ratio of two runs over the same prompts, from each prompt's (output tokens,
    seconds) in both: the jackknife standard error of log(sum tok_spec / sum s_spec /
    (sum tok_base / sum s_base)) over the paired prompts, a t-interval with n - 1 degrees of
    freedom, centred on ``point`` (the runs' wall-clock ratio)."""
    pairs = [(b, s) for b, s in zip(base, spec, strict=False)
             if b[0] > 0 and b[1] > 0 and s[0] > 0 and s[1] > 0]
    n = len(pairs)
    if n < 2:
        return None
    tot = [sum(p[0][0] for p in pairs), sum(p[0][1] for p in pairs),
           sum(p[1][0] for p in pairs), sum(p[1][1] for p in pairs)]
    loo = [math.log((tot[2] - st) / (tot[3] - ss)) - math.log((tot[0] - bt) / (tot[1] - bs))
           for (bt, bs), (st, ss) in pairs]  # log ratio with each prompt left out
    mean = sum(loo) / n
    se = math.sqrt((n - 1) / n * sum((x - mean) ** 2 for x in loo))
    return around(point, se, n - 1, n, "prompts",
                  f"95% t-interval, jackknife over {n} paired prompts")


def welch_ratio_interval(point: float, num: Sequence[float], den: Sequence[float],
                         what: str = "rounds") -> Interval | None:
    """``point`` = a ratio of num to den (each a few repeated timings): Welch's t-interval on
    log(num) - log(den), centred on ``point``."""
    a = [math.log(x) for x in num if x > 0]
    b = [math.log(x) for x in den if x > 0]
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = _var(a) / len(a), _var(b) / len(b)
    if va + vb == 0:
        return Interval(point, point, len(a) + len(b), what,
                        f"{len(a)} + {len(b)} {what}, no spread")
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return around(point, math.sqrt(va + vb), dof, len(a) + len(b), what,
                  f"95% Welch t-interval over {len(a)} + {len(b)} {what}")


def pooled_log_sd(groups: Sequence[tuple[float, float, int]]) -> tuple[float, int] | None:
    """The log-scale noise of one run's cells pooled over every group of repeats: groups are
    (mean, sd, n) of a cell's repeats (the sd of log x is sd/mean to first order). Returns
    (sd, degrees of freedom), or None when no group was repeated."""
    ss = dof = 0.0
    for mean, sd, n in groups:
        if n >= 2 and mean > 0:
            ss += (n - 1) * (sd / mean) ** 2
            dof += n - 1
    if dof < 1:
        return None
    return math.sqrt(ss / dof), int(dof)


def pooled_ratio_interval(point: float, n_num: int, n_den: int,
                          pooled: tuple[float, int] | None) -> Interval | None:
    """mean(num)/mean(den) of n_num and n_den repeats, with the pooled log noise of the run."""
    if pooled is None or n_num < 1 or n_den < 1:
        return None
    sd, dof = pooled
    return around(point, sd * math.sqrt(1 / n_num + 1 / n_den), dof, min(n_num, n_den), "seeds",
                  f"95% t-interval, seed-to-seed noise pooled over the run's cells ({dof} d.f.)")


def classify(iv: Interval | None) -> str:
    """PAYS when the interval lies above 1, DOES_NOT_PAY when below, else CANNOT_TELL (and
    CANNOT_TELL without an interval: one measurement decides nothing)."""
    if iv is None:
        return CANNOT_TELL
    if iv.lo > 1.0:
        return PAYS
    if iv.hi < 1.0:
        return DOES_NOT_PAY
    return CANNOT_TELL


def shown(ratio: float, iv: Interval | None, *, digits: int = 2) -> str:
    """ "0.85x (0.78-0.93, 32 prompts)", or "0.85x (no interval)"."""
    f = f"{{:.{digits}f}}"
    if iv is None:
        return f"{f.format(ratio)}x (no interval: one measurement)"
    return f"{f.format(ratio)}x ({f.format(iv.lo)}-{f.format(iv.hi)}, {iv.n} {iv.unit})"


def _var(xs: Sequence[float]) -> float:
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
