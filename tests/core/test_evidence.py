"""speckit.core.evidence: the 95% intervals validate and bench put on a throughput ratio, checked
against scipy's own tests and a hand-made jackknife, and the pays / does not pay / cannot tell
rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from speckit.core import evidence as ev


def test_paired_jackknife_matches_a_direct_computation():
    base = [(64, 3.0), (64, 3.2), (60, 2.8), (64, 5.1), (50, 2.0)]
    spec = [(64, 1.9), (64, 2.2), (60, 1.5), (64, 2.0), (50, 1.4)]
    point = 1.6
    iv = ev.paired_ratio_interval(point, base, spec)
    n = len(base)

    def log_ratio(idx):
        bt = sum(base[i][0] for i in idx) / sum(base[i][1] for i in idx)
        st = sum(spec[i][0] for i in idx) / sum(spec[i][1] for i in idx)
        return math.log(st / bt)

    loo = np.array([log_ratio([j for j in range(n) if j != i]) for i in range(n)])
    se = math.sqrt((n - 1) / n * ((loo - loo.mean()) ** 2).sum())
    half = stats.t.ppf(0.975, n - 1) * se
    assert iv.lo == pytest.approx(point * math.exp(-half))
    assert iv.hi == pytest.approx(point * math.exp(half))
    assert (iv.n, iv.unit) == (5, "prompts") and "jackknife over 5 paired prompts" in iv.method
    # a prompt without timestamps is left out; fewer than two pairs give no interval
    assert ev.paired_ratio_interval(point, [*base, (0, 0.0)], [*spec, (64, 1.0)]).n == 5
    assert ev.paired_ratio_interval(point, base[:1], spec[:1]) is None


def test_welch_interval_is_scipys_on_the_log_scale():
    num, den = [0.042, 0.037, 0.044], [0.066, 0.052, 0.063, 0.058]
    a, b = np.log(num), np.log(den)
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    point = math.exp(a.mean() - b.mean())
    iv = ev.welch_ratio_interval(point, num, den)
    assert iv.lo == pytest.approx(math.exp(ci.low)) and iv.hi == pytest.approx(math.exp(ci.high))
    assert ev.welch_ratio_interval(point, num[:1], den) is None


def test_pooled_interval_uses_every_repeated_cell():
    cells = [(20.0, 1.0, 2), (26.0, 1.3, 2), (60.0, 3.0, 2), (9.0, 0.0, 1)]  # the last: 1 seed
    sd, dof = ev.pooled_log_sd(cells)
    assert dof == 3 and sd == pytest.approx(0.05)
    iv = ev.pooled_ratio_interval(1.3, 2, 2, (sd, dof))
    half = stats.t.ppf(0.975, 3) * 0.05
    assert iv.lo == pytest.approx(1.3 * math.exp(-half)) and iv.unit == "seeds"
    assert ev.pooled_log_sd([(9.0, 0.0, 1)]) is None  # one seed everywhere: no interval
    assert ev.pooled_ratio_interval(1.3, 1, 1, None) is None


def test_the_rule_and_how_a_ratio_is_shown():
    iv = ev.Interval(0.78, 0.93, 32, "prompts", "m")
    assert ev.classify(iv) == ev.DOES_NOT_PAY
    assert ev.classify(ev.Interval(1.01, 1.2, 3, "seeds", "m")) == ev.PAYS
    assert ev.classify(ev.Interval(0.9, 1.2, 3, "seeds", "m")) == ev.CANNOT_TELL
    assert ev.classify(None) == ev.CANNOT_TELL
    assert ev.shown(0.851, iv) == "0.85x (0.78-0.93, 32 prompts)"
    assert ev.shown(1.2, None) == "1.20x (no interval: one measurement)"
