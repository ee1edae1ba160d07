"""validate's verdict on whether speculation pays (issues 35 and 43): from evidence, never one
probe point. The end-to-end runs decide with a 95% interval over their paired prompts; the step
model fitted over every measured concurrency decides where it agrees with them; a batch probe is
shown, never counted. The serve line and spec-config follow the verdict.

No engine: the figures are recorded runs (tests/data/validate/, README there): per prompt the
output tokens and seconds of the baseline and speculative engines, the batch probes' rounds and
the fitted step model, as `speckit validate` measured them on the shared 2-core CPU box.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from speckit.core.evidence import Interval, paired_ratio_interval, welch_ratio_interval
from speckit.core.specconfig import MeasuredRatio, serve_line, speculation_verdict
from speckit.validate.verdict import measured_ratios, verdict
from tests.support.bench_stub import DATA

RECORDED = DATA.parent / "validate"
SELF = json.loads((RECORDED / "smollm2_self_k1.json").read_text())  # the issue's case
EAGLE3 = json.loads((RECORDED / "smollm2_eagle3_k3.json").read_text())  # the shipped draft


def _tok_s(part):
    return part["output_tokens"] / part["wall_s"]


def _runs(rec, *, invert: bool = False):
    """SpecRunReport-shaped runs of a recording. ``invert``: baseline and speculative engines
    swapped, the same recorded noise around the reciprocal ratio (a draft that clearly loses)."""
    base = rec["baseline"]
    out = []
    for r in rec["runs"]:
        b, s = (r, base) if invert else (base, r)
        ratio = _tok_s(s) / _tok_s(b)
        out.append(SimpleNamespace(
            run=SimpleNamespace(label=r["label"], role=r["role"], k=r["k"]),
            throughput_ratio=ratio, acceptance_length=r["acceptance_length"],
            acceptance_only=False,
            ratio_interval=paired_ratio_interval(ratio, b["requests"], s["requests"])))
    return out


def _conc(rec, *, invert: bool = False, probes=None, fit: bool = True, serve=None):
    p, f = rec["probes"], rec["probes"]["fit"]
    measured = []
    for m in p["measured"]:
        ratio, num, den = m["ratio"], m["base_rounds"], m["spec_rounds"]
        if invert:
            ratio, num, den = 1 / ratio, den, num
        measured.append(SimpleNamespace(batch=m["batch"], measured_ratio=ratio,
                                        ratio_interval=welch_ratio_interval(ratio, num, den)))
    for batch, (ratio, iv) in (probes or {}).items():
        m = next(x for x in measured if x.batch == batch)
        m.measured_ratio, m.ratio_interval = ratio, iv
    ratio = {int(k): [1 / x if invert else x for x in v] for k, v in f["ratio"].items()}
    return SimpleNamespace(k=p["k"], serve=serve, measured=measured,
                           not_fitted=None if fit else "not fitted here", ratio=ratio,
                           batches=f["batches"], worst_fit_error=f["worst_fit_error"],
                           holdout_error=f["holdout_error"])


def _serve(v, spec=None):
    spec = spec or {"method": "draft_model", "model": "SMOL", "num_speculative_tokens": 1}
    return serve_line(target="SMOL", spec_config=spec, method="draft_model",
                      speculate=v.recommended).command


# ---- the issue's case -----------------------------------------------------------------------

def test_the_issue_case_no_longer_says_pays():
    """SmolLM2 as its own draft at k=1 (issue 43 item 4): a recorded re-run measured 0.75x end to
    end; its 16 prompts on the shared box spread from 0.34x to 3.2x, so the interval spans 1; the
    probe at concurrency 1 said 1.27x and the model fitted to the probes is off by up to 61%."""
    runs, conc = _runs(SELF), _conc(SELF)
    v = verdict(runs, concurrency=1, conc=conc, cpu=True)
    assert v.status == "cannot tell" and v.pays is None and v.recommended is False
    e2e = runs[0]
    assert e2e.throughput_ratio == pytest.approx(0.7545, abs=1e-3)
    assert e2e.ratio_interval.lo < 1 < e2e.ratio_interval.hi
    assert "cannot tell whether speculation pays on this machine" in v.summary
    assert (f"0.75x ({e2e.ratio_interval.lo:.2f}-{e2e.ratio_interval.hi:.2f}, 16 prompts)"
            in v.summary) and "--num-prompts" in v.summary
    probe1 = next(m for m in v.measured if m.source == "batch probe" and m.concurrency == 1)
    assert probe1.ratio > 1 and probe1.decides is False
    line = _serve(v)
    assert line == "vllm serve SMOL" and "--speculative-config" not in line


def test_a_noisy_probe_does_not_flip_the_verdict():
    """The recorded runs with baseline and speculative engines swapped: every ratio clearly
    below 1. A probe at concurrency 2 that reads 1.155x (the issue's), even one whose own rounds
    put it above 1, is shown and never counted."""
    runs = _runs(EAGLE3, invert=True)
    assert all(r.ratio_interval.hi < 1 for r in runs)
    quiet = verdict(runs, concurrency=1, conc=_conc(EAGLE3, invert=True))
    assert quiet.status == "does not pay" and quiet.pays is False
    for noisy in ((1.155, None), (1.155, Interval(1.05, 1.27, 6, "rounds", "recorded")),
                  (3.0, Interval(2.5, 3.6, 6, "rounds", "recorded"))):
        v = verdict(runs, concurrency=1, conc=_conc(EAGLE3, invert=True, probes={2: noisy}))
        assert (v.status, v.pays, v.recommended) == ("does not pay", False, False), v.summary
        probe = next(m for m in v.measured if m.source == "batch probe" and m.concurrency == 2)
        assert probe.ratio == noisy[0] and not probe.decides
        assert "batch probe" not in v.summary
        assert "--speculative-config" not in _serve(v)
    assert "every measured ratio's 95% interval lies below 1" in quiet.summary


def test_recorded_cells_that_clearly_pay_still_pay():
    """The shipped EAGLE-3 draft, k=3: 1.74x end to end with its interval above 1, the fitted
    model agreeing at concurrency 1 and paying at every measured concurrency."""
    runs, conc = _runs(EAGLE3), _conc(EAGLE3)
    v = verdict(runs, concurrency=1, conc=conc, cpu=True)
    assert v.status == "pays" and v.pays is True and v.recommended is True
    assert v.best.source == "run eagle3-k3"  # the end-to-end run is named, not the fit
    iv = runs[0].ratio_interval
    assert iv.lo > 1 and f"1.74x ({iv.lo:.2f}-{iv.hi:.2f}, 16 prompts)" in v.summary
    fitted = [m for m in v.measured if m.source == "fitted step model"]
    assert [m.concurrency for m in fitted] == [1, 2, 4] and all(m.decides for m in fitted)
    assert all(m.k == 3 and m.interval.lo > 1 for m in fitted)
    spec = {"method": "eagle3", "model": "d", "num_speculative_tokens": 3}
    assert "--speculative-config" in _serve(v, spec)
    # without the fit the end-to-end runs alone still decide
    alone = verdict(runs, concurrency=1, conc=_conc(EAGLE3, fit=False))
    assert alone.status == "pays" and [m.source for m in alone.measured if m.decides] == [
        "run eagle3-k3", "run eagle3-schedule"]


def test_a_fit_the_runs_contradict_is_not_counted():
    """The issue's runs (0.75x, interval across 1) with a fit that says 1.9x at concurrency 1:
    the fit misjudges this machine, so it decides nothing."""
    v = verdict(_runs(SELF), concurrency=1, conc=_conc(EAGLE3))
    assert v.status == "cannot tell" and not v.recommended
    assert all(not m.decides for m in v.measured if m.source != "run draft_model-k1")
    assert any("fitted to the batch probes (decode steps only) is not counted" in r
               for r in v.reasons)
    _, left_out = measured_ratios(_runs(SELF), 3, _conc(EAGLE3))  # not probed at 3
    assert "not measured at concurrency 3" in left_out
    # each point says what it is; a fit left out keeps its kind
    kinds = {"run draft_model-k1": "run", "fitted step model": "fit", "batch probe": "probe"}
    assert {(m.source, m.kind) for m in v.measured} == set(kinds.items())


def test_a_fit_that_only_overlaps_the_runs_is_not_agreement():
    """A demo run (8 prompts, eagle3 k=3): 1.31x (0.98-1.75) end to end, the decode-only fit
    2.02x (1.69-2.34) at the same concurrency. The ranges overlap, but the fit sits above the
    whole end-to-end interval: it is not counted, and the runs alone cannot tell."""
    run = SimpleNamespace(run=SimpleNamespace(label="eagle3-k3", role="speculative", k=3),
                          throughput_ratio=1.31, acceptance_length=2.481, acceptance_only=False,
                          ratio_interval=Interval(0.98, 1.75, 8, "prompts", "recorded"))
    conc = _conc(EAGLE3)
    conc.ratio = {3: [2.02, 1.98, 1.92, 1.85]}
    conc.worst_fit_error, conc.holdout_error = 0.081, {"base": 0.02, "spec": -0.012}
    v = verdict([run], concurrency=1, conc=conc)
    assert v.status == "cannot tell" and not v.recommended
    fit1 = next(m for m in v.measured if m.source == "fitted step model" and m.concurrency == 1)
    assert fit1.interval.lo < run.ratio_interval.hi and not fit1.decides
    # the same fit where the run measured 1.9x: each inside the other's interval, so it counts
    run.throughput_ratio, run.ratio_interval = 1.9, Interval(1.5, 2.4, 8, "prompts", "recorded")
    assert verdict([run], concurrency=1, conc=conc).status == "pays"


def test_the_rule_alone():
    def m(r, lo, hi, **kw):
        return MeasuredRatio(r, 1, 1, "run x-k1", 1.9, Interval(lo, hi, 32, "prompts", "t"),
                             kind="run", **kw)

    assert speculation_verdict([m(1.2, 1.05, 1.37)]).status == "pays"
    assert speculation_verdict([m(0.8, 0.7, 0.9)]).status == "does not pay"
    assert speculation_verdict([m(1.1, 0.9, 1.3)]).status == "cannot tell"
    # no interval: one measurement decides nothing
    one = MeasuredRatio(1.5, 1, 1, "run x-k1", 1.9, kind="run")
    assert speculation_verdict([one]).status == "cannot tell"
    assert speculation_verdict([m(0.8, 0.7, 0.9), m(1.2, 1.05, 1.37)]).status == "pays"
    # a point that does not decide is listed, never counted
    v = speculation_verdict([m(0.8, 0.7, 0.9), m(3.0, 2.0, 4.0, decides=False)])
    assert v.status == "does not pay" and len(v.measured) == 2
    assert speculation_verdict([m(3.0, 2.0, 4.0, decides=False)]).status == "not timed"


def test_nothing_timed_is_no_verdict():
    only = [SimpleNamespace(run=SimpleNamespace(label="compare-k1", role="compare", k=1),
                            throughput_ratio=0.1, acceptance_length=1.9, acceptance_only=True,
                            ratio_interval=None)]
    v = verdict(only, concurrency=1)
    assert v.pays is None and v.recommended is True and "not timed" in v.summary
    assert measured_ratios(only, 1) == ([], None)


def test_a_serving_gpu_projection_keeps_the_spec_config():
    runs = _runs(EAGLE3, invert=True)
    serve = {"gpu": "H200", "tp": 1, "schedule": [[1, 64, 3], [65, 256, 0]]}
    v = verdict(runs, concurrency=1, conc=_conc(EAGLE3, invert=True, serve=serve))
    assert v.pays is False and v.recommended is True
    assert "projection for H200 x TP=1 (projected, not measured)" in v.summary
    never = {"gpu": "H200", "tp": 1, "schedule": [[1, 256, 0]]}
    assert verdict(runs, concurrency=1,
                   conc=_conc(EAGLE3, invert=True, serve=never)).recommended is False


def test_serve_line_without_speculation():
    spec = {"method": "dflash", "model": "d", "num_speculative_tokens": 7}
    on = serve_line(target="t", spec_config=spec, method="dflash")
    assert "--speculative-config" in on.command and "--max-num-batched-tokens" in on.command
    off = serve_line(target="t", spec_config=spec, method="dflash", speculate=False)
    assert off.argv == ["vllm", "serve", "t"] and off.spec_config == spec
    assert "serves the target alone" in off.notes[0]


def test_outputs_and_json_carry_the_verdict(tmp_path):
    from rich.console import Console

    from speckit.validate import print_report, write_outputs
    from tests.validate.test_validate import _synthetic_report

    rep = _synthetic_report(tmp_path)  # every timed run at ratio 0.9
    for r in rep.runs:
        r.ratio_interval = Interval(0.85, 0.95, 4, "prompts", "95% t-interval, jackknife")
    rep.verdict = verdict(rep.runs, concurrency=1, cpu=True)
    assert rep.verdict.pays is False and not rep.recommended
    rep.serve_command = serve_line(target="t", spec_config=rep.spec_config, method=rep.method,
                                   speculate=False).command
    (tmp_path / "spec-config.json").write_text("{}")  # a stale one from an earlier run
    write_outputs(rep, tmp_path)
    assert not (tmp_path / "spec-config.json").exists()
    kept = json.loads((tmp_path / "spec-config.not-recommended.json").read_text())
    assert kept == rep.spec_config
    sh = (tmp_path / "serve-command.sh").read_text()
    assert sh.splitlines()[-1] == "vllm serve t" and "does not pay" in sh
    d = json.loads((tmp_path / "report.json").read_text())
    assert d["summary"]["recommended"] is False and d["summary"]["speculation_pays"] is False
    assert d["summary"]["verdict_status"] == "does not pay"
    assert d["summary"]["throughput_ratio_interval"]["hi"] == 0.95
    assert d["verdict"]["pays"] is False and d["verdict"]["best"]["ratio"] == 0.9
    assert "does not pay" in d["summary"]["verdict"]
    md = (tmp_path / "report.md").read_text()
    assert "## Verdict" in md and "**Speculation does not pay here.**" in md
    assert "**not recommended**" in md and "0.90x (0.85-0.95, 4 prompts)" in md
    assert "| 0.900 (0.85-0.95) |" in md
    console = Console(record=True, width=100)
    print_report(rep, console=console)
    text = console.export_text()
    assert "verdict: speculation does not pay" in text and "not recommended" in text
    assert "serve (the target alone, no --speculative-config):" in text
    # cannot tell: the same outputs as does not pay
    for r in rep.runs:
        r.ratio_interval = Interval(0.7, 1.15, 4, "prompts", "95% t-interval, jackknife")
    rep.verdict = verdict(rep.runs, concurrency=1)
    assert rep.verdict.status == "cannot tell" and not rep.recommended
    write_outputs(rep, tmp_path)
    assert "Cannot tell whether speculation pays here" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "spec-config.not-recommended.json").exists()
    # and back: a run that pays writes spec-config.json and removes the stale label
    for r in rep.runs:
        r.throughput_ratio, r.ratio_interval = 1.3, Interval(1.2, 1.4, 4, "prompts", "t")
    rep.verdict = verdict(rep.runs, concurrency=1)
    write_outputs(rep, tmp_path)
    assert (tmp_path / "spec-config.json").exists()
    assert not (tmp_path / "spec-config.not-recommended.json").exists()


# ---- the demo's headline (issue 45) ----------------------------------------------------------

def _report(v, conc, *, compare=None):
    return SimpleNamespace(verdict=v, k=3, sweep=SimpleNamespace(k_measured=3),
                           concurrency=conc, compare=compare)


def test_the_headline_is_an_end_to_end_run_and_every_other_ratio_is_named():
    """The shipped draft's recorded run: the answer is the verdict's, its figure the measured
    end-to-end ratio with its interval; the schedule run, the sweep's predictions, the fitted
    model, the probes and the serving GPU's projection are each said to be what they are."""
    from speckit.core.evidence import shown
    from speckit.validate.headline import headline

    conc = _conc(EAGLE3, serve={"gpu": "MI300X"})
    v = verdict(_runs(EAGLE3), concurrency=1, conc=conc, cpu=True)
    h = headline(_report(v, conc))
    assert h.answer == v.status == "pays" and h.figure == v.best
    assert h.figure.source == "run eagle3-k3" and h.figure.interval is not None
    assert h.text == ("does speculation pay on this machine? pays: "
                      f"{shown(h.figure.ratio, h.figure.interval)} measured end to end at k=3, "
                      "concurrency 1 (run eagle3-k3) - validate's headline ratio")
    others = "\n".join(h.others)
    assert "run eagle3-schedule at k=3" in others and "another end-to-end run" in others
    assert "predicted ratios" in others and "fitted step model by concurrency" in others
    assert "batch probes" in others and "decide nothing" in others
    assert "projected for MI300X" in others and "not measured" in others
    assert shown(h.figure.ratio, h.figure.interval) not in others  # said once, as the answer


def test_a_headline_that_cannot_tell_still_names_the_run_at_the_served_k():
    from speckit.validate.headline import headline

    runs, conc = _runs(SELF), _conc(SELF)
    v = verdict(runs, concurrency=1, conc=conc, cpu=True)
    rep = _report(v, conc, compare=SimpleNamespace(
        other=SimpleNamespace(run=SimpleNamespace(label="compare-k1")), acceptance_only=True))
    rep.k = 1
    h = headline(rep)
    assert h.answer == "cannot tell" and h.figure.source.startswith("run ") and h.figure.k == 1
    assert "compare-k1: the compare draft, acceptance only: no throughput" in h.others
    untimed = headline(SimpleNamespace(verdict=None, k=1, sweep=None, concurrency=None,
                                       compare=None))
    assert untimed.figure is None and untimed.text.endswith("not timed: no run was timed")
