"""validate's concurrency analysis on recorded step times: a fitted report, and a fit that fails
keeping the measured steps (issue 37). No engine runs here; the timings are the quiet-box ones in
benchmarks/results/concurrency_fit_cpu.txt."""

from __future__ import annotations

from types import SimpleNamespace

from speckit.core.plan import fit as F
from speckit.errors import PlanError
from speckit.validate import concurrency as C
from tests.core.test_fit import QUIET, SMOLLM2


def _run(col: int):
    probes = [SimpleNamespace(batch=b, step_s=ms[col] / 1e3, round_step_s=[])
              for b, ms in QUIET.items()]
    return SimpleNamespace(batch_probe=probes, prompt_token_ids=[[0] * 80],
                           job=SimpleNamespace(batch_probe_tokens=32))


def _analyse():
    return C.analyse(_run(0), _run(1), k=3, per_position=[0.7, 0.5, 0.35], method="ngram",
                     target_config=SMOLLM2, draft_config=None, draft_tensors=[])


def test_recorded_steps_fit_a_schedule():
    rep = _analyse()
    assert rep.not_fitted is None and rep.holdout == 4 and rep.ctx == 96
    assert rep.worst_fit_error is not None and rep.schedule
    assert all(m.model_base_s and m.model_spec_s for m in rep.measured)
    assert "NOT fitted" not in "\n".join(C.summary_lines(rep))


def test_a_failed_fit_keeps_the_measured_steps_and_says_why(monkeypatch):
    def refuse(*a, **kw):
        raise PlanError("could not fit the step model to the measured step times: flat",
                        hint="rerun on a quieter machine")

    monkeypatch.setattr(F, "fit_steps", refuse)
    rep = _analyse()
    assert rep.not_fitted.startswith("could not fit") and "quieter" in rep.not_fitted
    assert [m.batch for m in rep.measured] == list(QUIET)
    assert rep.measured[0].base_step_s == QUIET[1][0] / 1e3 and rep.measured[0].measured_ratio
    assert rep.schedule == [] and rep.ratio == {} and rep.break_even is None
    assert C.with_schedule({"method": "ngram"}, C.chosen_schedule(rep), method="ngram",
                           draft_config={}) is None
    text = "\n".join(C.summary_lines(rep))
    assert "NOT fitted" in text and "flat" in text
    md = C.markdown(rep)
    assert "| 16 | 31.2 | 95.0 |" in md and "Fitted throughput ratio" not in md
