"""plan's whole answer as one object: the memory plan, the projected speed at the user's
concurrency with each ratio's band (the acceptance spread and the model error together), where the
acceptance came from, and the adaptive-verification guidance. Pure: speckit.plan assembles it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from speckit.core.plan import schedule as _sched
from speckit.core.plan.report import PlanResult
from speckit.errors import UsageError


@dataclass
class PlanReport:
    """What `speckit plan` prints and `--json` writes (speckit.api.plan returns it)."""

    plan: PlanResult
    speed: Any = None  # speckit.core.plan.projection.SpeedResult
    traffic_speed: Any = None  # speckit.plan.TrafficSpeed (--traffic)
    speed_unpriced: str | None = None  # why no speed was projected, when none was
    acceptance: Any = None  # the acceptance the speed rests on (an AcceptanceChoice)
    adaptive_verification: list[str] = field(default_factory=list)  # DSpark guidance
    concurrency: list[int] | None = None  # the columns asked for (None: powers of two)

    @property
    def starts(self) -> bool:
        return self.plan.starts


def check_concurrency(values: Sequence[int] | None, max_num_seqs: int) -> list[int] | None:
    """The speed table's columns: ``values`` sorted and unique, each in [1, max_num_seqs]."""
    if values is None:
        return None
    cols = sorted({int(v) for v in values})
    if not cols or cols[0] < 1:
        raise UsageError(f"--concurrency {','.join(map(str, values))}: every value must be >= 1")
    if cols[-1] > max_num_seqs:
        raise UsageError(f"--concurrency {cols[-1]} exceeds max-num-seqs {max_num_seqs}: vLLM "
                         "never runs more requests at once",
                         hint=f"pass --max-num-seqs {cols[-1]} (or more) to plan that deployment")
    return cols


def without_k(choice: Any) -> bool:
    """A published AL that records neither its k nor per-position rates: it cannot say what
    other k accept (the prior is used instead, and the result says why)."""
    return choice is not None and choice.rates is None and choice.k is None


def scaled_rates(rates: Sequence[float], al: float, k: int, want: float) -> list[float]:
    """Per-position rates whose AL at ``k`` is ``want``: each rate scaled by one factor (the
    shape of the measured curve kept), clipped to [0, 1]."""
    if al <= 1.0:
        return [min(1.0, max(0.0, want - 1.0))] * len(rates) if want > 1.0 else \
            [0.0] * len(rates)
    f = (want - 1.0) / (al - 1.0)
    return [min(1.0, max(0.0, r * f)) for r in rates]


def widen(central: Any, low: Any, high: Any) -> Any:
    """``central`` (a SpeedResult) whose every band also spans the acceptance spread: at each
    (k, column) low = the low-acceptance ratio x e^(model lo), high = the high-acceptance ratio x
    e^(model hi); the schedule stays the central acceptance's."""
    tables = []
    for c, lo_t, hi_t in zip(central.tables, low.tables, high.tables, strict=True):
        band = {}
        for k in c.ks:
            rows = []
            for i, (b_lo, b_hi) in enumerate(c.band.get(k) or [(r, r) for r in c.ratio[k]]):
                r = c.ratio[k][i]
                f_lo = lo_t.ratio[k][i] / r if i < len(lo_t.ratio.get(k, [])) else 1.0
                f_hi = hi_t.ratio[k][i] / r if i < len(hi_t.ratio.get(k, [])) else 1.0
                rows.append((min(b_lo * f_lo, b_lo), max(b_hi * f_hi, b_hi)))
            band[k] = rows
        tables.append(replace(c, band=band,
                              uncertain={k: [lo < 1.0 < hi for lo, hi in v]
                                         for k, v in band.items()}))
    return replace(central, tables=tables)


def best_ratio_at(table: _sched.SpeedTable, concurrency: int
                  ) -> tuple[int, float, tuple[float, float]] | None:
    """(k, ratio, band) of the best projected k at ``concurrency`` in ``table`` (a column of
    it), or None when the column is not there (beyond what the KV cache holds)."""
    if concurrency not in table.batches:
        return None
    i = table.batches.index(concurrency)
    k = max(table.ks, key=lambda kk: (table.ratio[kk][i], -kk))
    band = table.band.get(k)
    return k, table.ratio[k][i], band[i] if band else (table.ratio[k][i],) * 2


__all__ = ["PlanReport", "best_ratio_at", "check_concurrency", "scaled_rates", "widen",
           "without_k"]
