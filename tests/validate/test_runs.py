"""validate.runs without an engine: what a compare run that runs out of time leaves behind."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from speckit.errors import EngineTimeout
from speckit.validate import runs


def _ctx(timeout_s: float = 1200.0):
    inp = SimpleNamespace(ccfg={}, cpath="/drafts/fp8", cname="fp8", dname="bf16")
    return SimpleNamespace(inp=inp, opts=SimpleNamespace(timeout_s=timeout_s))


@pytest.fixture
def timed_out(monkeypatch):
    seen: dict = {}

    def spec_run(ctx, base, label, role, path, cfg, k, name, **job):
        seen.update(job, label=label)
        raise EngineTimeout(f"vLLM run {label!r} timed out", hint="-")

    monkeypatch.setattr(runs, "_spec_run", spec_run)
    return seen


def test_acceptance_only_compare_that_times_out_is_a_warning(timed_out):
    warnings: list[str] = []
    got = runs._compare(_ctx(), None, [], 3, True, 90.0, warnings)
    assert got is None
    assert timed_out["time_budget_s"] == 90.0
    assert timed_out["timeout_s"] == 90.0 + runs.COMPARE_GRACE_S  # bounded, not the 1200 s
    assert len(warnings) == 1 and warnings[0].startswith("compare-k3: no acceptance measured")
    assert "--compare-budget" in warnings[0]


def test_acceptance_only_timeout_never_exceeds_the_run_timeout(timed_out):
    runs._compare(_ctx(timeout_s=100.0), None, [], 2, True, 90.0, [])
    assert timed_out["timeout_s"] == 100.0


def test_a_timed_compare_that_times_out_still_fails(timed_out):
    with pytest.raises(EngineTimeout):
        runs._compare(_ctx(), None, [], 3, False, 90.0, [])
    assert "timeout_s" not in timed_out and "time_budget_s" not in timed_out
